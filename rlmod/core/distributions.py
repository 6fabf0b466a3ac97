"""Action distributions that modules parameterize and EnvRunners sample from.

Used by RLModules (`RLModule.action_dist`), the module-to-env connectors and losses.
Written on plain tensor ops: torch.distributions' argument validation costs more than the
forward pass of a small policy.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import gymnasium as gym
import torch


class Distribution:
    """An action distribution over a batch: `[B, ...]` parameters, `[B, ...]` actions.

    RLlib's distribution API (ray 2.60 `ray/rllib/core/distribution/distribution.py`):
    `cls.from_logits(inputs)` builds one from a module's `action_dist_inputs`,
    `to_deterministic()` gives the distribution of its most likely action (argmax, mean),
    `sample()`, `logp(actions)`, `entropy()`, `kl(other)`.

    Example:
        >>> dist = Categorical.from_logits(torch.tensor([[0.0, 3.0]]))
        >>> dist.to_deterministic().sample()
        tensor([1])
    """

    @classmethod
    def from_logits(cls, logits: torch.Tensor, **kwargs: object) -> Distribution:
        """The distribution `logits` (a module's `action_dist_inputs`) parameterize."""
        return cls(logits, **kwargs)  # type: ignore[call-arg]

    def to_deterministic(self) -> Deterministic:
        """The distribution that always gives this one's most likely action."""
        return Deterministic(self.deterministic_sample())

    def sample(self) -> torch.Tensor:
        raise NotImplementedError

    def deterministic_sample(self) -> torch.Tensor:
        raise NotImplementedError

    def logp(self, actions: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def entropy(self) -> torch.Tensor:
        raise NotImplementedError

    def kl(self, other: Distribution) -> torch.Tensor:
        """KL(self || other), per row."""
        raise NotImplementedError


class Deterministic(Distribution):
    """All mass on `loc` (RLlib's TorchDeterministic): `sample()` is `loc`, `logp` 0."""

    def __init__(self, loc: torch.Tensor) -> None:
        self.loc = loc

    def sample(self) -> torch.Tensor:
        return self.loc

    def deterministic_sample(self) -> torch.Tensor:
        return self.loc

    def to_deterministic(self) -> Deterministic:
        return self

    def logp(self, actions: torch.Tensor) -> torch.Tensor:
        return torch.zeros_like(self.loc, dtype=torch.float32)

    def entropy(self) -> torch.Tensor:
        raise RuntimeError("entropy() is not defined for Deterministic (as RLlib's).")

    def kl(self, other: Distribution) -> torch.Tensor:
        raise RuntimeError("kl() is not defined for Deterministic (as RLlib's).")


class Categorical(Distribution):
    """Categorical over `n` actions from logits `[B, n]` (unnormalized).

    Sampling is Gumbel-max: it draws exactly `B * n` uniforms from torch's global
    generator, whatever the batch size, so a seeded run's actions depend only on the
    logits and the seed.
    """

    def __init__(self, logits: torch.Tensor) -> None:
        self.inputs = logits
        self._log_probs: torch.Tensor | None = None

    @property
    def logits(self) -> torch.Tensor:
        """Normalized log-probs (`log_softmax`), computed on first use (sampling does not
        need them)."""
        if self._log_probs is None:
            self._log_probs = torch.log_softmax(self.inputs, dim=-1)
        return self._log_probs

    def sample(self) -> torch.Tensor:
        x = self.inputs
        # Gumbel-max: -log(-log(U)) is Gumbel noise, so argmax(logits + noise) is a sample
        # (argmax is shift-invariant: no normalization needed). U = 0 makes the noise +inf
        # and rules that action out, with probability 2^-24 per entry.
        noise = torch.rand_like(x).log_().neg_().log_()
        return torch.argmax(x - noise, dim=-1)

    def deterministic_sample(self) -> torch.Tensor:
        return torch.argmax(self.inputs, dim=-1)

    def logp(self, actions: torch.Tensor) -> torch.Tensor:
        return self.logits.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)

    def entropy(self) -> torch.Tensor:
        logits = self.logits
        return -(logits.exp() * logits).sum(-1)

    def kl(self, other: Distribution) -> torch.Tensor:
        assert isinstance(other, Categorical)
        logits = self.logits
        return (logits.exp() * (logits - other.logits)).sum(-1)


class MultiCategorical(Distribution):
    """Independent categoricals for a MultiDiscrete space; logits `[B, sum(nvec)]`."""

    def __init__(self, logits: torch.Tensor, nvec: list[int]) -> None:
        self.cats = [Categorical(x) for x in torch.split(logits, nvec, dim=-1)]

    def sample(self) -> torch.Tensor:
        return torch.stack([c.sample() for c in self.cats], dim=-1)

    def deterministic_sample(self) -> torch.Tensor:
        return torch.stack([c.deterministic_sample() for c in self.cats], dim=-1)

    def logp(self, actions: torch.Tensor) -> torch.Tensor:
        return sum(c.logp(actions[..., i]) for i, c in enumerate(self.cats))  # type: ignore[return-value]

    def entropy(self) -> torch.Tensor:
        return sum(c.entropy() for c in self.cats)  # type: ignore[return-value]

    def kl(self, other: Distribution) -> torch.Tensor:
        assert isinstance(other, MultiCategorical)
        return sum(c.kl(o) for c, o in zip(self.cats, other.cats, strict=True))  # type: ignore[return-value]


class DiagGaussian(Distribution):
    """Diagonal Gaussian from `[B, 2 * D]` inputs: means, then log standard deviations."""

    def __init__(self, inputs: torch.Tensor) -> None:
        self.mean, self.log_std = torch.chunk(inputs, 2, dim=-1)
        self.std = self.log_std.exp()

    def sample(self) -> torch.Tensor:
        return self.mean + self.std * torch.randn_like(self.mean)

    def deterministic_sample(self) -> torch.Tensor:
        return self.mean

    def logp(self, actions: torch.Tensor) -> torch.Tensor:
        z = (actions - self.mean) / self.std
        return (-0.5 * z.pow(2) - self.log_std - 0.5 * math.log(2 * math.pi)).sum(-1)

    def entropy(self) -> torch.Tensor:
        return (self.log_std + 0.5 * (1.0 + math.log(2 * math.pi))).sum(-1)

    def kl(self, other: Distribution) -> torch.Tensor:
        assert isinstance(other, DiagGaussian)
        var_ratio = (self.std / other.std).pow(2)
        t1 = ((self.mean - other.mean) / other.std).pow(2)
        return 0.5 * (var_ratio + t1 - 1.0 - var_ratio.log()).sum(-1)


class Bernoulli(Distribution):
    """Independent Bernoullis for a MultiBinary space; logits `[B, n]`, actions `[B, n]`
    of 0/1 (flat over the space's shape)."""

    def __init__(self, logits: torch.Tensor) -> None:
        self.inputs = logits

    def sample(self) -> torch.Tensor:
        return (torch.rand_like(self.inputs) < torch.sigmoid(self.inputs)).to(torch.int8)

    def deterministic_sample(self) -> torch.Tensor:
        return (self.inputs > 0).to(torch.int8)

    def logp(self, actions: torch.Tensor) -> torch.Tensor:
        # log p(a) = -softplus(-x) for a = 1, -softplus(x) for a = 0.
        x = self.inputs
        signed = torch.where(actions.bool(), -x, x)
        return -torch.nn.functional.softplus(signed).sum(-1)

    def entropy(self) -> torch.Tensor:
        x = self.inputs
        p = torch.sigmoid(x)
        return (torch.nn.functional.softplus(x) - p * x).sum(-1)

    def kl(self, other: Distribution) -> torch.Tensor:
        assert isinstance(other, Bernoulli)
        p = torch.sigmoid(self.inputs)
        logp1, logq1 = (
            -torch.nn.functional.softplus(-self.inputs),
            -torch.nn.functional.softplus(-other.inputs),
        )
        logp0, logq0 = (
            -torch.nn.functional.softplus(self.inputs),
            -torch.nn.functional.softplus(other.inputs),
        )
        return (p * (logp1 - logq1) + (1 - p) * (logp0 - logq0)).sum(-1)


class Composite(Distribution):
    """Independent parts for a Tuple or Dict action space (in the space's part order).

    Inputs `[B, sum(dist_inputs_dim(part))]`; actions are the parts' flat actions side by
    side, `[B, sum(action_dim(part))]` float32 (Discrete parts as their index), which
    the module-to-env connector splits back into the env's tuple/dict.
    """

    def __init__(self, inputs: torch.Tensor, parts: list[gym.Space]) -> None:
        self.parts = parts
        widths = [dist_inputs_dim(p) for p in parts]
        self.dists = [
            make_action_dist(p, x)
            for p, x in zip(parts, torch.split(inputs, widths, dim=-1), strict=True)
        ]
        self.action_widths = [action_dim(p) for p in parts]

    def _join(self, actions: list[torch.Tensor]) -> torch.Tensor:
        return torch.cat([a.reshape(a.shape[0], -1).to(torch.float32) for a in actions], -1)

    def _split(self, actions: torch.Tensor) -> list[torch.Tensor]:
        pieces = torch.split(actions, self.action_widths, dim=-1)
        return [
            a.squeeze(-1) if isinstance(p, gym.spaces.Discrete) else a
            for p, a in zip(self.parts, pieces, strict=True)
        ]

    def sample(self) -> torch.Tensor:
        return self._join([d.sample() for d in self.dists])

    def deterministic_sample(self) -> torch.Tensor:
        return self._join([d.deterministic_sample() for d in self.dists])

    def logp(self, actions: torch.Tensor) -> torch.Tensor:
        return sum(d.logp(a) for d, a in zip(self.dists, self._split(actions), strict=True))  # type: ignore[return-value]

    def entropy(self) -> torch.Tensor:
        return sum(d.entropy() for d in self.dists)  # type: ignore[return-value]

    def kl(self, other: Distribution) -> torch.Tensor:
        assert isinstance(other, Composite)
        return sum(d.kl(o) for d, o in zip(self.dists, other.dists, strict=True))  # type: ignore[return-value]


def _parts(space: gym.Space) -> list[gym.Space]:
    if isinstance(space, gym.spaces.Dict):
        return list(space.spaces.values())
    assert isinstance(space, gym.spaces.Tuple)
    return list(space.spaces)


_SUPPORTED = "Discrete, MultiDiscrete, Box, MultiBinary, or a Tuple/Dict of these"


def action_dim(action_space: gym.Space) -> int:
    """Width of one flat action of `action_space` in the batch's `actions` column."""
    if isinstance(action_space, gym.spaces.Discrete):
        return 1
    if isinstance(action_space, gym.spaces.MultiDiscrete):
        return int(action_space.nvec.size)
    if isinstance(action_space, gym.spaces.Box | gym.spaces.MultiBinary):
        return int(math.prod(action_space.shape))
    if isinstance(action_space, gym.spaces.Tuple | gym.spaces.Dict):
        return sum(action_dim(p) for p in _parts(action_space))
    raise TypeError(f"Action space {action_space} is not supported; use {_SUPPORTED}.")


class TanhGaussian(Distribution):
    """`a = tanh(u)`, `u ~ N(mean, std)`: a Gaussian squashed into (-1, 1) (SAC's policy).

    Inputs `[B, 2 * D]`: means, then log standard deviations (clamped to [-20, 2], as in
    SAC implementations). The log-density carries the change of variables (Haarnoja et
    al. 2018, appendix C, eq. 21): `log pi(a) = log N(u) - sum log(1 - tanh(u)^2)`, with
    `log(1 - tanh(u)^2) = 2 * (log 2 - u - softplus(-2u))`, exact and stable for large |u|.
    """

    def __init__(self, inputs: torch.Tensor) -> None:
        mean, log_std = torch.chunk(inputs, 2, dim=-1)
        self.gaussian = DiagGaussian(torch.cat([mean, log_std.clamp(-20.0, 2.0)], dim=-1))

    @staticmethod
    def _log_det_jacobian(u: torch.Tensor) -> torch.Tensor:
        return (2.0 * (math.log(2.0) - u - torch.nn.functional.softplus(-2.0 * u))).sum(-1)

    def sample(self) -> torch.Tensor:
        return torch.tanh(self.gaussian.sample())

    def rsample_with_logp(self) -> tuple[torch.Tensor, torch.Tensor]:
        """A reparameterized sample (gradients flow to the inputs) and its log-density."""
        u = self.gaussian.sample()  # mean + std * noise: differentiable in mean and std
        return torch.tanh(u), self.gaussian.logp(u) - self._log_det_jacobian(u)

    def deterministic_sample(self) -> torch.Tensor:
        return torch.tanh(self.gaussian.mean)

    def logp(self, actions: torch.Tensor) -> torch.Tensor:
        # atanh of actions on the boundary (float32 rounding) would be infinite: clamp.
        bound = 1.0 - torch.finfo(actions.dtype).eps
        u = torch.atanh(actions.clamp(-bound, bound))
        return self.gaussian.logp(u) - self._log_det_jacobian(u)

    def entropy(self) -> torch.Tensor:
        """A one-sample estimate, -log pi(a) at a ~ pi (no closed form exists)."""
        return -self.rsample_with_logp()[1]


def dist_inputs_dim(action_space: gym.Space) -> int:
    """Width of the action-distribution inputs a module must output for `action_space`."""
    if isinstance(action_space, gym.spaces.Discrete):
        return int(action_space.n)
    if isinstance(action_space, gym.spaces.MultiDiscrete):
        return int(action_space.nvec.sum())
    if isinstance(action_space, gym.spaces.Box):
        return 2 * int(math.prod(action_space.shape))
    if isinstance(action_space, gym.spaces.MultiBinary):
        return int(math.prod(action_space.shape))
    if isinstance(action_space, gym.spaces.Tuple | gym.spaces.Dict):
        return sum(dist_inputs_dim(p) for p in _parts(action_space))
    raise TypeError(f"Action space {action_space} is not supported; use {_SUPPORTED}.")


def action_dist_cls(action_space: gym.Space) -> type[Distribution]:
    """The distribution class for `action_space` whose `from_logits(inputs)` builds what
    `make_action_dist(action_space, inputs)` does (classes that need the space's shape,
    MultiCategorical and Composite, come bound to it)."""
    if isinstance(action_space, gym.spaces.Discrete):
        return Categorical
    if isinstance(action_space, gym.spaces.Box):
        return DiagGaussian
    if isinstance(action_space, gym.spaces.MultiBinary):
        return Bernoulli
    return bound_dist_cls(lambda inputs: make_action_dist(action_space, inputs))


def bound_dist_cls(build: Callable[[torch.Tensor], Distribution]) -> type[Distribution]:
    """A Distribution class whose `from_logits(inputs)` is `build(inputs)`: what a module
    hands out as `get_*_action_dist_cls()` where its distribution needs more than the
    inputs (the action space's parts, or the module's own `action_dist`)."""

    class BoundDistribution(Distribution):
        @classmethod
        def from_logits(cls, logits: torch.Tensor, **kwargs: object) -> Distribution:
            return build(logits)

    return BoundDistribution


def make_action_dist(action_space: gym.Space, inputs: torch.Tensor) -> Distribution:
    """The distribution over `action_space` parameterized by `inputs`."""
    if isinstance(action_space, gym.spaces.Discrete):
        return Categorical(inputs)
    if isinstance(action_space, gym.spaces.MultiDiscrete):
        return MultiCategorical(inputs, [int(n) for n in action_space.nvec.reshape(-1)])
    if isinstance(action_space, gym.spaces.Box):
        return DiagGaussian(inputs)
    if isinstance(action_space, gym.spaces.MultiBinary):
        return Bernoulli(inputs)
    if isinstance(action_space, gym.spaces.Tuple | gym.spaces.Dict):
        return Composite(inputs, _parts(action_space))
    raise TypeError(f"Action space {action_space} is not supported; use {_SUPPORTED}.")


__all__ = [
    "Bernoulli",
    "Categorical",
    "Composite",
    "Deterministic",
    "DiagGaussian",
    "Distribution",
    "MultiCategorical",
    "TanhGaussian",
    "action_dim",
    "action_dist_cls",
    "bound_dist_cls",
    "dist_inputs_dim",
    "make_action_dist",
]

"""RLModule and RLModuleSpec: a neural network of the RL loop, and the recipe to build it.

Specs come from `AlgorithmConfig.get_rl_module_spec`; EnvRunners build them with
`inference_only=True`, Learners with `inference_only=False`; learner-only specs are built on
Learners alone.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, cast

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from rlmod.core.distributions import (
    Distribution,
    action_dist_cls,
    bound_dist_cls,
    make_action_dist,
)
from rlmod.core.types import Array, Components, ModelConfig, TensorDict
from rlmod.errors import CheckpointError
from rlmod.utils.checkpoints import Checkpointable, StateDict, read_metadata
from rlmod.utils.naming import import_path
from rlmod.utils.spaces import space_from_dict, space_to_dict
from rlmod.utils.state_files import read_state, write_tensors

if TYPE_CHECKING:
    from pathlib import Path

    from rlmod.core.multi_rl_module import MultiRLModule, MultiRLModuleSpec


class RLModule(nn.Module, Checkpointable):
    """A policy (or any model) that maps a batch of columns to a dict of outputs.

    Subclasses build their layers in `setup()` from the spaces and `model_config`, and
    implement `_forward`, which the three public forwards fall back to. Submodules named in
    `training_only_submodules` are not built when `inference_only` is True, and are left out
    of `get_state(inference_only=True)`.

    Example:
        >>> import gymnasium as gym, torch
        >>> from rlmod.core import RLModule, RLModuleSpec
        >>> class Linear(RLModule):
        ...     def setup(self):
        ...         self.pi = torch.nn.Linear(4, 2)
        ...     def _forward(self, batch):
        ...         return {"action_dist_inputs": self.pi(batch["obs"])}
        >>> spec = RLModuleSpec(module_class=Linear,
        ...     observation_space=gym.spaces.Box(-1, 1, (4,)), action_space=gym.spaces.Discrete(2))
        >>> spec.build().forward_inference({"obs": torch.zeros(3, 4)})["action_dist_inputs"].shape
        torch.Size([3, 2])
    """

    training_only_submodules: tuple[str, ...] = ()
    supports_stacking: bool = False
    """Whether modules of this very class (a subclass must say so again) that share spaces
    and model config may run as one stacked module (rlmod.core.stacked): the class's
    parameter shapes follow from spaces and model config alone, and its forwards and
    `compute_values` are pure functions of parameters and inputs (no randomness, no
    data-dependent Python branching, no in-place state), so `torch.func.vmap` runs them."""
    supports_deferred_init: bool = False
    """Whether an EnvRunner that gets this very class's weights from a Learner (a
    subclass must say so again) may build it without running its initialisers
    (rlmod.core.deferred_init): its `setup()` creates only submodules, parameters and
    persistent buffers, so `set_state()` restores all a normal build would have set."""
    _auto_forwards: frozenset[str] = frozenset()
    framework: str = "torch"
    """RLlib's class attribute; rlmod modules are always PyTorch modules."""

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        _bind_acting_forwards(cls)

    def __init__(
        self,
        *,
        observation_space: gym.Space,
        action_space: gym.Space,
        inference_only: bool = False,
        learner_only: bool = False,
        model_config: ModelConfig | None = None,
    ) -> None:
        super().__init__()
        self.observation_space = observation_space
        self.action_space = action_space
        self.inference_only = inference_only
        self.learner_only = learner_only
        # As RLlib: the dict the spec was built with ({} for None); a model-config
        # dataclass passed to the constructor directly is kept as it is.
        # Any: the user's settings, read by each subclass as it chooses (RLlib's dict).
        self.model_config: dict[str, Any] | Any = (  # type: ignore[explicit-any]
            model_config if dataclasses.is_dataclass(model_config) else dict(model_config or {})
        )
        self.setup()

    def setup(self) -> None:
        """Builds the layers. Skip `training_only_submodules` when `self.inference_only`."""

    # The forwards follow RLlib's contract: `forward_X` calls `_forward_X` if the class
    # defines it, else the generic `_forward`. For the two acting forwards (the EnvRunner
    # hot path) that choice is made once per class in `_bind_acting_forwards`, so a call
    # costs no extra Python frame.
    def _forward(self, batch: TensorDict, **kwargs: object) -> TensorDict:
        """The generic forward pass that the three public forwards fall back to."""
        raise NotImplementedError(
            f"{type(self).__name__} must implement _forward() (or _forward_inference, "
            "_forward_exploration and _forward_train)."
        )

    def _forward_inference(self, batch: TensorDict, **kwargs: object) -> TensorDict:
        """Override for acting without exploration only where it differs from `_forward`."""
        return self._forward(batch, **kwargs)

    def _forward_exploration(self, batch: TensorDict, **kwargs: object) -> TensorDict:
        """Override for exploratory acting only where it differs from `_forward`."""
        return self._forward(batch, **kwargs)

    def _forward_train(self, batch: TensorDict, **kwargs: object) -> TensorDict:
        """Override for what the loss needs (e.g. `Columns.EMBEDDINGS`)."""
        return self._forward(batch, **kwargs)

    def forward_inference(self, batch: TensorDict, **kwargs: object) -> TensorDict:
        """Outputs for acting greedily (evaluation, production)."""
        return self._forward_inference(batch, **kwargs)

    def forward_exploration(self, batch: TensorDict, **kwargs: object) -> TensorDict:
        """Outputs for acting while collecting training data."""
        return self._forward_exploration(batch, **kwargs)

    def forward_train(self, batch: TensorDict, **kwargs: object) -> TensorDict:
        """Outputs the loss needs (on Learners only); RLlib's RuntimeError on an
        inference-only module."""
        if self.inference_only:
            raise RuntimeError(
                f"forward_train() called on an inference-only {type(self).__name__}; build "
                "it with RLModuleSpec(inference_only=False) (Learners do) to train it."
            )
        return self._forward_train(batch, **kwargs)

    def get_initial_state(self) -> TensorDict:
        """The recurrent state a new episode starts from, one entry per tensor without a
        batch axis (RLlib's); `{}` for a module without memory."""
        return {}

    def is_stateful(self) -> bool:
        """Whether the module carries state between steps (RLlib's): its forwards then take
        `Columns.STATE_IN` and return `Columns.STATE_OUT`."""
        return bool(self.get_initial_state())

    def as_multi_rl_module(self) -> MultiRLModule:
        """A MultiRLModule holding this module under `default_policy` (RLlib's name).

        Deliberate difference: RLlib builds a new module from this one's spec (fresh
        weights); rlmod's MultiRLModule holds this very module, weights included.
        """
        from rlmod.core.columns import DEFAULT_MODULE_ID
        from rlmod.core.multi_rl_module import MultiRLModule

        return MultiRLModule({DEFAULT_MODULE_ID: self})

    def unwrapped(self) -> RLModule:
        """This module (RLlib's name; rlmod never wraps modules)."""
        return self

    def action_dist(self, dist_inputs: torch.Tensor) -> Distribution:
        """The action distribution that `dist_inputs` (from a forward pass) parameterize:
        for the action space, or, where a subclass overrides RLlib's
        `get_train_action_dist_cls()`, that class's `from_logits` (so a custom
        distribution written as in RLlib's docs is what EnvRunners sample and losses use)."""
        if type(self).get_train_action_dist_cls is not RLModule.get_train_action_dist_cls:
            return self.get_train_action_dist_cls().from_logits(dist_inputs)
        return make_action_dist(self.action_space, dist_inputs)

    # RLlib's names (ray 2.60 `RLModule.get_*_action_dist_cls`): the class whose
    # `from_logits(action_dist_inputs)` builds this module's distribution, e.g.
    # `module.get_inference_action_dist_cls().from_logits(out["action_dist_inputs"])
    # .to_deterministic().sample()` for greedy actions.
    def get_train_action_dist_cls(self) -> type[Distribution]:
        """The distribution class losses use."""
        if type(self).action_dist is not RLModule.action_dist:
            return bound_dist_cls(self.action_dist)  # a subclass's own action_dist
        return action_dist_cls(self.action_space)

    def get_exploration_action_dist_cls(self) -> type[Distribution]:
        """The distribution class EnvRunners sample from while exploring."""
        return self.get_train_action_dist_cls()

    def get_inference_action_dist_cls(self) -> type[Distribution]:
        """The distribution class for acting without exploration."""
        return self.get_train_action_dist_cls()

    def get_state(
        self,
        components: Components = None,
        *,
        not_components: Components = None,
        inference_only: bool = False,
        **kwargs: object,
    ) -> TensorDict:
        """The module's tensors by name; only what an inference-only twin holds if asked.

        (`components` / `not_components` are accepted for RLlib's signature; a module has
        no sub-components.)
        """
        state = self.state_dict()
        if inference_only and self.training_only_submodules:
            prefixes = self.training_only_prefixes()
            state = {k: v for k, v in state.items() if not k.startswith(prefixes)}
        return dict(state)

    def training_only_prefixes(self) -> tuple[str, ...]:
        """State-dict key prefixes of the parts an inference-only twin does not build."""
        return tuple(f"{name}." for name in self.training_only_submodules)

    def get_metadata(self) -> dict[str, object]:
        return {"module_spec": RLModuleSpec.from_module(self).to_dict(allow_unnamed=True)}

    def _write_own_state(self, directory: Path, state: StateDict) -> None:
        """Weights alone as `state.safetensors` (no `state.json`) when the state is only
        tensors, as `get_state` returns it: one file fewer per module in a checkpoint."""
        if all(isinstance(v, torch.Tensor) for v in state.values()):
            write_tensors(directory, state)
        else:
            super()._write_own_state(directory, state)

    @classmethod
    def from_checkpoint(
        cls,
        path: str | os.PathLike[str],
        *,
        inference_only: bool | None = None,
        module_id: str | None = None,
        module_class: type[RLModule] | None = None,
        trusted_modules: Iterable[str] = (),
    ) -> RLModule:
        """Builds a module from a checkpoint and loads its weights (RLlib's name).

        Args:
            path: A module's checkpoint directory; or a multi-module one
                (`.../learner_group/learner/rl_module`, optionally with `/<module_id>`
                appended as in RLlib); or an Algorithm checkpoint's root.
            inference_only: Build the small module EnvRunners use (no value head, no
                target networks) and read only its weights. None keeps the saved flag.
            module_id: Which module of a multi-module checkpoint (default: the path's last
                part if it names one, else `default_policy`, else the only acting one).
            module_class: The class to build, instead of the stored import path (needed if
                it was a local class when saved).
            trusted_modules: Packages besides rlmod whose classes the stored spec may name.

        Example (production inference: no env, no config, no Ray):
            >>> from rlmod.algorithms.ppo import PPOConfig
            >>> import tempfile, torch
            >>> algo = PPOConfig().environment("CartPole-v1").build_algo()
            >>> ckpt = algo.save_to_path(tempfile.mkdtemp())
            >>> module = RLModule.from_checkpoint(ckpt, inference_only=True)
            >>> module.forward_inference({"obs": torch.zeros(1, 4)})["action_dist_inputs"].shape
            torch.Size([1, 2])
        """
        from rlmod.core.multi_rl_module import locate_module_checkpoint

        directory, mid = locate_module_checkpoint(os.fspath(path), module_id)
        meta = read_metadata(directory)
        stored = meta["module_specs"].get(mid) if mid is not None else meta.get("module_spec")
        spec = spec_from_metadata(
            stored,
            file=directory / "metadata.json",
            module_id=mid,
            inference_only=inference_only,
            module_class=module_class,
            trusted_modules=trusted_modules,
        )
        module = spec.build()
        if not isinstance(module, cls):
            raise CheckpointError(
                f"{directory} holds a {type(module).__name__}, not a {cls.__name__}."
            )
        skip = module.training_only_prefixes() if module.inference_only else ()
        if mid is None:  # a single module's own checkpoint: small, read whole
            state = {
                k: v for k, v in read_state(directory).items() if not (skip and k.startswith(skip))
            }
        else:
            state = read_state(directory, select=[mid], skip_prefixes=skip)[mid]
        module.load_checkpoint_state(state, directory)
        return module

    def load_checkpoint_state(
        self, state: Mapping[str, torch.Tensor | Array], directory: str | os.PathLike[str]
    ) -> None:
        """`set_state`, with a mismatch reported as a CheckpointError naming `directory`."""
        try:
            self.set_state(state)
        except ValueError as e:
            raise CheckpointError(f"{directory}: {e}") from e

    def set_state(self, state: Mapping[str, torch.Tensor | Array]) -> None:
        """Loads tensors by name. Extra training-only tensors are ignored by an
        inference-only module; any other missing or unexpected name, a shape that differs
        or a NaN/inf weight is a ValueError, raised before any tensor is changed."""
        own = self.state_dict()
        if self.inference_only and self.training_only_submodules:
            prefixes = self.training_only_prefixes()
            state = {k: v for k, v in state.items() if not k.startswith(prefixes)}
        missing = own.keys() - state.keys()
        unexpected = state.keys() - own.keys()
        if missing or unexpected:
            from rlmod.core.encoders import old_cnn_weights_hint

            raise ValueError(
                f"State does not fit {type(self).__name__}: missing {sorted(missing)[:5]}, "
                f"unexpected {sorted(unexpected)[:5]}. Was it saved from a module built with "
                f"other spaces or model_config?{old_cnn_weights_hint(unexpected)}"
            )
        params = dict(self.named_parameters())
        for name, tensor in own.items():
            if tuple(np.shape(state[name])) != tuple(tensor.shape):
                raise ValueError(
                    f"State does not fit {type(self).__name__}: {name!r} has shape "
                    f"{tuple(np.shape(state[name]))}, the module's is {tuple(tensor.shape)}. Was "
                    "it saved from a module built with other spaces or model_config?"
                )
            if name in params:
                _check_weight(type(self).__name__, name, state[name], tensor)
        with torch.no_grad():
            for name, tensor in own.items():
                value = state[name]
                if isinstance(value, np.ndarray) and not value.flags.writeable:
                    value = value.copy()  # read-only (Ray's object store): torch would warn
                tensor.copy_(torch.as_tensor(value))

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())


def _check_weight(module: str, name: str, stored: torch.Tensor | Array, own: torch.Tensor) -> None:
    """ValueError if a stored weight is not a float for a float parameter, or not finite:
    a module with such weights acts on garbage."""
    array = stored.numpy(force=True) if isinstance(stored, torch.Tensor) else np.asarray(stored)
    if own.is_floating_point() and not np.issubdtype(array.dtype, np.floating):
        raise ValueError(
            f"State of {module}: weight {name!r} is stored as {array.dtype}, the module's is "
            f"{own.dtype}; the checkpoint is corrupt or was edited."
        )
    if not np.isfinite(array).all():
        raise ValueError(
            f"State of {module}: weight {name!r} holds NaN or inf; a module with them acts on "
            "garbage, so it is refused (the weights were corrupted, or saved after a "
            "diverged update)."
        )


@dataclasses.dataclass
class RLModuleSpec:
    """How to build one RLModule: class, spaces, flags and model config.

    Attributes:
        module_class: The RLModule subclass. None means "the algorithm's default".
        observation_space: What the module sees (after the env-to-module connectors).
        action_space: The module's action space.
        inference_only: Set by the library: build only what acting needs (EnvRunners).
        learner_only: Set by users: build this module on Learners only, never on
            EnvRunners (for example a curiosity model that only yields a training signal).
        model_config: Settings of the module's layers (a dict or a DefaultModelConfig).
    """

    module_class: type[RLModule] | None = None
    observation_space: gym.Space | None = None
    action_space: gym.Space | None = None
    inference_only: bool = False
    learner_only: bool = False
    model_config: ModelConfig | None = None

    def __post_init__(self) -> None:
        if self.inference_only and self.learner_only:
            raise ValueError(
                "RLModuleSpec got inference_only=True and learner_only=True; a learner-only "
                "module is never built on EnvRunners, so it never needs an inference-only "
                "version. Set at most one of the two."
            )
        if self.module_class is not None and not (
            isinstance(self.module_class, type) and issubclass(self.module_class, RLModule)
        ):
            raise TypeError(
                f"RLModuleSpec(module_class={self.module_class!r}) must be a subclass of "
                "rlmod.core.RLModule."
            )

    @property
    def model_config_dict(self) -> None:
        """RLlib's deprecated field (RLlib's `RLModuleSpec` refuses it when given and holds
        None); always None here too. Use `model_config`."""
        return None

    def build(self) -> RLModule:
        """Instantiates the module; all of class and spaces must be known by now."""
        for name in ("module_class", "observation_space", "action_space"):
            if getattr(self, name) is None:
                raise ValueError(
                    f"RLModuleSpec.build() needs {name}, which is None. Get complete specs "
                    "from config.get_rl_module_spec(env=... or spaces=...), or set it on the spec."
                )
        assert self.module_class is not None
        assert self.observation_space is not None and self.action_space is not None
        model_config: ModelConfig | None = self.model_config
        if dataclasses.is_dataclass(model_config) and not isinstance(model_config, type):
            model_config = dataclasses.asdict(model_config)
        return self.module_class(
            observation_space=self.observation_space,
            action_space=self.action_space,
            inference_only=self.inference_only,
            learner_only=self.learner_only,
            model_config=model_config,
        )

    def update(self, other: RLModuleSpec, override: bool = True) -> None:
        """Updates this spec in place from `other`, as RLlib's `RLModuleSpec.update`.

        With `override`, every field `other` sets (not None) replaces this one's, the
        `model_config` whole (not merged); `inference_only` becomes `other's or self's`,
        `learner_only` `other's and self's`. Without `override`, only fields that are None
        here are filled from `other`, and the two flags stay.
        """
        if not isinstance(other, RLModuleSpec):
            raise ValueError(  # RLlib's error type
                f"RLModuleSpec.update() takes another RLModuleSpec, got {type(other).__name__}."
            )
        if override:
            self.module_class = other.module_class or self.module_class
            self.observation_space = other.observation_space or self.observation_space
            self.action_space = other.action_space or self.action_space
            self.inference_only = other.inference_only or self.inference_only
            self.learner_only = other.learner_only and self.learner_only
            self.model_config = other.model_config or self.model_config
        else:
            self.module_class = self.module_class or other.module_class
            self.observation_space = self.observation_space or other.observation_space
            self.action_space = self.action_space or other.action_space
            self.model_config = self.model_config or other.model_config

    def _merged_with(self, other: RLModuleSpec) -> RLModuleSpec:
        """A copy of self with every field that `other` sets (not None) taken from `other`;
        the two flags always from `other`, model configs merged (`other` wins).

        How AlgorithmConfig layers a user's spec over the algorithm's default (not RLlib's
        `update`, which works in place and replaces the model config).
        """
        merged = dict(_as_dict(self.model_config))
        merged.update(_as_dict(other.model_config))
        return RLModuleSpec(
            module_class=other.module_class or self.module_class,
            observation_space=other.observation_space or self.observation_space,
            action_space=other.action_space or self.action_space,
            inference_only=other.inference_only,
            learner_only=other.learner_only,
            model_config=merged or None,
        )

    def as_multi_rl_module_spec(self) -> MultiRLModuleSpec:
        """A MultiRLModuleSpec with this spec under `default_policy` (RLlib's name)."""
        from rlmod.core.columns import DEFAULT_MODULE_ID
        from rlmod.core.multi_rl_module import MultiRLModuleSpec

        return MultiRLModuleSpec(rl_module_specs={DEFAULT_MODULE_ID: self})

    @classmethod
    def from_module(cls, module: RLModule) -> RLModuleSpec:
        """The spec that builds a module like `module` (RLlib's name)."""
        return cls(
            module_class=type(module),
            observation_space=module.observation_space,
            action_space=module.action_space,
            inference_only=module.inference_only,
            learner_only=module.learner_only,
            model_config=_as_dict(module.model_config),
        )

    def to_dict(self, *, allow_unnamed: bool = False) -> dict[str, object]:
        """A JSON-able form (spaces included); the class is stored as an import path.

        A class with no import path (defined inside a function) raises, unless
        `allow_unnamed` (checkpoints), where it is stored as "must be passed at load".
        """
        module_class: str | dict[str, str] | None = None
        if self.module_class is not None:
            try:
                module_class = import_path(self.module_class, setting="RLModuleSpec.module_class")
            except ValueError:
                if not allow_unnamed:
                    raise
                module_class = {"__must_pass__": repr(self.module_class)}
        return {
            "module_class": module_class,
            "observation_space": space_to_dict(self.observation_space),
            "action_space": space_to_dict(self.action_space),
            "inference_only": self.inference_only,
            "learner_only": self.learner_only,
            "model_config": _as_dict(self.model_config) or None,
        }

    @classmethod
    def from_dict(
        cls, data: Mapping[str, object], *, trusted_modules: Iterable[str] = ()
    ) -> RLModuleSpec:
        """Inverse of `to_dict`. The module class resolves only inside rlmod or the
        `trusted_modules` packages, and must be an RLModule subclass (rlmod.utils.trust)."""
        from rlmod.utils.trust import resolve_import_path

        module_class = data.get("module_class")
        if isinstance(module_class, dict):
            raise ValueError(
                f"module_class was {module_class.get('__must_pass__')} when saved, which has "
                "no import path (defined inside a function); pass it again, e.g. "
                "RLModule.from_checkpoint(path, module_class=MyModule)."
            )
        return cls(
            module_class=None
            if module_class is None
            else resolve_import_path(
                module_class,
                setting="RLModuleSpec.module_class",
                kind="rl_module",
                trusted_modules=trusted_modules,
            ),
            observation_space=space_from_dict(
                cast("dict[str, object] | None", data.get("observation_space"))
            ),
            action_space=space_from_dict(
                cast("dict[str, object] | None", data.get("action_space"))
            ),
            inference_only=bool(data.get("inference_only", False)),
            learner_only=bool(data.get("learner_only", False)),
            model_config=cast("ModelConfig | None", data.get("model_config")),
        )


def spec_from_metadata(
    stored: object,
    *,
    file: str | os.PathLike[str],
    module_id: str | None,
    inference_only: bool | None = None,
    module_class: type[RLModule] | None = None,
    trusted_modules: Iterable[str] = (),
) -> RLModuleSpec:
    """The spec of a module as a checkpoint's metadata stores it (rlmod.utils.trust rules
    for its class), with the inference-only flag and class replaced where given."""
    if not isinstance(stored, dict):
        raise CheckpointError(f"{file}: no module spec for module {module_id!r}.")
    data = dict(stored)
    if module_class is not None:
        data["module_class"] = None
    try:
        spec = RLModuleSpec.from_dict(data, trusted_modules=trusted_modules)
    except (ValueError, TypeError) as e:
        raise CheckpointError(f"{file}: module spec of {module_id or 'the module'}: {e}") from e
    if module_class is not None:
        spec.module_class = module_class
    if inference_only is not None:
        spec.inference_only = inference_only
        spec.learner_only = spec.learner_only and not inference_only
    return spec


def _bind_acting_forwards(cls: type[RLModule]) -> None:
    """Points `cls.forward_inference` / `forward_exploration` straight at the method that
    does the work: the class's `_forward_inference` / `_forward_exploration` if it (or a
    base) overrides it, else its `_forward` (RLlib's dispatch, decided once per class).

    A public forward that a class writes itself is left alone, as is every subclass's.
    """
    auto: set[str] = set()
    for public, private in (
        ("forward_inference", "_forward_inference"),
        ("forward_exploration", "_forward_exploration"),
    ):
        owner = next(k for k in cls.__mro__ if public in k.__dict__)
        if owner is not RLModule and public not in owner.__dict__.get("_auto_forwards", ()):
            continue  # written by hand in `owner`
        impl = getattr(cls, private)
        if impl is getattr(RLModule, private):  # not overridden: `_forward` without grad
            impl = _forward_without_grad
        setattr(cls, public, impl)
        auto.add(public)
    cls._auto_forwards = frozenset(auto)


def _forward_without_grad(self: RLModule, batch: TensorDict, **kwargs: object) -> TensorDict:
    """`_forward` as the acting forwards of a module that defines only `_forward`: without
    gradients, as RLlib's `TorchRLModule._forward_inference/_exploration` (so
    `forward_inference(...)["action_dist_inputs"].numpy()` works as in RLlib's docs).
    EnvRunners already act under `torch.inference_mode()`: there no context is added."""
    if torch.is_grad_enabled():
        with torch.no_grad():
            return self._forward(batch, **kwargs)
    return self._forward(batch, **kwargs)


def acting_forward(module: RLModule, explore: bool) -> Callable[[TensorDict], TensorDict]:
    """The bound method an EnvRunner calls per step (under `torch.inference_mode()`):
    `forward_exploration` / `forward_inference`, or straight `_forward` where those only
    add RLlib's no-grad context around it, so the hot loop pays no extra frame."""
    public = module.forward_exploration if explore else module.forward_inference
    if getattr(public, "__func__", None) is _forward_without_grad:
        return module._forward
    return public


TorchRLModule = RLModule
"""RLlib's base class of PyTorch modules; rlmod's RLModule is one (rlmod is PyTorch only)."""


def _as_dict(model_config: ModelConfig | None) -> dict[str, object]:
    if model_config is None:
        return {}
    if dataclasses.is_dataclass(model_config) and not isinstance(model_config, type):
        return {
            k: list(v) if isinstance(v, tuple) else v
            for k, v in dataclasses.asdict(model_config).items()
        }
    return dict(cast("Mapping[str, object]", model_config))

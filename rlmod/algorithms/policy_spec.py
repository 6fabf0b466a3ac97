"""PolicySpec: RLlib's per-policy entry of `multi_agent(policies={...})`
(`ray.rllib.policy.policy.PolicySpec`), and the 4-tuple form it stands for.

rlmod has no Policy classes (RLlib's old stack), so an entry becomes a module: its spaces
become the module's RLModuleSpec spaces, and its `config` (a dict of settings, e.g.
`AlgorithmConfig.overrides(lr=1e-3)`, or an AlgorithmConfig) becomes that module's
`algorithm_config_overrides_per_module` entry, which rlmod's Learners read (RLlib's new
stack ignores it). A `policy_class` other than None is refused.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import gymnasium as gym

__all__ = ["PolicySpec", "policy_entry"]


@dataclasses.dataclass
class PolicySpec:
    """One policy (module) of `multi_agent(policies={id: PolicySpec(...)})`; fields and
    order as RLlib's. None means "the algorithm's default" (spaces: from the env).

    Example:
        >>> from rlmod.algorithms.ppo import PPOConfig
        >>> config = PPOConfig().multi_agent(
        ...     policies={"p0": PolicySpec(config={"lr": 1e-3}), "p1": (None, None, None, None)},
        ...     policy_mapping_fn=lambda aid, *a, **kw: f"p{aid}")
        >>> config.get_config_for_module("p0").lr, config.get_config_for_module("p1").lr
        (0.001, 5e-05)
    """

    policy_class: type | None = None
    observation_space: gym.Space | None = None
    action_space: gym.Space | None = None
    config: Mapping[str, Any] | Any | None = None

    def get_state(self) -> tuple[Any, Any, Any, Any]:
        """The old-style 4-tuple (RLlib's name)."""
        return (self.policy_class, self.observation_space, self.action_space, self.config)

    @classmethod
    def from_state(cls, state: tuple[Any, Any, Any, Any]) -> PolicySpec:
        return cls(*state)


def policy_entry(module_id: str, value: Any) -> tuple[Any, dict[str, Any] | None]:
    """Splits a `policies` value that is a PolicySpec or 4-tuple into (RLModuleSpec or
    None, overrides dict or None); other values come back unchanged with no overrides."""
    from rlmod.algorithms.settings import Invalid, InvalidKind
    from rlmod.core.rl_module import RLModuleSpec

    if isinstance(value, tuple):
        if len(value) != 4:
            raise InvalidKind(
                f"policies[{module_id!r}]: a tuple must be RLlib's 4-tuple (policy_class, "
                f"observation_space, action_space, config), got {len(value)} items."
            )
        value = PolicySpec(*value)
    if not isinstance(value, PolicySpec):
        return value, None
    if value.policy_class is not None:
        raise Invalid(
            f"policies[{module_id!r}] names policy_class {value.policy_class!r}: rlmod has no "
            "Policy classes (RLlib's old API stack). Leave it None and give the module with "
            "rl_module(rl_module_spec=MultiRLModuleSpec(rl_module_specs={...}))."
        )
    spec = None
    if value.observation_space is not None or value.action_space is not None:
        spec = RLModuleSpec(
            observation_space=value.observation_space, action_space=value.action_space
        )
    config = value.config
    if config is None:
        return spec, None
    if isinstance(config, Mapping):
        return spec, dict(config)
    settings = getattr(type(config), "settings", None)
    if settings is None:
        raise InvalidKind(
            f"policies[{module_id!r}]: the config must be a dict of settings or an "
            f"AlgorithmConfig, got {type(config).__name__}."
        )
    defaults = type(config).defaults()
    changed = {n: config.__dict__[n] for n in settings() if config.__dict__[n] != defaults[n]}
    return spec, changed

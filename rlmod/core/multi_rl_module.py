"""MultiRLModule and MultiRLModuleSpec: several RLModules by module ID, and their recipe.

Learners always hold a MultiRLModule (one entry in the single-agent case, more with
multi-agent setups or learner-only modules); multi-agent EnvRunners hold one too.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any

from torch import nn

from rlmod.core.rl_module import RLModule, RLModuleSpec, TensorDict
from rlmod.errors import UnknownModuleIDError
from rlmod.utils.naming import did_you_mean

ModuleID = str


class MultiRLModule(nn.Module):
    """RLModules by module ID; the unit Learners train and weight sync moves.

    Example:
        >>> import gymnasium as gym
        >>> from rlmod.core import MultiRLModuleSpec, RLModuleSpec
        >>> from rlmod.algorithms.ppo import DefaultPPORLModule
        >>> box, two = gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2)
        >>> spec = MultiRLModuleSpec(rl_module_specs={
        ...     "p0": RLModuleSpec(module_class=DefaultPPORLModule,
        ...                        observation_space=box, action_space=two)})
        >>> sorted(spec.build().keys())
        ['p0']
    """

    def __init__(self, modules: Mapping[ModuleID, RLModule] | None = None) -> None:
        super().__init__()
        self._rl_modules = nn.ModuleDict(dict(modules or {}))

    def __getitem__(self, module_id: ModuleID) -> RLModule:
        try:
            return self._rl_modules[module_id]  # type: ignore[return-value]
        except KeyError:
            raise UnknownModuleIDError(
                f"No module {module_id!r} in this MultiRLModule."
                f"{did_you_mean(str(module_id), self._rl_modules.keys())}"
                f" Modules: {list(self._rl_modules.keys())[:10]}"
            ) from None

    def __contains__(self, module_id: object) -> bool:
        return isinstance(module_id, str) and module_id in self._rl_modules

    def __len__(self) -> int:
        return len(self._rl_modules)

    def __iter__(self) -> Iterator[ModuleID]:  # type: ignore[override]
        return iter(self._rl_modules.keys())

    def keys(self) -> list[ModuleID]:
        return list(self._rl_modules.keys())

    def items(self) -> list[tuple[ModuleID, RLModule]]:
        return list(self._rl_modules.items())  # type: ignore[arg-type]

    def add_module(self, module_id: ModuleID, module: RLModule) -> None:  # type: ignore[override]
        self._rl_modules[module_id] = module

    def remove_module(self, module_id: ModuleID) -> None:
        self[module_id]  # raises a clear error for unknown IDs
        del self._rl_modules[module_id]

    def forward_train(self, batch: Mapping[ModuleID, TensorDict]) -> dict[ModuleID, TensorDict]:
        return {mid: self[mid].forward_train(b) for mid, b in batch.items()}

    def get_state(
        self, module_ids: list[ModuleID] | None = None, *, inference_only: bool = False
    ) -> dict[ModuleID, TensorDict]:
        """Each module's tensors; `inference_only` keeps what EnvRunners hold."""
        ids = self.keys() if module_ids is None else module_ids
        return {mid: self[mid].get_state(inference_only=inference_only) for mid in ids}

    def set_state(self, state: Mapping[ModuleID, Mapping[str, Any]]) -> None:
        """Loads the modules named in `state`; the others stay as they are."""
        for mid, module_state in state.items():
            self[mid].set_state(module_state)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())


@dataclasses.dataclass
class MultiRLModuleSpec:
    """Specs by module ID; `build()` returns the MultiRLModule.

    Attributes:
        rl_module_specs: One RLModuleSpec per module ID.
    """

    rl_module_specs: dict[ModuleID, RLModuleSpec] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        for mid, spec in self.rl_module_specs.items():
            if not isinstance(mid, str):
                raise TypeError(
                    f"Module IDs must be strings, got {mid!r} ({type(mid).__name__}); "
                    "map agents to string module IDs in policy_mapping_fn."
                )
            if not isinstance(spec, RLModuleSpec):
                raise TypeError(
                    f"rl_module_specs[{mid!r}] must be an RLModuleSpec, got {type(spec).__name__}."
                )

    def __getitem__(self, module_id: ModuleID) -> RLModuleSpec:
        try:
            return self.rl_module_specs[module_id]
        except KeyError:
            raise UnknownModuleIDError(
                f"No spec for module {module_id!r}."
                f"{did_you_mean(str(module_id), self.rl_module_specs)}"
            ) from None

    def __contains__(self, module_id: object) -> bool:
        return module_id in self.rl_module_specs

    def build(self) -> MultiRLModule:
        return MultiRLModule({mid: spec.build() for mid, spec in self.rl_module_specs.items()})

    def to_dict(self) -> dict[str, Any]:
        return {"rl_module_specs": {m: s.to_dict() for m, s in self.rl_module_specs.items()}}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MultiRLModuleSpec:
        return cls({m: RLModuleSpec.from_dict(s) for m, s in data["rl_module_specs"].items()})

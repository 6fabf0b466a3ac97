"""MultiRLModule and MultiRLModuleSpec: several RLModules by module ID, and their recipe.

Learners always hold a MultiRLModule (one entry in the single-agent case, more with
multi-agent setups or learner-only modules); multi-agent EnvRunners hold one too.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from torch import nn

from rlmod.core.columns import DEFAULT_MODULE_ID
from rlmod.core.rl_module import RLModule, RLModuleSpec, TensorDict, spec_from_metadata
from rlmod.errors import CheckpointError, UnknownModuleIDError
from rlmod.utils.checkpoints import METADATA_FILE, Checkpointable, read_metadata, select_components
from rlmod.utils.naming import did_you_mean
from rlmod.utils.state_files import read_json, read_state

ModuleID = str


class MultiRLModule(nn.Module, Checkpointable):
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

    def get_state(self, components: str | Collection[str] | None = None, *,
                  not_components: str | Collection[str] | None = None,
                  inference_only: bool = False, **kwargs: Any) -> dict[ModuleID, TensorDict]:
        """Each module's tensors (`components`: module IDs to include, `not_components`:
        to leave out); `inference_only` keeps what EnvRunners hold."""
        if components is None and not_components is None:
            ids = self.keys()
        elif not_components is None and not isinstance(components, str):
            ids = list(components)  # type: ignore[arg-type]
        else:
            ids = [m for m in self.keys() if select_components(components, not_components, m)[0]]
        return {mid: self[mid].get_state(inference_only=inference_only) for mid in ids}

    def get_metadata(self) -> dict[str, Any]:
        """Every module's spec, so each one can be rebuilt (and loaded) alone."""
        return {"module_specs": {mid: RLModuleSpec.from_module(m).to_dict(allow_unnamed=True)
                                 for mid, m in self.items()}}

    @classmethod
    def from_checkpoint(cls, path: str | Path, *, inference_only: bool | None = None,
                        trusted_modules: Iterable[str] = ()) -> MultiRLModule:
        """Builds all modules of a multi-module checkpoint (its `rl_module` directory or an
        Algorithm checkpoint's root) and loads their weights. With `inference_only=True`,
        learner-only modules are left out and the others built small, as on EnvRunners."""
        directory = Path(path)
        if (directory / "learner_group" / "learner" / "rl_module").is_dir():
            directory = directory / "learner_group" / "learner" / "rl_module"
        meta = read_metadata(directory)
        specs = meta.get("module_specs")
        if not isinstance(specs, dict):
            raise CheckpointError(f"{directory / METADATA_FILE}: no 'module_specs' dict.")
        ids = [m for m, sp in specs.items()
               if not (inference_only and isinstance(sp, dict) and sp.get("learner_only"))]
        state = read_state(directory, select=ids)  # one read for all modules
        modules = {}
        for mid in ids:
            spec = spec_from_metadata(specs[mid], file=directory / METADATA_FILE,
                                      module_id=mid, inference_only=inference_only,
                                      trusted_modules=trusted_modules)
            modules[mid] = spec.build()
            modules[mid].load_checkpoint_state(state[mid], directory)
        return cls(modules)

    def _restore_part(self, path: Path, name: str, rest: str) -> None:
        """Restores module `name` alone: only its keys are read; the others stay as they are."""
        if name not in self:
            raise UnknownModuleIDError(
                f"Cannot restore module {name!r}: this MultiRLModule has no such module."
                f"{did_you_mean(name, self.keys())}"
            )
        directory, mid = locate_module_checkpoint(path, name)
        read_metadata(directory)
        self[name].set_state(read_state(directory, select=[mid or name])[mid or name])

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
    def from_dict(cls, data: Mapping[str, Any], *,
                  trusted_modules: Iterable[str] = ()) -> MultiRLModuleSpec:
        """Inverse of `to_dict` (module classes resolve under rlmod.utils.trust)."""
        return cls({m: RLModuleSpec.from_dict(s, trusted_modules=trusted_modules)
                    for m, s in data["rl_module_specs"].items()})


def locate_module_checkpoint(path: str | Path, module_id: ModuleID | None) -> tuple[Path, ModuleID | None]:
    """(directory, module ID) of one module's weights in a checkpoint.

    `path` may be a single module's checkpoint (module ID None), a MultiRLModule's
    (`.../rl_module`), RLlib's per-module path (`.../rl_module/<module_id>`, a key prefix in
    the one weights file here), or an Algorithm checkpoint's root.
    """
    path = Path(path)
    if not path.exists() and path.parent.is_dir() and (path.parent / METADATA_FILE).exists():
        module_id, path = module_id or path.name, path.parent
    root_modules = path / "learner_group" / "learner" / "rl_module"
    if not (path / "metadata.json").exists() and not path.is_dir():
        raise CheckpointError(f"Checkpoint directory {path} does not exist.")
    if root_modules.is_dir():
        path = root_modules
    meta = read_json(path / METADATA_FILE)
    specs = meta.get("module_specs")
    if specs is None:
        if module_id is not None:
            raise CheckpointError(
                f"{path} holds a single module; module_id={module_id!r} does not apply.")
        return path, None
    if not isinstance(specs, dict):
        raise CheckpointError(f"{path / METADATA_FILE}: field 'module_specs' must be a dict.")
    if module_id is None:
        acting = [m for m, sp in specs.items()
                  if isinstance(sp, dict) and not sp.get("learner_only")]
        if DEFAULT_MODULE_ID in specs:
            module_id = DEFAULT_MODULE_ID
        elif len(acting) == 1:
            module_id = acting[0]
        else:
            raise CheckpointError(
                f"{path} holds modules {sorted(specs)[:10]}; say which one with module_id=..."
            )
    if module_id not in specs:
        raise UnknownModuleIDError(
            f"{path} has no module {module_id!r}.{did_you_mean(str(module_id), specs)} "
            f"Modules: {sorted(specs)[:10]}"
        )
    return path, module_id

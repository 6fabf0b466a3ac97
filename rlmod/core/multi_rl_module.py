"""MultiRLModule and MultiRLModuleSpec: several RLModules by module ID, and their recipe.

Learners always hold a MultiRLModule (one entry in the single-agent case, more with
multi-agent setups or learner-only modules); multi-agent EnvRunners hold one too.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, KeysView, Mapping
from pathlib import Path
from typing import cast, overload

import gymnasium as gym
import torch
from torch import nn

from rlmod.core.columns import DEFAULT_MODULE_ID
from rlmod.core.module_checkpoint import (
    make_module_dir,
    module_dir_name,
    module_directory,
    read_module_state,
    stored_module_ids,
    stored_module_spec,
)
from rlmod.core.rl_module import RLModule, RLModuleSpec, spec_from_metadata
from rlmod.core.types import Array, Components, TensorDict
from rlmod.errors import CheckpointError, UnknownModuleIDError
from rlmod.utils.checkpoints import (
    METADATA_FILE,
    Checkpointable,
    StateDict,
    read_metadata,
    select_components,
    write_metadata,
)
from rlmod.utils.gc_pause import gc_paused
from rlmod.utils.naming import did_you_mean, import_path
from rlmod.utils.spaces import space_from_dict, space_to_dict
from rlmod.utils.state_files import read_state

ModuleID = str


class MultiRLModule(nn.Module, Checkpointable):
    """RLModules by module ID; the unit Learners train and weight sync moves.

    Built from modules (`MultiRLModule({"p0": module})`, rlmod's fast path) or, as RLlib,
    from specs (`MultiRLModule(rl_module_specs={...})`), whose modules `setup()` builds. A
    subclass may override `setup()` (call `super().setup()` first) to add parts shared by
    its modules, e.g. an encoder, and `_forward_train` etc. to route batches through them;
    Learners call `forward_train` of the whole MultiRLModule. (EnvRunners call each
    module's acting forward directly.)

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

    def __init__(
        self,
        modules: Mapping[ModuleID, RLModule] | None = None,
        *,
        observation_space: gym.Space | None = None,
        action_space: gym.Space | None = None,
        inference_only: bool | None = None,
        learner_only: bool | None = None,
        model_config: Mapping[str, object] | None = None,
        rl_module_specs: Mapping[ModuleID, RLModuleSpec] | None = None,
    ) -> None:
        """Args as RLlib's (`modules` is rlmod's: ready-built modules by ID).

        `inference_only=None` means "True iff all specs say so"; True makes every spec
        inference-only before its module is built (the given specs stay as they are).
        """
        super().__init__()
        specs = dict(rl_module_specs or {})
        built = dict(modules or {})
        if inference_only is None:
            flags = [sp.inference_only for sp in specs.values()]
            flags += [m.inference_only for m in built.values()]
            inference_only = bool(flags) and all(flags)
        if inference_only:
            specs = {
                m: dataclasses.replace(sp, inference_only=True, learner_only=False)
                for m, sp in specs.items()
            }
        self.observation_space = observation_space
        self.action_space = action_space
        self.inference_only = inference_only
        self.learner_only = learner_only
        self.model_config = model_config
        self.rl_module_specs: dict[ModuleID, RLModuleSpec] = specs
        self._rl_modules = nn.ModuleDict(built)
        self.setup()

    def setup(self) -> None:
        """Builds a module for every spec in `rl_module_specs` (RLlib's hook)."""
        for mid, spec in self.rl_module_specs.items():
            if mid not in self._rl_modules:
                self._rl_modules[mid] = spec.build()

    def __getitem__(self, module_id: ModuleID) -> RLModule:
        try:
            return self._rl_modules[module_id]  # type: ignore[return-value]
        except KeyError:
            raise UnknownModuleIDError(
                f"No module {module_id!r} in this MultiRLModule."
                f"{did_you_mean(str(module_id), self._rl_modules.keys())}"
                f" Modules: {list(self._rl_modules.keys())[:10]}"
            ) from None

    def get(self, module_id: ModuleID, default: RLModule | None = None) -> RLModule | None:
        """The module `module_id`, or `default` if there is none (RLlib's)."""
        return self._rl_modules[module_id] if module_id in self else default  # type: ignore[return-value]

    def __contains__(self, module_id: object) -> bool:
        return isinstance(module_id, str) and module_id in self._rl_modules

    def __len__(self) -> int:
        return len(self._rl_modules)

    def __iter__(self) -> Iterator[ModuleID]:  # type: ignore[override]
        return iter(self._rl_modules.keys())

    def keys(self) -> KeysView[ModuleID]:
        """The module IDs, a live view in insertion order (RLlib's `KeysView`: it compares
        equal to a set of the same IDs)."""
        return self._rl_modules.keys()

    def values(self) -> list[RLModule]:
        return list(self._rl_modules.values())  # type: ignore[arg-type]

    def items(self) -> list[tuple[ModuleID, RLModule]]:
        return list(self._rl_modules.items())  # type: ignore[arg-type]

    def add_module(  # type: ignore[override]
        self,
        module_id: ModuleID,
        module: RLModule,
        *,
        override: bool = False,
    ) -> None:
        """Adds `module` under `module_id` (RLlib's signature): an existing ID is a
        ValueError unless `override`."""
        if module_id in self._rl_modules and not override:
            raise ValueError(
                f"Module ID {module_id!r} already exists in this MultiRLModule; pass "
                "override=True to replace it."
            )
        if not module.inference_only:
            self.inference_only = False
        self._rl_modules[module_id] = module
        self.rl_module_specs[module_id] = RLModuleSpec.from_module(module)

    def remove_module(self, module_id: ModuleID, *, raise_err_if_not_found: bool = True) -> None:
        """Removes `module_id` (RLlib's signature); an unknown ID raises unless
        `raise_err_if_not_found=False`."""
        if module_id not in self._rl_modules:
            if raise_err_if_not_found:
                self[module_id]  # raises UnknownModuleIDError (a KeyError, as RLlib's)
            return
        del self._rl_modules[module_id]
        self.rl_module_specs.pop(module_id, None)

    def as_multi_rl_module(self) -> MultiRLModule:
        """Itself (RLlib's: no double wrapping)."""
        return self

    def unwrapped(self) -> MultiRLModule:
        """Itself (RLlib's name; rlmod never wraps modules)."""
        return self

    # RLlib's forwards: batch and outputs by module ID; IDs with no module are skipped.
    def _forward(
        self, batch: Mapping[ModuleID, TensorDict], **kwargs: object
    ) -> dict[ModuleID, TensorDict]:
        return {m: self[m]._forward(b, **kwargs) for m, b in batch.items() if m in self}

    def _forward_inference(
        self, batch: Mapping[ModuleID, TensorDict], **kwargs: object
    ) -> dict[ModuleID, TensorDict]:
        return {m: self[m].forward_inference(b, **kwargs) for m, b in batch.items() if m in self}

    def _forward_exploration(
        self, batch: Mapping[ModuleID, TensorDict], **kwargs: object
    ) -> dict[ModuleID, TensorDict]:
        return {m: self[m].forward_exploration(b, **kwargs) for m, b in batch.items() if m in self}

    def _forward_train(
        self, batch: Mapping[ModuleID, TensorDict], **kwargs: object
    ) -> dict[ModuleID, TensorDict]:
        return {m: self[m].forward_train(b, **kwargs) for m, b in batch.items() if m in self}

    def forward_inference(
        self, batch: Mapping[ModuleID, TensorDict], **kwargs: object
    ) -> dict[ModuleID, TensorDict]:
        return self._forward_inference(batch, **kwargs)

    def forward_exploration(
        self, batch: Mapping[ModuleID, TensorDict], **kwargs: object
    ) -> dict[ModuleID, TensorDict]:
        return self._forward_exploration(batch, **kwargs)

    def forward_train(
        self, batch: Mapping[ModuleID, TensorDict], **kwargs: object
    ) -> dict[ModuleID, TensorDict]:
        return self._forward_train(batch, **kwargs)

    def get_state(
        self,
        components: Components = None,
        *,
        not_components: Components = None,
        inference_only: bool = False,
        **kwargs: object,
    ) -> dict[ModuleID, TensorDict]:
        """Each module's tensors (`components`: module IDs to include, `not_components`:
        to leave out); `inference_only` keeps what EnvRunners hold."""
        if components is None and not_components is None:
            ids = list(self.keys())
        elif not_components is None and not isinstance(components, str):
            ids = list(components)  # type: ignore[arg-type]
        else:
            ids = [m for m in self.keys() if select_components(components, not_components, m)[0]]
        return {mid: self[mid].get_state(inference_only=inference_only) for mid in ids}

    def get_metadata(self) -> dict[str, object]:
        """The module IDs; each module's spec is in its own directory's metadata.json."""
        return {"module_ids": list(self.keys())}

    def _save_into(self, directory: Path, state: StateDict) -> None:
        """Each module's weights and spec in a directory of its own (`<module_id>/`, a
        checkpoint `RLModule.from_checkpoint` loads alone, as in RLlib), then the IDs."""
        names = []
        for mid, module_state in state.items():
            if mid not in self._rl_modules:
                raise CheckpointError(
                    f"Cannot save module {mid!r}: the state names it, but this MultiRLModule "
                    f"has no such module.{did_you_mean(mid, self.keys())}"
                )
            sub = make_module_dir(directory, mid)
            self[mid]._save_into(sub, module_state)
            names.append(sub.name)
        write_metadata(directory, type(self), names, {"module_ids": list(state)})

    def _read_state(self, path: Path) -> StateDict:
        """Every stored module's weights, from its own directory (or, for a checkpoint
        written before modules had directories, from the one shared weights file)."""
        ids = stored_module_ids(path, read_metadata(path))
        if ids is None:
            return read_state(path)
        state: StateDict = {}
        for mid in ids:
            state[mid] = read_module_state(module_directory(path, mid))
        return state

    @classmethod
    def from_checkpoint(
        cls,
        path: str | Path,
        *,
        inference_only: bool | None = None,
        trusted_modules: Iterable[str] = (),
    ) -> MultiRLModule:
        """Builds all modules of a multi-module checkpoint (its `rl_module` directory or an
        Algorithm checkpoint's root) and loads their weights. With `inference_only=True`,
        learner-only modules are left out and the others built small, as on EnvRunners."""
        directory = Path(path)
        if (directory / "learner_group" / "learner" / "rl_module").is_dir():
            directory = directory / "learner_group" / "learner" / "rl_module"
        meta = read_metadata(directory)
        ids = stored_module_ids(directory, meta)
        if ids is not None:
            modules = {}
            for mid in ids:
                sub = module_directory(directory, mid)
                stored = stored_module_spec(sub)
                if inference_only and stored is not None and stored.get("learner_only"):
                    continue
                spec = spec_from_metadata(
                    stored,
                    file=sub / METADATA_FILE,
                    module_id=mid,
                    inference_only=inference_only,
                    trusted_modules=trusted_modules,
                )
                modules[mid] = spec.build()
                modules[mid].load_checkpoint_state(read_module_state(sub), sub)
            return cls(modules)
        # A checkpoint from before module directories: one weights file, keys per module.
        specs = meta.get("module_specs")
        if not isinstance(specs, dict):
            raise CheckpointError(f"{directory / METADATA_FILE}: no 'module_specs' dict.")
        ids = [
            m
            for m, sp in specs.items()
            if not (inference_only and isinstance(sp, dict) and sp.get("learner_only"))
        ]
        state = read_state(directory, select=ids)  # one read for all modules
        modules = {}
        for mid in ids:
            spec = spec_from_metadata(
                specs[mid],
                file=directory / METADATA_FILE,
                module_id=mid,
                inference_only=inference_only,
                trusted_modules=trusted_modules,
            )
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
        if path.is_dir() and "module_spec" in read_metadata(path):  # the module's own dir
            directory, mid = path, None
        else:
            directory, mid = locate_module_checkpoint(path, name)
            read_metadata(directory)
        stored = read_state(directory) if mid is None else read_state(directory, select=[mid])[mid]
        self[name].set_state(stored)

    def set_state(self, state: Mapping[ModuleID, Mapping[str, torch.Tensor | Array]]) -> None:
        """Loads the modules named in `state`; the others stay as they are."""
        for mid, module_state in state.items():
            self[mid].set_state(module_state)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())


@dataclasses.dataclass
class MultiRLModuleSpec:
    """Specs by module ID, plus the MultiRLModule class; `build()` returns the
    MultiRLModule. Fields, their order and defaults are RLlib's.

    Attributes:
        multi_rl_module_class: The MultiRLModule (sub)class to build, e.g. one whose
            `setup()` adds an encoder its modules share.
        observation_space: Optional space of parts shared by all modules.
        action_space: Optional action space of shared parts.
        inference_only: None means "True iff every sub-spec is inference-only".
        model_config: Optional settings of the shared parts.
        rl_module_specs: One RLModuleSpec per module ID.
    """

    multi_rl_module_class: type[MultiRLModule] = MultiRLModule
    observation_space: gym.Space | None = None
    action_space: gym.Space | None = None
    inference_only: bool | None = None
    model_config: dict[str, object] | None = None
    rl_module_specs: dict[ModuleID, RLModuleSpec] = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if not isinstance(self.rl_module_specs, dict):  # RLlib's ValueError, also for None
            raise ValueError(
                "MultiRLModuleSpec.rl_module_specs must be a dict mapping module IDs to "
                f"RLModuleSpecs, got {type(self.rl_module_specs).__name__}. To use one "
                "RLModule for all agents, pass its RLModuleSpec to "
                "config.rl_module(rl_module_spec=...); for several, pass "
                '{"my_module": RLModuleSpec(...), ...}.'
            )
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
        if not (
            isinstance(self.multi_rl_module_class, type)
            and issubclass(self.multi_rl_module_class, MultiRLModule)
        ):
            raise TypeError(
                f"multi_rl_module_class={self.multi_rl_module_class!r} must be a subclass of "
                "rlmod.core.MultiRLModule."
            )
        if self.inference_only is None:  # as RLlib: all sub-specs inference-only
            self.inference_only = all(sp.inference_only for sp in self.rl_module_specs.values())

    @property
    def module_specs(self) -> dict[ModuleID, RLModuleSpec]:
        """`rl_module_specs` (RLlib's older name, still readable there)."""
        return self.rl_module_specs

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

    def __len__(self) -> int:
        return len(self.rl_module_specs)

    @overload
    def build(self, module_id: None = None) -> MultiRLModule: ...

    @overload
    def build(self, module_id: ModuleID) -> RLModule: ...

    @gc_paused()  # thousands of modules: rlmod/utils/gc_pause.py
    def build(self, module_id: ModuleID | None = None) -> MultiRLModule | RLModule:
        """The MultiRLModule, or only the module `module_id` if given (RLlib's)."""
        if module_id is not None:
            return self[module_id].build()
        if (
            self.multi_rl_module_class is MultiRLModule
            and self.observation_space is None
            and self.model_config is None
        ):  # the plain case: no spec copies
            return MultiRLModule(
                {m: sp.build() for m, sp in self.rl_module_specs.items()},
                inference_only=self.inference_only,
            )
        return self.multi_rl_module_class(
            observation_space=self.observation_space,
            action_space=self.action_space,
            inference_only=self.inference_only,
            model_config=self.model_config,
            rl_module_specs=self.rl_module_specs,
        )

    @classmethod
    def from_module(cls, module: MultiRLModule) -> MultiRLModuleSpec:
        """The spec that builds a MultiRLModule like `module`: its class, shared spaces and
        model config, and one spec per sub-module (RLlib's)."""
        return cls(
            multi_rl_module_class=type(module),
            observation_space=module.observation_space,
            action_space=module.action_space,
            inference_only=module.inference_only,
            model_config=None if module.model_config is None else dict(module.model_config),
            rl_module_specs={m: RLModuleSpec.from_module(sub) for m, sub in module.items()},
        )

    def add_modules(
        self, module_specs: Mapping[ModuleID, RLModuleSpec], override: bool = True
    ) -> None:
        """Adds specs by module ID; an existing one is replaced if `override`, else
        updated in place from the new one (RLlib's)."""
        for mid, spec in module_specs.items():
            if override or mid not in self.rl_module_specs:
                if not spec.inference_only:
                    self.inference_only = False
                self.rl_module_specs[mid] = spec
            else:
                self.rl_module_specs[mid].update(spec)

    def remove_modules(self, module_ids: ModuleID | Iterable[ModuleID]) -> None:
        """Drops the specs of `module_ids`; unknown IDs are ignored (RLlib's)."""
        for mid in [module_ids] if isinstance(module_ids, str) else module_ids:
            self.rl_module_specs.pop(mid, None)

    def update(self, other: MultiRLModuleSpec | RLModuleSpec, override: bool = False) -> None:
        """Updates this spec in place (RLlib's semantics).

        An RLModuleSpec fills what is unset in every sub-spec (`update(override=False)`);
        a MultiRLModuleSpec's sub-specs are added, replacing existing ones if `override`,
        else updating them.
        """
        if isinstance(other, RLModuleSpec):
            if not other.inference_only:
                self.inference_only = False
            for spec in self.rl_module_specs.values():
                spec.update(other, override=False)
        elif isinstance(other, MultiRLModuleSpec):
            self.add_modules(other.rl_module_specs, override=override)
        else:
            raise TypeError(f"Cannot update a MultiRLModuleSpec from a {type(other).__name__}.")

    def as_multi_rl_module_spec(self) -> MultiRLModuleSpec:
        """Itself (RLlib's, to match `RLModuleSpec.as_multi_rl_module_spec`)."""
        return self

    def to_dict(self) -> dict[str, object]:
        """A JSON-able form with RLlib's keys; classes are stored as import paths."""
        return {
            "multi_rl_module_class": import_path(
                self.multi_rl_module_class, setting="multi_rl_module_class"
            ),
            "observation_space": space_to_dict(self.observation_space),
            "action_space": space_to_dict(self.action_space),
            "inference_only": self.inference_only,
            "model_config": self.model_config,
            "rl_module_specs": {m: s.to_dict() for m, s in self.rl_module_specs.items()},
        }

    @classmethod
    def from_dict(
        cls, data: Mapping[str, object], *, trusted_modules: Iterable[str] = ()
    ) -> MultiRLModuleSpec:
        """Inverse of `to_dict` (classes resolve under rlmod.utils.trust); a dict with
        only `rl_module_specs` (older rlmod configs) is read too."""
        from rlmod.utils.trust import resolve_import_path

        trusted = tuple(trusted_modules)
        cls_path = data.get("multi_rl_module_class")
        return cls(
            multi_rl_module_class=MultiRLModule
            if cls_path is None
            else resolve_import_path(
                cls_path,
                setting="multi_rl_module_class",
                kind="multi_rl_module",
                trusted_modules=trusted,
            ),
            observation_space=space_from_dict(
                cast("dict[str, object] | None", data.get("observation_space"))
            ),
            action_space=space_from_dict(
                cast("dict[str, object] | None", data.get("action_space"))
            ),
            inference_only=cast("bool | None", data.get("inference_only")),
            model_config=cast("dict[str, object] | None", data.get("model_config")),
            rl_module_specs={
                m: RLModuleSpec.from_dict(s, trusted_modules=trusted)
                for m, s in cast("dict[str, dict[str, object]]", data["rl_module_specs"]).items()
            },
        )


def locate_module_checkpoint(
    path: str | Path, module_id: ModuleID | None
) -> tuple[Path, ModuleID | None]:
    """(directory, module ID) of one module's weights in a checkpoint: module ID None
    when the directory is that module's own checkpoint.

    `path` may be a single module's checkpoint (e.g. `.../rl_module/<module_id>`, or one
    copied out of it), a MultiRLModule's (`.../rl_module`), or an Algorithm checkpoint's
    root. In checkpoints written before modules had directories (see
    rlmod/core/module_checkpoint.py), `.../rl_module/<module_id>` is not on disk: it
    names a key prefix in the one weights file, returned with its module ID.
    """
    path = Path(path)
    if not path.exists() and path.parent.is_dir() and (path.parent / METADATA_FILE).exists():
        module_id, path = module_id or path.name, path.parent
    root_modules = path / "learner_group" / "learner" / "rl_module"
    if not (path / "metadata.json").exists() and not path.is_dir():
        raise CheckpointError(f"Checkpoint directory {path} does not exist.")
    if root_modules.is_dir():
        path = root_modules
    meta = read_metadata(path)
    ids = stored_module_ids(path, meta)
    if ids is not None:
        return _locate_module_dir(path, ids, module_id), None
    specs = meta.get("module_specs")
    if specs is None:
        if module_id is not None and module_dir_name(module_id) != path.name:
            raise CheckpointError(
                f"{path} holds a single module; module_id={module_id!r} does not apply."
            )
        return path, None
    if not isinstance(specs, dict):
        raise CheckpointError(f"{path / METADATA_FILE}: field 'module_specs' must be a dict.")
    if module_id is None:
        acting = [
            m for m, sp in specs.items() if isinstance(sp, dict) and not sp.get("learner_only")
        ]
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


def _locate_module_dir(path: Path, ids: list[ModuleID], module_id: ModuleID | None) -> Path:
    """The directory of `module_id` (default: `default_policy`, else the only module that
    acts) in the MultiRLModule checkpoint `path` that stores modules `ids`."""
    if module_id is None:
        if DEFAULT_MODULE_ID in ids:
            module_id = DEFAULT_MODULE_ID
        else:
            acting = [
                m
                for m in ids
                if not (stored_module_spec(module_directory(path, m)) or {}).get("learner_only")
            ]
            if len(acting) != 1:
                raise CheckpointError(
                    f"{path} holds modules {sorted(ids)[:10]}; say which one with module_id=..."
                )
            module_id = acting[0]
    if module_id not in ids:
        raise UnknownModuleIDError(
            f"{path} has no module {module_id!r}.{did_you_mean(str(module_id), ids)} "
            f"Modules: {sorted(ids)[:10]}"
        )
    return module_directory(path, module_id)

"""Modules built without running their initialisers, for EnvRunners whose weights come
from a Learner.

An EnvRunner inside an Algorithm gets every module's weights from the Learner's first
weight sync, before it samples anything, so the random initial weights it draws when it
builds its modules are never used. At 1,000 [256, 256] modules that init (orthogonal_'s
QR per layer) was 2.2 s of each remote EnvRunner's start-up. Here such modules are built
on torch's `meta` device and given uninitialised storage (`to_empty`), and a
`PendingInit` records which modules still hold no weights. No one may read those:
the EnvRunner calls `PendingInit.initialise` before it samples or hands its module or
weights out, which runs the initialisers after all, with the same values and the same
draws from the EnvRunner's torch RNG as a normal build (so a standalone EnvRunner that
never gets weights samples exactly as before).

Only classes that declare `supports_deferred_init = True` themselves (a subclass must say
so again) are built this way: their `setup()` only creates submodules, parameters and
persistent buffers, so `set_state()` restores everything a normal build would have set.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn

from rlmod.core.multi_rl_module import ModuleID, MultiRLModule, MultiRLModuleSpec
from rlmod.core.rl_module import RLModule, RLModuleSpec
from rlmod.fast_paths import plain_paths


def supports_deferred_init(module_class: type[RLModule] | None) -> bool:
    """Whether `module_class` declares `supports_deferred_init = True` itself (not
    inherited: a subclass may keep state that `set_state` does not restore)."""
    return module_class is not None and bool(
        module_class.__dict__.get("supports_deferred_init", False)
    )


def build_uninitialised(spec: RLModuleSpec) -> RLModule:
    """`spec.build()` on the meta device, then given uninitialised CPU storage: the
    module's structure without any initialiser's work (or result)."""
    with torch.device("meta"):
        module = spec.build()
    # What `module.to_empty(device="cpu")` does, without its per-tensor dispatch through
    # the meta device's Python decompositions (0.7 s of 1,000 modules' 1.6 s).
    new: dict[int, torch.Tensor] = {}  # a tensor held twice (tied weights) stays one
    for sub in module.modules():
        for name, p in sub._parameters.items():
            if p is not None:
                if id(p) not in new:
                    new[id(p)] = nn.Parameter(
                        torch.empty(p.shape, dtype=p.dtype), requires_grad=p.requires_grad
                    )
                sub._parameters[name] = new[id(p)]  # type: ignore[assignment]
        for name, b in sub._buffers.items():
            if b is not None:
                if id(b) not in new:
                    new[id(b)] = torch.empty(b.shape, dtype=b.dtype)
                sub._buffers[name] = new[id(b)]
    return module


def is_plain(spec: MultiRLModuleSpec) -> bool:
    """Whether `spec` builds a `MultiRLModule` itself from its sub-specs alone (no shared
    spaces or model config): then its module IDs are the spec's, in the spec's order."""
    return (
        spec.multi_rl_module_class is MultiRLModule
        and spec.observation_space is None
        and spec.model_config is None
    )


def build_deferred(spec: MultiRLModuleSpec) -> tuple[MultiRLModule, list[ModuleID]]:
    """`spec.build()`, except that the modules whose class supports deferred init hold
    uninitialised weights; returns the MultiRLModule and those modules' IDs.

    Only the plain case (`MultiRLModule` itself, no shared spaces or model config) is
    built per module; a custom MultiRLModule class builds its modules in its own
    `setup()`, so it is built normally (and no module is deferred).
    """
    if (
        plain_paths()
        or not is_plain(spec)
        or not any(supports_deferred_init(sp.module_class) for sp in spec.rl_module_specs.values())
    ):
        return spec.build(), []
    modules: dict[ModuleID, RLModule] = {}
    deferred: list[ModuleID] = []
    for mid, sp in spec.rl_module_specs.items():
        if supports_deferred_init(sp.module_class):
            modules[mid] = build_uninitialised(sp)
            deferred.append(mid)
        else:
            modules[mid] = sp.build()
    return MultiRLModule(modules, inference_only=spec.inference_only), deferred


class PendingInit:
    """The modules of a MultiRLModule that hold no weights yet, and how to give them the
    weights a normal build would have.

    Args:
        spec: The spec the MultiRLModule was built from.
        module_ids: The modules built without initialisers (`build_deferred`'s list).
        rng_state: The torch RNG state the build started from (the EnvRunner's own
            stream), so that `initialise` draws exactly what a normal build drew.

    Example:
        >>> import gymnasium as gym
        >>> from rlmod.algorithms.ppo import DefaultPPORLModule
        >>> box, two = gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2)
        >>> spec = MultiRLModuleSpec(rl_module_specs={"p0": RLModuleSpec(
        ...     module_class=DefaultPPORLModule, observation_space=box, action_space=two)})
        >>> rng = torch.get_rng_state()
        >>> module, deferred = build_deferred(spec)
        >>> pending = PendingInit(spec, deferred, rng)
        >>> sorted(pending.module_ids)
        ['p0']
        >>> _ = pending.initialise(module)  # the weights spec.build() would have drawn
        >>> pending.module_ids
        set()
    """

    def __init__(
        self, spec: MultiRLModuleSpec, module_ids: Iterable[ModuleID], rng_state: torch.Tensor
    ) -> None:
        self._spec = spec
        self.module_ids: set[ModuleID] = set(module_ids)
        self._rng_state = rng_state.clone()

    def __bool__(self) -> bool:
        return bool(self.module_ids)

    def weights_set(self, module_ids: Iterable[ModuleID]) -> None:
        """These modules' whole state was set (`set_state` checks that none is missing):
        they need no init any more."""
        self.module_ids.difference_update(module_ids)

    def initialise(self, module: MultiRLModule) -> torch.Tensor | None:
        """Gives the pending modules of `module` the weights a normal build would have:
        builds the spec normally from the RNG state of the original build and copies
        those modules' weights. Returns the torch RNG state after that build (what the
        EnvRunner's stream would have been after a normal build), or None if nothing
        was pending. The process's own RNG state is left as it was."""
        if not self.module_ids:
            return None
        saved = torch.get_rng_state()
        torch.set_rng_state(self._rng_state)
        try:
            fresh: MultiRLModule = self._spec.build()
            after = torch.get_rng_state()
        finally:
            torch.set_rng_state(saved)
        with torch.no_grad():
            for mid in self.module_ids:
                source = fresh[mid].state_dict()
                for name, tensor in module[mid].state_dict().items():
                    tensor.copy_(source[name])
        self.module_ids.clear()
        return after

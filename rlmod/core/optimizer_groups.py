"""Parts of one module stepped with their own learning rates, and RLlib's gradient clipping modes.

Used by Learner.build (rlmod.core.learner) for modules whose Learner names optimizer groups
(`Learner.optimizer_groups`, e.g. SAC's "policy", "qf" and "alpha" with actor_lr, critic_lr
and alpha_lr, as RLlib registers several optimizers), and by TrainAlone
(rlmod.core.train_alone) to clip gradients by `grad_clip_by`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from rlmod.core.multi_rl_module import ModuleID

LearningRate = float | list[list[float]]
"""A learning rate or a piecewise-linear schedule [[env_step, lr], ...]."""

OptimizerGroups = Mapping[str, tuple[tuple[str, ...], LearningRate]]
"""{optimizer name: (parameter name prefixes, lr or schedule)}."""


def by_group(
    module_id: ModuleID,
    params: list[torch.nn.Parameter],
    names: list[str],
    groups: OptimizerGroups,
) -> tuple[list[torch.nn.Parameter], list[str], list[tuple[str, LearningRate, int]]]:
    """`params` and their `names` reordered group by group, and each group's (name, lr
    or schedule, number of parameters), in that order."""
    order = group_order(module_id, names, groups)
    return (
        [params[i] for _, idx in order for i in idx],
        [names[i] for _, idx in order for i in idx],
        [(g, groups[g][1], len(idx)) for g, idx in order],
    )


def group_order(
    module_id: ModuleID, names: Sequence[str], groups: OptimizerGroups
) -> list[tuple[str, list[int]]]:
    """Each optimizer group's parameter positions (module order within a group); a
    parameter in no group, or in two, is an error naming it."""
    order: list[tuple[str, list[int]]] = [(g, []) for g in groups]
    for i, name in enumerate(names):
        hits = [k for k, (g, _) in enumerate(order) if name.startswith(groups[g][0])]
        if len(hits) != 1:
            where = "no" if not hits else "more than one"
            raise ValueError(
                f"Parameter {name!r} of module {module_id!r} is in {where} optimizer group "
                f"of {sorted(groups)}: each trainable parameter needs exactly one."
            )
        order[hits[0]][1].append(i)
    # Groups by where their first parameter is: parameters keep the module's order where
    # groups are contiguous (so optimizer states saved before grouping still fit).
    return sorted(((g, idx) for g, idx in order if idx), key=lambda gi: gi[1][0])


def clip_gradients(
    params: list[torch.nn.Parameter], clip: float | None, clip_by: str
) -> torch.Tensor | None:
    """Clips `params`' gradients in place as RLlib's torch Learner does (`grad_clip_by`):
    "global_norm" scales them all by `clip / global norm` where that norm exceeds `clip`,
    "norm" does so per tensor, "value" clamps each element to [-clip, clip]. Returns the
    global norm before clipping for "global_norm" (RLlib logs only that one), else None."""
    if clip is None:
        return None
    if clip_by == "global_norm":
        return torch.nn.utils.clip_grad_norm_(params, clip)
    grads = [p.grad for p in params if p.grad is not None]
    if clip_by == "value":
        for g in grads:
            g.clamp_(-clip, clip)
    else:
        for g in grads:
            norm = g.norm(2).nan_to_num(neginf=-1e9, posinf=1e9)
            if norm > clip:
                g.mul_(clip / norm)
    return None

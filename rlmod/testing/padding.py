"""Checks that a recurrent module's loss never reads a padded step: for tests of a
Learner's loss over zero-padded sequence chunks (rlmod.core.sequence_batches), rlmod's own
(PPO, BC, MARWIL) and a user's custom one alike."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import torch

from rlmod.core.columns import Columns
from rlmod.core.sequence_batches import unpad

if TYPE_CHECKING:
    from rlmod.core.learner import Learner

Chunks = Mapping[str, torch.Tensor]


def with_more_padding(chunks: Chunks, steps: int = 4, fill: float = 1e3) -> dict[str, torch.Tensor]:
    """`chunks` (`[N, T, ...]` columns, `state_in` `[N, ...]`) with `steps` more padded steps
    in every chunk and one more chunk that is all padding; padded slots hold `fill`
    (garbage a loss must not read), `loss_mask` is False there, the new chunk's start
    state is random."""
    out: dict[str, torch.Tensor] = {}
    for key, value in chunks.items():
        if key == Columns.STATE_IN:
            out[key] = torch.cat([value, torch.randn(1, *value.shape[1:])])
            continue
        pad = torch.full((value.shape[0], steps, *value.shape[2:]), fill).to(value.dtype)
        if key == Columns.LOSS_MASK:
            pad = torch.zeros_like(pad)
        wider = torch.cat([value, pad], 1)
        empty = torch.full((1, *wider.shape[1:]), fill).to(value.dtype)
        if key == Columns.LOSS_MASK:
            empty = torch.zeros_like(empty)
        out[key] = torch.cat([wider, empty])
    return out


def loss_and_gradients(
    learner: Learner,
    module_id: str,
    chunks: Chunks,
    before: Callable[[], None] | None = None,
) -> tuple[float, list[torch.Tensor]]:
    """Module `module_id`'s loss on `chunks`, as the Learner computes it (forward over the
    padded sequences, padded steps removed, `compute_loss_for_module`), and its
    parameters' gradients; `before` runs first (e.g. to reset a running statistic)."""
    assert learner.module is not None, "build() the Learner first"
    module = learner.module[module_id]
    module.zero_grad()
    if before is not None:
        before()
    real, real_fwd = unpad(dict(chunks), module.forward_train(dict(chunks)))
    loss = learner.compute_loss_for_module(
        module_id=module_id,
        config=learner.config.get_config_for_module(module_id),
        batch=real,
        fwd_out=real_fwd,
    )
    loss.backward()
    grads = [p.grad.clone() for p in module.parameters() if p.grad is not None]
    return float(loss.detach()), grads


def assert_padding_is_never_read(
    learner: Learner,
    module_id: str,
    chunks: Chunks,
    before: Callable[[], None] | None = None,
) -> None:
    """AssertionError unless `chunks` and `with_more_padding(chunks)` give module
    `module_id` the same loss and the same (non-empty) gradients."""
    loss_a, grads_a = loss_and_gradients(learner, module_id, chunks, before)
    loss_b, grads_b = loss_and_gradients(learner, module_id, with_more_padding(chunks), before)
    assert abs(loss_a - loss_b) <= 1e-6 * max(abs(loss_a), 1e-12), (loss_a, loss_b)
    assert len(grads_a) == len(grads_b) > 0, "no gradients reached the module's parameters"
    for a, b in zip(grads_a, grads_b, strict=True):
        torch.testing.assert_close(a, b)

"""StackedTraining: a stacked group's `forward_train` on Learners as batched matmuls whose
activations live in a workspace reused from minibatch to minibatch, instead of `vmap`.

Used by `StackBucket.call_padded("forward_train", ...)` (rlmod.core.learner_stacks). It
applies where the module class declares `stacked_train_layers()` on itself (as
`supports_stacking`, not inherited): for each column `forward_train` returns, the layers
(`nn.Linear` with a bias, each optionally followed by `nn.Tanh` or `nn.ReLU`) whose
composition on the flattened observation is that column. Anything else runs the plain
path, `StackedGroup.call_padded` (vmap over the class's own methods).

Why: a minibatch of 1,000 [64, 64] PPO modules x 128 rows makes some twenty activation
and gradient tensors of 33 MB each. The CPU allocator gives them back to the system when
they are freed, so every minibatch faulted them in again as zeroed pages: the issue-17
4,000-env-step `train()` took 9.3M page faults and 52 of its 155 CPU seconds in the kernel
(Xeon host, 2 threads). Here the hidden activations and their gradients are written into
buffers kept for the update (`Workspace`), and the backward pass is written out (the same
kernels autograd runs: `bmm`, `tanh_backward`, sums). That `train()`, alternating fresh
processes on a quiet machine: 70.6 / 71.9 s before, 47.0 / 44.6 s after (0.94M page
faults; git show 91d3ad9:benchmarks/RESULTS.md, issue 17, session 23). Tested
against the vmap path in tests/core/test_stacked_train.py.

A workspace holds one forward's activations at a time: a second `forward_train` of the
same bucket before the first one's backward would overwrite what that backward needs, so
the backward checks and raises instead of computing a wrong gradient.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from rlmod.core.fast_tanh import tanh_
from rlmod.core.stacked import StackedGroup

_ACTIVATIONS: dict[type[nn.Module], str] = {nn.Tanh: "tanh", nn.ReLU: "relu"}


def train_layers(module: nn.Module) -> Mapping[str, Sequence[nn.Module]] | None:
    """`module.stacked_train_layers()` where its class declares that method itself, else
    None (a subclass may change its forwards, so it declares the method anew)."""
    method = type(module).__dict__.get("stacked_train_layers")
    return None if method is None else method(module)


@dataclass(frozen=True)
class _Layer:
    weight: str  # stacked parameter names, `[M, out, in]` and `[M, out]`
    bias: str
    activation: str | None  # "tanh", "relu" or None


class Workspace:
    """Buffers that keep their memory from one minibatch to the next, by key and shape,
    and a count of forwards per chain (the backward's check that its activations are
    still its own)."""

    def __init__(self) -> None:
        self._buffers: dict[tuple[str, str, int], torch.Tensor] = {}
        self.generation: dict[str, int] = {}

    def buffer(
        self, key: tuple[str, str, int], like: torch.Tensor, shape: tuple[int, ...]
    ) -> torch.Tensor:
        """An uninitialized tensor of `shape` (dtype and device of `like`), the same
        memory as the last call with this key and shape."""
        buf = self._buffers.get(key)
        if (
            buf is None
            or buf.shape != shape
            or buf.dtype != like.dtype
            or buf.device != like.device
        ):
            buf = like.new_empty(shape)
            self._buffers[key] = buf
        return buf


class _Chain(torch.autograd.Function):
    """`[M, K, in]` through `layers` (each module its own weights): forward and a written-out
    backward, hidden activations and their gradients in the workspace."""

    @staticmethod
    def forward(
        ctx: torch.autograd.function.FunctionCtx,
        x: torch.Tensor,  # type: ignore[override]
        layers: Sequence[_Layer],
        workspace: Workspace,
        tag: str,
        *params: torch.Tensor,
    ) -> torch.Tensor:
        hs = [x]
        h = x
        last = len(layers) - 1
        for i, layer in enumerate(layers):
            weight, bias = params[2 * i], params[2 * i + 1]
            shape = (x.shape[0], x.shape[1], weight.shape[1])
            # the chain's output is a fresh tensor (its user may keep it); hidden ones reuse
            out = x.new_empty(shape) if i == last else workspace.buffer((tag, "h", i), x, shape)
            torch.baddbmm(bias.unsqueeze(1), h, weight.transpose(1, 2), out=out)
            if layer.activation == "tanh":
                tanh_(out)  # the vectorised form: rlmod/core/fast_tanh.py
            elif layer.activation == "relu":
                out.relu_()
            hs.append(out)
            h = out
        generation = workspace.generation.get(tag, 0) + 1
        workspace.generation[tag] = generation
        ctx.save_for_backward(*params)
        ctx.hs, ctx.layers, ctx.workspace, ctx.tag, ctx.count = (  # type: ignore[attr-defined]
            hs,
            layers,
            workspace,
            tag,
            generation,
        )
        return h

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(
        ctx: torch.autograd.function.FunctionCtx,  # type: ignore[override]
        grad_out: torch.Tensor,
    ) -> tuple[torch.Tensor | None, ...]:
        hs: list[torch.Tensor] = ctx.hs  # type: ignore[attr-defined]
        layers: Sequence[_Layer] = ctx.layers  # type: ignore[attr-defined]
        workspace: Workspace = ctx.workspace  # type: ignore[attr-defined]
        tag: str = ctx.tag  # type: ignore[attr-defined]
        if workspace.generation.get(tag) != ctx.count:  # type: ignore[attr-defined]
            raise RuntimeError(
                f"forward_train of stacked modules ({tag}) ran again before the backward "
                "pass of its previous call, whose activations it overwrote. Call backward "
                "after each stacked forward_train, or turn the fast paths off with "
                "config.debugging(plain_paths=True)."
            )
        params = ctx.saved_tensors  # type: ignore[attr-defined]
        needs = ctx.needs_input_grad  # type: ignore[attr-defined]
        grads: list[torch.Tensor | None] = [None] * len(params)
        g = grad_out
        for i in reversed(range(len(layers))):
            out = hs[i + 1]
            activation = layers[i].activation
            if activation is not None:  # through the activation, into the workspace
                g_act = workspace.buffer((tag, "g", i), out, out.shape)
                if activation == "tanh":
                    torch.ops.aten.tanh_backward.grad_input(g, out, grad_input=g_act)
                else:
                    torch.ops.aten.threshold_backward.grad_input(g, out, 0.0, grad_input=g_act)
                g = g_act
            if needs[4 + 2 * i]:
                grads[2 * i] = torch.bmm(g.transpose(1, 2), hs[i])  # [M, out, in]
            if needs[5 + 2 * i]:
                grads[2 * i + 1] = g.sum(1)  # [M, out]
            if i > 0:
                g_in = workspace.buffer((tag, "gx", i), g, hs[i].shape)
                torch.bmm(g, params[2 * i], out=g_in)
                g = g_in
        grad_x = torch.bmm(g, params[0]) if needs[0] else None
        return (grad_x, None, None, None, *grads)


class StackedTraining:
    """`forward_train` of a StackedGroup's class on Learners, where the class declares its
    train layers (`StackedTraining.of(group)`, None otherwise). Off with every fast path
    (rlmod.fast_paths: no stacking at all).
    """

    def __init__(self, chains: dict[str, list[_Layer]]) -> None:
        self.chains = chains

    @classmethod
    def of(cls, group: StackedGroup) -> StackedTraining | None:
        """The fast path for `group`'s class, or None: no declared train layers, or a layer
        that is not `nn.Linear` with a bias (optionally followed by tanh or ReLU)."""
        template = group.modules[0]
        declared = train_layers(template)
        if not declared:
            return None
        name_of = {id(sub): name for name, sub in template.named_modules()}
        chains: dict[str, list[_Layer]] = {}
        for column, layers in declared.items():
            chain: list[_Layer] = []
            for layer in layers:
                if isinstance(layer, nn.Linear) and layer.bias is not None:
                    prefix = name_of.get(id(layer))
                    if prefix is None or f"{prefix}.weight" not in group.params:
                        return None
                    chain.append(_Layer(f"{prefix}.weight", f"{prefix}.bias", None))
                elif type(layer) in _ACTIVATIONS and chain and chain[-1].activation is None:
                    chain[-1] = _Layer(chain[-1].weight, chain[-1].bias, _ACTIVATIONS[type(layer)])
                else:
                    return None
            if not chain:
                return None
            chains[column] = chain
        return cls(chains)

    def __call__(
        self, obs: torch.Tensor, params: Mapping[str, torch.Tensor], workspace: Workspace
    ) -> dict[str, torch.Tensor]:
        """Each declared column for padded observations `[M, K, ...]`, module i's rows
        through module i's rows of `params` (name -> `[M, ...]`)."""
        x = obs.flatten(2) if obs.dim() > 3 else obs
        return {
            column: _Chain.apply(
                x,
                chain,
                workspace,
                column,
                *[t for layer in chain for t in (params[layer.weight], params[layer.bias])],
            )
            for column, chain in self.chains.items()
        }

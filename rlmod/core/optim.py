"""Adam on torch's fused Adam kernel: the optimizer every Learner uses per module.

Why not torch.optim.Adam: its constructor imports torch._dynamo (2.0 s on torch 2.13 on
the project's 2-core machine), and its state dict nests Python objects. This one keeps
plain tensors (checkpoints store them as safetensors) and steps all of a module's
parameters in one call of the kernel `torch.optim.Adam(fused=True)` runs on CPU, which
torch has had since 2.4 (the floor pyproject.toml declares).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import torch


class Adam:
    """Adam (Kingma & Ba 2015, Algorithm 1) with bias correction.

    `param_groups[0]["lr"]` is read at every step, so schedules set it there, as with
    torch.optim optimizers.
    """

    def __init__(self, params: Iterable[torch.nn.Parameter], *, lr: float,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8) -> None:
        self.params = list(params)
        self.param_groups: list[dict[str, Any]] = [{"lr": lr, "params": self.params}]
        self.betas = betas
        self.eps = eps
        self.step_count = 0
        self.exp_avg = [torch.zeros_like(p) for p in self.params]
        self.exp_avg_sq = [torch.zeros_like(p) for p in self.params]

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        with_grad = [i for i, p in enumerate(self.params) if p.grad is not None]
        if not with_grad:
            return
        params: list[torch.Tensor] = [self.params[i] for i in with_grad]
        grads: list[torch.Tensor] = [g for i in with_grad if (g := self.params[i].grad) is not None]
        m = [self.exp_avg[i] for i in with_grad]
        v = [self.exp_avg_sq[i] for i in with_grad]
        b1, b2 = self.betas
        self.step_count += 1
        # torch's fused Adam kernel (what torch.optim.Adam(fused=True) runs): one call for
        # all parameters, 4x faster than the seven foreach kernels of the same update.
        # It reads one step count per parameter; one shared tensor serves them all.
        step = torch.tensor(float(self.step_count))
        torch._fused_adam_(params, grads, m, v, [], [step] * len(params),
                           lr=self.param_groups[0]["lr"], beta1=b1, beta2=b2,
                           weight_decay=0.0, eps=self.eps, amsgrad=False, maximize=False)

    def state_dict(self) -> dict[str, Any]:
        """Plain tensors and numbers only."""
        return {
            "step": self.step_count,
            "lr": self.param_groups[0]["lr"],
            "exp_avg": [t.clone() for t in self.exp_avg],
            "exp_avg_sq": [t.clone() for t in self.exp_avg_sq],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if len(state["exp_avg"]) != len(self.params):
            raise ValueError(
                f"Optimizer state has {len(state['exp_avg'])} tensors for "
                f"{len(self.params)} parameters; it was saved for another module."
            )
        self.step_count = int(state["step"])
        self.param_groups[0]["lr"] = float(state["lr"])
        with torch.no_grad():
            for dst, src in zip(self.exp_avg + self.exp_avg_sq,
                                list(state["exp_avg"]) + list(state["exp_avg_sq"]), strict=True):
                dst.copy_(torch.as_tensor(src))


def grad_norm(params: list[torch.nn.Parameter]) -> torch.Tensor:
    """The global L2 norm of the gradients (0 with none), without changing them: the
    finiteness check of Learners that do not clip (those that do use the norm
    `torch.nn.utils.clip_grad_norm_` returns)."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return torch.tensor(0.0)
    return torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))


_ONE = torch.ones(1)


def update_is_finite(loss: torch.Tensor, norm: torch.Tensor | None,
                     params: list[torch.nn.Parameter]) -> bool:
    """Whether a module's minibatch may step: its loss and gradients are all finite.

    The Learner's numerical guard, once per module and minibatch, so it is kept to the
    cheapest kernels (CPU, one thread, PPO's 12 tensors of a 64x64 MLP, this project's
    host): the loss and a gradient norm that clipping computed anyway are read as Python
    floats (0.4 us each; `torch.isfinite` on a 0-d tensor is a composite of several
    kernels, 8 us); without clipping, one pass of torch's foreach non-finite check (the
    kernel of `torch.amp.GradScaler`, with a scale of 1: the gradients stay bit-identical)
    takes 7 us where the global norm took 37 us (tight loop; inside a PPO update both take
    2-3x that: 43 against 65-100 us, see benchmarks/RESULTS.md, issue 11). A NaN or inf in any gradient entry makes
    that entry's norm, and the global norm, NaN or inf, so both routes decide the same.
    """
    if not math.isfinite(loss.item()):
        return False
    if norm is not None:
        return math.isfinite(norm.item())
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return True
    found = torch.zeros(1, device=grads[0].device)
    one = _ONE if grads[0].device.type == "cpu" else _ONE.to(grads[0].device)
    torch._amp_foreach_non_finite_check_and_unscale_(grads, found, one)
    return found.item() == 0.0

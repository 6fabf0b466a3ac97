"""The floor under issue 17's 4,000-env-step `train()`: the smallest loop that does the
Learner's work, timed beside rlmod's `Learner.update()` in one process.

The work (RLlib's PPO defaults, 1,000 modules of `fcnet_hiddens` [64, 64] on CartPole's
spaces): 30 epochs of 12 minibatches of 128 rows per module, that is 12 x 30 x 128,000 =
46.1M row passes, each through a policy MLP (4 -> 64 -> 64 -> 2) and a value MLP
(4 -> 64 -> 64 -> 1) forward and backward, plus one Adam step of every module per
minibatch. The floor runs exactly that and nothing else: parameters as `[M, ...]` leaf
tensors, `bmm` + bias + tanh per layer, a PPO-shaped loss (log-softmax, ratio, clipped
surrogate, entropy, KL to the old logits, value loss, per-module means), one backward
pass, one `torch._fused_adam_` call over all parameters; the minibatch rows are one
gather per epoch (a shuffle) and views per minibatch; each loop also runs with its hidden
activations in buffers kept across minibatches (ReusedMLP: no fresh pages per minibatch,
as rlmod.core.stacked_train does). `--chunk` runs each minibatch as
forward + backward per slice of that many modules (modules are independent, so the
gradients are the same), keeping the activations in cache.

rlmod's side: a PPO Learner built from the issue-17 config (benchmarks/_stacked_scale.py)
gets a synthetic batch of the same size (`--rows-per-module` rows each; 1,536 = 12 x 128)
and runs `update()`; its GAE connector is timed alone on the same batch, so "SGD" is
update minus GAE, the part the floor does.

    python benchmarks/investigations/stacked_learn_floor.py [--modules 1000] [--epochs 30] [--threads 1]
        [--chunk 0 125] [--skip-rlmod] [--rlmod-auto-threads]

rlmod runs with `num_threads_per_learner=--threads` (the floor's count) unless
`--rlmod-auto-threads` leaves it at None (rlmod's default).
"""

from __future__ import annotations

import argparse
import time

import _suite_path  # noqa: F401  (benchmarks/ on sys.path)
import gymnasium as gym
import numpy as np
import torch
from _common import header, table

from rlmod.algorithms.ppo import PPOConfig

BOX = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
ACT = gym.spaces.Discrete(2)
HIDDEN = 64
CLIP, VF_CLIP, VF_COEFF, ENT_COEFF, KL_COEFF = 0.3, 10.0, 1.0, 0.0, 0.2


def floor_params(m: int) -> list[torch.Tensor]:
    """Policy and value MLPs of `m` modules: (weight `[M, in, out]`, bias `[M, 1, out]`)
    per layer, policy first."""
    shapes = [
        (4, HIDDEN),
        (HIDDEN, HIDDEN),
        (HIDDEN, 2),
        (4, HIDDEN),
        (HIDDEN, HIDDEN),
        (HIDDEN, 1),
    ]
    out = []
    for fan_in, fan_out in shapes:
        out.append((torch.randn(m, fan_in, fan_out) / fan_in**0.5).requires_grad_())
        out.append(torch.zeros(m, 1, fan_out).requires_grad_())
    return out


def mlp(x: torch.Tensor, layers: list[torch.Tensor]) -> torch.Tensor:
    """`[M, K, in]` through tanh hidden layers and a linear output, one bmm per layer."""
    for i in range(0, len(layers), 2):
        x = torch.bmm(x, layers[i]) + layers[i + 1]
        if i + 2 < len(layers):
            x = torch.tanh(x)
    return x


class ReusedMLP(torch.autograd.Function):
    """`mlp` with its hidden activations and their gradients in buffers that keep their
    memory from one minibatch to the next (`buffers`, by key): no fresh pages per
    minibatch. The same kernels as autograd's backward of `mlp`."""

    @staticmethod
    def forward(ctx, x, buffers, tag, *layers):  # type: ignore[override]
        hs, n = [x], len(layers) // 2
        for i in range(n):
            w, b = layers[2 * i], layers[2 * i + 1]
            shape = (x.shape[0], x.shape[1], w.shape[2])
            out = x.new_empty(shape) if i == n - 1 else _buffer(buffers, (tag, "h", i), shape)
            torch.bmm(hs[-1], w, out=out).add_(b)
            hs.append(out.tanh_() if i < n - 1 else out)
        ctx.hs, ctx.buffers, ctx.tag = hs, buffers, tag
        ctx.save_for_backward(*layers)
        return hs[-1]

    @staticmethod
    def backward(ctx, g):  # type: ignore[override]
        layers, hs = ctx.saved_tensors, ctx.hs
        grads: list[torch.Tensor | None] = [None] * len(layers)
        for i in reversed(range(len(layers) // 2)):
            if i < len(layers) // 2 - 1:
                g = torch.ops.aten.tanh_backward.grad_input(
                    g, hs[i + 1], grad_input=_buffer(ctx.buffers, (ctx.tag, "g", i), g.shape)
                )
            grads[2 * i] = torch.bmm(hs[i].transpose(1, 2), g)
            grads[2 * i + 1] = g.sum(1, keepdim=True)
            if i > 0:
                g = torch.bmm(
                    g,
                    layers[2 * i].transpose(1, 2),
                    out=_buffer(ctx.buffers, (ctx.tag, "gx", i), hs[i].shape),
                )
        return (None, None, None, *grads)


def _buffer(buffers: dict, key: tuple, shape: tuple[int, ...]) -> torch.Tensor:
    if key not in buffers or buffers[key].shape != shape:
        buffers[key] = torch.empty(shape)
    return buffers[key]


def floor_loss(
    params: list[torch.Tensor], cols: dict[str, torch.Tensor], buffers: dict | None = None
) -> torch.Tensor:
    """PPO's clipped loss with value and KL terms, per module mean, summed: `[M, K]` rows;
    with `buffers`, the MLPs keep their activations there (ReusedMLP)."""
    if buffers is None:
        logits = mlp(cols["obs"], params[:6])  # [M, K, 2]
        values = mlp(cols["obs"], params[6:]).squeeze(-1)  # [M, K]
    else:
        logits = ReusedMLP.apply(cols["obs"], buffers, "pi", *params[:6])
        values = ReusedMLP.apply(cols["obs"], buffers, "vf", *params[6:]).squeeze(-1)
    logp_all = torch.log_softmax(logits, -1)
    logp = logp_all.gather(-1, cols["actions"].unsqueeze(-1)).squeeze(-1)
    ratio = torch.exp(logp - cols["action_logp"])
    adv = cols["advantages"]
    surrogate = torch.min(ratio * adv, ratio.clamp(1 - CLIP, 1 + CLIP) * adv)
    probs = logp_all.exp()
    entropy = -(probs * logp_all).sum(-1)
    old = torch.log_softmax(cols["action_dist_inputs"], -1)
    kl = (old.exp() * (old - logp_all)).sum(-1)
    vf = (values - cols["value_targets"]).pow(2).clamp(max=VF_CLIP)
    per_module = (-surrogate + VF_COEFF * vf - ENT_COEFF * entropy + KL_COEFF * kl).mean(1)
    return per_module.sum()


def floor_update(
    m: int, rows: int, size: int, epochs: int, chunk: int, seed: int = 0, reuse: bool = False
) -> tuple[float, float]:
    """(wall, CPU) seconds of the floor loop: `epochs` x (rows // size) minibatches of `size` rows per
    module, `m` modules; `chunk` > 0: forward + backward per slice of that many modules;
    `reuse`: activations in buffers kept across minibatches (ReusedMLP)."""
    gen = torch.Generator().manual_seed(seed)
    params = floor_params(m)
    exp_avg = [torch.zeros_like(p) for p in params]
    exp_avg_sq = [torch.zeros_like(p) for p in params]
    batch = {
        "obs": torch.randn(m, rows, 4, generator=gen),
        "actions": torch.randint(0, 2, (m, rows), generator=gen),
        "action_logp": torch.full((m, rows), float(np.log(0.5))),
        "action_dist_inputs": torch.zeros(m, rows, 2),
        "advantages": torch.randn(m, rows, generator=gen),
        "value_targets": torch.randn(m, rows, generator=gen),
    }
    steps = rows // size
    chunk = chunk or m
    buffers: dict | None = {} if reuse else None
    step_count = 0
    t, c = time.perf_counter(), time.process_time()
    for _ in range(epochs):
        perm = torch.argsort(torch.rand(m, rows, generator=gen), dim=1)  # per module
        shuffled = {
            c: torch.take_along_dim(v, perm.view(m, rows, *[1] * (v.dim() - 2)), dim=1)
            for c, v in batch.items()
        }
        for s in range(steps):
            for p in params:
                p.grad = None
            for a in range(0, m, chunk):
                cols = {c: v[a : a + chunk, s * size : (s + 1) * size] for c, v in shuffled.items()}
                loss = floor_loss([p[a : a + chunk] for p in params], cols, buffers)
                loss.backward()
            step_count += 1
            step = torch.tensor(float(step_count))
            with torch.no_grad():
                torch._fused_adam_(
                    params,
                    [p.grad for p in params],
                    exp_avg,
                    exp_avg_sq,
                    [],
                    [step] * len(params),
                    lr=5e-5,
                    beta1=0.9,
                    beta2=0.999,
                    weight_decay=0.0,
                    eps=1e-8,
                    amsgrad=False,
                    maximize=False,
                )
    return time.perf_counter() - t, time.process_time() - c


def rlmod_update(m: int, rows: int, epochs: int, threads: int | None) -> dict[str, float]:
    """Seconds of rlmod's `Learner.update()` and of its GAE connector alone, on a synthetic
    batch of `rows` rows per module (the issue-17 config, `epochs` epochs)."""
    from _stacked_setups import synthetic_batch

    ids = [f"a{i}" for i in range(m)]
    config = (
        PPOConfig()
        .multi_agent(policies=set(ids), policy_mapping_fn=lambda aid, ep: aid)
        .rl_module(model_config={"fcnet_hiddens": [HIDDEN, HIDDEN]})
        .training(train_batch_size=4000, minibatch_size=128, num_epochs=epochs)
        .learners(num_threads_per_learner=threads)
        .debugging(seed=0)
    )
    spaces = {"__env__": (BOX, ACT), **{mid: (BOX, ACT) for mid in ids}}
    spec = config.get_multi_rl_module_spec(spaces=spaces, inference_only=False)
    learner = config.get_default_learner_class()(config=config, module_spec=spec)
    learner.build()
    batch = synthetic_batch(ids, rows, episode_len=128)
    t, c = time.perf_counter(), time.process_time()
    learner._learner_connector(learner._to_tensors(batch), rl_module=learner.module)
    gae_s, gae_cpu = time.perf_counter() - t, time.process_time() - c
    t, c = time.perf_counter(), time.process_time()
    learner.update(batch)
    update_s, update_cpu = time.perf_counter() - t, time.process_time() - c
    return {
        "update_s": update_s,
        "gae_s": gae_s,
        "sgd_s": update_s - gae_s,
        "sgd_cpu_s": update_cpu - gae_cpu,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--modules", type=int, default=1000)
    parser.add_argument("--rows-per-module", type=int, default=1536)
    parser.add_argument("--minibatch-size", type=int, default=128)
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--chunk",
        type=int,
        nargs="+",
        default=[0, 125],
        help="modules per forward+backward slice in the floor (0: all)",
    )
    parser.add_argument("--skip-rlmod", action="store_true")
    parser.add_argument(
        "--rlmod-auto-threads",
        action="store_true",
        help="rlmod with num_threads_per_learner=None (auto) instead of --threads",
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    m, rows, size = args.modules, args.rows_per_module, args.minibatch_size
    passes = m * size * (rows // size) * args.epochs
    header(
        f"Issue 17 learn floor: {m} modules, {rows // size} minibatches x {args.epochs} "
        f"epochs x {m * size:,} rows = {passes / 1e6:.1f}M row passes, "
        f"{args.threads} torch thread(s)"
    )
    results = []
    if not args.skip_rlmod:
        r = rlmod_update(m, rows, args.epochs, None if args.rlmod_auto_threads else args.threads)
        results.append(
            {
                "loop": "rlmod Learner.update()",
                "wall s": f"{r['sgd_s']:.1f}",
                "CPU s": f"{r['sgd_cpu_s']:.1f}",
                "M row passes per CPU s": f"{passes / r['sgd_cpu_s'] / 1e6:.3f}",
                "note": f"SGD only: update {r['update_s']:.1f} s - GAE {r['gae_s']:.1f} s",
            }
        )
    for chunk in args.chunk:
        for reuse in (False, True):
            s, cpu = floor_update(m, rows, size, args.epochs, chunk, reuse=reuse)
            results.append(
                {
                    "loop": f"floor, chunk {chunk or m}",
                    "wall s": f"{s:.1f}",
                    "CPU s": f"{cpu:.1f}",
                    "M row passes per CPU s": f"{passes / cpu / 1e6:.3f}",
                    "note": "activations in reused buffers" if reuse else "",
                }
            )
    table(results, ["loop", "wall s", "CPU s", "M row passes per CPU s", "note"])
    print(
        "CPU s: the process's CPU time (user + system, all threads): on a shared machine "
        "it moves less with other jobs than wall time does."
    )


if __name__ == "__main__":
    main()

"""One tuned CartPole PPO update through `Learner.update` against a plain torch loop of the
same math (the floor): what the Learner adds on top of the minibatch SGD itself.

The batch is a real one (after 10 iterations of `TUNED["CartPole-v1"]`, seed 0); the floor
runs the same module, rlmod's Adam, the same shuffling, forward pass, clipped surrogate,
value loss, torch's gradient clipping and Adam step per minibatch, as CleanRL writes it,
once without and once with PPO's logged diagnostics (KL, entropy, explained variance,
clip fraction, computed per minibatch). CPU seconds of this process (less moved by other
load than wall time), the least of `--repeats` runs, `--rounds` rounds. To compare two
checkouts, run it with each on PYTHONPATH.

    PYTHONPATH=. python benchmarks/investigations/ppo_update_floor.py [--rounds 3] [--repeats 6]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import _suite_path  # noqa: F401  (benchmarks/ on sys.path)
import numpy as np
import torch
from _common import header, table

from rlmod.algorithms.ppo import PPOConfig
from rlmod.core.columns import Columns
from rlmod.core.optim import Adam
from rlmod.tuned import TUNED


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=6)
    args = parser.parse_args()
    header("One TUNED CartPole PPO update: Learner.update against a plain torch loop")
    settings = TUNED["CartPole-v1"]
    config = PPOConfig().environment("CartPole-v1").debugging(seed=0)
    for key, value in settings.items():
        setattr(config, key, value)
    algo = config.build_algo()
    for _ in range(10):
        algo.train()
    assert algo.env_runner_group is not None
    episodes = algo.env_runner_group.sample()
    learner = algo.learner_group.learner
    state = learner.get_state()
    module_id = "default_policy"
    batch = learner._learner_connector(learner._to_tensors(episodes), rl_module=learner.module)[
        module_id
    ]
    assert learner.module is not None
    module = learner.module[module_id]
    params = list(module.parameters())
    optimizer = Adam(params, lr=settings["lr"])
    rng = np.random.default_rng(0)
    rows, size = batch[Columns.OBS].shape[0], settings["minibatch_size"]
    clip, clip_grad = settings["clip_param"], settings["grad_clip"]
    vf_coeff = settings["vf_loss_coeff"]

    def update() -> None:
        learner.set_state(state)
        learner.update(episodes, timesteps={"num_env_steps_sampled_lifetime": 10_000})

    def floor(diagnostics: bool) -> None:
        logged: dict[str, list[torch.Tensor]] = {}
        for _ in range(settings["num_epochs"]):
            perm = torch.from_numpy(rng.permutation(rows))
            shuffled = {c: v[perm] for c, v in batch.items()}
            for i in range(rows // size):
                mb = {c: v[i * size : (i + 1) * size] for c, v in shuffled.items()}
                obs, targets = mb[Columns.OBS], mb[Columns.VALUE_TARGETS]
                logits = module.pi(module.encoder(obs)).log_softmax(-1)
                logp = logits.gather(-1, mb[Columns.ACTIONS].unsqueeze(-1)).squeeze(-1)
                ratio = torch.exp(logp - mb[Columns.ACTION_LOGP])
                adv = mb[Columns.ADVANTAGES]
                surrogate = torch.min(ratio * adv, ratio.clamp(1 - clip, 1 + clip) * adv)
                values = module.vf(module.vf_encoder(obs)).squeeze(-1)
                vf_loss = (values - targets).pow(2).mean()
                loss = -surrogate.mean() + vf_coeff * vf_loss
                optimizer.zero_grad()
                loss.backward()
                norm = torch.nn.utils.clip_grad_norm_(params, clip_grad)
                optimizer.step()
                if diagnostics:
                    with torch.no_grad():
                        old = mb[Columns.ACTION_DIST_INPUTS].log_softmax(-1)
                        stats = {
                            "loss": loss,
                            "vf_loss": vf_loss,
                            "norm": norm,
                            "kl": (old.exp() * (old - logits)).sum(-1).mean(),
                            "entropy": -(logits.exp() * logits).sum(-1).mean(),
                            "ev": 1 - (targets - values).var() / targets.var().clamp_min(1e-8),
                            "clip_fraction": ((ratio - 1).abs() > clip).float().mean(),
                        }
                    for key, value in stats.items():
                        logged.setdefault(key, []).append(value.detach())
        {k: float(torch.stack(v).mean()) for k, v in logged.items()}

    def cpu_ms(fn: Callable[[], None]) -> float:
        best = float("inf")
        for _ in range(args.repeats):
            start = time.process_time()
            fn()
            best = min(best, time.process_time() - start)
        return best * 1e3

    out = []
    for r in range(args.rounds):
        upd = cpu_ms(update)
        bare = cpu_ms(lambda: floor(False))
        diag = cpu_ms(lambda: floor(True))
        out.append(
            {
                "round": r,
                "Learner.update ms": f"{upd:.1f}",
                "floor ms": f"{bare:.1f}",
                "floor + diagnostics ms": f"{diag:.1f}",
                "update / floor": f"{upd / bare:.2f}",
                "update / floor + diag.": f"{upd / diag:.2f}",
            }
        )
    table(out, list(out[0]))
    print(
        f"{rows} rows, minibatches of {size}, {settings['num_epochs']} epochs; CPU ms, "
        f"least of {args.repeats}"
    )
    algo.stop()


if __name__ == "__main__":
    main()

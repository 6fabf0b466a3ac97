"""DQN on CartPole: one gradient step's floor beside rlmod's and Stable-Baselines3's.

With `TUNED_DQN` (the zoo's settings: 256x256 ReLU Q-network, batch 64, 128 gradient
steps per 256 env steps, target copied every 10 env steps, no double Q, no dueling head),
times per gradient step, in one process, interleaved, CPU time, one torch thread:

- floor: a plain torch loop of the same math and nothing else: the target network's
  values for all 128 minibatches in one pass (the target is constant between target
  updates), then per step the Q-network on 64 rows, smooth L1 loss, backward, gradient
  clipping (norm 40) and a fused Adam step; inputs are tensors made in advance;
- rlmod: `DQNLearner.update(batch of 128 x 64 rows, num_gradient_steps=128)`, what one
  training iteration calls (numpy to tensors, the guard, logs and results included);
- SB3: `DQN.train(gradient_steps=128, batch_size=64)` on a filled buffer (its replay
  sampling included, which rlmod's row above leaves out: one `sample` of 8,192 rows).

    python benchmarks/investigations/dqn_floor.py [--rounds 4]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import _suite_path  # noqa: F401  (benchmarks/ on sys.path)
import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from _common import header, table
from torch import nn

from rlmod.algorithms.dqn import DQNConfig, DQNLearner
from rlmod.core.columns import DEFAULT_MODULE_ID, Columns
from rlmod.replay import N_STEP, WEIGHTS
from rlmod.tuned import TUNED_DQN

STEPS, BATCH = 128, 64


def _mlp() -> nn.Sequential:
    return nn.Sequential(
        nn.Linear(4, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 2)
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    torch.set_num_threads(1)
    header(f"DQN gradient step floor: {STEPS} steps of {BATCH} rows, 256x256 Q-network")
    config = DQNConfig()
    for k, v in TUNED_DQN["CartPole-v1"].items():
        setattr(config, k, v)
    box = gym.spaces.Box(-5.0, 5.0, (4,), np.float32)
    spec = config.get_multi_rl_module_spec(
        spaces={DEFAULT_MODULE_ID: (box, gym.spaces.Discrete(2))}
    )
    learner = DQNLearner(config=config, module_spec=spec)
    learner.build()
    rng = np.random.default_rng(0)
    n = STEPS * BATCH
    cols = {
        Columns.OBS: rng.normal(size=(n, 4)).astype(np.float32),
        Columns.ACTIONS: rng.integers(0, 2, n),
        Columns.REWARDS: np.ones(n, np.float32),
        Columns.NEXT_OBS: rng.normal(size=(n, 4)).astype(np.float32),
        Columns.TERMINATEDS: rng.random(n) < 0.02,
        N_STEP: np.ones(n, np.int32),
        WEIGHTS: np.ones(n, np.float32),
    }
    env_steps = iter(range(100_000, 10**9, 256))

    def rlmod_update() -> None:
        learner.update(
            {DEFAULT_MODULE_ID: cols},
            num_gradient_steps=STEPS,
            timesteps={"num_env_steps_sampled_lifetime": next(env_steps)},
        )

    torch.manual_seed(0)
    q, q_target = _mlp(), _mlp().requires_grad_(False)
    opt = torch.optim.Adam(q.parameters(), lr=2.3e-3, fused=True)
    params = list(q.parameters())
    t = {c: torch.from_numpy(v) for c, v in cols.items()}

    def floor() -> None:
        with torch.no_grad():
            for a, b in zip(q_target.parameters(), params, strict=True):
                a.copy_(b)
            q_next = q_target(t[Columns.NEXT_OBS]).max(-1).values
            target = t[Columns.REWARDS] + 0.99 * (~t[Columns.TERMINATEDS]) * q_next
        for i in range(STEPS):
            rows = slice(i * BATCH, (i + 1) * BATCH)
            q_taken = (
                q(t[Columns.OBS][rows])
                .gather(-1, t[Columns.ACTIONS][rows].unsqueeze(-1))
                .squeeze(-1)
            )
            loss = F.smooth_l1_loss(q_taken, target[rows])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 40.0)
            opt.step()

    from stable_baselines3 import DQN

    model = DQN(
        "MlpPolicy",
        "CartPole-v1",
        learning_rate=2.3e-3,
        batch_size=64,
        buffer_size=100_000,
        learning_starts=1000,
        gamma=0.99,
        target_update_interval=10,
        train_freq=256,
        gradient_steps=128,
        exploration_fraction=0.16,
        exploration_final_eps=0.04,
        policy_kwargs={"net_arch": [256, 256]},
        seed=0,
    )
    model.learn(3000)
    torch.set_num_threads(1)
    cases: dict[str, Callable[[], None]] = {
        "floor: plain torch loop": floor,
        "rlmod DQNLearner.update(num_gradient_steps=128)": rlmod_update,
        "SB3 DQN.train(gradient_steps=128)": lambda: model.train(STEPS, BATCH),
    }
    for fn in cases.values():
        fn()
    best: dict[str, float] = {}
    for r in range(args.rounds):
        for name in list(cases) if r % 2 == 0 else list(reversed(cases)):
            start = time.process_time()
            cases[name]()
            cases[name]()
            ms = (time.process_time() - start) / (2 * STEPS) * 1e3
            best[name] = min(best.get(name, float("inf")), ms)
    floor_ms, sb3_ms = best["floor: plain torch loop"], best["SB3 DQN.train(gradient_steps=128)"]
    table(
        [
            {
                "what": k,
                "ms per gradient step (best)": f"{v:.3f}",
                "vs floor": f"{v / floor_ms:.2f}",
                "vs SB3": f"{v / sb3_ms:.2f}",
            }
            for k, v in best.items()
        ],
        ["what", "ms per gradient step (best)", "vs floor", "vs SB3"],
    )
    print(f"CPU time, best of {args.rounds} interleaved rounds of 2 x {STEPS} steps.")


if __name__ == "__main__":
    main()

"""The 1,000-module setups shared by multi_module_scale.py's stacked-modules children and the
investigations of that figure (investigations/stacked_acting.py, learner_stacking.py,
stacked_learn_floor.py): a MultiAgentEnvRunner over many modules, and a many-module PPO
Learner with a synthetic batch.
"""

from __future__ import annotations

import time

import gymnasium as gym
import numpy as np

from rlmod.algorithms.ppo import PPOConfig
from rlmod.env import MultiAgentEnvRunner
from rlmod.testing import MultiAgentCartPole
from rlmod.tuned import FAST_PPO

AGENTS = 1000
BOX = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
ACT = gym.spaces.Discrete(2)


def make_runner(
    num_modules: int, num_envs: int, steps: int, agents: int = AGENTS, threads: int | None = None
) -> MultiAgentEnvRunner:
    """`agents` MultiAgentCartPole agents mapped round-robin to `num_modules` [64, 64]
    modules, sampled to steady state.
    `threads`: `num_threads_per_learner` (None: 1; call `torch.set_num_threads(threads or
    1)` first, as Algorithm.setup does)."""
    config = (
        PPOConfig()
        .environment(MultiAgentCartPole, env_config={"num_agents": agents})
        .env_runners(num_envs_per_env_runner=num_envs)
        .multi_agent(
            policies={f"p{i}" for i in range(num_modules)},
            policy_mapping_fn=lambda aid, episode: f"p{aid % num_modules}",
        )
        .rl_module(model_config={"fcnet_hiddens": [64, 64]})
        .learners(num_threads_per_learner=threads)
        .debugging(seed=0)
    )
    runner = MultiAgentEnvRunner(config=config)
    runner.sample(num_timesteps=num_envs * steps)  # steady state first
    runner.get_metrics()
    return runner


def make_learner(num_modules: int, *, stack: bool, seed: int = 0):
    """A built PPO Learner with `num_modules` modules ("m0", ...) of CartPole's spaces."""
    ids = [f"m{i}" for i in range(num_modules)]
    config = (
        PPOConfig()
        .update_from_dict(FAST_PPO)
        .multi_agent(
            policies=set(ids), policy_mapping_fn=lambda aid, ep, **kw: aid, stack_modules=stack
        )
        .debugging(seed=seed)
    )
    spaces = {"__env__": (BOX, ACT), **{m: (BOX, ACT) for m in ids}}
    spec = config.get_multi_rl_module_spec(spaces=spaces, inference_only=False)
    learner = config.get_default_learner_class()(config=config, module_spec=spec)
    learner.build()
    return learner, ids


def synthetic_batch(
    ids: list[str], rows_per_module: int, *, seed: int = 0, episode_len: int = 32
) -> dict[str, dict[str, np.ndarray]]:
    """What a multi-agent EnvRunner's sample holds per module: rows in episodes of
    `episode_len` steps (terminated at their end), random observations and actions."""
    rng = np.random.default_rng(seed)
    n = rows_per_module
    ends = (np.arange(n) % episode_len) == episode_len - 1
    ends[-1] = True
    out = {}
    for mid in ids:
        out[mid] = {
            "obs": rng.standard_normal((n, 4)).astype(np.float32),
            "new_obs": rng.standard_normal((n, 4)).astype(np.float32),
            "actions": rng.integers(0, 2, n).astype(np.int64),
            "action_logp": np.full(n, np.log(0.5), np.float32),
            "action_dist_inputs": np.zeros((n, 2), np.float32),
            "rewards": np.ones(n, np.float32),
            "terminateds": ends.copy(),
            "truncateds": np.zeros(n, bool),
            "seq_ends": ends.copy(),
        }
    return out


def learner_update_rows_per_s(
    num_modules: int, total_rows: int, *, stack: bool = True, repeats: int = 3
) -> float:
    """Agent rows per second of `Learner.update()` (best of `repeats`, after a warm-up):
    `total_rows` rows spread evenly over `num_modules` modules."""
    return learner_update_timings(num_modules, total_rows, stack=stack, repeats=repeats)[
        "rows_per_s"
    ]


def learner_update_timings(
    num_modules: int, total_rows: int, *, stack: bool = True, repeats: int = 3
) -> dict[str, float]:
    """Seconds and rows per second of `Learner.update()` (best of `repeats`, after a
    warm-up) and of its SGD part alone (update minus the GAE learner connector, timed
    separately on the same batch)."""
    learner, ids = make_learner(num_modules, stack=stack)
    batch = synthetic_batch(ids, max(1, total_rows // num_modules))
    rows = sum(len(b["obs"]) for b in batch.values())
    learner.update(batch)  # warm-up
    update_s, gae_s = [], []
    for _ in range(repeats):
        t = time.perf_counter()
        learner._learner_connector(learner._to_tensors(batch), rl_module=learner.module)
        gae_s.append(time.perf_counter() - t)
        t = time.perf_counter()
        learner.update(batch)
        update_s.append(time.perf_counter() - t)
    best, gae = min(update_s), min(gae_s)
    return {
        "rows": rows,
        "update_s": best,
        "gae_s": gae,
        "rows_per_s": rows / best,
        "sgd_rows_per_s": rows / max(best - gae, 1e-9),
        "groups": len(learner.stacked.stacks),
    }

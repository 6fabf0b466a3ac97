"""Example: a learner-only intrinsic curiosity model (ICM) lets PPO solve sparse-reward tasks.

The seed's own example of a `learner_only` module (Pathak et al. 2017). The task is a 12x12
FrozenLake with only frozen tiles, start top-left, goal bottom-right, no slipping and at most
22 steps per episode, exactly the shortest path: a uniformly random policy reaches the goal
with probability C(22, 11) / 4^22 (about 4e-8) per episode, so plain PPO never sees a reward.
With curiosity, the ICM's forward-model error rewards transitions it cannot predict yet,
which pushes the policy ever further from the start until it finds the goal.

The 22-step limit is part of this task, so it ends episodes as termination
(`rlmod.env.wrappers.make_with_terminal_time_limit`): gymnasium's TimeLimit reports
truncation, and GAE would bootstrap V(s) past the last step. That made-up future value
is the only signal plain PPO gets here, and with advantage normalization it was enough to
steer plain PPO onto the goal's path by chance (in 1-2 of 5 seeds within 70k steps); it
also made the curiosity still to come after the limit compete with the goal's reward.

The ICM lives on the Learner only: `RLModuleSpec(learner_only=True)` keeps it off the
EnvRunners (which sample with the policy alone, one-hot observations through the default
env-to-module connector) and out of weight sync. On each update the learner connector
`IntrinsicCuriosityModelConnector` adds eta * r_int to the rewards before GAE and hands the
ICM its transitions; the Learner trains both modules in the same `update()`, the ICM with
its own loss and its own learning rate (`algorithm_config_overrides_per_module`).

    python examples/curiosity/inverse_dynamics_model_based_curiosity.py --as-test
    python examples/curiosity/inverse_dynamics_model_based_curiosity.py --no-curiosity
    python examples/curiosity/inverse_dynamics_model_based_curiosity.py --env MountainCar

The same FrozenLake setup through the CLI (see README.md beside this file):

    rlmod train --algo PPO --config examples/curiosity/frozenlake_icm.json \
        --stop-reward 0.9 --stop-timesteps 70000

The last line printed is `RESULT {json}` (reached, env_steps, seconds, ...), which
`benchmarks/curiosity_frozenlake.py` parses.
"""

from __future__ import annotations

import time

_START = time.perf_counter()  # before the heavy imports: "seconds" count from here

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import sys  # noqa: E402
from typing import Any  # noqa: E402

from rlmod.algorithms.ppo import PPOConfig  # noqa: E402
from rlmod.core import DEFAULT_MODULE_ID, MultiRLModuleSpec, RLModuleSpec  # noqa: E402
from rlmod.curiosity import (  # noqa: E402
    ICM_MODULE_ID,
    IntrinsicCuriosityModel,
    IntrinsicCuriosityModelConnector,  # noqa: E402
)
from rlmod.env.wrappers import make_with_terminal_time_limit  # noqa: E402
from rlmod.tuned import FAST_PPO  # noqa: E402

FROZENLAKE_12X12 = ["SFFFFFFFFFFF"] + ["FFFFFFFFFFFF"] * 10 + ["FFFFFFFFFFFG"]
"""RLlib's map: only frozen tiles, so the only difficulty is the sparse reward."""

ENVS: dict[str, dict[str, Any]] = {
    "FrozenLake": {
        "env": make_with_terminal_time_limit,  # the 22-step limit ends the task
        "env_config": {
            "id": "FrozenLake-v1",
            "desc": FROZENLAKE_12X12,
            "is_slippery": False,
            "max_episode_steps": 22,
        },
        # eta: one-hot observations give forward errors of about 0.1-0.3 at first.
        "intrinsic_reward_coeff": 0.3,
        "stop_reward": 0.9,  # episode_return_mean >= 0.9: the goal in 9 of 10 episodes
        "stop_timesteps": 70_000,  # RLlib 2.60 needed 70k env steps on this task
    },
    "MountainCar": {
        "env": "MountainCar-v0",
        "env_config": {},
        # eta: raw (position, velocity) observations change by ~1e-3 per step, so the
        # forward errors are ~1e-4 and need a larger scale to matter.
        "intrinsic_reward_coeff": 30.0,
        "stop_reward": -199.999,  # a mean above -200: some episode reached the flag
        "stop_timesteps": 150_000,
    },
}


def build_config(
    env: str = "FrozenLake", *, curiosity: bool = True, seed: int | None = 0
) -> PPOConfig:
    """PPO (plus, with `curiosity`, the ICM) for `env`, a key of ENVS.

    The settings are the same with and without curiosity, so the comparison is fair:
    rlmod's fast PPO settings (rlmod.tuned.FAST_PPO, what `rlmod train` starts from), 16
    sub-envs, batches of ~1000 env steps in minibatches of 125 for 6 epochs, lr 1e-3,
    lambda 1 (the goal's reward reaches all 22 steps undecayed) and gamma 0.95. On
    MountainCar the 200-step limit stays a truncation (bootstrapped), as in gymnasium.
    """
    setup = ENVS[env]
    config = (
        PPOConfig()
        .update_from_dict(FAST_PPO)
        .environment(setup["env"], env_config=setup["env_config"])
        .env_runners(num_envs_per_env_runner=16)
        .training(
            train_batch_size=1000,
            minibatch_size=125,
            num_epochs=6,
            lr=1e-3,
            gamma=0.95,
            lambda_=1.0,
        )
        .debugging(seed=seed)
    )
    if not curiosity:
        return config
    return config.training(
        # A class taking (observation_space, action_space) is a learner-connector factory;
        # it runs before PPO's own GAE connector.
        learner_connector=IntrinsicCuriosityModelConnector,
    ).rl_module(
        rl_module_spec=MultiRLModuleSpec(
            rl_module_specs={
                DEFAULT_MODULE_ID: RLModuleSpec(),  # PPO's default module, spaces from the env
                ICM_MODULE_ID: RLModuleSpec(
                    module_class=IntrinsicCuriosityModel,
                    learner_only=True,  # built on Learners only, never on EnvRunners
                    model_config={
                        "feature_dim": 64,
                        "feature_net_hiddens": [64],
                        "inverse_net_hiddens": [64],
                        "forward_net_hiddens": [64],
                        "forward_loss_weight": 0.2,  # beta of the paper
                        "intrinsic_reward_coeff": setup["intrinsic_reward_coeff"],  # eta
                    },
                ),
            }
        ),
        algorithm_config_overrides_per_module={ICM_MODULE_ID: {"lr": 1e-3}},
    )


def run(
    config: PPOConfig, *, stop_reward: float, stop_timesteps: int, verbose: bool = True
) -> dict[str, Any]:
    """Trains until episode_return_mean >= stop_reward or stop_timesteps env steps."""
    algo = config.build_algo()
    try:
        result: dict[str, Any] = {}
        best = -math.inf
        while True:
            result = algo.train()
            ret = result["env_runners"].get("episode_return_mean", math.nan)
            steps = result["num_env_steps_sampled_lifetime"]
            if not math.isnan(ret):
                best = max(best, ret)
            if verbose and result["training_iteration"] % 10 == 0:
                icm = result["learners"].get(ICM_MODULE_ID, {})
                extra = f" icm_forward_loss={icm['forward_loss']:.4f}" if icm else ""
                print(
                    f"iter {result['training_iteration']:4d} env_steps {steps:7d} "
                    f"episode_return_mean {ret:8.3f}{extra} "
                    f"{time.perf_counter() - _START:6.1f} s",
                    flush=True,
                )
            if ret >= stop_reward or steps >= stop_timesteps:
                break
    finally:
        algo.stop()
    return {
        "reached": bool(ret >= stop_reward),
        "episode_return_mean": ret,
        "best_episode_return_mean": best,
        "env_steps": steps,
        "iterations": result["training_iteration"],
        "seconds": round(time.perf_counter() - _START, 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", choices=sorted(ENVS), default="FrozenLake")
    parser.add_argument(
        "--no-curiosity",
        action="store_true",
        help="Plain PPO with the same settings (no ICM, no intrinsic reward).",
    )
    parser.add_argument(
        "--as-test",
        action="store_true",
        help="Exit with code 1 unless --stop-reward is reached within --stop-timesteps.",
    )
    parser.add_argument(
        "--stop-reward",
        type=float,
        help="Goal for episode_return_mean (default: 0.9 on FrozenLake, "
        "above -200 on MountainCar).",
    )
    parser.add_argument(
        "--stop-timesteps",
        type=int,
        help="Budget in env steps (default: 70000 FrozenLake, 150000 MountainCar).",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quiet", action="store_true", help="Print only the RESULT line.")
    args = parser.parse_args(argv)
    setup = ENVS[args.env]
    stop_reward = setup["stop_reward"] if args.stop_reward is None else args.stop_reward
    stop_timesteps = setup["stop_timesteps"] if args.stop_timesteps is None else args.stop_timesteps
    config = build_config(args.env, curiosity=not args.no_curiosity, seed=args.seed)
    out = run(
        config, stop_reward=stop_reward, stop_timesteps=stop_timesteps, verbose=not args.quiet
    )
    out.update(
        env=args.env,
        curiosity=not args.no_curiosity,
        seed=args.seed,
        stop_reward=stop_reward,
        stop_timesteps=stop_timesteps,
    )
    print("RESULT " + json.dumps(out), flush=True)
    if args.as_test and not out["reached"]:
        print(
            f"--as-test: episode_return_mean {out['episode_return_mean']:.3f} did not reach "
            f"{stop_reward} within {stop_timesteps} env steps.",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

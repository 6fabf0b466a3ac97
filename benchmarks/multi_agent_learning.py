"""Multi-agent PPO learning: MultiAgentCartPole with 4 agents, on independent policies (agents
0, 2 -> p0; 1, 3 -> p1) and on one shared policy, until every agent's mean return reaches
450; and two team policies on a PettingZoo parallel env (TwoTeamGuessingEnv, perfect play
75) for 25 iterations. Settings are those of tests/algorithms/test_multi_agent_ppo.py.

Each run is a fresh process timed from spawn (interpreter start and imports included).

    python benchmarks/multi_agent_learning.py [--seeds 0 1 2]
"""

from __future__ import annotations

import argparse

from _common import header, run_timed, table

CARTPOLE = r"""
import json, sys
from rlmod.algorithms.ppo import PPOConfig
from rlmod.testing import MultiAgentCartPole
from rlmod.tuned import FAST_PPO
shared, seed = sys.argv[1] == "shared", int(sys.argv[2])
policies = {"shared"} if shared else {"p0", "p1"}
mapping = (lambda aid, episode: "shared") if shared else (lambda aid, episode: f"p{aid % 2}")
config = (PPOConfig().update_from_dict(FAST_PPO)
          .environment(MultiAgentCartPole, env_config={"num_agents": 4})
          .env_runners(num_envs_per_env_runner=4)
          .multi_agent(policies=policies, policy_mapping_fn=mapping)
          .training(train_batch_size=512, minibatch_size=256, num_epochs=10, lr=1e-3,
                    gamma=0.98, lambda_=0.8)
          .debugging(seed=seed))
algo = config.build_algo()
for it in range(1, 301):
    result = algo.train()
    r = result["env_runners"]
    agents = r["agent_episode_returns_mean"]
    if len(agents) == 4 and min(agents.values()) >= 450:
        break
print(json.dumps({"iterations": it, "reached": len(agents) == 4 and min(agents.values()) >= 450,
                  "env_steps": result["num_env_steps_sampled_lifetime"],
                  "agents": {str(k): round(v, 1) for k, v in sorted(agents.items())},
                  "modules": {k: round(v, 1)
                              for k, v in sorted(r["module_episode_returns_mean"].items())}}))
"""

TEAMS = r"""
import json, sys
from rlmod import register_env
from rlmod.algorithms.ppo import PPOConfig
from rlmod.env.pettingzoo_env import ParallelPettingZooEnv
from rlmod.testing.pettingzoo_envs import TwoTeamGuessingEnv
from rlmod.tuned import FAST_PPO
register_env("two_teams", lambda cfg: ParallelPettingZooEnv(TwoTeamGuessingEnv(**cfg)))
config = (PPOConfig().update_from_dict(FAST_PPO).environment("two_teams").env_runners(num_envs_per_env_runner=4)
          .multi_agent(policies={"red", "blue"},
                       policy_mapping_fn=lambda aid, episode: aid.split("_")[0])
          .training(train_batch_size=500, minibatch_size=250, num_epochs=10, lr=1e-3)
          .debugging(seed=int(sys.argv[1])))
algo = config.build_algo()
first = algo.train()["env_runners"]["module_episode_returns_mean"]
for _ in range(24):
    last = algo.train()["env_runners"]["module_episode_returns_mean"]
print(json.dumps({"first": {k: round(v, 1) for k, v in sorted(first.items())},
                  "last": {k: round(v, 1) for k, v in sorted(last.items())}}))
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    args = parser.parse_args()
    header("Multi-agent PPO learning")
    print("\n## MultiAgentCartPole, 4 agents, until every agent's mean return >= 450\n")
    rows = []
    for mode in ("independent", "shared"):
        for seed in args.seeds:
            r = run_timed(CARTPOLE, "shared" if mode == "shared" else "independent", seed)
            rows.append({"policies": "p0, p1 (agents 0, 2 / 1, 3)" if mode == "independent"
                         else "one shared", "seed": seed, "reached": r["reached"],
                         "iterations": r["iterations"],
                         "env steps": f"{r['env_steps']:,}",
                         "wall s": f"{r['wall_s']:.1f}", "agent returns": r["agents"],
                         "module returns": r["modules"]})
    table(rows, ["policies", "seed", "reached", "iterations", "env steps", "wall s",
                 "agent returns", "module returns"])
    print("\n## TwoTeamGuessingEnv (PettingZoo, through ParallelPettingZooEnv), 25 iterations "
          "of 500 env steps; random play ~19.4 red / 11 blue, perfect 75\n")
    rows = []
    for seed in args.seeds:
        r = run_timed(TEAMS, seed)
        rows.append({"seed": seed, "first iteration": r["first"], "after 25": r["last"],
                     "wall s": f"{r['wall_s']:.1f}"})
    table(rows, ["seed", "first iteration", "after 25", "wall s"])


if __name__ == "__main__":
    main()

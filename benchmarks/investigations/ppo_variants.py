"""Env steps to solve CartPole-v1 for variants of rlmod's PPO (and of SB3's), one fresh
process per run: how issue 12 tested what each difference from Stable-Baselines3 is worth.

Each variant is TUNED["CartPole-v1"] plus `settings`, and optionally SB3's ways that
rlmod does not offer (patched in the child process only): Adam's `eps`, the clip range
decayed linearly over 500k env steps (`clip_decay`), advantages normalized per minibatch
(`mb_norm`). `sb3` runs SB3 instead (rl-zoo's settings; `eps`, `lr_decay`, `clip_decay`).
Env steps only: wall times print but are not compared (use solve_cartpole.py for those).

    python benchmarks/investigations/ppo_variants.py 0 1 2 3 -- 'tuned={}' \
        'zoo_eps={"settings": {"train_batch_size": 256, "num_epochs": 20}, "eps": 1e-5}'
"""

import json
import statistics
import subprocess
import sys
import time

CHILD = r"""
import json, sys
spec = json.loads(sys.argv[1]); seed = int(sys.argv[2]); max_steps = 500_000
if "sb3" in spec:
    import numpy as np, torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    kw = dict(n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98, n_epochs=20, ent_coef=0.0)
    o = spec["sb3"]
    lin = lambda v: (lambda p: p * v)
    lr = lin(0.001) if o.get("lr_decay", True) else 0.001
    clip = lin(0.2) if o.get("clip_decay", True) else 0.2
    pk = {"optimizer_kwargs": {"eps": o["eps"]}} if "eps" in o else {}
    class Solved(BaseCallback):
        def _on_step(self):
            buf = self.model.ep_info_buffer
            return not (len(buf) == 100 and np.mean([e["r"] for e in buf]) >= 475)
    env = make_vec_env("CartPole-v1", n_envs=8, seed=seed)
    model = PPO("MlpPolicy", env, learning_rate=lr, clip_range=clip, seed=seed, verbose=0,
                device="cpu", policy_kwargs=pk, **kw)
    model.learn(total_timesteps=max_steps, callback=Solved())
    print(json.dumps({"steps": int(model.num_timesteps)}))
    sys.exit()
import rlmod.core.optim as optim
if "eps" in spec:
    optim.Adam.__init__.__kwdefaults__["eps"] = spec["eps"]
from rlmod.algorithms.ppo import PPOConfig
from rlmod.tuned import TUNED
if spec.get("mb_norm"):
    import rlmod.algorithms.ppo.ppo_learner as pl
    orig = pl.PPOLearner.compute_loss_for_module
    def patched(self, *, module_id, config, batch, fwd_out):
        a = batch["advantages"]
        batch = dict(batch); batch["advantages"] = (a - a.mean()) / (a.std() + 1e-8)
        return orig(self, module_id=module_id, config=config, batch=batch, fwd_out=fwd_out)
    pl.PPOLearner.compute_loss_for_module = patched
config = PPOConfig().environment("CartPole-v1").debugging(seed=seed)
for k, v in {**TUNED["CartPole-v1"], **spec.get("settings", {})}.items():
    setattr(config, k, v)
algo = config.build_algo()
lc = algo.learner_group.learner.config
c0 = lc.clip_param
while True:
    if spec.get("clip_decay"):
        now = algo.metrics.num_env_steps_lifetime
        lc.__dict__["clip_param"] = c0 * (1 - now / max_steps)
    r = algo.train()
    ret, steps = r["env_runners"]["episode_return_mean"], r["num_env_steps_sampled_lifetime"]
    if (r["num_episodes_lifetime"] >= 100 and ret >= 475) or steps >= max_steps:
        break
print(json.dumps({"steps": steps, "clip": float(lc.clip_param)}))
"""


def main() -> None:
    if "--" not in sys.argv or {"-h", "--help"} & set(sys.argv[1:]):
        print(__doc__)
        raise SystemExit(0 if {"-h", "--help"} & set(sys.argv[1:]) else 2)
    i = sys.argv.index("--")
    seeds = [int(s) for s in sys.argv[1:i]]
    variants = [a.split("=", 1) for a in sys.argv[i + 1 :]]
    res: dict[str, list[int]] = {n: [] for n, _ in variants}
    for seed in seeds:
        for name, spec in variants:
            t = time.perf_counter()
            out = subprocess.run(
                [sys.executable, "-c", CHILD, spec, str(seed)], capture_output=True, text=True
            )
            if out.returncode:
                print(out.stderr[-2000:])
                raise SystemExit(1)
            r = json.loads(out.stdout.strip().splitlines()[-1])
            res[name].append(r["steps"])
            print(f"{name} seed {seed}: {r} {time.perf_counter() - t:.1f}s", flush=True)
    for name, xs in res.items():
        print(f"{name}: median {statistics.median(xs):,.0f} mean {statistics.mean(xs):,.0f} {xs}")


if __name__ == "__main__":
    main()

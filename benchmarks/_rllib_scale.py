"""RLlib's side of multi_module_scale.py: the preludes that make its shared child bodies run
on Ray RLlib (new API stack), and the helpers around RLlib's children (timeout, fit).

Each prelude defines the names a body uses: PPOConfig, adjust(config) and, per body,
get_spec / ENV, start, stop, TIMERS / ENV, MultiAgentEnvRunner, live, count, total,
make_floor. The parent puts `OPTS = {...}` (env, match) in front of every child.
"""

from __future__ import annotations

import glob
import json
import os
import signal
import subprocess

import numpy as np

_COMMON = r"""
from ray.rllib.algorithms.ppo import PPOConfig

def adjust(config):
    config = (config.api_stack(enable_rl_module_and_learner=True,
                               enable_env_runner_and_connector_v2=True)
              .env_runners(num_env_runners=0).learners(num_learners=0))  # the defaults
    if OPTS["match"]:  # rlmod's defaults where RLlib's differ
        config = config.rl_module(model_config={"fcnet_hiddens": [64, 64]}).training(
            num_epochs=10)
    return config
"""

SPEC = (
    _COMMON
    + r"""
def get_spec(config, spaces):
    return config.get_multi_rl_module_spec(env=None, spaces=spaces, inference_only=False)
"""
)

_ENV = r"""
if OPTS["env"] == "rlmod":
    from ray.rllib.env.multi_agent_env import MultiAgentEnv
    from rlmod.testing import MultiAgentCartPole as _Inner

    class ENV(MultiAgentEnv):
        # rlmod's vectorized MultiAgentCartPole behind RLlib's MultiAgentEnv API.
        def __init__(self, config=None):
            super().__init__()
            self.inner = _Inner(dict(config or {}))
            self.observation_spaces = self.inner.observation_spaces
            self.action_spaces = self.inner.action_spaces
            self.possible_agents = list(self.inner.possible_agents)
            self.agents = list(self.possible_agents)

        def reset(self, *, seed=None, options=None):
            out = self.inner.reset(seed=seed, options=options)
            self.agents = self.inner.agents
            return out

        def step(self, action_dict):
            out = self.inner.step(action_dict)
            self.agents = self.inner.agents
            return out

    def live(env):
        return env.agents
else:  # make_multi_agent("CartPole-v1"): one gymnasium CartPole-v1 per agent
    from ray.rllib.examples.envs.classes.multi_agent import MultiAgentCartPole as ENV

    def live(env):  # its `agents` stays all agents; the done ones are in two sets
        done = env.terminateds | env.truncateds
        return [a for a in env.agents if a not in done] if done else env.agents
"""

BUILD = (
    _COMMON
    + _ENV
    + r"""
import ray

def start():  # EnvRunnerGroup calls ray.put even with num_env_runners=0
    t = time.perf_counter()
    ray.init(include_dashboard=False, log_to_driver=False)
    return time.perf_counter() - t

stop = ray.shutdown
TIMERS = ("env_runner_sampling_timer", "learner_update_timer", "synch_weights")
"""
)

SAMPLE = (
    _COMMON
    + _ENV
    + r"""
from ray.rllib.env.multi_agent_env_runner import MultiAgentEnvRunner

def count(episodes):
    return sum(e.agent_steps() for e in episodes)

def total(metrics, counted):
    return counted

make_floor = None
"""
)

ENV_NAMES = {
    "rllib": "ray.rllib.examples.envs.classes.multi_agent.MultiAgentCartPole "
    "(make_multi_agent('CartPole-v1'): one gymnasium CartPole-v1 per agent, stepped "
    "in a Python loop; same dynamics and 500-step limit as rlmod's)",
    "rlmod": "rlmod.testing.MultiAgentCartPole in an RLlib MultiAgentEnv wrapper (the same "
    "vectorized env as rlmod's side)",
}


class ChildTimeout(Exception):
    """The child ran past its timeout; its whole session was killed."""


def run_child(
    python: str,
    code: str,
    *args: object,
    timeout: float | None = None,
    pythonpath: str | None = None,
) -> dict:
    """Runs `code` with `python` in a new session; returns its last stdout line (JSON).
    When it exits or times out, kills what is left of its session (Ray's processes)."""
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [pythonpath, env.get("PYTHONPATH")]))
    proc = subprocess.Popen(
        [python, "-c", code, *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    out = err = None
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        pass
    finally:  # also on Ctrl-C: a child in its own session does not get the terminal's SIGINT
        _kill_session(proc.pid)  # the child if still running, and e.g. Ray's workers
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()
    if out is None:
        raise ChildTimeout
    if proc.returncode != 0:
        raise RuntimeError(err[-3000:])
    return json.loads(out.strip().splitlines()[-1])


def _kill_session(sid: int) -> None:
    """SIGKILL to every process of the session the child leads (Ray's workers make their
    own process groups, so killpg is not enough)."""
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            with open(stat) as f:
                fields = f.read().rpartition(")")[2].split()  # state ppid pgrp session ...
            if int(fields[3]) == sid:
                os.kill(int(stat.split("/")[2]), signal.SIGKILL)
        except (OSError, IndexError, ValueError):
            pass  # gone already


def version(python: str) -> str:
    """ray and torch versions of `python`, or why they could not be read."""
    code = "import ray, torch; print(ray.__version__, torch.__version__)"
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        return "cannot import ray/torch: " + (out.stderr.strip().splitlines() or ["?"])[-1]
    ray_v, torch_v = out.stdout.split()
    return f"ray {ray_v}, torch {torch_v}"


def quadratic_fit(ns: list[int], ts: list[float]):
    """t = a N^2 + b N by least squares (a N^2 alone from one point); a callable, or None."""
    if not ns:
        return None
    n = np.array(ns, float)
    if len(ns) == 1:
        a, b = ts[0] / n[0] ** 2, 0.0
    else:
        (a, b), *_ = np.linalg.lstsq(np.stack([n * n, n], 1), np.array(ts), rcond=None)
    return lambda x: a * x * x + b * x

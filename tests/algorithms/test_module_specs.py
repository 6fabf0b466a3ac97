"""Module specs and spaces from a config (rlmod.algorithms.module_specs): where a module's
spaces come from, in order (spaces=, the env through the env-to-module connectors, the
user's spec, config.environment), the error when nothing says, model_config merging,
which module a single-module spec picks from a MultiRLModuleSpec, and the reverse mapping
of an env's agents to modules with its three errors (unknown module, learner-only module,
two agents with different spaces on one module).

Specs built into running algorithms are tested in tests/algorithms/test_algorithm_config.py
and tests/core/test_multi_rl_module_api.py.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from rlmod.algorithms.module_specs import (
    env_spaces_by_module,
    learner_only_module_ids,
    multi_rl_module_spec,
    resolve_spaces,
    rl_module_spec,
)
from rlmod.algorithms.ppo import DefaultPPORLModule, PPOConfig
from rlmod.core.columns import DEFAULT_MODULE_ID
from rlmod.core.multi_rl_module import MultiRLModuleSpec
from rlmod.core.rl_module import RLModuleSpec
from rlmod.env.multi_agent_env import MultiAgentEnv
from rlmod.errors import UnknownModuleIDError
from rlmod.testing import MultiAgentCartPole

Box, Discrete = gym.spaces.Box, gym.spaces.Discrete
BOX = Box(-1.0, 1.0, (3,), np.float32)
TWO = Discrete(2)


def test_spaces_come_from_the_first_source_that_has_them():
    config = PPOConfig().environment(observation_space=Discrete(5), action_space=TWO)
    spec = RLModuleSpec(observation_space=BOX, action_space=Discrete(3))
    env = gym.make("CartPole-v1")

    def resolve(**kw):
        return resolve_spaces(config, DEFAULT_MODULE_ID, **kw)

    given = (BOX, Discrete(7))
    assert resolve(spec=spec, env=env, spaces={DEFAULT_MODULE_ID: given}, env_spaces=None) == given
    obs, act = resolve(
        spec=spec, env=env, spaces=None, env_spaces=(env.observation_space, env.action_space)
    )
    assert obs.shape == (4,) and act == TWO  # CartPole's, through the connectors
    assert resolve(spec=spec, env=None, spaces={}, env_spaces=None) == (BOX, Discrete(3))
    # the config's spaces go through the env-to-module connectors: Discrete(5) one-hot
    obs, act = resolve(spec=RLModuleSpec(), env=None, spaces=None, env_spaces=None)
    assert obs == Box(0.0, 1.0, (5,), np.float32) and act == TWO


def test_no_source_of_spaces_names_every_fix():
    with pytest.raises(
        ValueError,
        match=r"Cannot infer the observation and action spaces of module 'p0': no spaces=\.\.\., "
        r"no env, none on its RLModuleSpec and none in the config",
    ):
        resolve_spaces(PPOConfig(), "p0", RLModuleSpec(), env=None, spaces=None, env_spaces=None)


def test_the_single_module_spec_merges_model_configs_and_keeps_inference_only():
    config = (
        PPOConfig()
        .environment(observation_space=BOX, action_space=TWO)
        .rl_module(
            model_config={"fcnet_hiddens": [16], "vf_share_layers": True},
            rl_module_spec=RLModuleSpec(model_config={"fcnet_hiddens": [4]}, inference_only=True),
        )
    )
    spec = rl_module_spec(config)
    assert spec.module_class is DefaultPPORLModule
    assert spec.model_config["fcnet_hiddens"] == [4]  # the spec's wins
    assert spec.model_config["vf_share_layers"] is True
    assert spec.inference_only is True
    assert rl_module_spec(config, inference_only=False).inference_only is False


def _multi_user_spec(*acting: str) -> MultiRLModuleSpec:
    specs = {m: RLModuleSpec(observation_space=BOX, action_space=TWO) for m in acting}
    specs["icm"] = RLModuleSpec(observation_space=BOX, action_space=TWO, learner_only=True)
    return MultiRLModuleSpec(rl_module_specs=specs)


def test_a_single_module_spec_picks_the_one_acting_module_of_a_multi_spec():
    config = PPOConfig().rl_module(rl_module_spec=_multi_user_spec("only"))
    spec = rl_module_spec(config)
    assert (spec.observation_space, spec.action_space) == (BOX, TWO) and not spec.learner_only
    two = PPOConfig().rl_module(rl_module_spec=_multi_user_spec("a", "b"))
    with pytest.raises(ValueError, match=r"holds modules \['a', 'b'\] besides the learner-only"):
        rl_module_spec(two)


def test_inference_only_multi_specs_drop_learner_only_modules():
    config = (
        PPOConfig()
        .environment(observation_space=BOX, action_space=TWO)
        .multi_agent(
            policies={"p0": None, "icm": RLModuleSpec(learner_only=True)},
            policy_mapping_fn=lambda aid, ep, **kw: "p0",
        )
    )
    assert learner_only_module_ids(config) == {"icm"}
    full = multi_rl_module_spec(config, spaces={"p0": (BOX, TWO), "icm": (BOX, TWO)})
    assert set(full.rl_module_specs) == {"p0", "icm"}
    acting = multi_rl_module_spec(config, spaces={"p0": (BOX, TWO)}, inference_only=True)
    assert set(acting.rl_module_specs) == {"p0"}
    assert acting.rl_module_specs["p0"].inference_only


class _TwoShapes(MultiAgentEnv):
    """Agents "a" and "b" observe boxes of different sizes."""

    def __init__(self, config=None) -> None:
        super().__init__()
        self.possible_agents = ["a", "b"]
        self.observation_spaces = {"a": BOX, "b": Box(-1.0, 1.0, (5,), np.float32)}
        self.action_spaces = {"a": TWO, "b": TWO}

    def reset(self, *, seed=None, options=None):  # never stepped here
        raise NotImplementedError

    def step(self, action_dict):
        raise NotImplementedError


def _multi(mapping, policies=("p0", "p1")) -> PPOConfig:
    return PPOConfig().multi_agent(policies=set(policies), policy_mapping_fn=mapping)


def test_agents_are_reverse_mapped_to_modules_first_agent_first():
    env = MultiAgentCartPole({"num_agents": 3})
    found = env_spaces_by_module(_multi(lambda aid, ep, **kw: f"p{aid % 2}"), env)
    assert {m: agent for m, (agent, _, _) in found.items()} == {"p0": 0, "p1": 1}
    assert env_spaces_by_module(_multi(lambda aid, ep, **kw: "p0"), None) == {}


def test_mapping_to_an_unknown_module_suggests_the_close_one():
    env = MultiAgentCartPole({"num_agents": 2})
    with pytest.raises(
        UnknownModuleIDError,
        match=r"mapped agent 0 to module 'main_1', which is not among the modules "
        r"\['main_0', 'other'\]\. Did you mean 'main_0'\?",
    ):
        config = _multi(lambda aid, ep, **kw: "main_1", policies=("main_0", "other"))
        env_spaces_by_module(config, env)


def test_mapping_to_a_learner_only_module_is_refused():
    config = PPOConfig().multi_agent(
        policies={"p0": None, "icm": RLModuleSpec(learner_only=True)},
        policy_mapping_fn=lambda aid, ep, **kw: "icm",
    )
    with pytest.raises(UnknownModuleIDError, match=r"module 'icm', which is learner-only"):
        env_spaces_by_module(config, MultiAgentCartPole({"num_agents": 1}))


def test_two_agents_with_different_spaces_on_one_module_are_refused():
    with pytest.raises(
        ValueError, match=r"Agents 'a' and 'b' are both mapped to module 'p0' but see different"
    ):
        env_spaces_by_module(_multi(lambda aid, ep, **kw: "p0"), _TwoShapes())
    apart = env_spaces_by_module(
        _multi(lambda aid, ep, **kw: "p0" if aid == "a" else "p1"), _TwoShapes()
    )
    assert apart["p1"][1].shape == (5,)

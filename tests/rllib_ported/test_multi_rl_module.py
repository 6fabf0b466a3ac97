"""RLlib's `rllib/core/rl_module/tests/test_multi_rl_module.py` (all 5 pass on rlmod when
ported, see port.py), as rlmod's own tests of the same behaviour, named alike: they start
from `make_multi_agent("CartPole-v0")` and RLlib's example VPG module."""

from __future__ import annotations

import pytest
import torch

from rlmod.core import DEFAULT_MODULE_ID, MultiRLModule, RLModuleSpec
from rlmod.env.multi_agent_env import make_multi_agent
from rlmod.testing.vpg import VPGTorchRLModule
from rlmod.utils.test_utils import check


def _env():  # type: ignore[no-untyped-def]
    return make_multi_agent("CartPole-v0")({"num_agents": 2})


def _vpg(hidden: int = 32) -> VPGTorchRLModule:
    env = _env()
    return VPGTorchRLModule(
        observation_space=env.get_observation_space(0),
        action_space=env.get_action_space(0),
        model_config={"hidden_dim": hidden},
    )


def test_make_multi_agent_steps_one_copy_per_agent() -> None:
    env = make_multi_agent("CartPole-v1")({"num_agents": 3})
    obs, _ = env.reset(seed=0)
    assert sorted(obs) == [0, 1, 2] and env.possible_agents == [0, 1, 2]
    done = set()
    for _ in range(600):
        obs, rew, term, trunc, _ = env.step({a: 0 for a in obs if a not in done})
        assert set(rew) == set(obs)
        done |= {a for a in obs if term[a] or trunc[a]}
        if term["__all__"]:
            break
    assert done == {0, 1, 2}  # always pushing left ends every copy; then the episode
    with pytest.raises(TypeError, match="gymnasium env id"):
        make_multi_agent(3)  # type: ignore[arg-type]


def test_from_config() -> None:
    env = _env()
    spec = RLModuleSpec(
        module_class=VPGTorchRLModule,
        observation_space=env.get_observation_space(0),
        action_space=env.get_action_space(0),
        model_config={"hidden_dim": 32},
    )
    multi = MultiRLModule(rl_module_specs={"module1": spec, "module2": spec})
    assert multi.keys() == {"module1", "module2"}  # a KeysView, as RLlib's
    assert all(isinstance(multi[m], VPGTorchRLModule) for m in multi)


def test_as_multi_rl_module() -> None:
    multi = _vpg().as_multi_rl_module()
    assert isinstance(multi, MultiRLModule) and not isinstance(multi, VPGTorchRLModule)
    assert set(multi.keys()) == {DEFAULT_MODULE_ID}
    assert multi.as_multi_rl_module() is multi


def test_get_state_and_set_state() -> None:
    module, other = _vpg().as_multi_rl_module(), _vpg().as_multi_rl_module()
    state = module.get_state()
    assert set(state) == set(module.keys())
    check(state[DEFAULT_MODULE_ID], other.get_state()[DEFAULT_MODULE_ID], false=True)
    other.set_state(state)
    check(state, other.get_state())


def test_add_remove_modules() -> None:
    module = _vpg().as_multi_rl_module()
    module.add_module("test", _vpg())
    assert module.keys() == {DEFAULT_MODULE_ID, "test"}
    module.remove_module("test")
    assert module.keys() == {DEFAULT_MODULE_ID}
    with pytest.raises(ValueError):
        module.add_module(DEFAULT_MODULE_ID, _vpg())
    module.add_module(DEFAULT_MODULE_ID, _vpg(), override=True)


def test_save_to_path_and_from_checkpoint(tmp_path) -> None:  # type: ignore[no-untyped-def]
    module = _vpg().as_multi_rl_module()
    module.add_module("test", _vpg())
    module.add_module("test2", _vpg(128))
    for i, change in enumerate([None, "remove", "add"]):
        if change == "remove":
            module.remove_module("test")
        elif change == "add":
            module.add_module("test3", _vpg(120))
        module.save_to_path(tmp_path / str(i))
        loaded = MultiRLModule.from_checkpoint(tmp_path / str(i))
        assert loaded is not module and loaded.keys() == module.keys()
        check(module.get_state(), loaded.get_state())
    assert module.keys() == {"test2", "test3", DEFAULT_MODULE_ID}


def test_check_compares_nested_tensors_as_rllib_check() -> None:
    check({"a": [torch.ones(2), 1.0]}, {"a": [torch.ones(2) + 1e-7, 1.0]})
    with pytest.raises(AssertionError):
        check({"a": torch.ones(2)}, {"a": torch.zeros(2)})
    with pytest.raises(AssertionError):
        check({"a": 1.0}, {"a": 1.0}, false=True)
    with pytest.raises(AssertionError, match="key"):
        check({"a": 1}, {"b": 1})

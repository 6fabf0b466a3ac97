"""RLlib's `rllib/algorithms/tests/test_algorithm_config.py`, as rlmod's own tests of the
same behaviour, one per RLlib test and named alike (see port.py for running RLlib's file
itself: of its 12 tests up to `test_to_dict_with_tune_search_space`, 11 pass on rlmod;
`test_rl_module_api` is a deliberate difference, tested here too). Plus what those
needed: PolicySpec, `grad_clip_by`, Tune search spaces in a config."""

from __future__ import annotations

import gymnasium as gym
import pytest
import torch

from rlmod.algorithms import AlgorithmConfig, PolicySpec
from rlmod.algorithms.ppo import PPO, DefaultPPORLModule, PPOConfig, PPOLearner
from rlmod.core import DEFAULT_MODULE_ID, MultiRLModule, MultiRLModuleSpec, RLModuleSpec
from rlmod.core.optimizer_groups import clip_gradients
from rlmod.testing import MultiAgentCartPole
from rlmod.testing.vpg import VPGTorchRLModule

CARTPOLE = gym.make("CartPole-v1")


def test_running_specific_algo_with_generic_config() -> None:
    config = (
        AlgorithmConfig(algo_class=PPO)
        .environment("CartPole-v0")
        .training(lr=0.12345, train_batch_size=300, minibatch_size=100)
    )
    algo = config.build()  # RLlib's older name of build_algo()
    try:
        assert isinstance(algo.config, PPOConfig)  # the settings moved into PPO's config
        assert (algo.config.lr, algo.config.train_batch_size) == (0.12345, 300)
        algo.train()
    finally:
        algo.stop()


def test_a_generic_config_without_algo_class_says_how_to_build() -> None:
    with pytest.raises(TypeError, match="algo_class=PPO"):
        AlgorithmConfig().build_algo()


def test_multi_agent_shared_module() -> None:
    config = (
        PPOConfig()
        .environment(MultiAgentCartPole, env_config={"num_agents": 2})
        .training(train_batch_size=200, minibatch_size=100, num_epochs=1)
        .multi_agent(policies={"p0"}, policy_mapping_fn=lambda aid, *a, **kw: "p0")
        .rl_module(rl_module_spec=MultiRLModuleSpec(rl_module_specs={"p0": RLModuleSpec()}))
    )
    algo = config.build_algo()
    try:
        assert set(algo.env_runner.module.keys()) == {"p0"}
        algo.train()
    finally:
        algo.stop()


def test_freezing_of_algo_config() -> None:
    config = (
        AlgorithmConfig()
        .environment("CartPole-v0")
        .multi_agent(
            policies={"pol1": (None, None, None, AlgorithmConfig.overrides(lr=0.001))},
            policy_mapping_fn=lambda agent_id, episode, worker, **kw: "pol1",
        )
    )
    config.freeze()
    with pytest.raises(AttributeError, match=r"Cannot set attribute.+of an already frozen"):
        config.lr = 0.01


def test_policy_spec_and_rllib_tuples_become_modules_and_overrides() -> None:
    box = gym.spaces.Box(-1.0, 1.0, (3,))
    config = PPOConfig().multi_agent(
        policies={
            "a": (None, None, None, {"lr": 1e-3}),
            "b": PolicySpec(observation_space=box, config=PPOConfig.overrides(gamma=0.5)),
            "c": None,
        },
        algorithm_config_overrides_per_module={"b": {"gamma": 0.9}},  # the explicit one wins
    )
    assert config.get_config_for_module("a").lr == 1e-3
    assert config.get_config_for_module("b").gamma == 0.9
    assert config.get_config_for_module("c") is config
    assert config.policies["b"].observation_space == box and config.policies["a"] is None
    with pytest.raises(ValueError, match="no Policy classes"):
        PPOConfig().multi_agent(policies={"a": (object, None, None, None)})
    with pytest.raises(TypeError, match="4-tuple"):
        PPOConfig().multi_agent(policies={"a": (None, None)})
    with pytest.raises(KeyError, match="lrr"):
        PPOConfig().multi_agent(policies={"a": PolicySpec(config={"lrr": 1.0})})


@pytest.mark.parametrize(
    ("runners", "envs", "batch", "expected"),
    [
        (4, 3, 2456, [205, 205, 205, 205, 204]),  # 12 sub-envs: 2457 steps, 1 over
        (3, 2, 4000, [667, 667, 667, 666]),  # exactly 4000
        (12, 1, 1342, [112] * 11 + [111, 111]),  # exactly 1342
    ],
)
def test_rollout_fragment_length(runners: int, envs: int, batch: int, expected: list[int]) -> None:
    config = (
        AlgorithmConfig()
        .env_runners(num_env_runners=runners, num_envs_per_env_runner=envs)
        .training(train_batch_size=batch)
    )
    assert [config.get_rollout_fragment_length(worker_index=i) for i in range(len(expected))] == (
        expected
    )
    config.env_runners(rollout_fragment_length=50)
    assert config.get_rollout_fragment_length(worker_index=3) == 50


def test_rollout_fragment_length_with_small_batch_and_multiple_learners() -> None:
    for runners in (1, 2, 3, 4):
        config = (
            AlgorithmConfig()
            .env_runners(num_env_runners=runners)
            .learners(num_learners=2)
            .training(train_batch_size=1)
        )
        assert config.get_rollout_fragment_length(0) == 1


def test_detect_atari_env() -> None:
    assert AlgorithmConfig().environment(env="ale_py:ALE/Breakout-v5").is_atari
    assert AlgorithmConfig().environment(env="ALE/Pong-v5").is_atari
    assert not AlgorithmConfig().environment(env="CartPole-v1").is_atari
    assert not AlgorithmConfig().environment(env=lambda ctx: None).is_atari  # never a callable
    assert not AlgorithmConfig().environment(env="NotAtari").is_atari


def test_rl_module_api() -> None:
    config = PPOConfig().environment("CartPole-v1").framework("torch")
    assert config.rl_module_spec.module_class is DefaultPPORLModule  # the default spec

    config.rl_module(rl_module_spec=RLModuleSpec(VPGTorchRLModule, model_config={"hidden_dim": 8}))
    assert config.rl_module_spec.module_class is VPGTorchRLModule
    assert config.rl_module_spec.model_config == {"hidden_dim": 8}
    config.rl_module(rl_module_spec=RLModuleSpec(model_config={"hidden_dim": 8}))
    assert config.rl_module_spec.module_class is DefaultPPORLModule  # filled from the default
    assert config.user_rl_module_spec.module_class is None  # as set, what to_dict() stores
    assert config.to_dict()["rl_module_spec"]["__rl_module_spec__"]["module_class"] is None
    assert AlgorithmConfig().rl_module_spec is None  # no algorithm, no default


def test_rl_module_api_refuses_a_class_that_is_no_rl_module() -> None:
    """Deliberate difference (docs/rllib_migration.md): RLlib's test uses a plain class
    `A` as module_class, which RLlib accepts until it builds; rlmod refuses it at once."""

    class A:
        pass

    with pytest.raises(TypeError, match="must be a subclass of rlmod.core.RLModule"):
        RLModuleSpec(A)  # type: ignore[arg-type]


def test_config_per_module() -> None:
    config = (
        PPOConfig()
        .training(kl_coeff=0.5)
        .multi_agent(
            policies={"module_1", "module_2", "module_3"},
            algorithm_config_overrides_per_module={
                "module_1": PPOConfig.overrides(lr=0.01, kl_coeff=0.1),
                "module_2": PPOConfig.overrides(grad_clip=100.0, grad_clip_by="value"),
            },
        )
    )
    assert (config.lr, config.grad_clip, config.grad_clip_by) == (5e-5, None, "global_norm")
    one, two = config.get_config_for_module("module_1"), config.get_config_for_module("module_2")
    assert (one.lr, one.kl_coeff, one.grad_clip_by) == (0.01, 0.1, "global_norm")
    assert (two.lr, two.grad_clip, two.grad_clip_by, two.kl_coeff) == (5e-5, 100.0, "value", 0.5)
    assert "module_3" not in config._per_module_overrides
    assert config.get_config_for_module("module_3") is config
    with pytest.raises(ValueError, match="grad_clip_by"):
        PPOConfig().training(grad_clip_by="l2")


def test_grad_clip_by_clips_as_rllib() -> None:
    def params() -> list[torch.nn.Parameter]:
        ps = [torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(1))]
        ps[0].grad, ps[1].grad = torch.tensor([3.0, 4.0]), torch.tensor([-12.0])
        return ps

    by_value = params()
    assert clip_gradients(by_value, 2.0, "value") is None
    assert by_value[0].grad.tolist() == [2.0, 2.0] and by_value[1].grad.tolist() == [-2.0]
    by_norm = params()  # each tensor to norm 1: (0.6, 0.8) and (-1)
    clip_gradients(by_norm, 1.0, "norm")
    assert torch.allclose(by_norm[0].grad, torch.tensor([0.6, 0.8]))
    assert torch.allclose(by_norm[1].grad, torch.tensor([-1.0]))
    by_global = params()  # global norm 13 -> all scaled by 1/13
    norm = clip_gradients(by_global, 1.0, "global_norm")
    assert norm is not None and float(norm) == pytest.approx(13.0)
    assert torch.allclose(by_global[1].grad, torch.tensor([-12.0 / 13]), atol=1e-6)


def test_learner_api() -> None:
    assert PPOConfig().environment("CartPole-v1").learner_class is PPOLearner


def test_get_multi_rl_module_spec() -> None:
    class Custom1(VPGTorchRLModule):
        pass

    class Custom2(VPGTorchRLModule):
        pass

    class CustomMulti(MultiRLModule):
        pass

    class SingleAgentAlgoConfig(AlgorithmConfig):
        def get_default_rl_module_spec(self) -> RLModuleSpec:
            return RLModuleSpec(module_class=VPGTorchRLModule)

    class NoSpecsConfig(AlgorithmConfig):
        def get_default_rl_module_spec(self) -> MultiRLModuleSpec:  # type: ignore[override]
            return MultiRLModuleSpec(multi_rl_module_class=CustomMulti)

    obs, act = CARTPOLE.observation_space, CARTPOLE.action_space
    placeholder = PolicySpec(observation_space=obs, action_space=act, config=AlgorithmConfig())

    def compiled(config: AlgorithmConfig, passed: type | None = None) -> MultiRLModuleSpec:
        return config.get_multi_rl_module_spec(
            policy_dict={"p1": placeholder, "p2": placeholder},
            single_agent_rl_module_spec=RLModuleSpec(module_class=passed) if passed else None,
        )

    def classes(spec: MultiRLModuleSpec) -> tuple[type, dict[str, type | None]]:
        for sub in spec.module_specs.values():
            assert (sub.observation_space, sub.action_space) == (obs, act)
        return spec.multi_rl_module_class, {m: s.module_class for m, s in spec.module_specs.items()}

    config = SingleAgentAlgoConfig()
    assert classes(compiled(config)) == (
        MultiRLModule,
        {"p1": VPGTorchRLModule, "p2": VPGTorchRLModule},
    )
    assert classes(compiled(config, Custom2))[1] == {"p1": Custom2, "p2": Custom2}
    config = SingleAgentAlgoConfig().rl_module(
        rl_module_spec=MultiRLModuleSpec(
            rl_module_specs={"p1": RLModuleSpec(Custom1), "p2": RLModuleSpec(Custom1)}
        )
    )
    assert classes(compiled(config))[1] == {"p1": Custom1, "p2": Custom1}
    config = SingleAgentAlgoConfig().rl_module(rl_module_spec=RLModuleSpec(module_class=Custom1))
    assert classes(compiled(config))[1] == {"p1": Custom1, "p2": Custom1}
    assert classes(compiled(config, Custom2))[1] == {"p1": Custom2, "p2": Custom2}
    config = SingleAgentAlgoConfig().rl_module(
        rl_module_spec=MultiRLModuleSpec(
            multi_rl_module_class=CustomMulti,
            rl_module_specs={"p1": RLModuleSpec(Custom1), "p2": RLModuleSpec(Custom1)},
        )
    )
    # The passed spec only fills module IDs the configured MultiRLModuleSpec lacks.
    assert classes(compiled(config, Custom2)) == (CustomMulti, {"p1": Custom1, "p2": Custom1})
    with pytest.raises(ValueError, match="must be a dict"):
        _ = NoSpecsConfig().rl_module_spec


def test_to_dict_roundtrip_new_api_stack() -> None:
    config = PPOConfig().training(train_batch_size_per_learner=123)
    data = config.to_dict()
    assert "total_train_batch_size" not in data and "train_batch_size_per_learner" not in data
    assert data["_train_batch_size_per_learner"] == 123  # RLlib's raw field
    back = PPOConfig().update_from_dict(data)
    assert (back.train_batch_size_per_learner, back.total_train_batch_size) == (123, 123)
    assert PPOConfig.from_dict(data).train_batch_size_per_learner == 123
    # Checkpoints written before this change hold the setting's own name.
    assert (
        PPOConfig.from_dict({"train_batch_size_per_learner": 7}).train_batch_size_per_learner == 7
    )


def test_default_module_id_constant() -> None:
    assert DEFAULT_MODULE_ID == "default_policy"


def test_to_dict_with_tune_search_space() -> None:
    tune = pytest.importorskip("ray.tune")
    config = PPOConfig().training(train_batch_size_per_learner=tune.qrandint(256, 2048, 64))
    data = config.to_dict()  # must not compute the derived total from a search space
    assert isinstance(data["_train_batch_size_per_learner"], tune.search.sample.Domain)
    assert config.training(lr=tune.grid_search([1e-3, 1e-4])).lr == {"grid_search": [1e-3, 1e-4]}
    with pytest.raises(ValueError, match="Tune search spaces"):
        config.validate()
    trial = PPOConfig().update_from_dict({**data, "_train_batch_size_per_learner": 320, "lr": 1e-3})
    assert trial.total_train_batch_size == 320  # a trial's resolved values are checked
    with pytest.raises(ValueError, match="lr"):
        PPOConfig().update_from_dict({"lr": -1.0})

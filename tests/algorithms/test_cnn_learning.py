"""PPO with the default CNN learns a pixel task that an MLP of the same size does not,
in the same env steps (rlmod.testing.pixel_envs.BarOrientationEnv, 24x24)."""

from __future__ import annotations

import pytest

from rlmod.algorithms.ppo import PPOConfig
from rlmod.connectors.env_to_module import FlattenObservations
from rlmod.testing.pixel_envs import BarOrientationEnv

SIZE = 24


def _train(model_config: dict, *, flatten: bool) -> tuple[float, int]:
    config = (
        PPOConfig()
        .environment(BarOrientationEnv, env_config={"size": SIZE})
        .debugging(seed=0)
        .env_runners(num_envs_per_env_runner=8)
        .training(train_batch_size=512, minibatch_size=128, num_epochs=4, lr=1e-3)
        .rl_module(model_config=model_config)
    )
    if flatten:  # the image as one vector: the default MLP over 576 pixels
        config.env_runners(env_to_module_connector=lambda env, *a: FlattenObservations())
    algo = config.build_algo()
    try:
        num_params = sum(p.numel() for p in algo.get_module().pi.parameters())
        num_params += sum(p.numel() for p in algo.get_module().encoder.parameters())
        for _ in range(16):  # 8,192 env steps (one-step episodes)
            result = algo.train()
        return result["env_runners"]["episode_return_mean"], num_params
    finally:
        algo.stop()


@pytest.mark.slow
def test_default_cnn_learns_what_an_mlp_of_its_size_does_not():
    cnn_return, cnn_params = _train({}, flatten=False)  # [16, 4, 2], [32, 4, 2] for 24x24
    mlp_return, mlp_params = _train({"fcnet_hiddens": [19]}, flatten=True)
    assert abs(cnn_params - mlp_params) / cnn_params < 0.05  # the same size: ~11k
    # the return is the fraction of right answers over the last 100 episodes; 0.5 guesses
    assert cnn_return >= 0.9, cnn_return
    assert mlp_return <= 0.8, mlp_return


@pytest.mark.slow
def test_ppo_learns_a_dict_task_that_needs_the_image_and_the_discrete_part():
    """{"image", "flip"}: the right answer is the bar's orientation, swapped when flip is 1;
    either part alone scores 0.5, so 0.9 needs the CNN's and the one-hot's features."""
    config = (
        PPOConfig()
        .environment(BarOrientationEnv, env_config={"size": 10, "dict_obs": True})
        .debugging(seed=0)
        .env_runners(num_envs_per_env_runner=8)
        .training(train_batch_size=512, minibatch_size=128, num_epochs=4, lr=1e-3)
        .rl_module(model_config={"fcnet_hiddens": [16], "head_fcnet_hiddens": [32]})
    )
    algo = config.build_algo()
    try:
        for _ in range(16):
            result = algo.train()
        assert result["env_runners"]["episode_return_mean"] >= 0.9
    finally:
        algo.stop()

"""Item 4 of issue 33: callbacks and metrics as RLlib's callback docs use them (an
`RLlibCallback` logging per-episode values with `window=` and looking at
`on_sample_end(samples=...)`), with only the imports changed."""

from __future__ import annotations

import pytest

from rlmod.algorithms.ppo import PPOConfig
from rlmod.callbacks import RLlibCallback
from rlmod.testing import MultiAgentCartPole


class EpisodeLengthCallback(RLlibCallback):
    def on_episode_end(self, *, episode, metrics_logger, **kwargs):  # type: ignore[no-untyped-def]
        metrics_logger.log_value("my_episode_len", len(episode), window=100)

    def on_sample_end(self, *, samples, metrics_logger, **kwargs):  # type: ignore[no-untyped-def]
        metrics_logger.log_value("steps_in_samples", sum(len(e) for e in samples), reduce="sum")
        ids = [e.id_ for e in samples]
        assert len(ids) == len(set(ids))  # one chunk per episode and call


@pytest.mark.parametrize("multi_agent", [False, True])
def test_sample_chunks_sum_to_the_sampled_steps_and_windows_move(multi_agent: bool) -> None:
    config = (
        PPOConfig()
        .environment(MultiAgentCartPole if multi_agent else "CartPole-v1")
        .env_runners(num_envs_per_env_runner=2)
        .training(train_batch_size=500, minibatch_size=250, num_epochs=1)
        .rl_module(model_config={"fcnet_hiddens": [16]})
        .callbacks(EpisodeLengthCallback)
        .debugging(seed=0)
    )
    if multi_agent:
        config.environment(env_config={"num_agents": 2}).multi_agent(
            policies={"p0"}, policy_mapping_fn=lambda aid, *a, **kw: "p0"
        )
    algo = config.build_algo()
    try:
        for _ in range(6):
            runners = algo.train()["env_runners"]
            # RLlib's chunks cover this sample() call's steps only: they add up exactly.
            assert runners["steps_in_samples"] == runners["num_env_steps_sampled"]
        # A window=100 mean keeps its last 100 values across iterations, as the built-in
        # episode_len_mean does (metrics_num_episodes_for_smoothing=100).
        assert runners["my_episode_len"] == pytest.approx(runners["episode_len_mean"])
    finally:
        algo.stop()

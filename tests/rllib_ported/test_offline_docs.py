"""Item 3 of issue 33: RLlib's offline settings as its BC example (tuned_examples/bc/
cartpole_bc.py) and recording docs use them, with only the imports changed:
`offline_data(input_=[path], map_batches_kwargs=..., iter_batches_kwargs=...,
dataset_num_iters_per_learner=...)` and `offline_data(output=..., output_write_episodes=...)`."""

from __future__ import annotations

import logging
from pathlib import Path

import gymnasium as gym
import pytest

from rlmod.algorithms.bc import BCConfig
from rlmod.algorithms.marwil import MARWILConfig
from rlmod.algorithms.ppo import PPOConfig
from rlmod.offline import record_episodes
from rlmod.testing import cartpole_expert


@pytest.fixture
def data_path(tmp_path: Path) -> Path:
    out = tmp_path / "cartpole"
    record_episodes(
        gym.make("CartPole-v1"), cartpole_expert, num_episodes=4, output_dir=out, seed=0
    )
    return out


def test_bc_example_settings(data_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    config = (
        BCConfig()
        .environment("CartPole-v1")
        .offline_data(
            input_=[data_path.as_posix()],
            map_batches_kwargs={"concurrency": 2, "num_cpus": 1},
            iter_batches_kwargs={"prefetch_batches": 1},
            dataset_num_iters_per_learner=5,
        )
        .training(lr=0.0008, train_batch_size_per_learner=64)
        .rl_module(model_config={"fcnet_hiddens": [16]})
    )
    assert BCConfig().dataset_num_iters_per_learner == 1  # RLlib's MARWIL/BC default
    with caplog.at_level(logging.WARNING):
        algo = config.build_algo()
    assert "not used" in caplog.text  # Ray Data knobs without Ray Data reading: said so
    try:
        first = algo.train()
        second = algo.train()
    finally:
        algo.stop()
    # Five updates of 64 rows per train(), as RLlib's dataset_num_iters_per_learner.
    trained = [
        r["learners"]["__all_modules__"]["num_env_steps_trained_lifetime"] for r in (first, second)
    ]
    assert trained == [5 * 64, 10 * 64]
    assert first["learners"]["default_policy"]["num_module_steps_trained"] == 5 * 64


def test_none_iterations_and_clashing_iter_kwargs_are_refused() -> None:
    with pytest.raises(ValueError, match="dataset_num_iters_per_learner=None"):
        MARWILConfig().offline_data(input_="/x", dataset_num_iters_per_learner=None).validate()
    with pytest.raises(ValueError, match="dataset_num_iters_per_learner"):
        BCConfig().offline_data(dataset_num_iters_per_learner=0)


@pytest.mark.parametrize("write_episodes", [True, False])
def test_output_write_episodes_records_whole_episodes(tmp_path: Path, write_episodes: bool) -> None:
    config = (
        PPOConfig()
        .environment("CartPole-v1")
        .env_runners(rollout_fragment_length=50)
        .offline_data(
            output=str(tmp_path / "rec"),
            output_write_episodes=write_episodes,
            output_max_rows_per_file=50,
        )
        .training(train_batch_size=50, minibatch_size=50, num_epochs=1)
    )
    assert config.output_write_episodes is write_episodes
    algo = config.build_algo()
    try:
        while not list((tmp_path / "rec").glob("**/*.parquet")):
            algo.train()
    finally:
        algo.stop()
    back = BCConfig().offline_data(input_=str(tmp_path / "rec")).training(train_batch_size=8)
    bc = back.build_algo()
    try:
        bc.train()
    finally:
        bc.stop()

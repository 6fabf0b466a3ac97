"""Ray Tune (rlmod/algorithms/algorithm.py `as_trainable`, rlmod/utils/ray_utils.py): an
Algorithm class is a Tune trainable; a 2-trial grid search completes and reports both,
with rlmod checkpoints."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlmod.algorithms.ppo import PPO, PPOConfig

ray = pytest.importorskip("ray")
tune = pytest.importorskip("ray.tune")
pytestmark = pytest.mark.ray


def test_a_grid_search_of_two_trials_completes_and_reports_both(tmp_path):
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    config = (
        PPOConfig()
        .environment("CartPole-v1")
        .training(train_batch_size=256, minibatch_size=64, num_epochs=1)
        .debugging(seed=0)
    )
    tuner = tune.Tuner(
        PPO.as_trainable(),
        param_space={**config.to_dict(), "lr": tune.grid_search([1e-3, 3e-4])},
        run_config=tune.RunConfig(
            storage_path=str(tmp_path),
            stop={"training_iteration": 2},
            verbose=0,
            checkpoint_config=tune.CheckpointConfig(checkpoint_at_end=True),
        ),
    )
    results = tuner.fit()
    try:
        assert results.num_errors == 0 and len(results) == 2
        assert sorted(r.config["lr"] for r in results) == [3e-4, 1e-3]
        for r in results:
            assert r.metrics["training_iteration"] == 2
            assert r.metrics["num_env_steps_sampled_lifetime"] >= 512
            with r.checkpoint.as_directory() as d:  # rlmod's own format, no pickle
                meta = json.loads(Path(d, "metadata.json").read_text())
                assert meta["format"] == "rlmod-checkpoint"
    finally:
        if started:
            ray.shutdown()


def test_search_spaces_in_the_config_itself_as_rllib(tmp_path):
    """Issue 33, item 7: RLlib's way, `training(lr=tune.grid_search([...]))` in the config
    and the config itself as param_space; each trial's values are checked in the trial."""
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    config = (
        PPOConfig()
        .environment("CartPole-v1")
        .training(
            lr=tune.grid_search([1e-3, 3e-4]),
            train_batch_size=256,
            minibatch_size=64,
            num_epochs=1,
        )
    )
    with pytest.raises(ValueError, match="Tune search spaces"):
        config.build_algo()  # unresolved: only Tune can run it
    tuner = tune.Tuner(
        PPO.as_trainable(),
        param_space=config,
        run_config=tune.RunConfig(
            storage_path=str(tmp_path), stop={"training_iteration": 1}, verbose=0
        ),
    )
    results = tuner.fit()
    try:
        assert results.num_errors == 0
        assert sorted(r.config["lr"] for r in results) == [3e-4, 1e-3]
    finally:
        if started:
            ray.shutdown()

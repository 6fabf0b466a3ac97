"""Ray Tune (rlmod/algorithms/algorithm.py `as_trainable`, rlmod/utils/ray_utils.py): RLlib's
doc form, `tune.Tuner("PPO", param_space=config, run_config=tune.RunConfig(...))` with search
spaces in the config, runs every trial, reports RLlib's metric keys, checkpoints through
Tune's CheckpointConfig and restores the best trial's checkpoint; each trial reserves what
its remote EnvRunners need."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlmod.algorithms.ppo import PPO, PPOConfig

ray = pytest.importorskip("ray")
tune = pytest.importorskip("ray.tune")
pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_local")]

METRIC = "env_runners/episode_return_mean"


def _small(config: PPOConfig) -> PPOConfig:
    return (
        config.environment("CartPole-v1")
        .training(train_batch_size=256, minibatch_size=64, num_epochs=1)
        .debugging(seed=0)
    )


def test_rllib_doc_form_grid_checkpoints_and_best_restore(tmp_path):
    """Issue 33, item 7: the algorithm's name (the config made after `import ray.tune`
    registered it), search spaces inside the config, the config itself as param_space;
    each trial's values are checked in the trial; Tune keeps one checkpoint per trial."""
    config = _small(PPOConfig()).training(lr=tune.grid_search([1e-3, 3e-4]))
    with pytest.raises(ValueError, match="Tune search spaces"):
        config.build_algo()  # unresolved: only Tune can run it
    tuner = tune.Tuner(
        "PPO",
        param_space=config,
        run_config=tune.RunConfig(
            storage_path=str(tmp_path),
            stop={"training_iteration": 2},
            verbose=0,
            checkpoint_config=tune.CheckpointConfig(
                checkpoint_frequency=1, num_to_keep=1, checkpoint_at_end=True
            ),
        ),
    )
    results = tuner.fit()
    assert results.num_errors == 0 and len(results) == 2
    assert sorted(r.config["lr"] for r in results) == [3e-4, 1e-3]
    for r in results:
        assert r.metrics["training_iteration"] == 2
        assert r.metrics["env_runners"]["num_env_steps_sampled_lifetime"] >= 512
        assert r.metrics_dataframe[METRIC].notna().all()  # RLlib's key, flattened by Tune
        assert len(r.best_checkpoints) == 1  # num_to_keep=1 of the two saved
        with r.checkpoint.as_directory() as d:  # rlmod's own format, no pickle
            assert json.loads(Path(d, "metadata.json").read_text())["format"] == (
                "rlmod-checkpoint"
            )
    best = results.get_best_result(metric=METRIC, mode="max")
    algo = PPO.from_checkpoint(best.checkpoint.path)
    try:
        assert algo.config.lr == best.config["lr"]
        assert algo.iteration == 2
        assert algo.train()["training_iteration"] == 3
    finally:
        algo.stop()


def test_the_algo_classs_trainable_takes_a_plain_dict_with_a_search_space(tmp_path):
    """`config.algo_class.as_trainable()` with `param_space` a dict (`to_dict()` plus a
    search space): a trial whose resolved value is invalid fails with the setting's own
    message, the other trial runs."""
    config = _small(PPOConfig())
    tuner = tune.Tuner(
        config.algo_class.as_trainable(),
        param_space={**config.to_dict(), "lr": tune.grid_search([1e-3, -1.0])},
        run_config=tune.RunConfig(
            storage_path=str(tmp_path), stop={"training_iteration": 1}, verbose=0
        ),
    )
    results = tuner.fit()
    assert results.num_errors == 1
    errors = [str(r.error) for r in results if r.error is not None]
    assert "lr=-1.0 is invalid" in errors[0]
    assert [r.metrics["training_iteration"] for r in results if r.error is None] == [1]


def test_a_trial_reserves_its_remote_env_runners_and_learners():
    """Each trial's placement group holds the driver and every remote EnvRunner and
    Learner; without it, trials that take every CPU leave their EnvRunners pending."""
    config = _small(PPOConfig()).env_runners(num_env_runners=2, num_cpus_per_env_runner=2)
    config.evaluation(evaluation_num_env_runners=1).learners(num_learners=1)
    request = PPO.as_trainable().default_resource_request(config.to_dict())
    assert request.bundles == [{"CPU": 1.0}] + [{"CPU": 2.0}] * 3 + [{"CPU": 1.0}]
    local = PPO.as_trainable().default_resource_request(_small(PPOConfig()).to_dict())
    assert local.bundles == [{"CPU": 1.0}]


def test_the_trainable_is_made_once_and_named_after_the_algorithm():
    """`tune.Tuner.restore(path, trainable=PPO.as_trainable())` needs the same name."""
    assert PPO.as_trainable() is PPO.as_trainable()
    assert PPO.as_trainable().__name__ == "PPO"
    assert issubclass(PPO.as_trainable(), tune.Trainable)
    PPOConfig()  # made while Tune is imported: registers "PPO" with Tune
    from ray.tune.registry import get_trainable_cls

    assert get_trainable_cls("PPO").__name__ == "PPO"


@pytest.mark.slow
def test_trials_with_remote_env_runners_run_in_their_placement_groups(tmp_path):
    """Two trials with one remote EnvRunner each on a 2-CPU cluster: each trial holds
    2 CPUs, so they run one after the other. Without the placement group both trials
    would take a CPU each and their EnvRunners would wait forever (the time budget turns
    that into a failure instead of a hang)."""
    config = _small(PPOConfig()).env_runners(num_env_runners=1)
    config.training(lr=tune.grid_search([1e-3, 3e-4]))
    results = tune.Tuner(
        "PPO",
        param_space=config,
        tune_config=tune.TuneConfig(time_budget_s=120),
        run_config=tune.RunConfig(
            storage_path=str(tmp_path), stop={"training_iteration": 1}, verbose=0
        ),
    ).fit()
    assert results.num_errors == 0 and len(results) == 2
    assert [r.metrics["training_iteration"] for r in results] == [1, 1]


def test_the_class_itself_is_not_a_trainable_a_deliberate_difference(tmp_path):
    """docs/rllib_migration.md: RLlib's `tune.Tuner(PPO, ...)` is refused by Tune, since
    rlmod's PPO does not subclass tune.Trainable (that would import Ray with rlmod). If
    this ever passes, the doc's difference is gone."""
    assert not issubclass(PPO, tune.Trainable)
    tuner = tune.Tuner(
        PPO,
        param_space=_small(PPOConfig()),
        run_config=tune.RunConfig(storage_path=str(tmp_path), verbose=0),
    )
    with pytest.raises(TypeError, match="convertable to Trainable"):
        tuner.fit()

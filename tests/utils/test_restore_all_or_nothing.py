"""A restore is all or nothing, a tampered checkpoint is refused before it is used, and no
NaN action ever reaches an env (issue 30, items 4, 6 and 7)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlmod.algorithms import Algorithm
from rlmod.algorithms.dqn import DQNConfig
from rlmod.algorithms.inference import InferencePolicy
from rlmod.algorithms.ppo import PPO, PPOConfig
from rlmod.core.rl_module import RLModule
from rlmod.errors import CheckpointError, NonFiniteActionError
from rlmod.utils.state_files import read_state, write_state

LEARNER = Path("learner_group", "learner")


@pytest.fixture
def saved(cartpole_config: PPOConfig, tmp_path: Path) -> Path:
    """A checkpoint after one iteration."""
    algo = cartpole_config.build_algo()
    algo.train()
    path = Path(algo.save_to_path(tmp_path / "ck"))
    algo.stop()
    return path


@pytest.fixture
def live(cartpole_config: PPOConfig) -> PPO:
    """An Algorithm two iterations along: its state differs from `saved` everywhere."""
    algo = cartpole_config.build_algo()
    algo.train()
    algo.train()
    yield algo
    algo.stop()


def _edit_json(file: Path, edit: Any) -> None:
    data = json.loads(file.read_text())
    edit(data)
    file.write_text(json.dumps(data))


def _snapshot(algo: Algorithm) -> dict[str, Any]:
    """Everything a restore may change, copied: Learner weights, optimizer moments, RNGs
    and counters."""
    state = algo.get_state()
    learner = state["learner_group"]["learner"]
    return {
        "weights": {k: v.clone() for k, v in learner["rl_module"]["default_policy"].items()},
        "optimizer": json.dumps(_tensors_as_lists(learner["optimizer"])),
        "rng": json.dumps(learner["rng"]),
        "iteration": state["iteration"],
        "time_total_s": state["time_total_s"],
        "metrics": json.dumps(state["metrics"]),
    }


def _tensors_as_lists(tree: Any) -> Any:
    if isinstance(tree, torch.Tensor | np.ndarray):
        return np.asarray(tree).tolist()
    if isinstance(tree, dict):
        return {k: _tensors_as_lists(v) for k, v in tree.items()}
    if isinstance(tree, list):
        return [_tensors_as_lists(v) for v in tree]
    return tree


def _assert_unchanged(algo: Algorithm, before: dict[str, Any]) -> None:
    after = _snapshot(algo)
    for name, tensor in before["weights"].items():
        assert torch.equal(after["weights"][name], tensor), name
    assert {k: v for k, v in after.items() if k != "weights"} == {
        k: v for k, v in before.items() if k != "weights"
    }
    # The EnvRunner acts with exactly the Learner's weights, as before the call.
    runner = algo.env_runner.module.state_dict()
    for name, tensor in runner.items():
        assert torch.equal(tensor, before["weights"][name]), name


# ---------------------------------------------------------------- item 4: all or nothing
def test_a_restore_whose_last_part_fails_changes_nothing(saved: Path, live: PPO) -> None:
    """The Learner's RNG is restored after its weights and optimizer: a wrong type there
    used to leave new weights on the Learner, old ones on the EnvRunners."""
    _edit_json(
        saved / LEARNER / "state.json", lambda d: d["rng"]["state"].update(state="not a number")
    )
    before = _snapshot(live)
    with pytest.raises(CheckpointError, match=r"'learner_group' failed .*nothing was changed"):
        live.restore_from_path(saved)
    _assert_unchanged(live, before)
    live.train()  # and it trains on


def test_from_checkpoint_of_a_broken_rng_is_a_checkpoint_error(saved: Path) -> None:
    _edit_json(saved / LEARNER / "state.json", lambda d: d["rng"].update(bit_generator="MT19937"))
    with pytest.raises(CheckpointError, match="'learner_group' failed"):
        Algorithm.from_checkpoint(saved)


def test_a_component_restore_is_all_or_nothing_too(saved: Path, live: PPO) -> None:
    _edit_json(saved / LEARNER / "state.json", lambda d: d["rng"].update(has_uint32="x"))
    before = _snapshot(live)
    with pytest.raises(CheckpointError, match="nothing was changed"):
        live.restore_from_path(saved / "learner_group", component="learner_group")
    _assert_unchanged(live, before)


def test_a_failed_restore_puts_the_replay_buffer_back(tmp_path: Path) -> None:
    """Off-policy algorithms restore the buffer first: it is put back too."""
    config = (
        DQNConfig()
        .reporting(min_sample_timesteps_per_iteration=0, min_time_s_per_iteration=None)
        .environment("CartPole-v1")
        .training(
            num_steps_sampled_before_learning_starts=32,
            train_batch_size=16,
            store_buffer_in_checkpoints=True,
        )
        .env_runners(rollout_fragment_length=64)
        .debugging(seed=0)
    )
    algo = config.build_algo()
    algo.train()
    path = Path(algo.save_to_path(tmp_path / "ck"))
    algo.train()
    _edit_json(path / LEARNER / "state.json", lambda d: d["rng"].update(uinteger=-1))
    buffer = json.dumps(_tensors_as_lists(algo.replay_buffer.get_state()))
    with pytest.raises(CheckpointError, match="nothing was changed"):
        algo.restore_from_path(path)
    assert json.dumps(_tensors_as_lists(algo.replay_buffer.get_state())) == buffer
    algo.stop()


def test_a_state_part_the_algorithm_lacks_is_named_not_ignored(live: PPO) -> None:
    """A misspelled part (or one of another algorithm) was silently skipped."""
    before = _snapshot(live)
    with pytest.raises(CheckpointError, match=r"\['iteraton'\]\. Did you mean 'iteration'"):
        live.set_state({"iteraton": 5})
    _assert_unchanged(live, before)


def test_a_checkpoint_of_another_algorithm_names_both_classes(tmp_path: Path, live: PPO) -> None:
    dqn = DQNConfig().environment("CartPole-v1").build_algo()
    path = dqn.save_to_path(tmp_path / "dqn")
    dqn.stop()
    before = _snapshot(live)
    with pytest.raises(CheckpointError) as info:
        live.restore_from_path(path)
    assert "was saved from rlmod.algorithms.dqn" in "".join(info.value.__notes__)
    _assert_unchanged(live, before)


# ---------------------------------------------------------------- item 6: tampered files
@pytest.mark.parametrize("value", [1e999, "abc", -5, 2.5, True, None])
def test_a_bad_iteration_is_a_checkpoint_error(saved: Path, live: PPO, value: Any) -> None:
    text = (saved / "state.json").read_text()
    (saved / "state.json").write_text(
        text.replace('"iteration":1,', f'"iteration":{json.dumps(value)},')
    )
    if value == 1e999:  # json.dumps writes Infinity; the file says 1e999
        (saved / "state.json").write_text(text.replace('"iteration":1,', '"iteration":1e999,'))
    before = _snapshot(live)
    with pytest.raises(CheckpointError, match="'iteration' must be an int >= 0"):
        live.restore_from_path(saved)
    _assert_unchanged(live, before)


@pytest.mark.parametrize("value", ["NaN", "-1", '"x"'])
def test_a_bad_time_total_is_a_checkpoint_error(saved: Path, value: str) -> None:
    file = saved / "state.json"
    data = json.loads(file.read_text())
    file.write_text(
        file.read_text().replace(
            f'"time_total_s":{data["time_total_s"]!r}', f'"time_total_s":{value}'
        )
    )
    with pytest.raises(CheckpointError, match="'time_total_s' must be a finite number"):
        Algorithm.from_checkpoint(saved)


@pytest.mark.parametrize(
    "file", ["state.json", "metadata.json", "learner_group/learner/state.json"]
)
def test_json_nested_100k_deep_is_a_checkpoint_error(saved: Path, file: str) -> None:
    (saved / file).write_text('{"a":' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(CheckpointError, match="nests deeper than Python can"):
        Algorithm.from_checkpoint(saved)


def test_json_just_shallow_enough_to_read_is_still_refused_cleanly(saved: Path) -> None:
    """Deep enough to pass json's reader but not the walk over its tree."""
    depth = 900
    (saved / "state.json").write_text('{"iteration":1,"deep":' + "[" * depth + "]" * depth + "}")
    with pytest.raises(CheckpointError):
        Algorithm.from_checkpoint(saved)


def test_a_symlink_out_of_the_checkpoint_is_refused(saved: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret.json"
    secret.write_text((saved / LEARNER / "state.json").read_text())
    os.remove(saved / LEARNER / "state.json")
    os.symlink(secret, saved / LEARNER / "state.json")
    with pytest.raises(CheckpointError, match="symlink"):
        Algorithm.from_checkpoint(saved)


# ---------------------------------------------------------------- item 7: non-finite weights
class _RecordingPendulum(gym.Wrapper):
    """Pendulum that keeps every action it is given."""

    actions: list[np.ndarray] = []

    def __init__(self, env_config: dict | None = None) -> None:
        super().__init__(gym.make("Pendulum-v1"))

    def step(self, action: Any) -> Any:
        _RecordingPendulum.actions.append(np.array(action, dtype=np.float64))
        return super().step(action)


def _pendulum() -> PPOConfig:
    return (
        PPOConfig()
        .environment(_RecordingPendulum)
        .training(train_batch_size=200, minibatch_size=100, num_epochs=1)
        .debugging(seed=0)
    )


def _nan_biases(checkpoint: Path) -> None:
    module_dir = checkpoint / LEARNER / "rl_module" / "default_policy"
    state = read_state(module_dir)
    for name, tensor in state.items():
        if name.endswith("bias"):
            tensor[:] = float("nan")
    os.remove(module_dir / "state.safetensors")  # a module's weights: its only state file
    write_state(module_dir, state)


def test_nan_weights_in_a_checkpoint_are_refused_by_every_loader(tmp_path: Path) -> None:
    algo = _pendulum().environment("Pendulum-v1").build_algo()
    path = Path(algo.save_to_path(tmp_path / "ck"))
    algo.stop()
    _nan_biases(path)
    with pytest.raises(CheckpointError, match="holds NaN or inf"):
        Algorithm.from_checkpoint(path)
    with pytest.raises(CheckpointError, match="holds NaN or inf"):
        RLModule.from_checkpoint(path)
    with pytest.raises(CheckpointError, match="holds NaN or inf"):
        InferencePolicy.from_checkpoint(path)


def test_no_nan_action_reaches_the_env_from_an_env_runner(tmp_path: Path) -> None:
    algo = _pendulum().build_algo()
    algo.env_runner.sample(num_timesteps=10)
    assert _RecordingPendulum.actions
    with torch.no_grad():
        for p in algo.env_runner.module.parameters():
            p.fill_(float("nan"))
    _RecordingPendulum.actions.clear()
    with pytest.raises(NonFiniteActionError, match="no action was sent to the env"):
        algo.env_runner.sample(num_timesteps=10)
    assert all(np.isfinite(a).all() for a in _RecordingPendulum.actions)
    algo.stop()


@pytest.mark.parametrize("env", ["Pendulum-v1", "CartPole-v1"])
def test_no_nan_action_from_an_inference_policy(env: str, tmp_path: Path) -> None:
    """Continuous: np.clip passed NaN on; discrete: argmax of NaN logits picked a garbage
    action. Both are refused."""
    algo = PPOConfig().environment(env).build_algo()
    path = algo.save_to_path(tmp_path / "ck")
    algo.stop()
    policy = InferencePolicy.from_checkpoint(path)
    observation, _ = gym.make(env).reset(seed=0)
    policy.compute_single_action(observation)
    with torch.no_grad():
        for p in policy.module.parameters():
            p.fill_(float("nan"))
    with pytest.raises(NonFiniteActionError, match="action distribution inputs hold NaN"):
        policy.compute_single_action(observation)


@pytest.mark.parametrize(
    "edit",
    [
        lambda d: d["metrics"].update(returns=["a"]),
        lambda d: d["metrics"].update(num_env_steps_lifetime=-3),
        lambda d: d["metrics"].update(lens=7),
    ],
)
def test_bad_metrics_are_a_checkpoint_error(saved: Path, live: PPO, edit: Any) -> None:
    _edit_json(saved / "state.json", edit)
    before = _snapshot(live)
    with pytest.raises(CheckpointError, match=r"part 'metrics' failed .*metrics field"):
        live.restore_from_path(saved)
    _assert_unchanged(live, before)

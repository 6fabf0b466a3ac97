"""Recording with the default EnvRunner and training BC / MARWIL from it: the whole loop,
at 1 and at N sub-envs, with and without spaces in the offline config.

Before issue 30 `spaces.json` held the vector env's batched spaces (`Box(.., (1, 4))`,
`MultiDiscrete([2])`; `(N, 4)` at N sub-envs): BC with CartPole's spaces was refused
("differs from the recorded data's spaces") and BC without them failed in numpy ("cannot
reshape array of size 8000 into shape (2000,4,4)")."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from rlmod.algorithms.bc import BCConfig
from rlmod.algorithms.marwil import MARWILConfig
from rlmod.algorithms.ppo import PPOConfig
from rlmod.errors import OfflineDataError
from rlmod.offline import EpisodeWriter, read_spaces, resolve_files
from rlmod.offline.parquet_chunks import read_columns

CARTPOLE = gym.make("CartPole-v1")
RLLIB_DOCS_SPACES = {
    "observation_space": gym.spaces.Box(-np.inf, np.inf, (4,), np.float32),
    "action_space": gym.spaces.Discrete(2),
}
"""What RLlib's offline docs pass for CartPole: unbounded observations."""


@pytest.fixture(scope="module", params=[1, 4], ids=["1 sub-env", "4 sub-envs"])
def recorded(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A PPO run's episodes, recorded by the default EnvRunner with N sub-envs."""
    out = tmp_path_factory.mktemp("recorded") / "cartpole"
    algo = (
        PPOConfig()
        .environment("CartPole-v1")
        .env_runners(num_envs_per_env_runner=request.param)
        .offline_data(output=str(out))
        .training(train_batch_size=600, minibatch_size=300, num_epochs=1)
        .debugging(seed=0)
    ).build_algo()
    algo.train()
    algo.stop()
    return out


def test_recording_stores_one_sub_envs_spaces(recorded: Path) -> None:
    spaces = read_spaces(resolve_files(recorded))
    assert spaces is not None
    assert spaces["__env__"] == (CARTPOLE.observation_space, CARTPOLE.action_space)
    rows = read_columns(resolve_files(recorded), obs_shape=(4,))
    assert len(rows["obs"]) >= 100 and rows["obs"].shape[1:] == (4,)


@pytest.mark.parametrize("spaces", ["none", "CartPole's", "RLlib docs'"])
@pytest.mark.parametrize("cls", [BCConfig, MARWILConfig])
def test_bc_and_marwil_train_from_the_recording_and_act_in_the_env(
    recorded: Path, cls: type, spaces: str
) -> None:
    given: dict[str, Any] = {
        "none": {},
        "RLlib docs'": RLLIB_DOCS_SPACES,
        "CartPole's": {
            "observation_space": CARTPOLE.observation_space,
            "action_space": CARTPOLE.action_space,
        },
    }[spaces]
    algo = (
        cls()
        .environment("CartPole-v1", **given)
        .offline_data(input_=str(recorded), shuffle_buffer_size=200)
        .training(train_batch_size=128, minibatch_size=64, num_epochs=1)
        .evaluation(evaluation_interval=1, evaluation_duration=2)
        .debugging(seed=0)
    ).build_algo()
    try:
        result = algo.train()
        algo.train()  # a second pass over checked sources
    finally:
        algo.stop()
    learner = result["learners"]["default_policy"]
    assert np.isfinite(learner["policy_loss"]), learner
    assert result["evaluation"]["env_runners"]["num_episodes"] == 2  # acts in CartPole


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"observation_space": gym.spaces.Box(-np.inf, np.inf, (5,))}, r"its shape is \(5,\)"),
        ({"action_space": gym.spaces.Discrete(3)}, r"its size differs"),
        (
            {"action_space": gym.spaces.Box(-1, 1, (1,))},
            r"it is a Box, the recorded one a Discrete",
        ),
    ],
)
def test_configured_spaces_that_do_not_fit_the_recording_are_refused(
    recorded: Path, given: dict[str, Any], message: str
) -> None:
    config = BCConfig().environment(**given).offline_data(input_=str(recorded)).debugging(seed=0)
    with pytest.raises(
        OfflineDataError,
        match=rf"does not fit the recorded .*spaces\.json: "
        rf"{message}",
    ):
        config.build_algo()


def test_an_action_box_must_keep_its_bounds(tmp_path: Path) -> None:
    """An action Box's bounds map recorded actions to the module's scale."""
    from rlmod.offline import record_episodes

    record_episodes(
        gym.make("Pendulum-v1"),
        lambda obs: np.zeros(1, np.float32),
        num_episodes=1,
        output_dir=tmp_path,
        seed=0,
    )
    config = (
        BCConfig()
        .environment(action_space=gym.spaces.Box(-1.0, 1.0, (1,)))
        .offline_data(input_=str(tmp_path))
    )
    with pytest.raises(OfflineDataError, match="its bounds differ"):
        config.build_algo()


def test_a_recording_with_batched_spaces_reads_with_configured_ones(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """spaces.json as rlmod wrote it before issue 30's fix (the vector env's spaces at 4
    sub-envs): the configured single-env spaces read it, with a warning; without them the
    error says what to set."""
    from rlmod.offline import record_episodes
    from rlmod.testing import cartpole_expert

    record_episodes(CARTPOLE, cartpole_expert, num_episodes=2, output_dir=tmp_path, seed=0)
    (tmp_path / "spaces.json").unlink()
    batched = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 4)
    EpisodeWriter(
        tmp_path, spaces={"__env__": (batched.observation_space, batched.action_space)}
    ).close()
    config = (
        BCConfig()
        .environment(**RLLIB_DOCS_SPACES)
        .offline_data(input_=str(tmp_path))
        .training(train_batch_size=128, minibatch_size=64, num_epochs=1)
        .debugging(seed=0)
    )
    with caplog.at_level(logging.WARNING, logger="rlmod.offline.space_match"):
        algo = config.build_algo()
    try:
        algo.train()
    finally:
        algo.stop()
    assert "batched spaces" in caplog.text
    with pytest.raises(
        OfflineDataError,
        match=r"(?s)holds rows of 4 values, but Box.*has shape "
        r"\(4, 4\).*vector env's batched spaces.*config\.environment",
    ):
        BCConfig().offline_data(input_=str(tmp_path)).build_algo()

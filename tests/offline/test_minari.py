"""Minari datasets as offline data: a small local dataset, read and trained on (no
download). Skipped without the minari package."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from rlmod.algorithms.bc import BCConfig
from rlmod.core.columns import Columns
from rlmod.errors import OfflineDataError
from rlmod.testing import cartpole_expert

minari = pytest.importorskip("minari")


@pytest.fixture
def local_minari(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[int, dict]:
    """Eight expert CartPole episodes as the local Minari dataset cartpole/expert-v0.

    Built with `minari.create_dataset_from_buffers`: `minari.DataCollector` needs jax
    (`minari[create]`), which is not installed here.
    """
    from minari.data_collector import EpisodeBuffer

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    env = gym.make("CartPole-v1")
    episodes, played = [], {}
    for i in range(8):
        obs, _ = env.reset(seed=i)
        ep: dict[str, list] = {
            "observations": [obs],
            "actions": [],
            "rewards": [],
            "terminations": [],
            "truncations": [],
        }
        done = False
        while not done and len(ep["actions"]) < 200:  # cut short: a flagless end
            action = cartpole_expert(obs)
            obs, reward, terminated, truncated, _ = env.step(action)
            for k, v in (
                ("observations", obs),
                ("actions", action),
                ("rewards", reward),
                ("terminations", terminated),
                ("truncations", truncated),
            ):
                ep[k].append(v)
            done = terminated or truncated
        arrays = {k: np.asarray(v) for k, v in ep.items()}
        played[i] = arrays
        episodes.append(EpisodeBuffer(id=i, seed=i, infos={}, **arrays))
    minari.create_dataset_from_buffers(
        "cartpole/expert-v0",
        episodes,
        env=env,
        algorithm_name="scripted expert",
        data_format="arrow",
    )
    return played


def test_minari_episodes_are_read_as_recorded(local_minari: dict[int, dict]) -> None:
    from rlmod.offline.minari_source import load_minari

    sources, spaces = load_minari("minari:cartpole/expert-v0")
    assert spaces == (gym.make("CartPole-v1").observation_space, gym.spaces.Discrete(2))
    for source in sources:
        for cols in source.chunks(columns=None, module_id=None, obs_shape=None, rows=0):
            played = local_minari[int(cols[Columns.EPS_ID][0])]
            assert cols[Columns.OBS].tobytes() == played["observations"][:-1].tobytes()
            assert cols[Columns.NEXT_OBS].tobytes() == played["observations"][1:].tobytes()
            assert cols[Columns.ACTIONS].tolist() == played["actions"].tolist()
            ends = cols[Columns.TERMINATEDS] | cols[Columns.TRUNCATEDS]
            assert np.flatnonzero(ends).tolist() == [len(ends) - 1]  # cut episodes end too


@pytest.mark.parametrize(
    "model_config", [{}, {"use_lstm": True, "lstm_cell_size": 16, "max_seq_len": 10}]
)
def test_bc_trains_on_a_minari_dataset(local_minari: dict[int, dict], model_config: dict) -> None:
    """Also with an LSTM (Minari episodes as whole episodes, in chunks)."""
    algo = (
        BCConfig()
        .environment("CartPole-v1")
        .offline_data(input_="minari:cartpole/expert-v0", shuffle_buffer_size=200)
        .training(lr=3e-3, train_batch_size=256, minibatch_size=128)
        .rl_module(model_config=model_config)
        .evaluation(evaluation_interval=5, evaluation_duration=2)
        .debugging(seed=0)
        .build_algo()
    )
    losses = [algo.train()["learners"]["default_policy"]["policy_loss"] for _ in range(5)]
    assert losses[-1] < losses[0]
    algo.stop()


def test_an_unknown_minari_dataset_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path))
    with pytest.raises(OfflineDataError, match="no local Minari dataset 'nope/none-v0'"):
        BCConfig().offline_data(input_="minari:nope/none-v0").build_algo()

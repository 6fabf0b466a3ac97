"""EpisodeWriter, record_episodes and EnvRunner recording: what is written is exactly what
was played, bit for bit, in complete files only."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pyarrow.parquet as pq
import pytest

from rlmod.algorithms.ppo import PPOConfig
from rlmod.connectors.env_to_module import FlattenObservations, FrameStacking
from rlmod.core.columns import Columns
from rlmod.errors import OfflineDataError
from rlmod.offline import EpisodeWriter, record_episodes
from rlmod.offline.parquet_chunks import read_columns
from rlmod.offline.reader import read_spaces, resolve_files
from rlmod.offline.transforms import module_view
from rlmod.offline.writer import AGENT_ID, MODULE_ID, TIMESTEP
from rlmod.testing import cartpole_expert

# the `keep_batches` fixture (conftest.py): trains an Algorithm, keeping its sampled batches
KeepBatches = Callable[[Any, int], list[dict[str, np.ndarray]]]


class _Logged(gym.Wrapper):
    """Logs every observation, action, reward and flag the env hands out or takes."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.episodes: list[dict[str, list[Any]]] = []

    def reset(self, **kwargs: Any) -> Any:
        obs, info = self.env.reset(**kwargs)
        self.episodes.append(
            {"obs": [obs], "actions": [], "rewards": [], "terminateds": [], "truncateds": []}
        )
        return obs, info

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, info = self.env.step(action)
        ep = self.episodes[-1]
        for key, value in (
            ("obs", obs),
            ("actions", action),
            ("rewards", reward),
            ("terminateds", terminated),
            ("truncateds", truncated),
        ):
            ep[key].append(value)
        return obs, reward, terminated, truncated, info


def _episodes(cols: dict[str, np.ndarray]) -> list[dict[str, np.ndarray]]:
    """Rows split at episode-ID changes (rows of an episode are contiguous on disk)."""
    cut = np.flatnonzero(np.diff(cols[Columns.EPS_ID])) + 1
    bounds = zip(
        np.r_[0, cut].tolist(), np.r_[cut, len(cols[Columns.EPS_ID])].tolist(), strict=True
    )
    return [{k: v[s:e] for k, v in cols.items()} for s, e in bounds]


def test_record_episodes_round_trip_is_bit_for_bit(tmp_path: Path) -> None:
    env = _Logged(gym.make("CartPole-v1"))
    rng = np.random.default_rng(0)
    # Half expert, half random actions: long and short episodes, both kinds of ending.
    record_episodes(
        env,
        lambda o: cartpole_expert(o) if rng.random() < 0.5 else int(rng.integers(2)),
        num_episodes=12,
        output_dir=tmp_path,
        seed=3,
        max_rows_per_file=300,
    )
    files = resolve_files(tmp_path)
    assert len(files) > 1
    stored = _episodes(read_columns(files, obs_shape=(4,)))
    assert len(stored) == len(env.episodes) == 12
    for played, ep in zip(env.episodes, stored, strict=True):
        n = len(played["actions"])
        obs = np.asarray(played["obs"])
        assert ep[Columns.OBS].tobytes() == obs[:-1].tobytes()
        assert ep[Columns.NEXT_OBS].tobytes() == obs[1:].tobytes()
        assert ep[Columns.ACTIONS].tolist() == [int(a) for a in played["actions"]]
        assert ep[Columns.REWARDS].tobytes() == np.asarray(played["rewards"], np.float32).tobytes()
        assert ep[Columns.TERMINATEDS].tolist() == played["terminateds"]
        assert ep[Columns.TRUNCATEDS].tolist() == played["truncateds"]
        assert ep[TIMESTEP].tolist() == list(range(n))
        # Exactly one episode end, at the last row.
        ends = ep[Columns.TERMINATEDS] | ep[Columns.TRUNCATEDS]
        assert np.flatnonzero(ends).tolist() == [n - 1]


def test_a_seeded_recording_is_the_same_files_every_time(tmp_path: Path) -> None:
    for out in ("a", "b"):
        record_episodes(
            gym.make("CartPole-v1"),
            cartpole_expert,
            num_episodes=3,
            output_dir=tmp_path / out,
            seed=7,
            max_rows_per_file=600,
        )
    names = sorted(f.name for f in resolve_files(tmp_path / "a"))
    assert len(names) == 3 and names == sorted(f.name for f in resolve_files(tmp_path / "b"))
    for name in names:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    with pytest.raises(OfflineDataError, match="recorded into with the same seed"):
        record_episodes(
            gym.make("CartPole-v1"),
            cartpole_expert,
            num_episodes=1,
            output_dir=tmp_path / "a",
            seed=7,
        )


def test_rolling_files_are_bounded_and_episodes_never_span_files(tmp_path: Path) -> None:
    record_episodes(
        gym.make("CartPole-v1"),
        lambda o: int(o[2] > 0),
        num_episodes=30,
        output_dir=tmp_path,
        seed=0,
        max_rows_per_file=100,
    )
    files = resolve_files(tmp_path)
    seen: set[int] = set()
    for f in files:
        table = pq.read_table(f)
        eps = set(table[Columns.EPS_ID].to_pylist())
        assert not eps & seen
        seen |= eps
        ends = np.asarray(table[Columns.TERMINATEDS]) | np.asarray(table[Columns.TRUNCATEDS])
        assert ends[-1]
        assert table.num_rows <= 100 or len(eps) == 1  # only a longer episode exceeds it
    assert len(seen) == 30
    assert not list(tmp_path.glob(".*")), "temporary files must not remain"


def test_a_half_written_file_is_never_read(tmp_path: Path) -> None:
    record_episodes(
        gym.make("CartPole-v1"), lambda o: 0, num_episodes=2, output_dir=tmp_path, seed=0
    )
    # What a crash mid-write leaves: the temporary name, never a *.parquet a reader takes.
    (tmp_path / ".episodes-dead-00000.parquet.tmp").write_bytes(b"PAR1 half a file")
    assert [f.name.startswith(".") for f in resolve_files(tmp_path)] == [False]


def test_spaces_are_stored_once_as_json(tmp_path: Path) -> None:
    env = gym.make("FrozenLake-v1")
    record_episodes(env, lambda o: 1, num_episodes=3, output_dir=tmp_path, seed=0)
    data = json.loads((tmp_path / "spaces.json").read_text())
    assert data["__env__"]["observation_space"] == {"type": "Discrete", "n": 16, "start": 0}
    spaces = read_spaces(resolve_files(tmp_path))
    assert spaces is not None and spaces["__env__"] == (env.observation_space, env.action_space)


def test_a_dir_of_another_env_is_refused(tmp_path: Path) -> None:
    record_episodes(gym.make("CartPole-v1"), lambda o: 0, num_episodes=1, output_dir=tmp_path)
    with pytest.raises(OfflineDataError, match="another env"):
        record_episodes(gym.make("FrozenLake-v1"), lambda o: 0, num_episodes=1, output_dir=tmp_path)


@pytest.mark.parametrize("under", [False, True])
def test_an_output_path_that_is_a_file_is_named_and_the_file_kept(
    tmp_path: Path, under: bool
) -> None:
    """Was a raw FileExistsError / NotADirectoryError from the EnvRunner's build."""
    user_file = tmp_path / "notes.txt"
    user_file.write_text("mine")
    output = user_file / "data" if under else user_file
    config = PPOConfig().environment("CartPole-v1").offline_data(output=str(output))
    with pytest.raises(OfflineDataError, match=r"offline_data\(output=.*is a file"):
        config.build_algo()
    assert user_file.read_text() == "mine"


def test_a_dir_of_the_users_files_keeps_them(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("mine")
    record_episodes(gym.make("CartPole-v1"), lambda o: 0, num_episodes=1, output_dir=tmp_path)
    assert (tmp_path / "train.py").read_text() == "mine"
    assert (tmp_path / "spaces.json").exists() and list(tmp_path.glob("*.parquet"))


def test_multi_agent_rows_round_trip_per_module_and_agent(tmp_path: Path) -> None:
    box = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    writer = EpisodeWriter(
        tmp_path,
        spaces={
            "__env__": (box, gym.spaces.Discrete(2)),
            "p0": (box, gym.spaces.Discrete(2)),
            "p1": (box, gym.spaces.Discrete(2)),
        },
        max_rows_per_file=5,
    )
    rng = np.random.default_rng(0)
    played: dict[tuple[str, str], dict[str, np.ndarray]] = {}

    def rows(n: int, agent: str, eps: int, last_done: bool) -> dict[str, np.ndarray]:
        done = np.zeros(n, bool)
        done[-1] = last_done
        return {
            Columns.EPS_ID: np.full(n, eps),
            AGENT_ID: np.full(n, agent, object),
            Columns.OBS: rng.normal(size=(n, 3)).astype(np.float32),
            Columns.NEXT_OBS: rng.normal(size=(n, 3)).astype(np.float32),
            Columns.ACTIONS: rng.integers(2, size=n),
            Columns.REWARDS: rng.normal(size=n).astype(np.float32),
            Columns.TERMINATEDS: done,
            Columns.TRUNCATEDS: np.zeros(n, bool),
        }

    # Two sample() calls: agents' rows interleaved by module, the episode ending in the second.
    first = {
        "p0": [rows(3, "a0", 0, False), rows(2, "a2", 0, False)],
        "p1": [rows(4, "a1", 0, False)],
    }
    second = {
        "p0": [rows(2, "a0", 0, True), rows(1, "a2", 0, True)],
        "p1": [rows(3, "a1", 0, True)],
    }
    for call in (first, second):
        batch = {
            mid: {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
            for mid, parts in call.items()
        }
        writer.add_batch(batch)
        for mid, parts in call.items():
            for p in parts:
                key = (mid, str(p[AGENT_ID][0]))
                played[key] = (
                    p
                    if key not in played
                    else {k: np.concatenate([played[key][k], p[k]]) for k in p}
                )
    writer.close()
    files = resolve_files(tmp_path)
    for mid in ("p0", "p1"):
        cols = read_columns(files, module_id=mid, obs_shape=(3,))
        assert set(cols[MODULE_ID]) == {mid}
        for agent in set(cols[AGENT_ID]):
            mine = cols[AGENT_ID] == agent
            expected = played[(mid, agent)]
            for k in (
                Columns.OBS,
                Columns.NEXT_OBS,
                Columns.ACTIONS,
                Columns.REWARDS,
                Columns.TERMINATEDS,
            ):
                assert cols[k][mine].tobytes() == expected[k].tobytes(), (mid, agent, k)
            assert cols[TIMESTEP][mine].tolist() == list(range(len(expected[Columns.REWARDS])))
    assert writer.num_episodes_written == 3


@pytest.mark.parametrize(
    "space",
    [
        gym.spaces.Text(4),
        gym.spaces.Dict({"a": gym.spaces.Discrete(2), "b": gym.spaces.Text(4)}),
        gym.spaces.Tuple((gym.spaces.Discrete(2), gym.spaces.Sequence(gym.spaces.Discrete(2)))),
    ],
)
def test_unstorable_observations_are_refused_with_the_fix(tmp_path: Path, space: Any) -> None:
    with pytest.raises(OfflineDataError, match="cannot be stored.*FlattenObservation"):
        EpisodeWriter(tmp_path, spaces={"__env__": (space, gym.spaces.Discrete(2))})


# ---------------------------------------------------------------------- EnvRunner recording
def _record_with_ppo(
    tmp_path: Path,
    keep_batches: KeepBatches,
    env: str,
    iterations: int = 2,
    **env_runner_settings: Any,
) -> tuple[list[dict[str, np.ndarray]], Any]:
    """Trains PPO with `output` set, keeping every batch its EnvRunner returned."""
    config = (
        PPOConfig()
        .environment(env)
        .env_runners(num_envs_per_env_runner=3, **env_runner_settings)
        .training(train_batch_size=300, minibatch_size=100, num_epochs=1)
        .offline_data(output=str(tmp_path), output_max_rows_per_file=250)
        .debugging(seed=0)
    )
    algo = config.build_algo()
    batches = keep_batches(algo, iterations)
    pipeline = algo.env_runner._env_to_module
    algo.stop()
    return batches, pipeline


def _finished_rows(batches: list[dict[str, np.ndarray]]) -> dict[int, dict[str, np.ndarray]]:
    """The rows of each episode that ended within `batches`, by episode ID."""
    merged = {k: np.concatenate([b[k] for b in batches]) for k in batches[0]}
    ended = merged[Columns.EPS_ID][merged[Columns.TERMINATEDS] | merged[Columns.TRUNCATEDS]]
    return {int(e): {k: v[merged[Columns.EPS_ID] == e] for k, v in merged.items()} for e in ended}


def test_env_runner_writes_every_finished_episode(
    tmp_path: Path, keep_batches: KeepBatches
) -> None:
    batches, _ = _record_with_ppo(tmp_path, keep_batches, "CartPole-v1")
    expected = _finished_rows(batches)
    stored = {
        int(ep[Columns.EPS_ID][0]) & 0xFFFF_FFFF: ep  # the writer's offset removed
        for ep in _episodes(read_columns(resolve_files(tmp_path), obs_shape=(4,)))
    }
    assert stored.keys() == expected.keys() and len(stored) > 10
    for eps, ep in stored.items():
        for k in (
            Columns.OBS,
            Columns.NEXT_OBS,
            Columns.ACTIONS,
            Columns.REWARDS,
            Columns.TERMINATEDS,
            Columns.TRUNCATEDS,
            Columns.ACTION_LOGP,
        ):
            assert ep[k].tobytes() == expected[eps][k].tobytes(), (eps, k)


def test_env_runner_stores_raw_observations_that_the_connectors_turn_back(
    tmp_path: Path, keep_batches: KeepBatches
) -> None:
    """FrozenLake's observations are one-hot for the module and stored as cell indices;
    with frame stacking on top, the reader's transform reproduces the module's view."""
    batches, pipeline = _record_with_ppo(
        tmp_path,
        keep_batches,
        "FrozenLake-v1",
        iterations=3,
        # User pieces run before the default one-hot (as in RLlib): flatten first.
        env_to_module_connector=lambda env, spaces, device: [
            FlattenObservations(),
            FrameStacking(num_frames=2),
        ],
    )
    expected = _finished_rows(batches)
    cols = read_columns(resolve_files(tmp_path), columns=None)
    assert cols[Columns.OBS].dtype == np.int64 and cols[Columns.OBS].ndim == 1
    transform = module_view(pipeline, gym.spaces.Discrete(4))
    transform(cols)  # a second call must not see the first one's frames
    seen = transform(cols)
    episodes = _episodes({**cols, "module_obs": seen[Columns.OBS]})
    assert len(episodes) == len(expected) > 10
    for ep in episodes:
        eps = int(ep[Columns.EPS_ID][0]) & 0xFFFF_FFFF
        assert ep["module_obs"].tobytes() == expected[eps][Columns.OBS].tobytes()


def test_multi_agent_env_runner_writes_every_finished_agent_episode(tmp_path: Path) -> None:
    from rlmod.testing import MultiAgentCartPole

    config = (
        PPOConfig()
        .environment(MultiAgentCartPole, env_config={"num_agents": 3})
        .env_runners(num_envs_per_env_runner=2)
        .multi_agent(
            policies={"p0", "p1"}, policy_mapping_fn=lambda aid, episode, **kw: f"p{aid % 2}"
        )
        .training(train_batch_size=300, minibatch_size=100, num_epochs=1)
        .offline_data(output=str(tmp_path), output_max_rows_per_file=200)
        .debugging(seed=0)
    )
    algo = config.build_algo()
    runner = algo.env_runner
    batches: list[dict[str, dict[str, np.ndarray]]] = []
    sample = runner.sample

    def keep(**kwargs: Any) -> Any:
        out = sample(**kwargs)
        batches.append({mid: {k: v.copy() for k, v in b.items()} for mid, b in out.items()})
        return out

    runner.sample = keep
    for _ in range(3):
        algo.train()
    algo.stop()
    files = resolve_files(tmp_path)
    for mid in ("p0", "p1"):
        expected = _finished_rows([b[mid] for b in batches if mid in b])
        cols = read_columns(files, module_id=mid, obs_shape=(4,))
        stored = {int(ep[Columns.EPS_ID][0]) & 0xFFFF_FFFF: ep for ep in _episodes(cols)}
        assert stored.keys() == expected.keys() and len(stored) > 5
        for eps, ep in stored.items():
            assert len(set(ep[AGENT_ID])) == 1
            assert int(ep[AGENT_ID][0]) % 2 == int(mid[1])  # the mapping: agent -> p{aid % 2}
            for k in (
                Columns.OBS,
                Columns.NEXT_OBS,
                Columns.ACTIONS,
                Columns.REWARDS,
                Columns.TERMINATEDS,
                Columns.TRUNCATEDS,
            ):
                assert ep[k].tobytes() == expected[eps][k].tobytes(), (mid, eps, k)


def test_multi_agent_recording_refuses_transformed_observations(tmp_path: Path) -> None:
    from rlmod.testing import MultiAgentCartPole

    config = (
        PPOConfig()
        .environment(MultiAgentCartPole, env_config={"num_agents": 2})
        .env_runners(
            env_to_module_connector=lambda env, spaces, device: FrameStacking(num_frames=2)
        )
        .offline_data(output=str(tmp_path))
    )
    with pytest.raises(OfflineDataError, match="records what the modules see"):
        config.build_algo()


@pytest.mark.ray
@pytest.mark.slow
def test_remote_env_runners_write_their_episodes_before_they_are_killed(tmp_path: Path) -> None:
    ray = pytest.importorskip("ray")
    started = not ray.is_initialized()  # else rlmod starts it; shut down here, then
    config = (
        PPOConfig()
        .environment("CartPole-v1")
        .env_runners(num_env_runners=1, num_envs_per_env_runner=2)
        .training(train_batch_size=200, minibatch_size=100, num_epochs=1)
        .offline_data(output=str(tmp_path))
        .debugging(seed=0)
    )
    algo = config.build_algo()
    result = algo.train()
    algo.stop()  # episodes still queued (far fewer rows than a file holds) are written
    if started:
        ray.shutdown()
    cols = read_columns(resolve_files(tmp_path), obs_shape=(4,))
    ends = cols[Columns.TERMINATEDS] | cols[Columns.TRUNCATEDS]
    assert int(ends.sum()) == result["num_episodes_lifetime"] > 0


def test_evaluation_episodes_are_not_recorded(tmp_path: Path) -> None:
    config = (
        PPOConfig()
        .environment("CartPole-v1")
        .env_runners(num_envs_per_env_runner=2)
        .training(train_batch_size=200, minibatch_size=100, num_epochs=1)
        .evaluation(evaluation_interval=1, evaluation_duration=3)
        .offline_data(output=str(tmp_path))
        .debugging(seed=0)
    )
    algo = config.build_algo()
    result = algo.train()
    algo.stop()
    assert result["evaluation"]["env_runners"]["num_episodes"] == 3
    cols = read_columns(resolve_files(tmp_path), obs_shape=(4,))
    ends = cols[Columns.TERMINATEDS] | cols[Columns.TRUNCATEDS]
    assert int(ends.sum()) == result["num_episodes_lifetime"]

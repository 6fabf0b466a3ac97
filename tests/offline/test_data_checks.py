"""Offline data that does not fit the module's spaces (rlmod/offline/checks.py): each misfit
an OfflineDataError naming the file and the column, before a wrong number trains. Without
the checks Discrete(2) actions 0.5 / 1.7 trained as 0 / 1, 5 or -1 ended in torch's "index
out of bounds", observations of another size in numpy's "cannot reshape", and strings in a
raw TypeError."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rlmod.algorithms.bc import BCConfig
from rlmod.algorithms.marwil import MARWILConfig
from rlmod.errors import OfflineDataError
from rlmod.offline import record_episodes
from rlmod.testing import cartpole_expert

CARTPOLE = gym.make("CartPole-v1")


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Four scripted-expert CartPole episodes in one file, with spaces.json."""
    out = tmp_path_factory.mktemp("recorded")
    record_episodes(CARTPOLE, cartpole_expert, num_episodes=4, output_dir=out, seed=0)
    return out


def _changed(
    recorded: Path, tmp_path: Path, column: str, make: Callable[[pa.Table], Any]
) -> tuple[Path, Path]:
    """A copy of the data whose file has `column` replaced by `make(table)`; the copy's
    directory and its file."""
    out = tmp_path / "data"
    shutil.copytree(recorded, out)
    (file,) = sorted(out.glob("*.parquet"))
    table = pq.read_table(file)
    table = table.set_column(table.schema.get_field_index(column), column, make(table))
    pq.write_table(table, file)
    return out, file


def _train(config: Any) -> None:
    algo = config.build_algo()
    try:
        algo.train()
    finally:
        algo.stop()


def _config(cls: type, data: Path, **spaces: gym.Space) -> Any:
    return (
        cls()
        .environment(**spaces)
        .offline_data(input_=str(data))
        .training(train_batch_size=64, minibatch_size=32, num_epochs=1)
        .debugging(seed=0)
    )


def _every_other(n: int, a: Any, b: Any) -> np.ndarray:
    return np.where(np.arange(n) % 2 == 0, a, b)


def _one_at(n: int, row: int, value: Any, rest: Any = 0) -> np.ndarray:
    return np.where(np.arange(n) == row, value, rest)


BAD = {  # name: (column, new column from the table, what the message says)
    "float actions 0.5 / 1.7": (
        "actions",
        lambda t: pa.array(_every_other(t.num_rows, 0.5, 1.7)),
        r"in row 0, actions is 0\.5, not an integer in 0\.\.1 of Discrete\(2\)",
    ),
    "action 5": (
        "actions",
        lambda t: pa.array(_one_at(t.num_rows, 7, 5)),
        r"in row 7, actions is 5, outside 0\.\.1 of Discrete\(2\)",
    ),
    "action -1": (
        "actions",
        lambda t: pa.array(_one_at(t.num_rows, 9, -1)),
        r"in row 9, actions is -1, outside 0\.\.1 of Discrete\(2\)",
    ),
    "observations of 3 values": (
        "obs",
        lambda t: pa.FixedSizeListArray.from_arrays(
            pa.array(np.zeros(3 * t.num_rows, np.float32)), 3
        ),
        r"column 'obs' holds rows of 3 values, but Box\(.*\) has shape \(4,\)",
    ),
    "observations of 1 value": (
        "obs",
        lambda t: pa.array(np.zeros(t.num_rows, np.float32)),
        r"column 'obs' holds one number per row, but Box\(.*\) has shape \(4,\)",
    ),
    "observations as lists of varying size": (
        "obs",
        lambda t: pa.array([[0.0] * (4 if i != 5 else 3) for i in range(t.num_rows)]),
        r"column 'obs' holds rows of 3 values \(row 5 of the chunk read\), but the space's "
        r"shape \(4,\) has 4",
    ),
    "string rewards": (
        "rewards",
        lambda t: pa.array(["1.0"] * t.num_rows),
        r"column 'rewards' holds string values, not numbers",
    ),
    "string actions": (
        "actions",
        lambda t: pa.array(["left"] * t.num_rows),
        r"column 'actions' holds string values, not numbers of Discrete\(2\)",
    ),
    "string observations": (
        "obs",
        lambda t: pa.array([["a"] * 4] * t.num_rows),
        r"column 'obs' holds list<\w+: string> values, not numbers of Box",
    ),
    "string flags": (
        "terminateds",
        lambda t: pa.array(["no"] * t.num_rows),
        r"column 'terminateds' holds string values, not booleans",
    ),
    "flags of 2": (
        "truncateds",
        lambda t: pa.array(_one_at(t.num_rows, 3, 2)),
        r"column 'truncateds' holds 2 in row 3; a flag is True/False",
    ),
    "a NaN observation": (
        "obs",
        lambda t: pa.FixedSizeListArray.from_arrays(
            pa.array(_one_at(4 * t.num_rows, 4 * 11 + 2, np.nan, 0.0).astype(np.float32)), 4
        ),
        r"column 'obs' holds \[0\.0, 0\.0, nan, 0\.0\] in row 11: NaN or inf",
    ),
    "an inf reward": (
        "rewards",
        lambda t: pa.array(_one_at(t.num_rows, 6, np.inf, 1.0)),
        r"column 'rewards' holds inf in row 6: NaN or inf",
    ),
    "a missing action": (
        "actions",
        lambda t: pa.array([None if i == 4 else 0 for i in range(t.num_rows)], pa.int64()),
        r"column 'actions' has a missing \(null\) value in row 4",
    ),
}


@pytest.mark.parametrize("case", list(BAD))
@pytest.mark.parametrize("cls", [BCConfig, MARWILConfig])
def test_data_that_does_not_fit_is_named_with_file_and_column(recorded, tmp_path, cls, case):
    column, make, message = BAD[case]
    data, file = _changed(recorded, tmp_path, column, make)
    with pytest.raises(OfflineDataError, match=rf"{file.name}: .*{message}"):
        _train(_config(cls, data))


@pytest.mark.parametrize(
    "case", ["float actions 0.5 / 1.7", "action 5", "observations of 3 values", "string rewards"]
)
def test_the_same_with_spaces_in_the_config(recorded, tmp_path, case):
    column, make, message = BAD[case]
    data, file = _changed(recorded, tmp_path, column, make)
    config = _config(
        BCConfig,
        data,
        observation_space=gym.spaces.Box(-np.inf, np.inf, (4,)),
        action_space=gym.spaces.Discrete(2),
    )
    with pytest.raises(OfflineDataError, match=rf"{file.name}: .*{message}"):
        _train(config)


def test_wrong_kinds_and_sizes_are_refused_before_training(recorded, tmp_path):
    """Footer checks: build_algo() refuses, no batch is read."""
    column, make, _ = BAD["observations of 3 values"]
    data, file = _changed(recorded, tmp_path, column, make)
    with pytest.raises(OfflineDataError, match=rf"{file.name}: column 'obs'"):
        _config(BCConfig, data).build_algo()


def test_integral_floats_and_int_flags_fit(recorded, tmp_path):
    """Actions 0.0 / 1.0 stored as floats, and flags as 0/1 integers, are what they say."""
    data, file = _changed(
        recorded,
        tmp_path,
        "actions",
        lambda t: pa.array(
            pq.read_table(next(recorded.glob("*.parquet")))["actions"].to_numpy().astype(float)
        ),
    )
    table = pq.read_table(file)
    table = table.set_column(
        table.schema.get_field_index("terminateds"),
        "terminateds",
        pa.array(table["terminateds"].to_numpy().astype(np.int8)),
    )
    pq.write_table(table, file)
    _train(_config(MARWILConfig, data))


def test_discrete_observations_outside_their_space_are_named(tmp_path):
    out = tmp_path / "lake"
    record_episodes(
        gym.make("FrozenLake-v1"), lambda obs: 1, num_episodes=3, output_dir=out, seed=0
    )
    (file,) = sorted(out.glob("*.parquet"))
    table = pq.read_table(file)
    obs = table["obs"].to_numpy().copy()
    obs[2] = 16
    table = table.set_column(table.schema.get_field_index("obs"), "obs", pa.array(obs))
    pq.write_table(table, file)
    with pytest.raises(
        OfflineDataError,
        match=rf"{file.name}: in row 2, obs is 16, outside "
        r"0\.\.15 of Discrete\(16\)",
    ):
        _train(_config(BCConfig, out))

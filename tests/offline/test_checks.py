"""ColumnCheck (rlmod.offline.checks) on Arrow schemas and numpy chunks built in memory:
which column kinds and row sizes a footer may have (flags: booleans or integers; a
Discrete column: one number, not lists), the hint for a vector env's batched rows, and
each value misfit in a chunk (strings, NaN, flags not 0/1, shapes, values outside an
integer space, fractions) as an OfflineDataError naming the file, the column and the row.

The same checks reached through real parquet files, the OfflineReader and build_algo()
are tested in tests/offline/test_data_checks.py.
"""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pyarrow as pa
import pytest

from rlmod.core.columns import Columns
from rlmod.errors import OfflineDataError
from rlmod.offline.checks import ColumnCheck, row_shape

FILE = Path("data/part-0.parquet")
CHECK = ColumnCheck(
    observation_space=gym.spaces.Box(-1.0, 1.0, (2, 3), np.float32),
    action_space=gym.spaces.Discrete(3, start=1),
    origin="data/spaces.json",
)


def test_row_shape_of_a_discrete_space_is_a_scalar():
    assert row_shape(gym.spaces.Discrete(4)) == ()
    assert row_shape(gym.spaces.Box(0, 1, (2, 3))) == (2, 3)
    assert row_shape(gym.spaces.MultiBinary(5)) == (5,)


def _schema(**fields: pa.DataType) -> pa.Schema:
    return pa.schema(list(fields.items()))


def test_a_well_formed_footer_passes_and_unlisted_columns_are_not_looked_at():
    schema = _schema(
        obs=pa.list_(pa.float32(), 6),
        new_obs=pa.list_(pa.float64()),  # variable-size lists: sizes checked per chunk
        actions=pa.int64(),
        rewards=pa.float32(),
        terminateds=pa.bool_(),
        truncateds=pa.int8(),
        notes=pa.string(),
    )
    columns = ["obs", "new_obs", "actions", "rewards", "terminateds", "truncateds", "absent"]
    CHECK.schema(schema, FILE, columns)
    with pytest.raises(OfflineDataError, match="'notes' holds string values, not numbers"):
        CHECK.schema(schema, FILE, [*columns, "notes"])


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"rewards": pa.string()}, r"'rewards' holds string values, not numbers\. Re-record"),
        ({"terminateds": pa.float32()}, r"'terminateds' holds float values, not booleans"),
        (
            {"obs": pa.list_(pa.string(), 6)},
            r"'obs' holds fixed_size_list<item: string>\[6\] values, not numbers of Box",
        ),
        ({"actions": pa.list_(pa.int64(), 1)}, r"'actions' holds lists .* one number per row"),
        (
            {"obs": pa.list_(pa.float32(), 5)},
            r"'obs' holds rows of 5 values, but Box.* \(6 values\)",
        ),
        ({"obs": pa.float32()}, r"'obs' holds one number per row, but Box.* has shape \(2, 3\)"),
    ],
)
def test_a_bad_footer_names_the_file_and_column(fields: dict, message: str):
    with pytest.raises(OfflineDataError, match=message) as info:
        CHECK.schema(_schema(**fields), FILE, list(fields))
    assert str(info.value).startswith(f"{FILE}: column")
    if "obs" in fields:
        assert "(Spaces from data/spaces.json.)" in str(info.value)


def test_rows_of_one_batched_entry_get_the_vector_env_hint():
    """A single env's rows of 3 values read with a recorded batched space (2, 3)."""
    with pytest.raises(OfflineDataError, match="looks like a vector env's batched spaces"):
        CHECK.schema(_schema(obs=pa.list_(pa.float32(), 3)), FILE, ["obs"])
    with pytest.raises(OfflineDataError) as info:  # any other size: no such hint
        CHECK.schema(_schema(obs=pa.list_(pa.float32(), 4)), FILE, ["obs"])
    assert "batched" not in str(info.value)


def _chunk(**overrides: np.ndarray) -> dict[str, np.ndarray]:
    cols = {
        Columns.OBS: np.zeros((4, 2, 3), np.float32),
        Columns.ACTIONS: np.array([1, 2, 3, 1]),
        Columns.REWARDS: np.ones(4, np.float32),
        Columns.TERMINATEDS: np.array([0, 0, 0, 1], np.int8),
        "extra": np.array(["a", "b", "c", "d"]),  # no rule for it: not checked
    }
    cols.update(overrides)
    return cols


def _row_in_file(row: int) -> int:
    return 100 + row


def test_a_good_chunk_passes_integral_floats_included():
    CHECK.chunk(_chunk(), FILE, _row_in_file)
    CHECK.chunk(_chunk(actions=np.array([1.0, 3.0, 2.0, 1.0])), FILE, _row_in_file)
    CHECK.chunk(_chunk(actions=np.array([[1], [2], [3], [1]])), FILE, _row_in_file)  # [N, 1]
    CHECK.chunk(_chunk(terminateds=np.array([False, True, False, False])), FILE, _row_in_file)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"rewards": np.array(["1"] * 4)}, r"'rewards' holds <U1 values \(e.g. np.str_\('1'\)\)"),
        (
            {"rewards": np.array([1.0, 1.0, np.nan, 1.0])},
            r"'rewards' holds nan in row 102: NaN or inf",
        ),
        (
            {"obs": np.where(np.arange(24).reshape(4, 2, 3) == 9, np.inf, 0.0)},
            r"'obs' holds \[\[0.0, 0.0, 0.0\], \[inf, 0.0, 0.0\]\] in row 101",
        ),
        ({"terminateds": np.array([0, 2, 0, 1])}, r"'terminateds' holds 2 in row 101; a flag"),
        ({"obs": np.zeros((4, 6), np.float32)}, r"'obs' holds rows of shape \(6,\), but Box"),
        (
            {"actions": np.array([[1, 1]] * 4)},
            r"'actions' holds rows of shape \(2,\), but Discrete",
        ),
        ({"actions": np.array([1, 2, 4, 1])}, r"in row 102, .*4"),
        ({"actions": np.array([1, 0, 2, 1])}, r"in row 101, .*0"),
        ({"actions": np.array([1.0, 1.5, 2.0, 1.0])}, r"in row 101, .*1.5"),
    ],
)
def test_a_bad_value_names_the_file_column_and_row(overrides: dict, message: str):
    with pytest.raises(OfflineDataError, match=message) as info:
        CHECK.chunk(_chunk(**overrides), FILE, _row_in_file)
    assert str(info.value).startswith(f"{FILE}:")


def test_a_row_of_unknown_position_is_called_a_row():
    with pytest.raises(OfflineDataError, match=r"in a row, "):
        CHECK.chunk(_chunk(actions=np.array([9, 1, 1, 1])), FILE, lambda row: None)


def test_box_actions_may_lie_outside_their_bounds():
    box = ColumnCheck(CHECK.observation_space, gym.spaces.Box(-1, 1, (2,)), "config")
    box.chunk(_chunk(actions=np.full((4, 2), 5.0)), FILE, _row_in_file)
    with pytest.raises(OfflineDataError, match="NaN or inf"):
        box.chunk(_chunk(actions=np.full((4, 2), np.inf)), FILE, _row_in_file)

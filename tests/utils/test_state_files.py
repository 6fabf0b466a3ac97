"""State files (rlmod.utils.state_files): a nested state round-trips through state.json +
state.safetensors with its types (tensors, numpy arrays, numbers, lists), keys that hold
'/' or '~' never collide, what cannot be stored is refused at write time naming its path,
and every way a file on disk can be missing or broken reads as a CheckpointError naming
the file.

Checkpoints of whole algorithms, and tampering with them, are tested in
tests/utils/test_checkpoints.py and tests/utils/test_checkpoint_tampering.py.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from rlmod.errors import CheckpointError
from rlmod.utils.state_files import (
    STATE_JSON,
    STATE_TENSORS,
    flatten_state,
    read_json,
    read_state,
    write_json,
    write_safetensors,
    write_state,
    write_tensors,
)


def test_a_nested_state_round_trips_with_its_types(tmp_path: Path):
    state = {
        "weights": {"w": torch.arange(6, dtype=torch.float32).view(2, 3)},
        "counts": np.array([1, 2, 3], dtype=np.int32),
        "flags": torch.tensor([True, False]),
        "half": torch.ones(2, dtype=torch.bfloat16),
        "empty": torch.zeros(0, 4),
        "scalar": np.float32(0.5),
        "nested": [1, "two", None, (3.0, torch.tensor(7, dtype=torch.int64))],
    }
    write_state(tmp_path, state)
    back = read_state(tmp_path)

    assert torch.equal(back["weights"]["w"], state["weights"]["w"])
    assert isinstance(back["counts"], np.ndarray) and back["counts"].dtype == np.int32
    assert back["counts"].tolist() == [1, 2, 3]
    assert back["flags"].dtype == torch.bool and back["flags"].tolist() == [True, False]
    assert back["half"].dtype == torch.bfloat16
    assert back["empty"].shape == (0, 4)
    assert back["scalar"] == 0.5 and type(back["scalar"]) is float  # numpy scalar -> float
    assert back["nested"][:3] == [1, "two", None]
    assert back["nested"][3][0] == 3.0 and int(back["nested"][3][1]) == 7  # tuple -> list


def test_keys_with_slashes_and_tildes_do_not_collide(tmp_path: Path):
    state = {
        "a/b": torch.tensor([1.0]),
        "a": {"b": torch.tensor([2.0])},
        "~1": torch.tensor([3.0]),
        "/": torch.tensor([4.0]),
    }
    tree, tensors = flatten_state(state)
    assert len(tensors) == 4 and set(tensors) == {"a~1b", "a/b", "~01", "~1"}
    write_state(tmp_path, state)
    back = read_state(tmp_path)
    assert [float(back[k]) for k in ("a/b", "~1", "/")] == [1.0, 3.0, 4.0]
    assert float(back["a"]["b"]) == 2.0


def test_read_only_numpy_arrays_are_stored():
    array = np.arange(4.0)
    array.setflags(write=False)  # as Ray's object store hands them out
    _, tensors = flatten_state({"x": array})
    assert tensors["x"].tolist() == [0.0, 1.0, 2.0, 3.0]


@pytest.mark.parametrize(
    ("state", "message"),
    [
        ({"a": {1: 2}}, r"State key 1 at a is not a string"),
        ({"a": [0, {"b": object()}]}, r"State value at a/1/b is a object"),
        ({"a": {1.5, 2.5}}, r"State value at a is a set"),
    ],
)
def test_values_a_state_cannot_hold_are_refused_naming_their_path(state, message):
    with pytest.raises(TypeError, match=message):
        flatten_state(state)


def test_a_dict_that_looks_like_a_tensor_reference_is_refused(tmp_path: Path):
    # read back, {"__tensor__": "x"} would be taken for a reference to tensor "x"
    with pytest.raises(TypeError, match="state files reserve for array references"):
        flatten_state({"a": {"__tensor__": "x"}})
    with pytest.raises(TypeError, match="state files reserve for array references"):
        write_state(tmp_path, {"__ndarray__": "y"})
    # with another key beside it, it is an ordinary dict
    write_state(tmp_path, {"a": {"__tensor__": "x", "b": 1}})
    assert read_state(tmp_path) == {"a": {"__tensor__": "x", "b": 1}}


def test_a_dtype_safetensors_cannot_store_is_refused(tmp_path: Path):
    with pytest.raises(TypeError, match=r"'z' has dtype torch.complex64"):
        write_safetensors(tmp_path / "x.safetensors", {"z": torch.zeros(2, dtype=torch.cfloat)})


def test_safetensors_written_here_are_read_by_the_library_with_an_aligned_header(tmp_path):
    safetensors_torch = pytest.importorskip("safetensors.torch")
    path = tmp_path / "t.safetensors"
    tensors = {
        "a": torch.arange(3, dtype=torch.int16),
        "b": torch.randn(2, 5).t(),  # not contiguous
        "c": torch.tensor([1.5], dtype=torch.float64),
    }
    write_safetensors(path, tensors)
    raw = path.read_bytes()
    (header_size,) = struct.unpack("<Q", raw[:8])
    assert header_size % 8 == 0
    header = json.loads(raw[8 : 8 + header_size])
    assert header["a"] == {"dtype": "I16", "shape": [3], "data_offsets": [0, 6]}
    loaded = safetensors_torch.load_file(str(path))
    for key, t in tensors.items():
        assert torch.equal(loaded[key], t), key


def test_write_state_writes_only_files_with_something_to_hold(tmp_path: Path):
    empty, plain = tmp_path / "empty", tmp_path / "plain"
    empty.mkdir()
    plain.mkdir()
    write_state(empty, {})
    assert list(empty.iterdir()) == []
    write_state(plain, {"n": 3})
    assert sorted(p.name for p in plain.iterdir()) == [STATE_JSON]
    assert read_state(plain) == {"n": 3}
    # a component with metadata but no state of its own reads as empty
    write_json(empty / "metadata.json", {})
    assert read_state(empty) == {}


def test_select_and_skip_prefixes_read_only_part_of_a_state(tmp_path: Path):
    write_state(
        tmp_path,
        {
            "p0": {"pi.w": torch.ones(2), "vf.w": torch.zeros(2)},
            "p1": {"pi.w": torch.ones(3)},
            "meta": 5,
        },
    )
    # with the tensor file gone, a part without arrays still reads (nothing is loaded)
    assert read_state(tmp_path, select=["meta"]) == {"meta": 5}
    part = read_state(tmp_path, select=["p0"], skip_prefixes=("vf.",))
    assert list(part) == ["p0"] and list(part["p0"]) == ["pi.w"]
    with pytest.raises(CheckpointError, match=r"has no entry 'p2'; it has \['meta', 'p0', 'p1'\]"):
        read_state(tmp_path, select=["p0", "p2"])


def test_read_json_names_the_file_for_each_way_it_can_be_bad(tmp_path: Path):
    with pytest.raises(CheckpointError, match=r"nope.json is missing: this is not a complete"):
        read_json(tmp_path / "nope.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(CheckpointError, match=r"bad.json is not valid JSON"):
        read_json(tmp_path / "bad.json")
    (tmp_path / "list.json").write_text("[1, 2]")
    with pytest.raises(CheckpointError, match=r"list.json holds a list, expected a dict"):
        read_json(tmp_path / "list.json")
    assert read_json(tmp_path / "list.json", expect=list) == [1, 2]
    (tmp_path / "dir.json").mkdir()
    with pytest.raises(CheckpointError, match=r"dir.json cannot be read"):
        read_json(tmp_path / "dir.json")
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(CheckpointError, match=r"deep.json nests deeper than Python can read"):
        read_json(tmp_path / "deep.json", expect=list)


def test_broken_tensor_files_read_as_checkpoint_errors_naming_the_file(tmp_path: Path):
    write_state(tmp_path, {"w": torch.ones(3)})
    tensors = tmp_path / STATE_TENSORS

    tree = json.loads((tmp_path / STATE_JSON).read_text())
    tree["v"] = {"__tensor__": "v"}  # a reference the tensor file does not hold
    write_json(tmp_path / STATE_JSON, tree)
    with pytest.raises(CheckpointError, match=r"has no tensor 'v', which .*state.json refers"):
        read_state(tmp_path)
    assert float(read_state(tmp_path, select=["w"])["w"][0]) == 1.0

    tensors.write_bytes(tensors.read_bytes()[:-4])  # truncated
    with pytest.raises(CheckpointError, match=r"state.safetensors is not a valid safetensors"):
        read_state(tmp_path, select=["w"])
    tensors.unlink()
    with pytest.raises(CheckpointError, match=r"state.safetensors is missing"):
        read_state(tmp_path, select=["w"])


def test_a_flat_tensor_state_round_trips_as_one_safetensors_file(tmp_path: Path) -> None:
    """A module's weights: `write_tensors` writes no state.json; names with '/' or '~' and
    dtypes come back as they were, and a broken file is named."""
    (tmp_path / "metadata.json").write_text("{}")
    state = {"a.weight": torch.randn(3, 2), "odd/name~x": torch.arange(4), "b": torch.ones(0)}
    write_tensors(tmp_path, state)
    assert not (tmp_path / STATE_JSON).exists()
    back = read_state(tmp_path)
    assert back.keys() == state.keys()
    assert all(torch.equal(back[k], v) and back[k].dtype == v.dtype for k, v in state.items())
    assert read_state(tmp_path, select=["odd/name~x"]).keys() == {"odd/name~x"}
    with pytest.raises(CheckpointError, match="has no tensor 'c'"):
        read_state(tmp_path, select=["c"])
    (tmp_path / STATE_TENSORS).write_bytes(b"\0" * 64)
    with pytest.raises(CheckpointError, match="state.safetensors is not a valid safetensors"):
        read_state(tmp_path)

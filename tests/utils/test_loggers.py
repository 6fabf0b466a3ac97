"""Result loggers (rlmod.utils.loggers) on hand-made result dicts: flattening, what
`to_jsonable` makes of NaN, numpy, tensors and unknown objects, CSV rows of numbers only
with a header that grows (earlier rows left empty there), JSON lines with NaN as null,
params.json of a config with an unstorable setting, and the plain progress line.

Run directories written by `rlmod train` are tested in tests/test_cli.py.
"""

from __future__ import annotations

import csv
import io
import json
import logging
from pathlib import Path

import numpy as np
import pytest
import torch

from rlmod.algorithms.ppo import PPOConfig
from rlmod.utils.loggers import (
    CSVLogger,
    JsonlLogger,
    ProgressBar,
    RunLogger,
    config_to_jsonable,
    flatten_result,
    to_jsonable,
    write_params,
)
from rlmod.utils.progress import estimate_eta_s, format_eta


def test_flatten_result_joins_nested_keys_and_stringifies_them():
    assert flatten_result({"a": {1: {"b": 2}}, "c": [1]}) == {"a/1/b": 2, "c": [1]}
    assert flatten_result({"a": {"b": 1}}, sep=".") == {"a.b": 1}
    assert flatten_result({"empty": {}}) == {}


def test_to_jsonable_makes_plain_finite_values():
    value = {
        "nan": float("nan"),
        "inf": np.float32(np.inf),
        "i": np.int64(3),
        "t": torch.tensor(2.5),
        "flag": np.bool_(True),
        "arr": np.array([[1.0, np.nan]]),
        "vec": torch.tensor([1, 2]),
        "set": {7},
        "obj": Path("x"),
    }
    out = to_jsonable(value)
    assert out == {
        "nan": None,
        "inf": None,
        "i": 3,
        "t": 2.5,
        "flag": True,
        "arr": [[1.0, None]],
        "vec": [1, 2],
        "set": [7],
        "obj": "PosixPath('x')",
    }
    assert type(out["i"]) is int
    json.dumps(out, allow_nan=False)


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def test_csv_rows_hold_numbers_only_and_the_header_grows(tmp_path: Path):
    path = tmp_path / "progress.csv"
    log = CSVLogger(path)
    log.log({"training_iteration": 1, "env_runners": {"ret": np.float32(1.5)}, "name": "x"})
    log.log({"training_iteration": 2, "done": True, "evaluation": {"ret": torch.tensor(9)}})
    log.log({"training_iteration": 3, "env_runners": {"ret": float("nan")}})
    log.close()
    log.close()  # twice: a no-op
    rows = _rows(path)
    assert list(rows[0]) == ["training_iteration", "env_runners/ret", "evaluation/ret"]
    assert rows == [
        {"training_iteration": "1", "env_runners/ret": "1.5", "evaluation/ret": ""},
        {"training_iteration": "2", "env_runners/ret": "", "evaluation/ret": "9"},
        {"training_iteration": "3", "env_runners/ret": "nan", "evaluation/ret": ""},
    ]


def test_jsonl_lines_are_whole_results_with_nan_as_null(tmp_path: Path):
    log = JsonlLogger(tmp_path / "result.jsonl")
    log.log({"a": {"b": float("nan")}, "n": np.int32(2)})
    log.log({"a": {"b": 1.0}})
    log.close()
    lines = (tmp_path / "result.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == [{"a": {"b": None}, "n": 2}, {"a": {"b": 1.0}}]
    with pytest.raises(AssertionError, match=r"log\(\) after close\(\)"):
        log.log({})


def test_params_of_a_config_with_a_lambda_keep_the_rest_and_name_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    config = PPOConfig().environment("CartPole-v1").training(lr=0.01)
    config.multi_agent(policies={"p0"}, policy_mapping_fn=lambda aid, ep, **kw: "p0")
    with caplog.at_level(logging.WARNING, logger="rlmod.utils.loggers"):
        out = config_to_jsonable(config)
    assert out["lr"] == 0.01 and out["env"] == "CartPole-v1"
    assert list(out["policy_mapping_fn"]) == ["__repr__"]
    assert "<lambda>" in out["policy_mapping_fn"]["__repr__"]
    assert "['policy_mapping_fn'] cannot be stored as JSON" in caplog.text

    path = write_params(tmp_path, config)
    params = json.loads(path.read_text())
    assert params["lr"] == 0.01 and list(params) == sorted(params)


def test_params_of_a_storable_config_are_its_to_dict(tmp_path: Path):
    config = PPOConfig().environment("CartPole-v1")
    assert config_to_jsonable(config) == config.to_dict()


def test_run_logger_writes_every_file_and_closes_them(tmp_path: Path):
    run = tmp_path / "run"
    with RunLogger(run, config=PPOConfig(), tensorboard=False) as logs:
        logs.log({"training_iteration": 1, "x": 2.0})
    assert sorted(p.name for p in run.iterdir()) == ["params.json", "progress.csv", "result.jsonl"]
    assert _rows(run / "progress.csv") == [{"training_iteration": "1", "x": "2.0"}]


def test_plain_progress_lines():
    stream = io.StringIO()
    bar = ProgressBar(total_env_steps=10_000, stream=stream)  # not a terminal: plain lines
    bar.update({"training_iteration": 1, "num_env_steps_sampled_lifetime": 4000})
    bar.update(
        {
            "training_iteration": 2,
            "num_env_steps_sampled_lifetime": 8000,
            "env_runners": {"episode_return_mean": 21.456},
        }
    )
    bar.close()
    first, second = stream.getvalue().splitlines()
    assert first.startswith("iter    1  env steps     4,000/10,000  episode_return_mean      nan")
    assert second.startswith("iter    2  env steps     8,000/10,000  episode_return_mean    21.46")
    assert " env steps/s  ETA " in second  # bounded by --stop-timesteps: an ETA


def test_eta_is_the_first_bounded_criterion_at_the_rate_so_far():
    # 40% of the steps in 10 s: 15 s more; half the iterations: 10 s more; 30 s budget, 10 used
    done = [(400.0, 1000.0), (5.0, 10.0)]
    assert estimate_eta_s(elapsed_s=10.0, done=done, seconds_left=20.0) == 10.0
    assert estimate_eta_s(elapsed_s=10.0, done=[(400.0, 1000.0)]) == 15.0
    assert estimate_eta_s(elapsed_s=10.0, done=[(0.0, 10.0)]) is None  # no progress yet
    assert estimate_eta_s(elapsed_s=10.0, done=[]) is None  # nothing bounded: no ETA
    assert format_eta(3723.4) == "1:02:03" and format_eta(None) == "-"


def test_plain_lines_every_n_iterations_with_eta_and_resumed_counters(
    monkeypatch: pytest.MonkeyPatch,
):
    clock = iter(range(100))  # one second per call: creation at 0, iteration 5 at 1, ...
    monkeypatch.setattr("rlmod.utils.progress.time.perf_counter", lambda: float(next(clock)))
    stream = io.StringIO()
    bar = ProgressBar(
        total_iterations=10, start_iteration=4, start_env_steps=4000, every=2, stream=stream
    )
    for it in range(5, 9):
        bar.update({"training_iteration": it, "num_env_steps_sampled_lifetime": 1000 * it})
    lines = stream.getvalue().splitlines()
    assert [line.split()[1] for line in lines] == ["6", "8"]  # every 2 from the resume
    # 2,000 new steps in 2 s (not the 6,000 lifetime ones); 2 of 6 iterations in 2 s: 4 s left
    assert "  1,000 env steps/s  ETA 0:00:04" in lines[0]
    assert "ETA 0:00:02" in lines[1]
    plain = io.StringIO()
    unbounded = ProgressBar(stream=plain)
    unbounded.update({"training_iteration": 1, "num_env_steps_sampled_lifetime": 10})
    assert "ETA" not in plain.getvalue()


def test_csv_and_jsonl_append_to_a_resumed_run(tmp_path: Path):
    run = tmp_path / "run"
    with RunLogger(run, tensorboard=False) as logs:
        logs.log({"training_iteration": 1, "x": 1.0})
    params = run / "params.json"
    params.write_text("{}")
    with RunLogger(run, config=PPOConfig(), tensorboard=False, append=True) as logs:
        logs.log({"training_iteration": 2, "x": 2.0})
        logs.log({"training_iteration": 3, "x": 3.0, "y": 9.0})  # a new column
    assert _rows(run / "progress.csv") == [
        {"training_iteration": "1", "x": "1.0", "y": ""},
        {"training_iteration": "2", "x": "2.0", "y": ""},
        {"training_iteration": "3", "x": "3.0", "y": "9.0"},
    ]
    lines = (run / "result.jsonl").read_text().splitlines()
    assert [json.loads(line)["training_iteration"] for line in lines] == [1, 2, 3]
    assert params.read_text() == "{}"  # kept
    assert not list(run.glob("*.tmp"))


def test_the_rich_bar_has_an_eta_column_when_bounded():
    pytest.importorskip("rich")
    bounded, unbounded = io.StringIO(), io.StringIO()
    for stream, kwargs in ((bounded, {"total_seconds": 30.0}), (unbounded, {})):
        bar = ProgressBar(stream=stream, use_rich=True, **kwargs)
        bar.update({"training_iteration": 1, "num_env_steps_sampled_lifetime": 100})
        bar.close()
    assert "ETA 0:00:" in bounded.getvalue()
    assert "ETA" not in unbounded.getvalue()

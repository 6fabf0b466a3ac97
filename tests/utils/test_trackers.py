"""W&B (offline, no network) and MLflow (a local file store) as trackers of a run
(rlmod/utils/trackers.py): the config once, scalars at their env-step counts, checkpoints
as artifacts; read back from what each wrote to disk."""

from __future__ import annotations

import glob
import json
import math
import os
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from rlmod.cli import main
from rlmod.utils.loggers import RunLogger

RESULTS = [
    {"num_env_steps_sampled_lifetime": 128, "env_runners": {"episode_return_mean": math.nan}},
    {"num_env_steps_sampled_lifetime": 256, "env_runners": {"episode_return_mean": 12.5}},
]


def _checkpoint(tmp_path: Path) -> Path:
    path = tmp_path / "ckpt"
    path.mkdir()
    (path / "metadata.json").write_text("{}")
    return path


def _wandb_records(run_file: str) -> list[Any]:
    """The protobuf records of an offline W&B run file (a LevelDB-style log: 32 KiB blocks
    of chunks, each with a 7-byte header crc32, length, type; after a 7-byte file header)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = Path(run_file).read_bytes()
    records, pending, offset = [], b"", 7
    while offset + 7 <= len(data):
        if 32768 - offset % 32768 < 7:  # a block's tail too short for a header: padding
            offset += 32768 - offset % 32768
            continue
        _, length, kind = struct.unpack("<IHB", data[offset : offset + 7])
        chunk, offset = data[offset + 7 : offset + 7 + length], offset + 7 + length
        if kind == 0:
            break
        pending = chunk if kind in (1, 2) else pending + chunk
        if kind in (1, 4):  # a whole record, or the last chunk of one
            record = pb.Record()
            record.ParseFromString(pending)
            records.append(record)
    return records


def test_wandb_offline_run_holds_the_config_scalars_by_env_steps_and_checkpoints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cartpole_config: Any
) -> None:
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    with RunLogger(tmp_path, config=cartpole_config, tensorboard=False, trackers=["wandb"]) as run:
        for result in RESULTS:
            run.log(result)
        run.log_checkpoint(_checkpoint(tmp_path), alias="best")
    (run_file,) = glob.glob(str(tmp_path / "wandb" / "offline-run-*" / "run-*.wandb"))
    deadline = time.monotonic() + 30
    records = _wandb_records(run_file)
    # W&B's service process writes the file; its last record, exit, comes a moment after
    # finish() returns.
    while (not records or records[-1].WhichOneof("record_type") != "exit") and (
        time.monotonic() < deadline
    ):
        time.sleep(0.2)
        records = _wandb_records(run_file)
    history = [r.history for r in records if r.WhichOneof("record_type") == "history"]
    assert [h.step.num for h in history] == [128, 256]
    values = [{i.key or "/".join(i.nested_key): i.value_json for i in h.item} for h in history]
    assert "env_runners/episode_return_mean" not in values[0]  # NaN: no episode yet
    assert json.loads(values[1]["env_runners/episode_return_mean"]) == 12.5
    config = [r.config for r in records if r.WhichOneof("record_type") == "config"]
    run_records = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    stored = {i.key: i.value_json for c in config for i in c.update}
    stored |= {i.key: i.value_json for r in run_records for i in r.config.update}
    assert json.loads(stored["lr"]) in (cartpole_config.lr, {"value": cartpole_config.lr})
    artifacts = [r.artifact for r in records if r.WhichOneof("record_type") == "artifact"]
    assert [a.type for a in artifacts] == ["model"] and "best" in artifacts[0].aliases


def test_mlflow_file_store_run_holds_params_metrics_by_env_steps_and_checkpoints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cartpole_config: Any
) -> None:
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    store = f"file:{tmp_path / 'mlruns'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3.x: opt in to files
    with RunLogger(tmp_path, config=cartpole_config, tensorboard=False, trackers=["mlflow"]) as run:
        for result in RESULTS:
            run.log(result)
        run.log_checkpoint(_checkpoint(tmp_path), alias="latest")
    client = MlflowClient(store)
    (found,) = client.search_runs([client.get_experiment_by_name("rlmod").experiment_id])
    assert found.info.run_name == tmp_path.name and found.info.status == "FINISHED"
    history = client.get_metric_history(found.info.run_id, "env_runners/episode_return_mean")
    assert [(m.step, m.value) for m in history] == [(256, 12.5)]
    steps = client.get_metric_history(found.info.run_id, "num_env_steps_sampled_lifetime")
    assert [m.step for m in steps] == [128, 256]
    assert json.loads(found.data.params["lr"]) == cartpole_config.lr
    files = [f.path for f in client.list_artifacts(found.info.run_id, "checkpoints/latest")]
    assert files == ["checkpoints/latest/metadata.json"]


def test_cli_logs_to_mlflow_with_the_final_and_best_checkpoints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    store = f"file:{tmp_path / 'mlruns'}"
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3.x: opt in to files
    env = {"MLFLOW_TRACKING_URI": store, "MLFLOW_ALLOW_FILE_STORE": "true"}
    out = subprocess.run(
        [
            sys.executable, "-m", "rlmod.cli", "train", "--env", "CartPole-v1",
            "--stop-iters", "2", "--eval-every", "1", "--eval-episodes", "2", "--logger",
            "csv", "mlflow", "--config", '{"train_batch_size": 128, "minibatch_size": 64}',
            "--run-dir", str(tmp_path / "run"),
        ],
        capture_output=True, text=True, timeout=300, env={**os.environ, **env},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert not list((tmp_path / "run").glob("events.out.tfevents.*"))  # not asked for
    client = MlflowClient(store)
    (found,) = client.search_runs([client.get_experiment_by_name("rlmod").experiment_id])
    run_id = found.info.run_id
    assert len(client.get_metric_history(run_id, "evaluation/env_runners/episode_return_mean")) == 2
    folders = {f.path for f in client.list_artifacts(run_id, "checkpoints")}
    assert folders == {"checkpoints/latest", "checkpoints/best"}


def test_a_missing_tracker_package_is_one_line_naming_the_extra(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "wandb", None)  # import wandb -> ImportError
    code = main(
        [
            "train", "--env", "CartPole-v1", "--stop-iters", "1", "--logger", "wandb",
            "--config", '{"train_batch_size": 64, "minibatch_size": 32}',
            "--run-dir", str(tmp_path / "run"),
        ]
    )  # fmt: skip
    assert code == 2
    assert "--logger wandb needs the wandb package: pip install 'rlmod[wandb]'" in (
        capsys.readouterr().err
    )

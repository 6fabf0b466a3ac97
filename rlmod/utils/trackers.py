"""Experiment trackers: Weights & Biases and MLflow, as loggers beside a run dir's CSV.

Used by `rlmod train --logger wandb|mlflow` through `RunLogger(trackers=...)`; each reads
result dicts only, as the other loggers do, and logs the run's config once, every numeric
scalar of each result at its env-step count, and checkpoints as artifacts. Both packages
are optional extras (`pip install 'rlmod[wandb]'`, `'rlmod[mlflow]'`), imported only here.
Where they log is theirs to configure: W&B reads `WANDB_MODE` (`offline` needs no
network; `wandb sync` uploads later), `WANDB_PROJECT`, `WANDB_DIR`; MLflow reads
`MLFLOW_TRACKING_URI` (a local store or a server) and `MLFLOW_EXPERIMENT_NAME`.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rlmod.utils.loggers import _as_number, flatten_result

STEP_KEY = "num_env_steps_sampled_lifetime"
"""Results are logged at this step, so runs of different iteration sizes line up."""

PROJECT = "rlmod"
"""The W&B project and MLflow experiment when the environment names none."""


def _scalars(result: Mapping[str, Any]) -> dict[str, float]:
    """The finite numbers of a flattened result (NaN means 'none yet' and is left out)."""
    out = {}
    for key, value in flatten_result(result).items():
        number = _as_number(value)
        if number is not None and number == number and abs(number) != float("inf"):
            out[key] = float(number)
    return out


def _missing(package: str, extra: str) -> ImportError:
    return ImportError(
        f"--logger {extra} needs the {package} package: pip install 'rlmod[{extra}]' (or "
        f"pip install {package})."
    )


class WandbTracker:
    """One W&B run per rlmod run: config, scalars by env steps, checkpoints as artifacts."""

    name = "wandb"

    def __init__(self, run_dir: Path, *, params: Mapping[str, Any]) -> None:
        try:
            import wandb
        except ImportError:
            raise _missing("wandb", "wandb") from None
        self._wandb = wandb
        self._run = wandb.init(
            project=os.environ.get("WANDB_PROJECT", PROJECT),
            name=run_dir.name,
            dir=os.environ.get("WANDB_DIR", str(run_dir)),
            config=dict(params),
            reinit="create_new",
            settings=wandb.Settings(quiet=True),
        )

    def log(self, result: Mapping[str, Any]) -> None:
        self._run.log(_scalars(result), step=int(result.get(STEP_KEY, 0)))

    def log_checkpoint(self, path: Path, *, alias: str) -> None:
        artifact = self._wandb.Artifact(f"{self._run.name}-checkpoint", type="model")
        artifact.add_dir(str(path))
        self._run.log_artifact(artifact, aliases=[alias])

    def close(self) -> None:
        self._run.finish()


class MLflowTracker:
    """One MLflow run per rlmod run: params, metrics by env steps, checkpoints as artifacts
    under `checkpoints/<alias>`."""

    name = "mlflow"

    def __init__(self, run_dir: Path, *, params: Mapping[str, Any]) -> None:
        try:
            from mlflow.entities import Param
            from mlflow.tracking import MlflowClient
        except ImportError:
            raise _missing("mlflow", "mlflow") from None
        self._client = MlflowClient()  # MLFLOW_TRACKING_URI, as MLflow users set it
        experiment = os.environ.get("MLFLOW_EXPERIMENT_NAME", PROJECT)
        found = self._client.get_experiment_by_name(experiment)
        experiment_id = found.experiment_id if found else self._client.create_experiment(experiment)
        self._run_id = self._client.create_run(experiment_id, run_name=run_dir.name).info.run_id
        flat = flatten_result(dict(params), sep=".")
        self._client.log_batch(
            self._run_id,
            params=[Param(k, json.dumps(v, default=str)[:6000]) for k, v in flat.items()],
        )

    def log(self, result: Mapping[str, Any]) -> None:
        from mlflow.entities import Metric

        step, now = int(result.get(STEP_KEY, 0)), int(time.time() * 1000)
        metrics = [Metric(k, v, now, step) for k, v in _scalars(result).items()]
        for i in range(0, len(metrics), 1000):  # MLflow takes at most 1000 per batch
            self._client.log_batch(self._run_id, metrics=metrics[i : i + 1000])

    def log_checkpoint(self, path: Path, *, alias: str) -> None:
        self._client.log_artifacts(self._run_id, str(path), artifact_path=f"checkpoints/{alias}")

    def close(self) -> None:
        self._client.set_terminated(self._run_id)


TRACKERS: dict[str, type] = {"wandb": WandbTracker, "mlflow": MLflowTracker}
"""`--logger` name -> tracker class."""

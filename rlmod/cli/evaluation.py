"""Evaluation-driven training for `rlmod train`: which return a stop reads, and the `best`
checkpoint kept by evaluation return (SB3's `EvalCallback(best_model_save_path=...)`).

Used by `rlmod.cli.train`. Evaluation itself is the Algorithm's (`evaluation_interval`,
`evaluation_duration`); `result["evaluation"]` holds the latest one, as in RLlib.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

BEST_DIR = "best"
"""The run dir's checkpoint of the highest evaluation return so far."""

BEST_JSON = "best.json"
"""Beside it: that return, its iteration and env steps."""


def episode_return(result: Mapping[str, Any], *, on: str) -> float:
    """The return a stop reads: `on="train"`, the training episodes' mean over the
    smoothing window; `on="eval"`, the latest evaluation's mean (NaN: none yet)."""
    source = result.get("evaluation", {}) if on == "eval" else result
    value = source.get("env_runners", {}).get("episode_return_mean", math.nan)
    return float(value)


def reward_reached(result: Mapping[str, Any], stop_reward: float | None, *, on: str) -> bool:
    """Whether a stop reward was given and the return `on` reads reached it."""
    ret = episode_return(result, on=on)
    return stop_reward is not None and not math.isnan(ret) and ret >= stop_reward


class BestCheckpoint:
    """Follows each new evaluation of a run; saves RUN_DIR/best (replaced whole, atomically)
    and RUN_DIR/best.json when its return beats every earlier one."""

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / BEST_DIR
        self.json_path = run_dir / BEST_JSON
        self.best: dict[str, Any] | None = None
        if self.json_path.is_file() and self.path.is_dir():  # a run resumed in place
            self.best = json.loads(self.json_path.read_text())
        self.last: dict[str, Any] | None = None
        self._seen: object = None

    def update(self, algo: Any, result: Mapping[str, Any]) -> None:
        evaluation = result.get("evaluation")
        if evaluation is None or evaluation is self._seen:  # none yet, or an older one
            return
        self._seen = evaluation
        ret = episode_return(result, on="eval")
        self.last = {
            "evaluation_return_mean": ret,
            "num_episodes": int(evaluation.get("env_runners", {}).get("num_episodes", 0)),
            "training_iteration": int(result["training_iteration"]),
            "num_env_steps_sampled_lifetime": int(result["num_env_steps_sampled_lifetime"]),
        }
        if math.isnan(ret) or (self.best and ret <= self.best["evaluation_return_mean"]):
            return
        algo.save_to_path(self.path)
        self.best = {**self.last, "checkpoint": str(self.path)}
        self.json_path.write_text(json.dumps(self.best, indent=1) + "\n")

    def summary_lines(self) -> list[str]:
        """The end summary's evaluation lines (none if no evaluation ran)."""
        if self.last is None:
            return []
        last, best = self.last, self.best
        lines = [
            f"  evaluation return    {last['evaluation_return_mean']:.2f} (mean of "
            f"{last['num_episodes']} episodes at iteration {last['training_iteration']})"
        ]
        if best is not None:
            lines.append(
                f"  best evaluation      {best['evaluation_return_mean']:.2f} at iteration "
                f"{best['training_iteration']} ({best['num_env_steps_sampled_lifetime']:,} env "
                f"steps): {best['checkpoint']}"
            )
        return lines

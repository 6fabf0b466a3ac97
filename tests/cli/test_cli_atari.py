"""`rlmod train --env ALE/...` and `--env MinAtar/...` (rlmod/cli/settings.py,
rlmod/cli/train.py): ALE IDs go through the Atari wrapper unless --no-atari-wrapper, the
user's env_config keys win over the wrapper's defaults, tuned settings are looked up by the
ID the user typed, and both kinds of env train from the command line.

The wrapper itself is tested in tests/env/test_atari_wrappers.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlmod.cli import build_config, main
from rlmod.env.wrappers.atari_wrappers import make_atari_env
from rlmod.tuned import TUNED

pytest.importorskip("ale_py", reason="needs the atari extra")

SMALL = {
    "num_envs_per_env_runner": 2,
    "train_batch_size": 64,
    "minibatch_size": 32,
    "num_epochs": 1,
}


def test_an_ale_id_is_made_through_the_atari_wrapper_with_its_tuned_settings() -> None:
    config, applied = build_config(algo="PPO", env="ALE/Pong-v5", seed=0)
    assert config.env is make_atari_env
    assert dict(config.env_config) == {"id": "ALE/Pong-v5", "dim": 84, "framestack": 4}
    assert applied["clip_param"] == TUNED["ALE/Pong-v5"]["clip_param"] == 0.1
    assert config.clip_param == 0.1 and config.num_envs_per_env_runner == 8


def test_env_config_keys_win_and_the_wrapper_can_be_turned_off() -> None:
    settings = {"env_config": {"dim": 64, "repeat_action_probability": 0.0}}
    config, _ = build_config(algo="PPO", env="ALE/Breakout-v5", settings=settings, seed=0)
    assert dict(config.env_config) == {
        "id": "ALE/Breakout-v5",
        "dim": 64,
        "framestack": 4,
        "repeat_action_probability": 0.0,
    }
    raw, applied = build_config(algo="PPO", env="ALE/Pong-v5", seed=0, atari_wrapper=False)
    assert raw.env == "ALE/Pong-v5" and dict(raw.env_config) == {}
    assert applied["clip_param"] == 0.1  # still the game's tuned settings
    minatar, _ = build_config(algo="PPO", env="MinAtar/Breakout-v1", seed=0)
    assert minatar.env == "MinAtar/Breakout-v1"  # no wrapper: MinAtar's grids as they are


@pytest.mark.parametrize(
    ("env", "extra"),
    [
        ("MinAtar/Breakout-v1", []),
        ("ALE/Pong-v5", ["--config", json.dumps({**SMALL, "env_config": {"dim": 32}})]),
        ("ALE/Pong-v5", ["--no-atari-wrapper", "--config", json.dumps(SMALL)]),
    ],
    ids=["minatar", "atari", "atari-raw"],
)
def test_pixel_envs_train_from_the_cli(tmp_path: Path, env: str, extra: list[str]) -> None:
    if "--no-atari-wrapper" not in extra and env.startswith("ALE/"):
        pytest.importorskip("cv2", reason="gymnasium's AtariPreprocessing resizes with OpenCV")
    run_dir = tmp_path / "run"
    command = ["train", "--env", env, "--stop-iters", "1", "--seed", "0", "--run-dir"]
    assert main([*command, str(run_dir), *extra]) == 0
    params = json.loads((run_dir / "params.json").read_text())
    lines = (run_dir / "result.jsonl").read_text().splitlines()
    assert json.loads(lines[0])["training_iteration"] == 1
    if env.startswith("ALE/") and "--no-atari-wrapper" not in extra:
        assert params["env_config"]["id"] == env and params["env_config"]["dim"] == 32
    else:
        assert params["env"] == env

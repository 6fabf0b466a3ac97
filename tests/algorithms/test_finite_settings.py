"""Every numeric setting refuses NaN and infinity (rlmod/algorithms/settings.py), in code
and through `rlmod train --config`."""

from __future__ import annotations

import math

import pytest

from rlmod.algorithms.ppo import PPOConfig
from rlmod.cli import main

_CHECKED = [name for name, st in PPOConfig.settings().items() if st.check is not None]


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan])
def test_no_setting_accepts_a_non_finite_number(value):
    assert {"lr", "gamma", "lambda_", "grad_clip", "clip_param"} <= set(_CHECKED)
    for name in _CHECKED:
        with pytest.raises((ValueError, TypeError), match=name):
            setattr(PPOConfig(), name, value)


def test_lr_inf_names_the_setting_and_why():
    with pytest.raises(
        ValueError,
        match=r"lr=inf is invalid: must be finite .*NaN and "
        r"infinity are refused",
    ):
        PPOConfig().training(lr=math.inf)
    with pytest.raises(ValueError, match="gamma=nan"):
        PPOConfig().training(gamma=math.nan)


def test_schedule_points_refuse_non_finite_values_and_timesteps():
    with pytest.raises(ValueError, match="lr="):
        PPOConfig().training(lr=[[0, 1e-3], [1000, math.inf]])
    with pytest.raises(ValueError, match="finite whole numbers"):
        PPOConfig().training(lr=[[0, 1e-3], [math.inf, 0.0]])


def test_cli_config_with_infinity_is_refused(tmp_path, capsys):
    code = main(
        [
            "train",
            "--algo",
            "PPO",
            "--env",
            "CartPole-v1",
            "--stop-iters",
            "1",
            "--run-dir",
            str(tmp_path / "run"),
            "--config",
            '{"lr": Infinity}',
        ]
    )
    assert code != 0
    assert "lr=inf" in capsys.readouterr().err
    assert not (tmp_path / "run" / "progress.csv").exists()

"""Tuned settings (rlmod.tuned): every entry is a setting its algorithm's config knows,
sets a value it validates (with the env it is tuned for), and the per-env PPO entries sit
on top of FAST_PPO without dropping any of its keys; a typo or a stale name in these
tables fails here rather than in `rlmod train`.

The CLI applying them is tested in tests/test_cli.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from rlmod.algorithms.dqn import DQNConfig
from rlmod.algorithms.ppo import PPOConfig
from rlmod.algorithms.sac import SACConfig
from rlmod.env.registry import is_gym_id
from rlmod.tuned import FAST_PPO, TUNED, TUNED_DQN, TUNED_SAC

CASES = [
    *((PPOConfig, "FAST_PPO", env, FAST_PPO) for env in TUNED),
    *((PPOConfig, "TUNED", env, settings) for env, settings in TUNED.items()),
    *((DQNConfig, "TUNED_DQN", env, settings) for env, settings in TUNED_DQN.items()),
    *((SACConfig, "TUNED_SAC", env, settings) for env, settings in TUNED_SAC.items()),
]


@pytest.mark.parametrize(
    ("config_class", "table", "env", "settings"), CASES, ids=[f"{c[1]}-{c[2]}" for c in CASES]
)
def test_every_tuned_setting_is_known_and_validates(
    config_class: type, table: str, env: str, settings: dict[str, Any]
):
    assert is_gym_id(env), f"{table}: {env} is not a gymnasium ID"  # ALE/, MinAtar/ lazily
    config = config_class().environment(env).update_from_dict(settings)
    config.validate()
    for key, value in settings.items():
        got = getattr(config, key)
        if isinstance(value, dict):  # dict settings are merged into their defaults
            assert {k: got[k] for k in value} == value, (table, env, key)
        else:
            assert got == value, (table, env, key)


def test_per_env_ppo_entries_keep_every_fast_setting():
    for env, settings in TUNED.items():
        assert set(FAST_PPO) <= set(settings), env

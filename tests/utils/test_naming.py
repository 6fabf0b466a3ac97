"""Tests of rlmod/utils/naming.py's did-you-mean hint, which every settings error uses."""

from __future__ import annotations

import pytest

from rlmod.algorithms.ppo import PPOConfig
from rlmod.utils.naming import did_you_mean


def test_a_close_name_is_suggested_and_a_far_one_is_not():
    assert did_you_mean("lrr", ["lr", "gamma"]) == " Did you mean 'lr'?"
    assert did_you_mean("zzz", ["lr", "gamma"]) == ""


def test_a_name_that_differs_only_in_case_is_suggested():
    # difflib's ratio for 'LR' against 'lr' is 0: only the case-insensitive match finds it
    assert did_you_mean("LR", ["lr", "gamma"]) == " Did you mean 'lr'?"
    assert did_you_mean("Gamma", ["lr", "gamma", "gammas"]) == " Did you mean 'gamma'?"


def test_a_config_setting_typed_in_capitals_gets_the_hint():
    with pytest.raises((TypeError, ValueError), match="Did you mean 'lr'"):
        PPOConfig().training(LR=0.01)

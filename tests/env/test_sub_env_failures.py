"""SubEnvFailureStreaks (rlmod.env.sub_env_failures): a sub-env's failures count until a
step of it is kept, reaching the limit raises an EnvError (from the last exception)
naming the env, the sub-env, the step and the setting to raise, and the count then
starts afresh; a kept row of a sub-env that also failed in the same step does not reset it.

Restart mode in the EnvRunners (an env that always raises stops sampling) is tested in
tests/env/test_env_runner_guards.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from rlmod.env.sub_env_failures import SubEnvFailureStreaks
from rlmod.errors import EnvError


def test_the_limit_raises_naming_env_sub_env_step_and_setting():
    streaks = SubEnvFailureStreaks(env="Broken-v0", num_envs=3, limit=3)
    streaks.record(2, RuntimeError("first"), step=1)
    streaks.record(2, RuntimeError("second"), step=5)
    assert streaks.counts.tolist() == [0, 0, 2] and streaks.active
    last = RuntimeError("third")
    with pytest.raises(EnvError) as info:
        streaks.record(2, last, step=9)
    message = str(info.value)
    assert "env='Broken-v0' (sub-env 2 of this EnvRunner) raised 3 times in a row" in message
    assert "at step 9 of this EnvRunner: RuntimeError('third')" in message
    assert "max_consecutive_sub_environment_failures=...) (now 3)" in message
    assert info.value.__cause__ is last
    assert streaks.counts.tolist() == [0, 0, 0]  # afresh: the next sample restarts it


def test_a_kept_step_resets_only_that_sub_envs_count():
    streaks = SubEnvFailureStreaks(env="E", num_envs=3, limit=2)
    streaks.record(0, ValueError(), step=0)
    streaks.record(1, ValueError(), step=0)
    streaks.kept(np.array([True, False, False]))
    assert streaks.counts.tolist() == [0, 1, 0] and streaks.active
    streaks.kept(np.array([False, True, False]))
    assert not streaks.active
    # failing every third step: between kept steps the failures add up to the limit
    streaks.record(1, ValueError("again"), step=3)
    with pytest.raises(EnvError, match="raised 2 times in a row"):
        streaks.record(1, ValueError("again"), step=6)


def test_a_row_kept_in_the_step_it_failed_does_not_reset_it():
    streaks = SubEnvFailureStreaks(env="E", num_envs=2, limit=5, unit="env")
    streaks.record(1, ValueError(), step=0)
    rows = np.array([True, True])
    streaks.kept(rows, failed=[1])
    assert streaks.counts.tolist() == [0, 1] and streaks.active
    assert rows.tolist() == [True, True]  # the caller's array is left alone
    with pytest.raises(EnvError, match=r"\(env 0 of this EnvRunner\) raised 1 times"):
        SubEnvFailureStreaks(env="E", num_envs=1, limit=1, unit="env").record(
            0, ValueError(), step=0
        )

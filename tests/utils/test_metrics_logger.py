"""MetricsLogger reduce semantics (RLlib 2.60's), and merging EnvRunners' periods."""

from __future__ import annotations

import math

import pytest
import torch

from rlmod.utils.metrics_logger import MetricsLogger


def test_mean_min_max_sum_reduce_this_periods_values_then_start_afresh():
    logger = MetricsLogger()
    for x in (1.0, 2.0, 6.0):
        logger.log_value("mean", x, reduce="mean")
        logger.log_value("min", x, reduce="min")
        logger.log_value("max", torch.tensor(x), reduce="max")
        logger.log_value(("nested", "sum"), x, reduce="sum")
    assert logger.reduce() == {"mean": 3.0, "min": 1.0, "max": 6.0, "nested": {"sum": 9.0}}
    logger.log_value("mean", 10.0)
    out = logger.reduce()
    assert out["mean"] == 10.0 and math.isnan(out["min"]) and out["nested"]["sum"] == 0.0


def test_window_ema_and_lifetime_sum():
    logger = MetricsLogger()
    for x in (1.0, 2.0, 3.0, 4.0):
        logger.log_value("win", x, window=2)  # reduce=None with a window: mean
        logger.log_value("ema", x)  # reduce=None, no window: EMA with 0.01
        logger.log_value("total", x, reduce="sum", clear_on_reduce=False)
        logger.log_value("kept", x, reduce="mean", window=3, clear_on_reduce=False)
    out = logger.reduce()
    assert out["win"] == 3.5 and out["total"] == 10.0 and out["kept"] == 3.0
    assert out["ema"] == pytest.approx(1 + 0.01 * (1 - 0.01) ** 2 + 0.02 * 0.99 + 0.03, abs=1e-3)
    logger.log_value("total", 5.0)
    logger.log_value("kept", 10.0)
    out = logger.reduce()
    assert out["total"] == 15.0 and out["kept"] == pytest.approx((3 + 4 + 10) / 3)


def test_a_window_moves_across_reduces_as_rllib():
    """RLlib keeps the last `window` values at a reduce (issue 33, item 4): a windowed
    mean is over the last `window` values logged, whichever iteration logged them."""
    logger = MetricsLogger()
    for x in (1.0, 2.0, 3.0):
        logger.log_value("len", x, window=4)
        logger.log_value("low", x, reduce="min", window=2)
    assert logger.reduce() == {"len": 2.0, "low": 2.0}
    logger.log_value("len", 5.0)
    logger.log_value("len", 7.0)
    assert logger.reduce()["len"] == (2.0 + 3.0 + 5.0 + 7.0) / 4
    assert logger.reduce() == {"len": 4.25, "low": 2.0}  # nothing new: the same window
    merged = MetricsLogger()  # an EnvRunner's values moved to the Algorithm keep it too
    for x, expected in ((1.0, 1.0), (3.0, 2.0), (5.0, 4.0)):
        runner = MetricsLogger()
        runner.log_value("len", x, window=2)
        merged.merge_period(runner.export_period())
        assert merged.reduce()["len"] == expected


def test_runner_periods_merge_into_one_logger():
    runners = [MetricsLogger(), MetricsLogger()]
    runners[0].log_value("x", 1.0, reduce="mean")
    runners[1].log_value("x", 3.0, reduce="mean")
    runners[1].log_value("n", 2, reduce="sum")
    merged = MetricsLogger()
    for r in runners:
        merged.merge_period(r.export_period())
    assert merged.reduce() == {"x": 2.0, "n": 2.0}
    assert runners[0].export_period() == {}  # exported values are not sent twice


def test_bad_arguments_name_what_is_wrong():
    logger = MetricsLogger()
    with pytest.raises(ValueError, match="reduce must be one of"):
        logger.log_value("x", 1.0, reduce="median")
    with pytest.raises(ValueError, match="percentiles"):
        logger.log_value("y", 1.0, percentiles=True)
    with pytest.raises(TypeError, match="reduce='item'"):
        logger.log_value("z", "text")
    logger.log_value("obj", {"a": 1}, reduce="item")
    assert logger.peek("obj") == {"a": 1}
    with pytest.raises(KeyError, match="nothing logged"):
        logger.peek("nope")

"""Schedules: a value that is a constant or piecewise linear in env steps (RLlib's format)."""

from __future__ import annotations

from typing import Any


def scheduled_value(value: float | list[list[Any]], timestep: int) -> float:
    """`value` itself, or the linear interpolation of `[[t0, v0], [t1, v1], ...]` at
    `timestep` (held constant after the last point)."""
    if not isinstance(value, list):
        return float(value)
    prev_t, prev_v = value[0]
    for t, v in value[1:]:
        if timestep < t:
            frac = (timestep - prev_t) / max(1, t - prev_t)
            return float(prev_v + frac * (v - prev_v))
        prev_t, prev_v = t, v
    return float(prev_v)

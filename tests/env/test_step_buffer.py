"""StepBuffer (rlmod.env.step_buffer): rows written in order come back as `[t, N, ...]`
views, growing (by doubling, on add or on `with_next`) keeps every row written, `clear`
starts over at row 0 on the same memory, and `with_next` appends a row without counting it.

The buffer inside sampling is covered by tests/env/test_single_agent_env_runner.py.
"""

from __future__ import annotations

import numpy as np

from rlmod.env.step_buffer import StepBuffer


def test_rows_come_back_in_order_through_growth():
    buf = StepBuffer(2)
    for t in range(5):
        buf.add({"obs": np.full((3, 2), t, np.float32), "done": np.array([t % 2 == 1] * 3)})
    assert buf.capacity == 8  # 2 -> 4 -> 8
    assert buf["obs"].shape == (5, 3, 2) and buf["obs"].dtype == np.float32
    assert buf["obs"][:, 0, 0].tolist() == [0, 1, 2, 3, 4]
    assert buf["done"][:, 0].tolist() == [False, True, False, True, False]


def test_clear_starts_over_on_the_same_memory_and_grows_to_the_asked_capacity():
    buf = StepBuffer(4)
    buf.add({"x": np.arange(2)})
    memory = buf._arrays["x"]
    buf.clear(3)
    assert buf.t == 0 and buf["x"].shape == (0, 2) and buf._arrays["x"] is memory
    buf.add({"x": np.array([7, 8])})
    assert buf["x"].tolist() == [[7, 8]]
    buf.clear(10)
    assert buf.capacity == 10 and buf._arrays["x"].shape == (10, 2)
    assert StepBuffer(0).capacity == 1


def test_with_next_appends_a_row_without_counting_it_and_grows_when_full():
    buf = StepBuffer(2)
    buf.add({"obs": np.array([1.0])})
    buf.add({"obs": np.array([2.0])})
    rows = buf.with_next("obs", np.array([3.0]))
    assert rows[:, 0].tolist() == [1.0, 2.0, 3.0] and buf.t == 2 and buf.capacity == 4
    buf.add({"obs": np.array([4.0])})  # overwrites the uncounted row
    assert buf["obs"][:, 0].tolist() == [1.0, 2.0, 4.0]

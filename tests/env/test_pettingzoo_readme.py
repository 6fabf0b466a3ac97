"""`ParallelPettingZooEnv` from `rlmod.env`, as RLlib users import it, and the README's
PettingZoo example run as written."""

from __future__ import annotations

from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"


def _readme_pettingzoo_block() -> str:
    blocks = [b.split("```", 1)[0] for b in README.read_text().split("```python")[1:]]
    found = [b for b in blocks if "ParallelPettingZooEnv" in b]
    assert len(found) == 1, "the README has one PettingZoo example"
    return found[0]


def test_rlmod_env_exports_the_adapter() -> None:
    import rlmod.env
    from rlmod.env.pettingzoo_env import ParallelPettingZooEnv

    assert rlmod.env.ParallelPettingZooEnv is ParallelPettingZooEnv
    assert "ParallelPettingZooEnv" in rlmod.env.__all__


def test_the_readme_example_trains_one_module_per_player() -> None:
    pytest.importorskip("pettingzoo")
    namespace: dict = {}
    exec(_readme_pettingzoo_block(), namespace)  # noqa: S102 - the README's own code
    config = namespace["config"].training(train_batch_size=100, minibatch_size=50, num_epochs=1)
    algo = config.build_algo()
    try:
        result = algo.train()
    finally:
        algo.stop()
    returns = result["env_runners"]["module_episode_returns_mean"]
    assert set(returns) == {"player_0", "player_1"}
    assert returns["player_0"] == pytest.approx(-returns["player_1"])  # zero-sum game

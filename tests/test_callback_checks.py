"""Callbacks checked when `.callbacks()` sets them (rlmod/callback_checks.py): misspelled
hooks, hooks rlmod never calls and signatures that cannot take rlmod's keywords fail there,
with the method named, instead of at the first train()."""

from __future__ import annotations

from typing import Any

import pytest

from rlmod.algorithms.ppo import PPOConfig
from rlmod.callbacks import RLlibCallback


class Misspelled(RLlibCallback):
    def on_episode_ends(self, *, episode: Any, **kwargs: Any) -> None:
        pass


class PositionalWorker(RLlibCallback):
    def on_episode_end(self, episode: Any, worker: Any) -> None:  # RLlib's old stack
        pass


class NoKwargs(RLlibCallback):
    def on_train_result(self, *, algorithm: Any, result: dict) -> None:
        pass


class OldStackHook(RLlibCallback):
    def on_postprocess_trajectory(self, **kwargs: Any) -> None:
        pass


class Fine(RLlibCallback):
    def on_episode_end(self, *, episode: Any, **kwargs: Any) -> None:
        pass

    @staticmethod
    def on_train_result(**kwargs: Any) -> None:
        pass

    def on_my_own_helper(self) -> None:  # not close to a hook name: the user's own
        pass


def test_a_misspelled_hook_is_named_with_the_right_one() -> None:
    with pytest.raises(ValueError, match=r"Misspelled\.on_episode_ends is not a hook.*"
                       r"Did you mean 'on_episode_end'"):  # fmt: skip
        PPOConfig().callbacks(Misspelled)
    with pytest.raises(ValueError, match="on_episode_ends"):
        PPOConfig().callbacks([Fine, Misspelled])  # in a list too


def test_wrong_signatures_are_named_at_callbacks_time() -> None:
    with pytest.raises(ValueError, match=r"on_episode_end: it needs the argument 'worker'"):
        PPOConfig().callbacks(PositionalWorker)
    with pytest.raises(ValueError, match=r"metrics_logger.*\*\*kwargs"):
        PPOConfig().callbacks(NoKwargs)

    def one_positional(result: dict) -> None:
        pass

    with pytest.raises(ValueError, match=r"one_positional cannot be called as on_train_result"):
        PPOConfig().callbacks(on_train_result=one_positional)
    with pytest.raises(ValueError, match="on_sample_end"):
        PPOConfig().callbacks(on_sample_end=[lambda **kw: None, lambda samples: None])


def test_a_hook_rlmod_never_calls_is_refused() -> None:
    with pytest.raises(ValueError, match=r"on_postprocess_trajectory would never be called"):
        PPOConfig().callbacks(OldStackHook)


def test_right_hooks_pass_and_run() -> None:
    seen: list[int] = []
    config = (
        PPOConfig()
        .environment("CartPole-v1")
        .training(train_batch_size=64, minibatch_size=64, num_epochs=1)
        .callbacks(Fine, on_train_result=lambda *, result, **kw: seen.append(1))
    )
    algo = config.build_algo()
    try:
        algo.train()
    finally:
        algo.stop()
    assert seen == [1]

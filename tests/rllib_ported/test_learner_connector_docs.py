"""Item 6 of issue 33: a learner ConnectorV2 written as RLlib's docs and its count-based
curiosity example write them (`__call__(*, rl_module, batch, episodes, ...)`,
`single_agent_episode_iterator`, `set_rewards`), passed with
`training(learner_connector=...)`, with only the imports changed; RLlib's batch helpers;
and pieces rlmod cannot run refused when set."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import torch

from rlmod.algorithms.ppo import PPOConfig
from rlmod.connectors import FlattenObservations
from rlmod.connectors.connector_v2 import ConnectorV2
from rlmod.connectors.learner_v2 import ConnectorV2LearnerPiece
from rlmod.core import DEFAULT_MODULE_ID, Columns


class CountBasedCuriosity(ConnectorV2):
    """Adds `coeff / count(obs)` to each reward (RLlib's count-based curiosity example)."""

    def __init__(self, input_observation_space=None, input_action_space=None, *, coeff=1.0, **kw):  # type: ignore[no-untyped-def]
        super().__init__(input_observation_space, input_action_space, **kw)
        self.obs_counter: Counter = Counter()
        self.coeff = coeff

    def __call__(self, *, rl_module, batch, episodes, explore=None, shared_data=None, **kwargs):  # type: ignore[no-untyped-def]
        for sa_episode in self.single_agent_episode_iterator(
            episodes=episodes, agents_that_stepped_only=False
        ):
            observations = sa_episode.get_observations(slice(None, -1))
            rewards = sa_episode.get_rewards()
            for i, (obs, rew) in enumerate(zip(observations, rewards, strict=True)):
                obs = tuple(np.round(obs, 1))
                self.obs_counter[obs] += 1
                rew += self.coeff * (1 / self.obs_counter[obs])
                sa_episode.set_rewards(new_data=rew, at_indices=i)
        return batch


def test_count_based_curiosity_piece_trains_with_ppo() -> None:
    pieces: list[CountBasedCuriosity] = []

    def make(*args, **kwargs):  # type: ignore[no-untyped-def]
        pieces.append(CountBasedCuriosity())
        return pieces[-1]

    config = (
        PPOConfig()
        .environment("CartPole-v1")
        .training(learner_connector=make, train_batch_size=256, minibatch_size=128, num_epochs=1)
        .rl_module(model_config={"fcnet_hiddens": [16]})
    )
    algo = config.build_algo()
    try:
        for _ in range(2):
            result = algo.train()
        learner_piece = pieces[-1]  # the Learner's (the first one was made when set)
        assert sum(learner_piece.obs_counter.values()) == result["num_env_steps_sampled_lifetime"]
    finally:
        algo.stop()


class AddStepIndex(ConnectorV2):
    def __call__(self, *, rl_module, batch, episodes, **kwargs):  # type: ignore[no-untyped-def]
        for ep in self.single_agent_episode_iterator(episodes):
            self.add_n_batch_items(batch, "step", np.arange(len(ep)), len(ep), ep)
            for _ in range(len(ep)):
                self.add_batch_item(batch, "bonus", 1.0, single_agent_episode=ep)
            ep.set_observations(new_data=np.full(4, 9.0, np.float32), at_indices=-1)
        self.foreach_batch_item_change_in_place(batch, "bonus", lambda x, eps_id, *ids: x + eps_id)
        return batch


def _batch() -> dict:
    n = 5
    return {
        DEFAULT_MODULE_ID: {
            Columns.OBS: torch.zeros(n, 4),
            Columns.NEXT_OBS: torch.ones(n, 4),
            Columns.ACTIONS: torch.zeros(n, dtype=torch.long),
            Columns.REWARDS: torch.ones(n),
            Columns.TERMINATEDS: torch.tensor([False, True, False, False, False]),
            Columns.TRUNCATEDS: torch.zeros(n, dtype=torch.bool),
            Columns.SEQ_ENDS: torch.tensor([False, True, False, False, True]),
        }
    }


def test_batch_helpers_add_columns_per_step_and_episodes_edit_the_batch() -> None:
    out = ConnectorV2LearnerPiece(AddStepIndex())(_batch(), rl_module=None)[DEFAULT_MODULE_ID]
    assert out["step"].tolist() == [0, 1, 0, 1, 2]  # per episode (sequence), in row order
    assert out["bonus"].tolist() == [1.0, 1.0, 2.0, 2.0, 2.0]  # + the episode's id_ (0, 1)
    # The last observation of each episode is the last row's next observation.
    assert out[Columns.NEXT_OBS][[1, 4]].eq(9.0).all() and out[Columns.NEXT_OBS][0].eq(1.0).all()
    assert out[Columns.OBS].eq(0.0).all()


def test_a_piece_adding_items_that_do_not_fit_the_steps_is_refused() -> None:
    class Wrong(ConnectorV2):
        def __call__(self, *, rl_module, batch, episodes, **kwargs):  # type: ignore[no-untyped-def]
            self.add_batch_item(batch, "x", 1.0, episodes[0])
            return batch

    with pytest.raises(ValueError, match="one item per step"):
        ConnectorV2LearnerPiece(Wrong())(_batch(), rl_module=None)


def test_pieces_rlmod_cannot_run_on_a_learner_are_refused_when_set() -> None:
    with pytest.raises(TypeError, match="env-to-module"):
        PPOConfig().training(learner_connector=lambda *a, **kw: FlattenObservations())
    with pytest.raises(TypeError, match="must return a Connector"):
        PPOConfig().training(learner_connector=lambda *a, **kw: object())
    with pytest.raises(NotImplementedError, match="get_infos"):

        class ReadsInfos(ConnectorV2):
            def __call__(self, *, rl_module, batch, episodes, **kwargs):  # type: ignore[no-untyped-def]
                episodes[0].get_infos()
                return batch

        ConnectorV2LearnerPiece(ReadsInfos())(_batch(), rl_module=None)


def test_foreach_batch_item_in_an_env_to_module_piece() -> None:
    class Double(ConnectorV2):
        def __call__(self, *, rl_module, batch, episodes, **kwargs):  # type: ignore[no-untyped-def]
            self.foreach_batch_item_change_in_place(batch, Columns.OBS, lambda obs, *a: obs * 2)
            return batch

    import gymnasium as gym

    piece = Double(gym.spaces.Box(-1, 1, (2,)), gym.spaces.Discrete(2))
    out = piece.call_on_arrays(np.ones((3, 2), np.float32), episode_starts=np.zeros(3, bool))
    assert out.tolist() == [[2.0, 2.0]] * 3

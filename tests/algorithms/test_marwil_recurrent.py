"""BC and MARWIL with recurrent modules (use_lstm) on recorded episodes: whole episodes from
the reader, chunks started from burned-in states, padding that no loss reads, MARWIL's
truncation bootstrap over sequences, and the refusals that remain."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlmod.algorithms.bc import BCConfig
from rlmod.algorithms.marwil import MARWILConfig
from rlmod.algorithms.marwil.offline_sequences import offline_sequences
from rlmod.core.columns import Columns
from rlmod.core.recurrent import PREV_ACTIONS, PREV_REWARDS
from rlmod.core.sequence_batches import unpad
from rlmod.errors import OfflineDataError
from rlmod.offline import record_episodes
from rlmod.offline.reader import REQUIRED_COLUMNS, OfflineReader, resolve_files
from rlmod.offline.returns import BOOTSTRAP_DISCOUNT, BOOTSTRAP_OBS
from rlmod.testing import StatelessCartPole, cartpole_expert
from rlmod.testing.padding import assert_padding_is_never_read

LSTM = {"use_lstm": True, "lstm_cell_size": 8, "fcnet_hiddens": [16], "max_seq_len": 5}
SPACES = (gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2))


def _learner(config_cls: type = BCConfig, **model: Any) -> Any:
    config = config_cls().rl_module(model_config={**LSTM, **model}).debugging(seed=0)
    torch.manual_seed(0)
    learner = config.learner_class(
        config=config,
        module_spec=config.get_multi_rl_module_spec(spaces={"default_policy": SPACES}),
    )
    learner.build()
    return learner


def _episodes(lengths: list[int], *, truncated_last: bool = False, seed: int = 0) -> dict:
    """Synthetic recorded rows of episodes of `lengths` (rows contiguous, in time order),
    as an OfflineReader hands them to a Learner (MARWIL's bootstrap columns included)."""
    g = torch.Generator().manual_seed(seed)
    n = sum(lengths)
    ends = np.cumsum(lengths) - 1
    terminateds = torch.zeros(n, dtype=torch.bool)
    truncateds = torch.zeros(n, dtype=torch.bool)
    terminateds[ends] = True
    discount = torch.zeros(n)
    if truncated_last:
        terminateds[ends[-1]] = False
        truncateds[ends[-1]] = True
        k = torch.arange(lengths[-1], dtype=torch.float32)
        discount[n - lengths[-1] :] = 0.9 ** (lengths[-1] - k)
    final = torch.randn(3, generator=g)
    return {
        Columns.OBS: torch.randn(n, 3, generator=g),
        Columns.ACTIONS: torch.randint(0, 2, (n,), generator=g),
        Columns.REWARDS: torch.randn(n, generator=g),
        Columns.TERMINATEDS: terminateds,
        Columns.TRUNCATEDS: truncateds,
        Columns.VALUE_TARGETS: torch.randn(n, generator=g),
        BOOTSTRAP_DISCOUNT: discount,
        BOOTSTRAP_OBS: torch.where(discount[:, None] > 0, final, torch.zeros(3)),
    }


def _outputs(module: Any, chunks: dict) -> dict:
    with torch.no_grad():
        fwd = module.forward_train(chunks)
    real, real_fwd = unpad(chunks, fwd)
    return {**real, **real_fwd}


@pytest.mark.parametrize(
    "model", [{}, {"lstm_use_prev_action": True, "lstm_use_prev_reward": True}]
)
def test_chunks_start_from_the_state_of_the_episode_so_far(model: dict) -> None:
    """Episodes longer than max_seq_len, cut into chunks whose start states are burned in,
    give the outputs of the same episodes run whole from the initial state."""
    cut = _learner(**model).module["default_policy"]
    whole = _learner(**{**model, "max_seq_len": 40}).module["default_policy"]
    whole.load_state_dict(cut.state_dict())
    rows = _episodes([12, 5, 3, 11])
    chunked = offline_sequences(cut, rows)
    assert chunked[Columns.OBS].shape[:2] == (3 + 1 + 1 + 3, 5)
    one_chunk_each = offline_sequences(whole, rows)
    assert one_chunk_each[Columns.OBS].shape[0] == 4
    a, b = _outputs(cut, chunked), _outputs(whole, one_chunk_each)
    torch.testing.assert_close(a[Columns.OBS], rows[Columns.OBS])  # every row once, in order
    torch.testing.assert_close(a[Columns.ACTION_DIST_INPUTS], b[Columns.ACTION_DIST_INPUTS])
    torch.testing.assert_close(a[Columns.EMBEDDINGS], b[Columns.EMBEDDINGS])
    # previous action and reward: the row before, zeros at each episode's first step
    firsts = [0, 12, 17, 20]
    assert a[PREV_ACTIONS][firsts].eq(0).all() and a[PREV_REWARDS][firsts].eq(0).all()
    assert a[PREV_ACTIONS][1:12].tolist() == rows[Columns.ACTIONS][:11].tolist()


@pytest.mark.parametrize("config_cls", [BCConfig, MARWILConfig])
def test_padding_never_changes_the_loss_or_gradients(config_cls: type) -> None:
    """The chunks of recorded episodes with extra zero-padding steps (garbage in them, and
    an all-padding chunk) give BC's / MARWIL's loss and gradients unchanged."""
    learner = _learner(config_cls)
    module = learner.module["default_policy"]
    chunks = offline_sequences(module, _episodes([12, 5, 3, 11], truncated_last=True))

    def fixed_adv_norm() -> None:  # MARWIL's running statistic: the same for both passes
        learner.moving_avg_sqd_adv_norms["default_policy"] = 100.0

    assert_padding_is_never_read(learner, "default_policy", chunks, before=fixed_adv_norm)


def test_marwil_bootstraps_a_truncated_episode_with_the_state_after_its_last_step() -> None:
    learner = _learner(MARWILConfig)
    module = learner.module["default_policy"]
    rows = _episodes([4, 12], truncated_last=True)
    out = _outputs(module, offline_sequences(module, rows))
    # V(s_T) by hand: the truncated episode plus its next observation, one sequence
    whole = {
        Columns.OBS: torch.cat([rows[Columns.OBS][4:], rows[BOOTSTRAP_OBS][-1:]])[None],
        PREV_ACTIONS: torch.cat([torch.zeros(1), rows[Columns.ACTIONS][4:].float()])[None],
        PREV_REWARDS: torch.cat([torch.zeros(1), rows[Columns.REWARDS][4:]])[None],
    }
    with torch.no_grad():
        fwd = module.forward_train(whole)
        v_final = module.compute_values(whole, embeddings=fwd[Columns.EMBEDDINGS])[0, -1]
    expected = rows[Columns.VALUE_TARGETS].clone()
    expected += rows[BOOTSTRAP_DISCOUNT] * v_final
    torch.testing.assert_close(out[Columns.VALUE_TARGETS], expected)
    assert not (out[Columns.VALUE_TARGETS][:4] - rows[Columns.VALUE_TARGETS][:4]).any()


def test_rows_that_are_not_whole_episodes_are_refused() -> None:
    module = _learner().module["default_policy"]
    rows = _episodes([6, 4])
    cut = {k: v[:8] for k, v in rows.items()}
    with pytest.raises(ValueError, match="whole episodes"):
        offline_sequences(module, cut)


def test_reader_hands_out_whole_episodes_in_time_order(tmp_path: Path) -> None:
    env = StatelessCartPole()
    rng = np.random.default_rng(0)
    record_episodes(
        env, lambda obs: int(rng.integers(2)), num_episodes=30, output_dir=tmp_path, seed=0
    )
    reader = OfflineReader(
        resolve_files(tmp_path),
        batch_size=100,
        gamma=None,
        shuffle_buffer_size=200,
        seed=0,
        obs_shape=(2,),
        columns=(*REQUIRED_COLUMNS, Columns.NEXT_OBS),
        whole_episodes=True,
        prefetch=False,
    )
    first_obs = []
    for _ in range(12):
        batch = reader.next_batch()
        ends = batch[Columns.TERMINATEDS] | batch[Columns.TRUNCATEDS]
        # at least batch_size rows, up to the end of the episode holding row 100
        assert len(ends) >= 100 and ends[-1] and not ends[99:-1].any()
        # within an episode, each row's next observation is the next row's observation
        inner = ~ends[:-1]
        np.testing.assert_array_equal(
            batch[Columns.NEXT_OBS][:-1][inner], batch[Columns.OBS][1:][inner]
        )
        starts = np.r_[0, np.flatnonzero(ends[:-1]) + 1]
        first_obs += [tuple(batch[Columns.OBS][s]) for s in starts]
    reader.close()
    # episodes, not rows, are shuffled: the episodes come in another order than recorded
    recorded = [tuple(env.reset(seed=i)[0]) for i in range(30)]
    assert set(first_obs) == set(recorded) and first_obs[:30] != recorded


def _record(path: Path, num_episodes: int, *, epsilon: float = 0.0, seed: int = 0) -> None:
    """CartPole without velocities, recorded from an expert that sees the full state
    (the recorded observations hide the velocities); `epsilon` of its actions random."""
    env = StatelessCartPole()
    rng = np.random.default_rng(seed)

    def expert(obs: Any) -> int:
        if rng.random() < epsilon:
            return int(rng.integers(2))
        return cartpole_expert(env._env.unwrapped.state)  # type: ignore[attr-defined]

    record_episodes(env, expert, num_episodes=num_episodes, output_dir=path, seed=seed)


@pytest.mark.parametrize("config_cls", [BCConfig, MARWILConfig])
def test_bc_and_marwil_with_use_lstm_train_on_recorded_episodes(
    tmp_path: Path, config_cls: type
) -> None:
    record_episodes(
        gym.make("CartPole-v1"), cartpole_expert, num_episodes=4, output_dir=tmp_path, seed=0
    )
    algo = (
        config_cls()
        .environment("CartPole-v1")
        .offline_data(input_=str(tmp_path))
        .training(train_batch_size_per_learner=400, minibatch_size=100, num_epochs=2, lr=1e-2)
        .rl_module(model_config={**LSTM, "max_seq_len": 20})
        .debugging(seed=0)
        .build_algo()
    )
    losses, rows = [], 0
    for _ in range(8):
        result = algo.train()
        losses.append(result["learners"]["default_policy"]["policy_loss"])
        rows = result["learners"]["__all_modules__"]["num_env_steps_trained_lifetime"]
    assert rows >= 8 * 400  # whole episodes: at least the batch size each update
    algo.stop()
    if config_cls is BCConfig:
        assert np.mean(losses[-3:]) < losses[0] - 0.2, losses


def test_recurrent_modules_refuse_ray_data_reading(tmp_path: Path) -> None:
    _record(tmp_path, 1)
    config = (
        BCConfig()
        .offline_data(input_=str(tmp_path), input_read_method="read_parquet")
        .rl_module(model_config=LSTM)
    )
    with pytest.raises(OfflineDataError, match="use_lstm.*input_read_method"):
        config.build_algo()


def _bc_return(data: Path, *, use_lstm: bool, iterations: int) -> float:
    algo = (
        BCConfig()
        .environment(StatelessCartPole)
        .offline_data(input_=str(data))
        .training(train_batch_size_per_learner=2000, minibatch_size=250, num_epochs=2, lr=5e-3)
        .rl_module(
            model_config={
                "use_lstm": use_lstm,
                "lstm_cell_size": 32,
                "fcnet_hiddens": [64],
                "max_seq_len": 20,
            }
        )
        .evaluation(
            evaluation_duration=10, evaluation_duration_unit="episodes", evaluation_explore=False
        )
        .debugging(seed=0)
        .build_algo()
    )
    for _ in range(iterations):
        algo.train()
    mean_return = float(algo.evaluate()["env_runners"]["episode_return_mean"])
    algo.stop()
    return mean_return


@pytest.mark.slow
def test_bc_with_lstm_clones_an_expert_on_a_memory_task_that_bc_without_memory_cannot(
    tmp_path: Path,
) -> None:
    """CartPole without velocities, 10 episodes of an expert that sees them; greedy
    evaluation over 10 episodes after 40 updates. BC with an LSTM: mean return 286 here
    (58-286 for recordings seeded 0-2; its loss falls to about 0.2). BC without memory:
    9-10 (its loss stays at ln 2: without the velocities the expert's actions look random,
    and the greedy policy pushes one way)."""
    _record(tmp_path, 10)
    with_memory = _bc_return(tmp_path, use_lstm=True, iterations=40)
    without = _bc_return(tmp_path, use_lstm=False, iterations=40)
    assert with_memory >= 50.0 and with_memory >= 3 * without, (with_memory, without)

"""Recurrent modules (use_lstm): step-by-step equals sequences, chunking, padding never
changes a loss, the EnvRunner resets states at episode starts, refusals."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlmod.algorithms.dqn import DQNConfig
from rlmod.algorithms.ppo import PPOConfig
from rlmod.algorithms.ppo.default_ppo_rl_module import DefaultPPORLModule
from rlmod.algorithms.sac import SACConfig
from rlmod.connectors.learner_sequences import sequence_values
from rlmod.core.columns import Columns
from rlmod.core.recurrent import PREV_ACTIONS, PREV_REWARDS, flatten_state
from rlmod.core.sequence_batches import chunk_index, to_sequences
from rlmod.core.stacked import stack_key
from rlmod.env import SingleAgentEnvRunner
from rlmod.testing import MultiAgentCartPole, StatelessCartPole
from rlmod.testing.padding import assert_padding_is_never_read

LSTM = {"use_lstm": True, "lstm_cell_size": 8, "fcnet_hiddens": [16], "max_seq_len": 5}


def _module(**extra: object) -> DefaultPPORLModule:
    torch.manual_seed(0)
    return DefaultPPORLModule(
        observation_space=gym.spaces.Box(-1, 1, (3,)),
        action_space=gym.spaces.Discrete(2),
        model_config={**LSTM, **extra},
    )


@pytest.mark.parametrize(
    "extra",
    [{}, {"vf_share_layers": True}, {"lstm_use_prev_action": True, "lstm_use_prev_reward": True}],
)
def test_step_by_step_equals_padded_sequence(extra: dict[str, object]) -> None:
    module = _module(**extra)
    lengths = [5, 3, 1]
    obs = torch.randn(3, 5, 3)
    prev_a = torch.randint(0, 2, (3, 5)).float()
    prev_r = torch.randn(3, 5)
    mask = torch.arange(5)[None] < torch.tensor(lengths)[:, None]
    obs = torch.where(mask[..., None], obs, 0.0)  # zero-padding after the real steps
    init = module.get_initial_state()
    start = {k: torch.randn(3, *v.shape) for k, v in init.items()}  # a recorded state
    seq = {
        Columns.OBS: obs,
        Columns.STATE_IN: flatten_state(start),
        PREV_ACTIONS: prev_a,
        PREV_REWARDS: prev_r,
    }
    out = module.forward_train(seq)
    values = module.compute_values(seq, embeddings=out[Columns.EMBEDDINGS])
    state = start
    with torch.no_grad():
        for t in range(5):
            step = {
                Columns.OBS: obs[:, t],
                Columns.STATE_IN: state,
                PREV_ACTIONS: prev_a[:, t],
                PREV_REWARDS: prev_r[:, t],
            }
            one = module._forward_train(step)
            real = mask[:, t]
            torch.testing.assert_close(
                one[Columns.ACTION_DIST_INPUTS][real], out[Columns.ACTION_DIST_INPUTS][:, t][real]
            )
            v = module.compute_values(step, embeddings=one[Columns.EMBEDDINGS])
            torch.testing.assert_close(v[real], values[:, t][real])
            state = one[Columns.STATE_OUT]
    # the inference-only twin acts the same, from the same weights
    twin = DefaultPPORLModule(
        observation_space=module.observation_space,
        action_space=module.action_space,
        model_config=module.model_config,
        inference_only=True,
    )
    twin.set_state(module.get_state(inference_only=True))
    first = {k: v[:, 0] for k, v in seq.items() if k != Columns.STATE_IN}
    first[Columns.STATE_IN] = start
    torch.testing.assert_close(
        twin.forward_exploration(first)[Columns.ACTION_DIST_INPUTS],
        out[Columns.ACTION_DIST_INPUTS][:, 0],
    )


def test_chunk_index_cuts_sequences_at_max_seq_len() -> None:
    seq_ends = np.array([0, 0, 0, 0, 0, 0, 1, 0, 1, 1, 0, 0, 0, 0, 0, 1], bool)
    starts, lengths = chunk_index(seq_ends, 3)
    assert starts.tolist() == [0, 3, 6, 7, 9, 10, 13]
    assert lengths.tolist() == [3, 3, 1, 2, 1, 3, 3]


def _flat_batch(n: int = 23, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    seq_ends = torch.zeros(n, dtype=torch.bool)
    seq_ends[[6, 7, 15, n - 1]] = True
    width = sum(v.numel() for v in _module().get_initial_state().values())
    return {
        Columns.OBS: torch.randn(n, 3, generator=g),
        Columns.NEXT_OBS: torch.randn(n, 3, generator=g),
        Columns.ACTIONS: torch.randint(0, 2, (n,), generator=g),
        Columns.REWARDS: torch.ones(n),
        Columns.SEQ_ENDS: seq_ends,
        Columns.STATE_IN: torch.randn(n, width, generator=g),
        Columns.ACTION_LOGP: torch.full((n,), -0.69),
        Columns.ADVANTAGES: torch.randn(n, generator=g),
        Columns.VALUE_TARGETS: torch.randn(n, generator=g),
        Columns.ACTION_DIST_INPUTS: torch.zeros(n, 2),
    }


def test_padding_never_changes_a_loss() -> None:
    """The same chunks with extra zero-padding steps (and an extra all-padding chunk) give
    the same PPO loss and the same gradients: no loss term reads a padded step."""
    config = PPOConfig().environment("CartPole-v1").rl_module(model_config=LSTM)
    learner = config.learner_class(
        config=config,
        module_spec=config.get_multi_rl_module_spec(
            spaces={"default_policy": (gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2))}
        ),
    )
    learner.build()
    assert_padding_is_never_read(learner, "default_policy", to_sequences(_flat_batch(), 5))


def test_sequence_values_equal_step_by_step_values() -> None:
    module = _module()
    flat = _flat_batch()
    v, v_next = sequence_values(module, flat)
    starts, lengths = chunk_index(flat[Columns.SEQ_ENDS].numpy(), 5)
    template = module.get_initial_state()
    with torch.no_grad():
        for s, n in zip(starts.tolist(), lengths.tolist(), strict=True):
            state = {
                k: x
                for k, x in zip(
                    sorted(template), flat[Columns.STATE_IN][s : s + 1].split(8, dim=1), strict=True
                )
            }
            for t in range(s, s + n + 1):
                obs = (
                    flat[Columns.OBS][t : t + 1] if t < s + n else flat[Columns.NEXT_OBS][t - 1 : t]
                )
                one = module._forward_train({Columns.OBS: obs, Columns.STATE_IN: state})
                value = float(module.compute_values({}, embeddings=one[Columns.EMBEDDINGS])[0])
                if t < s + n:
                    assert v[t] == pytest.approx(value, abs=1e-5)
                if t > s:
                    assert v_next[t - 1] == pytest.approx(value, abs=1e-5)
                state = one[Columns.STATE_OUT]


def test_env_runner_resets_state_at_episode_starts() -> None:
    config = (
        PPOConfig()
        .environment("CartPole-v1")
        .env_runners(num_envs_per_env_runner=3)
        .rl_module(model_config=LSTM)
        .debugging(seed=0)
    )
    runner = SingleAgentEnvRunner(config=config)
    # a second call goes on from the states the first one left
    before = runner.sample(num_timesteps=150)["default_policy"][Columns.EPS_ID]
    batch = runner.sample(num_timesteps=150)["default_policy"]
    eps = batch[Columns.EPS_ID]
    state = batch[Columns.STATE_IN]
    _, first_rows = np.unique(eps, return_index=True)
    carried = np.isin(eps[first_rows], before)  # episodes with steps in the first call
    starts = np.zeros(len(eps), bool)
    starts[first_rows[~carried]] = True  # first steps of episodes
    assert starts.sum() >= 3  # random CartPole episodes end within ~20 steps
    assert carried.sum() >= 1
    assert np.all(state[starts] == 0.0)
    assert np.all(np.abs(state[~starts]).sum(axis=1) > 0)  # carried on, also across calls
    assert np.all(batch[PREV_ACTIONS][starts] == 0) and np.all(batch[PREV_REWARDS][starts] == 0)
    # each step's state is the module's state after the row before (same episode)
    module = runner.module
    same_episode = np.flatnonzero(eps[1:] == eps[:-1]) + 1
    rows = same_episode[:40]
    with torch.no_grad():
        prev = torch.from_numpy(rows - 1)
        out = module.forward_exploration(
            {
                Columns.OBS: torch.from_numpy(batch[Columns.OBS])[prev],
                Columns.STATE_IN: torch.from_numpy(state)[prev],
            }
        )
    torch.testing.assert_close(flatten_state(out[Columns.STATE_OUT]), torch.from_numpy(state[rows]))


def test_ppo_with_lstm_trains_and_restores_from_checkpoint(tmp_path: Path) -> None:
    config = (
        PPOConfig()
        .environment(StatelessCartPole)
        .env_runners(num_envs_per_env_runner=2)
        .training(train_batch_size_per_learner=128, minibatch_size=32, num_epochs=2)
        .rl_module(model_config=LSTM)
    )
    algo = config.build_algo()
    result = algo.train()
    stats = result["learners"]["default_policy"]
    assert stats["num_module_steps_trained"] == 2 * result["env_runners"]["num_env_steps_sampled"]
    assert np.isfinite(stats["total_loss"])
    path = algo.save_to_path(str(tmp_path))
    from rlmod.algorithms import InferencePolicy

    policy = InferencePolicy.from_checkpoint(path)
    trained = algo.get_module()
    torch.testing.assert_close(
        policy.module.get_state(inference_only=True), trained.get_state(inference_only=True)
    )
    obs = np.array([0.01, -0.02], np.float32)
    policy.compute_single_action(obs)
    after_one = {k: v.clone() for k, v in policy.state.items()}
    assert any(v.abs().sum() > 0 for v in after_one.values())
    policy.compute_single_action(obs)
    assert any(not torch.equal(after_one[k], v) for k, v in policy.state.items())
    policy.reset()
    assert policy.state is None
    with pytest.raises(ValueError, match="recurrent"):
        policy.export(str(tmp_path / "p.pt2"))
    algo.stop()


def test_stateful_module_is_not_stacked() -> None:
    assert stack_key(_module()) is None
    plain = DefaultPPORLModule(
        observation_space=gym.spaces.Box(-1, 1, (3,)), action_space=gym.spaces.Discrete(2)
    )
    assert stack_key(plain) is not None and not plain.is_stateful()


@pytest.mark.parametrize("config_cls", [DQNConfig, SACConfig])
def test_dqn_and_sac_refuse_use_lstm(config_cls: type) -> None:
    config = config_cls().environment("CartPole-v1").rl_module(model_config={"use_lstm": True})
    with pytest.raises(ValueError, match="use_lstm"):
        config.build_algo()


def test_multi_agent_runner_refuses_use_lstm() -> None:
    config = (
        PPOConfig()
        .environment(MultiAgentCartPole)
        .multi_agent(policies={"p0", "p1"}, policy_mapping_fn=lambda aid, *a, **k: f"p{aid}")
        .rl_module(model_config={"use_lstm": True})
    )
    with pytest.raises(ValueError, match="use_lstm"):
        config.build_algo()


def test_bad_max_seq_len_is_refused() -> None:
    with pytest.raises(ValueError, match="max_seq_len"):
        _module(max_seq_len=0)


def test_evaluation_feeds_the_previous_reward_to_a_recurrent_policy(tmp_path: Path) -> None:
    from rlmod.algorithms import InferencePolicy
    from rlmod.algorithms.evaluation import evaluate_checkpoint

    config = (
        PPOConfig()
        .environment(StatelessCartPole)
        .env_runners(num_envs_per_env_runner=2)
        .training(train_batch_size_per_learner=64, minibatch_size=32, num_epochs=1)
        .rl_module(model_config={**LSTM, "lstm_use_prev_reward": True})
    )
    algo = config.build_algo()
    algo.train()
    path = algo.save_to_path(str(tmp_path / "ckpt"))
    algo.stop()
    returns = evaluate_checkpoint(path, num_episodes=2)
    assert len(returns) == 2 and all(r >= 1.0 for r in returns)
    obs = np.array([0.01, -0.02], np.float32)
    with_reward, without = (
        InferencePolicy.from_checkpoint(path),
        InferencePolicy.from_checkpoint(path),
    )
    for policy, reward in ((with_reward, 1.0), (without, None)):
        policy.compute_single_action(obs)
        policy.compute_single_action(obs, prev_reward=reward)
    assert with_reward.state is not None and without.state is not None
    assert not torch.equal(with_reward.state["h"], without.state["h"])


def test_a_learner_step_is_the_same_with_extra_padding() -> None:
    """One Learner SGD step on chunks and on the same chunks padded to twice the length
    moves the weights identically: the Learner takes the padding out before the loss."""
    config = PPOConfig().environment("CartPole-v1").rl_module(model_config=LSTM)
    spaces = {"default_policy": (gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2))}
    chunks = to_sequences(_flat_batch(), 5)
    padded = to_sequences(_flat_batch(), 5)
    mask = padded[Columns.LOSS_MASK]
    for key, value in list(padded.items()):
        if key != Columns.STATE_IN:  # 5 more steps per chunk, holding garbage
            extra = torch.full((value.shape[0], 5, *value.shape[2:]), 7, dtype=value.dtype)
            padded[key] = torch.cat([value, extra], 1)
    padded[Columns.LOSS_MASK] = torch.cat([mask, torch.zeros_like(mask)], 1)
    weights = []
    for cols in (chunks, padded):
        torch.manual_seed(0)
        learner = config.learner_class(
            config=config, module_spec=config.get_multi_rl_module_spec(spaces=spaces)
        )
        learner.build()
        learner._alone["default_policy"].start_update(config)
        learner._sgd_step({"default_policy": dict(cols)}, [], {"default_policy": config})
        weights.append(learner.module["default_policy"].get_state())
    assert weights[0].keys() == weights[1].keys()
    for key in weights[0]:
        torch.testing.assert_close(weights[0][key], weights[1][key])


def test_a_recurrent_sgd_step_keeps_everything_on_the_learner_device(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A PPO+LSTM SGD step on a Learner on the meta device (the stand-in for a GPU, as in
    tests/core/test_learner_device.py): chunks, states, the unpadding and the loss stay on
    the Learner's device (a CPU tensor mixed in anywhere raises). Meta tensors have no
    values, so the mask's selection (`nonzero`) is taken as all steps there."""
    import torch.fx.experimental._config as fx_config

    monkeypatch.setattr(fx_config, "meta_nonzero_assume_all_nonzero", True)
    cfg = (
        PPOConfig()
        .environment("CartPole-v1")
        .env_runners(num_envs_per_env_runner=2)
        .training(train_batch_size=64, minibatch_size=32, num_epochs=1, grad_clip=0.5)
        .rl_module(model_config=LSTM)
        .debugging(seed=0)
    )
    runner = SingleAgentEnvRunner(config=cfg)
    sample = runner.sample(num_timesteps=64)
    spec = cfg.get_multi_rl_module_spec(spaces=runner.get_spaces())
    runner.stop()
    reference = cfg.learner_class(config=cfg, module_spec=spec)
    reference.build()
    cpu_batch = reference._learner_connector(
        reference._to_tensors(sample), rl_module=reference.module
    )
    meta = torch.device("meta")
    learner = cfg.learner_class(config=cfg, module_spec=spec)
    learner.device = meta
    learner.build()
    learner.guard.enabled = False
    cols = {k: v.to(meta) for k, v in cpu_batch["default_policy"].items()}
    assert cols[Columns.OBS].dim() == 3 and cols[Columns.LOSS_MASK].dim() == 2
    config = learner.config.get_config_for_module("default_policy")
    learner._alone["default_policy"].start_update(config)
    learner._sgd_step({"default_policy": cols}, [], {"default_policy": config})
    assert learner._optimizers["default_policy"].step_count == 1
    assert all(p.grad is None or p.grad.device == meta for p in learner.module.parameters())

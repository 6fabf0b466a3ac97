"""Tuned settings per env (PPO: TUNED, DQN: TUNED_DQN, SAC: TUNED_SAC): the one place the
CLI and the benchmarks take them from.

Used by `rlmod train` (applied on top of the algorithm's config before `--config`) and by
benchmarks. Keys are flat setting names, as `AlgorithmConfig.to_dict()` writes them.
"""

from __future__ import annotations

from typing import Any

FAST_PPO: dict[str, Any] = {
    "lr": 3e-4,
    "lambda_": 0.95,
    "clip_param": 0.2,
    "vf_clip_param": None,
    "vf_loss_coeff": 0.5,
    "use_kl_loss": False,
    "grad_clip": 0.5,
    "num_epochs": 10,
    "minibatch_size": 128,
    "model_config": {"fcnet_hiddens": [64, 64]},
}
"""PPO settings that learn small tasks fast on a CPU (Stable-Baselines3's PPO defaults,
and two 64-unit layers): rlmod's PPOConfig defaults before they became RLlib's. `rlmod
train` applies them under every PPO run, the per-env TUNED settings on top."""

MINATAR_MODEL: dict[str, Any] = {
    "conv_filters": [[16, 3, 1, "valid"]],
    "vf_share_layers": True,
    "head_fcnet_hiddens": [128],
}
"""The MinAtar paper's network (Young & Tian 2019) as `model_config`: one 16-channel 3x3
convolution (10x10 -> 8x8x16 = 1024 features) shared by the policy and value heads, each
a 128-unit layer; benchmarks/minatar_vs_sb3.py builds the same in Stable-Baselines3."""

TUNED: dict[str, dict[str, Any]] = {
    # Solves CartPole-v1 (mean return >= 475 over the last 100 episodes) in a median ~60k
    # env steps and ~5 s on a quiet 2-core Xeon (seeds 0-3: 58-70k). gamma 0.98 / lambda
    # 0.8 are rl-baselines3-zoo's values; 16 sub-envs amortize the forward pass. A
    # 1024-step batch in minibatches of 128 for 8 epochs: the same seeds needed a median
    # 80.3k with 2048 / 256 / 10 (before 2026-12-04); 10 epochs needed as many env steps
    # as 8 and 20% more time, 6 epochs 15% more env steps (benchmarks/RESULTS.md, issue 12).
    "CartPole-v1": {
        **FAST_PPO,
        "num_envs_per_env_runner": 16,
        "train_batch_size": 1024,
        "minibatch_size": 128,
        "num_epochs": 8,
        "lr": 1e-3,
        "gamma": 0.98,
        "lambda_": 0.8,
    },
    # Reaches a mean return >= -300 over the last 100 episodes in about 60-100k env steps
    # and 5-7 s (seeds 0-4), and about -190 by 200k steps. With a constant lr the mean
    # swings between -200 and -400 after 100k steps; decaying it to 1e-4 over 200k steps
    # keeps it near -200. (A value-loss clamp such as RLlib's vf_clip_param=10 would zero
    # the critic's gradient on most rows here, since returns reach -1600; FAST_PPO clamps
    # nothing.)
    "Pendulum-v1": {
        **FAST_PPO,
        "num_envs_per_env_runner": 16,
        "train_batch_size": 2048,
        "minibatch_size": 256,
        "num_epochs": 10,
        "lr": [[0, 1e-3], [200_000, 1e-4]],
        "gamma": 0.9,
        "lambda_": 0.95,
    },
    # Atari (ALE v5 IDs; `rlmod train` makes them through make_atari_env: 84x84 grayscale,
    # 4 frames stacked, 4 frames skipped): CleanRL's ppo_atari.py / rl-baselines3-zoo's
    # Atari PPO, setting for setting: 8 envs x 128 steps, 4 epochs of minibatches of 256,
    # lr 2.5e-4 decaying linearly to 0 over 10M env steps, clip 0.1, entropy 0.01, value
    # loss 0.5, gradient norm 0.5, gamma 0.99, lambda 0.95; the Nature CNN (the default
    # for 84x84) shared by both heads, each with a 512-unit layer (CleanRL shares that
    # layer too); rewards clipped to their sign for training, as theirs (and RLlib's
    # atari_ppo.py, which sets clip_rewards=True though its new stack never applies it);
    # metrics keep the game's scores. Unlike them, episodes do not end at a lost life
    # (see wrap_atari_for_new_api_stack). Not measured to a score here: 10M steps is days
    # of CPU time. benchmarks/atari_throughput.py times the loop: on a quiet 2-core Xeon, 280
    # env steps/s with one torch thread (the default) and 426 with
    # num_threads_per_learner=2, since the Nature CNN's updates are most of the time (the
    # wrapped envs with the policy's forward pass alone step at ~1,400/s).
    **{
        env_id: {
            **FAST_PPO,
            "num_envs_per_env_runner": 8,
            "train_batch_size": 1024,
            "minibatch_size": 256,
            "num_epochs": 4,
            "lr": [[0, 2.5e-4], [10_000_000, 0.0]],
            "gamma": 0.99,
            "lambda_": 0.95,
            "clip_param": 0.1,
            "entropy_coeff": 0.01,
            "vf_loss_coeff": 0.5,
            "grad_clip": 0.5,
            "clip_rewards": True,
            "model_config": {"vf_share_layers": True, "head_fcnet_hiddens": [512]},
        }
        for env_id in ("ALE/Pong-v5", "ALE/Breakout-v5")
    },
    # MinAtar (10x10xC boolean images): the network of the MinAtar paper (Young & Tian
    # 2019: one 16-channel 3x3 convolution, then 128 units), shared by both heads, and
    # the Atari PPO settings above scaled to these short, dense games: 8 envs x 128
    # steps, 4 epochs of 256, lr 3e-4 (Pgx's MinAtar PPO), clip 0.2, entropy 0.01. On
    # Breakout-v1 the mean return of the last 100 episodes rose from ~0.5 (random) to a
    # median 4.24 in 100k env steps, 17 s on a quiet 2-core Xeon (seeds 0-2: 4.30 / 4.24 /
    # 3.91; benchmarks/minatar_vs_sb3.py, where SB3 with the same network reached 4.15).
    **{
        f"MinAtar/{game}-v1": {
            **FAST_PPO,
            "num_envs_per_env_runner": 8,
            "train_batch_size": 1024,
            "minibatch_size": 256,
            "num_epochs": 4,
            "lr": 3e-4,
            "gamma": 0.99,
            "lambda_": 0.95,
            "clip_param": 0.2,
            "entropy_coeff": 0.01,
            "vf_loss_coeff": 0.5,
            "grad_clip": 0.5,
            "model_config": MINATAR_MODEL,
        }
        for game in ("Asterix", "Breakout", "Freeway", "Seaquest", "SpaceInvaders")
    },
}
"""Env ID -> PPO settings that solve it quickly on one machine (measured, see comments)."""

TUNED_DQN: dict[str, dict[str, Any]] = {
    # rl-baselines3-zoo's DQN for CartPole-v1, setting for setting: lr 2.3e-3, batch 64,
    # 100k buffer, 1000 learning starts, epsilon to 0.04 over 8k steps, 128 gradient steps
    # per 256 env steps, target copied every 10 env steps, and SB3's DQN itself: one Q-head
    # (no dueling) and the target network's max (no double Q) on 256x256 ReLU. Uniform
    # replay, 1-step. On an Intel Xeon host (session 21) greedy evaluation reached 500 at
    # 10.2k / 41.0k / 28.2k env steps (seeds 0 / 1 / 2). RLlib's double-Q dueling network
    # with the same settings reached it at 23.0k (seed 0) and 25.6k (seed 2), while seed 1
    # peaked at 439 and had not reached 475 by 60k; it also costs a second forward pass per
    # gradient step (the online network on new_obs for double Q's argmax).
    "CartPole-v1": {
        "lr": 2.3e-3,
        "double_q": False,
        "dueling": False,
        "train_batch_size": 64,
        "rollout_fragment_length": 256,
        "training_intensity": 32,
        "target_network_update_freq": 10,
        "num_steps_sampled_before_learning_starts": 1000,
        "epsilon": [[0, 1.0], [8000, 0.04]],
        "replay_buffer_config": {"type": "EpisodeReplayBuffer", "capacity": 100_000},
    },
}
"""Env ID -> DQN settings (measured, see comments)."""

TUNED_SAC: dict[str, dict[str, Any]] = {
    # Stable-Baselines3's SAC with rl-baselines3-zoo's Pendulum entry, setting for setting:
    # lr 1e-3 (actor, critics and temperature), batch 256, tau 0.005, gamma 0.99, learning
    # starts after 100 env steps, one gradient step per env step (fragments of 1 step),
    # 256x256 ReLU actor and critics, initial alpha 1.0, target entropy -dim(A). (RLlib's
    # tuned Pendulum SAC: the same network, tau and batch, lr 2e-4 / 8e-4 / 9e-4 for actor /
    # critic / alpha, 256 learning starts, n-step 2-5, prioritized replay.) Env steps until
    # the mean of the last 10 episodes passed -200, seeds 0-2: 4,400 / 4,400 / 7,400; with
    # 64x64 networks 6,000 / 4,800 / 5,600 (128x128, seed 0: 5,800), and 6,400 median
    # before with 64x64, gamma 0.98, 1,000 learning starts and 8-step fragments.
    "Pendulum-v1": {
        "actor_lr": 1e-3,
        "critic_lr": 1e-3,
        "alpha_lr": 1e-3,
        "gamma": 0.99,
        "rollout_fragment_length": 1,
        "training_intensity": 256,
        "num_steps_sampled_before_learning_starts": 100,
        "replay_buffer_config": {"type": "EpisodeReplayBuffer", "capacity": 100_000},
        "model_config": {"fcnet_hiddens": [256, 256], "fcnet_activation": "relu"},
    },
    # Discrete SAC (Christodoulou 2019): one gradient step of 64 per env step. The 'auto'
    # target entropy, 0.98 * log 2, keeps the policy near uniform on CartPole; 0.3 nats
    # let the mean return over 20 episodes rise from 26 to about 200 within 6k env steps
    # (seed 0), where it stayed (near 220 at 20k).
    "CartPole-v1": {
        "actor_lr": 1e-3,
        "critic_lr": 1e-3,
        "alpha_lr": 1e-3,
        "train_batch_size": 64,
        "rollout_fragment_length": 8,
        "training_intensity": 64,
        "num_steps_sampled_before_learning_starts": 1000,
        "target_entropy": 0.3,
        "replay_buffer_config": {"type": "EpisodeReplayBuffer", "capacity": 100_000},
        "model_config": {"fcnet_hiddens": [64, 64], "fcnet_activation": "relu"},
    },
}
"""Env ID -> SAC settings (measured, see comments)."""

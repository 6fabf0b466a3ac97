"""InferencePolicy: a trained policy from a checkpoint, for production (no env, no Ray).

Built from an Algorithm checkpoint: the inference-only module plus the env-to-module and
module-to-env connectors it was trained with, their states included (one-hot, mean-std
statistics), so a raw env observation is processed exactly as during training. Used by
`rlmod evaluate` and by users serving a policy; `export()` writes the module for serving
outside Python (torch.export, ONNX).
"""

from __future__ import annotations

import contextlib
import logging
import os
import warnings
from collections.abc import Iterable, Iterator
from typing import Any, cast

import gymnasium as gym
import numpy as np
import torch

from rlmod.connectors.env_to_module import MeanStdFilter
from rlmod.connectors.module_to_env import ENV_ACTIONS
from rlmod.connectors.pipeline import ConnectorPipeline
from rlmod.core.columns import Columns
from rlmod.core.rl_module import RLModule, acting_forward
from rlmod.env.recurrent_state import RecurrentState
from rlmod.errors import CheckpointError
from rlmod.utils.checkpoints import read_metadata, resolve_checkpoint
from rlmod.utils.spaces import space_from_dict
from rlmod.utils.state_files import read_state


def _module_input(obs: object) -> np.ndarray:
    """What the module takes, as the EnvRunner hands it over: uint8/bool images and packed
    rows as they are (the module scales them), anything else as float32."""
    arr = np.asarray(obs)
    return arr if arr.dtype in (np.uint8, np.bool_) else arr.astype(np.float32, copy=False)


class InferencePolicy:
    """Computes env actions from raw env observations, as an EnvRunner does.

    Example (the whole production path: three lines after the imports):
        >>> import tempfile, numpy as np
        >>> from rlmod.algorithms.ppo import PPOConfig
        >>> checkpoint = PPOConfig().environment("CartPole-v1").build_algo().save_to_path(
        ...     tempfile.mkdtemp())
        >>> from rlmod.algorithms import InferencePolicy
        >>> policy = InferencePolicy.from_checkpoint(checkpoint)
        >>> action = policy.compute_single_action(np.array([0.0, 0.1, 0.0, -0.1]))
        >>> int(action) in (0, 1)
        True
    """

    def __init__(
        self,
        module: RLModule,
        env_to_module: ConnectorPipeline,
        module_to_env: ConnectorPipeline,
        *,
        explore: bool = False,
    ) -> None:
        self.module = module.eval()
        self.env_to_module = env_to_module
        self.module_to_env = module_to_env
        self.explore = explore
        for piece in env_to_module.connectors:  # serving must not shift the statistics
            if isinstance(piece, MeanStdFilter):
                piece.update_stats = False
        self._episode_start = True
        # a stateful module's (use_lstm): held here between calls, per batch row
        self._recurrent: RecurrentState | None = None
        self.config: Any = None  # the stored config, when loaded from a checkpoint

    @classmethod
    def from_checkpoint(
        cls,
        path: str | os.PathLike,
        *,
        explore: bool = False,
        trusted_modules: Iterable[str] = (),
        **overrides: Any,
    ) -> InferencePolicy:
        """Loads the default module of a single-agent Algorithm checkpoint (or of a run
        dir's newest one) with its connectors.

        `trusted_modules` and `overrides` as for `Algorithm.from_checkpoint`: a connector
        factory that was a lambda when saved must be passed again (e.g.
        `env_to_module_connector=...`), since acting without it would feed the module
        observations it was not trained on.
        """
        from rlmod.algorithms.algorithm import (
            CONFIG_FILE,
            NOT_NEEDED_TO_ACT,
            _config_from_file,
        )

        path = resolve_checkpoint(path)  # a run dir: its newest complete checkpoint
        read_metadata(path)
        trusted = tuple(trusted_modules)
        config = _config_from_file(
            path / CONFIG_FILE, trusted, overrides, skip_unstored=NOT_NEEDED_TO_ACT
        )
        if config.is_multi_agent:
            raise CheckpointError(
                f"{path} is a multi-agent checkpoint; InferencePolicy serves single-agent "
                "ones. Load one module with RLModule.from_checkpoint(path, module_id=...)."
            )
        runner_dir = path / "env_runner"
        # Offline algorithms (BC, MARWIL) have no EnvRunner: their own metadata holds the
        # env's spaces, and their connectors keep no state.
        spaces_dir = runner_dir if runner_dir.is_dir() else path
        spaces = read_metadata(spaces_dir).get("spaces", {})
        try:
            # One sub-env's spaces; checkpoints before "__env_single__" kept them in "__env__".
            single = spaces.get("__env_single__", spaces.get("__env__"))
            obs_space, act_space = (space_from_dict(d) for d in single)
        except (KeyError, TypeError, ValueError) as e:
            raise CheckpointError(
                f"{runner_dir / 'metadata.json'}: field 'spaces' has no valid "
                f"'__env_single__' entry ({e!r})."
            ) from e
        assert isinstance(obs_space, gym.Space) and isinstance(act_space, gym.Space)
        env_to_module = config.build_env_to_module_connector(None, obs_space, act_space)
        if runner_dir.is_dir():
            env_to_module.set_state(read_state(runner_dir).get("env_to_module", {}))
        module = RLModule.from_checkpoint(path, inference_only=True, trusted_modules=trusted)
        module_to_env = config.build_module_to_env_connector(
            None, env_to_module.observation_space, act_space
        )
        policy = cls(module, env_to_module, module_to_env, explore=explore)
        policy.config = config
        return policy

    def reset(self) -> None:
        """Starts a new episode: stateful connectors (frame stacking) and a recurrent
        module's state (`use_lstm`) restart. Call it between episodes."""
        self._episode_start = True
        self._recurrent = None

    @property
    def state(self) -> dict[str, torch.Tensor] | None:
        """A recurrent module's state after the last call, `{key: [N, ...]}` (None before
        the first call of an episode, or for a module without memory); assign a saved
        one to go on from it."""
        return None if self._recurrent is None else self._recurrent.state

    @state.setter
    def state(self, value: dict[str, torch.Tensor]) -> None:
        n = next(iter(value.values())).shape[0]
        self._recurrent = RecurrentState(self.module, n)
        self._recurrent.state = dict(value)
        self._episode_start = False

    @torch.inference_mode()
    def compute_actions(self, observations: Any, prev_rewards: Any = None) -> np.ndarray:
        """Env actions for a batch of raw observations (leading batch axis).

        A recurrent module (`use_lstm`) goes on from the state this policy holds since the
        last `reset()` (one state per batch row), and sees the actions it chose before;
        `prev_rewards` (`[N]`, the rewards the env returned for them) are what a module
        with `lstm_use_prev_reward` also reads (0 where not given)."""
        n = (
            len(observations[next(iter(observations))])
            if isinstance(observations, dict)
            else len(observations)
        )
        starts = np.full(n, self._episode_start)
        self._episode_start = False
        obs = self.env_to_module(observations, episode_starts=starts)
        forward = acting_forward(self.module, self.explore)
        inputs = {Columns.OBS: torch.as_tensor(_module_input(obs))}
        if self.module.is_stateful():
            if self._recurrent is None or self._recurrent.num_envs != n:
                self._recurrent = RecurrentState(self.module, n)
            if prev_rewards is not None:
                self._recurrent.prev_rewards = np.asarray(prev_rewards, np.float32).reshape(n)
            inputs = self._recurrent.inputs(inputs)
        out = forward(inputs)
        data = self.module_to_env(out, rl_module=self.module, explore=self.explore)
        if self._recurrent is not None:
            self._recurrent.advance(
                cast("dict[str, torch.Tensor]", out[Columns.STATE_OUT]),
                data[Columns.ACTIONS].numpy(),
                np.zeros(n, np.float32),
                np.zeros(n, bool),
            )
        return np.asarray(data[ENV_ACTIONS])

    def compute_single_action(self, observation: Any, prev_reward: float | None = None) -> Any:
        """The env action for one raw observation (a recurrent module's state carries on
        from the last call until `reset()`)."""
        batch = (
            {k: np.asarray(v)[None] for k, v in observation.items()}
            if isinstance(observation, dict)
            else np.asarray(observation)[None]
        )
        rewards = None if prev_reward is None else [prev_reward]
        return self.compute_actions(batch, rewards)[0]

    def export(self, path: str | os.PathLike, *, format: str = "torch") -> str:  # noqa: A002
        """Writes the greedy policy (module input -> env action) for serving outside rlmod.

        `format="torch"` writes a `torch.export` program (`torch.export.load(path)`),
        `format="onnx"` an ONNX model (needs the `onnx` and `onnxscript` packages). The
        exported graph takes what the module sees, i.e. observations after the env-to-module
        connectors (`policy.env_to_module(obs, episode_starts=...)`); it returns actions as
        the env takes them (bounded Box actions rescaled and clipped as the EnvRunner does).
        """
        if self.module.is_stateful():
            raise ValueError(
                "export() writes a stateless graph (obs -> action); this module is "
                "recurrent (model_config use_lstm=True). Serve it with InferencePolicy, "
                "which carries its state between compute_single_action calls."
            )
        if format not in ("torch", "onnx"):
            raise ValueError(f"export(format={format!r}): expected 'torch' or 'onnx'.")
        if format == "onnx":
            try:
                import onnx  # noqa: F401
                import onnxscript  # noqa: F401
            except ImportError as e:
                raise ImportError(
                    "format='onnx' needs the onnx and onnxscript packages: pip install onnx "
                    "onnxscript"
                ) from e
        greedy = _GreedyActions(self.module).eval()
        obs_space = self.module.observation_space
        shape = tuple(obs_space.shape or ())
        # a batch of 1 would specialize; uint8 images (and packed rows) stay uint8
        example = torch.as_tensor(_module_input(np.zeros((2, *shape), obs_space.dtype)))
        batch = torch.export.Dim("batch", min=1)
        path = str(path)
        with quiet_exporters():
            if format == "torch":
                program = torch.export.export(greedy, (example,), dynamic_shapes=({0: batch},))
                torch.export.save(program, path)
            else:
                weight_bytes = sum(p.numel() * p.element_size() for p in greedy.parameters())
                torch.onnx.export(
                    greedy,
                    (example,),
                    path,
                    input_names=["obs"],
                    output_names=["actions"],
                    dynamic_shapes=({0: batch},),
                    dynamo=True,
                    verbose=False,
                    # weights inside the .onnx file (no side .data file) below protobuf's 2 GB
                    external_data=weight_bytes > _ONNX_INLINE_LIMIT_BYTES,
                )
        return path


_ONNX_INLINE_LIMIT_BYTES = 1 << 30
"""Weights up to 1 GiB are stored inside the .onnx file (protobuf's limit is 2 GiB)."""


@contextlib.contextmanager
def quiet_exporters() -> Iterator[None]:
    """Silences what torch.export and torch.onnx print about themselves while exporting
    (FutureWarnings of their internals, "torchvision is not installed" log lines), which
    say nothing about the user's policy; errors still raise."""
    loggers = [logging.getLogger(name) for name in ("torch.onnx", "torch.export", "torch._dynamo")]
    levels = [one.level for one in loggers]
    try:
        for one in loggers:
            one.setLevel(logging.ERROR)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            warnings.simplefilter("ignore", DeprecationWarning)
            yield
    finally:
        for one, level in zip(loggers, levels, strict=True):
            one.setLevel(level)


class _GreedyActions(torch.nn.Module):
    """module input -> the distribution's mode, clipped to a bounded Box: the exported
    graph of `InferencePolicy.export`."""

    low: torch.Tensor
    high: torch.Tensor

    def __init__(self, module: RLModule) -> None:
        super().__init__()
        self.module = module
        space = module.action_space
        self.discrete = isinstance(space, gym.spaces.Discrete)
        self.start = int(space.start) if isinstance(space, gym.spaces.Discrete) else 0
        if not self.discrete and not isinstance(space, gym.spaces.Box):
            raise TypeError(f"export supports Discrete and Box actions, not {space}.")
        low = high = torch.empty(0)
        if isinstance(space, gym.spaces.Box) and bool(
            np.all(np.isfinite(space.low)) and np.all(np.isfinite(space.high))
        ):
            low, high = torch.as_tensor(space.low), torch.as_tensor(space.high)
        self.register_buffer("low", low)
        self.register_buffer("high", high)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        inputs = self.module.forward_inference({Columns.OBS: obs})[Columns.ACTION_DIST_INPUTS]
        # The module's own distribution gives the mode, as GetActions does: a Gaussian's
        # mean, but tanh(mean) for SAC's squashed Gaussian.
        actions = self.module.action_dist(inputs).deterministic_sample()
        if self.discrete:
            return actions + self.start
        if self.low.numel():  # as UnsquashAndClipActions: [-1, 1] -> the env's bounds
            actions = self.low + (actions.clamp(-1.0, 1.0) + 1.0) * 0.5 * (self.high - self.low)
        return actions

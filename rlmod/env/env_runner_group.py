"""EnvRunnerGroup: the local EnvRunner and any remote ones, driven as one.

Built by Algorithm; `get_spaces()` tells env-less components (Learners) what each module
sees; `sample()` collects episodes from the EnvRunners that sample; `sync_weights()` sends
Learners' inference-only weights to every EnvRunner; `sync_env_runner_states()` merges
connector states (the mean-std filter) and sends the result back. Remote EnvRunners are
Ray actors of the very same classes (rlmod.utils.ray_utils); failed ones are restarted or
ignored per `config.fault_tolerance(...)`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

import gymnasium as gym

from rlmod.connectors.env_to_module import merge_env_to_module_states
from rlmod.core.multi_rl_module import ModuleID
from rlmod.core.types import Components, MetricsDict, StateDict, StateValue
from rlmod.env.env_runner import WEIGHTS_SEQ_NO, EnvRunner, SampleResult
from rlmod.env.reward_clipping import RewardClip, clip_sample_rewards
from rlmod.errors import EnvRunnerError
from rlmod.fast_paths import plain_paths
from rlmod.utils.checkpoints import Checkpointable, _class_path

if TYPE_CHECKING:
    from rlmod.algorithms.algorithm_config import AlgorithmConfig
    from rlmod.core.learner_group import LearnerGroup
    from rlmod.utils.ray_utils import Call

logger = logging.getLogger(__name__)


class EnvRunnerGroup:
    """`num_env_runners` remote EnvRunners (Ray actors, worker indices 1..N) and zero or
    one local EnvRunner (worker index 0), as in RLlib.

    With `num_env_runners=0` the local EnvRunner samples. Otherwise the remote ones do, in
    parallel, and a local one is built only with `create_env_on_local_worker=True` (then
    it answers `get_spaces()` without a round trip, and holds the current weights).

    Example:
        >>> from rlmod.algorithms.ppo import PPOConfig
        >>> group = EnvRunnerGroup(config=PPOConfig().environment("CartPole-v1"))
        >>> [b["default_policy"]["obs"].shape[1] for b in group.sample(num_timesteps=8)]
        [4]
        >>> group.foreach_env_runner(lambda runner: runner.worker_index)
        [0]
        >>> group.stop()
    """

    def __init__(self, *, config: AlgorithmConfig, local_env_runner: bool | None = None) -> None:
        """`local_env_runner=None` builds the local EnvRunner where RLlib does: when there
        are no remote ones, or with `config.create_env_on_local_worker`."""
        self.config = config
        # Whether any module's config clips rewards (per-module overrides included): decided
        # once, as the config is fixed from here on.
        self._clips_rewards = config.clip_rewards not in (None, False) or any(
            "clip_rewards" in o for o in config.algorithm_config_overrides_per_module.values()
        )
        self.env_runner_cls = config.env_runner_cls or self._default_runner_cls(config)
        if local_env_runner is None:
            local_env_runner = config.num_env_runners == 0 or config.create_env_on_local_worker
        self.local_env_runner: EnvRunner | None = (
            self.env_runner_cls(config=config, worker_index=0) if local_env_runner else None
        )
        self._actors: dict[int, object] = {}  # worker index -> healthy actor
        self._num_failed = 0  # remote EnvRunners lost for good (failed, not restarted)
        self._num_restarts = 0
        self._weights_seq_no = 0
        self._weights_ref: object = None  # the last weights sent, for restarted EnvRunners
        self._connector_state: StateValue = None  # the last merged connector state, likewise
        self._connectors_are_stateless = False  # learned at the first sync
        self._pending_metrics: list[MetricsDict] = []  # fetched with remote samples
        self._spaces_ref: object = None  # the first remote EnvRunner's get_spaces(), asked early
        self.last_sampled_worker_indices: list[int] = []
        """Which EnvRunner returned each batch of the last `sample()` (a failed one is
        missing), e.g. for replay buffers that keep one n-step window per EnvRunner."""
        if config.num_env_runners > 0:
            from rlmod.utils import ray_utils

            self._actors = {
                i: ray_utils.make_actor(self.env_runner_cls, config, i)
                for i in range(1, config.num_env_runners + 1)
            }
            # The first one's spaces before any builds its modules (an actor runs its calls
            # in order): the driver builds its Learner from them while they build.
            if self.local_env_runner is None:
                self._spaces_ref = ray_utils.submit(self._actors[1], ("get_spaces", (), {}))
            for actor in self._actors.values():  # errors come again at the first sync
                ray_utils.submit(actor, ("make_module", (), {}))

    @staticmethod
    def _default_runner_cls(config: AlgorithmConfig) -> type[EnvRunner]:
        if config.is_multi_agent:
            return default_multi_agent_runner_cls(config)
        from rlmod.env.single_agent_env_runner import SingleAgentEnvRunner

        return SingleAgentEnvRunner

    # ------------------------------------------------------------------ health
    def num_remote_env_runners(self) -> int:
        """Remote EnvRunners asked for and not lost for good (RLlib's name)."""
        return len(self._actors)

    def num_healthy_remote_env_runners(self) -> int:
        """Remote EnvRunners that answer (RLlib's name); failed ones are restarted at once
        or dropped, so this is `num_remote_env_runners()`."""
        return len(self._actors)

    def num_healthy_env_runners(self) -> int:
        """The local EnvRunner (if any) plus the healthy remote ones (RLlib's count)."""
        return int(self.local_env_runner is not None) + len(self._actors)

    def num_remote_env_runner_restarts(self) -> int:
        """Restarts of remote EnvRunners so far, all of them together."""
        return self._num_restarts

    def healthy_env_runner_ids(self) -> list[int]:
        """Worker indices of the healthy remote EnvRunners (RLlib's name)."""
        return sorted(self._actors)

    # ------------------------------------------------------------------ calls
    # Any: `kwargs` go to `func` (RLlib's signature passes them as a dict, which a
    # ParamSpec cannot bind), and a method named by a string returns what it returns.
    def foreach_env_runner(  # type: ignore[explicit-any]
        self,
        func: Callable[..., Any] | str,
        *,
        kwargs: dict[str, Any] | None = None,
        local_env_runner: bool = True,
        remote_worker_ids: Sequence[int] | None = None,
        timeout_seconds: float | None = None,
    ) -> list[Any]:
        """`func(env_runner, **kwargs)` (or the method named `func`) on the local EnvRunner
        (if `local_env_runner` and there is one) and on each healthy remote one (or those in
        `remote_worker_ids`), in parallel; the results in that order (RLlib's signature).

        A remote EnvRunner that dies, raises or takes longer than `timeout_seconds` is
        handled per `config.fault_tolerance()`: restarted (its result left out), ignored
        (likewise), or an EnvRunnerError. (RLlib instead leaves a slow one running and
        drops its result.)
        """
        kwargs = kwargs or {}
        out: list[object] = []
        if local_env_runner and self.local_env_runner is not None:
            runner = self.local_env_runner
            out.append(
                getattr(runner, func)(**kwargs)
                if isinstance(func, str)
                else runner.apply(func, **kwargs)
            )
        if self._actors:
            results = self._call_remote(
                [(func, (), kwargs)],
                ids=remote_worker_ids,
                timeout_s=timeout_seconds,
                what=func if isinstance(func, str) else "foreach",
            )
            out += [r[0] for _, r in sorted(results.items())]
        return out

    def _call_remote(
        self,
        calls: list[Call],
        *,
        ids: Sequence[int] | None = None,
        timeout_s: float | None = None,
        what: str,
    ) -> dict[int, list[object]]:
        """Runs `calls` on the healthy remote EnvRunners (or those of `ids`); handles the
        failed ones; returns the results by worker index."""
        from rlmod.utils import ray_utils

        actors = {i: a for i, a in self._actors.items() if ids is None or i in ids}
        results, errors = ray_utils.call(actors, calls, timeout_s=timeout_s)
        for i, error in sorted(errors.items()):
            self._handle_failure(i, error, what)
        return results

    def _handle_failure(self, index: int, error: BaseException, what: str) -> None:
        """A remote EnvRunner failed in `what`: restart it, drop it, or raise."""
        from rlmod.utils import ray_utils

        config = self.config
        ray_utils.kill(self._actors.pop(index))  # a hung one may still be running
        if (
            config.restart_failed_env_runners
            and self._num_restarts < config.max_num_env_runner_restarts
        ):
            logger.warning(
                "Remote EnvRunner %d failed in %s() (%r); restarting it, the "
                "episodes it was sampling are dropped.",
                index,
                what,
                error,
            )
            self._restart(index, error)
            return
        if config.ignore_env_runner_failures:
            self._num_failed += 1
            logger.warning(
                "Remote EnvRunner %d failed in %s() (%r); going on without it "
                "(ignore_env_runner_failures=True), %d left.",
                index,
                what,
                error,
                len(self._actors),
            )
            if not self._actors and self.local_env_runner is None:
                raise EnvRunnerError(
                    f"All {config.num_env_runners} remote EnvRunners have failed; the last "
                    f"one, EnvRunner {index}, in {what}(): {error!r}."
                ) from error
            return
        hint = (
            "restart_failed_env_runners=True to restart it"
            if not config.restart_failed_env_runners
            else f"max_num_env_runner_restarts (now {config.max_num_env_runner_restarts}, "
            f"all used) to allow more restarts"
        )
        raise EnvRunnerError(
            f"Remote EnvRunner {index} (worker_index={index}) failed in {what}(): {error!r}. "
            f"Set config.fault_tolerance({hint}), or ignore_env_runner_failures=True to go "
            "on with the healthy ones."
        ) from error

    def _restart(self, index: int, error: BaseException) -> None:
        """A new actor with the same worker index, the current weights and connector
        states; a restart that fails itself is an EnvRunnerError."""
        from rlmod.utils import ray_utils

        self._num_restarts += 1
        actor = ray_utils.make_actor(self.env_runner_cls, self.config, index)
        calls: list[Call] = []
        if self._weights_ref is not None:
            calls.append(("set_state", (self._weights_ref,), {}))
        if self._connector_state is not None:
            calls.append(("set_state", ({"env_to_module": self._connector_state},), {}))
        calls.append(("get_spaces", (), {}))  # waits until the actor is up
        _, errors = ray_utils.call({index: actor}, calls)
        if errors:
            ray_utils.kill(actor)
            raise EnvRunnerError(
                f"Remote EnvRunner {index} failed ({error!r}) and its restart failed too: "
                f"{errors[index]!r}."
            ) from errors[index]
        self._actors[index] = actor

    # ------------------------------------------------------------------ spaces
    def get_spaces(self) -> dict[str, tuple[gym.Space, gym.Space]]:
        """Rule 3: the local EnvRunner's spaces if it has an env, else the first healthy
        remote one's."""
        if self.local_env_runner is not None:
            return self.local_env_runner.get_spaces()
        ref, self._spaces_ref = self._spaces_ref, None
        if ref is not None and 1 in self._actors:  # asked at start-up
            from rlmod.utils import ray_utils

            results, _, error = ray_utils.get_all([ref])
            if results is not None:
                return cast("dict[str, tuple[gym.Space, gym.Space]]", results[0])
            assert error is not None
            self._handle_failure(1, error, "get_spaces")
        return cast("dict[str, tuple[gym.Space, gym.Space]]", self._first_remote("get_spaces"))

    # ------------------------------------------------------------------ sampling
    def sample(self, *, explore: bool | None = None, **kwargs: int | None) -> list[SampleResult]:
        """One `sample()` per sampling EnvRunner (the remote ones in parallel); their
        batches in a list, in worker-index order. A remote EnvRunner that fails while
        sampling contributes nothing this time (no partial episodes). With
        `config.clip_rewards` their rewards are clipped (the EnvRunners' episode metrics
        keep the env's)."""
        if not self._actors:
            if self.local_env_runner is None:
                raise EnvRunnerError("No healthy EnvRunner is left to sample with.")
            self.last_sampled_worker_indices = [0]
            local = [self.local_env_runner.sample(explore=explore, **kwargs)]
            self._clip_rewards(local)
            return local
        # The metrics come with the batch, so that episodes a runner finishes count in the
        # metrics exactly when its batch reaches a Learner (both or neither).
        results = self._call_remote(
            [("sample", (), {"explore": explore, **kwargs}), ("get_metrics", (), {})],
            timeout_s=self.config.sample_timeout_s,
            what="sample",
        )
        batches = []
        self.last_sampled_worker_indices = sorted(results)
        for _, (batch, metrics) in sorted(results.items()):
            batches.append(cast(SampleResult, batch))
            self._pending_metrics.append(cast(MetricsDict, metrics))
        self._clip_rewards(batches)
        return batches

    def _clip_rewards(self, results: list[SampleResult]) -> None:
        """Clips the rewards of `results` per `clip_rewards`, each module's from its config
        (per-module overrides applied); nothing to do, and no per-module work, when no
        config clips."""
        if not self._clips_rewards:
            return
        config = self.config

        def clip_of(module_id: ModuleID) -> RewardClip:
            return config.get_config_for_module(module_id).clip_rewards

        clip_sample_rewards(results, clip_of)

    def get_metrics(self) -> list[MetricsDict]:
        """Each sampling EnvRunner's metrics since the last call (remote ones: those of the
        batches `sample()` returned)."""
        if not self._actors:
            return [self.local_env_runner.get_metrics()] if self.local_env_runner else []
        metrics, self._pending_metrics = self._pending_metrics, []
        return metrics

    # ------------------------------------------------------------------ state
    def sync_weights(
        self, *, from_learner_group: LearnerGroup, inference_only: bool = True
    ) -> None:
        """Sends the inference-only weights of the modules EnvRunners hold (never any
        learner-only module's) to every EnvRunner, with a new version number: one copy
        into Ray's object store, its reference to each remote EnvRunner."""
        # Named explicitly: get_weights() alone returns learner-only modules too (as RLlib).
        module_ids = [
            m for m in self.config.module_ids if m not in self.config.learner_only_module_ids
        ]
        if self.local_env_runner is not None:
            module_ids = self.local_env_runner.module_ids
        # Without a local EnvRunner the weights go straight into Ray's object store
        # (`put` copies them there): no copy of them on the driver first.
        weights = from_learner_group.get_weights(
            module_ids=module_ids,
            inference_only=inference_only,
            copy=self.local_env_runner is not None,
        )
        self._weights_seq_no += 1
        state: StateDict = {"rl_module": weights, WEIGHTS_SEQ_NO: self._weights_seq_no}
        if self.local_env_runner is not None:
            self.local_env_runner.set_state(state)
        if self._actors:
            from rlmod.utils import ray_utils

            self._weights_ref = ray_utils.put(state)
            self._call_remote([("set_state", (self._weights_ref,), {})], what="set_state")

    def sync_env_runner_states(self) -> None:
        """Merges the sampling EnvRunners' connector states (mean-std filter statistics)
        and sends the merged state to every EnvRunner, so all normalize alike. Does
        nothing when the connectors keep no state."""
        if self._connectors_are_stateless:
            return
        states = self.foreach_env_runner(_env_to_module_state, local_env_runner=not self._actors)
        if not states or not any(states):
            # Pipelines are fixed when EnvRunners are built: no state now, none ever.
            self._connectors_are_stateless = bool(states)
            return
        self._connector_state = merge_env_to_module_states(states)
        update = {"env_to_module": self._connector_state}
        if self.local_env_runner is not None:
            self.local_env_runner.set_state(update)
        if self._actors:
            self._call_remote([("set_state", (update,), {})], what="set_state")

    def checkpointable_env_runner(self) -> Checkpointable | None:
        """The `env_runner` component of an Algorithm checkpoint (connector states,
        counters, spaces): the local EnvRunner, else a stand-in that reads the first
        healthy remote one and restores all of them; None with no EnvRunner at all."""
        if self.local_env_runner is not None:
            return self.local_env_runner
        return _RemoteEnvRunnerState(self) if self._actors else None

    def _first_remote(self, func: str, **kwargs: object) -> object:
        while self._actors:
            index = min(self._actors)
            results = self._call_remote(
                [(func, (), kwargs)], ids=[index], what=func if isinstance(func, str) else "foreach"
            )
            if index in results:
                return results[index][0]
        raise EnvRunnerError("No healthy remote EnvRunner is left to answer.")

    def set_env_runner_state(self, state: StateDict) -> None:
        """Restores `state` (an EnvRunner's `get_state()`, e.g. from a checkpoint) on every
        EnvRunner; restarted ones get its connector state too."""
        for key in ("num_env_steps_sampled_lifetime", "num_agent_steps_sampled_lifetime"):
            value = state.get(key, 0)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(
                    f"EnvRunner state field {key!r} must be an int >= 0, got {value!r}."
                )
        if "env_to_module" in state:
            self._connector_state = state["env_to_module"]
        if self.local_env_runner is not None:
            self.local_env_runner.set_state(state)
        if self._actors:
            self._call_remote([("set_state", (state,), {})], what="set_state")

    def stop(self) -> None:
        """Closes the local EnvRunner's envs and ends the remote EnvRunners' actors."""
        if self.local_env_runner is not None:
            self.local_env_runner.stop()
        if self._actors:
            from rlmod.utils import ray_utils

            if self.config.output is not None:  # their writers flush queued episodes
                self._call_remote([("stop", (), {})], what="stop")
            for actor in self._actors.values():
                ray_utils.kill(actor)
            self._actors = {}


def _env_to_module_state(runner: EnvRunner) -> StateValue:
    return runner.get_state(not_components="rl_module")["env_to_module"]


class _RemoteEnvRunnerState(Checkpointable):
    """Stands in for the local EnvRunner in checkpoints when the driver has none: saves
    the first healthy remote EnvRunner's state (all hold the same merged connector state)
    under that EnvRunner's class, and restores a state on every EnvRunner."""

    def __init__(self, group: EnvRunnerGroup) -> None:
        self._group = group

    def get_state(
        self, components: Components = None, *, not_components: Components = None, **kwargs: object
    ) -> StateDict:
        return cast(
            StateDict,
            self._group._first_remote(
                "get_state", components=components, not_components=not_components
            ),
        )

    def set_state(self, state: StateDict) -> None:
        self._group.set_env_runner_state(dict(state))

    def get_metadata(self) -> dict[str, object]:
        # The EnvRunner's class and spaces, as the local EnvRunner's checkpoint has them.
        return {
            "class": _class_path(self._group.env_runner_cls),
            **cast("dict[str, object]", self._group._first_remote("get_metadata")),
        }


PLAIN_RUNNER_MAX_AGENT_SLOTS = 10
"""Up to this many agents x sub-envs (`len(possible_agents) * num_envs_per_env_runner`) the
plain ReferenceMultiAgentEnvRunner is the default multi-agent EnvRunner: there it samples
as fast as the vectorized MultiAgentEnvRunner or faster. Reference / vectorized env steps/s
on MultiAgentCartPole, one module per agent / one shared module: 1.27 / 1.28 at 2 agents x
envs, 1.04 / 1.06 at 8, 1.08 / 0.99 at 10, 1.18 / 0.88 (2 x 8) and 1.08 / 0.83 (4 x 4) at
16, 0.93 / 0.56 at 32, 0.17 / 0.21 at 800 (2-core Intel Xeon, 2026-12-07, commit a3adf46,
`benchmarks/investigations/multi_agent_runners.py --agents 2 4 10 100 --num-envs 1 4 8
--rounds 7`)."""


def default_multi_agent_runner_cls(config: AlgorithmConfig) -> type[EnvRunner]:
    """The multi-agent EnvRunner class when `config.env_runner_cls` is None: the plain
    ReferenceMultiAgentEnvRunner for at most PLAIN_RUNNER_MAX_AGENT_SLOTS agents x
    sub-envs, or at any size with the plain paths on (rlmod.fast_paths), unless a setting
    needs the vectorized one (recording, restarting failed envs, episode callbacks); else
    MultiAgentEnvRunner. Counts the agents on one env made here
    (closed again); an env that fails to make gets MultiAgentEnvRunner, which names why."""
    from rlmod.env.multi_agent_env import multi_agent_env_from
    from rlmod.env.multi_agent_env_runner import MultiAgentEnvRunner
    from rlmod.env.multi_agent_reference_runner import ReferenceMultiAgentEnvRunner
    from rlmod.env.multi_agent_runner_base import unsupported_features

    if unsupported_features(config):
        return MultiAgentEnvRunner
    if plain_paths() or getattr(config, "plain_paths", False):
        return ReferenceMultiAgentEnvRunner  # the vectorized runner is a fast path
    try:
        env = multi_agent_env_from(config.env, config.env_config)
    except Exception:  # noqa: BLE001 - the runner makes it again and raises with context
        return MultiAgentEnvRunner
    num_agents = len(env.possible_agents)
    env.close()
    if num_agents * config.num_envs_per_env_runner <= PLAIN_RUNNER_MAX_AGENT_SLOTS:
        return ReferenceMultiAgentEnvRunner
    return MultiAgentEnvRunner

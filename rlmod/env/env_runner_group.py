"""EnvRunnerGroup: the local EnvRunner and any remote ones, driven as one.

Built by Algorithm; `get_spaces()` tells env-less components (Learners) what each module
sees; `sync_weights()` sends Learners' inference-only weights to every EnvRunner.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from rlmod.env.env_runner import EnvRunner, SampleResult


class EnvRunnerGroup:
    """Creates `num_env_runners` remote EnvRunners (Ray) or one local EnvRunner.

    With `num_env_runners=0` the local EnvRunner samples; otherwise the remote ones do
    and the local one only answers `get_spaces()` (RLlib's layout).
    """

    def __init__(self, *, config: Any, local_env_runner: bool = True) -> None:
        self.config = config
        self.env_runner_cls = config.env_runner_cls or self._default_runner_cls(config)
        self.local_env_runner: EnvRunner | None = (
            self.env_runner_cls(config=config, worker_index=0) if local_env_runner else None
        )
        self._remote: list[Any] = []
        if config.num_env_runners > 0:
            from rlmod.utils.ray_utils import make_remote_env_runners

            self._remote = make_remote_env_runners(self.env_runner_cls, config)

    @staticmethod
    def _default_runner_cls(config: Any) -> type[EnvRunner]:
        if config.is_multi_agent:
            from rlmod.env.multi_agent_env_runner import MultiAgentEnvRunner

            return MultiAgentEnvRunner
        from rlmod.env.single_agent_env_runner import SingleAgentEnvRunner

        return SingleAgentEnvRunner

    @property
    def num_remote_env_runners(self) -> int:
        return len(self._remote)

    def get_spaces(self) -> dict[str, tuple[gym.Space, gym.Space]]:
        """Rule 3: the local EnvRunner's spaces if it has an env, else the first remote's."""
        if self.local_env_runner is not None:
            return self.local_env_runner.get_spaces()
        from rlmod.utils.ray_utils import first_healthy

        return first_healthy(self._remote, "get_spaces")

    def sample(self, *, explore: bool | None = None, **kwargs: Any) -> list[SampleResult]:
        """One sample() per sampling EnvRunner; their results in a list."""
        if not self._remote:
            assert self.local_env_runner is not None
            return [self.local_env_runner.sample(explore=explore, **kwargs)]
        from rlmod.utils.ray_utils import call_all

        return call_all(self._remote, "sample", explore=explore, **kwargs)

    def get_metrics(self) -> list[dict[str, Any]]:
        if not self._remote:
            assert self.local_env_runner is not None
            return [self.local_env_runner.get_metrics()]
        from rlmod.utils.ray_utils import call_all

        return call_all(self._remote, "get_metrics")

    def sync_weights(self, *, from_learner_group: Any) -> None:
        """Sends the inference-only weights of the modules EnvRunners hold (never any
        learner-only module's) to every EnvRunner."""
        runner = self.local_env_runner
        # Named explicitly: get_weights() alone returns learner-only modules too (as RLlib).
        module_ids = runner.module_ids if runner is not None else [
            m for m in self.config.module_ids if m not in self.config.learner_only_module_ids]
        weights = from_learner_group.get_weights(module_ids=module_ids, inference_only=True)
        state = {"rl_module": weights}
        if runner is not None:
            runner.set_state(state)
        if self._remote:
            from rlmod.utils.ray_utils import call_all

            call_all(self._remote, "set_state", state)

    def stop(self) -> None:
        if self.local_env_runner is not None:
            self.local_env_runner.stop()
        if self._remote:
            from rlmod.utils.ray_utils import call_all, kill_all

            if self.config.output is not None:  # their writers flush queued episodes
                call_all(self._remote, "stop")
            kill_all(self._remote)

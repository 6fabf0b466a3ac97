"""MARWILConfig and MARWIL: advantage-weighted imitation of recorded episodes (offline).

`MARWILConfig().offline_data(input_=DIR).build_algo()` returns a MARWIL that trains on a
Learner from an OfflineReader and never builds an env (EnvRunners only for evaluation).
BC is MARWIL with beta=0 (rlmod.algorithms.bc), as in RLlib.
"""

from __future__ import annotations

from typing import Any, ClassVar

import gymnasium as gym

from rlmod.algorithms import settings as s
from rlmod.algorithms.algorithm import Algorithm
from rlmod.algorithms.algorithm_config import AlgorithmConfig
from rlmod.algorithms.settings import Setting
from rlmod.core.columns import ALL_MODULES, DEFAULT_MODULE_ID, Columns
from rlmod.core.learner_group import LearnerGroup
from rlmod.core.rl_module import RLModuleSpec
from rlmod.errors import OfflineDataError
from rlmod.offline.minari_source import is_minari_input, load_minari
from rlmod.offline.reader import OfflineReader, check_files, read_spaces, resolve_files
from rlmod.offline.transforms import module_view
from rlmod.offline.writer import ENV_KEY, SPACES_FILE
from rlmod.utils.spaces import space_to_dict


class MARWILConfig(AlgorithmConfig):
    """MARWIL's settings (Wang et al. 2018); defaults are RLlib's.

    Example:
        >>> from rlmod.algorithms.marwil import MARWILConfig
        >>> MARWILConfig().training(beta=0.5).beta
        0.5
    """

    beta = Setting(1.0, section="training", check=s.number(low=0.0), doc=(
        "Advantage weighting exp(beta * A / c): 0 is plain behaviour cloning."))
    vf_coeff = Setting(1.0, section="training", check=s.number(low=0.0),
                       doc="Weight of the value loss (unused with beta=0).")
    moving_average_sqd_adv_norm_update_rate = Setting(
        1e-8, section="training", check=s.number(low=0.0, high=1.0, low_open=True),
        doc="Update rate of the moving average c^2 of squared advantages (paper: 1e-8).")
    moving_average_sqd_adv_norm_start = Setting(
        100.0, section="training", check=s.number(low=0.0, low_open=True),
        doc="Start value of c^2.")

    reads_offline_data = True

    setting_defaults: ClassVar[dict[str, Any]] = {
        "lr": 1e-4, "train_batch_size": 2000, "minibatch_size": None}

    def get_default_rl_module_spec(self) -> RLModuleSpec:
        from rlmod.algorithms.ppo.default_ppo_rl_module import DefaultPPORLModule

        return RLModuleSpec(module_class=DefaultPPORLModule)

    def get_default_learner_class(self) -> type:
        from rlmod.algorithms.marwil.marwil_learner import MARWILLearner

        return MARWILLearner

    def validate(self) -> None:
        super().validate()
        if self.input_ == "sampler":
            raise ValueError(
                f"{type(self).__name__} trains offline: set "
                "config.offline_data(input_=...) to recorded episodes (a directory, file, "
                "glob or list of Parquet files written by rlmod).")
        if self.is_multi_agent:
            raise ValueError(f"{type(self).__name__} trains one module; multi-agent offline "
                             "training is not built yet.")


class MARWIL(Algorithm):
    """Monotonic advantage re-weighted imitation learning on recorded episodes.

    `setup()` never builds an env: the module's spaces come from
    `.environment(observation_space=..., action_space=...)` or from the `spaces.json`
    stored beside the data, through the same env-to-module connectors an EnvRunner runs.
    Evaluation (`.evaluation(...)` with `.environment(env)` set) runs on an EnvRunner.
    """

    config: MARWILConfig

    def setup(self) -> None:
        config = self.config
        self._setup_bookkeeping()
        sources: list[Any]
        if is_minari_input(config.input_):
            sources, minari_spaces = load_minari(config.input_)
            env_spaces = self._env_spaces(minari_spaces, where=config.input_)
        else:
            sources = resolve_files(config.input_)
            check_files(sources)
            stored = read_spaces(sources)
            env_spaces = self._env_spaces(None if stored is None else stored.get(ENV_KEY),
                                          where=str(sources[0].parent / SPACES_FILE))
        self._env_spaces_used = env_spaces
        pipeline = config.build_env_to_module_connector(None, *env_spaces)
        assert pipeline.observation_space is not None
        module_spec = config.get_multi_rl_module_spec(inference_only=False, spaces={
            ENV_KEY: env_spaces,
            DEFAULT_MODULE_ID: (pipeline.observation_space, env_spaces[1])})
        self.learner_group = LearnerGroup(config=config, module_spec=module_spec)
        self.reader = OfflineReader(
            sources, batch_size=config.train_batch_size_per_learner,
            gamma=config.gamma if config.beta > 0.0 else None,  # BC needs no returns
            shuffle_buffer_size=config.shuffle_buffer_size, seed=config.seed,
            obs_shape=tuple(getattr(env_spaces[0], "shape", None) or ()),
            transform=module_view(pipeline, env_spaces[1]))
        self.env_runner_group = None
        self._num_rows_trained = 0

    def _env_spaces(self, recorded: tuple[gym.Space, gym.Space] | None, *,
                    where: str) -> tuple[gym.Space, gym.Space]:
        """The raw env's spaces: the config's, else the data's (`recorded`, stored in
        `where`); both must agree."""
        given = (self.config.observation_space, self.config.action_space)
        if given[0] is not None and given[1] is not None:
            if recorded is not None and not all(
                    x == y for x, y in zip(recorded, given, strict=True)):
                raise OfflineDataError(
                    f"config.environment(observation_space={given[0]}, action_space="
                    f"{given[1]}) differs from the recorded data's spaces (observation_space="
                    f"{recorded[0]}, action_space={recorded[1]}) in {where}; fix the config "
                    "or read data recorded from this env.")
            return given[0], given[1]
        if recorded is None:
            raise OfflineDataError(
                f"{type(self).__name__} has no spaces to build its module from: the config "
                "sets no config.environment(observation_space=..., action_space=...) and "
                f"the data has no {where} (rlmod's writers store one). Set the spaces in "
                "the config, or record the data with config.offline_data(output=...), "
                "`rlmod record` or rlmod.offline.record_episodes.")
        return recorded

    def get_metadata(self) -> dict[str, Any]:
        """Counters plus the env's spaces (what an EnvRunner's metadata holds online), so
        `InferencePolicy.from_checkpoint` can act from a BC or MARWIL checkpoint."""
        obs, act = self._env_spaces_used
        return {**super().get_metadata(), "num_env_steps_trained_lifetime":
                self._num_rows_trained,
                "spaces": {ENV_KEY: [space_to_dict(obs), space_to_dict(act)]}}

    def training_step(self) -> dict[str, Any]:
        """Read a batch, update the Learner; there are no EnvRunners to sync."""
        with self._timer("read_time_s"):
            batch = self.reader.next_batch()
        with self._timer("learn_time_s"):
            results = self.learner_group.update(
                [{DEFAULT_MODULE_ID: batch}],
                timesteps={"num_env_steps_sampled_lifetime": self._num_rows_trained})
        self._num_rows_trained += len(batch[Columns.REWARDS])
        results.setdefault(ALL_MODULES, {})["num_env_steps_trained_lifetime"] = (
            self._num_rows_trained)
        return results


MARWILConfig.algo_class = MARWIL

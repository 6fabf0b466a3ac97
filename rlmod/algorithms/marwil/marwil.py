"""MARWILConfig and MARWIL: advantage-weighted imitation of recorded episodes (offline).

`MARWILConfig().offline_data(input_=DIR).build_algo()` returns a MARWIL that trains its
Learners on recorded episodes (rlmod.offline.OfflineData: in-process readers, or Ray Data
shards read by the Learners) and never builds an env (EnvRunners only for evaluation).
BC is MARWIL with beta=0 (rlmod.algorithms.bc), as in RLlib.
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar

from rlmod.algorithms import settings as s
from rlmod.algorithms.algorithm import Algorithm
from rlmod.algorithms.algorithm_config import AlgorithmConfig
from rlmod.algorithms.marwil.marwil_learner import stateful_module_ids
from rlmod.algorithms.settings import Setting
from rlmod.connectors.pipeline import ConnectorPipeline
from rlmod.core.columns import ALL_MODULES
from rlmod.core.learner_group import LearnerGroup, _reduce_results
from rlmod.core.rl_module import RLModuleSpec
from rlmod.offline.offline_data import OfflineData
from rlmod.offline.reader import OfflineReader
from rlmod.offline.writer import ENV_KEY
from rlmod.utils.spaces import space_to_dict

logger = logging.getLogger(__name__)


class MARWILConfig(AlgorithmConfig):
    """MARWIL's settings (Wang et al. 2018); defaults are RLlib's.

    Example:
        >>> from rlmod.algorithms.marwil import MARWILConfig
        >>> MARWILConfig().training(beta=0.5).beta
        0.5
    """

    beta = Setting(
        1.0,
        section="training",
        check=s.number(low=0.0),
        doc=("Advantage weighting exp(beta * A / c): 0 is plain behaviour cloning."),
    )
    vf_coeff = Setting(
        1.0,
        section="training",
        check=s.number(low=0.0),
        doc="Weight of the value loss (unused with beta=0).",
    )
    moving_average_sqd_adv_norm_update_rate = Setting(
        1e-8,
        section="training",
        check=s.number(low=0.0, high=1.0, low_open=True),
        doc="Update rate of the moving average c^2 of squared advantages (paper: 1e-8).",
    )
    moving_average_sqd_adv_norm_start = Setting(
        100.0, section="training", check=s.number(low=0.0, low_open=True), doc="Start value of c^2."
    )

    reads_offline_data = True

    setting_defaults: ClassVar[dict[str, Any]] = {
        "lr": 1e-4,
        "train_batch_size": 2000,
        "minibatch_size": None,
        "dataset_num_iters_per_learner": 1,
    }

    def get_default_rl_module_spec(self) -> RLModuleSpec:
        from rlmod.algorithms.ppo.default_ppo_rl_module import DefaultPPORLModule

        return RLModuleSpec(module_class=DefaultPPORLModule)

    def get_default_learner_class(self) -> type:
        from rlmod.algorithms.marwil.marwil_learner import MARWILLearner

        return MARWILLearner

    def build_learner_connector(
        self, observation_space: Any = None, action_space: Any = None
    ) -> ConnectorPipeline:
        """The user's learner connectors, then `AddStatesFromOfflineEpisodes` (recurrent
        modules' episodes as chunks with their start states) and
        `BootstrapTruncatedReturns` (as RLlib appends its GAE connector last): truncated
        episodes' value targets bootstrapped with the value function at the start of each
        update."""
        from rlmod.algorithms.marwil.marwil_learner import BootstrapTruncatedReturns
        from rlmod.algorithms.marwil.offline_sequences import AddStatesFromOfflineEpisodes

        pipeline = super().build_learner_connector(observation_space, action_space)
        pipeline.connectors.append(AddStatesFromOfflineEpisodes())
        pipeline.connectors.append(BootstrapTruncatedReturns())
        return pipeline

    def validate(self) -> None:
        super().validate()
        if self.input_ == "sampler":
            raise ValueError(
                f"{type(self).__name__} trains offline: set "
                "config.offline_data(input_=...) to recorded episodes (a directory, file, "
                "glob or list of Parquet files written by rlmod)."
            )
        if self.dataset_num_iters_per_learner is None:
            raise ValueError(
                "offline_data(dataset_num_iters_per_learner=None): RLlib's 'a whole pass over "
                "each Learner's data per train()' is not offered by rlmod; give the number "
                "of updates per train() (e.g. 1, the default)."
            )
        if self.input_read_method is None and (self.map_batches_kwargs or self.iter_batches_kwargs):
            logger.warning(
                "offline_data(map_batches_kwargs=..., iter_batches_kwargs=...) tune Ray Data "
                "reading; rlmod reads in-process unless input_read_method='read_parquet', so "
                "they are not used."
            )


class MARWIL(Algorithm):
    """Monotonic advantage re-weighted imitation learning on recorded episodes.

    `setup()` never builds an env: the modules' spaces come from
    `.environment(observation_space=..., action_space=...)` or from the `spaces.json`
    stored beside the data, through the same env-to-module connectors an EnvRunner runs
    (rlmod.offline.OfflineData). Multi-agent recordings train one module per policy, each
    on the rows stored under its module ID. A recurrent module (`use_lstm`) reads whole
    episodes (shuffled as episodes, not rows) and trains on chunks of at most
    `max_seq_len` steps, each started from the state the module reaches over its
    episode's earlier steps (rlmod.algorithms.marwil.offline_sequences). Evaluation
    (`.evaluation(...)` with `.environment(env)` set) runs on an EnvRunner.
    """

    config: MARWILConfig

    def setup(self) -> None:
        config = self.config
        self._setup_bookkeeping()
        self.offline_data = OfflineData(config)
        module_spec = config.get_multi_rl_module_spec(
            inference_only=False, spaces=self.offline_data.spaces
        )
        self.learner_group = LearnerGroup(config=config, module_spec=module_spec)
        stateful = sorted(
            {m for ids in self.learner_group.foreach_learner(stateful_module_ids) for m in ids}
        )
        if stateful and config.num_learners > 1 and not self.offline_data.on_learners:
            self.learner_group.stop()  # its actors would outlive the failed build
            raise ValueError(
                f"{type(self).__name__} with recurrent module(s) {stateful} (model_config "
                f"use_lstm=True) and num_learners={config.num_learners}: a batch of whole "
                "episodes read in this process would be cut between the Learners "
                "mid-episode. Use num_learners=0 or 1 for recurrent modules offline."
            )
        self.offline_data.build_readers(whole_episodes=stateful)
        self.env_runner_group = None
        self._num_rows_trained = 0

    @property
    def reader(self) -> OfflineReader:
        """The OfflineReader of the one module (single-agent data)."""
        readers = self.offline_data.readers
        if len(readers) != 1:
            raise AttributeError(
                f"{type(self).__name__} trains {len(readers)} modules; "
                "use offline_data.readers[module_id]."
            )
        return next(iter(readers.values()))

    def stop(self) -> None:
        """Closes the Learners' Ray Data streams (if reading with Ray Data), then as
        Algorithm.stop."""
        self.offline_data.stop(self.learner_group)
        super().stop()

    def get_metadata(self) -> dict[str, Any]:
        """Counters plus the env's spaces (what an EnvRunner's metadata holds online), so
        `InferencePolicy.from_checkpoint` can act from a BC or MARWIL checkpoint."""
        meta = {**super().get_metadata(), "num_env_steps_trained_lifetime": self._num_rows_trained}
        if self.offline_data.env_spaces is not None:
            obs, act = self.offline_data.env_spaces
            meta["spaces"] = {ENV_KEY: [space_to_dict(obs), space_to_dict(act)]}
        return meta

    def training_step(self) -> dict[str, Any]:
        """Read a batch per module, update the Learner(s); there are no EnvRunners to sync.
        With Ray Data (`input_read_method="read_parquet"`) each Learner reads its own."""
        all_results = []
        for _ in range(self.config.dataset_num_iters_per_learner or 1):
            timesteps = {"num_env_steps_sampled_lifetime": self._num_rows_trained}
            if self.offline_data.on_learners:
                with self._timer("learn_time_s"):
                    results, rows = self.offline_data.update_on_learners(
                        self.learner_group, timesteps=timesteps
                    )
            else:
                with self._timer("read_time_s"):
                    batches = self.offline_data.sample()
                with self._timer("learn_time_s"):
                    results = self.learner_group.update([batches], timesteps=timesteps)
                rows = OfflineData.num_rows(batches)
            self._num_rows_trained += rows
            all_results.append(results)
        # dataset_num_iters_per_learner updates: their means, counts summed (as over Learners).
        results = all_results[0] if len(all_results) == 1 else _reduce_results(all_results)
        results.setdefault(ALL_MODULES, {})["num_env_steps_trained_lifetime"] = (
            self._num_rows_trained
        )
        return results


MARWILConfig.algo_class = MARWIL

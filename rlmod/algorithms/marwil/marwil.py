"""MARWILConfig and MARWIL: advantage-weighted imitation of recorded episodes (offline).

`MARWILConfig().offline_data(input_=DIR).build_algo()` returns a MARWIL that trains on a
Learner from an OfflineReader and never builds an env (EnvRunners only for evaluation).
BC is MARWIL with beta=0 (rlmod.algorithms.bc), as in RLlib.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import gymnasium as gym
import torch

from rlmod.algorithms import settings as s
from rlmod.algorithms.algorithm import Algorithm
from rlmod.algorithms.algorithm_config import _UNSET, AlgorithmConfig
from rlmod.algorithms.settings import Setting
from rlmod.core.columns import DEFAULT_MODULE_ID
from rlmod.core.learner_group import LearnerGroup
from rlmod.core.rl_module import RLModuleSpec
from rlmod.errors import OfflineDataError
from rlmod.offline.reader import OfflineReader, read_spaces, resolve_files
from rlmod.utils.metrics import EpisodeMetrics
from rlmod.utils.seeding import seed_everything

if TYPE_CHECKING:
    from typing import Self


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

    def __init__(self) -> None:
        super().__init__()
        self.lr = 1e-4
        self.train_batch_size = 2000
        self.minibatch_size = None

    def training(self, *, beta: float = _UNSET, vf_coeff: float = _UNSET,  # type: ignore[override]
                 moving_average_sqd_adv_norm_update_rate: float = _UNSET,
                 moving_average_sqd_adv_norm_start: float = _UNSET, **common: Any) -> Self:
        """MARWIL's settings, plus all of `AlgorithmConfig.training`."""
        values = dict(locals())
        values.pop("common")
        self._set_section("training", values)
        return super().training(**common)

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
    """Monotonic advantage re-weighted imitation learning on recorded episodes."""

    config: MARWILConfig

    def setup(self) -> None:
        """Spaces from the config or the data; one Learner; no env (rule 3: components
        without an env get their spaces from elsewhere)."""
        config = self.config
        seed_everything(config.seed)
        torch.set_num_threads(config.num_threads_per_learner)
        files = resolve_files(config.input_)
        if config.observation_space is not None and config.action_space is not None:
            self._check_spaces(files)
            module_spec = config.get_multi_rl_module_spec(inference_only=False)
        else:
            spaces = read_spaces(files)
            if DEFAULT_MODULE_ID not in spaces:
                raise OfflineDataError(f"The data's spaces.json has no {DEFAULT_MODULE_ID!r}.")
            module_spec = config.get_multi_rl_module_spec(spaces=spaces, inference_only=False)
        self.learner_group = LearnerGroup(config=config, module_spec=module_spec)
        obs_space = module_spec.rl_module_specs[DEFAULT_MODULE_ID].observation_space
        shape = tuple(getattr(obs_space, "shape", None) or ())
        self.reader = OfflineReader(
            files, batch_size=config.train_batch_size_per_learner, gamma=config.gamma,
            shuffle_buffer_size=config.shuffle_buffer_size, seed=config.seed,
            shapes={"obs": shape, "new_obs": shape})
        self.env_runner_group = None
        self.eval_env_runner_group = None
        self.metrics = EpisodeMetrics(config.metrics_num_episodes_for_smoothing)
        self._timers: dict[str, float] = {}
        self._num_rows_trained = 0

    def _check_spaces(self, files: list) -> None:
        """The config's spaces must be the data's (when the data stores any)."""
        try:
            stored = read_spaces(files).get("__env__")
        except OfflineDataError:
            return  # no spaces.json (e.g. converted data): the config's spaces rule
        given = (self.config.observation_space, self.config.action_space)
        if stored is not None and not _same_spaces(stored, given):
            raise OfflineDataError(
                f"config.environment(observation_space={given[0]}, action_space={given[1]}) "
                f"differs from the recorded data's spaces {stored} (spaces.json beside "
                f"{files[0]}); fix the config or read other data.")

    def training_step(self) -> dict[str, Any]:
        batch = self._timed("read_time_s", self.reader.next_batch)
        results = self._timed("learn_time_s", self.learner_group.update,
                              [{DEFAULT_MODULE_ID: batch}],
                              timesteps={"num_env_steps_sampled_lifetime":
                                         self._num_rows_trained})
        self._num_rows_trained += len(batch["rewards"])
        results.setdefault("__all_modules__", {})["num_env_steps_trained_lifetime"] = (
            self._num_rows_trained)
        return results


def _same_spaces(a: tuple[gym.Space, gym.Space], b: tuple[Any, Any]) -> bool:
    return all(x == y for x, y in zip(a, b, strict=True))


MARWILConfig.algo_class = MARWIL

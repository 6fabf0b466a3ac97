"""The config `rlmod train` runs: the algorithm's defaults, rlmod's fast and tuned settings,
then --config, --env and --seed.

Used by `rlmod.cli.train`; `build_config` is also the CLI's Python entry point for tests and
scripts that want the same config.
"""

from __future__ import annotations

import json
import logging
import secrets
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rlmod.cli.errors import CLIError
from rlmod.tuned import FAST_PPO, TUNED, TUNED_DQN, TUNED_SAC
from rlmod.utils.naming import did_you_mean, from_import_path

ALGORITHMS: dict[str, str] = {
    "PPO": "rlmod.algorithms.ppo:PPOConfig",
    "DQN": "rlmod.algorithms.dqn:DQNConfig",
    "SAC": "rlmod.algorithms.sac:SACConfig",
}
"""Algorithm name -> import path of its config class (imported only when used)."""

TUNED_BY_ALGORITHM: dict[str, dict[str, dict[str, Any]]] = {
    "PPO": TUNED,
    "DQN": TUNED_DQN,
    "SAC": TUNED_SAC,
}
"""Algorithm name -> {env ID -> tuned settings}; the settings of one algorithm do not
carry over to another."""

FAST_BY_ALGORITHM: dict[str, dict[str, Any]] = {"PPO": FAST_PPO}
"""Algorithm name -> settings applied under every env's tuned ones: PPOConfig's defaults
are RLlib's (slow on small tasks); `rlmod train` starts from rlmod's fast ones instead."""


def config_class(name: str) -> tuple[str, type]:
    """The registered algorithm name (case-insensitive match) and its config class."""
    by_lower = {n.lower(): n for n in ALGORITHMS}
    canonical = by_lower.get(name.lower())
    if canonical is None:
        raise CLIError(
            f"unknown algorithm {name!r}.{did_you_mean(name, ALGORITHMS)} "
            f"Valid: {', '.join(ALGORITHMS)}."
        )
    return canonical, from_import_path(ALGORITHMS[canonical], setting="--algo")


def load_settings(text: str | None) -> dict[str, Any]:
    """--config as a dict: a JSON object given inline, or the path of a JSON file."""
    if text is None:
        return {}
    source = "--config"
    if not text.lstrip().startswith("{"):
        path = Path(text)
        if not path.is_file():
            raise CLIError(
                f"--config {text!r} is neither a JSON object (it does not start "
                "with '{') nor an existing file."
            )
        source, text = f"--config {str(path)!r}", path.read_text()
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise CLIError(f"{source} is not valid JSON: {e}.") from None
    if not isinstance(data, dict):
        raise CLIError(f"{source} must be a JSON object of settings, got {type(data).__name__}.")
    return data


def apply(
    config: Any, settings: Mapping[str, Any], *, source: str, trusted_modules: Sequence[str] = ()
) -> None:
    """Sets each of `settings` on `config`, decoded as `AlgorithmConfig.from_dict` does
    (import paths only inside rlmod and `trusted_modules`)."""
    for name, value in settings.items():
        try:
            if name.startswith("_"):  # AlgorithmConfig lets private names through
                raise AttributeError(f"{type(config).__name__} has no setting {name!r}.")
            if name in config.settings():  # decode {"__import__": ...} and friends
                value = getattr(
                    type(config).from_dict({name: value}, trusted_modules=trusted_modules), name
                )
            setattr(config, name, value)  # unknown names: the config's own error
        except (AttributeError, ValueError, TypeError) as e:
            raise CLIError(f"{source}: {e}") from None


ATARI_WRAPPER_DEFAULTS: dict[str, Any] = {"dim": 84, "framestack": 4}
"""`rlmod train --env ALE/...`'s wrapper settings: DeepMind's Nature-DQN preprocessing
(84x84 grayscale, 4 frames), as CleanRL's ppo_atari.py and rl-baselines3-zoo use."""


def atari_env_setting(env_id: str, env_config: Mapping[str, Any]) -> dict[str, Any]:
    """The `env` and `env_config` settings that make `env_id` through
    `rlmod.env.wrappers.atari_wrappers.make_atari_env`: the ID and the wrapper defaults
    under the user's env_config (whose keys win)."""
    return {
        "env": {"__import__": "rlmod.env.wrappers.atari_wrappers:make_atari_env"},
        "env_config": {**ATARI_WRAPPER_DEFAULTS, **env_config, "id": env_id},
    }


def build_config(
    *,
    algo: str,
    env: str | None = None,
    settings: Mapping[str, Any] | None = None,
    seed: int | None = None,
    tuned: bool = True,
    trusted_modules: Sequence[str] = (),
    overrides: Mapping[str, Any] | None = None,
    atari_wrapper: bool = True,
) -> tuple[Any, dict[str, Any]]:
    """The config `rlmod train` runs, and the tuned settings it applied.

    Order: the algorithm's defaults, rlmod's fast settings for the algorithm
    (`rlmod.tuned.FAST_PPO`), the env's tuned settings, `settings`, then `env`, the CLI's
    own `overrides` (evaluation, smoothing window) and `seed` when given; with no seed
    anywhere a random one is chosen (and so recorded in params.json). `env` is the text of
    --env (`rlmod.cli.envs`: an ID, gymnasium's `module:Env-v0`, or a trusted
    `module:Class`). An ALE ID (`ALE/Pong-v5`) is made through `make_atari_env` unless
    `atari_wrapper=False` (--no-atari-wrapper): 84x84 grayscale, 4 frames stacked
    (`atari_env_setting`). Raises CLIError with a one-line message on any bad setting.
    """
    from rlmod.cli.envs import env_setting

    algo_name, config_cls = config_class(algo)
    settings = dict(settings or {})
    env_id = env if env is not None else settings.get("env")
    if env_id is None:
        raise CLIError('no env: pass --env (e.g. --env CartPole-v1) or set "env" in --config.')
    config = config_cls()
    applied: dict[str, Any] = {}
    if tuned:
        applied = dict(FAST_BY_ALGORITHM.get(algo_name, {}))
        apply(config, applied, source=f"rlmod.tuned.FAST_{algo_name}")
    if tuned and isinstance(env_id, str):
        for_env = dict(TUNED_BY_ALGORITHM.get(algo_name, {}).get(env_id, {}))
        apply(config, for_env, source=f"rlmod.tuned.TUNED[{env_id!r}]")
        applied.update(for_env)
    apply(config, settings, source="--config", trusted_modules=trusted_modules)
    if env is not None:
        value, env_trusted = env_setting(env, trusted_modules=trusted_modules)
        apply(config, {"env": value}, source="--env", trusted_modules=env_trusted)
    if atari_wrapper and isinstance(env_id, str) and env_id.startswith("ALE/"):
        apply(config, atari_env_setting(env_id, config.env_config), source="--env")
    apply(config, dict(overrides or {}), source="the command line")
    if seed is not None:
        apply(config, {"seed": seed}, source="--seed")
    if config.seed is None:  # always seeded, so params.json can repeat the run
        config.seed = secrets.randbelow(2**31)
        logging.getLogger(__name__).info("No seed given: chose seed %d.", config.seed)
    try:
        config.validate()
    except (ValueError, TypeError, KeyError) as e:
        raise CLIError(str(e)) from None
    return config, applied

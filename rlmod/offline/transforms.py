"""Recorded (raw) episodes to what a module sees: the env-to-module connectors, offline.

Used by MARWIL and BC to build the OfflineReader's transform from the same
`config.build_env_to_module_connector` an EnvRunner uses, so a module trained offline runs
unchanged on an EnvRunner (e.g. one-hot observations for a Discrete space).
"""

from __future__ import annotations

from collections.abc import Callable

import gymnasium as gym
import numpy as np

from rlmod.connectors.module_to_env import _plan, actions_from_env
from rlmod.connectors.pipeline import ConnectorPipeline
from rlmod.core.columns import Columns
from rlmod.offline import struct_obs
from rlmod.offline.reader import Transform
from rlmod.offline.returns import BOOTSTRAP_FINALS, BOOTSTRAP_INDEX, Columns_


def module_view(pipeline: ConnectorPipeline, action_space: gym.Space) -> Transform:
    """A transform of whole-episode columns: raw observations through `pipeline`, env
    actions back to the module's scale (`actions_from_env`).

    Connectors whose output depends on earlier steps (e.g. FrameStacking) are run step by
    step over all episodes of a chunk at once, with `episode_starts` set at each first
    step, as an EnvRunner with one sub-env per episode would; row-wise ones run on all
    rows in one call. Connectors that keep statistics (MeanStdFilter) are refused: offline
    there is no EnvRunner whose statistics the data and the module would share.
    """
    stateful = [type(c).__name__ for c in pipeline.connectors if c.get_state()]
    if stateful:
        raise ValueError(
            f"env_to_module_connector pieces with running statistics ({stateful}) are not "
            "supported for offline training: the recorded data would be normalized by "
            "statistics no EnvRunner shares. Leave them out of the offline config."
        )
    row_wise = all(getattr(c, "row_wise", False) for c in pipeline.connectors)
    plan = _plan(action_space)
    space = getattr(pipeline, "input_observation_space", None)
    if struct_obs.is_nested(space) and not len(pipeline):
        raise ValueError(
            f"Dict/Tuple observations ({space}) reach a module only through env-to-module "
            "connectors that turn them into arrays (the default ones do); this pipeline has "
            "none."
        )

    def run(obs: np.ndarray, starts: np.ndarray) -> np.ndarray:
        """`pipeline` on raw observations; Dict/Tuple ones (structured arrays, as read)
        as the dict/tuple of arrays a vector env gives."""
        if obs.dtype.names:
            obs = struct_obs.to_tree(space, obs)  # type: ignore[arg-type]
        return np.asarray(pipeline(obs, episode_starts=starts))

    def transform(cols: Columns_) -> Columns_:
        cols = dict(cols)
        cols[Columns.ACTIONS] = actions_from_env(action_space, cols[Columns.ACTIONS], plan=plan)
        if not len(pipeline):
            return cols
        obs = cols[Columns.OBS]
        ends = cols[Columns.TERMINATEDS] | cols[Columns.TRUNCATEDS]
        # `bootstrap_finals` (MARWIL): the steps after truncated episodes' last, each seen
        # as the module would have seen it there (RLlib runs its connectors over episodes
        # extended by it); row 0 (no bootstrap) goes through too, to keep shape and dtype
        finals = cols.get(BOOTSTRAP_FINALS)
        if row_wise:
            starts = np.r_[True, ends[:-1]]
            cols[Columns.OBS] = run(obs, starts)
            if finals is not None:
                cols[BOOTSTRAP_FINALS] = run(finals, np.zeros(len(finals), bool))
        elif finals is None:
            cols[Columns.OBS], _ = _by_episode(run, obs, ends)
        else:  # each episode's final (row 0 where it has none) one step past its end
            at = cols[BOOTSTRAP_INDEX][np.flatnonzero(ends)]
            cols[Columns.OBS], out = _by_episode(run, obs, ends, finals[at])
            assert out is not None
            table = np.zeros((len(finals), *out.shape[1:]), out.dtype)
            table[at] = out
            cols[BOOTSTRAP_FINALS] = table
        return cols

    return transform


def _by_episode(
    run: Callable[[np.ndarray, np.ndarray], np.ndarray],
    obs: np.ndarray,
    ends: np.ndarray,
    finals: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray | None]:
    """Runs the pipeline (`run(obs, episode_starts)`) at step t of all episodes at once, t = 0 .. longest episode - 1
    (ended episodes repeat their last row; those outputs are dropped). With `finals` (one
    observation per episode: the one after its last step) each episode gets one more
    step on it; returns the outputs for the rows and those for `finals`."""
    last = np.flatnonzero(ends)
    first = np.r_[0, last[:-1] + 1]
    lens = last - first + 1
    out: np.ndarray | None = None
    finals_out: np.ndarray | None = None
    for t in range(int(lens.max()) + (finals is not None)):
        rows = first + np.minimum(t, lens - 1)
        x = obs[rows]
        at_final = t == lens
        if finals is not None and at_final.any():
            x[at_final] = finals[at_final]
        y = run(x, np.full(len(first), t == 0))
        if out is None:
            out = np.empty((len(obs), *y.shape[1:]), dtype=y.dtype)
            if finals is not None:
                finals_out = np.empty((len(first), *y.shape[1:]), dtype=y.dtype)
        live = t < lens
        out[(first + t)[live]] = y[live]
        if finals_out is not None:
            finals_out[at_final] = y[at_final]
    assert out is not None
    return out, finals_out

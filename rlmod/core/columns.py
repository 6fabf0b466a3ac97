"""Columns: the batch keys shared by EnvRunners, connectors, Learners and offline data.

| key                  | shape      | written by                | meaning                                   |
|----------------------|------------|---------------------------|-------------------------------------------|
| obs                  | [B, ...]   | EnvRunner                 | observation as the module sees it         |
| new_obs              | [B, ...]   | EnvRunner                 | next observation (final obs at episode end)|
| actions              | [B, ...]   | EnvRunner                 | action the module sampled (before unsquash)|
| rewards              | [B]        | EnvRunner, connectors     | reward (connectors may add intrinsic ones) |
| terminateds          | [B]        | EnvRunner                 | episode ended in a terminal state          |
| truncateds           | [B]        | EnvRunner                 | episode cut by a time limit                |
| seq_ends             | [B]        | EnvRunner                 | last row of a contiguous per-env sequence  |
| eps_id               | [B]        | EnvRunner                 | episode ID, unique per EnvRunner           |
| action_logp          | [B]        | EnvRunner                 | log-prob of `actions` under the sampler    |
| action_dist_inputs   | [B, D]     | EnvRunner, modules        | parameters of the action distribution      |
| vf_preds             | [B]        | learner connector, module | value estimate V(obs)                      |
| advantages           | [B]        | learner connector (GAE)   | advantage estimate                         |
| value_targets        | [B]        | learner connector (GAE)   | regression target of the value function    |
| intrinsic_rewards    | [B]        | curiosity connectors      | exploration bonus before scaling           |
| embeddings           | [B, E]     | module (`forward_train`)  | encoder output `compute_values` may reuse  |
| state_in             | [B, D]     | EnvRunner (stateful)      | recurrent state the step started from      |
| state_out            | dict       | module (stateful)         | recurrent state after the step(s)          |
| loss_mask            | [S, T]     | sequence learner connector| True on real steps, False on zero-padding  |
| prev_actions         | [B, ...]   | EnvRunner (stateful)      | action before this step (0 at a start)     |
| prev_rewards         | [B]        | EnvRunner (stateful)      | reward before this step (0 at a start)     |

Rows of one (sub-env, agent) sequence are contiguous and in time order, so recursions
such as GAE run backwards over a batch and stop at `seq_ends`. For stateful modules
(rlmod.core.recurrent) a learner connector then cuts these rows into zero-padded `[S, T]`
sequences of at most `max_seq_len` steps with a `loss_mask`, and `state_in` `[S, D]` at
each sequence's first step (flattened; rlmod.core.recurrent.unflatten_state).
"""

from __future__ import annotations


class Columns:
    """Batch key constants (see the module docstring for the table); RLlib's names and values."""

    OBS = "obs"
    NEXT_OBS = "new_obs"
    ACTIONS = "actions"
    REWARDS = "rewards"
    TERMINATEDS = "terminateds"
    TRUNCATEDS = "truncateds"
    SEQ_ENDS = "seq_ends"
    EPS_ID = "eps_id"
    ACTION_LOGP = "action_logp"
    ACTION_DIST_INPUTS = "action_dist_inputs"
    VF_PREDS = "vf_preds"
    ADVANTAGES = "advantages"
    VALUE_TARGETS = "value_targets"
    INTRINSIC_REWARDS = "intrinsic_rewards"
    EMBEDDINGS = "embeddings"
    STATE_IN = "state_in"
    STATE_OUT = "state_out"
    LOSS_MASK = "loss_mask"
    PREV_ACTIONS = "prev_actions"
    PREV_REWARDS = "prev_rewards"


DEFAULT_MODULE_ID = "default_policy"
"""The module ID of the single-agent case, as RLlib names it."""

ALL_MODULES = "__all_modules__"
"""Key of the learner metrics that sum over all modules."""

"""The exceptions a user of rlmod can cause, one class per kind of mistake.

Every layer may raise these; this file imports nothing from rlmod.
"""

from __future__ import annotations


class UnknownModuleIDError(KeyError):
    """A module ID that no spec, module or mapping function knows."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class EnvError(RuntimeError):
    """An environment raised, or emitted data that does not match its spaces."""


class CheckpointError(RuntimeError):
    """A checkpoint directory is missing, corrupt, or of an unknown format version."""


class NonFiniteUpdateError(FloatingPointError):
    """A module's loss or gradient was NaN/inf for several minibatches in a row."""


class NonFiniteActionError(FloatingPointError):
    """A module computed NaN/inf action distribution inputs or actions; no such action is
    ever sent to an env."""


class OfflineDataError(ValueError):
    """Recorded data is missing, unreadable, or does not fit the config's spaces."""


class EnvRunnerError(RuntimeError):
    """A remote EnvRunner died or raised, and was neither restarted nor ignored
    (`.fault_tolerance(...)`); the message names the runner and the original exception."""


class LearnerError(RuntimeError):
    """A remote (data-parallel) Learner died or raised. As in RLlib, failed Learners are
    not restarted: the message names the Learner and the original exception, and says how
    to resume (from a checkpoint, or Ray Tune's `FailureConfig(max_failures=...)`)."""

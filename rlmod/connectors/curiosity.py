"""The curiosity connector's old import path: it lives in `rlmod.curiosity` (with the
modules); JSON configs that name this path (`learner_connector`) still load."""

from rlmod.curiosity import CURIOSITY_COLUMNS, IntrinsicCuriosityModelConnector

__all__ = ["CURIOSITY_COLUMNS", "IntrinsicCuriosityModelConnector"]

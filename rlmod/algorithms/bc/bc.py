"""BCConfig and BC: behaviour cloning, i.e. MARWIL with beta=0 (as in RLlib), not a copy.

Used like MARWIL: `BCConfig().offline_data(input_=DIR).build_algo()`.
"""

from __future__ import annotations

from typing import Any, ClassVar

from rlmod.algorithms.marwil.marwil import MARWIL, MARWILConfig


class BCConfig(MARWILConfig):
    """MARWILConfig with beta=0: maximize the log-likelihood of the recorded actions.

    Example:
        >>> from rlmod.algorithms.bc import BCConfig
        >>> BCConfig().beta
        0.0
    """

    setting_defaults: ClassVar[dict[str, Any]] = {"beta": 0.0}


class BC(MARWIL):
    """Behaviour cloning on recorded episodes."""

    config: BCConfig


BCConfig.algo_class = BC

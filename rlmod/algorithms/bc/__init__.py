"""BC: behaviour cloning (MARWIL with beta=0)."""

from rlmod.algorithms.bc.bc import BC, BCConfig

__all__ = ["BC", "BCConfig"]

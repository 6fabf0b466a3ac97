"""Puts benchmarks/ on sys.path, so that an investigation run as
`python benchmarks/investigations/X.py` imports the suite's helpers (`_common`,
`_stacked_setups`, a suite benchmark's settings) by name: `import _suite_path` first.
"""

import sys
from pathlib import Path

SUITE = str(Path(__file__).resolve().parents[1])
if SUITE not in sys.path:
    sys.path.insert(0, SUITE)

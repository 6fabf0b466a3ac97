"""`python -m rlmod.cli ...`, the same as the `rlmod` command."""

import sys

from rlmod.cli import main

sys.exit(main())

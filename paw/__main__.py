"""`python -m paw ARGS` is the `paw` command (useful where the console script is not on PATH)."""

import sys

from paw.cli import main

sys.exit(main())

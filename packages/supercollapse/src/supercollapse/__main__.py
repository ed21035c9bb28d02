"""``python -m supercollapse report|predict-schedule ...``."""

import sys

from supercollapse.cli import main

sys.exit(main())

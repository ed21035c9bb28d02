"""``python -m proofaug run|cumulative`` (same as the ``proofaug`` command)."""

import sys

from proofaug.cli import main

if __name__ == "__main__":
    sys.exit(main())

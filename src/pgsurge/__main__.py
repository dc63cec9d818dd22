"""``python -m pgsurge``: the same entry point as the ``pgsurge`` console script."""

import sys

from pgsurge.cli import main

if __name__ == "__main__":
    sys.exit(main())

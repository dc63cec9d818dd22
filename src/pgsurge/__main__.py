"""``python -m pgsurge``: the same entry point as the ``pgsurge`` console script."""

import sys

if __name__ == "__main__":
    import gc

    # cli.main() turns the collector back on once start-up is over; off
    # already here, the imports of cli itself skip its passes too
    gc.disable()
    from pgsurge.cli import main

    sys.exit(main())

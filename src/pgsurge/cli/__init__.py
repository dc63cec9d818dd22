"""The command line: argv → validated config → dispatch → exit status.

``main`` (the console script) is the single funnel; ``options`` turns argv
into a frozen config with pgbench 18.6's rules and messages, using
``getopt`` (glibc's getopt_long) and ``values`` (C's number parsing);
``help`` is the ``--help`` text. Nothing below this layer imports it.
"""

from pgsurge.cli.dispatch import main

__all__ = ["main"]

"""``pgsurge server start|stop|status|uri``: manage the embedded server by hand.

``cli.main`` hands over ``argv`` starting at ``"server"``. Exit statuses
follow ``pg_ctl``: 0 for success, 1 for errors (raised as ``PgsurgeError``
and reported by ``cli.main``), and for ``status`` 3 when no server runs.
"""

from __future__ import annotations

import sys
from typing import TextIO

from ..errors import PROG, UsageError
from .embedded import ENV_DATA_DIR, EmbeddedServer

#: ``pgsurge server status`` when the server is not running (as pg_ctl status)
EXIT_NOT_RUNNING = 3

USAGE = f"""\
{PROG} server manages pgsurge's embedded PostgreSQL server.

Usage:
  {PROG} server start    start it (creating it first if needed), or reuse it
  {PROG} server stop     stop it
  {PROG} server status   show whether it runs (exit status 3 if it does not)
  {PROG} server uri      print a connection URI, e.g. psql "$({PROG} server uri)"

The server listens on a private Unix socket only, never on TCP.
Its data lives in the directory given by {ENV_DATA_DIR}, if set.
"""

_COMMANDS = ("start", "stop", "status", "uri")


def server_main(
    argv: list[str],
    *,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> int:
    """Run ``pgsurge server …``; ``argv[0]`` is ``"server"``."""
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    args = argv[1:]
    if args in (["--help"], ["-?"], ["help"]):
        out.write(USAGE)
        return 0
    if len(args) != 1 or args[0] not in _COMMANDS:
        given = " ".join(args) if args else "nothing"
        raise UsageError(
            f'unknown server command: "{given}"' if args else "missing server command",
            hint=f'Try "{PROG} server --help" for more information.'
            if args
            else f"give one of: {', '.join(_COMMANDS)}",
        )
    server = EmbeddedServer()
    command = args[0]
    if command == "start":
        was_running = server.status().running
        conn = server.ensure_running()
        st = server.status()
        how = "was already running" if was_running else "started"
        out.write(
            f"{PROG}: embedded PostgreSQL {server.version} server {how} "
            f"(PID: {st.pid})\n"
            f"data directory: {st.data_dir}\n"
            f"socket directory: {conn.host}\n"
            f"log file: {st.log_file}\n"
            f'connect with: psql "{server.uri()}"\n'
        )
        return 0
    if command == "stop":
        if server.stop():
            out.write(f"{PROG}: server stopped\n")
        else:
            out.write(f"{PROG}: no server running in {server.data_dir}\n")
        return 0
    if command == "status":
        st = server.status()
        if not st.running:
            out.write(f"{PROG}: no server running\ndata directory: {st.data_dir}\n")
            return EXIT_NOT_RUNNING
        out.write(
            f"{PROG}: server is running (PID: {st.pid})\n"
            f"data directory: {st.data_dir}\n"
            f"socket directory: {st.socket_dir}\n"
            f"log file: {st.log_file}\n"
            f"uri: {server.uri()}\n"
        )
        return 0
    out.write(server.uri() + "\n")
    if not server.status().running:
        err.write(
            f"{PROG}: warning: the embedded server is not running; "
            f"start it with: {PROG} server start\n"
        )
    return 0

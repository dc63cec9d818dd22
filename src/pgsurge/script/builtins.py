"""pgbench's built-in scripts (``-b``, ``-S``, ``-N``, ``--show-script``).

A data table: name, description and exact text, byte for byte what pgbench
18.6 prints with ``--show-script`` (a unit test compares them with the real
binary). The description doubles as the script's source name in messages
and in the report (``transaction type: <builtin: TPC-B (sort of)>``).

Names are looked up by prefix, as pgbench does: ``-b tpcb`` is
``tpcb-like``, ``-b s`` is ambiguous.
"""

from __future__ import annotations

from pgsurge.errors import PROG, UsageError
from pgsurge.records import record


@record(frozen=True, slots=True)
class BuiltinScript:
    name: str
    description: str
    text: str


_SET_ALL = (
    "\\set aid random(1, 100000 * :scale)\n"
    "\\set bid random(1, 1 * :scale)\n"
    "\\set tid random(1, 10 * :scale)\n"
    "\\set delta random(-5000, 5000)\n"
)
_HISTORY = (
    "INSERT INTO pgbench_history (tid, bid, aid, delta, mtime)"
    " VALUES (:tid, :bid, :aid, :delta, CURRENT_TIMESTAMP);\n"
)

BUILTIN_SCRIPTS: tuple[BuiltinScript, ...] = (
    BuiltinScript(
        "tpcb-like",
        "<builtin: TPC-B (sort of)>",
        _SET_ALL + "BEGIN;\n"
        "UPDATE pgbench_accounts SET abalance = abalance + :delta WHERE aid = :aid;\n"
        "SELECT abalance FROM pgbench_accounts WHERE aid = :aid;\n"
        "UPDATE pgbench_tellers SET tbalance = tbalance + :delta WHERE tid = :tid;\n"
        "UPDATE pgbench_branches SET bbalance = bbalance + :delta WHERE bid = :bid;\n"
        + _HISTORY
        + "END;\n",
    ),
    BuiltinScript(
        "simple-update",
        "<builtin: simple update>",
        _SET_ALL + "BEGIN;\n"
        "UPDATE pgbench_accounts SET abalance = abalance + :delta WHERE aid = :aid;\n"
        "SELECT abalance FROM pgbench_accounts WHERE aid = :aid;\n"
        + _HISTORY
        + "END;\n",
    ),
    BuiltinScript(
        "select-only",
        "<builtin: select only>",
        "\\set aid random(1, 100000 * :scale)\n"
        "SELECT abalance FROM pgbench_accounts WHERE aid = :aid;\n",
    ),
)


def list_text() -> str:
    """What ``-b list`` prints (on stderr), also shown after a lookup error."""
    lines = ["Available builtin scripts:\n"]
    lines += [f"  {b.name:>13}: {b.description}\n" for b in BUILTIN_SCRIPTS]
    lines.append("\n")
    return "".join(lines)


def show_text(script: BuiltinScript) -> str:
    """What ``--show-script=NAME`` prints (on stderr)."""
    return f"-- {script.name}: {script.description}\n{script.text}\n"


class BuiltinLookupError(UsageError):
    """No builtin, or several, match the name; the list follows the error."""

    def format(self) -> str:
        return f"{PROG}: error: {self.message}\n" + list_text()


def find_builtin(name: str) -> BuiltinScript:
    """The one builtin whose name starts with ``name``."""
    found = [b for b in BUILTIN_SCRIPTS if b.name.startswith(name)]
    if len(found) == 1:
        return found[0]
    if not found:
        raise BuiltinLookupError(f'no builtin script found for name "{name}"')
    raise BuiltinLookupError(
        f"ambiguous builtin name: {len(found)} builtin scripts found"
        f' for prefix "{name}"'
    )

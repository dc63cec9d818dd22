"""Per-command latencies (``-r``, the JSON's per-command figures) on a real server.

A command's latency runs from its send to its last result, each end a fresh
clock reading (pgbench's ``stmt_begin`` in START_COMMAND and the reading in
END_COMMAND): work the client does between two commands, or a ``\\sleep``
between them, is no statement's. Checked on both engines (the C loop under
``PGSURGE_FASTLOOP=require``, so that it cannot be the Python loop), and the
shape of the ``-r`` table against pgbench 18.6's. No bound here depends on
the machine's speed: a statement's latency is compared with the 20 ms
``\\sleep`` beside it, with a wide margin.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.fix_run import Loop, run_pgbench, run_pgsurge

pytestmark = pytest.mark.server

#: two statements with a 20 ms \sleep between them, and a \set (client work)
_SCRIPT = "SELECT 1;\n\\sleep 20ms\n\\set x random(1, 10)\nSELECT :x;\n"

#: an average (ms) no statement reaches unless the 20 ms \sleep is charged to it
_NOT_CHARGED = 15.0

#: a line of the -r table: latency (ms), failures, the command
_ROW = re.compile(r"^\s+(\d+\.\d{3})\s+(\d+)\s+(\S.*)$")


def _table(stdout: str) -> list[tuple[float, str]]:
    """The ``-r`` table's rows: (average latency in ms, command)."""
    lines = stdout.splitlines()
    start = next(
        i for i, line in enumerate(lines) if line.startswith("statement latencies")
    )
    rows = []
    for line in lines[start + 1 :]:
        m = _ROW.match(line)
        if m is None:
            break
        rows.append((float(m.group(1)), m.group(3)))
    return rows


def _commands(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return list(doc["scripts"][0]["commands"])


@pytest.mark.parametrize("loop", ["c", "python"])
def test_sleep_between_statements_charged_to_neither(
    bench_db: str, tmp_path: Path, loop: Loop
) -> None:
    (tmp_path / "s.sql").write_text(_SCRIPT)
    args = ["-f", "s.sql", "-c", "2", "-j", "1", "-t", "8", "-r", "-n"]
    args += ["--json", "out.json"]
    out = run_pgsurge(args, bench_db, cwd=tmp_path, loop=loop)
    assert out.status == 0, out.stderr
    rows = _table(out.stdout)
    assert [cmd for _, cmd in rows] == [
        "SELECT 1;",
        "\\sleep 20ms",
        "\\set x random(1, 10)",
        "SELECT :x;",
    ]
    (select1, _), (sleep, _), (_, _), (select2, _) = rows
    # the \sleep's own latency holds the 20 ms; neither statement does (a
    # statement charged with it would average 20 ms or more; one that is
    # not takes a fraction of that, even on a loaded machine)
    assert sleep >= 20.0
    assert select1 < _NOT_CHARGED
    assert select2 < _NOT_CHARGED
    cmds = _commands(json.loads((tmp_path / "out.json").read_text()))
    lat = [c["latency_ms"] for c in cmds]
    assert lat[1]["min"] >= 20.0
    for i in (0, 3):
        # none recorded as taking no time: a round trip to a server takes some
        assert lat[i]["min"] > 0.0, (loop, lat[i])
        assert lat[i]["avg"] < _NOT_CHARGED, (loop, lat[i])


@pytest.mark.parametrize("loop", ["c", "python"])
def test_builtin_statements_never_zero(
    bench_db: str, tmp_path: Path, loop: Loop
) -> None:
    """The tpcb-like builtin's statements (sent through pgsurge._fastpq in
    prepared mode): no SQL command's minimum is 0."""
    args = ["-b", "tpcb-like", "-M", "prepared", "-c", "2", "-j", "1", "-t", "30"]
    args += ["-r", "-n", "--json", "out.json"]
    out = run_pgsurge(args, bench_db, cwd=tmp_path, loop=loop)
    assert out.status == 0, out.stderr
    doc = json.loads((tmp_path / "out.json").read_text())
    for cmd in _commands(doc):
        if not cmd["line"].startswith("\\"):
            assert cmd["latency_ms"]["min"] > 0.0, (loop, cmd)


def test_table_shape_as_pgbench(
    bench_db: str, tmp_path: Path, pgbench_bin: Path
) -> None:
    """The -r table's rows (commands, and which of them take the sleep) are
    pgbench's."""
    (tmp_path / "s.sql").write_text(_SCRIPT)
    args = ["-f", "s.sql", "-c", "2", "-j", "1", "-t", "8", "-r", "-n"]
    ours = _table(run_pgsurge(args, bench_db, cwd=tmp_path, loop="c").stdout)
    ref = _table(run_pgbench(pgbench_bin, args, bench_db, cwd=tmp_path).stdout)
    assert [cmd for _, cmd in ours] == [cmd for _, cmd in ref]
    # only the \sleep's row holds the sleep, in both tools
    expected = [False, True, False, False]
    assert [lat >= _NOT_CHARGED for lat, _ in ref] == expected
    assert [lat >= _NOT_CHARGED for lat, _ in ours] == expected

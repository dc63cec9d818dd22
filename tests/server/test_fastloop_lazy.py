"""What a client the C loop runs does without until Python needs it (issue 25).

At a thousand clients every Python object a client holds counts: the C
loop's clients share the worker's initial variables
(``WorkerState.shared_variables``) until one is written, C reading a
sharing client's ``client_id`` from its id
(:func:`pgsurge.engine.state.own_variables`, mirrored by ``fl_own_vars``
in _native/_fastloop_sync.c). These run one worker in this process
(:func:`tests.fix_db.run_worker`, ``PGSURGE_FASTLOOP=require``) and look
at its clients afterwards; the values the server received show that the
shared values were the ones C sent.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest

from pgsurge.engine import fastloop
from tests.fix_db import run_worker

pytestmark = [
    pytest.mark.server,
    pytest.mark.skipif(not fastloop.available, reason="pgsurge._fastloop not usable"),
]

CLIENTS = 4
TX = 5


def _table(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE seen (client int, value int)")


def _seen(dsn: str) -> list[tuple[int, int]]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT client, value FROM seen ORDER BY 1, 2").fetchall()
    return [(int(a), int(b)) for a, b in rows]


def _run(tmp_path: Path, dsn: str, script: str, *extra: str) -> tuple[Any, list[Any]]:
    (tmp_path / "s.sql").write_text(script)
    args = ["-n", "-f", str(tmp_path / "s.sql"), *extra]
    args += ["-c", str(CLIENTS), "-t", str(TX)]
    w, result = run_worker(args, dsn, variables=(("scale", 7),))
    assert result.total.cnt == CLIENTS * TX
    return w, result


def test_clients_that_only_read_share_the_initial_variables(
    c_loops: list[Any], fresh_db: str, tmp_path: Path
) -> None:
    _table(fresh_db)
    w, _ = _run(tmp_path, fresh_db, "INSERT INTO seen VALUES (:client_id, :scale);\n")
    clients = c_loops[0].clients
    assert w.shared_variables == {"scale": 7}
    # no client got a dict of its own: C read the shared one, and
    # client_id from the client's id
    assert [st.id for st in clients if st.variables is not w.shared_variables] == []
    assert _seen(fresh_db) == [(cid, 7) for cid in range(CLIENTS) for _ in range(TX)]


@pytest.mark.parametrize("mode", ["simple", "extended", "prepared"])
def test_a_write_gives_the_client_its_own_copy(
    c_loops: list[Any], fresh_db: str, tmp_path: Path, mode: str
) -> None:
    # \set in C, written back when C hands the finished client over; \gset
    # of a variable C holds, stored by C itself
    _table(fresh_db)
    script = (
        "\\set x :client_id * 10\n"
        "SELECT :x + 1 AS y \\gset\n"
        "INSERT INTO seen VALUES (:client_id, :y);\n"
    )
    w, _ = _run(tmp_path, fresh_db, script, "-M", mode)
    assert w.shared_variables == {"scale": 7}
    for st in c_loops[0].clients:
        assert st.variables is not w.shared_variables
        # the shared values, the client's id, then what the script wrote,
        # in that order (as a dict of its own from the start would be; C
        # keeps \gset's canonical int text as the int)
        assert list(st.variables) == ["scale", "client_id", "x", "y"]
        assert st.variables["scale"] == 7
        assert st.variables["client_id"] == st.id
        assert st.variables["x"] == st.id * 10
        assert str(st.variables["y"]) == str(st.id * 10 + 1)
    assert _seen(fresh_db) == [
        (cid, cid * 10 + 1) for cid in range(CLIENTS) for _ in range(TX)
    ]


def test_the_python_engine_gives_each_client_its_own_dict(
    fresh_db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PGSURGE_NO_FASTLOOP", "1")
    loops: list[Any] = []
    real = fastloop.EventLoop.__init__

    def spy(self: Any, *a: Any, **kw: Any) -> None:
        loops.append(self)
        real(self, *a, **kw)

    monkeypatch.setattr(fastloop.EventLoop, "__init__", spy)
    _table(fresh_db)
    w, _ = _run(tmp_path, fresh_db, "INSERT INTO seen VALUES (:client_id, :scale);\n")
    assert len(loops) == 1
    for st in loops[0].clients:
        assert st.variables is not w.shared_variables
        assert st.variables == {"scale": 7, "client_id": st.id}
    assert _seen(fresh_db) == [(cid, 7) for cid in range(CLIENTS) for _ in range(TX)]

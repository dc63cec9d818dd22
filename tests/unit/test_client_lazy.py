"""A client's Python structures that only the Python engine uses are made
on first use (issue 25: pgsurge's memory at a thousand clients).

A client the C loop runs needs neither a set of the statements prepared
on its connection (C keeps its own) nor an expression context (C
evaluates its expressions itself): a client starts with the shared empty
``NONE_PREPARED`` and no context, and the engine makes them when it needs
them (``mark_prepared``, ``Support.eval_context``). Nor does it need a
dict of variables of its own: the clients of a C loop run share the
worker's initial ones until one is written (``own_variables``), and its
connection's wrapper keeps none of libpq's calls bound (``pgconn.PgConn``).
"""

from __future__ import annotations

import sys

from pgsurge import pgconn
from pgsurge.engine.state import (
    NONE_PREPARED,
    Client,
    Support,
    WorkerState,
    mark_prepared,
    own_variables,
)
from pgsurge.prng import PgPrng
from pgsurge.stats.counters import StatsData


def _client(cid: int = 0) -> Client:
    return Client(cid, {"scale": 1}, PgPrng(cid + 1))


def _support(lines: list[str]) -> Support:
    w = WorkerState(
        stats=StatsData(),
        per_script=None,
        choose_rng=PgPrng(1),
        throttle_rng=PgPrng(2),
    )
    return Support(w, lines.append)


def test_a_new_client_has_no_context_and_shares_the_empty_prepared_set() -> None:
    a, b = _client(0), _client(1)
    assert a.ctx is None
    assert a.prepared is NONE_PREPARED
    assert b.prepared is NONE_PREPARED
    assert b"P_0" not in a.prepared


def test_the_first_prepare_gives_the_client_a_set_of_its_own() -> None:
    a, b = _client(0), _client(1)
    mark_prepared(a, b"P_0")
    own = a.prepared
    assert own == {b"P_0"}
    assert isinstance(own, set)
    mark_prepared(a, b"P_1")
    assert a.prepared is own
    assert own == {b"P_0", b"P_1"}
    # the shared one stays empty
    assert b.prepared is NONE_PREPARED
    assert not NONE_PREPARED


def test_the_context_is_made_once_on_the_clients_own_values() -> None:
    lines: list[str] = []
    sup = _support(lines)
    st = _client()
    ctx = sup.eval_context(st)
    assert st.ctx is ctx
    assert ctx.variables is st.variables
    assert ctx.rng is st.rng
    assert sup.eval_context(st) is ctx
    # debug() writes its lines to the engine's log
    ctx.debug("debug(script=0,command=1): int 3\n")
    assert lines == ["debug(script=0,command=1): int 3\n"]


def _sharing(set_client_id: bool) -> tuple[WorkerState, list[Client]]:
    w = WorkerState(
        stats=StatsData(),
        per_script=None,
        choose_rng=PgPrng(1),
        throttle_rng=PgPrng(2),
        shared_variables={"scale": 10, "seed": "x"},
        set_client_id=set_client_id,
    )
    assert w.shared_variables is not None
    clients = [Client(cid, w.shared_variables, PgPrng(cid + 1)) for cid in (0, 300)]
    return w, clients


def test_clients_share_the_initial_variables_until_one_is_written() -> None:
    w, (a, b) = _sharing(set_client_id=True)
    shared = w.shared_variables
    own = own_variables(b, w)
    # b's copy, with its client_id after the initial ones (the order a
    # dict of its own from the start has)
    assert b.variables is own
    assert own is not shared
    assert list(own.items()) == [("scale", 10), ("seed", "x"), ("client_id", 300)]
    # made once; the others still share, and the shared dict is unchanged
    assert own_variables(b, w) is own
    assert a.variables is shared
    assert shared == {"scale": 10, "seed": "x"}
    own["scale"] = 11
    assert shared["scale"] == 10


def test_without_client_id_the_copy_has_the_initial_variables_only() -> None:
    # -D client_id=... given: pgbench defines no client_id of its own
    w, (a, _) = _sharing(set_client_id=False)
    assert own_variables(a, w) == {"scale": 10, "seed": "x"}
    assert a.variables is not w.shared_variables


def test_a_client_with_a_dict_of_its_own_keeps_it() -> None:
    w, _ = _sharing(set_client_id=True)
    st = _client(5)
    mine = st.variables
    assert own_variables(st, w) is mine
    assert mine == {"scale": 1}


def test_a_connection_wrapper_keeps_no_bound_calls() -> None:
    # a PgConn per client: its libpq calls are looked up on use (the
    # engine's steps call them on Client.raw), none kept in a slot
    probe = pgconn.raw_probe()
    try:
        conn = pgconn.PgConn(probe)
        size = sys.getsizeof(conn)
        assert conn.is_busy.__self__ is probe
        assert conn.send_query.__name__ == "send_query"
        assert sys.getsizeof(conn) == size
        assert not hasattr(conn, "__dict__")
        assert set(pgconn.PgConn.__slots__) == {"_pgconn", "socket"}
    finally:
        probe.finish()

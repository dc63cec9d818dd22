"""A client's Python structures that only the Python engine uses are made
on first use (issue 25: pgsurge's memory at a thousand clients).

A client the C loop runs needs neither a set of the statements prepared
on its connection (C keeps its own) nor an expression context (C
evaluates its expressions itself): a client starts with the shared empty
``NONE_PREPARED`` and no context, and the engine makes them when it needs
them (``mark_prepared``, ``Support.eval_context``).
"""

from __future__ import annotations

from pgsurge.engine.state import (
    NONE_PREPARED,
    Client,
    Support,
    WorkerState,
    mark_prepared,
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

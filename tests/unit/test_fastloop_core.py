"""pgsurge._fastloop.FastLoop driven directly, with stand-in hooks, no server.

The server tests (tests/server/test_fastloop*.py) compare whole runs with
the Python engine's; these check the C loop's own contracts at its edges,
which a run reaches rarely or never: which clients it refuses to take
over, what it accepts as a plan, what happens when a Python hook raises,
and that it does not keep a worker's objects alive after the run.
"""

from __future__ import annotations

import gc
import select
import weakref
from typing import Any

import pytest

from pgsurge.engine import fastloop
from pgsurge.engine import state as C
from pgsurge.engine.state import Client, WorkerState
from pgsurge.prng import PgPrng
from pgsurge.script.evaluate import EvalContext
from pgsurge.stats.counters import StatsData

pytestmark = pytest.mark.skipif(
    not fastloop.available, reason="pgsurge._fastloop not usable"
)

_module: Any = fastloop._module


def _client(cid: int = 0, **attrs: Any) -> Client:
    rng = PgPrng(cid + 1)
    variables: dict[str, Any] = {"client_id": cid}
    st = Client(cid, variables, rng, EvalContext(variables, rng))
    for k, v in attrs.items():
        setattr(st, k, v)
    return st


def _wstate() -> WorkerState:
    return WorkerState(
        stats=StatsData(), per_script=None, choose_rng=PgPrng(1), throttle_rng=PgPrng(2)
    )


def _plan(nrefs: int = 1) -> fastloop.FastPlan:
    """One script: ``\\set a 7`` and an SQL command reading :a nrefs times."""
    sql = (3, b"SELECT $1", tuple([0] * nrefs), None)
    return ("a",), 1, (1,), (((1, 0, 7), sql, (0,)),)


def _flags(mode: int = C.MODE_EXTENDED) -> tuple[int | float, ...]:
    return fastloop.flags_for(mode, 1, 0, False, False, 1, False)


class _Hooks:
    """advance finishes the client; resume records and finishes it too."""

    def __init__(self, raise_in: str | None = None) -> None:
        self.calls: list[tuple[str, int]] = []
        self.raise_in = raise_in

    def advance(self, st: Client) -> None:
        self.calls.append(("advance", st.state))
        if self.raise_in == "advance":
            raise ZeroDivisionError("from advance")
        st.state = C.FINISHED
        st.fd = -1

    def resume(self, st: Client, event: object) -> None:
        self.calls.append(("resume", st.state))
        st.state = C.FINISHED
        st.fd = -1

    def absorb(self, st: Client) -> None:
        self.calls.append(("absorb", st.state))

    def tuple(self) -> tuple[Any, ...]:
        return (self.advance, self.resume, self.absorb)


def _loop(
    clients: list[Client], hooks: _Hooks, ep: select.epoll, nrefs: int = 1
) -> Any:
    ops = ((),)
    return _module.FastLoop(
        clients, ops, _plan(nrefs), _wstate(), hooks.tuple(), ep.fileno(), -1, _flags()
    )


@pytest.mark.parametrize("attr", ["flush_pending", "in_pipeline"])
def test_client_with_pending_io_stays_python(attr: str) -> None:
    # A client whose connection still has data to flush, or is in a
    # pipeline, is not the C loop's: advance() runs it (before the fix the
    # C loop took it over half-loaded and sent on a NULL connection)
    hooks = _Hooks()
    st = _client(ptr=1, **{attr: True})
    with select.epoll() as ep:
        fl = _loop([st], hooks, ep)
        assert fl.run(0) == 0
    assert hooks.calls == [("advance", C.CHOOSE_SCRIPT)]


def test_client_without_pgconn_stays_python() -> None:
    hooks = _Hooks()
    with select.epoll() as ep:
        assert _loop([_client(ptr=0)], hooks, ep).run(0) == 0
    assert hooks.calls == [("advance", C.CHOOSE_SCRIPT)]


@pytest.mark.parametrize("nrefs", [63, 64, 255])
def test_plan_with_many_references(nrefs: int) -> None:
    # pgbench allows 255 parameters per command (a variable used twice is
    # two); the C loop must take such a plan (it was refused from 64 on,
    # which crashed the worker)
    with select.epoll() as ep:
        _loop([_client()], _Hooks(), ep, nrefs)


def test_exception_in_a_hook_propagates() -> None:
    hooks = _Hooks(raise_in="advance")
    with select.epoll() as ep:
        fl = _loop([_client(ptr=0)], hooks, ep)
        with pytest.raises(ZeroDivisionError, match="from advance"):
            fl.run(0)


def test_no_reference_cycle_left_behind() -> None:
    # the loop holds the hooks, which (in a worker) hold the FastEventLoop
    # that holds it: the cyclic collector must be able to free the lot
    class Owner:
        fast: Any = None

    hooks = _Hooks()
    owner = Owner()
    ref = weakref.ref(owner)
    with select.epoll() as ep:
        owner.fast = _loop([_client(ptr=0)], hooks, ep)
        hooks.owner = owner  # type: ignore[attr-defined]
        assert owner.fast.run(0) == 0
    del owner, hooks
    gc.collect()
    assert ref() is None

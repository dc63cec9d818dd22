"""The contract between the Python engine and the C loop (pgsurge.engine.abi).

Every constant the extension exports is compared with abi.MIRRORED in
full, every attribute C reads or writes (the module's READS) must be a
slot (or method) of the class that owns it, and the run flags are derived
once for both engines.
"""

from __future__ import annotations

import pytest

from pgsurge.engine import abi, fastloop
from pgsurge.engine import state as C
from pgsurge.engine.state import Client, Op, Settings, WorkerState
from pgsurge.prng import PgPrng
from pgsurge.stats.counters import CommandStats, StatsData
from pgsurge.stats.histogram import Histogram
from pgsurge.stats.simple import SimpleStats
from pgsurge.stats.txlog import TxLogWriter

needs_c = pytest.mark.skipif(
    not fastloop.available, reason="pgsurge._fastloop not usable"
)

OWNERS: dict[str, type] = {
    "Client": Client,
    "WorkerState": WorkerState,
    "StatsData": StatsData,
    "SimpleStats": SimpleStats,
    "CommandStats": CommandStats,
    "Op": Op,
    "PgPrng": PgPrng,
    "Histogram": Histogram,
    "TxLogWriter": TxLogWriter,
}


def _module():  # type: ignore[no-untyped-def]
    from pgsurge import _fastloop  # type: ignore[attr-defined]

    return _fastloop


@needs_c
def test_every_exported_constant_is_mirrored() -> None:
    assert abi.check_module(_module()) is None


@needs_c
def test_a_difference_is_found() -> None:
    class Fake:
        pass

    fake = Fake()
    for name, value in abi.MIRRORED.items():
        setattr(fake, name, value)
    fake.LOOK_US = 5  # type: ignore[attr-defined]
    fake.NEW_THING = 1  # type: ignore[attr-defined]
    del fake.OUT_TICK  # type: ignore[attr-defined]
    text = abi.check_module(fake)  # type: ignore[arg-type]
    assert text is not None
    assert "OUT_TICK" in text and "NEW_THING" in text and "LOOK_US" in text


@needs_c
@pytest.mark.parametrize("owner_name", sorted(OWNERS))
def test_attributes_c_reads_are_slots(owner_name: str) -> None:
    owner = OWNERS[owner_name]
    names = [name for owner_, name in _module().READS if owner_ == owner_name]
    assert names, owner_name
    slots = set(getattr(owner, "__slots__", ()))
    for name in names:
        if callable(getattr(owner, name, None)) and name not in slots:
            continue  # a method (PgPrng.getstate/setstate)
        assert name in slots, f"{owner_name}.{name} is not a slot"


@needs_c
def test_every_owner_is_known() -> None:
    assert {owner for owner, _ in _module().READS} <= set(OWNERS)


def test_next_state_table() -> None:
    assert abi.NEXT_STATE[abi.R_WAIT] == C.WAIT_RESULT
    assert abi.NEXT_STATE[abi.R_DONE] == C.END_COMMAND
    assert abi.NEXT_STATE[abi.R_ERROR] == C.ERROR
    assert abi.NEXT_STATE[abi.R_ABORT] == C.ABORTED


def _settings(**kw: object) -> Settings:
    base: dict[str, object] = dict(
        nclients=1,
        query_mode=C.MODE_PREPARED,
        nxacts=10,
        end_us=0,
        throttle_delay=0.0,
        latency_limit_us=0,
        detailed=False,
        per_command=False,
        max_tries=1,
        verbose_errors=False,
        continue_on_error=False,
        connect_each_tx=False,
        weights=(1,),
        conninfo={},
    )
    base.update(kw)
    return Settings(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kw", "expected"),
    [
        ({}, (0, 0)),
        ({"detailed": True}, (1, 0)),
        ({"latency_limit_us": 5}, (1, 0)),
        ({"verbose_errors": True, "max_tries": 3}, (1, 1)),
        ({"throttle_delay": 10.0}, (0, 0)),
    ],
)
def test_run_flags(kw: dict[str, object], expected: tuple[int, ...]) -> None:
    f = abi.run_flags(_settings(**kw))
    assert (f.tx_clock, f.save_rng) == expected


def test_plan_ops_are_tuples_led_by_their_code() -> None:
    assert abi.SetConst.of(1, 5) == (abi.OP_SET_CONST, 1, 5)
    assert abi.SetRandom.of(0, 1, 9) == (abi.OP_SET_RANDOM, 0, 1, 9)
    assert abi.Sql.of(b"p", (0,), None) == (abi.OP_SQL, b"p", (0,), None, 0, "", b"")
    assert abi.Sql.of(b"P_0", (), None, sql=b"SELECT 1") == (
        abi.OP_SQL,
        b"P_0",
        (),
        None,
        0,
        "",
        b"SELECT 1",
    )
    assert abi.Pipeline(abi.OP_PEND) == (abi.OP_PEND,)
    assert abi.SetExpr.of(1, (0, 5)) == (abi.OP_SET_EXPR, 1, (0, 5))
    assert abi.If.of((0, 1), 4, True, 6, False) == (abi.OP_IF, (0, 1), 4, 1, 6, 0)
    assert abi.Else.of(3) == (abi.OP_ELSE, 3)
    assert abi.Endif() == (abi.OP_ENDIF,)
    assert abi.SleepConst.of(7) == (abi.OP_SLEEP_CONST, 7)
    assert abi.SleepVar.of(2, 1000) == (abi.OP_SLEEP_VAR, 2, 1000)
    assert abi.End() == (abi.OP_END,)

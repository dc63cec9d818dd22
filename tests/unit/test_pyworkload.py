"""The engine side of Python transactions without a server: ``py_step`` on a
client, its parameters in each query mode (the inline statement path and
the batch path must agree), and how a transaction's generator ends."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from pgsurge.config import QueryMode
from pgsurge.engine import state as C
from pgsurge.engine.pyworkload import compile_py, make_py
from pgsurge.engine.state import Client, Op, Settings, Support, WorkerState
from pgsurge.prng import PgPrng
from pgsurge.script.evaluate import EvalContext
from pgsurge.stats.counters import StatsData
from pgsurge.workloads.loader import load_file

WORKLOAD = """
from decimal import Decimal
from pgsurge.workloads import sql, transaction

seven = sql("SELECT $1, $2, $3, $4, $5, $6, $7", fetch=False)
VALUES = (1, "a'b", None, 1.5, True, b"x", Decimal("1.10"))

@transaction
def both(ctx):
    yield seven(*VALUES)
    yield [seven(*VALUES)]

@transaction
def early(ctx):
    yield seven(*VALUES)
    if ctx.client_id >= 0:
        return "a value the engine ignores"
    yield seven(*VALUES)
"""

#: what the variables "$1".."$7" hold for VALUES: a missing one is a NULL
#: (extended and prepared), simple mode substitutes SQL literals
EXPECTED = {
    QueryMode.EXTENDED: {
        "$1": 1,
        "$2": "a'b",
        "$4": "1.5",
        "$5": "true",
        "$6": "x",
        "$7": "1.10",
    },
    QueryMode.SIMPLE: {
        "$1": 1,
        "$2": "'a''b'",
        "$3": "NULL",
        "$4": "1.5",
        "$5": "true",
        "$6": "'x'",
        "$7": "'1.10'",
    },
}
EXPECTED[QueryMode.PREPARED] = EXPECTED[QueryMode.EXTENDED]

MODE_NO = {
    QueryMode.SIMPLE: C.MODE_SIMPLE,
    QueryMode.EXTENDED: C.MODE_EXTENDED,
    QueryMode.PREPARED: C.MODE_PREPARED,
}


def compiled(
    tmp_path: Path, name: str, mode: QueryMode, text: str = WORKLOAD
) -> tuple[Any, tuple[Op, ...], Client, list[str]]:
    """``py_step`` of a worker, the ops of transaction ``name`` of the
    workload ``text``, a client, and the messages the client gave."""
    path = tmp_path / "w.py"
    path.write_text(text)
    (tx,) = [t for t in load_file(str(path)).transactions if t.name == name]
    ops = compile_py(tx, mode)
    s = Settings(
        nclients=1, query_mode=MODE_NO[mode], nxacts=1, end_us=0,
        throttle_delay=0.0, latency_limit_us=0, detailed=False, per_command=False,
        max_tries=1, verbose_errors=False, continue_on_error=False,
        connect_each_tx=False, weights=(1,), conninfo={},
    )  # fmt: skip
    w = WorkerState(StatsData(), None, PgPrng(1), PgPrng(2))
    errors: list[str] = []
    py_step = make_py(s, Support(w, errors.append))
    rng = PgPrng(3)
    variables: dict[str, Any] = {}
    st = Client(0, variables, rng, EvalContext(variables, rng))
    st.ops = ops
    return py_step, ops, st, errors


def params(st: Client) -> dict[str, Any]:
    return {k: v for k, v in st.variables.items() if k.startswith("$")}


def stale(st: Client) -> None:
    """Values a previous statement left: each step must replace or drop them."""
    st.variables.update({f"${i}": "stale" for i in range(1, 8)})


@pytest.mark.parametrize("mode", list(QueryMode))
def test_parameters_of_a_statement_and_of_a_batch(
    tmp_path: Path, mode: QueryMode
) -> None:
    py_step, ops, st, _ = compiled(tmp_path, "both", mode)
    stale(st)
    # the first step: a statement call (the inline path)
    assert py_step(st, ops[0]) == C.START_COMMAND
    sql_index = st.command
    assert ops[sql_index].kind == C.K_SQL
    assert params(st) == EXPECTED[mode]

    # its result (not fetched) in: the generator yields a batch of one
    stale(st)
    state = py_step(st, ops[sql_index + 1])
    if mode is not QueryMode.SIMPLE:
        # a pipeline: \startpipeline first, then the batch's statement
        assert state == C.START_COMMAND and ops[st.command].kind == C.K_PSTART
        state = py_step(st, ops[st.command + 1])
    assert state == C.START_COMMAND and ops[st.command].kind == C.K_SQL
    if mode is QueryMode.SIMPLE:
        # one query of the batch's statements, the literals written in
        assert ops[st.command].sql == b"SELECT 1, 'a''b', NULL, 1.5, true, 'x', '1.10'"
    else:
        assert params(st) == EXPECTED[mode]


@pytest.mark.parametrize("mode", [QueryMode.SIMPLE, QueryMode.PREPARED])
def test_a_generator_that_returns_ends_the_transaction(
    tmp_path: Path, mode: QueryMode
) -> None:
    py_step, ops, st, _ = compiled(tmp_path, "early", mode)
    for _ in range(2):  # the next transaction starts a new generator
        assert py_step(st, ops[0]) == C.START_COMMAND
        assert st.py.gen is not None
        assert py_step(st, ops[st.command + 1]) == C.END_TX
        assert st.py.gen is None
        assert st.estatus == C.E_NONE


BAD_PARAMS = """
from pgsurge.workloads import sql, transaction

one = sql("SELECT $1", fetch=False)

@transaction
def by_hand(ctx):
    yield (one, ARGS)
"""


@pytest.mark.parametrize("batch", [False, True])
@pytest.mark.parametrize(
    ("args", "message"),
    [
        ("None", r"got parameters None \(NoneType\), not a sequence"),
        ("5", r"got parameters 5 \(int\), not a sequence"),
        ("tuple(range(70000))", r"got 70000 parameters, more than 65535"),
        # too few would send the $n an earlier call left, too many would be
        # dropped: both are the user's mistake, named
        ("()", r"got 0 parameters, it takes 1$"),
        ("[]", r"got 0 parameters, it takes 1$"),
        ("(1, 2)", r"got 2 parameters, it takes 1$"),
    ],
)
@pytest.mark.parametrize("mode", [QueryMode.SIMPLE, QueryMode.PREPARED])
def test_parameters_made_by_hand_that_cannot_be_sent(
    tmp_path: Path, mode: QueryMode, args: str, message: str, batch: bool
) -> None:
    """A (statement, args) tuple made without calling the statement: the
    client aborts with a message naming the line, never a traceback."""
    item = "(one, ARGS)" if not batch else "[(one, ARGS)]"
    text = BAD_PARAMS.replace("(one, ARGS)", item).replace("ARGS", args)
    py_step, ops, st, errors = compiled(tmp_path, "by_hand", mode, text)
    state = py_step(st, ops[0])
    if batch and mode is not QueryMode.SIMPLE:
        assert state == C.START_COMMAND  # \startpipeline, then the statement
        state = py_step(st, ops[st.command + 1])
    assert state == C.ABORTED and st.estatus == C.E_META
    assert len(errors) == 1
    assert re.search(r'w\.py", line 8: the statement <statement .one.', errors[0])
    assert re.search(message, errors[0]), errors[0]

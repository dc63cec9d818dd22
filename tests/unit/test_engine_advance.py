"""The reference engine's state machine (``pgsurge.engine.client``) over a fake server.

``advance(client)`` is driven here as the worker's event loop drives it,
over :class:`FakeConn`: a stand-in for pgconn's connection whose answers a
test scripts (per SQL text: the results, an error, a lost connection) and
which records what was sent. No server, no C extension. Every test runs
twice (the ``send_path`` fixture): once with clients that have no ``ptr``,
so that the engine sends and reads through psycopg's calls, and once with
a ``ptr`` and :class:`FakeFastpq` in place of pgsurge._fastpq's functions
(its documented contract, over the same FakeConn), so that the engine's
``_fastpq`` path (``sql.send_fast``, ``after_drain``) runs too; both must
give the same outcome. The runs of the same cases against a real server,
and against pgbench, are in tests/server/test_run_diff.py and test_run.py.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from pgsurge import pgconn
from pgsurge.config import QueryMode
from pgsurge.engine import fastpq
from pgsurge.engine.client import Engine, make_engine
from pgsurge.engine.program import compile_scripts
from pgsurge.engine.state import (
    ABORTED,
    FINISHED,
    WAIT_RESULT,
    WAIT_ROLLBACK_RESULT,
    Client,
    Settings,
    WorkerState,
)
from pgsurge.prng import PgPrng
from pgsurge.script.compile import parse_script
from pgsurge.script.evaluate import EvalContext
from pgsurge.stats.counters import StatsData

_SQLSTATE = 67  # PG_DIAG_SQLSTATE, the field pgconn.sqlstate asks for


# -- the fake server ----------------------------------------------------------


@dataclass
class Res:
    """A libpq result as the engine reads it (psycopg's ``PGresult`` shape)."""

    status: int
    rows: list[tuple[bytes | None, ...]] = field(default_factory=list)
    fields: tuple[str, ...] = ()
    sqlstate: bytes | None = None
    message: str = ""

    @property
    def ntuples(self) -> int:
        return len(self.rows)

    @property
    def nfields(self) -> int:
        return len(self.fields)

    @property
    def error_message(self) -> bytes:
        return self.message.encode()

    def fname(self, column: int) -> bytes:
        return self.fields[column].encode()

    def get_value(self, row: int, column: int) -> bytes | None:
        return self.rows[row][column]

    def error_field(self, code: int) -> bytes | None:
        return self.sqlstate if code == _SQLSTATE else None


def ok() -> Res:
    return Res(pgconn.COMMAND_OK)


def rows(fields: Sequence[str], *values: tuple[bytes | None, ...]) -> Res:
    return Res(pgconn.TUPLES_OK, list(values), tuple(fields))


def failed(sqlstate: str, text: str, severity: str = "ERROR") -> Res:
    return Res(
        pgconn.FATAL_ERROR,
        sqlstate=sqlstate.encode(),
        message=f"{severity}:  {text}\n",
    )


#: an answer: the connection is lost (consume_input fails, the status is bad)
LOST = "lost"
#: as the last item of an answer: the server closes after sending those
#: results (reading them turns the connection's status bad)
CLOSE = "close"

Answer = list[Any] | str


class FakeConn:
    """pgconn's ``PgConn`` and its raw libpq connection, in one object.

    ``answer(sql)`` gives the results of each command as it is sent (a
    prepared statement's text for ``send_query_prepared``); the
    transaction status follows BEGIN/END/COMMIT/ROLLBACK and errors. While
    ``held`` is set, libpq is busy: the results have not arrived.
    """

    def __init__(self, answer: Callable[[bytes], Answer]) -> None:
        self.answer = answer
        #: (call, SQL text or statement name, parameters) in order
        self.sent: list[tuple[str, bytes, tuple[bytes | None, ...] | None]] = []
        self.results: deque[Res | None] = deque()
        self.prepared: dict[bytes, bytes] = {}
        self.held = False
        self.left = 0
        self.bad = False
        self.lost = False
        self.closing = False
        self.in_pipeline = False
        self.pipeline_calls: list[str] = []
        self.transaction_status = pgconn.TRANS_IDLE
        self.finished = False
        self.socket = 99
        self._pgconn = self

    # -- sending
    def _send(self, call: str, key: bytes, sql: bytes, params: Any) -> None:
        if self.bad:
            raise pgconn.LibpqError("no connection to the server")
        self.sent.append((call, key, None if params is None else tuple(params)))
        word = sql.split(None, 1)[0].rstrip(b";").upper() if sql.strip() else b""
        if word == b"BEGIN":
            self.transaction_status = pgconn.TRANS_INTRANS
        answer = self.answer(sql)
        if answer == LOST:
            self.lost = True
            return
        assert isinstance(answer, list)
        for item in answer:
            if item == CLOSE:
                self.results.append(None)
                self.closing = True
                return
            if item.status == pgconn.FATAL_ERROR and (
                self.transaction_status == pgconn.TRANS_INTRANS
            ):
                self.transaction_status = pgconn.TRANS_INERROR
            self.results.append(item)
        if word in (b"END", b"COMMIT", b"ROLLBACK"):
            self.transaction_status = pgconn.TRANS_IDLE
        self.results.append(None)

    def send_query(self, sql: bytes) -> None:
        self._send("query", sql, sql, None)

    def send_query_params(self, sql: bytes, params: Any) -> None:
        self._send("params", sql, sql, params)

    def send_prepare(self, name: bytes, sql: bytes) -> None:
        if self.bad:
            raise pgconn.LibpqError("no connection to the server")
        self.sent.append(("prepare", name, None))
        self.prepared[name] = sql
        self.results.extend([ok(), None])

    def prepare(self, name: bytes, sql: bytes) -> str | None:
        self.sent.append(("prepare", name, None))
        self.prepared[name] = sql
        return None

    def send_query_prepared(self, name: bytes, params: Any) -> None:
        self._send("prepared", name, self.prepared[name], params)

    def flush(self) -> int:
        # what a test set in ``left`` (1: data left to send)
        return self.left

    # -- reading
    def consume_input(self) -> None:
        if self.closing:
            self.bad = True
        if self.lost:
            self.bad = True
            raise pgconn.LibpqError("server closed the connection unexpectedly")

    def is_busy(self) -> bool:
        return self.held

    def get_result(self) -> Res | None:
        return self.results.popleft() if self.results else None

    def error_message(self) -> str:
        return "server closed the connection unexpectedly\n" if self.bad else ""

    # -- pipelines
    def enter_pipeline_mode(self) -> None:
        self.pipeline_calls.append("enter")
        self.in_pipeline = True

    def pipeline_sync(self) -> None:
        self.pipeline_calls.append("sync")
        # in a pipeline, no None follows a sync
        self.results.append(Res(pgconn.PIPELINE_SYNC))

    def exit_pipeline_mode(self) -> None:
        self.pipeline_calls.append("exit")
        self.in_pipeline = False

    def finish(self) -> None:
        self.finished = True


class FakeFastpq:
    """pgsurge._fastpq's calls as ``engine.fastpq`` documents them, over the
    FakeConn whose ``ptr`` they are given: ints and str values are sent (a
    str encoded strictly, so that one holding surrogate-escaped bytes
    raises), any other value makes the ``*_vars``/``parts`` senders return
    ``SEND_FALLBACK`` without sending; a send on a bad connection returns
    -2; ``drain`` returns ``count * 4 + code`` or a failed result's tuple.
    ``calls`` names the calls made, in order."""

    def __init__(self) -> None:
        self.conns: dict[int, FakeConn] = {}
        self.calls: list[str] = []

    def attach(self, conn: FakeConn) -> int:
        ptr = 0x1000 + len(self.conns)
        self.conns[ptr] = conn
        return ptr

    def _sent(self, conn: FakeConn, send: Callable[[], None]) -> int:
        try:
            send()
        except pgconn.LibpqError:
            return -2
        return conn.flush()

    @staticmethod
    def _params(variables: dict[str, Any], names: tuple[str, ...]) -> Any:
        out: list[bytes | None] = []
        for name in names:
            v = variables.get(name)
            if v is None:
                out.append(None)
            elif type(v) is int:
                out.append(b"%d" % v)
            elif type(v) is str:
                out.append(v.encode())
            else:
                return None
        return out

    def send_prepared(self, ptr: int, name: bytes, params: Any) -> int:
        self.calls.append("send_prepared")
        conn = self.conns[ptr]
        return self._sent(conn, lambda: conn.send_query_prepared(name, params))

    def send_params(self, ptr: int, sql: bytes, params: Any) -> int:
        self.calls.append("send_params")
        conn = self.conns[ptr]
        return self._sent(conn, lambda: conn.send_query_params(sql, params))

    def send_query(self, ptr: int, sql: bytes) -> int:
        self.calls.append("send_query")
        conn = self.conns[ptr]
        return self._sent(conn, lambda: conn.send_query(sql))

    def send_prepared_vars(
        self, ptr: int, name: bytes, variables: dict[str, Any], names: tuple[str, ...]
    ) -> int:
        self.calls.append("send_prepared_vars")
        params = self._params(variables, names)
        if params is None:
            return fastpq.SEND_FALLBACK
        return self.send_prepared(ptr, name, params or None)

    def send_params_vars(
        self, ptr: int, sql: bytes, variables: dict[str, Any], names: tuple[str, ...]
    ) -> int:
        self.calls.append("send_params_vars")
        params = self._params(variables, names)
        if params is None:
            return fastpq.SEND_FALLBACK
        return self.send_params(ptr, sql, params or None)

    def send_query_parts(
        self, ptr: int, parts: tuple[str, ...], variables: dict[str, Any]
    ) -> int:
        self.calls.append("send_query_parts")
        text = []
        for i, part in enumerate(parts):
            if i & 1:
                v = variables.get(part)
                if v is None:
                    text.append(":" + part)
                elif type(v) is int or type(v) is str:
                    text.append(str(v))
                else:
                    return fastpq.SEND_FALLBACK
            else:
                text.append(part)
        return self.send_query(ptr, "".join(text).encode())

    def drain(self, ptr: int, count: int) -> Any:
        self.calls.append("drain")
        conn = self.conns[ptr]
        try:
            conn.consume_input()
        except pgconn.LibpqError:
            return count * 4 + fastpq.DRAIN_FAILED
        while True:
            if conn.is_busy():
                return count * 4 + fastpq.DRAIN_BUSY
            res = conn.get_result()
            if res is None:
                return count * 4 + fastpq.DRAIN_DONE
            if res.status in (pgconn.TUPLES_OK, pgconn.COMMAND_OK, pgconn.EMPTY_QUERY):
                count += 1
                continue
            return (count, res.status, res.sqlstate, res.error_message)


#: the _fastpq stand-in of the test running, None on the psycopg path
_fast: FakeFastpq | None = None

_FASTPQ_CALLS = (
    "send_prepared",
    "send_params",
    "send_query",
    "send_prepared_vars",
    "send_params_vars",
    "send_query_parts",
    "drain",
)


@pytest.fixture(autouse=True, params=["psycopg", "fastpq"])
def send_path(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> FakeFastpq | None:
    """Run the test on the psycopg path, then on the ``_fastpq`` one."""
    if request.param == "psycopg":
        return None
    fake = FakeFastpq()
    for name in _FASTPQ_CALLS:
        monkeypatch.setattr(fastpq, name, getattr(fake, name))
    monkeypatch.setattr(__name__ + "._fast", fake)
    return fake


def answers(table: dict[str, list[Answer]]) -> Callable[[bytes], Answer]:
    """Answers by the SQL text's first word: each its list in turn (the last
    one repeats); anything else succeeds (a row for a SELECT)."""
    calls: dict[str, int] = {}

    def answer(sql: bytes) -> Answer:
        text = sql.decode()
        word = text.split(None, 1)[0].rstrip(";").upper()
        if word in table:
            n = calls.get(word, 0)
            calls[word] = n + 1
            seq = table[word]
            return seq[min(n, len(seq) - 1)]
        if word == "SELECT":
            return [rows(["?column?"], (b"1",))]
        return [ok()]

    return answer


class Io:
    """The event loop's side (``IoHooks``): what the engine asked of it."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []

    def attach(self, client: Client) -> None:
        self.calls.append(("attach", client.id))

    def detach(self, client: Client) -> None:
        self.calls.append(("detach", client.id))

    def want_write(self, client: Client) -> None:
        client.flush_pending = True

    def write_done(self, client: Client) -> None:
        client.flush_pending = False


# -- a worker of one client ---------------------------------------------------


@dataclass
class Run:
    engine: Engine
    client: Client
    conn: FakeConn
    worker: WorkerState
    io: Io
    log: list[str]

    @property
    def stats(self) -> StatsData:
        return self.worker.stats

    def sent(self, call: str | None = None) -> list[Any]:
        return [s for s in self.conn.sent if call is None or s[0] == call]

    def drive(self, steps: int = 200) -> int:
        """Advance as the loop would (the socket always ready) until the
        client is done; its final state."""
        for _ in range(steps):
            self.engine.advance(self.client)
            if self.client.state in (ABORTED, FINISHED):
                return self.client.state
        raise AssertionError(f"client still in state {self.client.state}")


def worker(
    script: str,
    answer: Callable[[bytes], Answer],
    *,
    mode: QueryMode = QueryMode.SIMPLE,
    transactions: int = 1,
    max_tries: int = 1,
    verbose_errors: bool = False,
    seed: int = 5,
    reconnect: int = 0,
) -> Run:
    """One client running ``script`` ``transactions`` times, connected."""
    scripts = compile_scripts((parse_script("test", script),), mode)
    w = WorkerState(
        stats=StatsData(),
        per_script=None,
        choose_rng=PgPrng(1),
        throttle_rng=PgPrng(2),
    )
    settings = Settings(
        nclients=1,
        query_mode={QueryMode.SIMPLE: 0, QueryMode.EXTENDED: 1, QueryMode.PREPARED: 2}[
            mode
        ],
        nxacts=transactions,
        end_us=0,
        throttle_delay=0.0,
        latency_limit_us=0,
        detailed=False,
        per_command=False,
        max_tries=max_tries,
        verbose_errors=verbose_errors,
        continue_on_error=False,
        connect_each_tx=False,
        weights=(1,),
        conninfo={},
        reconnect=reconnect,
    )
    io = Io()
    log: list[str] = []
    engine = make_engine(settings, w, scripts, io, log.append)
    variables: dict[str, Any] = {"client_id": 0, "scale": 1}
    rng = PgPrng(seed)
    st = Client(0, variables, rng, EvalContext(variables, rng))
    conn = FakeConn(answer)
    st.conn = conn  # type: ignore[assignment]
    st.raw = conn
    if _fast is not None:
        st.ptr = _fast.attach(conn)
    st.ops = scripts[0]
    return Run(engine, st, conn, w, io, log)


# -- success ------------------------------------------------------------------


def test_success_runs_every_transaction() -> None:
    run = worker("SELECT 1;\nSELECT 2;\n", answers({}), transactions=3)
    assert run.drive() == FINISHED
    assert [s[1] for s in run.sent()] == [b"SELECT 1;", b"SELECT 2;"] * 3
    assert run.stats.cnt == 3 and run.stats.failures == 0
    assert run.client.cnt == 3
    assert run.log == []
    # the connection is closed and handed back at the end
    assert run.conn.finished and run.io.calls == [("detach", 0)]
    assert run.client.conn is None


def test_waits_while_the_results_have_not_arrived() -> None:
    run = worker("SELECT 1;\n", answers({}))
    run.conn.held = True
    run.engine.advance(run.client)
    assert run.client.state == WAIT_RESULT
    run.engine.advance(run.client)  # the socket woke it up, but not enough came
    assert run.client.state == WAIT_RESULT
    assert len(run.sent()) == 1  # sent once
    run.conn.held = False
    assert run.drive() == FINISHED
    assert run.stats.cnt == 1


@pytest.mark.parametrize("mode", [QueryMode.EXTENDED, QueryMode.PREPARED])
def test_parameters_in_extended_and_prepared_modes(mode: QueryMode) -> None:
    script = "\\set a 6 * 7\nSELECT :a, :a + 1, :undefined;\n"
    run = worker(script, answers({}), mode=mode, transactions=2)
    assert run.drive() == FINISHED
    params = (b"42", b"42", None)  # an undefined variable is sent as NULL
    if mode is QueryMode.EXTENDED:
        assert run.sent() == [("params", b"SELECT $1, $2 + 1, $3;", params)] * 2
    else:
        # prepared on first use only, without blocking the worker
        assert run.sent() == [
            ("prepare", b"P_0", None),
            ("prepared", b"P_0", params),
            ("prepared", b"P_0", params),
        ]
        assert run.conn.prepared == {b"P_0": b"SELECT $1, $2 + 1, $3;"}
    assert run.stats.cnt == 2


@pytest.mark.parametrize(
    ("mode", "fast_calls"),
    [
        (QueryMode.SIMPLE, ["send_query_parts", "send_query", "drain"] * 2),
        (QueryMode.EXTENDED, ["send_params_vars", "send_params", "drain"] * 2),
        # the first send prepares the statement (through psycopg, as C hands
        # that back to Python), then sends it once the prepare is done
        (QueryMode.PREPARED, ["drain", "send_prepared_vars", "send_prepared", "drain"]),
    ],
)
def test_values_only_python_formats(
    mode: QueryMode, fast_calls: list[str], send_path: FakeFastpq | None
) -> None:
    """A double is formatted by Python: on the _fastpq path the senders that
    build the values give up (SEND_FALLBACK) and the engine sends the text
    it built itself; on both paths the same text goes out."""
    script = "\\set a 3 / 2.0\nSELECT :a;\n"
    run = worker(script, answers({}), mode=mode, transactions=2)
    assert run.drive() == FINISHED
    sent = run.sent()[-1]
    if mode is QueryMode.SIMPLE:
        assert sent == ("query", b"SELECT 1.5;", None)
    else:
        assert sent[2] == (b"1.5",)
    if send_path is not None:
        assert send_path.calls == fast_calls


def test_text_not_utf8_is_sent_as_it_came(send_path: FakeFastpq | None) -> None:
    """A value holding bytes that are not UTF-8 (surrogate-escaped, from -D
    or \\gset): _fastpq's strict encoding refuses it, and the engine sends
    it through psycopg with the bytes as they are, as pgbench does."""
    run = worker("SELECT :v;\n", answers({}), mode=QueryMode.EXTENDED)
    run.client.variables["v"] = b"\xff".decode("utf-8", "surrogateescape")
    assert run.drive() == FINISHED
    assert run.sent() == [("params", b"SELECT $1;", (b"\xff",))]
    if send_path is not None:
        assert send_path.calls == ["send_params_vars", "drain"]


def test_data_left_to_flush_waits_for_writability() -> None:
    run = worker("SELECT 1;\n", answers({}))
    run.conn.left = 1  # the send's flush leaves data
    run.conn.held = True
    run.engine.advance(run.client)
    assert run.client.state == WAIT_RESULT and run.client.flush_pending
    run.conn.left = 0
    run.conn.held = False
    run.engine.advance(run.client)  # writable: flushed, then read
    assert not run.client.flush_pending
    assert run.drive() == FINISHED
    assert run.stats.cnt == 1


def test_send_failure_aborts_the_client() -> None:
    run = worker("SELECT 1;\n", answers({}))
    run.conn.bad = True
    assert run.drive() == ABORTED
    assert run.log == [
        "pgsurge: error: client 0 aborted in command 0 (SQL) of script 0; "
        "SQL command send failed\n"
    ]
    assert run.sent() == []


# -- errors and retries -------------------------------------------------------

TX = "\\set x random(1, 1000000)\nBEGIN;\nUPDATE t SET v = :x;\nEND;\n"


def test_serialization_failure_is_retried_with_the_same_draws() -> None:
    serialization = failed("40001", "could not serialize access")
    run = worker(TX, answers({"UPDATE": [[serialization], [ok()]]}), max_tries=2)
    assert run.drive() == FINISHED
    sent = [s[1] for s in run.sent()]
    update = [s for s in sent if s.startswith(b"UPDATE")]
    # rolled back, then run again from the start with the PRNG state of the
    # first try: the same value drawn
    assert sent == [b"BEGIN;", update[0], b"ROLLBACK", b"BEGIN;", update[0], b"END;"]
    assert len(update) == 2 and update[0] == update[1]
    stats = run.stats
    assert (stats.cnt, stats.retries, stats.retried, stats.failures) == (1, 1, 1, 0)
    assert run.client.ops[2].stats.retries == 1
    assert run.log == []


def test_serialization_failure_out_of_tries_is_a_failure() -> None:
    serialization = failed("40001", "could not serialize access")
    run = worker(
        TX,
        answers({"UPDATE": [[serialization], [ok()]]}),
        transactions=2,
        verbose_errors=True,
    )
    run.engine.advance(run.client)
    assert run.client.state == WAIT_ROLLBACK_RESULT  # waits for the ROLLBACK
    assert run.drive() == FINISHED
    stats = run.stats
    assert (stats.cnt, stats.serialization_failures, stats.retries) == (1, 1, 0)
    assert run.client.ops[2].stats.failures == 1
    # --verbose-errors: pgbench's lines
    assert run.log == [
        "pgsurge: client 0 got an error in command 2 (SQL) of script 0; "
        "ERROR:  could not serialize access\n",
        "pgsurge: client 0 ends the failed transaction (try 1/1)\n",
    ]


def test_deadlock_is_retried() -> None:
    deadlock = failed("40P01", "deadlock detected")
    run = worker(TX, answers({"UPDATE": [[deadlock], [deadlock], [ok()]]}), max_tries=3)
    assert run.drive() == FINISHED
    stats = run.stats
    assert (stats.cnt, stats.retries, stats.retried, stats.failures) == (1, 2, 1, 0)
    assert [s[1] for s in run.sent()].count(b"ROLLBACK") == 2


def test_deadlock_out_of_tries_is_a_failure() -> None:
    deadlock = failed("40P01", "deadlock detected")
    run = worker(TX, answers({"UPDATE": [[deadlock]]}), max_tries=2, transactions=2)
    assert run.drive() == FINISHED
    stats = run.stats
    assert (stats.cnt, stats.deadlock_failures, stats.retries) == (0, 2, 2)
    assert run.client.cnt == 2  # failed transactions count towards -t


def test_other_error_aborts_the_client() -> None:
    missing = failed("42P01", 'relation "t" does not exist')
    run = worker(TX, answers({"UPDATE": [[missing]]}), max_tries=3, transactions=5)
    assert run.drive() == ABORTED
    assert run.log == [
        "pgsurge: error: client 0 script 0 aborted in command 2 query 0: "
        'ERROR:  relation "t" does not exist\n'
    ]
    assert run.worker.abort_messages == [
        'client 0 script 0 aborted in command 2 query 0: ERROR:  relation "t" '
        "does not exist"
    ]
    assert run.stats.cnt == 0 and run.stats.failures == 0
    assert run.conn.finished


# -- a lost connection --------------------------------------------------------


def test_lost_connection_aborts_the_client() -> None:
    run = worker("SELECT 1;\nSELECT 2;\n", answers({"SELECT": [[rows(["a"])], LOST]}))
    assert run.drive() == ABORTED
    assert run.log == [
        "pgsurge: error: client 0 aborted in command 1 (SQL) of script 0; "
        "perhaps the backend died while processing\n"
    ]
    assert run.stats.cnt == 0


def test_fatal_error_then_close_reports_the_error() -> None:
    """The server sends its FATAL, then closes: that message is reported,
    as pgbench reports the error result libpq built from it."""
    fatal = failed(
        "57P01", "terminating connection due to administrator command", "FATAL"
    )
    run = worker("SELECT 1;\n", answers({"SELECT": [[fatal, CLOSE]]}), max_tries=2)
    assert run.drive() == ABORTED
    assert run.log == [
        "pgsurge: error: client 0 script 0 aborted in command 0 query 0: "
        "FATAL:  terminating connection due to administrator command\n"
    ]


@pytest.mark.parametrize(
    "lost",
    [
        LOST,
        [
            failed(
                "57P01", "terminating connection due to administrator command", "FATAL"
            ),
            CLOSE,
        ],
    ],
    ids=["silent", "fatal"],
)
def test_lost_connection_under_reconnect_is_not_an_abort(lost: Answer) -> None:
    """--reconnect: the client stops in ABORTED with its connection bad
    (engine/reconnect.py takes it from there), and says it lost its
    connection rather than pgbench's "aborted" line: it goes on."""
    run = worker(
        "SELECT 1;\nSELECT 2;\n",
        answers({"SELECT": [[rows(["a"])], lost]}),
        reconnect=10,
    )
    assert run.drive() == ABORTED
    assert run.conn.bad and run.conn.finished
    why = (
        "perhaps the backend died while processing"
        if lost == LOST
        else "FATAL:  terminating connection due to administrator command"
    )
    assert run.log == [
        f"pgsurge: client 0 lost its connection in command 1 of script 0; {why}\n"
    ]
    assert run.worker.abort_messages == [f"client 0 lost its connection; {why}"]


def test_other_error_under_reconnect_still_aborts() -> None:
    """Only a lost connection is spared: an SQL error aborts as before."""
    err = failed("42P01", 'relation "nope" does not exist')
    run = worker("SELECT 1;\n", answers({"SELECT": [[err]]}), reconnect=10)
    assert run.drive() == ABORTED
    assert run.log == [
        "pgsurge: error: client 0 script 0 aborted in command 0 query 0: "
        'ERROR:  relation "nope" does not exist\n'
    ]


# -- \gset and \aset ----------------------------------------------------------


def test_gset_stores_the_row_in_variables() -> None:
    script = (
        "SELECT 7 AS a, 'x' AS b \\gset p_\n"
        "\\set c :p_a + 1\n"
        "SELECT :c, ':p_b';\n"
        "SELECT 1 AS one \\; SELECT 2 AS two \\aset\n"
    )

    def answer(sql: bytes) -> Answer:
        if sql.startswith(b"SELECT 7"):
            return [rows(["a", "b"], (b"7", b"x"))]
        if b"\\;" in sql or b"AS one" in sql:
            return [rows(["one"], (b"1",)), rows(["two"], (b"2",))]
        return [rows(["?column?"], (b"1",))]

    run = worker(script, answer)
    assert run.drive() == FINISHED
    assert run.sent()[1] == ("query", b"SELECT 8, 'x';", None)
    variables = run.client.variables
    assert (variables["p_a"], variables["p_b"], variables["c"]) == ("7", "x", 8)
    assert (variables["one"], variables["two"]) == ("1", "2")
    assert run.stats.cnt == 1


def test_gset_of_no_row_aborts() -> None:
    run = worker("SELECT 1 AS a \\gset\n", lambda sql: [rows(["a"])])
    assert run.drive() == ABORTED
    assert run.log == [
        "pgsurge: error: client 0 script 0 command 0 query 0: expected one row, got 0\n"
    ]


# -- pipelines ----------------------------------------------------------------

PIPELINE = (
    "\\startpipeline\nSELECT 1;\nSELECT 2;\n\\syncpipeline\nSELECT 3;\n\\endpipeline\n"
)


@pytest.mark.parametrize("mode", [QueryMode.EXTENDED, QueryMode.PREPARED])
def test_pipeline(mode: QueryMode) -> None:
    run = worker(PIPELINE, answers({}), mode=mode, transactions=2)
    assert run.drive() == FINISHED
    assert run.stats.cnt == 2
    assert run.conn.pipeline_calls == ["enter", "sync", "sync", "exit"] * 2
    if mode is QueryMode.PREPARED:
        # the pipeline's statements are prepared before it starts, once
        assert [s[1] for s in run.sent("prepare")] == [b"P_0", b"P_1", b"P_2"]
        assert len(run.sent("prepared")) == 6
    else:
        assert len(run.sent("params")) == 6
    assert not run.client.in_pipeline
    assert run.log == []


def test_pipeline_error_discards_up_to_the_sync() -> None:
    script = "\\startpipeline\nSELECT 1;\nUPDATE t SET v = 1;\n\\endpipeline\n"
    serialization = failed("40001", "could not serialize access")
    run = worker(
        script,
        answers({"UPDATE": [[serialization], [ok()]]}),
        mode=QueryMode.EXTENDED,
        max_tries=2,
    )
    assert run.drive() == FINISHED
    # a new sync to discard up to, then the retry
    first = ["enter", "sync", "sync", "exit"]
    assert run.conn.pipeline_calls == [*first, "enter", "sync", "exit"]
    stats = run.stats
    assert (stats.cnt, stats.retries, stats.failures) == (1, 1, 0)


def test_pipeline_refused_in_simple_mode() -> None:
    run = worker(PIPELINE, answers({}))
    assert run.drive() == ABORTED
    assert run.log == [
        "pgsurge: error: client 0 aborted in command 0 (startpipeline) of script 0; "
        "cannot use pipeline mode with the simple query protocol\n"
    ]
    assert run.sent() == []


def test_gset_refused_in_a_pipeline() -> None:
    script = "\\startpipeline\nSELECT 1 AS a \\gset\n\\endpipeline\n"
    run = worker(script, answers({}), mode=QueryMode.EXTENDED)
    assert run.drive() == ABORTED
    assert run.log == [
        "pgsurge: error: client 0 aborted in command 1 (gset) of script 0; "
        "\\gset is not allowed in pipeline mode\n"
    ]

"""Python workloads without a server: the API, the loader, the CLI's lookups,
the compiled ops, the YCSB mixes and distributions."""

from __future__ import annotations

import io
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest

from pgsurge.cli.options import EarlyExit, parse_command_line
from pgsurge.config import QueryMode, RunConfig
from pgsurge.engine import state as C
from pgsurge.engine.fastloop import run_excluded
from pgsurge.engine.pyworkload import compile_py, reported_ops
from pgsurge.errors import PgsurgeError, UsageError
from pgsurge.prng import PgPrng
from pgsurge.prng import speedups as prng_speedups
from pgsurge.workloads.api import Context, WorkloadUsageError, split_params, sql
from pgsurge.workloads.bundled import BUNDLED
from pgsurge.workloads.loader import WorkloadError, load_file
from tests.fix_data import readme_example


def write(tmp_path: Path, text: str, name: str = "w.py") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


# -- statements ------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "parts", "n"),
    [
        ("SELECT 1", ("SELECT 1",), 0),
        ("SELECT $1", ("SELECT ", 1, ""), 1),
        ("SELECT $2, $1", ("SELECT ", 2, ", ", 1, ""), 2),
        ("SELECT '$1', $1", ("SELECT '$1', ", 1, ""), 1),
        ('SELECT "a$1", $1', ('SELECT "a$1", ', 1, ""), 1),
        ("SELECT 'it''s $1' || $1", ("SELECT 'it''s $1' || ", 1, ""), 1),
        ("SELECT $$ $1 $$, $1", ("SELECT $$ $1 $$, ", 1, ""), 1),
        ("SELECT $q$ $1 $q$, $1", ("SELECT $q$ $1 $q$, ", 1, ""), 1),
        ("SELECT 1 -- $1\n, $1", ("SELECT 1 -- $1\n, ", 1, ""), 1),
        ("SELECT /* $1 */ $1", ("SELECT /* $1 */ ", 1, ""), 1),
        ("SELECT a$1 FROM t", ("SELECT a$1 FROM t",), 0),
    ],
)
def test_split_params(text: str, parts: tuple[object, ...], n: int) -> None:
    assert split_params(text) == (parts, n)


def test_statement_call_checks_arity() -> None:
    two = sql("SELECT $1 + $2", name="two")
    assert two(1, 2) == (two, (1, 2))
    with pytest.raises(
        WorkloadUsageError,
        match=r"test_workloads.py:\d+: statement "
        r"'two' takes 2 parameters, got 1",
    ):
        two(1)


def test_fetch_default() -> None:
    assert sql("SELECT 1").fetch
    assert sql("UPDATE t SET a = 1").fetch
    assert not sql("BEGIN").fetch
    assert not sql("commit;").fetch
    assert not sql("SELECT 1", fetch=False).fetch


# -- the loader -------------------------------------------------------------

GOOD = """
from pgsurge.workloads import sql, transaction

one = sql("SELECT $1::int")
two = sql("SELECT $1::int + $2::int")
unused = sql("SELECT 3")
pair = [sql("SELECT 4"), sql("SELECT 5")]

def helper(ctx):
    return (yield two(1, 2))

@transaction(weight=3)
def first(ctx):
    yield one(1)
    yield from helper(ctx)
    yield ctx.sleep(0.001)

@transaction
def second(ctx):
    yield pair[ctx.random(0, 1)]()
"""


def test_load_collects_transactions_and_statements(tmp_path: Path) -> None:
    wl = load_file(write(tmp_path, GOOD), name="good")
    assert [t.name for t in wl.transactions] == ["first", "second"]
    first, second = wl.transactions
    assert first.weight == 3 and second.weight == 1
    assert first.source == "good: first"
    # the statements the code names come first (-r reports those)
    assert [s.name for s in first.statements[: first.nreported]] == ["one", "two"]
    assert first.uses_sleep and not second.uses_sleep
    assert [s.name for s in second.statements[: second.nreported]] == [
        "pair[0]",
        "pair[1]",
    ]
    assert len(first.statements) == 5  # every statement of the workload
    assert [c.first_line for c in first.commands] == [
        "SELECT $1::int",
        "SELECT $1::int + $2::int",
        "ctx.sleep()",
    ]


def test_compiled_layout(tmp_path: Path) -> None:
    tx = load_file(write(tmp_path, GOOD)).transactions[0]
    ops = compile_py(tx, QueryMode.PREPARED)
    kinds = [op.kind for op in ops]
    n = len(tx.statements)
    assert kinds == (
        [C.K_PY]
        + [C.K_SQL, C.K_PY] * n
        + [C.K_SLEEP, C.K_PY]
        # a batch's pipeline: \startpipeline, \endpipeline, the statements
        + [C.K_PSTART, C.K_PY, C.K_PEND, C.K_PY]
        + [C.K_SQL, C.K_PY] * n
        + [C.K_END]
    )
    assert ops[-3].gset == C.GSET_NONE and ops[2 * n + 5].gset == C.GSET_PY
    simple_kinds = [op.kind for op in compile_py(tx, QueryMode.SIMPLE)]
    # simple mode: a batch as one multi-statement query
    assert simple_kinds == [*kinds[: 2 * n + 3], C.K_SQL, C.K_PY, C.K_END]
    assert [op.first_line for op in reported_ops(ops)] == [
        c.first_line for c in tx.commands
    ]
    one = ops[1]
    assert one.names == ("$1",)
    assert one.prepname.startswith(b"PY_") and one.gset == C.GSET_PY
    simple = compile_py(tx, QueryMode.SIMPLE)[3]
    assert simple.parts == ("SELECT ", "$1", "::int + ", "$2", "::int")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "x = (\n",
            r"w.py:1: syntax error in workload file: '\(' was never closed\n"
            r"    x = \(\n    +\^",
        ),
        (
            "def f():\n    return 1 / 0\nf()\n",
            r"w.py: the workload file failed to load:\nTraceback \(most recent call "
            r'last\):\n  File ".*w.py", line 3, in <module>\n.*\n  File ".*w.py", '
            r"line 2, in f\n.*\n.*\nZeroDivisionError: division by zero",
        ),
        ("from pgsurge.workloads import sql\nx = sql('SELECT 1')\n", "defines no"),
        # sys.exit() while importing ended pgsurge silently with its status
        (
            "import sys\nsys.exit(3)\n",
            r"w.py: the workload file failed to load:\nTraceback \(most recent call "
            r'last\):\n  File ".*w.py", line 2, in <module>\n.*\nSystemExit: 3',
        ),
        (
            "from pgsurge.workloads import transaction\n"
            "@transaction\ndef t(ctx):\n    return 1\n",
            r'w.py:2: transaction "t" is not a generator function',
        ),
    ],
)
def test_bad_workload_files(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(WorkloadError) as info:
        load_file(write(tmp_path, text))
    formatted = info.value.format()
    assert formatted.startswith("pgsurge: error: ")
    assert "pgsurge/workloads" not in formatted  # no frame of ours
    import re

    assert re.search(message, formatted, re.DOTALL), formatted


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(PgsurgeError, match="could not open file"):
        parse_command_line(["-f", str(tmp_path / "none.py")], environ={})


# -- the command line -------------------------------------------------------


def run_config(*args: str) -> RunConfig:
    cfg = parse_command_line(list(args), environ={}, stderr=io.StringIO())
    assert isinstance(cfg, RunConfig)
    return cfg


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        # every name pgbench accepts keeps its meaning
        ("t", "tpcb-like"),
        ("tp", "tpcb-like"),
        ("tpc", "tpcb-like"),
        ("tpcb", "tpcb-like"),
        ("si", "simple-update"),
        ("se", "select-only"),
        # then the Python workloads
        ("py-tpcb", "py-tpcb: tpcb_like"),
        ("py", "py-tpcb: tpcb_like"),
        ("tpcc", "tpcc-like: new_order"),
        ("ycsb-c", "ycsb-c: read"),
    ],
)
def test_builtin_lookup(name: str, expected: str) -> None:
    assert run_config("-b", name).scripts[0].name == expected


def test_builtin_lookup_errors() -> None:
    with pytest.raises(
        UsageError,
        match='ambiguous builtin name: 6 builtin scripts found for prefix "ycsb"',
    ):
        run_config("-b", "ycsb")
    with pytest.raises(UsageError, match="ambiguous builtin name: 2"):
        run_config("-b", "s")  # pgbench's error, pgbench's list
    with pytest.raises(UsageError, match="no builtin script found"):
        run_config("-b", "nope")


def test_builtin_list_adds_the_workloads() -> None:
    err = io.StringIO()
    with pytest.raises(EarlyExit):
        parse_command_line(["-b", "list"], environ={}, stderr=err)
    lines = err.getvalue().splitlines()
    assert lines[1:4] == [
        "      tpcb-like: <builtin: TPC-B (sort of)>",
        "  simple-update: <builtin: simple update>",
        "    select-only: <builtin: select only>",
    ]
    assert [line.split(":")[0].strip() for line in lines[4:-1]] == [
        b.name for b in BUNDLED
    ]
    assert lines[-1] == ""


def test_weights_and_mixing(tmp_path: Path) -> None:
    cfg = run_config("-f", write(tmp_path, GOOD) + "@2", "-b", "select-only@5")
    assert [(s.python, s.weight) for s in cfg.scripts] == [
        (True, 6),
        (True, 2),
        (False, 5),
    ]
    assert run_excluded(cfg) == "Python workload"


def test_init_with_a_workload() -> None:
    cfg = parse_command_line(["-i", "-b", "ycsb-a", "-s", "2"], environ={})
    assert not isinstance(cfg, RunConfig)
    assert cfg.workload is not None and cfg.workload.name == "ycsb-a"
    assert cfg.scale == 2
    with pytest.raises(UsageError, match="cannot be used in initialization"):
        parse_command_line(["-i", "-b", "tpcb-like"], environ={})


def test_every_bundled_workload_loads() -> None:
    for b in BUNDLED:
        wl = load_file(b.path, name=b.name)
        assert wl.transactions, b.name
        for tx in wl.transactions:
            assert tx.nreported > 0, (b.name, tx.name)


# -- YCSB: mixes and distributions -------------------------------------------

YCSB_MIXES = {
    "ycsb-a": {"read": 0.5, "update": 0.5},
    "ycsb-b": {"read": 0.95, "update": 0.05},
    "ycsb-c": {"read": 1.0},
    "ycsb-d": {"read": 0.95, "insert": 0.05},
    "ycsb-e": {"scan": 0.95, "insert": 0.05},
    "ycsb-f": {"read": 0.5, "read_modify_write": 0.5},
}


@pytest.mark.parametrize("name", sorted(YCSB_MIXES))
def test_ycsb_mix_over_100k_operations(name: str) -> None:
    """The engine's weighted choice (tx.choose_script, the worker's stream)
    over 100k operations stays within 2 % of the definition."""
    from pgsurge.engine.state import Settings, Support, WorkerState
    from pgsurge.engine.tx import make_tx
    from pgsurge.stats.counters import StatsData

    cfg = run_config("-b", name)
    weights = tuple(s.weight for s in cfg.scripts)
    names = [s.name.split(": ")[1] for s in cfg.scripts]
    settings = Settings(
        nclients=1, query_mode=0, nxacts=1, end_us=0, throttle_delay=0.0,
        latency_limit_us=0, detailed=False, per_command=False, max_tries=1,
        verbose_errors=False, continue_on_error=False, connect_each_tx=False,
        weights=weights, conninfo={},
    )  # fmt: skip
    w = WorkerState(StatsData(), None, PgPrng(42), PgPrng(43))
    steps = SimpleNamespace(flush_sent=None, discard_until_sync=None)
    tx = make_tx(settings, w, len(weights), None, Support(w, print), steps)  # type: ignore[arg-type]
    counts = Counter(names[tx.choose_script()] for _ in range(100_000))
    for op, share in YCSB_MIXES[name].items():
        assert abs(counts[op] / 100_000 - share) <= 0.02, (op, counts)


def test_ycsb_zipfian_skew() -> None:
    from pgsurge.workloads.bundled._ycsb import choose_key

    ctx = Context(PgPrng(1), {"scale": 1, "default_seed": 0}, 0)
    n = 100_000
    keys = Counter(choose_key(ctx, n) for _ in range(100_000))
    assert all(1 <= k <= n for k in keys)
    top = keys.most_common(10)
    # uniform would give each key about one hit; zipfian's hottest key
    # takes several percent of the requests, and hot keys are scattered
    assert top[0][1] > 2_000
    assert sum(c for _, c in top) > 10_000
    assert top[0][0] != 1


def test_readme_example_loads(tmp_path: Path) -> None:
    wl = load_file(write(tmp_path, readme_example(), "transfer.py"))
    assert [(t.name, t.weight) for t in wl.transactions] == [
        ("transfer", 8),
        ("open_or_touch", 1),
        ("audit", 1),
    ]
    assert wl.setup is not None and wl.scale_query
    transfer, _open_or_touch, audit = wl.transactions
    assert [s.name for s in transfer.statements[: transfer.nreported]] == [
        "begin",
        "balance",
        "move",
        "commit",
    ]
    assert audit.uses_sleep


def test_show_script_of_a_workload() -> None:
    err = io.StringIO()
    with pytest.raises(EarlyExit):
        parse_command_line(["--show-script=py-tpcb"], environ={}, stderr=err)
    assert err.getvalue().startswith("-- py-tpcb: <python: TPC-B (sort of)>\n")
    assert "def tpcb_like(ctx" in err.getvalue()
    err = io.StringIO()
    with pytest.raises(EarlyExit):
        parse_command_line(["--show-script=tpc"], environ={}, stderr=err)
    assert err.getvalue().startswith("-- tpcb-like: <builtin: TPC-B (sort of)>")


def test_py_tpcb_reports_every_statement() -> None:
    """Statement calls made once (BEGIN = begin()) still count as named."""
    b = next(b for b in BUNDLED if b.name == "py-tpcb")
    (tx,) = load_file(b.path, name=b.name).transactions
    rows = [c.first_line for c in tx.commands]
    assert len(rows) == 7 and rows[0] == "BEGIN" and rows[-1] == "END"


#: the C pieces of workloads (RangeDraw, StatementCall) are in _speedups:
#: the lane without C extensions (PGSURGE_PURE) has none, and
#: tests/unit/test_speedups.py fails when a compiler could have built it
needs_speedups = pytest.mark.skipif(
    prng_speedups is None, reason="pgsurge._speedups not built"
)


@needs_speedups
def test_ctx_random_in_c_draws_and_fails_as_python() -> None:
    """Context.random is a C method of its base, _speedups.ContextBase (a
    method of the class, no Python frame), drawing in C from a C PgPrng
    and with Context._random from any other: the same draws and the same
    errors as the Python method, keywords and random_uniform included."""
    from pgsurge.errors import EvalError
    from pgsurge.prng import PgPrng, PurePgPrng
    from pgsurge.workloads.api import Context

    fast, slow = Context(PgPrng(5), {}, 0), Context(PurePgPrng(5), {}, 0)
    assert Context.random.__qualname__ == "ContextBase.random"
    assert "random" not in vars(fast)  # looked up on the class
    cases = [(1, 10**6), (5, 5), (-(2**63), -(2**63) + 3), (1, 2**63 - 1), (0, 1)]
    for lo, hi in cases * 50:
        assert fast.random(lo, hi) == slow.random(lo, hi)
        assert fast.random_uniform(lo, hi) == slow.random_uniform(lo, hi)
    assert fast.random(lo=3, hi=9) == slow.random(lo=3, hi=9)
    assert (fast._rng.s0, fast._rng.s1) == (slow._rng.s0, slow._rng.s1)
    for odd in [(3, 1), (0, 2**63 - 1), (1.5, 2), (1, 2**64), (True, 3)] * 2:
        got = []
        for ctx in (fast, slow):
            try:
                got.append(ctx.random(*odd))  # type: ignore[arg-type]
            except (EvalError, TypeError, OverflowError) as e:
                got.append((type(e), str(e)))
        assert got[0] == got[1], odd


@needs_speedups
def test_statement_call_in_c_checks_its_arity() -> None:
    """A statement's call (the C base): (statement, args), and a wrong
    count names the caller's line."""
    from pgsurge.workloads.api import WorkloadUsageError, sql

    s = sql("SELECT $1, $2")
    assert type(s).__mro__[1].__name__ == "StatementCall"
    assert s(1, "x") == (s, (1, "x"))
    with pytest.raises(
        WorkloadUsageError,
        match=r"test_workloads.py:\d+: statement .* takes 2 parameters, got 1",
    ):
        s(1)

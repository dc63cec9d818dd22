"""pgsurge.insight without a server: classification, the wait profile and
its pg_wait_sampling differences, counter deltas, the options, the text
blocks and the JSON sections."""

from __future__ import annotations

import io
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from pgsurge import pgconn
from pgsurge.cli.options import parse_command_line
from pgsurge.config import IdleMode, RunConfig
from pgsurge.insight import counters
from pgsurge.insight.counters import SOURCES, Snapshot
from pgsurge.insight.own import canonical
from pgsurge.insight.pooladmin import pool_point, stats_point
from pgsurge.insight.sampling import ActivitySampler, ProfileSampler, pg_array
from pgsurge.insight.waits import (
    CLIENT_READ,
    CLIENT_READ_IN_XACT,
    CPU,
    WaitProfile,
    classify_background,
    classify_own,
    label_text,
)
from pgsurge.report.insight import insight_warnings, render_insight
from pgsurge.report.json import build_document, load_schema
from tests.fix_cli import run_cli
from tests.fix_data import config, make_result, write_result

SECOND = 1_000_000
SRC = {s.name: s for s in SOURCES}

# -- classification -----------------------------------------------------------


@pytest.mark.parametrize(
    ("state", "wtype", "wevent", "label"),
    [
        ("active", "", "", CPU),
        ("active", "Lock", "relation", ("Lock", "relation")),
        ("active", "LWLock", "WALInsert", ("LWLock", "WALInsert")),
        ("idle", "Client", "ClientRead", CLIENT_READ),
        ("idle in transaction", "Client", "ClientRead", CLIENT_READ_IN_XACT),
        ("idle in transaction", "", "", CLIENT_READ_IN_XACT),
        ("idle in transaction (aborted)", "", "", CLIENT_READ_IN_XACT),
        ("idle", "", "", CLIENT_READ),
        ("active", "Client", "ClientWrite", ("Client", "ClientWrite")),
        ("", "", "", CPU),
    ],
)
def test_classify_own(state: str, wtype: str, wevent: str, label: Any) -> None:
    assert classify_own(state, wtype, wevent) == label


def test_classify_background() -> None:
    assert classify_background("walwriter", "Activity", "WalWriterMain") is None
    assert classify_background("checkpointer", "", "") == ("checkpointer", "CPU", "")
    assert classify_background("io worker", "IO", "DataFileRead") == (
        "io worker",
        "IO",
        "DataFileRead",
    )
    assert label_text(CPU) == "CPU" and label_text(CLIENT_READ) == "Client:ClientRead"


# -- the profile -----------------------------------------------------------------


def test_profile_shares_sessions_and_series() -> None:
    p = WaitProfile(anchor_us=10 * SECOND, interval_us=SECOND)
    lock = ("Lock", "relation")
    # 4 samples of 4 backends in the first second, 2 in the next
    for k in range(4):
        p.add_rows(10 * SECOND + k * 250_000, [lock, lock, lock, CPU], [])
    for k in range(2):
        p.add_rows(
            11 * SECOND + k * 500_000,
            [CLIENT_READ] * 4,
            [("checkpointer", "IO", "DataFileWrite")],
        )
    s = p.summary()
    assert s["samples"] == 24 and s["ticks"] == 6
    events = {(e["type"], e["event"]): e for e in s["events"]}
    assert events[lock]["share"] == pytest.approx(12 / 24)
    assert events[lock]["aas"] == pytest.approx(2.0)
    assert [e["share"] for e in s["events"]] == sorted(
        (e["share"] for e in s["events"]), reverse=True
    )
    assert s["client_wait_share"] == pytest.approx(8 / 24)
    assert s["background"] == [
        {
            "backend_type": "checkpointer",
            "type": "IO",
            "event": "DataFileWrite",
            "samples": 2,
            "aas": pytest.approx(2 / 6),
        }
    ]
    points = p.interval_points()
    assert [t for t, _ in points] == [10 * SECOND, 11 * SECOND]
    assert points[0][1] == {
        "CPU": 0.25,
        "Client:ClientRead": 0.0,
        "Lock:relation": 0.75,
    }
    assert points[1][1]["Client:ClientRead"] == 1.0
    # -P: since the previous call, then empty
    recent = p.take_recent()
    assert recent[0] == (lock, 0.5)
    assert p.take_recent() == []


def test_profile_other_in_series() -> None:
    p = WaitProfile(anchor_us=0, interval_us=SECOND)
    events = [("LWLock", f"E{i}") for i in range(7)]
    p.add_rows(1, events, [])
    ((_, shares),) = p.interval_points()
    assert shares["other"] == pytest.approx(2 / 7)
    assert sum(shares.values()) == pytest.approx(1.0)


# -- the samplers, on a stand-in connection ------------------------------------------


class FakeResult:
    def __init__(self, rows: Sequence[Sequence[Any]]) -> None:
        self.rows = [[None if v is None else str(v).encode() for v in r] for r in rows]
        self.ntuples = len(rows)

    def get_value(self, row: int, col: int) -> bytes | None:
        return self.rows[row][col]


class FakeConn:
    """Answers each exec_prepared with the next of ``answers``."""

    def __init__(self, answers: list[Sequence[Sequence[Any]]]) -> None:
        self.answers = answers
        self.prepared: list[bytes] = []

    def prepare(self, name: bytes, sql: bytes) -> None:
        self.prepared.append(name)

    def exec_prepared(
        self, name: bytes, params: Sequence[str | None]
    ) -> tuple[int, Any]:
        return pgconn.TUPLES_OK, FakeResult(self.answers.pop(0))


def test_activity_sampler_splits_own_and_background() -> None:
    rows = [
        (11, "active", "Lock", "relation", "client backend"),
        (12, "idle", "Client", "ClientRead", "client backend"),
        (99, "", "Activity", "WalWriterMain", "walwriter"),
        (98, "", "IO", "WalSync", "walwriter"),
    ]
    conn = FakeConn([rows])
    s = ActivitySampler(conn, (11, 12), None, (), True)  # type: ignore[arg-type]
    s.prepare()
    p = WaitProfile(anchor_us=0, interval_us=SECOND)
    s.sample(p)
    assert p.total.counts == {("Lock", "relation"): 1, CLIENT_READ: 1}
    assert p.background == {("walwriter", "IO", "WalSync"): 1}
    assert s.params[0] == "{11,12}" and s.params[3] == "true"
    assert p.query_count == 1


def test_profile_sampler_differences_and_reset() -> None:
    first = [
        (11, "Lock", "relation", "client backend", 50),
        (11, "", "", "client backend", 5),
    ]
    second = [
        (11, "Lock", "relation", "client backend", 80),  # +30
        (11, "", "", "client backend", 2),  # reset by someone: 2 since
        (12, "Client", "ClientRead", "client backend", 4),  # new: +4
        (99, "LWLock", "WALWrite", "walwriter", 7),
    ]
    conn = FakeConn([first, second])
    s = ProfileSampler(conn, (11, 12), True, 10.0)  # type: ignore[arg-type]
    s.prepare()
    s.last_us -= 500_000  # half a second ago: 50 ticks of 10 ms
    p = WaitProfile(anchor_us=0, interval_us=SECOND)
    s.sample(p)
    assert p.total.counts == {("Lock", "relation"): 30, CPU: 2, CLIENT_READ: 4}
    assert p.background == {("walwriter", "LWLock", "WALWrite"): 7}
    assert p.total.ticks == pytest.approx(50, rel=0.05)


def test_pg_array() -> None:
    assert pg_array([]) == "{}" and pg_array([1, 22]) == "{1,22}"


# -- counters -------------------------------------------------------------------------


def test_delta_counters_levels_and_new_rows() -> None:
    src = SRC["tables"]
    start = [
        {
            "schemaname": "public",
            "relname": "a",
            "relid": 1,
            "n_tup_upd": 10,
            "n_dead_tup": 3,
            "last_vacuum": None,
        }
    ]
    end = [
        {
            "schemaname": "public",
            "relname": "a",
            "relid": 1,
            "n_tup_upd": 25,
            "n_dead_tup": 9,
            "last_vacuum": "x",
        },
        {
            "schemaname": "public",
            "relname": "b",
            "relid": 2,
            "n_tup_upd": 4,
            "n_dead_tup": 0,
        },
        {
            "schemaname": "public",
            "relname": "c",
            "relid": 3,
            "n_tup_upd": 0,
            "n_dead_tup": 5,
        },
    ]
    out = counters.delta(src, start, end)
    assert out == [
        {"schemaname": "public", "relname": "a", "n_tup_upd": 15, "n_dead_tup": 9},
        {"schemaname": "public", "relname": "b", "n_tup_upd": 4, "n_dead_tup": 0},
    ]


@pytest.mark.parametrize(
    ("rows", "expected"),
    [
        ({"checkpointer": [{"num_timed": 5, "num_requested": 2, "num_done": 4}]}, 4),
        ({"checkpointer": [{"num_timed": 5, "num_requested": 2}]}, 7),
        ({"bgwriter": [{"checkpoints_timed": 1, "checkpoints_req": 1}]}, 2),
        ({"bgwriter": [{"buffers_clean": 1}]}, None),
        ({}, None),
    ],
)
def test_checkpoints(rows: dict[str, Any], expected: float | None) -> None:
    assert counters.checkpoints(rows) == expected


def snap(t: int, **rows: list[dict[str, Any]]) -> Snapshot:
    return Snapshot(t, dict(rows))


def test_run_deltas_per_transaction_and_intervals() -> None:
    sources = [SRC[n] for n in ("database", "wal", "checkpointer", "statements")]
    a = snap(
        0,
        database=[{"datid": 5, "xact_commit": 100, "blks_read": 10, "blks_hit": 90}],
        wal=[
            {
                "wal_records": 1000,
                "wal_fpi": 1,
                "wal_bytes": 50_000,
                "stats_reset": "t0",
            }
        ],
        checkpointer=[{"num_timed": 1, "num_requested": 0, "num_done": 1}],
        statements=[
            {
                "userid": 1,
                "queryid": 7,
                "toplevel": True,
                "calls": 1,
                "total_exec_time": 1.0,
                "query": "q7",
            }
        ],
    )
    b = snap(
        1,
        database=[{"datid": 5, "xact_commit": 300, "blks_read": 30, "blks_hit": 270}],
        wal=[
            {
                "wal_records": 3000,
                "wal_fpi": 3,
                "wal_bytes": 150_000,
                "stats_reset": "t0",
            }
        ],
        checkpointer=[{"num_timed": 2, "num_requested": 0, "num_done": 2}],
        statements=[
            {
                "userid": 1,
                "queryid": 7,
                "toplevel": True,
                "calls": 11,
                "total_exec_time": 5.0,
                "query": "q7",
            },
            {
                "userid": 1,
                "queryid": 8,
                "toplevel": True,
                "calls": 2,
                "total_exec_time": 9.0,
                "query": "q8",
            },
        ],
    )
    deltas = counters.run_deltas(a, b, sources)
    assert deltas["database"] == {"xact_commit": 200, "blks_read": 20, "blks_hit": 180}
    assert [s["query"] for s in deltas["statements"]] == ["q8", "q7"]
    assert deltas["statements"][1]["mean_exec_time_ms"] == pytest.approx(0.4)
    per = counters.per_transaction(
        {k: [v] if isinstance(v, dict) else v for k, v in deltas.items()}, 200
    )
    assert per["wal_bytes"] == 500 and per["wal_fpi"] == 0.01
    assert per["blks_read"] == 0.1 and per["hit_ratio"] == pytest.approx(0.9)
    figures = counters.interval_figures(a, b, sources)
    assert figures["wal_bytes"] == 100_000 and figures["checkpoints"] == 1
    assert "statements" not in figures
    assert counters.resets(a, b) == []
    c = snap(2, wal=[{"wal_bytes": 1, "stats_reset": "t1"}])
    assert counters.resets(a, c) == ["wal"]


@pytest.mark.parametrize(
    ("ours", "stored"),
    [
        # PostgreSQL 18 keeps no leading comment; constants become $n
        (
            "/* pgsurge monitor */ SELECT count(*) FROM t WHERE a = 'x' AND b = 3",
            "SELECT count(*) FROM t WHERE a = $1 AND b = $2",
        ),
        (
            "SET LOCAL stats_fetch_consistency = 'snapshot'",
            "SET LOCAL x = $1"[:0] + "SET LOCAL stats_fetch_consistency = $1",
        ),
        ("SELECT $1::int8,\n  $2::text", "select $1::int8, $2::text"),
    ],
)
def test_canonical_matches_the_views_text(ours: str, stored: str) -> None:
    assert canonical(ours) == canonical(stored)
    assert canonical("SELECT a1 FROM t2") != canonical("SELECT a FROM t")


def _stmt(queryid: int | None, query: str, calls: int) -> dict[str, Any]:
    return {
        "userid": 10,
        "queryid": queryid,
        "toplevel": True,
        "query": query,
        "calls": calls,
        "total_exec_time": calls * 0.1,
    }


def test_statements_hidden_and_own_left_out() -> None:
    src = [SRC["statements"]]
    start = Snapshot(
        0,
        {
            "statements": [
                _stmt(None, "<insufficient privilege>", 5),
                _stmt(None, "<insufficient privilege>", 900),
                _stmt(1, "SELECT 1", 10),
            ]
        },
    )
    end = Snapshot(
        SECOND,
        {
            "statements": [
                _stmt(None, "<insufficient privilege>", 7),
                _stmt(None, "<insufficient privilege>", 950),
                _stmt(1, "SELECT 1", 30),
                _stmt(2, "SELECT pg_catalog.version()", 3),
            ]
        },
    )
    out = counters.run_deltas(start, end, src, lambda q: "version" in q)
    assert [(r["queryid"], r["calls"]) for r in out["statements"]] == [(1, 20)]
    assert counters.hidden_statements(end) == 2
    # without the filter the own statement is there, the hidden ones never
    out = counters.run_deltas(start, end, src)
    assert sorted(r["queryid"] for r in out["statements"]) == [1, 2]


def test_touched_tables() -> None:
    names = counters.touched_tables(
        ["UPDATE pgbench_accounts SET x = :aid;", "\\set aid 1"]
    )
    assert "pgbench_accounts" in names and "aid" in names and "update" in names


# -- options ---------------------------------------------------------------------


def run(*args: str) -> RunConfig:
    cfg = parse_command_line(list(args), environ={}, stderr=io.StringIO())
    assert isinstance(cfg, RunConfig)
    return cfg


def test_option_values() -> None:
    cfg = run()
    assert (cfg.waits_ms, cfg.server_stats, cfg.idle_sessions, cfg.insight) == (
        None,
        False,
        0,
        False,
    )
    assert run("--waits").waits_ms == 100
    assert run("--waits=20").waits_ms == 20
    assert run("--waits", "mydb").conn.dbname == "mydb"  # never the next word
    assert run("--server-stats").server_stats
    cfg = run("--idle-sessions", "3")
    assert (cfg.idle_sessions, cfg.idle_mode, cfg.insight) == (3, IdleMode.IDLE, True)
    cfg = run("--idle-sessions=1:snapshot")
    assert (cfg.idle_sessions, cfg.idle_mode) == (1, IdleMode.SNAPSHOT)
    assert run("--idle-sessions=2:xact").idle_mode is IdleMode.XACT


@pytest.mark.parametrize(
    ("args", "stderr"),
    [
        (["--waits=0"], "pgsurge: error: --waits must be in range 1..60000\n"),
        (["--waits=x"], 'pgsurge: error: invalid value "x" for option --waits\n'),
        (
            ["--idle-sessions=0"],
            "pgsurge: error: --idle-sessions must be in range 1..1000\n",
        ),
        (
            ["--idle-sessions=2:busy"],
            'pgsurge: error: invalid value "2:busy" for option --idle-sessions\n'
            "pgsurge: detail: The mode is one of idle, xact, snapshot.\n",
        ),
        (
            ["--server-stats=1"],
            "pgsurge: option '--server-stats' doesn't allow an argument\n",
        ),
    ],
)
def test_option_errors(args: list[str], stderr: str) -> None:
    result = run_cli(args)
    assert result.status == 1 and result.stderr.startswith(stderr)


@pytest.mark.parametrize("opt", ["--waits", "--server-stats", "--idle-sessions=1"])
def test_run_mode_only(opt: str) -> None:
    result = run_cli(["-i", opt])
    assert result.status == 1
    assert "cannot be used in initialization (-i) mode" in result.stderr


# -- text and JSON ------------------------------------------------------------------


def sections() -> dict[str, Any]:
    p = WaitProfile(anchor_us=10 * SECOND, interval_us=SECOND)
    p.add_rows(
        10 * SECOND,
        [("Lock", "relation")] * 3 + [CLIENT_READ],
        [("walwriter", "IO", "WalWrite")],
    )
    p.add_rows(11 * SECOND, [CPU] * 4, [])
    waits = {
        "source": "pg_stat_activity",
        "period_ms": 100.0,
        "attribution": "pids",
        "backends": 4,
        "background_sampled": True,
        **p.summary(),
    }
    return {
        "waits": waits,
        "server_stats": {
            "server_version": "PostgreSQL 18.6",
            "server_version_num": 180006,
            "elapsed_s": 3.2,
            "transactions": 100,
            "per_transaction": {
                "wal_bytes": 612.5,
                "wal_fpi": 0.01,
                "blks_read": 0.5,
                "blks_hit": 30.0,
                "hit_ratio": 0.98,
            },
            "checkpoints": 1,
            "checkpoint_during_run": True,
            "stats_reset_during_run": [],
            "deltas": {
                "database": {"xact_commit": 104, "xact_rollback": 0},
                "wal": {"wal_bytes": 61250, "wal_records": 1000, "wal_fpi": 1},
                "tables": [
                    {
                        "schemaname": "public",
                        "relname": "t",
                        "n_tup_upd": 100,
                        "n_dead_tup": 7,
                    }
                ],
            },
            "unavailable": {},
            "tables": ["public.t"],
            "settings": [
                {
                    "name": "shared_buffers",
                    "setting": "16384",
                    "unit": "8kB",
                    "source": "configuration file",
                }
            ],
        },
        "idle_sessions": {
            "count": 1,
            "mode": "snapshot",
            "description": "d",
            "pids": [5],
        },
        "intervals": [
            {
                "start_us": 10 * SECOND,
                "waits": {"CPU": 0.5, "other": 0.5},
                "server_stats": {"wal_bytes": 5.0},
            },
        ],
    }


def test_render_insight_text() -> None:
    text = render_insight(sections())
    lines = text.splitlines()
    assert lines[0].startswith(
        "wait events of 4 backends (pg_stat_activity every 100 ms: 8 samples;"
    )
    assert lines[1] == "   share  sessions  event"
    assert lines[2] == "   50.0%      2.00  CPU"
    assert lines[3] == "   37.5%      1.50  Lock:relation"
    assert lines[4] == (
        "   12.5%      0.50  Client:ClientRead"
        " (idle: waiting for the client to start a transaction)"
    )
    assert "background processes (average busy): walwriter IO:WalWrite 0.50" in lines
    assert (
        "  per transaction: 612.5 WAL bytes, 0.010 FPI, 0.500 buffer reads, "
        "30.0 buffer hits (hit ratio 98.00%)" in lines
    )
    assert (
        "  public.t: 0 inserted, 100 updated (0 HOT), 0 deleted; "
        "7 dead tuples at the end" in lines
    )
    assert render_insight({}) == ""
    assert "a checkpoint ran during the measurement" in insight_warnings(
        sections(), "pgsurge"
    )
    assert insight_warnings({"waits": {}}, "pgsurge") == ""


def test_json_document_carries_the_sections() -> None:
    result = make_result()
    result.insight = sections()
    doc = build_document(
        result,
        config(
            waits_ms=100,
            server_stats=True,
            idle_sessions=1,
            idle_mode=IdleMode.SNAPSHOT,
        ),
    )
    jsonschema.Draft202012Validator(load_schema()).validate(doc)
    assert doc["waits"]["events"][0]["type"] == "CPU"
    assert doc["idle_sessions"]["mode"] == "snapshot"
    assert "intervals" not in doc["server_stats"]
    first = doc["intervals"][0]
    assert first["waits"] == {"CPU": 0.5, "other": 0.5}
    assert first["server_stats"] == {"wal_bytes": 5.0}
    assert all("waits" not in iv for iv in doc["intervals"][1:])
    assert doc["config"]["waits_ms"] == 100 and doc["config"]["idle_mode"] == "snapshot"
    # without the options: nothing added but the config keys
    plain = build_document(make_result(), config())
    assert not {"waits", "server_stats", "idle_sessions"} & set(plain)
    assert plain["config"]["idle_mode"] is None


def test_html_compare_shows_both_sides_waits() -> None:
    from pgsurge.report.html import RunDoc, render_html

    def doc(lock_share: float) -> dict[str, Any]:
        result = make_result()
        result.insight = sections()
        d = build_document(result, config())
        d["waits"]["events"] = [
            {"type": "Lock", "event": "relation", "share": lock_share},
            {"type": "CPU", "event": "", "share": 1 - lock_share},
        ]
        return d

    page = render_html(
        [
            RunDoc("a1", doc(0.8), "A"),
            RunDoc("a2", doc(0.6), "A"),
            RunDoc("b1", doc(0.1), "B"),
        ]
    )
    assert "Wait events: A and B (--waits)" in page
    row = page[page.index("<td>Lock:relation</td>") :].split("</tr>")[0]
    assert "70.0%" in row and "10.0%" in row and "-60.0 pt" in row.replace("−", "-")


def test_compare_shows_both_sides_waits(tmp_path: Path) -> None:
    def waits(lock: float) -> dict[str, Any]:
        events = [
            {"type": "Lock", "event": "relation", "share": lock},
            {"type": "CPU", "event": "", "share": 1 - lock},
        ]
        return {"source": "pg_stat_activity", "samples": 10, "events": events}

    base = [
        write_result(
            tmp_path / f"b{i}.json", 1000 + i, seq=i, edit={"waits": waits(0.8)}
        )
        for i in range(3)
    ]
    new = [
        write_result(
            tmp_path / f"n{i}.json", 1100 + i, seq=i, edit={"waits": waits(0.2)}
        )
        for i in range(3)
    ]
    r = run_cli(["compare", *base, "--vs", *new])
    assert r.status == 0, r.stderr
    text = r.stdout[r.stdout.index("wait events (share of samples") :]
    rows = [re.sub(r" {2,}", "  ", ln.strip()) for ln in text.splitlines()[1:]]
    assert rows[0] == "wait event  base  new  change"
    # equal largest shares (80 %): by name
    assert rows[1] == "CPU  20.0 %  80.0 %  +60.0 pt"
    assert rows[2] == "Lock:relation  80.0 %  20.0 %  -60.0 pt"
    # without --waits on one side: no such block
    r = run_cli(["compare", *base, "--vs", *_plain(tmp_path)])
    assert "wait events" not in r.stdout


def _plain(tmp_path: Path) -> list[str]:
    return [write_result(tmp_path / f"p{i}.json", 1000 + i, seq=i) for i in range(3)]


def test_pooler_console_points() -> None:
    rows = [
        {
            "database": "bench",
            "user": "a",
            "cl_active": "3",
            "cl_waiting": "2",
            "sv_active": "3",
            "sv_idle": "1",
            "sv_used": "0",
            "maxwait": "1",
            "maxwait_us": "500000",
            "pool_mode": "transaction",
        },
        {
            "database": "bench",
            "user": "b",
            "cl_active": "1",
            "cl_waiting": "0",
            "sv_active": "1",
            "sv_idle": "0",
            "sv_used": "2",
            "maxwait": "0",
            "maxwait_us": "2000",
            "pool_mode": "transaction",
        },
        {
            "database": "other",
            "user": "a",
            "cl_active": "50",
            "cl_waiting": "9",
            "sv_active": "9",
            "sv_idle": "0",
            "sv_used": "0",
            "maxwait": "9",
            "maxwait_us": "0",
            "pool_mode": "session",
        },
    ]
    point = pool_point(rows, "bench")
    assert point == {
        "cl_active": 4.0,
        "cl_waiting": 2.0,
        "sv_active": 4.0,
        "sv_idle": 1.0,
        "sv_used": 2.0,
        "maxwait_ms": 1500.0,
    }
    before = {"total_xact_count": 10, "total_query_count": 20, "total_wait_time": 0}
    after = {"total_xact_count": 110, "total_query_count": 320, "total_wait_time": 5000}
    assert stats_point(before, after) == {
        "xacts": 100.0,
        "queries": 300.0,
        "wait_ms_per_xact": 0.05,
    }
    assert stats_point(after, after)["wait_ms_per_xact"] == 0.0
    text = render_insight(
        {
            "pooler_admin": {
                "database": "bench",
                "pool_mode": "transaction",
                "reads": 3,
                "xacts": 100,
                "queries": 300,
                "wait_ms_per_xact": 0.05,
                "max_cl_waiting": 2,
                "max_sv_active": 4,
                "max_wait_ms": 1500.0,
            }
        }
    )
    assert text.startswith("pooler console (database bench, transaction pooling, 3")
    assert "up to 2 clients waiting" in text

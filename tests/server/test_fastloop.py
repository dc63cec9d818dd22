"""The C event loop (pgsurge._fastloop) against the Python engine, on a real server.

Each test runs pgsurge twice with the same arguments, once with the C loop
(under ``PGSURGE_FASTLOOP=require``, so that a run the C loop does not take
fails instead of comparing Python with Python) and once with
``PGSURGE_NO_FASTLOOP=1``,
and requires the same outcome: the rows the scripts insert (their drawn
values, per client, in order), the report apart from timing figures, the
error messages and exit status. A run with one client per worker and
``--random-seed`` is deterministic, so its rows must be equal exactly; with
several clients per worker, which client runs which script depends on
timing, so the per-client value sequences of a script that draws the same
way in every script, and the per-script counts, are compared instead.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import psycopg
import pytest

from pgsurge.engine import fastloop
from tests.fix_db import run_both_loops, take_rows
from tests.fix_run import run_pgsurge

pytestmark = [
    pytest.mark.server,
    pytest.mark.skipif(not fastloop.available, reason="pgsurge._fastloop not usable"),
]

#: lines whose figures depend on timing
_TIMING = re.compile(r"^( - )?(latency|initial connection time|tps|progress:)")
_TPS = re.compile(r"tps = [\d.]+")
_NUM = re.compile(r"-?\d+(?:\.\d+)?")


def _report(stdout: str) -> list[str]:
    """The report with timing figures masked (everything else exact)."""
    return [
        _NUM.sub("N", line) if _TIMING.match(line) else _TPS.sub("tps = N", line)
        for line in stdout.splitlines()
    ]


def _scripts(tmp_path: Path) -> list[str]:
    """Three weighted scripts; each draws a then b from the same ranges (with
    ``-s 1000``), so that a client's draws do not depend on its scripts."""
    texts = {
        "one.sql": (
            "\\set a random(1, 1000000)\n\\set b random(1, 10)\n"
            "INSERT INTO t (cid, s, a, b) VALUES (:client_id, 1, :a, :b);\n"
        ),
        "two.sql": (
            "\\set a random(1, 1000 * :scale)\n\\set c -7\n\\set b random(1, 10)\n"
            "INSERT INTO t (cid, s, a, b) VALUES (:client_id, 2, :a, :b);\n"
            "SELECT CAST(:a AS bigint) + :c;\n"
        ),
        "three.sql": (
            "\\set a random(1, 1000000)\n\\set b random(1, 10)\n"
            "BEGIN;\nINSERT INTO t (cid, s, a, b) VALUES (:client_id, 3, :a, :b);\n"
            "SELECT 2;\nEND;\n"
        ),
    }
    out = []
    for name, weight in (("one.sql", 5), ("two.sql", 3), ("three.sql", 2)):
        (tmp_path / name).write_text(texts[name])
        out += ["-f", f"{name}@{weight}"]
    return out


@pytest.mark.parametrize("mode", ["simple", "extended", "prepared"])
def test_one_client_per_worker_same_rows(
    draws_db: str, tmp_path: Path, mode: str
) -> None:
    args = [*_scripts(tmp_path), "-M", mode, "-c", "2", "-j", "2", "-t", "150"]
    args += ["--random-seed", "5", "-n", "-s", "1000"]
    fast, fast_rows, slow, slow_rows = run_both_loops(args, draws_db, tmp_path)
    assert fast.status == slow.status == 0, (fast.stderr, slow.stderr)
    assert len(fast_rows) == 300
    assert fast_rows == slow_rows
    assert _report(fast.stdout) == _report(slow.stdout)
    assert fast.stderr == slow.stderr


@pytest.mark.parametrize("mode", ["simple", "prepared"])
def test_many_clients_same_draws(draws_db: str, tmp_path: Path, mode: str) -> None:
    args = [*_scripts(tmp_path), "-M", mode, "-c", "6", "-j", "2", "-t", "100"]
    args += ["--random-seed", "11", "-n", "-s", "1000"]
    # the per-script counts (in the report) are deterministic: every worker
    # draws its choices from its own stream, as many times either way
    fast, fast_rows, slow, slow_rows = run_both_loops(args, draws_db, tmp_path)
    assert fast.status == slow.status == 0, (fast.stderr, slow.stderr)
    assert _report(fast.stdout) == _report(slow.stdout)
    assert len(fast_rows) == len(slow_rows) == 600

    def draws(
        rows: list[tuple[int, int, int, int]],
    ) -> dict[int, list[tuple[int, int]]]:
        per: dict[int, list[tuple[int, int]]] = {}
        for cid, _s, a, b in rows:
            per.setdefault(cid, []).append((a, b))
        return per

    assert draws(fast_rows) == draws(slow_rows)


@pytest.mark.parametrize("mode", ["extended", "prepared"])
def test_error_mid_run_same_messages(draws_db: str, tmp_path: Path, mode: str) -> None:
    # each client fails when its own stream first draws 5: deterministic
    (tmp_path / "err.sql").write_text(
        "\\set a random(1, 12)\nINSERT INTO u VALUES (:a);\nSELECT 1 / (:a - 5);\n"
    )
    args = ["-f", "err.sql", "-M", mode, "-c", "4", "-j", "2", "-t", "40"]
    args += ["--random-seed", "3", "-n"]
    fast = run_pgsurge(args, draws_db, cwd=tmp_path, loop="c")
    slow = run_pgsurge(args, draws_db, cwd=tmp_path, loop="python")
    assert fast.status == slow.status == 2
    assert "division by zero" in fast.stderr
    assert sorted(fast.stderr.splitlines()) == sorted(slow.stderr.splitlines())
    assert _report(fast.stdout) == _report(slow.stdout)


def test_exit_on_abort(draws_db: str, tmp_path: Path) -> None:
    (tmp_path / "err.sql").write_text("\\set a random(1, 12)\nSELECT 1 / (:a - 5);\n")
    args = ["-f", "err.sql", "-c", "1", "-j", "1", "-t", "40", "--exit-on-abort"]
    args += ["--random-seed", "3", "-n"]
    fast = run_pgsurge(args, draws_db, cwd=tmp_path, loop="c")
    slow = run_pgsurge(args, draws_db, cwd=tmp_path, loop="python")
    assert fast.status == slow.status == 2
    assert fast.stderr == slow.stderr
    assert "Run was aborted" in fast.stderr


def test_open_transaction_at_script_end(draws_db: str, tmp_path: Path) -> None:
    (tmp_path / "open.sql").write_text("\\set a 1\nBEGIN;\nSELECT :a;\n")
    args = ["-f", "open.sql", "-M", "prepared", "-c", "2", "-j", "2", "-t", "5", "-n"]
    fast = run_pgsurge(args, draws_db, cwd=tmp_path, loop="c")
    slow = run_pgsurge(args, draws_db, cwd=tmp_path, loop="python")
    assert fast.status == slow.status == 2
    assert sorted(fast.stderr.splitlines()) == sorted(slow.stderr.splitlines())
    assert "without completing the last transaction" in fast.stderr
    assert _report(fast.stdout) == _report(slow.stdout)


def test_duration_and_progress(draws_db: str, tmp_path: Path) -> None:
    (tmp_path / "sel.sql").write_text("\\set a random(1, 100)\nSELECT :a;\n")
    args = ["-f", "sel.sql", "-M", "prepared", "-c", "4", "-j", "2", "-T", "3"]
    args += ["-P", "1", "-n"]
    fast = run_pgsurge(args, draws_db, cwd=tmp_path, loop="c")
    assert fast.status == 0, fast.stderr
    ticks = re.findall(r"^progress: (\d+\.\d) s, ([\d.]+) tps", fast.stderr, re.M)
    # a line's label is the time its figures were taken: a loaded box
    # makes it a little late ("1.1 s"), never early
    assert [int(float(t)) for t, _ in ticks] == [1, 2, 3], fast.stderr
    assert all(float(tps) > 0 for _, tps in ticks)
    assert "duration: 3 s" in fast.stdout
    processed = re.search(r"actually processed: (\d+)", fast.stdout)
    assert processed is not None and int(processed.group(1)) > 0


@pytest.mark.parametrize("mode", ["simple", "extended", "prepared"])
def test_command_reading_a_variable_many_times(
    draws_db: str, tmp_path: Path, mode: str
) -> None:
    # a reference is a parameter each (pgbench allows 255 per command): the
    # C loop took a plan of 64 or more as malformed and the worker crashed
    terms = " + ".join(["CAST(:a AS int)"] * 70)
    (tmp_path / "many.sql").write_text(
        f"\\set a random(1, 9)\nINSERT INTO u VALUES ({terms});\n"
    )
    args = ["-f", "many.sql", "-M", mode, "-c", "1", "-j", "1", "-t", "20"]
    args += ["--random-seed", "4", "-n"]
    fast = run_pgsurge(args, draws_db, cwd=tmp_path, loop="c")
    with psycopg.connect(draws_db, autocommit=True) as conn:
        fast_rows = conn.execute("SELECT v FROM u").fetchall()
        conn.execute("TRUNCATE u")
    slow = run_pgsurge(args, draws_db, cwd=tmp_path, loop="python")
    with psycopg.connect(draws_db, autocommit=True) as conn:
        slow_rows = conn.execute("SELECT v FROM u").fetchall()
    assert fast.status == slow.status == 0, (fast.stderr, slow.stderr)
    assert fast.stderr == slow.stderr
    assert len(fast_rows) == 20
    assert fast_rows == slow_rows
    assert _report(fast.stdout) == _report(slow.stdout)


#: a -r line: the command's latency (timing), then its failures (exact)
_STATEMENT = re.compile(r"^(\s+)[\d.]+(\s+\d+\s)")


@pytest.mark.parametrize("mode", ["simple", "prepared"])
def test_report_per_command(draws_db: str, tmp_path: Path, mode: str) -> None:
    # -r runs in C too: the same statement lines, failures and all, in the
    # same report (per-command counts: test_fastloop_rate, in-process)
    args = [*_scripts(tmp_path), "-M", mode, "-c", "3", "-j", "2", "-t", "60", "-r"]
    args += ["--random-seed", "7", "-n", "-s", "1000"]
    fast = run_pgsurge(args, draws_db, cwd=tmp_path, loop="c")
    take_rows(draws_db)
    slow = run_pgsurge(args, draws_db, cwd=tmp_path, loop="python")
    take_rows(draws_db)
    assert fast.status == slow.status == 0, (fast.stderr, slow.stderr)

    def masked(stdout: str) -> list[str]:
        return [_STATEMENT.sub(r"\1N\2", line) for line in _report(stdout)]

    assert masked(fast.stdout) == masked(slow.stdout)
    assert sum("INSERT INTO t" in line for line in fast.stdout.splitlines()) == 3


@pytest.mark.parametrize("mode", ["simple", "prepared"])
def test_notifications_while_sleeping(draws_db: str, tmp_path: Path, mode: str) -> None:
    # Each NOTIFY reaches the other clients while they sleep, not waiting
    # for a result: the loop takes such a socket out of its epoll set
    # (loop.absorb) and the client's next wait puts it back, in C for a
    # C-owned client. Were it not put back, the client would wait for its
    # result forever.
    (tmp_path / "notify.sql").write_text(
        "LISTEN pgsurge_fl;\n\\sleep 5 ms\nNOTIFY pgsurge_fl;\nSELECT 1;\n"
    )
    args = ["-f", "notify.sql", "-M", mode, "-c", "4", "-j", "1", "-t", "30", "-n"]
    fast = run_pgsurge(args, draws_db, cwd=tmp_path, loop="c")
    slow = run_pgsurge(args, draws_db, cwd=tmp_path, loop="python")
    assert fast.status == slow.status == 0, (fast.stderr, slow.stderr)
    assert fast.stderr == slow.stderr == ""
    assert _report(fast.stdout) == _report(slow.stdout)
    assert "number of transactions actually processed: 120/120" in fast.stdout


def test_require_names_the_reason(draws_db: str, tmp_path: Path) -> None:
    # a run the C loop does not take fails under require: status 1, one
    # line naming the reason, no traceback
    (tmp_path / "sh.sql").write_text("\\shell true\nSELECT 1;\n")
    out = run_pgsurge(
        ["-n", "-f", "sh.sql", "-t", "1"], draws_db, cwd=tmp_path, loop="c"
    )
    assert out.status == 1, out.stderr
    assert "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines() == [
        "pgsurge: error: PGSURGE_FASTLOOP=require: the C loop is not taken: "
        "script 0 command 0 (\\shell) of 'sh.sql': \\shell and \\setshell "
        "are not supported by the C loop"
    ], out.stderr
    (tmp_path / "ok.sql").write_text("\\set a 1\nSELECT :a;\n")
    ok = run_pgsurge(
        ["-n", "-f", "ok.sql", "-t", "1"], draws_db, cwd=tmp_path, loop="c"
    )
    assert ok.status == 0, ok.stderr


#: JSON keys whose values depend on timing (latencies, rates, clocks, CPU)
_JSON_TIMING = frozenset(
    {
        "min",
        "max",
        "sum",
        "sum2",
        "avg",
        "stddev",
        "offset",
        "counts",
        "percentiles",
        "tps",
        "start",
        "end",
        "duration_s",
        "initial_connection_time_ms",
        "connection_time_total_ms",
        "client_cpu",
        "intervals",
        "latency_late",
        # which engine ran (the very difference under test), the database's
        # size after the run's inserts, and judgements of the timing
        "environment",
        "steady_state",
        "rate_check",
        "host_stats",
    }
)


def _json_masked(value: object) -> object:
    if isinstance(value, dict):
        return {
            k: None if k in _JSON_TIMING else _json_masked(v) for k, v in value.items()
        }
    if isinstance(value, list):
        return [_json_masked(v) for v in value]
    return value


def _check_histograms(doc: dict) -> None:  # type: ignore[type-arg]
    """Every successful transaction's latency is in the histograms once,
    exactly: their count, sum, min and max are StatsData's."""
    stats = doc["totals"]["stats"]
    hists = doc["histograms"]
    for name in ("latency", "lag"):
        simple, hist = stats[name], hists[name]
        assert hist["count"] == simple["count"], name
        if simple["count"]:
            assert hist["sum"] == simple["sum"], name
            assert (hist["min"], hist["max"]) == (simple["min"], simple["max"]), name
    intervals = doc["intervals"]
    assert sum(iv["transactions"] for iv in intervals) == doc["totals"]["transactions"]
    assert sum(iv["latency_ms"]["count"] for iv in intervals) == stats["cnt"]
    per_script = hists["per_script"]
    if len(doc["scripts"]) > 1:
        counts = [h["count"] for h in per_script]
        assert counts == [s["latency_ms"]["count"] for s in doc["scripts"]]
        assert counts == [s["processed"] for s in doc["scripts"]]
    for script, hs in zip(doc["scripts"], hists["per_command"], strict=True):
        for cmd, h in zip(script.get("commands", []), hs, strict=True):
            lat = cmd["latency_ms"]  # None without -r
            assert h["count"] == (0 if lat is None else lat["count"])


@pytest.mark.parametrize(
    "extra",
    [[], ["-r"], ["-R", "3000"], ["-R", "3000", "-L", "5000", "-r"], ["one"]],
    ids=["plain", "per-command", "rate", "rate-limit-r", "one-script"],
)
def test_json_and_histograms_same(
    draws_db: str, tmp_path: Path, extra: list[str]
) -> None:
    # the C loop records what the Python loop records: the same JSON apart
    # from timing, and histograms holding exactly the accounted latencies
    if extra == ["one"]:
        (tmp_path / "one.sql").write_text(
            "\\set a random(1, 1000)\nSELECT :a;\nSELECT 2;\n"
        )
        scripts, extra = ["-f", "one.sql"], ["-r"]
    else:
        scripts = _scripts(tmp_path)
    args = [*scripts, "-M", "prepared", "-c", "2", "-j", "2", "-t", "300"]
    args += ["--random-seed", "5", "-n", "--percentiles", "--json", "out.json"]
    args += extra
    docs = []
    for loop in ("c", "python"):
        out = run_pgsurge(args, draws_db, cwd=tmp_path, loop=loop)
        assert out.status == 0, out.stderr
        take_rows(draws_db)
        doc = json.loads((tmp_path / "out.json").read_text())
        _check_histograms(doc)
        docs.append(doc)
    fast_doc, slow_doc = docs
    assert _json_masked(fast_doc) == _json_masked(slow_doc)


_LOGIC = (
    "\\set a random(1, 1000)\n"
    "\\set b (:a * 7 + 13) % 1000 + 1\n"
    "\\if :b > 500 and :a < 900\n"
    "\\set br 1\n"
    "\\elif :b > 250 or not (:a = 3)\n"
    "\\set br 2\n"
    "\\else\n"
    "\\set br 3\n"
    "\\endif\n"
    "\\set h abs(hash(:a) % 1000) + least(:a, :b) - greatest(1, 2, :a)"
    " + permute(:a, 1000) + hash_fnv1a(:b, 5) % 7 + hash_murmur2(:a, :k)"
    " % 11 + (:a << 3) + (:b >> 1) + (:a & 255) + (:a | 1) + (:a # 3)"
    " + :a / 3 + (- :a) + mod(:b, 7) + random(1, :a)\n"
    "SELECT CAST(:a AS int) + CAST(:br AS int) AS g, 'x' || :b AS txt,"
    " 1.5 AS f \\gset p_\n"
    "\\if :p_g >= :a\n"
    "INSERT INTO t (cid, s, a, b) VALUES (:client_id, :br, :p_g, :h);\n"
    "\\endif\n"
    "SELECT :p_f;\n"
    "SELECT 7 AS one UNION ALL SELECT 8 \\aset q_\n"
    "\\set y :q_one * 2 + :k\n"
    "INSERT INTO u (v) VALUES (:y);\n"
)


@pytest.mark.parametrize("mode", ["simple", "extended", "prepared"])
def test_logic_script_same_values(draws_db: str, tmp_path: Path, mode: str) -> None:
    # \set of expressions, \if/\elif/\else, \gset/\aset in C: the same rows
    # (values and branches) as Python's, client by client
    (tmp_path / "logic.sql").write_text(_LOGIC)
    args = ["-f", "logic.sql", "-M", mode, "-c", "2", "-j", "2", "-t", "200"]
    args += ["--random-seed", "11", "-n", "-D", "k=5"]
    fast, fast_rows, slow, slow_rows = run_both_loops(args, draws_db, tmp_path)
    assert fast.status == slow.status == 0, (fast.stderr, slow.stderr)
    assert fast_rows == slow_rows
    assert len({r[1] for r in fast_rows}) >= 2  # several branches taken
    assert _report(fast.stdout) == _report(slow.stdout)


@pytest.mark.parametrize(
    ("text", "status"),
    [
        # a division by zero now and then: Python evaluates it again and aborts
        ("\\set a random(0, 3)\n\\set z 10 / :a\nINSERT INTO u (v) VALUES (:z);\n", 2),
        # an overflow, a negative random range
        ("\\set a random(1, 4)\n\\set z 9223372036854775807 + :a - 1\nSELECT :z;\n", 2),
        ("\\set a random(1, 4)\n\\set z random(:a, 2)\nSELECT :z;\n", 2),
        # \gset of no row, of several rows
        ("SELECT 1 AS v WHERE false \\gset\nSELECT 1;\n", 2),
        ("SELECT 1 AS v UNION ALL SELECT 2 \\gset\nSELECT 1;\n", 2),
        # a value C cannot hold, used in an expression (Python's double)
        ("SELECT 2.5 AS v \\gset\n\\set w :v * 2\nSELECT :w;\n", 0),
        # a variable not set yet in the first transaction
        ("\\if :client_id = 0\n\\set late 1\n\\endif\nSELECT :late;\n", None),
        # an int that is written otherwise than Python writes ints
        ("SELECT '007' AS v \\gset\n\\set w :v + 1\nSELECT :v, :w;\n", 0),
    ],
)
def test_logic_errors_same_outcome(
    draws_db: str, tmp_path: Path, text: str, status: int | None
) -> None:
    (tmp_path / "e.sql").write_text(text)
    args = ["-f", "e.sql", "-M", "prepared", "-c", "2", "-j", "2", "-t", "20"]
    args += ["--random-seed", "3", "-n"]
    fast, _fast_rows, slow, _slow_rows = run_both_loops(args, draws_db, tmp_path)
    assert fast.status == slow.status, (fast.stderr, slow.stderr)
    assert status is None or slow.status == status, slow.stderr
    assert sorted(fast.stderr.splitlines()) == sorted(slow.stderr.splitlines())
    assert _report(fast.stdout) == _report(slow.stdout)
    with psycopg.connect(draws_db, autocommit=True) as conn:
        conn.execute("TRUNCATE u")


def _log_lines(cwd: Path) -> dict[str, list[list[str]]]:
    """Every -l file's lines (split), by file suffix (the worker)."""
    out = {}
    for path in sorted(cwd.glob("pgbench_log.*")):
        worker = path.name.split(".", 2)[2] if path.name.count(".") > 1 else "0"
        out[worker] = [line.split() for line in path.read_text().splitlines()]
        path.unlink()
    return out


@pytest.mark.parametrize(
    "extra",
    [[], ["--sampling-rate", "0.3"], ["-R", "2000"], ["--max-tries", "3"], ["-r"]],
    ids=["plain", "sampling", "rate", "retries", "per-command"],
)
def test_log_lines_same(draws_db: str, tmp_path: Path, extra: list[str]) -> None:
    # -l in C: the same lines as Python's (the same transactions, numbers,
    # scripts and fields; latency, lag and times are timing), and with
    # --json too
    args = [*_scripts(tmp_path), "-M", "prepared", "-c", "2", "-j", "2", "-t", "300"]
    args += ["--random-seed", "8", "-n", "-l", "--json", "out.json", *extra]
    logs = []
    for loop in ("c", "python"):
        out = run_pgsurge(args, draws_db, cwd=tmp_path, loop=loop)
        assert out.status == 0, out.stderr
        take_rows(draws_db)
        lines = _log_lines(tmp_path)
        assert set(lines) == {"0", "1"}
        for worker in lines.values():
            for f in worker:
                width = 6 + ("-R" in extra) + ("--max-tries" in extra)
                assert len(f) == width, f
                # the end time: Unix seconds and µs
                assert int(f[4]) > 1_700_000_000 and 0 <= int(f[5]) < 1_000_000
        logs.append(
            {
                w: [(f[0], f[1], f[3], f[6:7] and "lag", f[7:]) for f in ls]
                for w, ls in lines.items()
            }
        )
    assert logs[0] == logs[1]
    if "--sampling-rate" in extra:
        assert 0 < sum(len(v) for v in logs[0].values()) < 400
    else:
        assert sum(len(v) for v in logs[0].values()) == 600


@pytest.mark.parametrize("extra", [[], ["-R", "3000"]], ids=["plain", "rate"])
def test_aggregate_log_same(draws_db: str, tmp_path: Path, extra: list[str]) -> None:
    # --aggregate-interval in C: the same intervals' counts as Python's
    # (sums and extremes are timing), the complete intervals only
    args = [*_scripts(tmp_path), "-M", "prepared", "-c", "2", "-j", "2", "-T", "3"]
    args += ["--random-seed", "8", "-n", "-l", "--aggregate-interval", "1", *extra]
    for loop in ("c", "python"):
        out = run_pgsurge(args, draws_db, cwd=tmp_path, loop=loop)
        assert out.status == 0, out.stderr
        rows = len(take_rows(draws_db))
        lines = _log_lines(tmp_path)
        assert set(lines) == {"0", "1"}
        total = 0
        for worker in lines.values():
            assert 2 <= len(worker) <= 4, worker
            for f in worker:
                assert len(f) == 15, f
                cnt, lat_sum, lat_min, lat_max = (
                    int(x) for x in f[1:2] + f[2:3] + f[4:6]
                )
                assert cnt == 0 or lat_min <= lat_sum // cnt <= lat_max
                assert (f[6] != "0") == ("-R" in extra and cnt > 0)
                total += cnt
        # the last, partial interval is not written (as pgbench)
        assert 0 < total <= rows

"""pgsurge's extras on real runs: percentiles, --json, --client-cpu, the
client-limited warning.

Each test runs ``python -m pgsurge`` against a fresh database initialized by
the real ``pgbench -i -s 1``. Percentiles are checked against the exact
nearest-rank values of the same run's ``-l`` log (every transaction's
latency in µs), JSON documents against the shipped JSON Schema and against
the run's own counters, and no output may contain a password given through
PGPASSWORD or the conninfo.
"""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path
from typing import Any

import jsonschema
import psycopg
import pytest

from pgsurge.report.json import load_schema
from tests.fix_run import Outcome, run_pgsurge

pytestmark = pytest.mark.server

VALIDATOR = jsonschema.Draft202012Validator(
    load_schema(), format_checker=jsonschema.FormatChecker()
)

WARNING = re.compile(r"^pgsurge: warning: .* the client may be the bottleneck", re.M)

SERIALIZATION_SCRIPT = """\
\\set id random(1, 2)
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT v FROM ser WHERE id = :id;
SELECT pg_sleep(0.001);
UPDATE ser SET v = v + 1 WHERE id = :id;
END;
"""


def pgsurge(args: list[str], dsn: str, cwd: Path, **env: str) -> Outcome:
    return run_pgsurge(args, dsn, cwd=cwd, env=env)


def script(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def json_run(args: list[str], dsn: str, tmp_path: Path, **env: str) -> dict[str, Any]:
    """Run with --json FILE; the document, validated against the schema."""
    path = tmp_path / "result.json"
    path.unlink(missing_ok=True)
    run = pgsurge([*args, f"--json={path}"], dsn, tmp_path, **env)
    assert run.status in (0, 2), run.stderr
    doc: dict[str, Any] = json.loads(path.read_text())
    VALIDATOR.validate(doc)
    check_document(doc, run)
    return doc


def check_document(doc: dict[str, Any], run: Outcome) -> None:
    """Facts every document must agree on with the text report."""
    totals = doc["totals"]
    processed = int(
        run.line("number of transactions actually processed:").split()[5].split("/")[0]
    )
    assert totals["processed"] == processed
    assert (
        totals["transactions"]
        == totals["processed"] + totals["failed"] + totals["skipped"]
    )
    hists = doc["histograms"]
    assert hists is not None
    lat = totals["latency_ms"]
    if processed:
        assert lat["count"] == processed
        ps = list(lat["percentiles"].values())
        assert ps == sorted(ps)
        assert lat["min"] <= ps[0] and ps[-1] <= lat["max"]
    # the interval series covers every transaction exactly once
    assert sum(iv["processed"] for iv in doc["intervals"]) == processed
    assert sum(iv["transactions"] for iv in doc["intervals"]) == totals["transactions"]
    assert doc["aborted"] == (run.status == 2)


# -- percentiles -----------------------------------------------------------------


def nearest_rank(values: list[int], p: float) -> int:
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100.0 * len(ordered)))
    return ordered[rank - 1]


def percentile_values(line: str) -> dict[str, float]:
    return {
        m.group(1): float(m.group(2))
        for m in re.finditer(r"p([\d.]+) = ([\d.]+) ms", line)
    }


def log_latencies(cwd: Path) -> dict[int, list[int]]:
    """Latency (µs) of every successful transaction in the -l files, by
    script number."""
    out: dict[int, list[int]] = {}
    for name in os.listdir(cwd):
        if name.startswith("pgbench_log."):
            for line in (cwd / name).read_text().splitlines():
                f = line.split()
                if f[2].isdigit():
                    out.setdefault(int(f[3]), []).append(int(f[2]))
    return out


def assert_exact(reported: dict[str, float], values: list[int]) -> None:
    """Each percentile is the exact nearest-rank value to 3 significant
    digits (the histogram's precision), printed with 3 decimals in ms."""
    assert reported
    previous = 0.0
    for label, ms in reported.items():
        exact = nearest_rank(values, float(label))
        assert exact / 1000 - 0.0005 <= ms <= exact * 1.001 / 1000 + 0.0005, (
            label,
            ms,
            exact,
        )
        assert min(values) / 1000 - 0.0005 <= ms <= max(values) / 1000 + 0.0005
        assert ms >= previous
        previous = ms


def test_percentiles_line(bench_db: str, tmp_path: Path) -> None:
    run = pgsurge(
        ["-n", "-S", "-c", "2", "-t", "150", "-l", "--percentiles"],
        bench_db,
        tmp_path,
    )
    assert run.status == 0, run.stderr
    line = run.line("latency percentiles: ")
    reported = percentile_values(line)
    assert list(reported) == ["50", "90", "99", "99.9"]
    assert_exact(reported, log_latencies(tmp_path)[0])
    # the pgbench report is unchanged before it, the extras come last
    lines = run.stdout.splitlines()
    assert lines[-1] == line
    assert lines[-2].startswith("tps = ")


def test_percentiles_per_script_and_lag(bench_db: str, tmp_path: Path) -> None:
    run = pgsurge(
        [
            "-n",
            "-b",
            "select-only@3",
            "-b",
            "simple-update@1",
            "-c",
            "2",
            "-T",
            "1",
            "-R",
            "300",
            "-l",
            "--percentiles=10,50,99.5,100",
        ],
        bench_db,
        tmp_path,
    )
    assert run.status == 0, run.stderr
    by_script = log_latencies(tmp_path)
    everything = [v for values in by_script.values() for v in values]
    assert_exact(percentile_values(run.line("latency percentiles: ")), everything)
    lag = percentile_values(run.line("rate limit schedule lag percentiles: "))
    assert list(lag) == ["10", "50", "99.5", "100"]
    assert list(lag.values()) == sorted(lag.values())
    for i, values in by_script.items():
        line = run.line(f"SQL script {i + 1} latency percentiles: ")
        assert_exact(percentile_values(line), values)


# -- --json ----------------------------------------------------------------------


def test_json_transactions(bench_db: str, tmp_path: Path) -> None:
    doc = json_run(["-n", "-S", "-c", "3", "-j", "2", "-t", "40"], bench_db, tmp_path)
    assert doc["schema"] == 1
    assert doc["totals"]["processed"] == 120
    assert doc["config"]["transactions"] == 40
    assert doc["server"]["version_num"] >= 180000
    assert [w["worker_id"] for w in doc["client_cpu"]["workers"]] == [0, 1]
    assert doc["histograms"]["latency"]


@pytest.mark.slow
def test_json_duration_progress(bench_db: str, tmp_path: Path) -> None:
    doc = json_run(["-n", "-S", "-c", "2", "-T", "2", "-P", "1"], bench_db, tmp_path)
    intervals = doc["intervals"]
    # intervals of 1 s from the start, the last one partial
    assert 2 <= len(intervals) <= 4
    assert all(iv["duration_s"] <= 1.0 + 1e-6 for iv in intervals)
    assert all(iv["latency_ms"] is not None for iv in intervals[:2])
    assert doc["start"] is not None and doc["end"] is not None


def test_json_rate_and_latency_limit(bench_db: str, tmp_path: Path) -> None:
    doc = json_run(
        ["-n", "-S", "-c", "2", "-T", "1", "-R", "2000", "-L", "0.01"],
        bench_db,
        tmp_path,
    )
    totals = doc["totals"]
    assert totals["skipped"] > 0
    assert totals["lag_ms"] is not None
    assert totals["latency_late"] > 0


def test_json_two_scripts_per_command(bench_db: str, tmp_path: Path) -> None:
    doc = json_run(
        ["-n", "-b", "select-only", "-b", "simple-update", "-c", "2", "-t", "20", "-r"],
        bench_db,
        tmp_path,
    )
    scripts = doc["scripts"]
    assert len(scripts) == 2
    assert sum(s["processed"] for s in scripts) == doc["totals"]["processed"]
    for s, hist in zip(scripts, doc["histograms"]["per_command"], strict=True):
        assert len(s["commands"]) == len(hist)
        sql = [c for c in s["commands"] if not c["line"].startswith("\\")]
        assert all(c["latency_ms"]["count"] == s["processed"] for c in sql)


def test_json_aborted_client(bench_db: str, tmp_path: Path) -> None:
    path = script(
        tmp_path,
        "err.sql",
        "SELECT 1;\n\\if :client_id = 1\nSELECT * FROM no_such_table;\n\\endif\n",
    )
    doc = json_run(["-n", "-f", path, "-c", "3", "-t", "5"], bench_db, tmp_path)
    assert doc["aborted"] is True
    assert doc["aborted_clients"] == 1
    assert doc["totals"]["processed"] == 10
    (message,) = doc["abort_messages"]
    assert message.startswith("client 1 script 0 aborted in command 2 query 0:")
    assert "no_such_table" in message


def test_json_retries(bench_db: str, tmp_path: Path) -> None:
    with psycopg.connect(bench_db, autocommit=True) as conn:
        conn.execute("create table ser(id int primary key, v int)")
        conn.execute("insert into ser values (1, 0), (2, 0)")
    path = script(tmp_path, "ser.sql", SERIALIZATION_SCRIPT)
    doc = json_run(
        ["-n", "-f", path, "-c", "4", "-t", "15", "--max-tries=3", "-r"],
        bench_db,
        tmp_path,
    )
    totals = doc["totals"]
    assert totals["retried"] > 0  # the script does provoke 40001
    assert totals["retries"] >= totals["retried"]
    commands = doc["scripts"][0]["commands"]
    assert sum(c["retries"] for c in commands) == totals["retries"]
    assert doc["run"]["max_tries"] == 3


def test_no_password_anywhere(bench_db: str, tmp_path: Path) -> None:
    # trust auth: the server accepts and ignores both passwords
    dsn = f"{bench_db} password=secretpw2"
    path = tmp_path / "result.json"
    run = pgsurge(
        ["-n", "-S", "-t", "5", f"--json={path}", "--extended-report"],
        dsn,
        tmp_path,
        PGPASSWORD="secretpw",
    )
    assert run.status == 0, run.stderr
    text = path.read_text()
    VALIDATOR.validate(json.loads(text))
    for output in (text, run.stdout, run.stderr):
        assert "secretpw" not in output
    assert json.loads(text)["config"]["conn"]["dbname"]


def test_json_to_stdout(bench_db: str, tmp_path: Path) -> None:
    run = pgsurge(["-n", "-S", "-t", "5", "--json", "-"], bench_db, tmp_path)
    assert run.status == 0, run.stderr
    doc = json.loads(run.stdout)  # nothing else on stdout
    VALIDATOR.validate(doc)
    assert doc["totals"]["processed"] == 5
    # everything pgbench prints on stdout went to stderr
    assert run.stderr.startswith("pgsurge (")
    assert "number of transactions actually processed: 5/5" in run.stderr


# -- client CPU ------------------------------------------------------------------


def test_client_cpu_lines(bench_db: str, tmp_path: Path) -> None:
    run = pgsurge(
        ["-n", "-S", "-c", "2", "-j", "2", "-t", "50", "--client-cpu"],
        bench_db,
        tmp_path,
    )
    assert run.status == 0, run.stderr
    line = run.line("client CPU: ")
    assert re.fullmatch(
        r"client CPU: user [\d.]+ s, sys [\d.]+ s, [\d.]+ us per transaction", line
    )
    for worker in (0, 1):
        assert re.fullmatch(
            rf"client CPU worker {worker}: busy [\d.]+%, CPU [\d.]+% "
            r"\(user [\d.]+ s, sys [\d.]+ s, wall [\d.]+ s\)"
            # what ran the transactions (issue 11)
            r", (C event loop|Python engine, C libpq calls|pure Python)",
            run.line(f"client CPU worker {worker}: "),
        )


@pytest.mark.slow
def test_client_limited_warning(bench_db: str, tmp_path: Path) -> None:
    # 200 dependent meta commands per query: the worker computes much longer
    # than the server answers, and 8 clients leave it nothing to wait for
    # (on the Python loop: the C loop runs them some fifty times faster,
    # and a busy box's server may then be as slow as the client)
    text = "\\set x 0\n" + "\\set x :x + random(1, 1000) * 1.5\n" * 200
    text += "SELECT :x;\n"
    heavy = script(tmp_path, "heavy.sql", text)
    run = run_pgsurge(
        ["-n", "-f", heavy, "-c", "8", "-j", "1", "-T", "3"],
        bench_db,
        cwd=tmp_path,
        loop="python",
    )
    assert run.status == 0, run.stderr
    warnings = WARNING.findall(run.stderr)
    assert len(warnings) == 1, run.stderr
    assert "worker 0 was busy" in run.stderr and "(try more -j)" in run.stderr
    # the report itself is pgbench's: the warning is not on stdout
    assert not WARNING.search(run.stdout)


@pytest.mark.slow
def test_server_bound_run_has_no_warning(bench_db: str, tmp_path: Path) -> None:
    sleep = script(tmp_path, "sleep.sql", "SELECT pg_sleep(0.05);\n")
    run = pgsurge(["-f", sleep, "-c", "2", "-T", "2"], bench_db, tmp_path)
    assert run.status == 0, run.stderr
    # by default the only stderr line is pgbench's own
    assert run.stderr == "starting vacuum...end.\n"

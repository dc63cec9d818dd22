"""``--store`` on real runs, the PostgreSQL backend, and a real history.

Runs are short (``-t``, a few clients) except the history of ten ``-T 2``
runs in which ``synchronous_commit`` is turned off from run 6 on: a
change that the store's change points and the environment fingerprint
must both find.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote, urlencode

import numpy as np
import psycopg
import pytest
from psycopg import sql

from pgsurge.store.backend import open_store
from pgsurge.store.location import resolve
from tests.fix_data import write_result
from tests.fix_run import run_pgsurge, tool_env

pytestmark = pytest.mark.server

RUN = ["-c", "2", "-j", "1", "-t", "50", "-n"]


def store_runs(path: Path) -> list:
    store = open_store(resolve(str(path)))
    try:
        return store.runs()
    finally:
        store.close()


def test_a_stored_run_is_its_json_document_with_labels(bench_db, tmp_path):
    db = tmp_path / "s.sqlite"
    out = tmp_path / "r.json"
    # a password in the target (trust authentication ignores it) and in -D
    dsn = f"{bench_db} password=hunter2secret"
    r = run_pgsurge(
        [
            *RUN,
            f"--store={db}",
            "--label",
            "commit=abc123",
            "--label=branch=main",
            "--label=token=hunter2secret",
            f"--json={out}",
            "-D",
            "PGPASSWORD=hunter2secret",
        ],
        dsn,
    )
    assert r.status == 0, r.stderr
    assert r.stderr.endswith(f"pgsurge: stored as run 1 in {db}\n")
    assert r.stdout.splitlines()[-1].startswith("tps = ")
    (run,) = store_runs(db)
    assert run.labels == {"commit": "abc123", "branch": "main", "token": "********"}
    assert run.source == "run"
    assert run.doc == json.loads(out.read_text())
    env = run.doc["environment"]
    assert env["version"] == 1
    assert env["server"]["version"] == run.doc["server"]["version"]
    assert env["client"]["cpus"] >= 1 and env["client"]["kernel"]
    assert env["server"]["data_bytes"] > 1_000_000  # scale 1: some 20 MB
    assert env["pgsurge"]["c_loop"] in (True, False)
    # no secret anywhere in the store's bytes (the WAL included)
    for f in tmp_path.glob("s.sqlite*"):
        assert b"hunter2secret" not in f.read_bytes(), f


def test_the_c_loop_is_recorded(bench_db, tmp_path):
    out = tmp_path / "c.json"
    r = run_pgsurge([*RUN, "-S", f"--json={out}"], bench_db, loop="c")
    assert r.status == 0, r.stderr
    assert json.loads(out.read_text())["environment"]["pgsurge"]["c_loop"] is True
    r = run_pgsurge([*RUN, "-S", f"--json={out}"], bench_db, loop="python")
    assert json.loads(out.read_text())["environment"]["pgsurge"]["c_loop"] is False


@pytest.mark.parametrize(
    ("store", "expected"),
    [
        (
            "{tmp}/no/such/dir/s.sqlite",
            "pgsurge: error: could not create results store "
            '"{tmp}/no/such/dir/s.sqlite": No such file or directory\n',
        ),
        (
            "postgresql://u:pw123@/x?host=/nonexistent/d",
            "pgsurge: error: could not connect to results store "
            "postgresql://u:********@/x?host=/nonexistent/d: ",
        ),
    ],
)
def test_a_bad_store_keeps_the_report_and_json(bench_db, tmp_path, store, expected):
    out = tmp_path / "r.json"
    html = tmp_path / "r.html"
    store = store.format(tmp=tmp_path)
    r = run_pgsurge(
        [*RUN, f"--store={store}", f"--json={out}", f"--html={html}"], bench_db
    )
    assert r.status == 1
    assert r.stdout.splitlines()[-1].startswith("tps = ")
    assert json.loads(out.read_text())["totals"]["transactions"] == 100
    assert html.stat().st_size > 1000
    assert r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith(expected.format(tmp=tmp_path)), r.stderr
    assert "pw123" not in r.stderr


def test_pgsurge_store_in_the_environment_stores_every_run(bench_db, tmp_path):
    db = tmp_path / "env.sqlite"
    for _ in range(2):
        r = run_pgsurge(RUN, bench_db, env={"PGSURGE_STORE": str(db)})
        assert r.status == 0, r.stderr
    assert [r.id for r in store_runs(db)] == [1, 2]


def test_four_concurrent_runs_lose_none(bench_db, tmp_path):
    db = tmp_path / "c.sqlite"
    env = tool_env()
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pgsurge",
                *RUN,
                f"--store={db}",
                f"--label=n={n}",
                bench_db,
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for n in range(4)
    ]
    for p in procs:
        _out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    runs = store_runs(db)
    assert sorted(r.labels["n"] for r in runs) == ["0", "1", "2", "3"]


def pg_uri(conninfo: str) -> str:
    """A postgresql:// URI for a libpq conninfo string (the store's form)."""
    items = psycopg.conninfo.conninfo_to_dict(conninfo)
    dbname = quote(str(items.pop("dbname")))
    query = urlencode({k: str(v) for k, v in items.items()})
    return f"postgresql:///{dbname}?{query}"


def test_the_postgresql_backend_gives_what_sqlite_gives(fresh_db, tmp_path):
    rng = np.random.default_rng(11)
    values = 1000 * (1 + 0.02 * rng.standard_normal(30))
    values[19:] *= 0.95
    files = [
        write_result(
            tmp_path / f"r{i:02d}.json",
            float(v),
            seq=i,
            edit={"labels": {"commit": f"c{i:02d}"}},
        )
        for i, v in enumerate(values)
    ]
    stores = {"sqlite": str(tmp_path / "s.sqlite"), "pg": pg_uri(fresh_db)}
    got = {}
    for name, where in stores.items():
        r = run_pgsurge(["store", "import", *files, f"--store={where}"])
        assert r.status == 0, r.stderr
        r = run_pgsurge(
            [
                "history",
                f"--store={where}",
                "--fail-on",
                "regression",
                "--label",
                "commit=c05",
                "--metric",
                "p99",
            ]
        )
        assert r.status == 0 and " 1 runs," in r.stdout, r.stdout + r.stderr
        r = run_pgsurge(["history", f"--store={where}", "--fail-on", "regression"])
        got[name] = r
    assert got["pg"].status == got["sqlite"].status == 3
    assert got["pg"].stdout == got["sqlite"].stdout
    assert got["pg"].stderr == got["sqlite"].stderr
    assert re.search(
        r"^change at run (19|20|21) \(commit=c(18|19|20)\): ", got["pg"].stdout, re.M
    )
    # JSONB and the indexed columns, in the schema pgsurge
    with psycopg.connect(fresh_db) as conn:
        kinds = dict(
            conn.execute(
                "SELECT column_name, data_type FROM information_schema.columns"
                " WHERE table_schema = 'pgsurge' AND table_name = 'runs'"
            ).fetchall()
        )
        indexes = {
            r[0]
            for r in conn.execute(
                "SELECT indexname FROM pg_indexes WHERE schemaname = 'pgsurge'"
            )
        }
    assert kinds["doc"] == "jsonb" and kinds["started_at"].startswith("timestamp")
    assert {"runs_workload", "runs_started", "run_labels_kv"} <= indexes


@pytest.mark.slow
def test_a_real_history_finds_synchronous_commit(bench_db, tmp_path, server_dsn):
    """Ten runs of one client committing single inserts, synchronous_commit
    off from run 6 on: the commits no longer wait for the WAL flush. The
    metric is the median latency: the tps of runs this short swing by
    several times on a loaded 2-core machine (other tests' runs take the
    CPU for seconds), a run's median of thousands of commits does not."""
    db = tmp_path / "h.sqlite"
    script = tmp_path / "insert.sql"
    script.write_text(
        "insert into pgbench_history (tid, bid, aid, delta, mtime)"
        " values (1, 1, 1, 1, now());\n"
    )
    name = psycopg.conninfo.conninfo_to_dict(bench_db)["dbname"]
    for n in range(1, 11):
        if n == 6:
            with psycopg.connect(server_dsn, autocommit=True) as admin:
                admin.execute(
                    sql.SQL("ALTER DATABASE {} SET synchronous_commit = off").format(
                        sql.Identifier(str(name))
                    )
                )
        r = run_pgsurge(
            [
                "-n",
                "-f",
                str(script),
                "-c",
                "1",
                "-T",
                "2",
                "--percentiles",
                f"--store={db}",
                f"--label=run={n}",
            ],
            bench_db,
        )
        assert r.status == 0, r.stderr
    r = run_pgsurge(["history", f"--store={db}", "--metric", "p50"])
    assert r.status == 0, r.stderr
    found = re.findall(
        r"^change at run (\d+) \(run=\1\): p50 .*: faster$", r.stdout, re.M
    )
    assert found and 5 <= int(found[0]) <= 7, r.stdout
    assert (
        "pgsurge: warning: run 6 ran in another environment than run 5: "
        "server setting synchronous_commit default -> off\n"
    ) in r.stderr


def test_host_stats_per_interval_and_with_store(bench_db, tmp_path):
    import jsonschema

    from pgsurge.report.json import load_schema

    out = tmp_path / "h.json"
    args = ["-S", "-c", "2", "-j", "1", "-T", "2", "-P", "1", "-n"]
    r = run_pgsurge([*args, "--host-stats", f"--json={out}"], bench_db)
    assert r.status == 0, r.stderr
    doc = json.loads(out.read_text())
    jsonschema.validate(doc, load_schema())
    run = doc["host_stats"]
    assert run["disks_counted"] is True  # the test server is local
    assert sum(run["cpu_pct"].values()) == pytest.approx(100.0, abs=0.01)
    assert run["context_switches_per_s"] > 0
    assert set(run["disk"]) == {
        "reads_per_s",
        "writes_per_s",
        "read_mb_per_s",
        "write_mb_per_s",
    }
    hosts = [iv.get("host") for iv in doc["intervals"]]
    assert len(hosts) >= 2 and all(hosts), doc["intervals"]
    assert all(h["context_switches_per_s"] > 0 for h in hosts)
    # the text report is pgbench's, as without the option
    plain = run_pgsurge(args, bench_db)
    assert r.report == plain.report
    # off by default; on with --store
    r = run_pgsurge([*RUN, f"--json={out}"], bench_db)
    assert "host_stats" not in json.loads(out.read_text())
    r = run_pgsurge(
        [*RUN, f"--json={out}", f"--store={tmp_path / 's.sqlite'}"], bench_db
    )
    assert "host_stats" in json.loads(out.read_text())


def test_ab_runs_are_stored_with_their_arm(bench_db, tmp_path):
    db = tmp_path / "ab.sqlite"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pgsurge",
            "ab",
            "--runs",
            "2",
            "--warmup",
            "1",
            "--a",
            "",
            "--b",
            "-M prepared",
            "--out",
            str(tmp_path / "out"),
            "--",
            "-S",
            "-c",
            "1",
            "-t",
            "20",
            "-n",
            f"--store={db}",
            bench_db,
        ],
        capture_output=True,
        text=True,
        env=tool_env(),
        timeout=300,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    got = [(run.labels["arm"], run.labels["ab"]) for run in store_runs(db)]
    # one warm-up per arm, then two runs per arm in ABBA order
    assert got == [
        ("A", "warmup"),
        ("B", "warmup"),
        ("A", "run"),
        ("B", "run"),
        ("B", "run"),
        ("A", "run"),
    ]

"""The results store without a server: SQLite, history, change points, import.

The synthetic histories are result files edited from a real ``--json``
document (``tests/fix_data.write_result``), imported with ``pgsurge store
import`` and read back with ``pgsurge history``, in-process (``run_cli``).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import sqlite3
import stat
from pathlib import Path

import numpy as np
import pytest

from pgsurge.store.backend import SCHEMA_VERSION, open_store
from pgsurge.store.changes import find_changes
from pgsurge.store.location import resolve
from pgsurge.store.records import save_document
from tests.fix_cli import base_env, run_cli
from tests.fix_data import result_doc, write_result

BASE_TPS = 1000.0


def history_values(seed: int, *, step_at: int | None, n: int = 30) -> list[float]:
    """``n`` runs' tps with 2 % noise; from run ``step_at`` (1-based) on, 5 %
    slower."""
    rng = np.random.default_rng(seed)
    values = BASE_TPS * (1 + 0.02 * rng.standard_normal(n))
    if step_at is not None:
        values[step_at - 1 :] *= 0.95
    return [float(v) for v in values]


def import_history(tmp_path: Path, values: list[float], store: Path) -> None:
    files = [
        write_result(tmp_path / f"r{i:02d}.json", v, seq=i)
        for i, v in enumerate(values)
    ]
    r = run_cli(["store", "import", *files, f"--store={store}"])
    assert r.status == 0, r.stderr
    assert r.stdout.endswith(f"{len(values)} added, 0 already stored, in {store}\n")


def test_a_five_percent_step_is_found_at_its_run_and_fails_the_gate(tmp_path):
    store = tmp_path / "s.sqlite"
    import_history(tmp_path, history_values(7, step_at=20), store)
    r = run_cli(["history", f"--store={store}", "--fail-on", "regression"])
    assert r.status == 3, r.stdout + r.stderr
    found = re.findall(
        r"^change at run (\d+): tps ([\d.]+) -> ([\d.]+), ([-+][\d.]+) %",
        r.stdout,
        re.M,
    )
    assert len(found) == 1, r.stdout
    run, _before, _after, change = found[0]
    assert 19 <= int(run) <= 21
    assert -7.0 < float(change) < -3.0
    # the table marks it, newest last; the gate names the runs
    lines = r.stdout.splitlines()
    assert lines[1].split()[:3] == ["run", "start", "tps"]
    assert [ln.split()[0] for ln in lines[2:32]] == [str(i) for i in range(1, 31)]
    assert "<- change" in lines[1 + int(run)]
    assert "regression beyond 2 %: change at run" in r.stderr
    assert f"vs {run}-30" in r.stderr
    # a threshold above the step lets it pass; so does no --fail-on
    assert (
        run_cli(
            [
                "history",
                f"--store={store}",
                "--fail-on",
                "regression",
                "--threshold",
                "8",
            ]
        ).status
        == 0
    )
    assert run_cli(["history", f"--store={store}"]).status == 0


def test_an_improvement_is_a_change_but_not_a_regression(tmp_path):
    store = tmp_path / "s.sqlite"
    values = [
        v / 0.95 if i >= 19 else v
        for i, v in enumerate(history_values(7, step_at=None))
    ]
    import_history(tmp_path, values, store)
    r = run_cli(["history", f"--store={store}", "--fail-on", "regression"])
    assert r.status == 0, r.stderr
    assert re.search(r"^change at run \d+: .*: faster$", r.stdout, re.M)
    # latency went down with it: the same change, better for that metric too
    r = run_cli(["history", f"--store={store}", "--metric", "latency"])
    assert re.search(r"^change at run \d+: latency avg .*: faster$", r.stdout, re.M)


def test_noise_alone_makes_no_change_point_in_95_of_100_histories():
    flagged = [s for s in range(100) if find_changes(history_values(s, step_at=None))]
    assert len(flagged) <= 5, flagged


def test_a_step_is_found_in_most_histories_within_two_runs():
    found = 0
    for s in range(100):
        changes = find_changes(history_values(1000 + s, step_at=20))
        found += any(abs(c.index + 1 - 20) <= 2 for c in changes)
    assert found >= 90


def test_history_without_a_change_passes_the_gate(tmp_path):
    store = tmp_path / "s.sqlite"
    seed = next(
        s for s in range(100) if not find_changes(history_values(s, step_at=None))
    )
    import_history(tmp_path, history_values(seed, step_at=None), store)
    r = run_cli(["history", f"--store={store}", "--fail-on", "regression"])
    assert r.status == 0
    assert r.stdout.endswith("no change points\n")


def test_labels_filter_and_importing_twice_stores_once(tmp_path):
    store = tmp_path / "s.sqlite"
    a = write_result(
        tmp_path / "a.json", 900.0, seq=1, edit={"labels": {"branch": "x"}}
    )
    b = write_result(tmp_path / "b.json", 950.0, seq=2)
    r = run_cli(["store", "import", a, b, f"--store={store}", "--label", "host=h1"])
    assert r.status == 0, r.stderr
    r = run_cli(["store", "import", a, f"--store={store}"])
    assert (
        r.stdout
        == f"{a}: already stored as run 1\n0 added, 1 already stored, in {store}\n"
    )
    r = run_cli(["history", f"--store={store}", "--label", "branch=x"])
    assert r.status == 0
    rows = [ln.split() for ln in r.stdout.splitlines()[2:] if ln[:3].strip().isdigit()]
    assert [row[0] for row in rows] == ["1"]
    assert rows[0][-2:] == ["branch=x", "host=h1"]
    r = run_cli(["history", f"--store={store}", "--label", "branch=y"])
    assert r.status == 1
    assert (
        r.stderr == f"pgsurge: error: no stored runs match in {store} "
        "(check --label and --workload)\n"
    )


def test_runs_of_other_workloads_are_not_mixed(tmp_path):
    store = tmp_path / "s.sqlite"
    files = [write_result(tmp_path / f"a{i}.json", 1000.0 + i, seq=i) for i in range(3)]
    files += [
        write_result(tmp_path / "c.json", 500.0, seq=9, edit={"config.clients": 8})
    ]
    assert run_cli(["store", "import", *files, f"--store={store}"]).status == 0
    r = run_cli(["history", f"--store={store}"])
    # the newest run's workload (-c 8) alone, the others named
    assert r.stdout.startswith("workload ")
    assert ": 1 runs, newest last" in r.stdout.splitlines()[0]
    key = re.search(r"other workloads: (\w+);", r.stdout).group(1)
    r = run_cli(["history", f"--store={store}", "--workload", key[:6]])
    assert ": 3 runs, newest last" in r.stdout.splitlines()[0]


def with_env(doc: dict, **settings: str) -> dict:
    doc["environment"] = {
        "version": 1,
        "client": {
            "cpu_model": "X",
            "cpus": 2,
            "memory_gib": 8,
            "kernel": "6.1",
            "governor": None,
            "hostname": "a",
        },
        "server": {"version": "18.6", "settings": dict(settings), "data_bytes": 1},
        "pgsurge": {"version": "0.1.0", "c_loop": True},
    }
    return doc


def test_history_and_compare_warn_when_the_environment_changes(tmp_path):
    store = tmp_path / "s.sqlite"
    paths = []
    for i in range(4):
        doc = with_env(
            result_doc(),
            shared_buffers="256MB",
            **({"synchronous_commit": "off"} if i >= 2 else {}),
        )
        doc["start"] = f"2026-01-01T10:0{i}:00.000000Z"
        doc["environment"]["client"]["hostname"] = f"host{i}"  # not counted
        doc["environment"]["server"]["settings"]["port"] = str(5432 + i)  # nor this
        path = tmp_path / f"e{i}.json"
        path.write_text(json.dumps(doc))
        paths.append(str(path))
    assert run_cli(["store", "import", *paths, f"--store={store}"]).status == 0
    r = run_cli(["history", f"--store={store}"])
    assert r.stderr == (
        "pgsurge: warning: run 3 ran in another environment than run 2: "
        "server setting synchronous_commit default -> off\n"
    )
    r = run_cli(["compare", paths[0], "--vs", paths[1], paths[3]])
    assert r.stderr.endswith(
        "pgsurge: warning: e3.json ran in another environment than e0.json: "
        "server setting synchronous_commit default -> off\n"
    ), r.stderr
    assert "e1.json ran" not in r.stderr


def test_an_older_schema_store_is_migrated(tmp_path):
    path = tmp_path / "old.sqlite"
    old = open_store(resolve(str(path)), migrate=False)
    assert old.migrate(upto=1) == 0
    doc = with_env(result_doc())
    # a schema-1 row, as a pgsurge of that schema wrote it (no fingerprint)
    old.execute(
        "INSERT INTO runs (stored_at, started_at, workload_key, source, doc)"
        " VALUES ('2026-01-01T00:00:00Z', ?, 'k1', 'run', ?)",
        (doc["start"], json.dumps(doc)),
    )
    old.execute("INSERT INTO run_labels VALUES (1, 'commit', 'abc')")
    old.close()
    store = open_store(resolve(str(path)))
    assert store.version() == SCHEMA_VERSION == 2
    (run,) = store.runs({"commit": "abc"})
    assert run.fingerprint_key is not None and len(run.fingerprint_key) == 16
    # the same document is now recognised as stored
    assert store.add(
        doc,
        workload_key="k1",
        fingerprint_key=None,
        labels={},
        source="x",
        stored_at="t",
    ) == (1, False)
    store.close()
    r = run_cli(["history", f"--store={path}"])
    assert r.status == 0 and "commit=abc" in r.stdout


def test_a_newer_schema_is_refused_in_one_line(tmp_path):
    path = tmp_path / "new.sqlite"
    open_store(resolve(str(path))).close()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE store_meta SET value = '99' WHERE key = 'schema_version'")
    db.close()
    r = run_cli(["history", f"--store={path}"])
    assert r.status == 1
    assert r.stderr == (
        f"pgsurge: error: results store {path} has schema 99, newer than this "
        "pgsurge writes (2): upgrade pgsurge\n"
    )


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (
            lambda p: p.write_bytes(b"not a database at all" * 100),
            "pgsurge: error: could not open results store {p}: "
            "file is not a database\n",
        ),
        (
            lambda p: p.symlink_to(p.parent / "elsewhere.sqlite"),
            'pgsurge: error: refusing to use results store "{p}": '
            "it is a symbolic link\n",
        ),
        (
            lambda p: p.mkdir(),
            'pgsurge: error: refusing to use results store "{p}": '
            "it is not a regular file\n",
        ),
    ],
)
def test_an_unusable_store_is_one_line(tmp_path, make, expected):
    path = tmp_path / "bad.sqlite"
    make(path)
    for args in (
        ["history"],
        ["store", "import", write_result(tmp_path / "r.json", 1.0)],
    ):
        r = run_cli([*args, f"--store={path}"])
        assert (r.status, r.stdout, r.stderr) == (1, "", expected.format(p=path))


def test_a_bad_uri_is_one_line_without_its_password(tmp_path):
    uri = "postgresql://me:s3cret@/nodb?host=/nonexistent/dir&connect_timeout=2"
    r = run_cli(["history", f"--store={uri}"])
    assert r.status == 1
    assert r.stderr.count("\n") == 1 and r.stderr.startswith(
        "pgsurge: error: could not connect to results store postgresql://me:********@"
    ), r.stderr
    assert "s3cret" not in r.stderr


def test_the_default_store_is_private_in_the_data_location(tmp_path):
    env = {**base_env(), "PGSURGE_DATA_DIR": str(tmp_path / "loc")}
    f = write_result(tmp_path / "r.json", 1000.0)
    r = run_cli(["store", "import", f], env=env)
    assert r.status == 0, r.stderr
    db = tmp_path / "loc" / "results.sqlite"
    assert stat.S_IMODE(os.stat(tmp_path / "loc").st_mode) == 0o700
    assert stat.S_IMODE(os.stat(db).st_mode) == 0o600
    assert r.stdout.endswith(f"1 added, 0 already stored, in {db}\n")
    # PGSURGE_STORE names another store; --store=PATH wins over both
    env["PGSURGE_STORE"] = str(tmp_path / "env.sqlite")
    assert run_cli(["store", "import", f], env=env).stdout.endswith(
        f"in {tmp_path / 'env.sqlite'}\n"
    )


def test_a_symlinked_data_location_is_refused(tmp_path):
    (tmp_path / "real").mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(tmp_path / "real")
    env = {**base_env(), "PGSURGE_DATA_DIR": str(tmp_path / "link")}
    r = run_cli(["history"], env=env)
    assert r.status == 1
    assert r.stderr == (
        f"pgsurge: error: results store: refusing to use {tmp_path / 'link'}: "
        "it is a symbolic link\n"
    )


def _writer(path: str, worker: int, n: int) -> None:
    store = open_store(resolve(path))
    for i in range(n):
        doc = result_doc()
        doc["start"] = f"2026-01-01T10:{worker:02d}:{i:02d}.000000Z"
        save_document(store, doc, name="x", source=f"w{worker}")
    store.close()


def test_four_concurrent_writers_lose_nothing(tmp_path):
    path = str(tmp_path / "c.sqlite")
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(path, w, 25)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    store = open_store(resolve(path))
    runs = store.runs()
    store.close()
    assert len(runs) == 100
    assert sorted(r.source for r in runs) == sorted(
        f"w{w}" for w in range(4) for _ in range(25)
    )


def test_the_trend_page_marks_the_change_and_links_every_run(tmp_path):
    store = tmp_path / "s.sqlite"
    import_history(tmp_path, history_values(7, step_at=20), store)
    page = tmp_path / "out" / "trend.html"
    page.parent.mkdir()
    r = run_cli(["report", "--history", f"--store={store}", "-o", str(page)])
    assert (r.status, r.stderr) == (0, "")
    text = page.read_text()
    assert text.count('class="change"') == 1
    assert re.search(r"<li>change at run (19|20|21): tps .*: slower</li>", text)
    links = re.findall(r'<a href="(trend-runs/run-\d+\.html)">', text)
    # each run twice: its point on the chart and its row in the table
    assert sorted(set(links)) == sorted(
        f"trend-runs/run-{i}.html" for i in range(1, 31)
    )
    run_page = (page.parent / links[0]).read_text()
    assert run_page.startswith("<!DOCTYPE html>") and "run 1" in run_page
    # to stdout: the page alone, its points linking nowhere
    r = run_cli(["report", "--history", f"--store={store}", "-o", "-"])
    assert r.status == 0 and "<svg" in r.stdout and "<a href" not in r.stdout
    r = run_cli(["report", "--history", f"--store={store}"])
    assert r.status == 1 and "-o/--output" in r.stderr


def test_a_zero_below_the_resolution_does_not_hide_a_change():
    # p50 of a real history (ms): synchronous_commit off from run 6, and one
    # run whose median commit took under the clock's microsecond
    p50 = [3.249, 4.227, 1.297, 1.226, 4.947, 0.088, 0.0, 0.096, 0.119, 0.094]
    (change,) = find_changes(p50)
    assert change.index == 5 and change.change < -0.9


def test_history_as_json_for_ci(tmp_path):
    store = tmp_path / "s.sqlite"
    import_history(tmp_path, history_values(7, step_at=20), store)
    args = ["history", f"--store={store}", "--fail-on", "regression", "--json"]
    r = run_cli([*args, "-"])
    assert r.status == 3
    doc = json.loads(r.stdout)  # stdout is the document alone
    assert r.stderr.startswith("workload ")  # the table went to stderr
    assert [run["id"] for run in doc["runs"]] == list(range(1, 31))
    (change,) = doc["changes"]
    assert doc["regression"] == change and change["worse"] is True
    assert change["after_runs"][-1] == 30 and change["before_runs"][0] == 1
    assert change["interval"][0] < change["change"] < change["interval"][1] < 0
    r = run_cli([*args, str(tmp_path / "h.json")])
    assert json.loads((tmp_path / "h.json").read_text()) == doc
    assert r.stdout.startswith("workload ")


def test_runs_that_processed_nothing_make_no_change_point(tmp_path):
    # hostile finding: five runs at 3559 tps and three at 0 were printed as
    # "3559.0 -> 1779.5, -50.0 % (interval -50.0 % to -50.0 %), p = 0":
    # a zero counted as half the smallest run, and no spread gave p = 0
    store = tmp_path / "s.sqlite"
    files = [write_result(tmp_path / f"r{i}.json", 3559.0, seq=i) for i in range(5)]
    files += [
        write_result(
            tmp_path / f"z{i}.json",
            3559.0,
            seq=10 + i,
            edit={"totals.tps": 0.0, "totals.transactions": 0},
        )
        for i in range(3)
    ]
    assert run_cli(["store", "import", *files, f"--store={store}"]).status == 0
    r = run_cli(["history", f"--store={store}"])
    assert r.status == 0, r.stderr
    assert "change at" not in r.stdout and "-50.0 %" not in r.stdout
    assert r.stdout.count("nothing processed") == 3


def test_no_spread_gives_the_exact_permutation_p_never_zero():
    # identical values on each side: the t-test is undefined; the split
    # seen is the most extreme of comb(8, 5) = 56, so p = 2/56, not 0
    assert find_changes([100.0] * 5 + [90.0] * 3) == []
    (change,) = find_changes([100.0] * 10 + [90.0] * 10)
    assert change.index == 10 and change.p_value > 0


def test_history_on_a_missing_store_creates_nothing(tmp_path):
    # hostile finding B: history on a missing store created an empty file
    missing = tmp_path / "missing.sqlite"
    r = run_cli(["history", f"--store={missing}"])
    assert (r.status, r.stderr) == (
        1,
        f"pgsurge: error: no results store at {missing}\n",
    )
    assert not missing.exists()

"""Insight on a direct connection, as issue 25 found it wrong.

* ``pg_stat_statements`` rows of other users, whose query id a user
  without ``pg_read_all_stats`` may not see, are left out and counted,
  never diffed against one another (they had made-up figures);
* the monitor's own statements are not in the top statements on
  PostgreSQL 18 (which drops the comment the filter looked for);
* ``Client:ClientRead`` is split: idle between transactions (the client
  may be slow to send the next) against idle in a transaction (its round
  trips, locks held), and the client-bound hint comes only with the first.

The statement cases need ``pg_stat_statements`` preloaded: a cluster of
their own (``tests/fix_pgss.py``). That cluster and the session's server
also make the two servers of a multi-host connection string
(``host=a,b``), whose per-server figures sum to the run's.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import psycopg
import pytest
from psycopg import sql

from pgsurge.report.json import load_schema
from tests.fix_run import Loop, Outcome, run_pgbench, run_pgsurge

pytestmark = pytest.mark.server

VALIDATOR = jsonschema.Draft202012Validator(load_schema())
#: words of the monitor's statements (views it reads, settings it makes)
MONITOR_WORDS = (
    "pg_stat_activity",
    "to_jsonb",
    "pg_settings",
    "to_regclass",
    "stats_fetch_consistency",
    "application_name",
    "pg_has_role",
    "version()",
)
HINT = "the client may be the bottleneck"


def json_run(
    args: list[str], dsn: str, tmp_path: Path, loop: Loop = "auto"
) -> tuple[Outcome, dict[str, Any]]:
    path = tmp_path / "result.json"
    path.unlink(missing_ok=True)
    out = run_pgsurge([*args, f"--json={path}"], dsn, cwd=tmp_path, loop=loop)
    assert out.status == 0, out.stderr
    doc: dict[str, Any] = json.loads(path.read_text())
    VALIDATOR.validate(doc)
    return out, doc


def script(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_other_users_statements_left_out(
    pgss_db: str, plain_role: str, tmp_path: Path
) -> None:
    # the superuser's statements: rows the plain role sees without query id
    first = run_pgsurge(["-n", "-S", "-c", "2", "-t", "200"], pgss_db, cwd=tmp_path)
    assert first.status == 0, first.stderr
    out, doc = json_run(
        ["-n", "-S", "-c", "2", "-T", "1", "--server-stats"], plain_role, tmp_path
    )
    stats = doc["server_stats"]
    top = stats["deltas"]["statements"]
    assert top, stats["deltas"]
    assert all(st["queryid"] is not None for st in top), top
    assert all("insufficient privilege" not in str(st["query"]) for st in top), top
    # its own select is there, with its own calls: the run's transactions
    mine = [st for st in top if "pgbench_accounts" in str(st["query"])]
    assert len(mine) == 1 and mine[0]["calls"] == doc["totals"]["processed"], top
    assert stats["statements_hidden"] >= 1
    assert "insufficient privilege" not in out.stdout
    assert f"({stats['statements_hidden']} statement" in out.stdout
    assert "of other users left out" in out.stdout
    # the superuser sees every row: nothing hidden
    _out, sdoc = json_run(
        ["-n", "-S", "-c", "2", "-T", "1", "--server-stats"], pgss_db, tmp_path
    )
    assert sdoc["server_stats"]["statements_hidden"] == 0


def test_monitor_statements_not_in_top_list(pgss_db: str, tmp_path: Path) -> None:
    _out, doc = json_run(
        ["-n", "-S", "-c", "2", "-T", "2", "-P", "1", "--server-stats", "--waits=20"],
        pgss_db,
        tmp_path,
    )
    stats = doc["server_stats"]
    assert stats["server_version_num"] >= 180000
    queries = [str(st["query"]) for st in stats["deltas"]["statements"]]
    assert any("pgbench_accounts" in q for q in queries), queries
    ours = [q for q in queries if any(w in q for w in MONITOR_WORDS)]
    assert ours == [], ours


def test_client_wait_split_idle_and_in_transaction(
    bench_db: str, tmp_path: Path
) -> None:
    # the client sleeps inside its transactions: the server waits on it
    # while idle in a transaction, which is no sign of a slow client
    inside = script(
        tmp_path,
        "inside.sql",
        "begin;\nselect 1;\n\\sleep 20 ms\nselect 1;\nend;\n",
    )
    out, doc = json_run(
        ["-n", "-f", inside, "-c", "4", "-T", "2", "--waits=20"], bench_db, tmp_path
    )
    waits = doc["waits"]
    top = waits["events"][0]
    assert (top["type"], top["event"]) == ("Client", "ClientRead in transaction"), (
        waits["events"]
    )
    assert waits["client_wait_in_transaction_share"] > 0.5, waits
    assert waits["client_wait_share"] < 0.5, waits
    assert HINT not in out.stdout
    assert "waiting for the client mid-transaction" in out.stdout
    # between transactions: idle, and the hint
    between = script(tmp_path, "between.sql", "select 1;\n\\sleep 20 ms\n")
    out, doc = json_run(
        ["-n", "-f", between, "-c", "4", "-T", "2", "--waits=20"], bench_db, tmp_path
    )
    waits = doc["waits"]
    top = waits["events"][0]
    assert (top["type"], top["event"]) == ("Client", "ClientRead"), waits["events"]
    assert (
        waits["client_wait_share"] > 0.5
        and not waits["client_wait_in_transaction_share"]
    ), waits
    assert HINT in out.stdout
    assert "idle: waiting for the client to start a transaction" in out.stdout


# -- a multi-host connection string -------------------------------------------


@pytest.fixture
def two_servers(server_dsn: str, pgss_server: str, pgbench_bin: Path) -> Iterator[str]:
    """One database name on two servers, both with the pgbench tables; a
    conninfo naming both hosts (clients spread over them at random)."""
    name = f"t_mh_{uuid.uuid4().hex[:10]}"
    admins = (server_dsn, pgss_server)
    parts = [psycopg.conninfo.conninfo_to_dict(d) for d in admins]
    for admin in admins:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        init = run_pgbench(
            pgbench_bin,
            ["-i", "-s", "1", "-q"],
            psycopg.conninfo.make_conninfo(admin, dbname=name),
        )
        assert init.status == 0, init.stderr
    yield psycopg.conninfo.make_conninfo(
        host=",".join(str(p["host"]) for p in parts),
        port=",".join(str(p.get("port") or 5432) for p in parts),
        user=str(parts[0]["user"]),
        dbname=name,
        load_balance_hosts="random",
    )
    for admin in admins:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                    sql.Identifier(name)
                )
            )


def test_multi_host_figures_per_server(two_servers: str, tmp_path: Path) -> None:
    # 16 clients over two servers at random: all on one has odds 2**-15
    out, doc = json_run(
        ["-n", "-S", "-c", "16", "-j", "2", "-T", "1"], two_servers, tmp_path
    )
    targets = doc["targets"]
    assert len(targets) == 2, targets
    hosts = {t["target"].rsplit(":", 1)[0] for t in targets}
    assert len(hosts) == 2, targets
    assert sum(t["clients"] for t in targets) == 16
    processed = doc["totals"]["processed"]
    assert sum(t["transactions"] for t in targets) == processed
    assert all(t["transactions"] > 0 for t in targets), targets
    assert sum(t["tps"] for t in targets) == pytest.approx(
        processed / doc["duration_s"], rel=1e-6
    )
    assert "the clients reached 2 servers" in out.stderr
    # one server: nothing of the kind
    single = run_pgsurge(
        ["-n", "-S", "-c", "4", "-T", "1"],
        two_servers.replace("load_balance_hosts=random", ""),
        cwd=tmp_path,
    )
    assert single.status == 0, single.stderr
    assert "servers:" not in single.stderr


@pytest.mark.parametrize("loop", ["c", "python"])
def test_multi_host_latency_per_server(
    two_servers: str, tmp_path: Path, loop: Loop
) -> None:
    # one server answers 20 ms late (the script sleeps on the server whose
    # port is the second host's): its latency average says so, the other's
    # does not (both count the client's time between transactions too, as
    # pgbench's latency average without per-transaction timing does: the
    # fast one reads above its measured latency on a busy machine)
    ports = two_servers.split("port=")[1].split()[0].strip("'").split(",")
    script = tmp_path / "slow.sql"
    script.write_text(
        "SELECT pg_sleep(CASE WHEN current_setting('port') = "
        f"'{ports[1]}' THEN 0.02 ELSE 0 END);\n"
    )
    out, doc = json_run(
        ["-n", "-f", str(script), "-c", "16", "-j", "2", "-T", "2"],
        two_servers,
        tmp_path,
        loop=loop,
    )
    by_port = {t["target"].rsplit(":", 1)[1]: t for t in doc["targets"]}
    assert sorted(by_port) == sorted(ports), doc["targets"]
    slow, fast = by_port[ports[1]]["latency_ms"], by_port[ports[0]]["latency_ms"]
    assert slow >= 19.5, doc["targets"]
    assert fast < slow / 2, doc["targets"]
    assert f"latency average {slow:.3f} ms" in out.stderr
    # a -t run has no such figure: early finishers would look slow
    out, doc = json_run(
        ["-n", "-S", "-c", "16", "-j", "2", "-t", "20"],
        two_servers,
        tmp_path,
        loop=loop,
    )
    assert all(t["latency_ms"] is None for t in doc["targets"]), doc["targets"]


@pytest.mark.parametrize("loop", ["c", "python"])
@pytest.mark.parametrize(
    ("case", "args"),
    [
        # a division by zero in one transaction of four: failures
        ("failed", ["--continue-on-error"]),
        # a rate no machine sustains, so that slots fall more than 0.05 ms
        # behind whatever the load: skipped transactions (at -R 4000 a
        # quick enough run skipped none)
        ("skipped", ["-R", "500000", "--latency-limit", "0.05"]),
    ],
)
def test_multi_host_figures_sum_with_failed_and_skipped(
    two_servers: str, tmp_path: Path, loop: Loop, case: str, args: list[str]
) -> None:
    """The per-server counts were the clients' ended transactions (failed
    and skipped ones too): they summed to more than the run's processed
    transactions, their tps to more than its tps (hostile finding)."""
    f = script(tmp_path, "s.sql", "\\set x random(0, 3)\nselect 1 / :x;\n")
    if case == "skipped":
        f = script(tmp_path, "s.sql", "select 1;\n")
    path = tmp_path / "result.json"
    run = ["-n", "-f", f, "-c", "16", "-j", "2", "-T", "2", *args, f"--json={path}"]
    out = run_pgsurge(run, two_servers, cwd=tmp_path, loop=loop)
    assert out.status == 0, out.stderr
    doc: dict[str, Any] = json.loads(path.read_text())
    VALIDATOR.validate(doc)
    totals = doc["totals"]
    assert totals[case] > 0, totals  # the case happened
    targets = doc["targets"]  # 16 clients all on one server: odds 2**-15
    assert len(targets) == 2, targets
    assert sum(t["transactions"] for t in targets) == totals["processed"], (
        targets,
        totals,
    )
    assert sum(t["tps"] for t in targets) == pytest.approx(totals["tps"], rel=1e-6)


def test_monitor_on_one_of_several_hosts(
    two_servers: str, pgss_server: str, tmp_path: Path
) -> None:
    """With host=a,b the run spans both servers: --monitor on either is
    accepted (the check that it reaches the run's server is for one host)."""
    ordered = psycopg.conninfo.make_conninfo(two_servers, load_balance_hosts="disable")
    name = psycopg.conninfo.conninfo_to_dict(two_servers)["dbname"]
    second = psycopg.conninfo.make_conninfo(pgss_server, dbname=name)
    args = ["-n", "-S", "-c", "2", "-t", "20", "--waits=50", f"--monitor={second}"]
    out = run_pgsurge(args, ordered, cwd=tmp_path)
    assert out.status == 0, out.stderr
    assert "--monitor: it reaches" not in out.stderr


def test_monitor_of_a_multi_host_run_says_it_sees_one(
    two_servers: str, tmp_path: Path
) -> None:
    """The clients on two servers, the monitor on one: "wait events of 16
    backends" and counters divided by every server's transactions, with no
    word that half the clients were out of its sight."""
    f = script(tmp_path, "s.sql", "select pg_sleep(0.01);\n")
    args = ["-n", "-f", f, "-c", "16", "-j", "2", "-T", "1", "--waits=50"]
    out, doc = json_run([*args, "--server-stats"], two_servers, tmp_path)
    assert len(doc["targets"]) == 2, doc["targets"]  # odds 2**-15 otherwise
    said = [ln for ln in out.stderr.splitlines() if "the monitor watches one" in ln]
    assert len(said) == 1 and "reached 2 servers" in said[0], out.stderr

"""Hostile pooler findings in pure logic (issue 25).

* --pooler-admin against a console that answers with other columns
  (PgBouncer before 1.8: ``total_requests`` for the transactions, or
  another pooler's console): its figures read as zeros that looked
  measured ("0 transactions passed on, up to 0 clients waiting"); now the
  answer is refused with the missing columns named.
* --waits behind a pooler: "the client may be the bottleneck" pointed at
  pgsurge while clients queued at the pooler; now the line names it.
* --waits whose sampler query was held (a paused or full pooler): the
  shares were printed with no word of the seconds left unsampled.
"""

from __future__ import annotations

from typing import Any

import pytest

from pgsurge.insight.pooladmin import PoolAdminError, check_columns
from pgsurge.report.insight import insight_warnings, render_insight

#: PgBouncer 1.7's SHOW STATS and SHOW POOLS
STATS_17 = [
    "database",
    "total_requests",
    "total_received",
    "total_sent",
    "total_query_time",
    "avg_req",
    "avg_recv",
    "avg_sent",
    "avg_query",
]
POOLS_17 = [
    "database",
    "user",
    "cl_active",
    "cl_waiting",
    "sv_active",
    "sv_idle",
    "sv_used",
    "sv_tested",
    "sv_login",
    "maxwait",
    "pool_mode",
]
#: PgBouncer 1.18's (Debian 12)
STATS_118 = [
    "database",
    "total_xact_count",
    "total_query_count",
    "total_received",
    "total_sent",
    "total_xact_time",
    "total_query_time",
    "total_wait_time",
    "avg_xact_count",
    "avg_query_count",
    "avg_recv",
    "avg_sent",
    "avg_xact_time",
    "avg_query_time",
    "avg_wait_time",
]
POOLS_118 = [
    "database",
    "user",
    "cl_active",
    "cl_waiting",
    "cl_cancel_req",
    "sv_active",
    "sv_idle",
    "sv_used",
    "sv_tested",
    "sv_login",
    "maxwait",
    "maxwait_us",
    "pool_mode",
]


def test_an_old_consoles_stats_are_refused_with_the_missing_columns() -> None:
    with pytest.raises(PoolAdminError) as exc:
        check_columns("SHOW STATS", STATS_17)
    text = str(exc.value)
    assert text.startswith("SHOW STATS has no column total_xact_count"), text
    assert "total_wait_time" in text and "1.8" in text


def test_a_console_without_the_pool_columns_is_refused() -> None:
    with pytest.raises(PoolAdminError, match="SHOW POOLS has no column sv_used"):
        check_columns("SHOW POOLS", [c for c in POOLS_118 if c != "sv_used"])


def test_the_columns_of_17_pools_and_118_are_read() -> None:
    # maxwait_us is optional (1.8 added it); 1.7's SHOW POOLS is enough
    check_columns("SHOW POOLS", POOLS_17)
    check_columns("SHOW POOLS", POOLS_118)
    check_columns("SHOW STATS", STATS_118)


def _waits(
    max_ms: float, period_ms: float = 100.0, source: str = "pg_stat_activity"
) -> dict[str, Any]:
    return {
        "waits": {
            "source": source,
            "period_ms": period_ms,
            "sampler_query_ms": {"count": 20, "avg": 250.0, "max": max_ms},
        }
    }


def test_a_held_sampler_query_is_called_out() -> None:
    pooled = {**_waits(5089.0), "pooler": {"mode": "transaction"}}
    text = insight_warnings(pooled, "pgsurge")
    assert text == (
        "pgsurge: warning: --waits: a sampler query took 5.1 s (one is due "
        "every 100 ms): nothing was sampled meanwhile (behind a pooler it "
        "waits for a server connection as the clients do; --monitor DSN goes "
        "straight to the server)\n"
    )
    # a direct run's held query (a machine too busy to answer it: 1 s and
    # more under load) is told, naming no pooler
    assert insight_warnings(_waits(1200.0), "pgsurge") == (
        "pgsurge: warning: --waits: a sampler query took 1.2 s (one is due "
        "every 100 ms): nothing was sampled meanwhile\n"
    )


def test_a_slow_but_regular_sampler_is_not() -> None:
    assert insight_warnings(_waits(120.0), "pgsurge") == ""
    # a long period: ten of them before a query counts as held
    assert insight_warnings(_waits(4000.0, period_ms=1000.0), "pgsurge") == ""
    # pg_wait_sampling samples on the server while its read waits
    assert insight_warnings(_waits(5000.0, source="pg_wait_sampling"), "p") == ""


def _client_bound_doc(**extra: Any) -> dict[str, Any]:
    waits = {
        "source": "pg_stat_activity",
        "period_ms": 20.0,
        "attribution": "application_name",
        "server_backends_seen": 1,
        "samples": 100,
        "events": [{"type": "Client", "event": "ClientRead", "share": 0.9}],
        "client_wait_share": 0.9,
        "sampler_query_ms": {"count": 100, "avg": 1.0, "max": 2.0},
    }
    return {"waits": waits, **extra}


def test_client_bound_line_names_the_pooler_behind_one() -> None:
    direct = render_insight(_client_bound_doc())
    assert (
        "the server waited for the client in 90% of the samples: the client "
        "may be the bottleneck\n" in direct
    )
    pooler = {"mode": "transaction", "application_name": "pgsurge"}
    behind = render_insight(_client_bound_doc(pooler=pooler))
    assert "the client may be the bottleneck" not in behind
    assert "behind a connection pooler that client is the pooler" in behind
    admin = {"database": "db", "xacts": 10, "max_cl_waiting": 7, "reads": 2}
    queued = render_insight(_client_bound_doc(pooler=pooler, pooler_admin=admin))
    assert (
        "the server waited for the client in 90% of the samples, while clients "
        "waited for a server connection (up to 7 at once; the pooler's "
        "console): the pooler may be the bottleneck, not the clients\n" in queued
    )
    # no read saw a queue, but the console's summed wait did: a loaded
    # client box whose clients were between transactions at every read
    summed = render_insight(
        _client_bound_doc(
            pooler=pooler,
            pooler_admin={**admin, "max_cl_waiting": 0, "wait_ms_per_xact": 0.25},
        )
    )
    assert (
        "while clients waited for a server connection (none at a read, 0.250 ms "
        "per transaction; the pooler's console): the pooler may be" in summed
    )
    # nobody waited at the pooler: the pooler or the clients
    idle_pool = render_insight(
        _client_bound_doc(pooler=pooler, pooler_admin={**admin, "max_cl_waiting": 0})
    )
    assert "that client is the pooler" in idle_pool

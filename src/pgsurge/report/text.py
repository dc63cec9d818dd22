"""The final text report, byte-compatible with pgbench 18.6's ``printResults``.

``render_text`` is a pure function of a ``RunResult``: same lines, same
conditions, same number formatting as pgbench (C ``printf`` of doubles that
are computed with the same operations in the same order; see
``pgsurge.cnum`` for the few places where Python needs help).

pgbench prints its banner when it connects, before the run, and the rest
at the end; the runner does the same with ``render_banner`` first and
``render_text(result, banner=False)`` last, then ``render_abort_notice``
on stderr (exit status 2 when it is not empty).

Differences from pgbench, on purpose:

* the banner always reads ``pgsurge (<pgsurge version>, server <server
  version>)``: pgbench prints ``pgbench (18.6)`` when client and server
  versions match and ``pgbench (18.6, server 17.4)`` otherwise, but our
  version is not PostgreSQL's, so the server's is always worth showing;
* under --continue-on-error (a PostgreSQL 19 option) --failures-detailed
  adds PG19's ``number of other failures`` lines; without it the output is
  18.6's.
"""

from __future__ import annotations

from pgsurge.cnum import c_div, c_fmt, c_sqrt, wrap_int32
from pgsurge.stats.counters import StatsData
from pgsurge.stats.results import RunResult
from pgsurge.stats.simple import SimpleStats

ABORT_NOTICE = "Run was aborted; the above results are incomplete."


def render_banner(pgsurge_version: str, server_version: str) -> str:
    """The first stdout line, printed once connected (pgbench ``printVersion``)."""
    return f"pgsurge ({pgsurge_version}, server {server_version})\n"


def render_abort_notice(result: RunResult, progname: str = "pgsurge") -> str:
    """The stderr line pgbench writes after the report of an aborted run,
    or an empty string when no client aborted."""
    if not result.aborted:
        return ""
    return f"{progname}: error: {ABORT_NOTICE}\n"


def render_interrupt_notice(result: RunResult, progname: str = "pgsurge") -> str:
    """The stderr line after the report of a run a signal interrupted
    (pgbench prints nothing: it dies at once), or an empty string."""
    if result.interrupted_by is None:
        return ""
    return (
        f"{progname}: run interrupted by {result.interrupted_by} after "
        f"{result.interrupted_after_us / 1e6:.3f} s; the above results cover "
        "what ran until then\n"
    )


def _pct(part: int, whole: int) -> str:
    return c_fmt("%.3f", c_div(100.0 * part, whole))


def _simple_stats_lines(prefix: str, ss: SimpleStats) -> list[str]:
    # pgbench printSimpleStats: nothing at all for an empty series
    if ss.count <= 0:
        return []
    latency = ss.sum / ss.count
    stddev = c_sqrt(ss.sum2 / ss.count - latency * latency)
    return [
        f"{prefix} average = {c_fmt('%.3f', 0.001 * latency)} ms",
        f"{prefix} stddev = {c_fmt('%.3f', 0.001 * stddev)} ms",
    ]


def render_text(result: RunResult, *, banner: bool = True) -> str:
    """The whole stdout report; with ``banner`` the version line first."""
    facts = result.facts
    total = result.total
    lines: list[str] = []

    failures = total.failures
    total_cnt = total.cnt + total.skipped + failures
    bench_duration = 0.000001 * result.total_duration_us
    tps = c_div(total.cnt, bench_duration)

    nscripts = len(facts.scripts)
    lines.append(
        "transaction type: "
        + (facts.scripts[0].desc if nscripts == 1 else "multiple scripts")
    )
    lines.append(f"scaling factor: {facts.scale}")
    if facts.partition_method != "none":
        lines.append(f"partition method: {facts.partition_method}")
        lines.append(f"partitions: {facts.partitions}")
    lines.append(f"query mode: {facts.query_mode}")
    lines.append(f"number of clients: {facts.clients}")
    lines.append(f"number of threads: {facts.threads}")
    if facts.max_tries:
        lines.append(f"maximum number of tries: {facts.max_tries}")
    if facts.duration_s is None or facts.duration_s <= 0:
        nxacts = facts.transactions_per_client or 0
        lines.append(f"number of transactions per client: {nxacts}")
        lines.append(
            "number of transactions actually processed: "
            f"{total.cnt}/{wrap_int32(nxacts * facts.clients)}"
        )
    else:
        lines.append(f"duration: {facts.duration_s} s")
        if facts.warmup_s:  # --warmup's own line: without it, pgbench's bytes
            lines.append(f"after a warm-up of {facts.warmup_s} s (not counted)")
        lines.append(f"number of transactions actually processed: {total.cnt}")

    # pgbench stops here when nothing ran (every client failed early)
    if total_cnt > 0:
        lines.extend(_totals(result, failures, total_cnt, tps))
        if facts.per_script_stats or facts.report_per_command:
            lines.extend(_per_script(result, total_cnt, bench_duration))

    text = "\n".join(lines) + "\n"
    if banner:
        text = render_banner(facts.pgsurge_version, facts.server_version) + text
    return text


def _totals(result: RunResult, failures: int, total_cnt: int, tps: float) -> list[str]:
    facts = result.facts
    total = result.total
    lines = [
        f"number of failed transactions: {failures} ({_pct(failures, total_cnt)}%)"
    ]
    if facts.failures_detailed:
        lines.extend(
            _failure_detail_lines(
                "", total, total_cnt, facts.continue_on_error, facts.reconnect > 0
            )
        )
    # retries can only happen when max_tries != 1
    if facts.max_tries != 1:
        lines.append(
            f"number of transactions retried: {total.retried} "
            f"({_pct(total.retried, total_cnt)}%)"
        )
        lines.append(f"total number of retries: {total.retries}")
    if facts.throttled and facts.latency_limit_us:
        lines.append(
            f"number of transactions skipped: {total.skipped} "
            f"({_pct(total.skipped, total_cnt)}%)"
        )
    if facts.latency_limit_us:
        late_pct = 100.0 * result.latency_late / total.cnt if total.cnt > 0 else 0.0
        lines.append(
            "number of transactions above the "
            f"{c_fmt('%.1f', facts.latency_limit_us / 1000.0)} ms latency limit: "
            f"{result.latency_late}/{total.cnt} ({c_fmt('%.3f', late_pct)}%)"
        )
    if facts.latency_reported:
        lines.extend(_simple_stats_lines("latency", total.latency))
    else:
        # no per-transaction measurement: an average derived from run time
        avg = c_div(0.001 * result.total_duration_us * facts.clients, total_cnt)
        suffix = " (including failures)" if failures > 0 else ""
        lines.append(f"latency average = {c_fmt('%.3f', avg)} ms{suffix}")
    if facts.throttled:
        lag_avg = c_div(0.001 * total.lag.sum, total.cnt)
        lines.append(
            f"rate limit schedule lag: avg {c_fmt('%.3f', lag_avg)} "
            f"(max {c_fmt('%.3f', 0.001 * total.lag.max)}) ms"
        )
    if facts.connect_each_tx:
        avg_conn = c_div(0.001 * result.conn_total_us, total.cnt + failures)
        lines.append(f"average connection time = {c_fmt('%.3f', avg_conn)} ms")
        lines.append(f"tps = {c_fmt('%f', tps)} (including reconnection times)")
    else:
        conn = 0.001 * result.conn_elapsed_us
        lines.append(f"initial connection time = {c_fmt('%.3f', conn)} ms")
        lines.append(f"tps = {c_fmt('%f', tps)} (without initial connection time)")
    return lines


def _failure_detail_lines(
    prefix: str,
    stats: StatsData,
    total_cnt: int,
    with_other: bool,
    with_connection: bool = False,
) -> list[str]:
    lines = [
        f"{prefix}number of serialization failures: {stats.serialization_failures} "
        f"({_pct(stats.serialization_failures, total_cnt)}%)",
        f"{prefix}number of deadlock failures: {stats.deadlock_failures} "
        f"({_pct(stats.deadlock_failures, total_cnt)}%)",
    ]
    if with_other:
        lines.append(
            f"{prefix}number of other failures: {stats.other_failures} "
            f"({_pct(stats.other_failures, total_cnt)}%)"
        )
    if with_connection:  # --reconnect (pgsurge's): transactions lost with it
        lines.append(
            f"{prefix}number of connection failures: {stats.connection_failures} "
            f"({_pct(stats.connection_failures, total_cnt)}%)"
        )
    return lines


def _per_script(result: RunResult, total_cnt: int, bench_duration: float) -> list[str]:
    facts = result.facts
    per_script = facts.per_script_stats
    total_weight = facts.total_weight
    lines: list[str] = []
    for i, script in enumerate(facts.scripts):
        if per_script:
            sstats = result.per_script[i]
            sfail = sstats.failures
            stotal = sstats.cnt + sstats.skipped + sfail
            lines.append(f"SQL script {i + 1}: {script.desc}")
            target = c_div(100.0 * script.weight, total_weight)
            lines.append(
                f" - weight: {script.weight} "
                f"(targets {c_fmt('%.1f', target)}% of total)"
            )
            lines.append(
                f" - {stotal} transactions "
                f"({c_fmt('%.1f', c_div(100.0 * stotal, total_cnt))}% of total)"
            )
            if stotal > 0:
                stps = c_div(sstats.cnt, bench_duration)
                lines.append(
                    " - number of transactions actually processed: "
                    f"{sstats.cnt} (tps = {c_fmt('%f', stps)})"
                )
                lines.append(
                    f" - number of failed transactions: {sfail} "
                    f"({_pct(sfail, stotal)}%)"
                )
                if facts.failures_detailed:
                    lines.extend(
                        _failure_detail_lines(
                            " - ",
                            sstats,
                            stotal,
                            facts.continue_on_error,
                            facts.reconnect > 0,
                        )
                    )
                if facts.max_tries != 1:
                    lines.append(
                        f" - number of transactions retried: {sstats.retried} "
                        f"({_pct(sstats.retried, stotal)}%)"
                    )
                    lines.append(f" - total number of retries: {sstats.retries}")
                if facts.throttled and facts.latency_limit_us:
                    lines.append(
                        f" - number of transactions skipped: {sstats.skipped} "
                        f"({_pct(sstats.skipped, stotal)}%)"
                    )
            lines.extend(_simple_stats_lines(" - latency", sstats.latency))
        if facts.report_per_command:
            lines.extend(_command_table(result, i, per_script))
    return lines


def _command_table(result: RunResult, index: int, per_script: bool) -> list[str]:
    facts = result.facts
    one_try = facts.max_tries == 1
    lines = [
        (" - " if per_script else "")
        + "statement latencies in milliseconds"
        + (" and failures" if one_try else ", failures and retries")
        + ":"
    ]
    commands = result.per_command[index] if index < len(result.per_command) else []
    for j, first_line in enumerate(facts.scripts[index].commands):
        if j < len(commands):
            cstats = commands[j]
            lat = cstats.latency
            avg_ms = 0.001 * lat.sum / lat.count if lat.count > 0 else 0.0
            nfail, nretry = cstats.failures, cstats.retries
        else:
            avg_ms, nfail, nretry = 0.0, 0, 0
        if one_try:
            lines.append(f"   {c_fmt('%11.3f', avg_ms)}  {nfail:10d} {first_line}")
        else:
            lines.append(
                f"   {c_fmt('%11.3f', avg_ms)}  {nfail:10d} {nretry:10d} {first_line}"
            )
    return lines

"""The parent of a benchmark run: pgbench's ``main`` from connecting to the report.

``run(cfg)`` does what pgbench does once its options are parsed:

1. parse the scripts (errors end the program before any connection);
2. connect once: print the version banner, read ``:scale`` and the
   partitioning of ``pgbench_accounts`` when a builtin script is used
   (warning when ``-s`` is overridden), run the pre-run ``vacuum``/
   ``truncate`` unless ``-n`` (``starting vacuum...end.``; failures there
   are only warnings), and disconnect;
3. derive every PRNG state from ``--random-seed`` in pgbench's order and
   start one worker process per ``-j`` with its share of the clients
   (pgbench's split: thread ``i`` gets ``(n - dealt + j - i - 1)/(j - i)``);
4. drive the start-up barriers (READY, STEADY: connect, GO), so that
   every client starts together and the initial connection time is
   measured apart from the benchmark;
5. during the run, merge the workers' progress snapshots and print
   pgbench's progress line for all clients (``-P``) on stderr;
6. merge the workers' results and print the report on stdout; exit status
   2 when a client aborted (with pgbench's notice), 1 for fatal start-up
   errors;
7. pgsurge's extras after the report: ``--percentiles``/``--client-cpu``
   lines on stdout, the ``--json`` document, and — whatever the options —
   the one-line client-limited warning on stderr (runs of 1 s or more).
   With ``--json -`` the document alone goes to stdout and everything
   pgbench prints there (the banner, the report and its extra lines) goes
   to stderr instead.

Only this package (and ``cli``) writes to the console for a run;
workers write their clients' error messages to stderr themselves, as
pgbench's threads do. Steps 1 to 3 are in ``setup``, 4 to 6 up to the
merged result in ``drive`` (the default driver: this machine's
processes), the report and step 7 here.

A signal that kills pgbench kills all its threads. Here the first SIGINT
or SIGTERM of a running benchmark stops it gracefully and the report of
what ran is printed before the program dies of the signal
(``pgsurge.engine.interrupt``); before GO, or a second time, the workers
are killed and the parent dies of it at once. SIGHUP (a closed terminal)
kills the workers first, and the parent then dies of it, as pgbench would;
they would otherwise run on, orphaned. On Linux the kernel also kills the
workers when the parent dies of a signal no handler sees (SIGKILL).

A worker that dies (the OOM killer's SIGKILL) is named with how it ended;
the others stop gracefully, and the report of what the parent received is
printed, with status 2.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, TextIO

from pgsurge import __version__
from pgsurge.config import RunConfig
from pgsurge.engine import fastloop, threaded
from pgsurge.engine.interrupt import release_held
from pgsurge.engine.pool import RunFailed, split_clients
from pgsurge.engine.worker import WorkerSpec
from pgsurge.errors import (
    PROG,
    ConnectError,
    ExitStatus,
    PgsurgeError,
    RunInterrupted,
)
from pgsurge.report import live
from pgsurge.report.text import (
    render_abort_notice,
    render_interrupt_notice,
    render_text,
)
from pgsurge.runner.drive import drive_local, writer
from pgsurge.runner.setup import (
    Setup,
    TableInfo,
    epoch_shift_us,
    parse_scripts,
    pure_python_notice,
    read_counter_after,
    set_up,
    worker_specs,
    workload_figures_of,
)
from pgsurge.stats.results import RunFacts, RunResult

if TYPE_CHECKING:
    from pgsurge.insight import Monitor

__all__ = [
    "Driver",
    "TableInfo",
    "parse_scripts",
    "pure_python_notice",
    "run",
    "split_clients",
]

#: no client-limited warning for a shorter run: over a few milliseconds
#: (-t 10, a client aborting at once) the busy share measures start-up
#: and shutdown, not whether the client kept up with the server
WARN_MIN_DURATION_US = 1_000_000

#: runs a started run's workers and returns their merged result (see ``run``)
Driver = Callable[[Sequence[WorkerSpec], RunFacts, TextIO], RunResult]


def run(
    cfg: RunConfig,
    *,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
    on_result: Callable[[RunResult], None] | None = None,
    drive: Driver | None = None,
) -> ExitStatus:
    """Run the benchmark ``cfg`` and print pgbench's output; see the module doc.

    ``on_result`` receives the merged :class:`RunResult` before the report
    is printed (tests and the benchmark suite read the figures from it).
    ``drive`` runs the workers elsewhere (``--dask``: on several hosts) in
    place of this machine's processes; it gets their specs (all seeds
    derived here, by global client number) and returns the merged result,
    or raises :class:`~pgsurge.engine.pool.RunFailed`.
    """
    out = sys.stdout if stdout is None else stdout
    err = sys.stderr if stderr is None else stderr
    if drive is None and cfg.dask is None:
        cfg = _cap_jobs(cfg, err)
        # a misspelt PGSURGE_WORKERS or PGSURGE_CONNECT: before connecting
        threaded.requested()
        fastloop.concurrent_connect()
    # what pgbench prints on stdout; stderr when the JSON document takes it
    text_out = err if cfg.json_path == "-" else out
    parsed = parse_scripts(cfg)
    pure_notice = pure_python_notice()
    if pure_notice:
        err.write(pure_notice)
        err.flush()

    setup = set_up(cfg, text_out, err)
    facts = RunFacts.from_config(
        cfg,
        pgsurge_version=__version__,
        server_version_num=setup.server_version_num,
        server_version=setup.server_version,
        script_commands=[[c.first_line for c in p.commands] for p in parsed],
        scale=setup.table.scale,
        partition_method=setup.table.partition_method,
        partitions=setup.table.partitions,
    )
    show_live = live.live_wanted(
        err, progress_s=cfg.progress_s, disabled=cfg.no_live or drive is not None
    )
    shift_us = epoch_shift_us()
    specs = worker_specs(
        cfg,
        setup,
        parsed,
        facts,
        epoch_shift_us=shift_us,
        snapshot_s=live.SNAPSHOT_S if show_live else 0,
    )
    monitor = None
    try:
        if cfg.insight:  # --waits, --server-stats, --idle-sessions
            monitor = _start_monitor(cfg, setup, text_out, err)
        local = partial(drive_local, show_live=show_live, monitor=monitor)
        result = (drive or local)(specs, facts, err)
        if monitor is not None:
            result.insight = _finish_monitor(
                monitor,
                result.total.cnt,
                sorted(result.targets),
                err,
                interrupted=result.interrupted_by is not None,
            )
    except RunFailed as e:
        release_held()
        out.flush()
        err.flush()
        return e.status
    finally:
        if monitor is not None:  # end, abort, Ctrl-C: the sessions close
            monitor.close()
            err.write("".join(monitor.warnings))
    result.epoch_shift_us = shift_us
    if setup.pooler is not None:  # the JSON says so (schema 1, optional)
        result.insight = {"pooler": setup.pooler.to_dict(), **result.insight}
    # imported once the run is over (as the report's modules below): a
    # module imported then takes memory the run's clients have given back,
    # not more of the run's peak (issue 25)
    from pgsurge.stats.host import host_facts

    result.environment = {
        "client": host_facts(),
        "server": {"settings": setup.server_settings, "data_bytes": setup.data_bytes},
    }
    _workload_figures(cfg, setup.password, setup.counter_before, result)

    if on_result is not None:
        on_result(result)
    try:
        return _report(
            result,
            cfg,
            out=out,
            text_out=text_out,
            err=err,
            pooled=setup.pooler is not None,
        )
    finally:
        # an interrupted run's signals were held while it was reported
        release_held()


def _finish_monitor(
    monitor: Monitor,
    transactions: int,
    servers: list[str],
    err: TextIO,
    *,
    interrupted: bool,
) -> dict[str, Any]:
    """The monitor's figures; none (and a warning) when its connection died
    at the end of the run (the server stopped or restarted): the run's own
    report must not be lost to a traceback of the monitor's."""
    from pgsurge import pgconn

    try:
        return dict(monitor.finish(transactions, servers, interrupted))
    except pgconn.LibpqError as exc:
        reason = pgconn.strip_newline(str(exc)).splitlines()[0]
        err.write(
            f"{PROG}: warning: server statistics and waits left out: the "
            f"monitor's connection failed at the end of the run: {reason}\n"
        )
        return {}


def _report(
    result: RunResult,
    cfg: RunConfig,
    *,
    out: TextIO,
    text_out: TextIO,
    err: TextIO,
    pooled: bool = False,
) -> ExitStatus:
    """Step 7: the report and pgsurge's extras; the exit status (or the
    signal the run was interrupted by, raised again).

    Every output is attempted whatever happened to the others: a stdout
    that fails (``>/dev/full``, closed) or a --json file on a full disk
    loses nothing the other outputs can still keep; the first failure is
    raised once all were tried (the others' messages printed before)."""
    from pgsurge.report.extras import (
        client_limited_warning,
        nothing_processed_warning,
        targets_line,
    )
    from pgsurge.report.rate import rate_warning

    failures: list[Exception] = []
    try:
        _report_text(result, cfg, text_out, err)
    except OSError as exc:
        failures.append(exc)
    warning = targets_line(result, PROG) + nothing_processed_warning(result, PROG)
    if result.total_duration_us >= WARN_MIN_DURATION_US:
        warning += client_limited_warning(result, PROG, cpus=_cpus())
        warning += rate_warning(result, PROG)
    if warning:
        err.write(warning)
        err.flush()
    if cfg.json_path:
        from pgsurge.report.json import write_json

        try:
            write_json(result, cfg, cfg.json_path, stdout=out)
        except (PgsurgeError, OSError) as exc:
            failures.append(exc)
    if cfg.html_path:
        try:
            _write_html(result, cfg, cfg.html_path)
        except (PgsurgeError, OSError) as exc:
            failures.append(exc)
    notice = render_abort_notice(result, PROG)
    hinted = False
    if notice:
        if pooled and any(_lost_prepared(m) for m in result.abort_messages):
            notice += POOLER_PREPARED_HINT
            hinted = True
        err.write(notice)
        err.flush()
    if pooled and result.lost_prepared and not hinted:
        # --continue-on-error: the clients went on, failing
        err.write(
            f"{PROG}: warning: {result.lost_prepared} transactions failed on a "
            "prepared statement their server session did not have\n"
            + POOLER_PREPARED_HINT
        )
        err.flush()
    if result.interrupted_by is not None:
        err.write(render_interrupt_notice(result, PROG))
        err.flush()
    if failures:
        for other in failures[1:]:
            if isinstance(other, PgsurgeError):
                err.write(other.format())
        err.flush()
        raise failures[0]
    if result.interrupted_by is not None:
        raise RunInterrupted(getattr(signal, result.interrupted_by))
    return ExitStatus.RUN_ABORTED if notice else ExitStatus.SUCCESS


def _report_text(
    result: RunResult, cfg: RunConfig, text_out: TextIO, err: TextIO
) -> None:
    """pgbench's report and pgsurge's extras on ``text_out``."""
    from pgsurge.report.extras import render_extras

    text_out.write(render_text(result, banner=False))
    text_out.write(
        render_extras(result, percentiles=cfg.percentiles, client_cpu=cfg.client_cpu)
    )
    figures = result.insight.get("workload")
    if figures:
        from pgsurge.workloads.figures import render_figures

        text_out.write(render_figures(figures))
    if any(k != "workload" for k in result.insight):
        from pgsurge.report.insight import insight_warnings, render_insight

        text_out.write(render_insight(result.insight))
        err.write(insight_warnings(result.insight, PROG))
    text_out.flush()


def _workload_figures(
    cfg: RunConfig, password: str | None, before: int | None, result: RunResult
) -> None:
    """A bundled workload's figures (NOPM/tpmC, YCSB's per-operation
    ones) into ``result.insight["workload"]``: the JSON document's
    ``"workload"``, printed after the report. Its ``COUNTER_QUERY`` is
    read again now (before the run, by ``set_up``)."""
    found = workload_figures_of(cfg)
    if found is None:
        return
    from pgsurge.workloads.figures import workload_figures

    kind, names, query = found
    delta = None
    if query and before is not None:
        after = read_counter_after(cfg, password, query)
        delta = None if after is None else after - before
    result.insight["workload"] = workload_figures(kind, result, names, delta)


#: after the abort notice, when a client aborted on a prepared statement
#: the pooler's next server session did not have
POOLER_PREPARED_HINT = (
    f"{PROG}: hint: the connection pooler hands each transaction to any of its "
    "server sessions, which do not share prepared statements: use -M extended "
    "(or -M simple), or PgBouncer 1.21 or later with max_prepared_statements set\n"
)


def _lost_prepared(message: str) -> bool:
    """An abort message about a prepared statement the server session
    does not have (SQLSTATE 26000)."""
    return "prepared statement" in message and "does not exist" in message


#: the most workers per core of this machine (the -j cap): one
#: per core is all the CPU a run can use; the rest leave room for what
#: blocks a worker (-C's connects, \shell). More only cost memory (a few
#: MB each) and make connecting slower: -j 1000 forked 1000 processes
#: whose connecting outlasted -T 3
JOBS_PER_CPU = 4


def _cap_jobs(cfg: RunConfig, err: TextIO) -> RunConfig:
    """``cfg`` with -j at most :data:`JOBS_PER_CPU` per core (one warning
    line when it was more); pgbench caps only at -c."""
    cap = JOBS_PER_CPU * max(1, _cpus())
    jobs = min(cfg.jobs, cfg.clients)
    if jobs <= cap:
        return cfg
    from dataclasses import replace

    err.write(
        f"{PROG}: warning: -j {cfg.jobs} capped at {cap} workers "
        f"({JOBS_PER_CPU} per core of the {_cpus() or 1} this run may use): "
        "more would only cost memory and connecting time\n"
    )
    err.flush()
    return replace(cfg, jobs=cap)


def _cpus() -> int:
    """The cores this process may run on (for the client-limited hint)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 0


def _write_html(result: RunResult, cfg: RunConfig, path: str) -> None:
    """--html: the report page of the run's --json document (by value: the
    renderer reads only the document, as ``pgsurge report`` does)."""
    import json

    from pgsurge.report.command import write_html
    from pgsurge.report.html import RunDoc, render_html
    from pgsurge.report.json import build_document

    doc = json.loads(json.dumps(build_document(result, cfg), allow_nan=False))
    label = os.path.splitext(os.path.basename(path))[0]
    write_html(render_html([RunDoc(label, doc)]), path)


def _start_monitor(
    cfg: RunConfig, setup: Setup, text_out: TextIO, err: TextIO
) -> Monitor:
    """The insight monitor's sessions (an error ends the run, as a client's
    failed connection does); the idle sessions named under the banner.
    Behind a pooler it gets the pooling mode and the workers' name."""
    from pgsurge.insight import Monitor  # only for these options

    pooler = setup.pooler
    try:
        monitor = Monitor.start(
            cfg,
            setup.password,
            [s.text for s in cfg.scripts],
            writer(err),
            pooler_mode=pooler.mode if pooler else None,
            app_name=pooler.application_name if pooler else None,
            database=pooler.database if pooler else None,
            target=setup.target,
            host_targets=setup.host_targets,
            pooler_found_at=pooler.found_at if pooler else 0.0,
        )
    except ConnectError as exc:
        err.write(f"{PROG}: error: {exc}\n")
        err.flush()
        raise RunFailed(ExitStatus.ERROR) from None
    text_out.write(monitor.header())
    text_out.flush()
    return monitor

"""Benchmark counters: per-interval/per-worker StatsData, per-command stats,
and the WorkerResult/RunResult values that cross process boundaries.

Everything here is plain, mergeable data. Workers fill a ``StatsData`` per
worker (and one per script, and a ``CommandStats`` per script command),
send a picklable ``WorkerResult`` to the parent, and the parent merges them
into a ``RunResult``: the one value every report (text, JSON, HTML) renders.
No live object (connection, process, clock) is ever referenced.

The counters and their accounting identities are in ``counters``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import field
from typing import TYPE_CHECKING, Any

from pgsurge.config import RunConfig
from pgsurge.records import record
from pgsurge.stats.counters import CommandStats, StatsData
from pgsurge.stats.cpu import WorkerCpu

if TYPE_CHECKING:
    # annotations only: the series and histograms are imported where a run
    # that records them makes them (issue 25: memory of the runs that do not)
    from pgsurge.stats.series import IntervalStats, LatencyHistograms


def _merge_command_tables(
    acc: list[list[CommandStats]], other: Sequence[Sequence[CommandStats]]
) -> None:
    if len(acc) != len(other):
        raise ValueError("per-command stats of different script lists")
    for acc_script, other_script in zip(acc, other, strict=True):
        if len(acc_script) != len(other_script):
            raise ValueError("per-command stats of different scripts")
        for acc_cmd, other_cmd in zip(acc_script, other_script, strict=True):
            acc_cmd.merge(other_cmd)


@record(slots=True)
class WorkerResult:
    """What one worker process reports when it is done (picklable).

    Timestamps are CLOCK_MONOTONIC µs, comparable across processes:

    * ``conn_start_us``: after the READY barrier, before the initial
      connections (pgbench: a thread's ``started_time``);
    * ``bench_start_us``: at GO, after all its clients connected;
    * ``end_us``: after its clients finished and disconnected.

    ``conn_total_us`` is pgbench's ``conn_duration``: under -C the sum of
    every connection and disconnection time of its clients; without -C the
    engine may leave 0 (the report then uses the initial connection time).
    """

    worker_id: int
    nclients: int
    total: StatsData = field(default_factory=StatsData)
    #: one StatsData per script (filled when several scripts are used)
    per_script: list[StatsData] = field(default_factory=list)
    #: [script][command] (filled under -r)
    per_command: list[list[CommandStats]] = field(default_factory=list)
    #: successful transactions whose latency exceeded -L
    latency_late: int = 0
    conn_total_us: int = 0
    conn_start_us: int = 0
    bench_start_us: int = 0
    #: --warmup: the start of the measured window (its figures count from
    #: there; 0: no warm-up, they count from ``bench_start_us``)
    window_us: int = 0
    end_us: int = 0
    aborted_clients: int = 0
    clients_finished: int = 0
    cpu_user_s: float = 0.0
    cpu_sys_s: float = 0.0
    #: transactions processed per client (pgbench ``CState.cnt``), client order
    client_tx_counts: list[int] = field(default_factory=list)
    #: each client's server (``host:port``), client order; empty under -C.
    #: Where the client ended: --reconnect may have moved it, and then
    #: its count in ``client_tx_counts`` is what it processed there
    client_targets: list[str] = field(default_factory=list)
    #: --reconnect: one per client that reconnected to another server, the
    #: server it left and the transactions it processed there (measured)
    moved_tx: list[tuple[str, int]] = field(default_factory=list)
    #: latency histograms (stats.series.WorkerRecorder.finish), when recorded
    histograms: LatencyHistograms | None = None
    #: per-interval series (WorkerRecorder.finish), when recorded
    intervals: list[IntervalStats] = field(default_factory=list)
    #: why clients aborted, one message per aborted client (JSON result)
    abort_messages: list[str] = field(default_factory=list)
    #: failed transactions (not aborted) on a prepared statement the
    #: server session did not have (SQLSTATE 26000: a transaction pooler)
    lost_prepared: int = 0
    #: µs the loop spent blocked waiting between GO and end; -1: not measured
    idle_us: int = -1
    #: what ran its transactions (stats.cpu.IMPL_*); "" unknown
    implementation: str = ""

    @classmethod
    def empty(
        cls, worker_id: int, nclients: int, script_commands: Sequence[int]
    ) -> WorkerResult:
        """Zeroed counters shaped for scripts of the given command counts."""
        return cls(
            worker_id=worker_id,
            nclients=nclients,
            per_script=[StatsData() for _ in script_commands],
            per_command=[[CommandStats() for _ in range(n)] for n in script_commands],
            client_tx_counts=[0] * nclients,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "worker_id": self.worker_id,
            "nclients": self.nclients,
            "total": self.total.to_dict(),
            "per_script": [s.to_dict() for s in self.per_script],
            "per_command": [[c.to_dict() for c in s] for s in self.per_command],
            "latency_late": self.latency_late,
            "conn_total_us": self.conn_total_us,
            "conn_start_us": self.conn_start_us,
            "bench_start_us": self.bench_start_us,
            "window_us": self.window_us,
            "end_us": self.end_us,
            "aborted_clients": self.aborted_clients,
            "clients_finished": self.clients_finished,
            "cpu_user_s": self.cpu_user_s,
            "cpu_sys_s": self.cpu_sys_s,
            "client_tx_counts": list(self.client_tx_counts),
            "client_targets": list(self.client_targets),
            "moved_tx": [[t, n] for t, n in self.moved_tx],
            "histograms": (
                None if self.histograms is None else self.histograms.to_dict()
            ),
            "intervals": [iv.to_dict() for iv in self.intervals],
            "abort_messages": list(self.abort_messages),
            "lost_prepared": self.lost_prepared,
            "idle_us": self.idle_us,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> WorkerResult:
        return cls(
            worker_id=int(data["worker_id"]),
            nclients=int(data["nclients"]),
            total=StatsData.from_dict(data["total"]),
            per_script=[StatsData.from_dict(s) for s in data["per_script"]],
            per_command=[
                [CommandStats.from_dict(c) for c in s] for s in data["per_command"]
            ],
            latency_late=int(data["latency_late"]),
            conn_total_us=int(data["conn_total_us"]),
            conn_start_us=int(data["conn_start_us"]),
            bench_start_us=int(data["bench_start_us"]),
            window_us=int(data.get("window_us", 0)),
            end_us=int(data["end_us"]),
            aborted_clients=int(data["aborted_clients"]),
            clients_finished=int(data["clients_finished"]),
            cpu_user_s=float(data["cpu_user_s"]),
            cpu_sys_s=float(data["cpu_sys_s"]),
            client_tx_counts=[int(n) for n in data["client_tx_counts"]],
            client_targets=[str(t) for t in data.get("client_targets", [])],
            moved_tx=[(str(t), int(n)) for t, n in data.get("moved_tx", [])],
            histograms=_histograms_from(data.get("histograms")),
            intervals=_intervals_from(data.get("intervals", [])),
            abort_messages=[str(m) for m in data.get("abort_messages", [])],
            lost_prepared=int(data.get("lost_prepared", 0)),
            idle_us=int(data.get("idle_us", -1)),
        )


@record(frozen=True, slots=True)
class ScriptInfo:
    """A script as the report shows it."""

    #: pgbench's description: "<builtin: TPC-B (sort of)>" or the file name
    desc: str
    weight: int
    #: each command's ``first_line`` (what -r prints), in command order
    commands: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "desc": self.desc,
            "weight": self.weight,
            "commands": list(self.commands),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ScriptInfo:
        return cls(str(data["desc"]), int(data["weight"]), tuple(data["commands"]))


@record(frozen=True, slots=True)
class RunFacts:
    """The run's settings and environment, as the reports need them.

    Built once by the runner (``from_config``) from the validated
    ``RunConfig``, the compiled scripts and what the server told us.
    """

    pgsurge_version: str
    server_version_num: int
    #: the server's ``server_version`` parameter, e.g. "18.6"
    server_version: str
    scripts: tuple[ScriptInfo, ...]
    scale: int = 1
    #: "none", "range" or "hash": what was detected in the database
    partition_method: str = "none"
    partitions: int = 0
    #: "simple", "extended" or "prepared"
    query_mode: str = "simple"
    clients: int = 1
    #: worker count after clamping to the number of clients
    threads: int = 1
    #: -t value (None under -T)
    transactions_per_client: int | None = 10
    #: -T value in seconds (None under -t)
    duration_s: int | None = None
    #: --warmup seconds run before the measured window (0: none)
    warmup_s: int = 0
    #: --max-tries; 0 means unlimited
    max_tries: int = 1
    #: -L in µs, truncated like pgbench's ``(int64) (ms * 1000)``; 0 = none
    latency_limit_us: int = 0
    #: -R in transactions per second, None when not throttling
    rate: float | None = None
    progress_s: int = 0
    log: bool = False
    failures_detailed: bool = False
    report_per_command: bool = False
    connect_each_tx: bool = False
    continue_on_error: bool = False
    #: --reconnect's attempts per lost connection (0: off)
    reconnect: int = 0

    @property
    def throttled(self) -> bool:
        return self.rate is not None

    @property
    def per_script_stats(self) -> bool:
        """pgbench reports per-script blocks only with several scripts."""
        return len(self.scripts) > 1

    @property
    def latency_reported(self) -> bool:
        """The report shows measured latency average/stddev (-R, -P or -L);
        otherwise it derives an average from the duration."""
        return self.throttled or self.progress_s > 0 or self.latency_limit_us != 0

    @property
    def measure_latency(self) -> bool:
        """Whether workers must time each transaction (pgbench's
        ``detailed``): for the report, progress, logs or per-script stats."""
        return self.latency_reported or self.log or self.per_script_stats

    @property
    def total_weight(self) -> int:
        return sum(s.weight for s in self.scripts)

    @classmethod
    def from_config(
        cls,
        config: RunConfig,
        *,
        pgsurge_version: str,
        server_version_num: int,
        server_version: str,
        script_commands: Sequence[Sequence[str]],
        scale: int = 1,
        partition_method: str = "none",
        partitions: int = 0,
    ) -> RunFacts:
        """Facts of a run of ``config``.

        ``script_commands`` gives each script's command first lines, in
        script order; ``scale`` and the partitioning are what the runner
        found in (or was told about) the database.
        """
        if len(script_commands) != len(config.scripts):
            raise ValueError("script_commands must have one entry per script")
        scripts = tuple(
            ScriptInfo(src.description or src.name, src.weight, tuple(cmds))
            for src, cmds in zip(config.scripts, script_commands, strict=True)
        )
        limit = config.latency_limit_ms
        return cls(
            pgsurge_version=pgsurge_version,
            server_version_num=server_version_num,
            server_version=server_version,
            scripts=scripts,
            scale=scale,
            partition_method=partition_method,
            partitions=partitions,
            query_mode=config.query_mode.value,
            clients=config.clients,
            threads=min(config.jobs, config.clients),
            transactions_per_client=(
                None if config.duration else (config.transactions or 10)
            ),
            duration_s=config.duration or None,
            warmup_s=config.warmup,
            max_tries=config.max_tries,
            latency_limit_us=int(limit * 1000) if limit else 0,
            rate=config.rate,
            progress_s=config.progress_s,
            log=config.log,
            failures_detailed=config.failures_detailed,
            report_per_command=config.report_per_command,
            connect_each_tx=config.connect_each_tx,
            continue_on_error=config.continue_on_error,
            reconnect=config.reconnect,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "pgsurge_version": self.pgsurge_version,
            "server_version_num": self.server_version_num,
            "server_version": self.server_version,
            "scripts": [s.to_dict() for s in self.scripts],
            "scale": self.scale,
            "partition_method": self.partition_method,
            "partitions": self.partitions,
            "query_mode": self.query_mode,
            "clients": self.clients,
            "threads": self.threads,
            "transactions_per_client": self.transactions_per_client,
            "duration_s": self.duration_s,
            "warmup_s": self.warmup_s,
            "max_tries": self.max_tries,
            "latency_limit_us": self.latency_limit_us,
            "rate": self.rate,
            "progress_s": self.progress_s,
            "log": self.log,
            "failures_detailed": self.failures_detailed,
            "report_per_command": self.report_per_command,
            "connect_each_tx": self.connect_each_tx,
            "continue_on_error": self.continue_on_error,
            "reconnect": self.reconnect,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunFacts:
        tpc = data["transactions_per_client"]
        dur = data["duration_s"]
        rate = data["rate"]
        return cls(
            pgsurge_version=str(data["pgsurge_version"]),
            server_version_num=int(data["server_version_num"]),
            server_version=str(data["server_version"]),
            scripts=tuple(ScriptInfo.from_dict(s) for s in data["scripts"]),
            scale=int(data["scale"]),
            partition_method=str(data["partition_method"]),
            partitions=int(data["partitions"]),
            query_mode=str(data["query_mode"]),
            clients=int(data["clients"]),
            threads=int(data["threads"]),
            transactions_per_client=None if tpc is None else int(tpc),
            duration_s=None if dur is None else int(dur),
            warmup_s=int(data.get("warmup_s", 0)),
            max_tries=int(data["max_tries"]),
            latency_limit_us=int(data["latency_limit_us"]),
            rate=None if rate is None else float(rate),
            progress_s=int(data["progress_s"]),
            log=bool(data["log"]),
            failures_detailed=bool(data["failures_detailed"]),
            report_per_command=bool(data["report_per_command"]),
            connect_each_tx=bool(data["connect_each_tx"]),
            continue_on_error=bool(data["continue_on_error"]),
            reconnect=int(data.get("reconnect", 0)),
        )


@record(slots=True)
class RunResult:
    """A finished run: its facts and the measurements merged over workers.

    Durations follow pgbench's ``main``/``printResults``:

    * ``total_duration_us``: from the earliest worker GO (``bench_start``)
      to the end of the run (all workers finished and disconnected); tps
      is ``cnt`` over this; under --warmup, from the measured window's
      start (``window_us``) instead: the warm-up is not counted;
    * ``conn_elapsed_us``: "initial connection time", from the start of
      connecting (see ``from_workers``) to the earliest GO;
    * ``conn_total_us``: under -C, all (re)connection and disconnection
      time summed over clients ("average connection time" divides it by
      the executed transactions).
    """

    facts: RunFacts
    total: StatsData = field(default_factory=StatsData)
    per_script: list[StatsData] = field(default_factory=list)
    per_command: list[list[CommandStats]] = field(default_factory=list)
    latency_late: int = 0
    total_duration_us: int = 0
    conn_total_us: int = 0
    conn_elapsed_us: int = 0
    bench_start_us: int = 0
    #: --warmup: the start of the measured window (0: no warm-up)
    window_us: int = 0
    end_us: int = 0
    aborted_clients: int = 0
    clients_finished: int = 0
    cpu_user_s: float = 0.0
    cpu_sys_s: float = 0.0
    workers: int = 0
    #: merged latency histograms, when workers recorded them
    histograms: LatencyHistograms | None = None
    #: merged per-interval series (by interval start), when recorded
    intervals: list[IntervalStats] = field(default_factory=list)
    #: each worker's CPU over its GO-to-end wall time
    worker_cpu: list[WorkerCpu] = field(default_factory=list)
    #: Unix time minus monotonic time in µs (set by the runner) to show the
    #: monotonic timestamps above as dates
    epoch_shift_us: int = 0
    abort_messages: list[str] = field(default_factory=list)
    #: of the failed transactions, those on a lost prepared statement
    lost_prepared: int = 0
    #: the signal that interrupted the run ("SIGINT"), None: not interrupted
    interrupted_by: str | None = None
    #: µs from the benchmark's start to the interrupting signal
    interrupted_after_us: int = 0
    #: what the monitor saw (``pgsurge.insight``, set by the runner): the
    #: JSON-ready sections ``waits``, ``server_stats``, ``idle_sessions``,
    #: and ``intervals`` (a list of ``{"start_us": monotonic µs, ...}``)
    insight: dict[str, Any] = field(default_factory=dict)
    #: a multi-host run's hosts (``distributed.plan.HostInfo.to_dict``:
    #: address, clients, clock offset, own figures, lost); empty otherwise
    hosts: list[dict[str, Any]] = field(default_factory=list)
    #: where the run ran (set by the runner): ``client`` (``stats.host``),
    #: ``server`` (settings that differ from the defaults, data size);
    #: ``report/json.py`` completes it into the document's ``environment``
    environment: dict[str, Any] = field(default_factory=dict)
    #: per server a multi-host connection string reached (``host:port``):
    #: [clients, transactions]; empty when the clients' servers are unknown
    #: (-C) or every client reached the same one. The clients are counted
    #: where they ended, the transactions where they ran
    targets: dict[str, list[int]] = field(default_factory=dict)
    #: --reconnect: how many times a client reconnected to another server
    #: than its last (its busy time is then split between servers)
    target_moves: int = 0

    @property
    def measured_start_us(self) -> int:
        """Where the measured figures start: the window after --warmup,
        else the benchmark's start (GO)."""
        return self.window_us or self.bench_start_us

    @property
    def aborted(self) -> bool:
        """Some client did not finish normally (pgbench exits with 2).

        Workers count every client that ended in any state but "finished"
        (errors, failed connections, --exit-on-abort) in ``aborted_clients``.
        """
        return self.aborted_clients > 0

    @classmethod
    def from_workers(
        cls,
        workers: Sequence[WorkerResult],
        facts: RunFacts,
        *,
        start_us: int | None = None,
        end_us: int | None = None,
    ) -> RunResult:
        """Merge the workers' results.

        ``start_us`` is when connecting began; pgbench takes its clock
        before creating threads, so thread start-up counts as connection
        time. Process start-up is far slower than a thread's, so by default
        we start from the earliest worker ``conn_start_us`` (after the
        READY barrier) instead; pass ``start_us`` to override. ``end_us``
        defaults to the latest worker ``end_us``.
        """
        if not workers:
            raise ValueError("no worker results to merge")
        nscripts = len(facts.scripts)
        total = StatsData()
        per_script = [StatsData() for _ in range(nscripts)]
        per_command = [
            [CommandStats() for _ in script.commands] for script in facts.scripts
        ]
        result = cls(
            facts=facts, total=total, per_script=per_script, per_command=per_command
        )
        # a worker that counted transactions without their servers (one
        # that died: its last progress snapshot) leaves the per-server
        # figures short of the totals they must sum to
        unplaced = False
        for w in workers:
            total.merge(w.total)
            if w.per_script:
                if len(w.per_script) != nscripts:
                    raise ValueError("worker per-script stats do not match the scripts")
                for acc, s in zip(per_script, w.per_script, strict=True):
                    acc.merge(s)
            if w.per_command:
                _merge_command_tables(per_command, w.per_command)
            result.latency_late += w.latency_late
            result.conn_total_us += w.conn_total_us
            result.aborted_clients += w.aborted_clients
            result.clients_finished += w.clients_finished
            result.cpu_user_s += w.cpu_user_s
            result.cpu_sys_s += w.cpu_sys_s
            result.worker_cpu.append(
                WorkerCpu(
                    w.worker_id,
                    w.cpu_user_s,
                    w.cpu_sys_s,
                    w.end_us - max(w.bench_start_us, w.window_us),
                    w.idle_us,
                    w.implementation,
                )
            )
            result.abort_messages.extend(w.abort_messages)
            result.lost_prepared += w.lost_prepared
            if len(w.client_targets) == len(w.client_tx_counts):
                for target, cnt in zip(
                    w.client_targets, w.client_tx_counts, strict=True
                ):
                    slot = result.targets.setdefault(target, [0, 0])
                    slot[0] += 1
                    slot[1] += cnt
                for target, cnt in w.moved_tx:
                    result.targets.setdefault(target, [0, 0])[1] += cnt
                    result.target_moves += 1
            elif w.total.cnt:
                unplaced = True
        if len(result.targets) < 2 or unplaced:
            result.targets = {}
            result.target_moves = 0
        _merge_recordings(result, workers)
        bench_start = min(w.bench_start_us for w in workers)
        end = end_us if end_us is not None else max(w.end_us for w in workers)
        start = (
            start_us if start_us is not None else min(w.conn_start_us for w in workers)
        )
        result.bench_start_us = bench_start
        result.end_us = end
        result.total_duration_us = end - bench_start
        window = max(w.window_us for w in workers)
        if window:
            # the warm-up is not measured (nor is a window never reached)
            result.window_us = window
            result.total_duration_us = max(0, end - max(window, bench_start))
        result.conn_elapsed_us = bench_start - start
        result.workers = len(workers)
        return result

    def to_dict(self) -> dict[str, Any]:
        return {
            "facts": self.facts.to_dict(),
            "total": self.total.to_dict(),
            "per_script": [s.to_dict() for s in self.per_script],
            "per_command": [[c.to_dict() for c in s] for s in self.per_command],
            "latency_late": self.latency_late,
            "total_duration_us": self.total_duration_us,
            "conn_total_us": self.conn_total_us,
            "conn_elapsed_us": self.conn_elapsed_us,
            "bench_start_us": self.bench_start_us,
            "window_us": self.window_us,
            "end_us": self.end_us,
            "aborted_clients": self.aborted_clients,
            "clients_finished": self.clients_finished,
            "cpu_user_s": self.cpu_user_s,
            "cpu_sys_s": self.cpu_sys_s,
            "workers": self.workers,
            "histograms": (
                None if self.histograms is None else self.histograms.to_dict()
            ),
            "intervals": [iv.to_dict() for iv in self.intervals],
            "worker_cpu": [c.to_dict() for c in self.worker_cpu],
            "epoch_shift_us": self.epoch_shift_us,
            "abort_messages": list(self.abort_messages),
            "lost_prepared": self.lost_prepared,
            "interrupted_by": self.interrupted_by,
            "interrupted_after_us": self.interrupted_after_us,
            "insight": self.insight,
            "hosts": [dict(h) for h in self.hosts],
            "targets": {k: list(v) for k, v in self.targets.items()},
            "target_moves": self.target_moves,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunResult:
        return cls(
            facts=RunFacts.from_dict(data["facts"]),
            total=StatsData.from_dict(data["total"]),
            per_script=[StatsData.from_dict(s) for s in data["per_script"]],
            per_command=[
                [CommandStats.from_dict(c) for c in s] for s in data["per_command"]
            ],
            latency_late=int(data["latency_late"]),
            total_duration_us=int(data["total_duration_us"]),
            conn_total_us=int(data["conn_total_us"]),
            conn_elapsed_us=int(data["conn_elapsed_us"]),
            bench_start_us=int(data["bench_start_us"]),
            window_us=int(data.get("window_us", 0)),
            end_us=int(data["end_us"]),
            aborted_clients=int(data["aborted_clients"]),
            clients_finished=int(data["clients_finished"]),
            cpu_user_s=float(data["cpu_user_s"]),
            cpu_sys_s=float(data["cpu_sys_s"]),
            workers=int(data["workers"]),
            histograms=_histograms_from(data.get("histograms")),
            intervals=_intervals_from(data.get("intervals", [])),
            worker_cpu=[WorkerCpu.from_dict(c) for c in data.get("worker_cpu", [])],
            epoch_shift_us=int(data.get("epoch_shift_us", 0)),
            abort_messages=[str(m) for m in data.get("abort_messages", [])],
            lost_prepared=int(data.get("lost_prepared", 0)),
            interrupted_by=data.get("interrupted_by"),
            interrupted_after_us=int(data.get("interrupted_after_us", 0)),
            insight=dict(data.get("insight") or {}),
            hosts=[dict(h) for h in data.get("hosts", [])],
            targets={
                str(k): [int(x) for x in v]
                for k, v in (data.get("targets") or {}).items()
            },
            target_moves=int(data.get("target_moves", 0)),
        )


def _histograms_from(data: dict[str, Any] | None) -> LatencyHistograms | None:
    if data is None:
        return None
    from pgsurge.stats.series import LatencyHistograms

    return LatencyHistograms.from_dict(data)


def _intervals_from(data: list[dict[str, Any]]) -> list[IntervalStats]:
    if not data:
        return []
    from pgsurge.stats.series import IntervalStats

    return [IntervalStats.from_dict(d) for d in data]


def _merge_recordings(result: RunResult, workers: Sequence[WorkerResult]) -> None:
    """Merge the workers' histograms and interval series, if any."""
    hists = [w.histograms for w in workers if w.histograms is not None]
    if hists:
        from pgsurge.stats.histogram import Histogram
        from pgsurge.stats.series import LatencyHistograms

        digits = hists[0].digits
        acc = LatencyHistograms(digits, Histogram(digits), Histogram(digits))
        for h in hists:
            acc.merge(h)
        result.histograms = acc
    if any(w.intervals for w in workers):
        from pgsurge.stats.series import merge_series

        result.intervals = merge_series([w.intervals for w in workers])

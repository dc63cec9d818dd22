"""-l transaction logs in pgbench 18.6's exact format, one file per worker.

Users feed these files to their own tools, so every byte follows pgbench's
``doLog`` (PG18 doc "Per-Transaction Logging" / "Aggregated Logging"):

* file ``PREFIX.PID`` for worker 0 and ``PREFIX.PID.N`` for worker N, with
  PREFIX ``pgbench_log`` unless ``--log-prefix`` and PID the pid of the
  pgsurge parent process (pgbench's process; its threads are our workers);
* per transaction: ``client_id transaction_no time script_no time_epoch
  time_us [schedule_lag] [retries]`` where ``transaction_no`` counts every
  transaction of the client so far, this one included (skipped and failed
  ones too: the first line says 1), ``time`` is the latency in µs or, for a
  transaction that has none, ``skipped``, ``failed`` or, under
  --failures-detailed, ``serialization``/``deadlock``/``other``;
  ``time_epoch time_us`` is the Unix time at the END of the transaction
  (when it was logged); ``schedule_lag`` (µs, 0 unless the transaction
  succeeded) only under -R, ``retries`` (tries - 1) only when
  --max-tries is not 1;
* --sampling-rate: each transaction is kept unless the worker's sampling
  stream draws ``pg_prng_double > rate`` (one draw per transaction);
* --aggregate-interval: one line per interval of ``interval_start
  num_transactions sum_latency sum_latency_2 min_latency max_latency
  sum_lag sum_lag_2 min_lag max_lag skipped retried retries
  serialization_failures deadlock_failures``; the lag fields are 0 unless
  -R, ``skipped`` 0 unless -L, the retry fields 0 unless --max-tries is not
  1, the failure fields 0 unless --failures-detailed. Under
  --continue-on-error (a PostgreSQL 19 option) a 16th field,
  ``other_sql_failures``, follows, gated like the other failure fields, as
  PG19's pgbench writes it (PG19 always writes 16 fields; without that
  option we keep 18.6's 15). The first interval starts at the worker's
  GO time rounded down to a whole Unix second; intervals without
  transactions are written too, when a later transaction (or the end)
  passes them; at the end only the intervals that are complete are
  written: like pgbench, the last, partial one is dropped.

Times: the engine keeps CLOCK_MONOTONIC µs; the writer adds a per-run
``epoch_shift_us`` (Unix time minus monotonic time, taken once in the
parent, as pgbench's ``epoch_shift``) to log Unix times.

Performance: the writer chooses its line function once (raw or
aggregated) so that the hot path is one call with plain ints; lines are
collected in a list and written in large chunks, and at least once a
second (:data:`FLUSH_EVERY_US`: a line is in the file at the latest when
the first line a second after it is logged, so that a ``tail -f`` or a
killed run sees the log of a slow ``-R`` run); aggregate lines, written
once per interval, go to the file at once. ``close`` (or ``flush``)
must run on every exit path, including aborts and interrupts, so that the
file is complete; pgbench itself loses the pending aggregate on --exit-on-abort,
and so do we (``close()`` without a time).
"""

from __future__ import annotations

import io
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TextIO

from pgsurge.config import RunConfig
from pgsurge.errors import PROG, PgsurgeError
from pgsurge.prng import PgPrng
from pgsurge.stats.counters import FailureKind, StatsData

#: the longest a logged line waits in the buffer, given a later line (µs)
FLUSH_EVERY_US = 1_000_000

__all__ = [
    "DEFAULT_PREFIX",
    "FLUSH_EVERY_US",
    "LogFunc",
    "TxLogOptions",
    "TxLogWriter",
    "format_aggregate",
    "log_path",
]

DEFAULT_PREFIX = "pgbench_log"
# lines kept in memory before one write() (~0.5 MB of raw lines)
_BUFFER_LINES = 8192

#: ``log(now_us, client_id, tx_no, script_no, latency_us, lag_us, skipped,
#: failure, tries)``; see ``TxLogWriter``
LogFunc = Callable[[int, int, int, int, int, int, bool, FailureKind | None, int], None]


def log_path(prefix: str | None, pid: int, worker_id: int) -> str:
    """The log file name of a worker, as pgbench names a thread's."""
    base = prefix if prefix is not None else DEFAULT_PREFIX
    return f"{base}.{pid}" if worker_id == 0 else f"{base}.{pid}.{worker_id}"


@dataclass(frozen=True, slots=True)
class TxLogOptions:
    """What shapes the log lines (from the validated RunConfig)."""

    prefix: str | None = None
    throttled: bool = False
    #: -L given (pgbench's ``latency_limit``: its µs value is not 0)
    latency_limited: bool = False
    max_tries: int = 1
    failures_detailed: bool = False
    continue_on_error: bool = False
    #: --sampling-rate, None when not given
    sample_rate: float | None = None
    #: --aggregate-interval seconds, None for per-transaction lines
    aggregate_interval_s: int | None = None

    @classmethod
    def from_config(cls, config: RunConfig) -> TxLogOptions:
        limit = config.latency_limit_ms
        return cls(
            prefix=config.log_prefix,
            throttled=config.rate is not None,
            latency_limited=limit is not None and int(limit * 1000) != 0,
            max_tries=config.max_tries,
            failures_detailed=config.failures_detailed,
            continue_on_error=config.continue_on_error,
            sample_rate=config.sampling_rate or None,
            aggregate_interval_s=config.aggregate_interval or None,
        )


def format_aggregate(agg: StatsData, opts: TxLogOptions) -> str:
    """One --aggregate-interval line (with its newline) for the interval
    that starts at ``agg.start_us`` (Unix µs)."""
    lat = agg.latency
    parts = [
        f"{agg.start_us // 1000000} {agg.cnt} {lat.sum:.0f} {lat.sum2:.0f} "
        f"{lat.min:.0f} {lat.max:.0f}"
    ]
    if opts.throttled:
        lag = agg.lag
        parts.append(f" {lag.sum:.0f} {lag.sum2:.0f} {lag.min:.0f} {lag.max:.0f}")
    else:
        parts.append(" 0 0 0 0")
    parts.append(f" {agg.skipped}" if opts.latency_limited else " 0")
    parts.append(f" {agg.retried} {agg.retries}" if opts.max_tries != 1 else " 0 0")
    detailed = opts.failures_detailed
    if detailed:
        parts.append(f" {agg.serialization_failures} {agg.deadlock_failures}")
    else:
        parts.append(" 0 0")
    if opts.continue_on_error:
        parts.append(f" {agg.other_failures}" if detailed else " 0")
    parts.append("\n")
    return "".join(parts)


def _tail(opts: TxLogOptions) -> Callable[[int, int], str] | None:
    """The optional fields after time_us: ``[ lag][ retries]``, or None.

    The lag of a transaction that did not succeed is passed as 0 (pgbench
    prints 0 for it)."""
    throttled = opts.throttled
    if opts.max_tries != 1:
        if throttled:
            return lambda lag, tries: f" {lag} {tries - 1}"
        return lambda lag, tries: f" {tries - 1}"
    if throttled:
        return lambda lag, tries: f" {lag}"
    return None


def _never() -> float:
    return 0.0


def _sampler(
    opts: TxLogOptions, rng: PgPrng | None
) -> tuple[bool, float, Callable[[], float]]:
    """(sampling?, rate, draw) for the line functions."""
    if opts.sample_rate is None or rng is None:
        return False, 1.0, _never
    return True, opts.sample_rate, rng.double


class TxLogWriter:
    """The -l log of one worker.

    Call ``log(now_us, client_id, tx_no, script_no, latency_us, lag_us,
    skipped, failure, tries)`` (all ``int`` but the flags: the line prints
    them as they are, which for integers is pgbench's ``%.0f``) once per
    finished or skipped transaction,
    right after accounting it (``tx_no`` is the client's count including
    this transaction; ``now_us`` the monotonic time it ended; ``lag_us``
    the schedule lag, ignored unless the transaction succeeded under -R;
    ``failure`` and ``tries`` as for ``StatsData.record``). Then ``close``
    with the worker's end time (or ``close()`` when aborting at once).

    ``stream``, when given, is written instead of opening ``path``, and is
    left open by ``close`` (tests).
    ``agg_start_us`` (monotonic) is the worker's GO time, required for
    --aggregate-interval. ``sample_rng`` is the worker's sampling stream,
    required for --sampling-rate.
    """

    __slots__ = (
        "_agg",
        "_buf",
        "_file",
        "_good",
        "_interval_us",
        "_opts",
        "_owned",
        "_shift",
        "log",
        "path",
        "sample_rng",
        "write_error",
    )

    log: LogFunc

    def __init__(
        self,
        path: str,
        opts: TxLogOptions,
        *,
        epoch_shift_us: int,
        agg_start_us: int | None = None,
        sample_rng: PgPrng | None = None,
        stream: TextIO | None = None,
        buffer_lines: int = _BUFFER_LINES,
    ) -> None:
        self.path = path
        self._opts = opts
        #: the worker's sampling stream (--sampling-rate), or None
        self.sample_rng = sample_rng
        self._shift = epoch_shift_us
        self._buf: list[str] = []
        #: why the log stopped being written (a full disk...), or None
        self.write_error: str | None = None
        self._interval_us = 1000000 * (opts.aggregate_interval_s or 0)
        self._agg = StatsData()
        if opts.sample_rate is not None and sample_rng is None:
            raise ValueError("--sampling-rate needs the worker's sampling stream")
        if self._interval_us:
            if agg_start_us is None:
                raise ValueError("--aggregate-interval needs the worker's start time")
            # pgbench rounds the first interval down to a whole Unix second
            self._agg.start_us = (agg_start_us + epoch_shift_us) // 1000000 * 1000000
            self.log = self._make_aggregate(buffer_lines, sample_rng)
        else:
            self.log = self._make_raw(buffer_lines, sample_rng)
        self._owned = stream is None
        #: bytes of whole lines in the file (where a failed write is cut back to)
        self._good = 0
        self._file: TextIO | io.FileIO | None
        if stream is not None:
            self._file = stream
        else:
            try:
                # unbuffered: lines are buffered here, and a failed write
                # must leave nothing pending that a later close could append
                # never through a symbolic link: pgbench's fopen follows
                # one, so root's -l in /tmp wrote wherever another user's
                # link planted at pgbench_log.<pid> pointed
                flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC
                fd = os.open(path, flags | os.O_NOFOLLOW, 0o666)
                self._file = io.FileIO(fd, "w")
            except OSError as exc:
                raise PgsurgeError(
                    f'could not open logfile "{path}": {os.strerror(exc.errno or 0)}'
                ) from None

    # -- line makers (run once; the closures are the hot path) ----------------

    def _make_raw(self, limit: int, rng: PgPrng | None) -> LogFunc:
        opts = self._opts
        next_flush = 0
        shift = self._shift
        buf = self._buf
        append = buf.append
        flush = self.flush
        sampling, rate, draw = _sampler(opts, rng)
        detailed = opts.failures_detailed
        tail = _tail(opts)

        def log(
            now_us: int,
            client_id: int,
            tx_no: int,
            script_no: int,
            latency_us: int,
            lag_us: int,
            skipped: bool,
            failure: FailureKind | None,
            tries: int,
        ) -> None:
            nonlocal next_flush
            if sampling and draw() > rate:
                return
            now = now_us + shift
            if failure is None and not skipped:
                if tail:
                    extra = tail(lag_us, tries)
                    append(
                        f"{client_id} {tx_no} {latency_us} {script_no} "
                        f"{now // 1000000} {now % 1000000}{extra}\n"
                    )
                else:
                    # the common case: one f-string, ints printed as pgbench's %.0f
                    append(
                        f"{client_id} {tx_no} {latency_us} {script_no} "
                        f"{now // 1000000} {now % 1000000}\n"
                    )
            else:
                if skipped:
                    what = "skipped"
                elif detailed:
                    what = failure.value  # type: ignore[union-attr]
                else:
                    what = "failed"
                extra = tail(0, tries) if tail else ""
                append(
                    f"{client_id} {tx_no} {what} {script_no} "
                    f"{now // 1000000} {now % 1000000}{extra}\n"
                )
            if len(buf) >= limit:
                flush()
            if now_us >= next_flush:  # once a second (0: the first line)
                if next_flush:
                    flush()
                next_flush = now_us + FLUSH_EVERY_US

        return log

    def _make_aggregate(self, limit: int, rng: PgPrng | None) -> LogFunc:
        opts = self._opts
        shift = self._shift
        sampling, rate, draw = _sampler(opts, rng)
        throttled = opts.throttled
        buf = self._buf
        flush = self.flush
        roll = self._roll

        def log(
            now_us: int,
            client_id: int,
            tx_no: int,
            script_no: int,
            latency_us: int,
            lag_us: int,
            skipped: bool,
            failure: FailureKind | None,
            tries: int,
        ) -> None:
            # pgbench forbids sampling with aggregation, but draws first anyway
            if sampling and draw() > rate:
                return
            roll(now_us + shift)
            self._agg.record(
                latency_us,
                lag_us if throttled else None,
                skipped=skipped,
                failure=failure,
                tries=tries,
            )
            if buf:  # an interval ended (at most one write per interval)
                flush()

        return log

    def _roll(self, now: int) -> None:
        """Write every interval that ended at or before Unix µs ``now``."""
        agg = self._agg
        step = self._interval_us
        if agg.start_us + step > now:
            return
        opts = self._opts
        append = self._buf.append
        while agg.start_us + step <= now:
            append(format_aggregate(agg, opts))
            agg = StatsData(start_us=agg.start_us + step)
        self._agg = agg

    @property
    def options(self) -> TxLogOptions:
        return self._opts

    @property
    def epoch_shift_us(self) -> int:
        """Unix time minus monotonic time (µs), added to log times."""
        return self._shift

    @property
    def interval_us(self) -> int:
        """--aggregate-interval in µs (0: per-transaction lines)."""
        return self._interval_us

    def current(self) -> StatsData:
        """--aggregate-interval: the interval being accumulated (its
        ``start_us`` is Unix µs); the C loop records into it as ``log``
        does."""
        return self._agg

    def roll_to(self, unix_us: int) -> StatsData:
        """--aggregate-interval: write the intervals complete at ``unix_us``
        (as ``log`` does before recording), then return :meth:`current`."""
        self._roll(unix_us)
        return self._agg

    def write_chunk(self, text: str) -> None:
        """Lines made elsewhere (the C loop's, in their order among this
        writer's own): buffered after the pending ones and written now."""
        self._buf.append(text)
        self.flush()

    def restart(self, at_us: int) -> None:
        """--warmup's window start (monotonic ``at_us``): what was logged
        so far is dropped, the file emptied, and aggregate intervals count
        from the window (as from the benchmark's start without a warm-up;
        the C loop rebinds to :meth:`current` when it reloads)."""
        self._buf.clear()
        if self._interval_us:
            start = (at_us + self._shift) // 1000000 * 1000000
            self._agg = StatsData(start_us=start)
        f = self._file
        if f is None:
            return
        try:
            f.seek(0)
            f.truncate(0)
        except OSError as exc:
            self._give_up(exc)
            return
        self._good = 0

    # -- end -----------------------------------------------------------------

    def flush(self) -> None:
        """Write the buffered lines to the file.

        A write that fails (a full disk, a quota) does not stop the run:
        the measurement goes on and its report is printed, as pgbench's
        are (pgbench does not check its log writes at all), but the log is
        given up with one warning on stderr saying so, instead of being
        silently cut."""
        if not self._buf:
            return
        if self._file is None:
            self._buf.clear()  # given up: lines made after the failure
            return
        text = "".join(self._buf)
        self._buf.clear()
        f = self._file
        try:
            if isinstance(f, io.FileIO):
                self._write_raw(f, text.encode("utf-8"))
            else:
                f.write(text)
                f.flush()
        except OSError as exc:
            self._give_up(exc)

    def _write_raw(self, f: io.FileIO, data: bytes) -> None:
        done = 0
        view = memoryview(data)
        try:
            while done < len(data):
                n = f.write(view[done:])
                if n is None:  # only a non-blocking file: not what we opened
                    raise OSError(0, "log file would block")
                done += n
        except OSError:
            # what reached the file up to its last whole line stays
            self._good += data.rfind(b"\n", 0, done) + 1
            raise
        self._good += len(data)

    def _give_up(self, exc: OSError) -> None:
        reason = os.strerror(exc.errno) if exc.errno else str(exc)
        self.write_error = f'could not write log file "{self.path}": {reason}'
        sys.stderr.write(
            f"{PROG}: warning: {self.write_error}; the log is incomplete\n"
        )
        sys.stderr.flush()
        f, self._file = self._file, None
        if isinstance(f, io.FileIO):
            # no cut line: back to the end of the last whole chunk of lines
            try:
                f.truncate(self._good)
            except OSError:
                pass  # the file keeps a partial last line; the warning says so
            try:
                f.close()
            except OSError:
                pass

    def close(self, now_us: int | None = None) -> None:
        """Finish the log: with ``now_us`` (monotonic), first write the
        aggregate intervals complete by then, as pgbench does when a thread
        ends; then flush and close. Idempotent."""
        if self._file is None:
            return
        if now_us is not None and self._interval_us:
            self._roll(now_us + self._shift)
        self.flush()
        f, self._file = self._file, None
        if f is not None and self._owned:
            try:
                f.close()
            except OSError as exc:  # e.g. NFS reports a full disk at close
                self._file = f
                self._give_up(exc)

    def __enter__(self) -> TxLogWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

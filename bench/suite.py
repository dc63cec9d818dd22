"""The side-by-side suite: pgsurge against the real pgbench 18.6 (issue 6).

One command, its own server, identical arguments for both tools::

    python bench/suite.py                  # everything (about 20 minutes)
    python bench/suite.py --quick          # smoke version (2 pairs of 3 s)
    python bench/suite.py --cases select-only-prepared,aa-control --pairs 8
    python bench/suite.py --dsn "host=/tmp/pg port=5432 dbname=postgres"

By default it creates a fresh embedded PostgreSQL 18.6 cluster (pgsurge's
own, in a temporary directory; autovacuum off) and removes it at the end;
``--dsn`` names a maintenance database on an existing server instead, where
the suite creates (and drops) its own databases. Scale 10 is initialized
with the real pgbench for the run cases; init timing uses scale 50.

Run cases are measured in pairs, ABBA (pgbench first in even pairs, pgsurge
first in odd ones), after one uncounted warm-up pair, with a CHECKPOINT
before every run and one child process at a time: tps from the ``tps = ``
line, transactions processed, and client CPU per transaction from
getrusage(RUSAGE_CHILDREN) deltas (the tool's whole process tree, start-up
included). The A/A control runs pgbench against itself with the same
procedure on the first run case: its per-pair spread is the noise level the
other ratios must be read against.

Output: a table on stdout, the same as Markdown, and a JSON file with every
raw run (``--out``, default bench/results/suite-<timestamp>.json).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _suite_proc import (
    Measured,
    SuiteServer,
    pg_bindir,
    pgsurge_argv,
    run_measured,
)
from _suite_report import (
    MAIN_HEADER,
    OTHER_HEADER,
    Row,
    fmt,
    fmt_range,
    markdown_table,
    text_table,
)
from _suite_stats import (
    PairedSummary,
    RatioStats,
    Run,
    abba_order,
    at_most,
    median,
    parse_report,
    ratio,
    rotation_order,
    summarize_pairs,
    tps_verdict,
    verdict_text,
    within,
)

RUN_DB = "pgsurge_suite"
INIT_DB = "pgsurge_suite_init"
PGBENCH, PGSURGE = "pgbench", "pgsurge"
#: the tps target of every paired case (issue 6)
TPS_FLOOR = 0.97


@dataclass(frozen=True, slots=True)
class PairedCase:
    """A run case: both tools, the same arguments, ABBA pairs."""

    name: str
    #: the arguments of both tools, without -T (the suite adds it)
    args: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()
    #: the CPU-per-transaction ratio target (None: no CPU target)
    cpu_max: float | None = None
    #: latency and lag averages within this relative tolerance of pgbench's
    accuracy: float | None = None
    clients: int = 8


PAIRED_CASES: tuple[PairedCase, ...] = (
    PairedCase(
        "select-only-prepared",
        ("-b", "select-only", "-M", "prepared", "-c", "8", "-j", "2"),
        cpu_max=1.3,
    ),
    PairedCase(
        "select-only-simple",
        ("-b", "select-only", "-M", "simple", "-c", "8", "-j", "2"),
        cpu_max=1.3,
    ),
    PairedCase(
        "tpcb-like-prepared",
        ("-b", "tpcb-like", "-M", "prepared", "-c", "8", "-j", "2"),
        env=(("PGOPTIONS", "-c synchronous_commit=off"),),
        cpu_max=1.3,
    ),
    PairedCase(
        "select-only-prepared-256",
        ("-b", "select-only", "-M", "prepared", "-c", "256", "-j", "2"),
        cpu_max=1.0,
        clients=256,
    ),
    # -R accuracy. pgbench itself cannot hold 2000 tps of tpcb-like with
    # synchronous commit on a small machine (its schedule lag then measures
    # the server's backlog, tens of ms), so the transaction case commits
    # asynchronously like tpcb-like-prepared; the select-only case leaves
    # the server mostly idle, so latency and lag show the client's own timing
    PairedCase(
        "rate-2000",
        ("-b", "tpcb-like", "-R", "2000", "-c", "8", "-j", "2"),
        env=(("PGOPTIONS", "-c synchronous_commit=off"),),
        accuracy=0.10,
    ),
    PairedCase(
        "rate-2000-select",
        ("-b", "select-only", "-M", "prepared", "-R", "2000", "-c", "8", "-j", "2"),
        accuracy=0.10,
    ),
)
AA_CASE = "aa-control"
C1000_CASE = "c1000-rss"
INIT_CASE = "init"
HELP_CASE = "help-startup"
ALL_CASES = (
    *(c.name for c in PAIRED_CASES[:1]),
    AA_CASE,
    *(c.name for c in PAIRED_CASES[1:]),
    C1000_CASE,
    INIT_CASE,
    HELP_CASE,
)


@dataclass(frozen=True, slots=True)
class Options:
    cases: tuple[str, ...]
    pairs: int
    duration: int
    scale: int
    init_scale: int
    init_rounds: int
    init_jobs: int
    help_runs: int
    big_clients: int
    big_duration: int
    dsn: str | None
    data_dir: Path | None
    out: Path
    keep: bool
    quick: bool


def parse_options(argv: Sequence[str] | None = None) -> Options:
    ap = argparse.ArgumentParser(
        description="pgsurge vs pgbench 18.6, side by side (issue 6).",
        epilog="cases: " + ", ".join(ALL_CASES),
    )
    ap.add_argument("--quick", action="store_true", help="short smoke version")
    ap.add_argument("--cases", help="comma-separated case names (default: all)")
    ap.add_argument(
        "--pairs",
        type=int,
        help="counted pairs per case after the warm-up pair (default 6)",
    )
    ap.add_argument("--duration", type=int, help="-T of run cases (default 10)")
    ap.add_argument("--scale", type=int, default=10, help="scale of run cases")
    ap.add_argument("--init-scale", type=int, help="scale of init timing (50)")
    ap.add_argument("--init-rounds", type=int, help="init rounds (default 3)")
    ap.add_argument("--init-jobs", type=int, default=2)
    ap.add_argument("--help-runs", type=int, help="--help runs per tool (20)")
    ap.add_argument("--big-clients", type=int, default=1000, help="clients of RSS case")
    ap.add_argument("--big-duration", type=int, help="-T of the RSS case (10)")
    ap.add_argument("--dsn", help="maintenance database of an existing server")
    ap.add_argument("--data-dir", type=Path, help="parent of the temporary cluster")
    ap.add_argument("--out", type=Path, help="directory of the JSON and .md output")
    ap.add_argument("--keep", action="store_true", help="keep server and databases")
    o = ap.parse_args(argv)
    names = tuple(ALL_CASES)
    if o.cases:
        names = tuple(n.strip() for n in o.cases.split(",") if n.strip())
        unknown = [n for n in names if n not in ALL_CASES]
        if unknown:
            ap.error(
                f"unknown case(s) {', '.join(unknown)}; known: {', '.join(ALL_CASES)}"
            )

    def pick(value: int | None, full: int, quick: int) -> int:
        return value if value is not None else (quick if o.quick else full)

    return Options(
        cases=names,
        pairs=pick(o.pairs, 6, 2),
        duration=pick(o.duration, 10, 3),
        scale=o.scale,
        init_scale=pick(o.init_scale, 50, 10),
        init_rounds=pick(o.init_rounds, 3, 1),
        init_jobs=o.init_jobs,
        help_runs=pick(o.help_runs, 20, 5),
        big_clients=o.big_clients,
        big_duration=pick(o.big_duration, 10, 10),
        dsn=o.dsn,
        data_dir=o.data_dir,
        out=o.out or Path(__file__).resolve().parent / "results",
        keep=o.keep,
        quick=o.quick,
    )


# -- running ---------------------------------------------------------------------


class Suite:
    """Runs the selected cases and keeps every result for the report."""

    def __init__(self, opts: Options, server: SuiteServer, json_path: Path) -> None:
        self.opts = opts
        self.server = server
        self.json_path = json_path
        self.bindir = pg_bindir()
        self.pgsurge = pgsurge_argv()
        self.results: dict[str, dict[str, Any]] = {}
        self.summaries: dict[str, PairedSummary] = {}
        self.meta: dict[str, Any] = {}
        self.run_dsn = ""

    def tool_argv(self, tool: str) -> list[str]:
        return [str(self.bindir / "pgbench")] if tool == PGBENCH else list(self.pgsurge)

    def measure(
        self,
        tool: str,
        args: Sequence[str],
        *,
        pair: int,
        position: int,
        env: dict[str, str] | None = None,
        sample_memory: bool = False,
        checkpoint: bool = True,
        timeout: float = 3600.0,
    ) -> Run:
        argv = [*self.tool_argv(tool), *args]
        if checkpoint:
            self.server.checkpoint()
        m = run_measured(argv, env, timeout=timeout, sample_memory=sample_memory)
        return _run_of(tool, pair, position, m)

    # -- paired cases -------------------------------------------------------------

    def paired(
        self, case: PairedCase, a: str = PGBENCH, b: str = PGSURGE, label: str = ""
    ) -> list[tuple[Run, Run]]:
        """Warm-up pair, then ``--pairs`` ABBA pairs; (a, b) runs per pair."""
        args = [*case.args, "-T", str(self.opts.duration), self.run_dsn]
        env = dict(os.environ)
        env.update(case.env)
        timeout = self.opts.duration + 600.0
        pairs: list[tuple[Run, Run]] = []
        name = label or case.name
        for i in range(-1, self.opts.pairs):
            order = abba_order(i, "A", "B")
            runs: dict[str, Run] = {}
            for pos, slot in enumerate(order):
                tool = a if slot == "A" else b
                runs[slot] = self.measure(
                    tool, args, pair=i, position=pos, env=env, timeout=timeout
                )
            ra, rb = runs["A"], runs["B"]
            tag = "warm-up" if i < 0 else f"pair {i}"
            print(
                f"  {name} {tag} ({''.join(order)}): "
                f"{a} {_run_brief(ra)} | {b} {_run_brief(rb)} | "
                f"tps ratio {fmt(ratio(rb.tps, ra.tps), 3)} "
                f"cpu ratio {fmt(ratio(rb.cpu_us_per_tx, ra.cpu_us_per_tx), 3)}",
                flush=True,
            )
            for r in (ra, rb):
                if not r.ok:
                    print(f"    {r.tool} failed: {r.error}", flush=True)
            if i >= 0:
                pairs.append((ra, rb))
        return pairs

    def run_paired(self, case: PairedCase) -> None:
        needed = case.clients + 5
        limit = int(self.server.setting("max_connections") or 0)
        if limit < needed:
            self._skip(case.name, f"max_connections {limit} < {needed}")
            return
        print(
            f"{case.name}: {' '.join(case.args)} -T {self.opts.duration}"
            + "".join(f" ({k}={v!r})" for k, v in case.env),
            flush=True,
        )
        pairs = self.paired(case)
        self._store(case.name, "paired", case.args, case.env, pairs)

    def run_aa(self) -> None:
        case = PAIRED_CASES[0]
        print(f"{AA_CASE}: pgbench vs pgbench, {' '.join(case.args)}", flush=True)
        pairs = self.paired(case, PGBENCH, PGBENCH, label=AA_CASE)
        self._store(AA_CASE, "aa", case.args, case.env, pairs)

    def _store(
        self,
        name: str,
        kind: str,
        args: Sequence[str],
        env: Sequence[tuple[str, str]],
        pairs: list[tuple[Run, Run]],
    ) -> None:
        summary = summarize_pairs(pairs)
        self.summaries[name] = summary
        self.results[name] = {
            "kind": kind,
            "args": [*args, "-T", str(self.opts.duration)],
            "env": dict(env),
            "summary": dataclasses.asdict(summary),
            "pairs": [[_run_dict(r), _run_dict(c)] for r, c in pairs],
        }
        self.save()

    def _skip(self, name: str, why: str) -> None:
        print(f"{name}: skipped, {why}", flush=True)
        self.results[name] = {"kind": "skipped", "reason": why}
        self.save()

    # -- -c 1000 memory ---------------------------------------------------------

    def run_big(self) -> None:
        n = self.opts.big_clients
        limit = int(self.server.setting("max_connections") or 0)
        if limit < n + 5:
            self._skip(C1000_CASE, f"max_connections {limit} < {n + 5}")
            return
        with tempfile.TemporaryDirectory(prefix="pgsurge-suite-") as tmp:
            script = Path(tmp) / "select1.sql"
            script.write_text("SELECT 1;\n")
            args = ["-n", "-f", str(script), "-c", str(n), "-j", "2"]
            args += ["-T", str(self.opts.big_duration), self.run_dsn]
            print(f"{C1000_CASE}: {' '.join(args[:-1])}", flush=True)
            runs = []
            for pos, tool in enumerate((PGBENCH, PGSURGE)):
                r = self.measure(
                    tool,
                    args,
                    pair=0,
                    position=pos,
                    sample_memory=True,
                    timeout=self.opts.big_duration + 600.0,
                )
                print(
                    f"  {tool}: rc {r.returncode}, {fmt(r.tps, 0)} tps, peak RSS "
                    f"{(r.peak_rss_kib or 0) / 1024:.1f} MiB, PSS "
                    f"{(r.peak_pss_kib or 0) / 1024:.1f} MiB"
                    + (f"; {r.error}" if r.error else ""),
                    flush=True,
                )
                runs.append(r)
        self.results[C1000_CASE] = {
            "kind": "memory",
            "clients": n,
            "args": args[:-1],
            "runs": [_run_dict(r) for r in runs],
        }
        self.save()

    # -- init timing -------------------------------------------------------------

    def run_init(self) -> None:
        dsn = self.server.recreate_db(INIT_DB)
        s = str(self.opts.init_scale)
        jobs = f"{PGSURGE} --init-jobs {self.opts.init_jobs}"
        variants: dict[str, tuple[str, list[str]]] = {
            PGBENCH: (PGBENCH, ["-i", "-s", s]),
            PGSURGE: (PGSURGE, ["-i", "-s", s]),
            jobs: (PGSURGE, ["-i", "-s", s, "--init-jobs", str(self.opts.init_jobs)]),
        }
        print(f"{INIT_CASE}: -i -s {s}, {self.opts.init_rounds} round(s)", flush=True)
        rounds: list[dict[str, Run]] = []
        for rnd in range(self.opts.init_rounds):
            got: dict[str, Run] = {}
            for pos, name in enumerate(rotation_order(rnd, list(variants))):
                tool, args = variants[name]
                got[name] = self.measure(tool, [*args, dsn], pair=rnd, position=pos)
                r = got[name]
                print(
                    f"  round {rnd} {name}: wall {r.wall_s:.2f} s, done in "
                    f"{fmt(r.done_in_s)} s, cpu {r.cpu_s:.2f} s"
                    + (f"; {r.error}" if r.error else ""),
                    flush=True,
                )
            rounds.append(got)
        summary = {}
        for name in variants:
            summary[name] = {
                "wall_median_s": median(r[name].wall_s for r in rounds if r[name].ok),
                "wall_ratio_median": median(
                    ratio(r[name].wall_s, r[PGBENCH].wall_s)
                    for r in rounds
                    if r[name].ok and r[PGBENCH].ok
                ),
            }
        self.results[INIT_CASE] = {
            "kind": "init",
            "scale": self.opts.init_scale,
            "variants": {n: [*self.tool_argv(t), *a] for n, (t, a) in variants.items()},
            "summary": summary,
            "rounds": [{n: _run_dict(r) for n, r in rd.items()} for rd in rounds],
        }
        self.save()

    # -- --help start-up ------------------------------------------------------------

    def run_help(self) -> None:
        print(f"{HELP_CASE}: --help x {self.opts.help_runs} per tool", flush=True)
        runs: dict[str, list[Run]] = {PGBENCH: [], PGSURGE: []}
        for i in range(self.opts.help_runs):
            for pos, tool in enumerate(abba_order(i, PGBENCH, PGSURGE)):
                runs[tool].append(
                    self.measure(
                        tool, ["--help"], pair=i, position=pos, checkpoint=False
                    )
                )
        summary = {t: median(r.wall_s for r in rs if r.ok) for t, rs in runs.items()}
        print(
            f"  median wall: pgsurge {summary[PGSURGE]:.3f} s, "
            f"pgbench {summary[PGBENCH]:.3f} s",
            flush=True,
        )
        self.results[HELP_CASE] = {
            "kind": "help",
            "wall_median_s": summary,
            "runs": {t: [_run_dict(r) for r in rs] for t, rs in runs.items()},
        }
        self.save()

    # -- the whole suite ---------------------------------------------------------------

    def prepare(self) -> None:
        """Create and initialize the run database (scale ``--scale``, real pgbench)."""
        self.run_dsn = self.server.recreate_db(RUN_DB)
        print(
            f"initializing {RUN_DB} at scale {self.opts.scale} with pgbench", flush=True
        )
        m = run_measured(
            [
                str(self.bindir / "pgbench"),
                "-i",
                "-s",
                str(self.opts.scale),
                "-q",
                self.run_dsn,
            ]
        )
        if m.returncode != 0:
            sys.exit(f"pgbench -i failed:\n{m.stderr}")
        self.server.disable_autovacuum(RUN_DB)
        self.meta = environment(self)
        self.save()

    def run(self) -> None:
        steps: dict[str, Callable[[], None]] = {AA_CASE: self.run_aa}
        for case in PAIRED_CASES:
            steps[case.name] = lambda c=case: self.run_paired(c)  # type: ignore[misc]
        steps[C1000_CASE] = self.run_big
        steps[INIT_CASE] = self.run_init
        steps[HELP_CASE] = self.run_help
        for name in ALL_CASES:
            if name in self.opts.cases:
                steps[name]()
        self.meta["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        self.meta["loadavg_end"] = os.getloadavg()
        self.save()

    def save(self) -> None:
        doc = {
            "meta": self.meta,
            "options": _options_dict(self.opts),
            "results": self.results,
        }
        self.json_path.write_text(json.dumps(doc, indent=1, default=str) + "\n")


def _run_of(tool: str, pair: int, position: int, m: Measured) -> Run:
    # pgbench -i reports ("done in …") on stderr, runs on stdout
    rep = parse_report(m.stdout + "\n" + m.stderr)
    error = None
    if m.returncode != 0:
        error = f"exit {m.returncode}: " + " / ".join(
            m.stderr.strip().splitlines()[-3:]
        )
    return Run(
        tool=tool,
        pair=pair,
        position=position,
        argv=m.argv,
        returncode=m.returncode,
        wall_s=m.wall_s,
        user_s=m.user_s,
        sys_s=m.sys_s,
        tps=rep.tps,
        transactions=rep.transactions,
        latency_ms=rep.latency_ms,
        lag_ms=rep.lag_ms,
        done_in_s=rep.done_in_s,
        peak_rss_kib=m.peak_rss_kib,
        peak_pss_kib=m.peak_pss_kib,
        error=error,
        stdout=m.stdout,
        stderr_tail="\n".join(m.stderr.splitlines()[-20:]),
    )


def _run_brief(r: Run) -> str:
    return f"{fmt(r.tps, 0):>7} tps {fmt(r.cpu_us_per_tx, 1):>6} µs/tx"


def _run_dict(r: Run) -> dict[str, Any]:
    d = dataclasses.asdict(r)
    d["cpu_us_per_tx"] = r.cpu_us_per_tx
    return d


def _options_dict(o: Options) -> dict[str, Any]:
    return {
        k: (str(v) if isinstance(v, Path) else v)
        for k, v in dataclasses.asdict(o).items()
    }


def environment(suite: Suite) -> dict[str, Any]:
    """What a reader needs to reproduce or judge the figures."""
    srv = suite.server
    here = Path(__file__).resolve().parent

    def out(argv: list[str]) -> str:
        try:
            return subprocess.run(
                argv, capture_output=True, text=True, cwd=here, timeout=30
            ).stdout.strip()
        except OSError:
            return ""

    settings = (
        "server_version",
        "max_connections",
        "shared_buffers",
        "autovacuum",
        "synchronous_commit",
        "fsync",
        "max_wal_size",
        "data_directory",
    )
    return {
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": [sys.executable, *sys.argv],
        "host": platform.node(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "loadavg_start": os.getloadavg(),
        "python": sys.version,
        "git_commit": out(["git", "rev-parse", "HEAD"]),
        "git_dirty_src": out(
            ["git", "status", "--porcelain", "--", "../src"]
        ).splitlines(),
        "pgsurge": suite.pgsurge,
        "pgbench": str(suite.bindir / "pgbench"),
        "pgbench_version": out([str(suite.bindir / "pgbench"), "--version"]),
        "server": "embedded (temporary)" if srv.embedded else "given --dsn",
        "settings": {s: _safe_setting(srv, s) for s in settings},
    }


def _safe_setting(srv: SuiteServer, name: str) -> str:
    try:
        return srv.setting(name)
    except Exception:  # e.g. data_directory needs privileges
        return "?"


# -- the tables ------------------------------------------------------------------


def build_rows(suite: Suite) -> tuple[list[Row], list[Row]]:
    res = suite.results
    aa: RatioStats | None = None
    if res.get(AA_CASE, {}).get("kind") == "aa":
        aa = suite.summaries[AA_CASE].tps
    main: list[Row] = []
    other: list[Row] = []
    for name in ALL_CASES:
        r = res.get(name)
        if r is None:
            continue
        if r["kind"] == "skipped":
            main.append(Row((name, *["–"] * 5, "", f"skipped: {r['reason']}")))
            continue
        if r["kind"] in ("paired", "aa"):
            case = next((c for c in PAIRED_CASES if c.name == name), PAIRED_CASES[0])
            s = suite.summaries[name]
            main.append(_paired_row(name, case, s, aa, r["kind"] == "aa"))
            if case.accuracy is not None and r["kind"] == "paired":
                other += _accuracy_rows(name, case.accuracy, s)
        elif r["kind"] == "memory":
            other += _memory_rows(r)
        elif r["kind"] == "init":
            other += _init_rows(r, suite.opts.init_jobs)
        elif r["kind"] == "help":
            w = r["wall_median_s"]
            other.append(
                Row(
                    (
                        "`--help` start-up, median wall (s)",
                        fmt(w[PGSURGE], 3),
                        fmt(w[PGBENCH], 3),
                        fmt(ratio(w[PGSURGE], w[PGBENCH])),
                        "< 0.3 s",
                        verdict_text(("time", at_most(w[PGSURGE], 0.3 - 1e-9))),
                    )
                )
            )
    return main, other


def _paired_row(
    name: str, case: PairedCase, s: PairedSummary, aa: RatioStats | None, is_aa: bool
) -> Row:
    if is_aa:
        target, met = "noise band (A/A)", "–"
        name = f"{AA_CASE} (pgbench/pgbench, {case.name})"
    else:
        checks: list[tuple[str, bool | None]] = []
        parts = []
        if case.cpu_max is not None:
            parts.append(f"CPU ≤ {case.cpu_max}")
            checks.append(("cpu", at_most(s.cpu.median, case.cpu_max)))
        if case.accuracy is not None:
            parts.append(f"lat & lag ±{case.accuracy:.0%}")
            checks.append(("lat", within(s.latency.median, 1.0, case.accuracy)))
            checks.append(("lag", within(s.lag.median, 1.0, case.accuracy)))
        else:
            parts.append(f"tps ≥ {TPS_FLOOR} & in A/A band")
            checks.append(("tps", tps_verdict(s.tps, TPS_FLOOR, aa)))
        target, met = "; ".join(parts), verdict_text(*checks)
    return Row(
        (
            name,
            fmt(s.tps.median, 3),
            fmt_range(s.tps.low, s.tps.high, 3),
            fmt(s.cand_cpu_us, 1),
            fmt(s.ref_cpu_us, 1),
            fmt(s.cpu.median, 3),
            target,
            met,
        )
    )


def _with_range(r: RatioStats) -> str:
    """The median ratio and, in parentheses, the per-pair range."""
    return f"{fmt(r.median, 3)} ({fmt_range(r.low, r.high)})"


def _accuracy_rows(name: str, tol: float, s: PairedSummary) -> list[Row]:
    band = f"ratio {1 - tol:.2f}–{1 + tol:.2f}"
    return [
        Row(
            (
                f"{name}: latency average (ms)",
                fmt(s.cand_latency_ms, 3),
                fmt(s.ref_latency_ms, 3),
                _with_range(s.latency),
                band,
                verdict_text(("lat", within(s.latency.median, 1.0, tol))),
            )
        ),
        Row(
            (
                f"{name}: schedule lag average (ms)",
                fmt(s.cand_lag_ms, 3),
                fmt(s.ref_lag_ms, 3),
                _with_range(s.lag),
                band,
                verdict_text(("lag", within(s.lag.median, 1.0, tol))),
            )
        ),
    ]


def _memory_rows(r: dict[str, Any]) -> list[Row]:
    n = r["clients"]
    runs = {x["tool"]: x for x in r["runs"]}
    cand, ref = runs.get(PGSURGE, {}), runs.get(PGBENCH, {})

    def per_client(x: dict[str, Any], key: str) -> float | None:
        v = x.get(key)
        return v / n if v else None

    rows = [
        Row(
            (
                f"-c {n} -j 2 `SELECT 1`: tps",
                fmt(cand.get("tps"), 0),
                fmt(ref.get("tps"), 0),
                fmt(ratio(cand.get("tps"), ref.get("tps"))),
                "–",
                "–",
            )
        )
    ]
    for key, label in (("peak_rss_kib", "RSS"), ("peak_pss_kib", "PSS")):
        c, p = per_client(cand, key), per_client(ref, key)
        runs_ok = cand.get("returncode") == 0 and cand.get("error") is None
        rows.append(
            Row(
                (
                    f"-c {n} -j 2 peak {label} per client (KiB)",
                    fmt(c, 1),
                    fmt(p, 1),
                    fmt(ratio(c, p)),
                    "runs; reported",
                    "yes" if runs_ok else f"no (exit {cand.get('returncode')})",
                )
            )
        )
    return rows


def _init_rows(r: dict[str, Any], jobs: int) -> list[Row]:
    summ = r["summary"]
    base = summ[PGBENCH]["wall_median_s"]
    rows = []
    for name, s in summ.items():
        if name == PGBENCH:
            continue
        with_jobs = "--init-jobs" in name
        target = "≤ 0.7" if with_jobs else "–"
        met = (
            verdict_text(("wall", at_most(s["wall_ratio_median"], 0.7)))
            if with_jobs
            else "–"
        )
        label = f"`-i -s {r['scale']}`" + (
            f" `--init-jobs {jobs}`" if with_jobs else ""
        )
        rows.append(
            Row(
                (
                    f"{label} wall, median (s)",
                    fmt(s["wall_median_s"]),
                    fmt(base),
                    fmt(s["wall_ratio_median"]),
                    target,
                    met,
                )
            )
        )
    return rows


def report(suite: Suite) -> str:
    main, other = build_rows(suite)
    md = []
    if main:
        md.append(markdown_table(MAIN_HEADER, main))
    if other:
        md.append(markdown_table(OTHER_HEADER, other))
    print()
    if main:
        print(text_table(MAIN_HEADER, main))
        print()
    if other:
        print(text_table(OTHER_HEADER, other))
        print()
    print("Markdown:\n")
    text = "\n\n".join(md)
    print(text)
    return text


def main(argv: Sequence[str] | None = None) -> int:
    opts = parse_options(argv)
    opts.out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    json_path = opts.out / f"suite-{stamp}.json"
    with SuiteServer(opts.dsn, opts.data_dir, opts.keep) as server:
        suite = Suite(opts, server, json_path)
        suite.prepare()
        try:
            suite.run()
        finally:
            md = report(suite)
            json_path.with_suffix(".md").write_text(md + "\n")
            print(f"\nraw runs: {json_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The cases of bench/suite.py: names, arguments and targets (issue 6).

Data, not code: the runner iterates over these and the report reads the
targets from them, so a case is added or changed here only.
"""

from __future__ import annotations

from dataclasses import dataclass

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
    #: arguments given to pgsurge only (its extra outputs), compared with
    #: pgbench's run without them
    b_extra: tuple[str, ...] = ()


#: the run cases' common command lines (also bench/instr_bench.py's and
#: bench/syscall_bench.py's)
SELECT_ONLY = ("-b", "select-only", "-M", "prepared", "-c", "8", "-j", "2")
TPCB_LIKE = ("-b", "tpcb-like", "-M", "prepared", "-c", "8", "-j", "2")
#: pgsurge's extra outputs in the -json cases ({tmp}: the run's directory)
JSON_OUT = ("--json", "{tmp}/run.json", "--percentiles")
#: tpcb-like's commits without waiting for the WAL flush (the client is measured)
ASYNC_COMMIT = ("PGOPTIONS", "-c synchronous_commit=off")


PAIRED_CASES: tuple[PairedCase, ...] = (
    PairedCase(
        "select-only-prepared",
        SELECT_ONLY,
        cpu_max=1.3,
    ),
    PairedCase(
        "select-only-simple",
        ("-b", "select-only", "-M", "simple", "-c", "8", "-j", "2"),
        cpu_max=1.3,
    ),
    PairedCase(
        "tpcb-like-prepared",
        TPCB_LIKE,
        env=(ASYNC_COMMIT,),
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
        env=(ASYNC_COMMIT,),
        accuracy=0.10,
    ),
    PairedCase(
        "rate-2000-select",
        ("-b", "select-only", "-M", "prepared", "-R", "2000", "-c", "8", "-j", "2"),
        accuracy=0.10,
    ),
)
# Issue 10: every measurement at C speed. ``{tmp}`` is the run's temporary
# directory, ``{bench}`` this directory; PGSURGE_FASTLOOP=require makes a
# pgsurge run that the C loop does not take fail instead of being measured.
_REQUIRE = ("PGSURGE_FASTLOOP", "require")
PAIRED_CASES += (
    PairedCase(
        "select-only-json",
        SELECT_ONLY,
        env=(_REQUIRE,),
        cpu_max=1.05,
        b_extra=JSON_OUT,
    ),
    PairedCase(
        "tpcb-like-json",
        TPCB_LIKE,
        env=(ASYNC_COMMIT, _REQUIRE),
        cpu_max=1.05,
        b_extra=JSON_OUT,
    ),
    PairedCase(
        "select-only-log",
        (*SELECT_ONLY, "-l"),
        env=(_REQUIRE,),
        cpu_max=1.05,
    ),
    PairedCase(
        "tpcb-like-log",
        (*TPCB_LIKE, "-l"),
        env=(ASYNC_COMMIT, _REQUIRE),
        cpu_max=1.05,
    ),
    PairedCase(
        "logic-script",
        ("-f", "{bench}/logic.sql", "-M", "prepared", "-c", "8", "-j", "2"),
        env=(_REQUIRE,),
        cpu_max=1.1,
    ),
)
# Issue 22: every script at C speed. These run without PGSURGE_FASTLOOP=require
# so that the suite measures what a user gets today, on whichever loop takes
# the run (the report's loop column says which); pgsurge writes its JSON with
# percentiles and the -l log as well (the acceptance), pgbench nothing extra.
JSON_LOG = (*JSON_OUT, "-l")
_SCRIPT_ARGS = ("-M", "prepared", "-c", "8", "-j", "2")
PAIRED_CASES += tuple(
    PairedCase(
        f"script-{name}",
        ("-f", f"{{bench}}/{name}.sql", *_SCRIPT_ARGS),
        cpu_max=1.05,
        b_extra=JSON_LOG,
    )
    for name in ("zipfian", "gaussian", "exponential", "double", "pipeline", "long200")
)
PAIRED_CASES += (
    PairedCase(
        "connect-select-only",
        ("-C", "-b", "select-only", "-c", "8", "-j", "2"),
        cpu_max=1.05,
        b_extra=JSON_OUT,
    ),
    PairedCase(
        "tpcb-like-extended",
        ("-b", "tpcb-like", "-M", "extended", "-c", "8", "-j", "2"),
        env=(ASYNC_COMMIT,),
        cpu_max=1.05,
        b_extra=JSON_LOG,
    ),
    PairedCase(
        "tpcb-like-simple",
        ("-b", "tpcb-like", "-M", "simple", "-c", "8", "-j", "2"),
        env=(ASYNC_COMMIT,),
        cpu_max=1.05,
        b_extra=JSON_LOG,
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

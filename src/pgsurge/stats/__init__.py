"""Mergeable benchmark statistics: the value types workers fill and reports read."""

from pgsurge.stats.counters import CommandStats, FailureKind, StatsData
from pgsurge.stats.results import RunFacts, RunResult, ScriptInfo, WorkerResult
from pgsurge.stats.simple import SimpleStats

__all__ = [
    "CommandStats",
    "FailureKind",
    "RunFacts",
    "RunResult",
    "ScriptInfo",
    "SimpleStats",
    "StatsData",
    "WorkerResult",
]

"""Mergeable benchmark statistics: the value types workers fill and reports read."""

from pgsurge.stats.results import (
    CommandStats,
    FailureKind,
    RunFacts,
    RunResult,
    ScriptInfo,
    StatsData,
    WorkerResult,
)
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

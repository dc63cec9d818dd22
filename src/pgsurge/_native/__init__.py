"""Loading pgsurge's optional C extensions, or not.

pgsurge is pure Python; ``pgsurge._speedups`` (PRNG, hashes, permute),
``pgsurge._fastpq`` (fused libpq calls of the run engine) and
``pgsurge._fastloop`` (a worker's event loop) only make it cheaper to run,
and each has a pure-Python twin that gives the same results. :func:`load`
returns an extension module when it was built, when its ``API_VERSION`` is
the one this code was written for (a stale build of an older interface is
ignored, not trusted) and when ``PGSURGE_PURE`` is not set:
``PGSURGE_PURE=1`` forces the pure-Python code everywhere (tests and
comparisons use it). A build of other sources with the same interface is
not detected here (an installed package has no sources to compare with):
tests/unit/test_speedups.py compares the ``SOURCE_HASH`` that setup.py
compiles into the extensions with the checkout's files.
"""

from __future__ import annotations

import importlib
import os
from types import CodeType, ModuleType

__all__ = ["SPEEDUPS_API", "compile_source", "load", "pure_requested", "unavailable"]

#: the interface version of pgsurge._speedups this code expects; a build of
#: another version (a stale .so) is ignored
SPEEDUPS_API = 4

#: extensions that were wanted (no PGSURGE_PURE) but could not be used,
#: with why: the run then says so once (pgsurge.runner)
_unavailable: dict[str, str] = {}


def unavailable() -> dict[str, str]:
    """``{extension: reason}`` of the extensions :func:`load` was asked for
    and could not give (not built, or built for another interface); empty
    when all loaded or when ``PGSURGE_PURE`` asked for none."""
    return dict(_unavailable)


def pure_requested() -> bool:
    """True when ``PGSURGE_PURE`` asks for the pure-Python code."""
    return os.environ.get("PGSURGE_PURE", "") not in ("", "0")


def load(name: str, api: int) -> ModuleType | None:
    """``pgsurge.<name>`` if it is built, current and wanted, else None."""
    if pure_requested():
        return None
    try:
        module = importlib.import_module(f"pgsurge.{name}")
    except ImportError as exc:
        _unavailable[name] = f"not built ({exc})"
        return None
    if getattr(module, "API_VERSION", None) != api:
        _unavailable[name] = "built for another version of pgsurge"
        return None
    return module


def compile_source(source: str, filename: str, mode: str = "exec") -> CodeType:
    """``compile(source, filename, mode, dont_inherit=True)`` of a str in
    mode "exec" or "eval", by ``pgsurge._speedups`` when it is built: the
    builtin's first call in a process makes all of the ``ast`` module's
    node types (some 200 KiB of every process, issue 25), which the C
    twin's compiling does without. A run compiles psycopg.errors' source
    (``pgsurge.deferred_errors``) and the string annotations of psycopg's
    named tuples (``pgsurge.deferred``)."""
    speedups = load("_speedups", SPEEDUPS_API)
    if speedups is None:
        return compile(source, filename, mode, dont_inherit=True)
    code: CodeType = speedups.compile_source(source, filename, mode)
    return code

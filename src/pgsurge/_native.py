"""Loading pgsurge's optional C extensions, or not.

pgsurge is pure Python; ``pgsurge._speedups`` (PRNG, hashes, permute) and
``pgsurge._fastpq`` (fused libpq calls of the run engine) only make it
cheaper to run, and each has a pure-Python twin that gives the same
results. :func:`load` returns an extension module when it was built, when
its ``API_VERSION`` is the one this code was written for (a stale build of
an older source is ignored, not trusted) and when ``PGSURGE_PURE`` is not
set: ``PGSURGE_PURE=1`` forces the pure-Python code everywhere (tests and
comparisons use it).
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

__all__ = ["load", "pure_requested"]


def pure_requested() -> bool:
    """True when ``PGSURGE_PURE`` asks for the pure-Python code."""
    return os.environ.get("PGSURGE_PURE", "") not in ("", "0")


def load(name: str, api: int) -> ModuleType | None:
    """``pgsurge.<name>`` if it is built, current and wanted, else None."""
    if pure_requested():
        return None
    try:
        module = importlib.import_module(f"pgsurge.{name}")
    except ImportError:
        return None
    if getattr(module, "API_VERSION", None) != api:
        return None
    return module

"""Build hook for pgsurge's optional C extensions.

Everything else about the package lives in pyproject.toml. The extensions
only make pgsurge cheaper to run: ``pgsurge._speedups`` (the PRNG, hashes
and ``permute()``, src/pgsurge/_native/_speedups.c) and ``pgsurge._fastpq`` (the
run engine's per-transaction libpq calls, src/pgsurge/_native/_fastpq.c) and
``pgsurge._fastloop`` (a worker's event loop with the common case of its
clients' state machine, src/pgsurge/_native/_fastloop*.c; the parts are listed in
src/pgsurge/_native/_fastloop.h) and ``pgsurge._fastparse`` (the common ``\\set``
and ``\\if`` lines of a script parsed in C, src/pgsurge/_native/_fastparse.c).
pgsurge runs the same without them, in pure Python. So a failed build —
no C compiler, no Python headers — must not fail the install:
:class:`OptionalBuildExt` reports the failure and carries on.
``PGSURGE_NO_EXT=1`` skips the build altogether.
"""

from __future__ import annotations

import hashlib
import os
import sys
from typing import Any

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class OptionalBuildExt(build_ext):
    """build_ext that warns instead of failing when the compiler does."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # no compiler at all (DistutilsPlatformError, …)
            self._skip(exc)

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:  # compile or link error
            self._skip(exc)

    @staticmethod
    def _skip(exc: BaseException) -> None:
        print(
            f"WARNING: an optional C extension of pgsurge was not built ({exc}); "
            "pgsurge will use its pure-Python code paths (same results, more "
            "CPU per transaction).",
            file=sys.stderr,
        )


_HERE = os.path.dirname(os.path.abspath(__file__))


def source_hash(paths: list[str]) -> str:
    """A digest of an extension's sources and headers, in the order given.

    It is compiled into the extension (``SOURCE_HASH``), so that
    tests/unit/test_speedups.py can tell a build of other sources (a stale
    in-place build after an edit) from a current one, whatever the file
    times say. The test computes it the same way.
    """
    h = hashlib.sha256()
    for path in paths:
        h.update(path.encode() + b"\0")
        with open(os.path.join(_HERE, path), "rb") as f:
            h.update(f.read())
    return h.hexdigest()[:16]


def _hashed(name: str, sources: list[str], depends: list[str], **kw: Any) -> Extension:
    """An Extension with its SOURCE_HASH defined (see :func:`source_hash`)."""
    macro = ("PGSURGE_SOURCE_HASH", f'"{source_hash([*sources, *depends])}"')
    return Extension(
        name, sources=sources, depends=depends, define_macros=[macro], **kw
    )


def _extensions() -> list[Extension]:
    if os.environ.get("PGSURGE_NO_EXT", "") not in ("", "0"):
        return []
    args = []
    if os.name == "posix":
        # no fused multiply-add: the double draws must round exactly like
        # the pure-Python code (and pgbench)
        args = ["-ffp-contract=off"]
    return [
        Extension(
            "pgsurge._speedups",
            sources=["src/pgsurge/_native/_speedups.c"],
            extra_compile_args=args,
            optional=True,
        ),
        # the common \\set/\\if lines parsed into the same trees as
        # pgsurge.script.parser builds (pgsurge.script.fastparse)
        _hashed(
            name="pgsurge._fastparse",
            sources=["src/pgsurge/_native/_fastparse.c"],
            depends=[],
            optional=True,
        ),
        # dlopen/dlsym live in libdl on glibc before 2.34
        _hashed(
            name="pgsurge._fastpq",
            sources=["src/pgsurge/_native/_fastpq.c"],
            depends=["src/pgsurge/_native/_fastpq_api.h"],
            libraries=["dl"] if sys.platform.startswith("linux") else [],
            optional=True,
        ),
        # the worker's event loop in C; takes libpq from _fastpq's capsule
        _hashed(
            name="pgsurge._fastloop",
            sources=[
                "src/pgsurge/_native/_fastloop.c",
                "src/pgsurge/_native/_fastloop_plan.c",
                "src/pgsurge/_native/_fastloop_sync.c",
                "src/pgsurge/_native/_fastloop_client.c",
                "src/pgsurge/_native/_fastloop_loop.c",
                "src/pgsurge/_native/_fastloop_logic.c",
                "src/pgsurge/_native/_fastloop_gen.c",
            ],
            depends=[
                "src/pgsurge/_native/_fastloop.h",
                "src/pgsurge/_native/_fastpq_api.h",
            ],
            # latency sums and the --rate schedule must round as Python's
            extra_compile_args=args,
            optional=True,
        ),
    ]


setup(ext_modules=_extensions(), cmdclass={"build_ext": OptionalBuildExt})

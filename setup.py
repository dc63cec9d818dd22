"""Build hook for pgsurge's optional C extensions.

Everything else about the package lives in pyproject.toml. The extensions
only make pgsurge cheaper to run: ``pgsurge._speedups`` (the PRNG, hashes
and ``permute()``, src/pgsurge/_speedups.c) and ``pgsurge._fastpq`` (the
run engine's per-transaction libpq calls, src/pgsurge/_fastpq.c) and
``pgsurge._fastloop`` (a worker's event loop with the common case of its
clients' state machine, src/pgsurge/_fastloop.c).
pgsurge runs the same without them, in pure Python. So a failed build —
no C compiler, no Python headers — must not fail the install:
:class:`OptionalBuildExt` reports the failure and carries on.
``PGSURGE_NO_EXT=1`` skips the build altogether.
"""

from __future__ import annotations

import os
import sys

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
            sources=["src/pgsurge/_speedups.c"],
            extra_compile_args=args,
            optional=True,
        ),
        # dlopen/dlsym live in libdl on glibc before 2.34
        Extension(
            "pgsurge._fastpq",
            sources=["src/pgsurge/_fastpq.c"],
            depends=["src/pgsurge/_fastpq_api.h"],
            libraries=["dl"] if sys.platform.startswith("linux") else [],
            optional=True,
        ),
        # the worker's event loop in C; takes libpq from _fastpq's capsule
        Extension(
            "pgsurge._fastloop",
            sources=["src/pgsurge/_fastloop.c"],
            depends=["src/pgsurge/_fastpq_api.h"],
            # latency sums and the --rate schedule must round as Python's
            extra_compile_args=args,
            optional=True,
        ),
    ]


setup(ext_modules=_extensions(), cmdclass={"build_ext": OptionalBuildExt})

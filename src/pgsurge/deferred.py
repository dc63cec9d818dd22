"""Standard-library modules a run imports only by name: executed on first use.

Every module a run imports is copied into each of its processes' memory
(the parent and the forked workers share the pages until one of them
writes to them, which reference counting does often). Two are imported,
through psycopg, for next to nothing:

* ``psycopg.errors`` does ``from asyncio import CancelledError``, and
  asyncio's ``__init__`` brings its event loops, streams, subprocesses and
  TLS transports (some 40 modules, about 2.3 MiB of objects);
* ``psycopg_binary.pq`` does ``import ssl`` so that Python's OpenSSL is set
  up before libpq's, and uses nothing of it. The wheel's libpq links its
  own copy of OpenSSL, not the one Python's ``_ssl`` loads, so for libpq
  the import changes nothing, while loading and initialising the system's
  ``libcrypto`` and ``libssl`` dirties some 3 MiB of the parent's memory.

:func:`defer_run_imports` creates such a module from its spec without
executing it and installs a module ``__getattr__`` (PEP 562) that executes
it into that same module object on the first access to a name it does not
have yet (``asyncio.run``, ``ssl.SSLContext``, ``from asyncio import
Queue``): from then on it is the module a plain import gives. For asyncio,
``asyncio.exceptions`` (which imports nothing) is imported into the
package first and its ``CancelledError`` put in place; the package's
``__init__`` later finds that submodule imported, so ``CancelledError`` is
the same class everywhere. ``pgconn`` calls it before importing psycopg's
parts; with ``PGSURGE_PSYCOPG=full`` (psycopg imported whole) it is not
called, nor when the module is already imported.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
from types import ModuleType

__all__ = ["defer_run_imports"]

# two threads touching a module at once execute its code once
_lock = threading.RLock()


def defer_run_imports() -> None:
    """Defer ``asyncio`` (all but ``CancelledError``) and ``ssl`` (see the
    module's docstring)."""
    asyncio = _defer("asyncio")
    if asyncio is not None:
        try:
            exceptions = importlib.import_module("asyncio.exceptions")
            asyncio.CancelledError = exceptions.CancelledError  # type: ignore[attr-defined]
        except Exception:
            # another layout of the package: import it whole, as usual
            _complete(asyncio)
    _defer("ssl")


def _defer(name: str) -> ModuleType | None:
    """Module ``name``, created and registered but not executed (None when
    it is imported already or cannot be found)."""
    if name in sys.modules:
        return None
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        return None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module

    def complete_on_access(attr: str) -> object:
        _complete(module)
        return getattr(module, attr)

    module.__getattr__ = complete_on_access  # type: ignore[method-assign]
    return module


def _complete(module: ModuleType) -> None:
    """Execute the module's code into it (once)."""
    with _lock:
        if "__getattr__" not in vars(module) and "_deferred_done" in vars(module):
            return  # completed by another thread meanwhile
        vars(module).pop("__getattr__", None)
        module._deferred_done = True  # type: ignore[attr-defined]
        spec = module.__spec__
        assert spec is not None and spec.loader is not None
        try:
            spec.loader.exec_module(module)
        except BaseException:
            # what a failed import leaves: no module under that name
            if sys.modules.get(spec.name) is module:
                del sys.modules[spec.name]
            raise

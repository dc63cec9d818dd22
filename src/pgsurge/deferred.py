"""Standard-library modules psycopg's parts import only by name: not executed.

Every module a run imports is copied into each of its processes' memory
(the parent and the forked workers share the pages until one of them
writes to them, which reference counting does often). Two are imported,
through psycopg, for next to nothing:

* ``psycopg.errors`` does ``from asyncio import CancelledError``, and
  asyncio's ``__init__`` brings its event loops, streams, subprocesses and
  TLS transports (some 40 modules, about 2.3 MiB of objects);
  ``psycopg._conninfo_attempts_async`` does ``import asyncio`` for its
  async connection attempts, which a run never makes;
* ``psycopg_binary.pq`` does ``import ssl`` so that Python's OpenSSL is set
  up before libpq's, and uses nothing of it. The wheel's libpq links its
  own copy of OpenSSL, not the one Python's ``_ssl`` loads, so for libpq
  the import changes nothing, while loading and initialising the system's
  ``libcrypto`` and ``libssl`` dirties some 3 MiB of the parent's memory;
* ``psycopg.pq.misc`` does ``import ctypes.util`` for the function that
  finds libpq for psycopg's pure-Python implementation (not the binary
  one a run uses), and ``ctypes.util`` imports ``subprocess``,
  ``shutil`` (with ``bz2`` and ``lzma``) and ``tempfile`` (with
  ``random``): some 25 million instructions of every start-up. The
  ``ctypes`` package itself (its classes and ``_ctypes``, some 200 KiB in
  each process of a run) is not needed either: pgsurge's own two calls
  into libc (``engine.pool``) are in its C extension;
* ``psycopg._encodings`` does ``import string`` for three of its
  constants (``ascii_lowercase``, ``ascii_uppercase``, ``digits``), and
  ``string`` makes its ``Template`` and ``Formatter`` classes (a regex
  among them: some 30 KiB in each process of a run);
* ``psycopg.pq`` and ``psycopg.pq.misc`` do ``import logging`` and keep
  ``logging.getLogger(...)``, which only that libpq finder uses (on an
  error), and ``misc`` does ``from pathlib import Path`` for the same
  finder: ``logging`` brings ``traceback``, ``string`` and ``textwrap``,
  ``pathlib`` brings ``urllib.parse``, ``ipaddress``, ``fnmatch`` and
  ``ntpath`` (together some 1 MiB in each process of a run).

:func:`deferred_run_imports` is a context manager: while its block runs
(``pgconn`` imports psycopg's parts in it) ``asyncio``, ``ssl``,
``ctypes``, ``ctypes.util`` (also the stand-in ``ctypes``' attribute
``util``), ``logging``, ``pathlib`` and ``string`` are stand-ins, modules
created from their specs but not executed, holding only
``asyncio.CancelledError`` (from ``asyncio.exceptions``, which imports
nothing), ``logging.getLogger``, ``pathlib.Path`` and ``string``'s three
constants. The last two are
shims that do their work with the real module on first use (a
:class:`DeferredLogger` forwards everything to ``logging.getLogger(name)``
of the real ``logging``; ``Path(...)`` returns the real
``pathlib.Path(...)``): psycopg's modules keep a shim where they would
have kept the logger or the class. When the block ends the stand-ins
leave ``sys.modules``: a later ``import asyncio``, ``import
asyncio.subprocess``, ``import ssl``, ``import ctypes``, ``import
logging`` is Python's own import from the start, with its module locks
(two threads importing at once), its submodule order and ``reload``. The
stand-ins the psycopg modules keep hand any name asked of them over from
the real module (imported then). ``asyncio.exceptions`` is set aside and
handed back when the real package imports it, so ``CancelledError`` is
one class everywhere.

Why not complete the stand-in in place on first use (a PEP 562 module
``__getattr__``)? Because the import system takes a package found in
``sys.modules`` for imported: ``import asyncio.subprocess`` (or
``import asyncio; import asyncio.events``, as fsspec does) then executes
the submodule before the package, whose circular imports fail
("partially initialized module"); and a second thread reading a name
while the first executes the module found neither the name nor the hook.
``PGSURGE_PSYCOPG=full`` (psycopg imported whole) uses none of this, nor
does a process that imported the module already.

While the block runs, ``typing``'s forward references are compiled by
pgsurge's C extension rather than the builtin ``compile``, whose first
call makes all of the ``ast`` module's node types
(:func:`_forward_refs_compiled_natively`).
"""

from __future__ import annotations

import _thread
import builtins
import contextlib
import importlib
import importlib.util
import sys
import typing
from collections.abc import Iterator
from importlib.machinery import ModuleSpec
from types import BuiltinFunctionType, FunctionType, ModuleType
from typing import TYPE_CHECKING, Any, cast

from pgsurge._native import compile_source

if TYPE_CHECKING:
    from importlib.abc import Loader

__all__ = ["DeferredLogger", "deferred_run_imports", "in_main_thread", "standing_in"]

#: guards sys.modules' stand-in entries and _kept (no import runs under it)
_lock = _thread.allocate_lock()
#: submodules of a released stand-in, handed back to the real package
_kept: dict[str, ModuleType] = {}
#: the name marking a stand-in in its ``__dict__`` (read there: reading the
#: attribute would complete the stand-in through its ``__getattr__``)
_STAND_IN = "__pgsurge_stand_in__"


@contextlib.contextmanager
def deferred_run_imports() -> Iterator[None]:
    """``asyncio``, ``ssl``, ``ctypes``, ``ctypes.util``, ``logging``,
    ``pathlib`` and ``string`` as stand-ins while the block runs (see the
    module's docstring)."""
    # ctypes before ctypes.util, whose spec is then found through the
    # stand-in package (else finding it would import the real ctypes)
    names = ("asyncio", "ssl", "ctypes", "ctypes.util", "logging", "pathlib", "string")
    stand_ins = [m for m in map(_stand_in, names) if m is not None]
    for module in stand_ins:
        if module.__name__ == "string":
            vars(module).update(_STRING_CONSTANTS)
        elif module.__name__ == "logging":
            module.getLogger = DeferredLogger  # type: ignore[attr-defined]
        elif module.__name__ == "pathlib":
            module.Path = _path  # type: ignore[attr-defined]
        elif module.__name__ == "asyncio":
            try:
                exceptions = importlib.import_module("asyncio.exceptions")
                module.CancelledError = exceptions.CancelledError  # type: ignore[attr-defined]
            except Exception:
                # another layout of the package: no stand-in, the usual import
                _release(module)
    try:
        with _forward_refs_compiled_natively():
            yield
    finally:
        # submodules first: a package's release keeps its submodules for
        # the real package, and a stand-in must not be kept
        for module in reversed(stand_ins):
            _release(module)


@contextlib.contextmanager
def _forward_refs_compiled_natively() -> Iterator[None]:
    """``typing.ForwardRef`` compiles through ``_native.compile_source``
    while the block runs.

    ``psycopg.pq.misc``'s named tuples (``PGnotify``, ``ConninfoOption``,
    ``PGresAttDesc``) have string annotations (``from __future__ import
    annotations``), and ``typing.NamedTuple`` makes a ``ForwardRef`` of
    each, which calls ``compile(arg, "<string>", "eval")``; the first
    builtin ``compile`` of a process makes all of the ``ast`` module's
    node types, some 200 KiB of every run that nothing else asks for.
    ``compile`` is found in typing's globals before the builtins: a name
    ``compile`` there, for the block, is the C compiler's twin (the same
    code object for a str; anything else goes to the builtin)."""
    namespace = vars(typing)
    if "compile" in namespace:
        yield  # someone else's: left alone
        return
    namespace["compile"] = _compile
    try:
        yield
    finally:
        if namespace.get("compile") is _compile:
            del namespace["compile"]


def _compile(source: Any, filename: Any, mode: str, *args: Any, **kwargs: Any) -> Any:
    """The builtin ``compile`` as typing calls it, a str in mode "eval" (or
    "exec") compiled by ``_native.compile_source``: typing has no
    ``__future__`` flags to inherit, so this is the builtin's code."""
    plain = type(source) is str and type(filename) is str and not (args or kwargs)
    if plain and mode in ("eval", "exec"):
        return compile_source(source, filename, mode)
    return builtins.compile(source, filename, mode, *args, **kwargs)


#: what ``psycopg._encodings`` reads of ``string`` (for a pattern), as the
#: module defines them
_STRING_CONSTANTS = {
    "ascii_lowercase": "abcdefghijklmnopqrstuvwxyz",
    "ascii_uppercase": "ABCDEFGHIJKLMNOPQRSTUVWXYZ",
    "digits": "0123456789",
}


def in_main_thread() -> bool:
    """``threading.current_thread() is threading.main_thread()``, without
    importing ``threading`` when nothing has: a thread started through it
    would have imported it, so until then only the main thread runs Python.

    A run does not import ``threading`` (psycopg's parts did, through
    ``logging``): its module is memory in each process, and the hook it
    registers for a fork rebuilds its locks and thread table in every
    forked worker, writing to some 350 KiB of pages the worker would
    otherwise have kept sharing with the parent.
    """
    threading = sys.modules.get("threading")
    if threading is None:
        return True
    return bool(threading.current_thread() is threading.main_thread())


@contextlib.contextmanager
def standing_in(name: str, **names: object) -> Iterator[None]:
    """Module ``name`` as a stand-in holding ``names`` while the block
    runs (as :func:`deferred_run_imports` makes its own): an import that
    only keeps the module, or reads only ``names``, does not execute it.

    For the modules that psycopg's parts and ``dataclasses`` import for
    next to nothing: ``inspect`` (with ``ast``, ``dis`` and ``tokenize``,
    some 1 MiB in each process of a run), which ``dataclasses`` uses only
    to write a docstring for a class that has none (``records.record``
    writes its own), and ``psycopg._compat``, of which the parts a run
    imports read only ``Self`` (``typing.Self`` there, on Python 3.11+);
    it would import ``typing_extensions`` (which imports ``inspect``) and
    build a dataclass without a docstring.
    """
    module = _stand_in(name)
    if module is not None:
        for attr, value in names.items():
            setattr(module, attr, value)
    try:
        yield
    finally:
        if module is not None:
            _release(module)


class DeferredLogger:
    """``logging.getLogger(name)`` as the stand-in ``logging`` gives it: every
    attribute is the real logger's, ``logging`` imported on first use."""

    __slots__ = ("name",)

    def __init__(self, name: str | None = None) -> None:
        self.name = name

    def __getattr__(self, attr: str) -> object:
        return getattr(_real("logging").getLogger(self.name), attr)

    def __repr__(self) -> str:
        return f"<DeferredLogger {self.name}>"


def _path(*args: Any, **kwargs: Any) -> object:
    """``pathlib.Path(...)`` for the stand-in ``pathlib``: the real class's
    instance, ``pathlib`` imported on first use."""
    path: Any = _real("pathlib").Path
    return path(*args, **kwargs)


def _real(name: str) -> ModuleType:
    """The real module ``name``, its stand-in released first if it is
    still registered (a shim used inside the block)."""
    module = sys.modules.get(name)
    if module is not None and module.__dict__.get(_STAND_IN):
        _release(module)
    return importlib.import_module(name)


#: what a stand-in keeps of its real module once read (see _stand_in)
_KEPT_TYPES = (FunctionType, BuiltinFunctionType, type, ModuleType)


def _stand_in(name: str) -> ModuleType | None:
    """Module ``name``, created from its spec and registered but not
    executed (None when it is imported already or cannot be found)."""
    if name in sys.modules:
        return None
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        return None
    module = importlib.util.module_from_spec(spec)

    package = spec.submodule_search_locations is not None

    def from_real_module(attr: str) -> object:
        if attr == "__path__" and not package:
            # the import system's test for a package (``from pathlib
            # import Path`` asks it): a module has none, real or not
            raise AttributeError(attr)
        # (also inside the block: the stand-in gives way to the module)
        _release(module)
        value = getattr(importlib.import_module(name), attr)
        if isinstance(value, _KEPT_TYPES):
            # kept in the stand-in, whose holders (``dataclasses.copy``)
            # then read it without this call: ``asdict`` looks up
            # ``copy.deepcopy`` for every value it copies, 2.3 times its
            # time through here. A function, class or module is not
            # rebound in its module; a plain value may be, so it is read
            # from the real module each time.
            setattr(module, attr, value)
        return value

    module.__getattr__ = from_real_module  # type: ignore[method-assign]
    module.__dict__[_STAND_IN] = True
    sys.modules[name] = module
    parent, _, child = name.rpartition(".")
    if parent:
        # what the import of a submodule sets (``import ctypes.util`` then
        # reads ``ctypes.util``); the real import sets it again
        setattr(sys.modules[parent], child, module)
    return module


def _release(module: ModuleType) -> None:
    """Take the stand-in ``module`` and its submodules out of
    ``sys.modules`` (the submodules kept for the real package)."""
    name = module.__name__
    with _lock:
        if sys.modules.get(name) is not module:
            return  # released already
        del sys.modules[name]
        prefix = name + "."
        for sub in [n for n in list(sys.modules) if n.startswith(prefix)]:
            submodule = sys.modules.pop(sub)
            if not submodule.__dict__.get(_STAND_IN):
                # (a stand-in submodule is dropped: the real package
                # imports that one anew, executed)
                _kept[sub] = submodule
        if _kept and _HandBack not in sys.meta_path:
            # before the path finder, which would execute them anew
            sys.meta_path.insert(0, _HandBack)


class _HandBack:
    """Meta path finder and loader: the real package's import of a kept
    submodule gets that module object, not executed again."""

    def __init__(self, module: ModuleType, spec: ModuleSpec) -> None:
        self.module = module
        self.spec = spec

    @staticmethod
    def find_spec(
        fullname: str, path: object = None, target: object = None
    ) -> ModuleSpec | None:
        with _lock:
            module = _kept.pop(fullname, None)
        if module is None or module.__spec__ is None:
            return None
        loader = _HandBack(module, module.__spec__)
        return ModuleSpec(fullname, cast("Loader", loader))

    def create_module(self, spec: ModuleSpec) -> ModuleType:
        return self.module

    def exec_module(self, module: ModuleType) -> None:
        # the import set __spec__ to the finder's spec: its own again
        module.__spec__ = self.spec

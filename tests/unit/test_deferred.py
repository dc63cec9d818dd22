"""asyncio and ssl after pgconn's import: Python's own modules (hostile findings).

``pgconn`` imports psycopg's parts with ``asyncio`` and ``ssl`` as
unexecuted stand-ins (``pgsurge.deferred``). They used to stay in
``sys.modules`` and complete themselves on first use; the import system
then took the package for imported, so a submodule imported first
(``from asyncio.subprocess import PIPE`` in a Python workload, ``import
asyncio; import asyncio.events`` as fsspec does) ran before its package
and failed ("partially initialized module"), and a thread reading
``ssl.SSLContext`` while another executed ssl got an AttributeError. Each
case runs in a fresh interpreter (a module import is per process).
"""

from __future__ import annotations

import pytest

from tests.fix_run import python_c

_PROLOGUE = """
import sys
import pgsurge.pgconn
import psycopg.errors
# a run's state: neither module executed
assert not {"asyncio.base_events", "asyncio.events", "_ssl"} & set(sys.modules)
"""


@pytest.mark.parametrize(
    "code",
    [
        "import asyncio.subprocess\nprint(asyncio.subprocess.PIPE == -1)",
        "import asyncio\nimport asyncio.events\n"
        "print(asyncio.run(asyncio.sleep(0, True)))",
        "from asyncio.events import get_event_loop_policy\n"
        "print(get_event_loop_policy() is not None)",
        "import asyncio.base_events as b\nimport asyncio\n"
        "print(asyncio.BaseEventLoop is b.BaseEventLoop)",
        "import _asyncio\nimport asyncio\nprint(asyncio.Future is _asyncio.Future)",
        "from asyncio import events\nprint(callable(events.new_event_loop))",
        "from asyncio import *\nprint(callable(run))",
    ],
    ids=[
        *("subprocess", "then-events", "from-events", "base-events"),
        *("c-accel", "from", "star"),
    ],
)
def test_an_asyncio_submodule_imported_first(code: str) -> None:
    assert python_c(_PROLOGUE + code) == "True\n"


def test_one_cancelled_error_and_reload() -> None:
    code = _PROLOGUE + (
        "import asyncio, importlib, ssl\n"
        "from asyncio import exceptions\n"
        "assert asyncio.CancelledError is exceptions.CancelledError\n"
        "assert psycopg.errors.CancelledError is asyncio.CancelledError\n"
        "assert asyncio.exceptions is sys.modules['asyncio.exceptions']\n"
        "assert exceptions.__spec__.name == 'asyncio.exceptions'\n"
        "assert exceptions.__spec__.origin.endswith('exceptions.py')\n"
        "ssl = importlib.reload(ssl)\n"
        "ctx = ssl.create_default_context()\n"
        "assert isinstance(ctx, ssl.SSLContext)\n"
        # the modules psycopg keeps hand over the real ones' names
        "import psycopg_binary.pq, psycopg._conninfo_attempts_async as a\n"
        "assert psycopg_binary.pq.ssl.SSLContext is ssl.SSLContext\n"
        "assert a.asyncio.get_running_loop is asyncio.get_running_loop\n"
        "import psycopg\n"
        "assert psycopg.AsyncConnection\n"
        "print('ok')\n"
    )
    assert python_c(code) == "ok\n"


def test_a_thread_reading_ssl_while_another_imports_it() -> None:
    # thread A imports ssl and is held inside (at ssl's own `import _ssl`)
    # until the main thread has read ssl.SSLContext: the read must wait
    # for A's import, as with any module. (A is let go after 3 s when the
    # read waits, as it must; the read never fails for being slow.)
    code = _PROLOGUE + (
        "import threading\n"
        "inside, read = threading.Event(), threading.Event()\n"
        "class Gate:\n"
        "    @staticmethod\n"
        "    def find_spec(name, path=None, target=None):\n"
        "        if name == '_ssl' and threading.current_thread().name == 'A':\n"
        "            inside.set()\n"
        "            read.wait(3)\n"
        "        return None\n"
        "sys.meta_path.insert(0, Gate)\n"
        "got = {}\n"
        "def a():\n"
        "    import ssl\n"
        "    got['a'] = ssl.SSLContext\n"
        "t = threading.Thread(target=a, name='A')\n"
        "t.start()\n"
        "assert inside.wait(60)\n"
        "import ssl\n"
        "try:\n"
        "    got['main'] = ssl.SSLContext\n"
        "finally:\n"
        "    read.set()\n"
        "    t.join()\n"
        "print(got['main'] is got['a'] is ssl.SSLContext)\n"
    )
    assert python_c(code) == "True\n"


def test_their_objects_pickled_across_a_fork() -> None:
    # a forked child imports them and sends their exceptions; the parent,
    # which has not imported them, unpickles the same classes
    code = _PROLOGUE + (
        "import multiprocessing\n"
        "def child(conn):\n"
        "    import asyncio, ssl\n"
        "    conn.send([asyncio.CancelledError('x'), ssl.SSLError(1, 'y')])\n"
        "ctx = multiprocessing.get_context('fork')\n"
        "mine, theirs = ctx.Pipe()\n"
        "p = ctx.Process(target=child, args=(theirs,))\n"
        "p.start()\n"
        "got = mine.recv()\n"
        "p.join()\n"
        "import asyncio, ssl\n"
        "assert type(got[0]) is asyncio.CancelledError\n"
        "assert type(got[0]) is psycopg.errors.CancelledError\n"
        "assert type(got[1]) is ssl.SSLError\n"
        "print(p.exitcode)\n"
    )
    assert python_c(code) == "0\n"


def test_ctypes_util_after_the_parts() -> None:
    # psycopg.pq.misc imported ctypes.util as a stand-in: every way of
    # reaching it afterwards gives the real module
    code = (
        "import sys\n"
        "import pgsurge.pgconn\n"
        "import psycopg.pq.misc as misc\n"
        "assert 'ctypes.util' not in sys.modules\n"
        "assert 'subprocess' not in sys.modules\n"
        "import ctypes\n"
        "lib = misc.ctypes.util.find_library('c')\n"  # through the stand-in
        "import ctypes.util\n"
        "assert ctypes.util is sys.modules['ctypes.util']\n"
        "assert callable(ctypes.util.find_library)\n"
        "from ctypes import util\n"
        "assert util.find_library('c') == lib and lib\n"
        "print(type(util).__name__, util is sys.modules['ctypes.util'])\n"
    )
    assert python_c(code) == "module True\n"


def test_ctypes_after_the_parts() -> None:
    # psycopg.pq.misc's ctypes is a stand-in too (pgsurge's own libc calls
    # are in its C extension): ctypes imported afterwards is the real
    # package, whichever way it is reached first
    code = (
        "import sys\n"
        "import pgsurge.pgconn\n"
        "import psycopg.pq.misc as misc\n"
        "assert 'ctypes' not in sys.modules and '_ctypes' not in sys.modules\n"
        "assert misc.ctypes.sizeof(misc.ctypes.c_int) == 4\n"  # via the stand-in
        "import ctypes\n"
        "assert ctypes is sys.modules['ctypes']\n"
        "assert misc.ctypes.CDLL is ctypes.CDLL\n"
        "libc = ctypes.CDLL(None)\n"
        "assert libc.abs(-3) == 3\n"
        "import ctypes.util\n"
        "print(bool(ctypes.util.find_library('c')))\n"
    )
    assert python_c(code) == "True\n"


def test_ctypes_completed_inside_the_block() -> None:
    # a name of the ctypes stand-in read while the parts import: the real
    # package then, and the ctypes.util stand-in is not kept for it
    code = (
        "import sys\n"
        "from pgsurge.deferred import deferred_run_imports\n"
        "with deferred_run_imports():\n"
        "    import ctypes.util\n"
        "    assert ctypes.sizeof(ctypes.c_int) == 4\n"
        "import ctypes.util\n"
        "mod = sys.modules['ctypes.util']\n"
        "assert '__pgsurge_stand_in__' not in mod.__dict__\n"
        "print(bool(ctypes.util.find_library('c')))\n"
    )
    assert python_c(code) == "True\n"


def test_logging_and_pathlib_after_the_parts() -> None:
    # psycopg.pq and psycopg.pq.misc keep a DeferredLogger and a Path shim:
    # they act as the real logger and class, and logging and pathlib
    # imported afterwards are the real modules (psycopg completes with them)
    code = (
        "import io, sys\n"
        "import pgsurge.pgconn\n"
        "import psycopg.pq, psycopg.pq.misc as misc\n"
        "loaded = set(sys.modules)\n"
        "assert not loaded & {'logging', 'pathlib', 'traceback', 'urllib.parse',"
        " 'ipaddress'}, loaded\n"
        "import logging, pathlib\n"
        "assert type(misc.Path('/tmp/x')) is type(pathlib.Path('/tmp/x'))\n"
        "assert misc.Path('/tmp/../tmp').resolve() == pathlib.Path('/tmp').resolve()\n"
        "stream = io.StringIO()\n"
        "handler = logging.StreamHandler(stream)\n"
        "real = logging.getLogger('psycopg.pq')\n"
        "real.addHandler(handler)\n"
        "misc.logger.setLevel(logging.DEBUG)\n"  # through the shim
        "assert real.level == logging.DEBUG\n"
        "misc.logger.debug('seen %s', 1)\n"
        "psycopg.pq.logger.warning('also')\n"
        "assert stream.getvalue() == 'seen 1\\nalso\\n', stream.getvalue()\n"
        "import psycopg\n"
        "assert psycopg.connect and psycopg.pq.version_pretty(170000)\n"
        "print(type(logging.getLogger('psycopg')).__name__)\n"
    )
    assert python_c(code) == "Logger\n"


def test_string_after_the_parts() -> None:
    # psycopg._encodings reads three constants of string (issue 25): the
    # stand-in's are string's, and string imported afterwards is the real
    # module, which the stand-in psycopg keeps hands everything else over to
    code = (
        "import sys\n"
        "import pgsurge.pgconn\n"
        "import psycopg._encodings as enc\n"
        "assert 'string' not in sys.modules\n"
        "import string\n"
        "names = ('ascii_lowercase', 'ascii_uppercase', 'digits')\n"
        "assert all(getattr(enc.string, n) == getattr(string, n) for n in names)\n"
        "assert enc.string.Template is string.Template\n"
        "print(string.Template('$a').substitute(a=1), enc._re_clean.sub('_', 'a-b'))\n"
    )
    assert python_c(code) == "1 a_b\n"


def test_a_module_stand_in_is_no_package() -> None:
    # ``from pathlib import Path`` asks the stand-in for __path__ (the
    # import system's test for a package): answered without the module
    code = (
        "import sys\n"
        "from pgsurge.deferred import deferred_run_imports\n"
        "with deferred_run_imports():\n"
        "    from pathlib import Path\n"
        "    assert 'fnmatch' not in sys.modules\n"
        "    p = Path('/')\n"
        "print(type(p).__name__, 'fnmatch' in sys.modules)\n"
    )
    assert python_c(code) == "PosixPath True\n"


def test_shims_used_inside_the_block() -> None:
    # the logger and Path shims used while the stand-ins are registered:
    # the real modules, not the stand-ins' shims again
    code = (
        "import sys\n"
        "from pgsurge.deferred import deferred_run_imports\n"
        "with deferred_run_imports():\n"
        "    import logging\n"
        "    log = logging.getLogger('x.y')\n"
        "    assert log.name == 'x.y' and log.getEffectiveLevel() == 30\n"
        "    from pathlib import Path\n"
        "    p = Path('/')\n"
        "import logging\n"
        "print(type(p).__name__, type(logging.getLogger('x.y')).__name__)\n"
    )
    assert python_c(code) == "PosixPath Logger\n"


def test_dataclasses_without_inspect() -> None:
    # pgsurge's package imports dataclasses with inspect a stand-in: a
    # dataclass without a docstring (the only use) completes it, and
    # ``import inspect`` is then the real module
    code = (
        "import sys\n"
        "import pgsurge\n"
        "import dataclasses\n"
        "assert not {'inspect', 'ast', 'dis', 'tokenize'} & set(sys.modules)\n"
        "@dataclasses.dataclass\n"
        "class Point:\n"
        "    x: int\n"
        "    y: int = 0\n"
        "import inspect\n"
        "assert dataclasses.inspect.signature is inspect.signature\n"
        "print(Point.__doc__, str(inspect.signature(Point)))\n"
    )
    assert python_c(code) == "Point(x: int, y: int = 0) (x: int, y: int = 0) -> None\n"


def test_a_stand_in_keeps_what_it_handed_over() -> None:
    # dataclasses keeps the stand-in copy as its ``copy``: once read, a
    # function stays in it (``asdict`` reads ``copy.deepcopy`` for every
    # value, 2.3 times its time through the stand-in's __getattr__); a
    # plain value is read from the real module every time (it may be
    # rebound there)
    code = (
        "import pgsurge, dataclasses\n"
        "assert dataclasses.copy.__dict__.get('__pgsurge_stand_in__')\n"
        "assert 'deepcopy' not in vars(dataclasses.copy)\n"
        "@dataclasses.dataclass\n"
        "class P:\n"
        "    x: list\n"
        "print(dataclasses.asdict(P([1, [2]])))\n"
        "import copy\n"
        "assert vars(dataclasses.copy)['deepcopy'] is copy.deepcopy\n"
        "copy._deepcopy_dispatch = {}\n"
        "assert dataclasses.copy._deepcopy_dispatch == {}\n"
        "assert '_deepcopy_dispatch' not in vars(dataclasses.copy)\n"
    )
    assert python_c(code) == "{'x': [1, [2]]}\n"


def test_psycopg_compat_after_the_parts() -> None:
    # the parts read Self from a stand-in psycopg._compat (typing's): the
    # package, completed later, has the real module (typing_extensions'
    # TypeVar with its defaults, the Interpolation dataclass)
    code = (
        "import sys, typing\n"
        "import pgsurge.pgconn\n"
        "import psycopg.pq.abc\n"
        "assert 'psycopg._compat' not in sys.modules\n"
        "assert 'typing_extensions' not in sys.modules\n"
        "assert psycopg.pq.abc.Self is typing.Self\n"
        "import psycopg\n"
        "from psycopg import rows\n"
        "from psycopg._compat import Interpolation, TypeVar\n"
        "import typing_extensions\n"
        "assert TypeVar is typing_extensions.TypeVar\n"
        "assert sys.modules['psycopg._compat'] is psycopg._compat\n"
        "print(rows.dict_row.__name__, Interpolation.__name__)\n"
    )
    assert python_c(code) == "dict_row Interpolation\n"


def test_in_main_thread_with_and_without_threading() -> None:
    # True in the main thread before anything imports threading (a run
    # does not), and threading's answer once it is imported
    code = (
        "import sys\n"
        "from pgsurge.deferred import in_main_thread\n"
        "first = in_main_thread(), 'threading' in sys.modules\n"
        "import threading\n"
        "seen = []\n"
        "t = threading.Thread(target=lambda: seen.append(in_main_thread()))\n"
        "t.start(); t.join()\n"
        "print(first, in_main_thread(), seen)\n"
    )
    assert python_c(code) == "(True, False) True [False]\n"

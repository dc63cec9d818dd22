"""Option values read the way pgbench's C library calls read them.

pgbench parses its option values with ``strtol``, ``atoi``, ``atof`` and
``sscanf("%lu")``, and users' command lines depend on what those accept:
leading blanks, a ``+`` sign, trailing garbage after a number for ``atof``
(``-L 1x`` is 1 ms), ``nan``/``inf``/hex floats, wrap-around of negative
seeds. Python's ``int()``/``float()`` differ on all of these, so this
module reimplements the C semantics (C locale, 64-bit ``long``) in small,
pure functions that ``options`` calls (C number semantics themselves are
in ``pgsurge.cnum``).

pgsurge's own option values (``--percentiles``, ``--json``) have no C
precedent to follow; they are read strictly instead, so that a typo fails
before the run rather than after it.
"""

from __future__ import annotations

import errno
import os
import re
import time

# C's number semantics live in pgsurge.cnum; re-exported here for the
# option parser, which reads most of its values with them
from pgsurge.cnum import (
    C_SPACE,
    DECIMAL_DIGITS,
    INT32_MAX,
    INT32_MIN,
    UINT64_MAX,
    bounded_int,
    skip_c_space,
    strtol,
)
from pgsurge.config import IdleMode
from pgsurge.errors import UsageError


def parse_int_option(value: str, optname: str, lo: int, hi: int) -> int:
    """PostgreSQL's ``option_parse_int``, with its two messages."""
    number, end, overflow = strtol(value)
    if value[end:].lstrip(C_SPACE):
        raise UsageError(f'invalid value "{value}" for option {optname}')
    if overflow or not (INT32_MIN <= number <= INT32_MAX) or not lo <= number <= hi:
        raise UsageError(f"{optname} must be in range {lo}..{hi}")
    return number


#: --waits without a value: the sampling period in ms
DEFAULT_WAITS_MS = 100
#: at most this many --idle-sessions
MAX_IDLE_SESSIONS = 1000


def parse_waits(value: str | None) -> int:
    """``--waits[=MS]``: the sampling period (1 ms .. 60 s)."""
    if value is None:
        return DEFAULT_WAITS_MS
    return parse_int_option(value, "--waits", 1, 60000)


def parse_label(value: str) -> tuple[str, str]:
    """``--label K=V`` → (K, V); K not empty (V may be)."""
    key, eq, text = value.partition("=")
    if not eq or not key.strip():
        raise UsageError(
            f'invalid value "{value}" for option --label',
            detail="Expecting KEY=VALUE.",
        )
    return key.strip(), text


def parse_idle_sessions(value: str) -> tuple[int, IdleMode]:
    """``--idle-sessions N[:idle|xact|snapshot]`` (mode idle by default)."""
    count, sep, mode = value.partition(":")
    n = parse_int_option(count, "--idle-sessions", 1, MAX_IDLE_SESSIONS)
    if not sep:
        return n, IdleMode.IDLE
    try:
        return n, IdleMode(mode)
    except ValueError:
        raise UsageError(
            f'invalid value "{value}" for option --idle-sessions',
            detail="The mode is one of idle, xact, snapshot.",
        ) from None


def parse_monitor_dsn(value: str, option: str = "--monitor") -> str:
    """``--monitor DSN`` (``--pooler-admin DSN``): a libpq conninfo string
    or URI (checked here, so that a bad one is an option error before
    anything connects)."""
    from pgsurge import pgconn
    from pgsurge.redact import redact_echo

    if not value.strip():
        raise UsageError(f'invalid value "" for option {option}')
    try:
        pgconn.conninfo({"dbname": value})
    except pgconn.PsycopgError as exc:
        # the value is not echoed: it may hold a password
        raise UsageError(
            f"invalid connection string for option {option}: "
            + redact_echo(pgconn.strip_newline(str(exc)), value)
        ) from None
    return value


def parse_weight(option: str) -> tuple[str, int]:
    """``NAME[@W]`` of ``-b``/``-f``: the last ``@`` separates the weight."""
    name, sep, spec = option.rpartition("@")
    if not sep:
        return option, 1
    weight, end, overflow = strtol(spec)
    if overflow or end == 0 or end != len(spec):
        raise UsageError(f"invalid weight specification: @{spec}")
    if not 0 <= weight <= INT32_MAX:
        raise UsageError(
            f"weight specification out of range (0 .. {INT32_MAX}): {weight}"
        )
    return name, weight


def parse_random_seed(value: str | None) -> int | None:
    """``--random-seed``/``PGBENCH_RANDOM_SEED`` → the uint64 seed, None if bad.

    None or ``time``: the current monotonic time in µs (pgbench's
    ``pg_time_now()``); ``rand``: 8 strong random bytes; otherwise an
    unsigned integer as ``sscanf("%lu%c")`` reads it: blanks first, a sign
    (negative numbers wrap modulo 2**64), saturating at 2**64 - 1, and
    nothing at all after it.
    """
    if value is None or value == "time":
        return time.monotonic_ns() // 1000
    if value == "rand":
        return int.from_bytes(os.urandom(8), "little")
    i = skip_c_space(value)
    negative = False
    if i < len(value) and value[i] in "+-":
        negative = value[i] == "-"
        i += 1
    m = DECIMAL_DIGITS.match(value, i)
    assert m is not None
    if m.end() == i or m.end() != len(value):
        return None
    magnitude = bounded_int(m.group())
    if magnitude > UINT64_MAX:
        return UINT64_MAX
    return (-magnitude if negative else magnitude) % (1 << 64)


#: ``--percentiles`` without a value (the text report's default list)
DEFAULT_PERCENTILES: tuple[float, ...] = (50.0, 90.0, 99.0, 99.9)
MAX_PERCENTILES = 20
#: decimals a percentile may have: its label (``p99.9999``) then shows it
#: exactly, and finer ranks would be below any histogram's resolution anyway
PERCENTILE_DECIMALS = 4
# (the patterns of --percentiles and --dask are compiled by their options)
_PLAIN_NUMBER = r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
_PERCENTILES_OPT = "--percentiles"


#: most workers a ``--dask local:N`` cluster may start on this machine
MAX_LOCAL_DASK_WORKERS = 64


def parse_dask_address(value: str) -> str:
    """``--dask``: ``local:N`` (1 <= N <= 64) or a scheduler address as
    Dask takes it (``tcp://host:8786``, ``host:8786``, ``tls://…``)."""
    text = value.strip()
    if text.startswith("local:"):
        count = text[len("local:") :]
        if not count.isascii() or not count.isdigit():
            raise UsageError(
                f'invalid value "{value}" for option --dask',
                detail='Expecting "local:N" with N a number of workers, or the'
                ' address of a Dask scheduler such as "tcp://host:8786".',
            )
        parse_int_option(count, "--dask", 1, MAX_LOCAL_DASK_WORKERS)
        return f"local:{int(count)}"
    # checked here, before anything touches the target: Dask itself would
    # only fail on it after the setup (vacuum), with a long traceback
    match = re.fullmatch(_DASK_ADDRESS, text)
    port = int(match.group("port")) if match else 0
    if match is None or not 1 <= port <= 65535:
        raise UsageError(
            f'invalid value "{value}" for option --dask: expecting a Dask '
            'scheduler address "[tcp://|tls://]HOST:PORT" or "local:N"'
        )
    return text


#: a scheduler address: [tcp:// or tls://]HOST:PORT, HOST a name, an IPv4
#: address or a bracketed IPv6 address
_DASK_ADDRESS = (
    r"(?:(?:tcp|tls)://)?(?:[A-Za-z0-9._-]+|\[[0-9A-Fa-f:.]+\]):(?P<port>[0-9]{1,5})"
)


def parse_percentiles(value: str | None) -> tuple[float, ...]:
    """``--percentiles[=LIST]`` → the percentiles, ascending, without repeats.

    None (the option without ``=``) gives :data:`DEFAULT_PERCENTILES`.
    Each comma-separated item is a plain decimal number (no sign, exponent,
    ``nan`` or ``inf``; blanks around it are ignored) greater than 0 and at
    most 100, with at most :data:`PERCENTILE_DECIMALS` decimals; at most
    :data:`MAX_PERCENTILES` distinct values.
    """
    if value is None:
        return DEFAULT_PERCENTILES
    # here, not at the top: decimal (with its C module) is otherwise no
    # part of a run, whose every process would hold it
    from decimal import Decimal

    found: set[Decimal] = set()
    for raw in value.split(","):
        item = raw.strip(C_SPACE)
        if not re.fullmatch(_PLAIN_NUMBER, item):
            raise UsageError(
                f'invalid percentile "{item}" for option {_PERCENTILES_OPT}',
                detail="Expecting a comma-separated list of numbers, such as"
                ' "50,90,99,99.9".',
            )
        number = Decimal(item)
        if not 0 < number <= 100:
            raise UsageError(
                f'invalid percentile "{item}" for option {_PERCENTILES_OPT}',
                detail="A percentile must be greater than 0 and at most 100.",
            )
        exponent = number.normalize().as_tuple().exponent
        assert isinstance(exponent, int)  # finite by the pattern above
        if -exponent > PERCENTILE_DECIMALS:
            raise UsageError(
                f'invalid percentile "{item}" for option {_PERCENTILES_OPT}',
                detail=f"A percentile may have at most {PERCENTILE_DECIMALS}"
                " decimal places.",
            )
        found.add(number)
    if len(found) > MAX_PERCENTILES:
        raise UsageError(
            f"at most {MAX_PERCENTILES} percentiles are allowed with"
            f" {_PERCENTILES_OPT}, got {len(found)}"
        )
    return tuple(float(n) for n in sorted(found))


def check_output_path(path: str, optname: str) -> None:
    """Fail now, not after the run, when ``path`` clearly cannot be written.

    ``-`` (stdout) is always fine. Nothing is created: the file is written
    when the run ends. Permission checks use ``os.access``, which may be
    optimistic (e.g. for root); the final write still reports its error.
    """
    if path == "-":
        return
    if not path:
        raise UsageError(
            f'invalid value "" for option {optname}',
            detail='Expecting a file name, or "-" for standard output.',
        )
    if os.path.isdir(path):
        reason = os.strerror(errno.EISDIR)
    elif os.path.exists(path):
        if os.access(path, os.W_OK):
            return
        reason = os.strerror(errno.EACCES)
    else:
        parent = os.path.dirname(path) or "."
        if not os.path.isdir(parent):
            reason = os.strerror(errno.ENOENT)
        elif os.access(parent, os.W_OK | os.X_OK):
            return
        else:
            reason = os.strerror(errno.EACCES)
    raise UsageError(f'cannot write file "{path}" for option {optname}: {reason}')

"""pgbench's pseudo-random numbers, bit for bit: pg_prng and its seeding order.

PostgreSQL's ``pg_prng`` is xoroshiro128** 1.0 (Blackman and Vigna) over two
64-bit words, filled from a 64-bit seed by two splitmix64 steps. pgbench
draws every random value from such states: one per client for the script's
``random*()`` functions, three per thread (script choice, ``--rate``
delays, log sampling), all derived from one base state seeded with
``--random-seed``. Reproducing pgbench's runs needs the same algorithm,
the same conversions (doubles from the top 52 bits, Box-Muller normals,
bitmask rejection for ranges) and the same order of derivation; this
module has all three.

:class:`PgPrng` is the compiled state of the optional C extension
``pgsurge._speedups`` when it is built (a draw costs ~40 ns there instead of
~350 ns), else :class:`PurePgPrng`, the pure-Python reference the extension
is tested against. Both return the same numbers for every call; setting
``PGSURGE_PURE=1`` in the environment forces the pure code (for tests and
comparisons). :data:`speedups` is the loaded extension module, or None.

In the pure code, Python integers are unbounded, so every uint64 result is
masked; the hot methods bind attributes to locals and fold the masks where
the arithmetic allows it. The output ``rotl(s0 * 5, 7) * 9`` is computed as
``s0 * 5760 + top7(s0 * 5) * 9`` modulo 2**64: the rotation's two parts
occupy disjoint bits, so OR is addition, and a product's bits above 64
never reach its low 64 bits. Each big-int operation costs ~20 ns in
CPython, so fewer operations is what makes the generator fast.
"""

from __future__ import annotations

import math
import os
import time
from types import ModuleType
from typing import TYPE_CHECKING

from pgsurge import _native
from pgsurge.records import record

__all__ = [
    "PgPrng",
    "PurePgPrng",
    "SeedPlan",
    "ThreadStreams",
    "derive_streams",
    "parse_seed_option",
    "resolve_seed",
    "speedups",
    "to_int64",
]

#: the interface version of pgsurge._speedups this code expects (the one
#: constant, in pgsurge._native: deferred_errors loads the module too)
SPEEDUPS_API = _native.SPEEDUPS_API


def _load_speedups() -> ModuleType | None:
    """The C extension, unless it is missing, stale or PGSURGE_PURE is set."""
    return _native.load("_speedups", SPEEDUPS_API)


speedups = _load_speedups()

_M64 = 0xFFFF_FFFF_FFFF_FFFF
_SIGN = 1 << 63
_TWO64 = 1 << 64
_GOLDEN = 0x9E37_79B9_7F4A_7C15  # splitmix64 increment
_MIX1 = 0xBF58_476D_1CE4_E5B9
_MIX2 = 0x94D0_49BB_1331_11EB
# Knuth's MMIX LCG constants: pg_prng's replacement for an all-zero state
_ZERO_FIX = (0x5851_F42D_4C95_7F2D, 0x1405_7B7E_F767_814F)
_TWO_M52 = 2.0**-52
_TWO_PI = 2.0 * math.pi

_log = math.log
_sqrt = math.sqrt
_sin = math.sin


def to_int64(u: int) -> int:
    """Reinterpret the low 64 bits of ``u`` as a signed int64 (C's cast)."""
    u &= _M64
    return u - _TWO64 if u & _SIGN else u


def _splitmix64(state: int) -> tuple[int, int]:
    """One splitmix64 step: (new state, output)."""
    state = (state + _GOLDEN) & _M64
    z = ((state ^ (state >> 30)) * _MIX1) & _M64
    z = ((z ^ (z >> 27)) * _MIX2) & _M64
    return state, z ^ (z >> 31)


class PurePgPrng:
    """One pg_prng state: xoroshiro128** with pg_prng's derived draws.

    ``s0``/``s1`` are the two uint64 words. States are cheap, mutable and
    picklable; :meth:`getstate`/:meth:`setstate` save and restore them (a
    client restores its state when it retries a transaction).
    """

    __slots__ = ("s0", "s1")

    s0: int
    s1: int

    def __init__(self, seed: int = 0) -> None:
        self.seed(seed)

    # -- seeding and state -------------------------------------------------

    def seed(self, seed: int) -> None:
        """``pg_prng_seed``: fill the state from a 64-bit seed."""
        st, s0 = _splitmix64(seed & _M64)
        _, s1 = _splitmix64(st)
        if s0 == 0 and s1 == 0:  # a fixed point of the generator
            s0, s1 = _ZERO_FIX
        self.s0 = s0
        self.s1 = s1

    @classmethod
    def from_words(cls, s0: int, s1: int) -> PurePgPrng:
        """A state with these exact words (the all-zero fix applies)."""
        rng = cls.__new__(cls)
        rng.setstate((s0, s1))
        return rng

    def getstate(self) -> tuple[int, int]:
        return (self.s0, self.s1)

    def setstate(self, state: tuple[int, int]) -> None:
        s0, s1 = state[0] & _M64, state[1] & _M64
        if s0 == 0 and s1 == 0:
            s0, s1 = _ZERO_FIX
        self.s0 = s0
        self.s1 = s1

    def copy(self) -> PurePgPrng:
        rng = PurePgPrng.__new__(PurePgPrng)
        rng.s0 = self.s0
        rng.s1 = self.s1
        return rng

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PurePgPrng):
            return NotImplemented
        return self.s0 == other.s0 and self.s1 == other.s1

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return f"PgPrng.from_words({self.s0:#018x}, {self.s1:#018x})"

    def __getstate__(self) -> tuple[int, int]:
        return (self.s0, self.s1)

    def __setstate__(self, state: tuple[int, int]) -> None:
        self.s0, self.s1 = state

    # -- draws ---------------------------------------------------------------

    def uint64(self) -> int:
        """``pg_prng_uint64``: the next raw 64-bit output."""
        s0 = self.s0
        sx = self.s1 ^ s0
        self.s0 = ((s0 << 24) ^ sx ^ (sx << 16) ^ (s0 >> 40)) & _M64
        self.s1 = ((sx << 37) | (sx >> 27)) & _M64
        return (s0 * 5760 + ((s0 * 5 >> 57) & 127) * 9) & _M64

    def int64(self) -> int:
        """``pg_prng_int64``: the next output as a signed int64."""
        v = self.uint64()
        return v - _TWO64 if v & _SIGN else v

    def uint32(self) -> int:
        """``pg_prng_uint32``: the upper 32 bits of the next output."""
        return self.uint64() >> 32

    def bool(self) -> bool:
        """``pg_prng_bool``: the top bit of the next output."""
        return bool(self.uint64() >> 63)

    def uint64_range(self, rmin: int, rmax: int) -> int:
        """``pg_prng_uint64_range``: uniform in ``[rmin, rmax]`` (uint64s).

        Bitmask rejection: draw ``bit_length(range)`` top bits until the
        value fits; an empty range gives ``rmin`` without drawing.
        """
        if rmax <= rmin:
            return rmin
        span = rmax - rmin
        shift = 64 - span.bit_length()
        s0 = self.s0
        s1 = self.s1
        while True:
            sx = s1 ^ s0
            v = ((s0 * 5760 + ((s0 * 5 >> 57) & 127) * 9) & _M64) >> shift
            s0 = ((s0 << 24) ^ sx ^ (sx << 16) ^ (s0 >> 40)) & _M64
            s1 = ((sx << 37) | (sx >> 27)) & _M64
            if v <= span:
                break
        self.s0 = s0
        self.s1 = s1
        return (rmin + v) & _M64

    def int64_range(self, rmin: int, rmax: int) -> int:
        """pgbench's ``getrand``: uniform in ``[rmin, rmax]`` (int64s).

        ``rmin + uint64_range(0, rmax - rmin)``; the caller guarantees that
        ``rmax - rmin`` fits an int64, as pgbench checks before drawing.
        """
        if rmax <= rmin:
            return rmin
        return rmin + self.uint64_range(0, rmax - rmin)

    def double(self) -> float:
        """``pg_prng_double``: uniform in [0, 1) from the top 52 bits."""
        s0 = self.s0
        sx = self.s1 ^ s0
        self.s0 = ((s0 << 24) ^ sx ^ (sx << 16) ^ (s0 >> 40)) & _M64
        self.s1 = ((sx << 37) | (sx >> 27)) & _M64
        return (((s0 * 5760 + ((s0 * 5 >> 57) & 127) * 9) & _M64) >> 12) * _TWO_M52

    def double_normal(self) -> float:
        """``pg_prng_double_normal``: one Box-Muller standard normal.

        Both uniforms are taken as ``1 - double()`` so that they lie in
        (0, 1] and the logarithm is finite; only the sine branch is used.
        """
        u1 = 1.0 - self.double()
        u2 = 1.0 - self.double()
        return _sqrt(-2.0 * _log(u1)) * _sin(_TWO_PI * u2)


if TYPE_CHECKING:
    # one static type for both: the compiled class has the same interface
    PgPrng = PurePgPrng
else:
    PgPrng = PurePgPrng if speedups is None else speedups.PgPrng


# --------------------------------------------------------------------------
# Seeding order (pgbench's main)


@record(frozen=True, slots=True)
class ThreadStreams:
    """The three states of one pgbench thread (pgsurge worker)."""

    choose: PgPrng  # weighted script choice
    throttle: PgPrng  # --rate Poisson delays
    sample: PgPrng  # --sampling-rate draws


@record(frozen=True, slots=True)
class SeedPlan:
    """Every state pgbench derives from ``--random-seed``, in its order."""

    #: the seed as the ``:random_seed`` variable shows it (signed)
    random_seed: int
    #: one state per client, for ``random*()``, indexed by client id
    clients: tuple[PgPrng, ...]
    #: ``:default_seed`` (signed), or None when ``-D default_seed`` is given
    default_seed: int | None
    #: one entry per thread, after capping the thread count at the clients
    threads: tuple[ThreadStreams, ...]


def derive_streams(
    seed: int, nclients: int, nthreads: int, *, draw_default_seed: bool = True
) -> SeedPlan:
    """Derive all states from the base seed exactly as pgbench 18 does.

    pgbench seeds ``base_random_sequence`` with ``pg_prng_seed(seed)`` and
    then seeds each derived state with ``pg_prng_seed(next base uint64)``
    in this order: every client's state (client-id order); one draw for
    ``:default_seed``, skipped when ``-D default_seed=...`` defines it; then
    per thread, in thread order, its choose, throttle and sample states.
    The thread count is first capped at the client count, as pgbench does.
    """
    base = PgPrng(seed)
    nthreads = min(nthreads, nclients)
    clients = tuple(PgPrng(base.uint64()) for _ in range(nclients))
    default_seed = to_int64(base.uint64()) if draw_default_seed else None
    threads = tuple(
        ThreadStreams(
            choose=PgPrng(base.uint64()),
            throttle=PgPrng(base.uint64()),
            sample=PgPrng(base.uint64()),
        )
        for _ in range(nthreads)
    )
    return SeedPlan(
        random_seed=to_int64(seed),
        clients=clients,
        default_seed=default_seed,
        threads=threads,
    )


_SPACES = " \t\n\v\f\r"


def parse_seed_option(text: str) -> int | None:
    """A numeric ``--random-seed`` value as pgbench reads it, or None.

    pgbench uses ``sscanf("%lu%c")``: leading white space, an optional sign
    (a minus negates modulo 2**64), decimal digits, saturation at
    2**64 - 1 on overflow, and nothing at all after the digits.
    """
    s = text.lstrip(_SPACES)
    neg = False
    if s[:1] in ("+", "-"):
        neg = s[0] == "-"
        s = s[1:]
    if not s or not s.isascii() or not s.isdigit():
        return None
    value = int(s)
    if value > _M64:
        return _M64
    return (-value) & _M64 if neg else value


def resolve_seed(text: str | None) -> int:
    """The base seed for a ``--random-seed`` argument (None: the default).

    ``time`` (the default) is the monotonic clock in microseconds, as
    pgbench's ``pg_time_now()``; ``rand`` is 8 bytes from the OS's strong
    random source. Raises ValueError for anything else that is not an
    unsigned integer (the caller words pgbench's message).
    """
    if text is None or text == "time":
        return (time.monotonic_ns() // 1000) & _M64
    if text == "rand":
        return int.from_bytes(os.urandom(8), "little")
    value = parse_seed_option(text)
    if value is None:
        raise ValueError(text)
    return value

"""The function table of pgbench's expression language, and its functions.

:data:`FUNCTIONS` maps every name the evaluator can meet in a
:class:`~pgsurge.script.ast.Call` (operators included, named as the parser
desugars them, see ``ast.Call``) to a :class:`FuncSpec`: its arity, how it
is called and whether it may be folded at compile time. :data:`ARITY` is
the user-facing arity table for the parser's "unexpected number of
arguments" checks, before the implicit ``:default_seed`` argument of
``hash*()`` and ``permute()`` is added.

The implementations reproduce pgbench 18 bit for bit: the random
functions draw from the client's :class:`~pgsurge.prng.PgPrng` exactly as
``getrand``/``getExponentialRand``/``getGaussianRand``/``getZipfianRand``
do; ``hash_murmur2`` is one 64-bit block of MurmurHash64A; ``hash_fnv1a``
is FNV-1a over the value's 8 bytes; ``permute`` is pgbench's 6-round
bijection. The three hashing functions have compiled twins in the
optional extension ``pgsurge._speedups``, used when it is built (see
:mod:`pgsurge.prng`); the ``pure_*`` versions here are the reference. Math
functions follow C's libm on domain and range errors
(``ln(0)`` is -Infinity, ``sqrt(-1)`` is NaN) where Python's ``math``
would raise.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Mapping
from typing import Any

from pgsurge.cnum import INT64_MAX, double_to_int64
from pgsurge.errors import EvalError
from pgsurge.prng import PgPrng, PurePgPrng, speedups
from pgsurge.records import record
from pgsurge.script import values as V
from pgsurge.script.ast import Value, Var

__all__ = [
    "ARITY",
    "DEFAULT_SEED",
    "FUNCTIONS",
    "SEEDED_FUNCTIONS",
    "FuncKind",
    "FuncSpec",
    "hash_fnv1a",
    "hash_murmur2",
    "permute",
    "pure_hash_fnv1a",
    "pure_hash_murmur2",
    "pure_permute",
]

_M64 = (1 << 64) - 1
_SIGN = 1 << 63
_TWO64 = 1 << 64
_INF = math.inf
_NAN = math.nan

MIN_GAUSSIAN_PARAM = 2.0
MIN_ZIPFIAN_PARAM = 1.001
MAX_ZIPFIAN_PARAM = 1000.0

_FNV_PRIME = 0x0000_0100_0000_01B3
_FNV_OFFSET_BASIS = 0xCBF2_9CE4_8422_2325
_MM2_MUL = 0xC6A4_A793_5BD1_E995
_MM2_MUL_TIMES_8 = 0x3525_3C9A_DE8F_4CA8
_MM2_ROT = 47


# --------------------------------------------------------------------------
# Hashing and permutation


def pure_hash_fnv1a(val: int, seed: int) -> int:
    """FNV-1a over the 8 bytes of ``val``, least significant first; the
    offset basis is XORed with the seed."""
    h = _FNV_OFFSET_BASIS ^ (seed & _M64)
    v = val & _M64
    for _ in range(8):
        h = ((h ^ (v & 0xFF)) * _FNV_PRIME) & _M64
        v >>= 8
    return h - _TWO64 if h & _SIGN else h


def pure_hash_murmur2(val: int, seed: int) -> int:
    """MurmurHash64A of one 8-byte block, from ``seed ^ (mul * 8)``."""
    h = (seed & _M64) ^ _MM2_MUL_TIMES_8
    k = ((val & _M64) * _MM2_MUL) & _M64
    k ^= k >> _MM2_ROT
    k = (k * _MM2_MUL) & _M64
    h = ((h ^ k) * _MM2_MUL) & _M64
    h ^= h >> _MM2_ROT
    h = (h * _MM2_MUL) & _M64
    h ^= h >> _MM2_ROT
    return h - _TWO64 if h & _SIGN else h


def pure_permute(val: int, isize: int, seed: int) -> int:
    """pgbench's pseudorandom permutation of ``[0, isize)`` (``isize > 0``).

    A private state seeded with ``seed``; ``val`` reduced modulo the size
    (as unsigned); then 6 rounds, each: on the low part (when ``v`` fits
    the largest power-of-two mask <= size) and on the mirrored high part
    (``size - 1 - v``), a random odd multiply, a random XOR and a 1-bit
    rotation within the mask; then a random offset modulo the size.

    The generator is inlined (``PgPrng.uint64``'s arithmetic on locals):
    a permute draws about 30 numbers, and method calls would double its
    cost.
    """
    if isize < 2:
        return 0
    s0, s1 = PurePgPrng(seed).getstate()
    M = _M64
    size = isize
    v = (val & M) % size
    masklen = size.bit_length() - 1
    mask = (1 << masklen) - 1
    top = masklen - 1
    last = size - 1
    shift = 64 - last.bit_length()  # for the offset draw in [0, size - 1]
    for _ in range(6):
        # four raw draws: multiplier and XOR for each half; only their bits
        # under the mask are used, so the output's mask 2**64 - 1 folds in
        sx = s1 ^ s0
        m1 = ((s0 * 5760 + ((s0 * 5 >> 57) & 127) * 9) & mask) | 1
        s0 = ((s0 << 24) ^ sx ^ (sx << 16) ^ (s0 >> 40)) & M
        s1 = ((sx << 37) | (sx >> 27)) & M
        sx = s1 ^ s0
        r1 = (s0 * 5760 + ((s0 * 5 >> 57) & 127) * 9) & mask
        s0 = ((s0 << 24) ^ sx ^ (sx << 16) ^ (s0 >> 40)) & M
        s1 = ((sx << 37) | (sx >> 27)) & M
        if v <= mask:
            v = ((v * m1) ^ r1) & mask
            v = ((v << 1) & mask) | (v >> top)
        sx = s1 ^ s0
        m2 = ((s0 * 5760 + ((s0 * 5 >> 57) & 127) * 9) & mask) | 1
        s0 = ((s0 << 24) ^ sx ^ (sx << 16) ^ (s0 >> 40)) & M
        s1 = ((sx << 37) | (sx >> 27)) & M
        sx = s1 ^ s0
        r2 = (s0 * 5760 + ((s0 * 5 >> 57) & 127) * 9) & mask
        s0 = ((s0 << 24) ^ sx ^ (sx << 16) ^ (s0 >> 40)) & M
        s1 = ((sx << 37) | (sx >> 27)) & M
        t = last - v
        if t <= mask:
            t = ((t * m2) ^ r2) & mask
            t = ((t << 1) & mask) | (t >> top)
            v = last - t
        # random offset: uint64_range(0, size - 1), bitmask rejection
        while True:
            sx = s1 ^ s0
            r = ((s0 * 5760 + ((s0 * 5 >> 57) & 127) * 9) & M) >> shift
            s0 = ((s0 << 24) ^ sx ^ (sx << 16) ^ (s0 >> 40)) & M
            s1 = ((sx << 37) | (sx >> 27)) & M
            if r <= last:
                break
        v = (v + r) % size
    return v


# The compiled twins (pgsurge._speedups) when built: same results, ~10-100x
# less CPU. ``permute``'s compiled form takes ``isize`` as an int64, which
# is all the evaluator passes.
hash_fnv1a: Callable[[int, int], int] = pure_hash_fnv1a
hash_murmur2: Callable[[int, int], int] = pure_hash_murmur2
permute: Callable[[int, int, int], int] = pure_permute
if speedups is not None:
    hash_fnv1a = speedups.hash_fnv1a
    hash_murmur2 = speedups.hash_murmur2
    permute = speedups.permute


# --------------------------------------------------------------------------
# Random functions (the client's state comes first)


def _range_args(a: Value, b: Value) -> tuple[int, int]:
    """Coerce and check a random function's bounds as pgbench does."""
    lo = V.coerce_to_int(a)
    hi = V.coerce_to_int(b)
    if lo > hi:
        raise EvalError("empty range given to random")
    if hi - lo >= INT64_MAX:  # imax - imin + 1 would overflow
        raise EvalError("random range is too large")
    return lo, hi


def random_uniform(rng: PgPrng, a: Value, b: Value) -> Value:
    if type(a) is int and type(b) is int and a <= b and b - a < INT64_MAX:
        return rng.int64_range(a, b)
    if a is None or b is None:
        return None
    lo, hi = _range_args(a, b)
    return rng.int64_range(lo, hi)


def random_exponential(rng: PgPrng, a: Value, b: Value, p: Value) -> Value:
    if a is None or b is None or p is None:
        return None
    lo, hi = _range_args(a, b)
    param = V.coerce_to_double(p)
    if param <= 0.0:
        raise EvalError(
            "exponential parameter must be greater than zero "
            f"(not {V.fmt_double_f(param)})"
        )
    cut = math.exp(-param)
    uniform = 1.0 - rng.double()
    r = -_c_log(cut + (1.0 - cut) * uniform) / param
    return V.wrap_int64(lo + double_to_int64((hi - lo + 1) * r))


def random_gaussian(rng: PgPrng, a: Value, b: Value, p: Value) -> Value:
    if a is None or b is None or p is None:
        return None
    lo, hi = _range_args(a, b)
    param = V.coerce_to_double(p)
    if param < MIN_GAUSSIAN_PARAM:
        raise EvalError(
            "gaussian parameter must be at least "
            f"{V.fmt_double_f(MIN_GAUSSIAN_PARAM)} (not {V.fmt_double_f(param)})"
        )
    normal = rng.double_normal
    while True:
        stdev = normal()
        if not (stdev < -param or stdev >= param):
            break
    r = (stdev + param) / (param * 2.0)
    return V.wrap_int64(lo + double_to_int64((hi - lo + 1) * r))


def _zipfian(rng: PgPrng, n: int, s: float) -> int:
    """``computeIterativeZipfian``: Devroye's rejection method, p. 550."""
    if n <= 1:
        return 1
    b = math.pow(2.0, s - 1.0)
    e = -1.0 / (s - 1.0)
    s1 = s - 1.0
    nf = float(n)  # C compares the double x with (double) n
    uni = rng.double
    while True:
        u = uni()
        v = uni()
        if u == 0.0:
            continue  # pow(0, e) is +inf: x > n, rejected
        try:
            x = math.floor(math.pow(u, e))
        except OverflowError:
            continue  # +inf again
        t = math.pow(1.0 + 1.0 / x, s1)
        if v * x * (t - 1.0) / (b - 1.0) <= t / b and x <= nf:
            return x


def random_zipfian(rng: PgPrng, a: Value, b: Value, p: Value) -> Value:
    if a is None or b is None or p is None:
        return None
    lo, hi = _range_args(a, b)
    param = V.coerce_to_double(p)
    # "not in range" rather than "out of range": pgbench lets NaN through
    # and then loops forever; pgsurge rejects it with the same message.
    if not MIN_ZIPFIAN_PARAM <= param <= MAX_ZIPFIAN_PARAM:
        raise EvalError(
            "zipfian parameter must be in range [1.001, 1000] "
            f"(not {V.fmt_double_f(param)})"
        )
    return lo - 1 + _zipfian(rng, hi - lo + 1, param)


# --------------------------------------------------------------------------
# Math and casts (NULL arguments never reach these)


def f_abs(v: Value) -> Value:
    if type(v) is int:
        return V.wrap_int64(-v) if v < 0 else v
    if type(v) is float:
        return -v if v < 0.0 else v
    # pgbench reads a boolean's union as a double: true is the smallest
    # subnormal (4.94e-324), false is 0.
    return 5e-324 if v else 0.0


def f_double(v: Value) -> Value:
    return V.coerce_to_double(v)


def f_int(v: Value) -> Value:
    return V.coerce_to_int(v)


def f_sqrt(v: Value) -> Value:
    d = V.coerce_to_double(v)
    return math.sqrt(d) if d >= 0.0 or d != d else _NAN


def _c_log(d: float) -> float:
    """C's ``log``: -Infinity at zero, NaN below, where Python raises."""
    if d > 0.0 or d != d:
        return math.log(d)
    return -_INF if d == 0.0 else _NAN


def f_ln(v: Value) -> Value:
    return _c_log(V.coerce_to_double(v))


def f_exp(v: Value) -> Value:
    d = V.coerce_to_double(v)
    try:
        return math.exp(d)
    except OverflowError:
        return _INF


def _odd_integer(y: float) -> bool:
    return math.isfinite(y) and y == math.floor(y) and math.fmod(y, 2.0) != 0.0


def c_pow(x: float, y: float) -> float:
    """C's ``pow``: infinities and NaN where Python's ``math.pow`` raises."""
    try:
        return math.pow(x, y)
    except OverflowError:
        return -_INF if x < 0.0 and _odd_integer(y) else _INF
    except ValueError:
        if x == 0.0:  # zero to a negative power: a pole
            return math.copysign(_INF, x) if _odd_integer(y) else _INF
        return _NAN


def f_pow(a: Value, b: Value) -> Value:
    return c_pow(V.coerce_to_double(a), V.coerce_to_double(b))


def f_pi() -> Value:
    return math.pi


def _extremum(args: tuple[Value, ...], greatest: bool) -> Value:
    # C's Max(a, b) is "a > b ? a : b" and Min(a, b) "a < b ? a : b"; with
    # NaN the comparison is false and the new argument wins.
    if any(type(a) is float for a in args):
        ext = V.coerce_to_double(args[0])
        for a in args[1:]:
            d = V.coerce_to_double(a)
            if not (ext > d if greatest else ext < d):
                ext = d
        return ext
    iext = V.coerce_to_int(args[0])
    for a in args[1:]:
        i = V.coerce_to_int(a)
        if not (iext > i if greatest else iext < i):
            iext = i
    return iext


def f_greatest(*args: Value) -> Value:
    return _extremum(args, True)


def f_least(*args: Value) -> Value:
    return _extremum(args, False)


def f_hash_murmur2(a: Value, b: Value) -> Value:
    return hash_murmur2(V.coerce_to_int(a), V.coerce_to_int(b))


def f_hash_fnv1a(a: Value, b: Value) -> Value:
    return hash_fnv1a(V.coerce_to_int(a), V.coerce_to_int(b))


def f_permute(a: Value, b: Value, c: Value) -> Value:
    val = V.coerce_to_int(a)
    size = V.coerce_to_int(b)
    seed = V.coerce_to_int(c)
    if size <= 0:
        raise EvalError("permute size parameter must be greater than zero")
    return permute(val, size, seed)


# --------------------------------------------------------------------------
# The table


class FuncKind(enum.Enum):
    #: ``impl(*values)``; deterministic, so constant arguments fold
    PURE = "pure"
    #: ``impl(rng, *values)`` with the client's state; never folded
    RANDOM = "random"
    #: ``debug()``: written by the evaluator (it needs the context)
    DEBUG = "debug"
    #: ``and``/``or``/``case``: arguments evaluated on demand by the evaluator
    LAZY = "lazy"


@record(frozen=True, slots=True)
class FuncSpec:
    """One row of the function table.

    ``nargs`` is the exact argument count the evaluator receives, or -1
    for ``least``/``greatest`` (one or more) and -2 for ``case`` (odd,
    three or more). ``null_in`` is True when the implementation deals with
    NULL arguments itself; otherwise the evaluator returns NULL as soon as
    one argument is NULL (pgbench does so for all but ``is`` and
    ``debug``), after evaluating every argument.
    """

    name: str
    nargs: int
    kind: FuncKind
    impl: Callable[..., Any] | None
    null_in: bool = False


def _spec(
    name: str,
    nargs: int,
    impl: Callable[..., Any] | None,
    kind: FuncKind = FuncKind.PURE,
    null_in: bool = False,
) -> FuncSpec:
    return FuncSpec(name, nargs, kind, impl, null_in)


_PURE, _RANDOM, _LAZY = FuncKind.PURE, FuncKind.RANDOM, FuncKind.LAZY

FUNCTIONS: Mapping[str, FuncSpec] = {
    s.name: s
    for s in (
        # operators (values.py), which deal with NULL themselves
        _spec("+", 2, V.add, null_in=True),
        _spec("-", 2, V.sub, null_in=True),
        _spec("*", 2, V.mul, null_in=True),
        _spec("/", 2, V.div, null_in=True),
        _spec("mod", 2, V.mod, null_in=True),
        _spec("=", 2, V.eq, null_in=True),
        _spec("<>", 2, V.ne, null_in=True),
        _spec("<", 2, V.lt, null_in=True),
        _spec("<=", 2, V.le, null_in=True),
        _spec("&", 2, V.bitand, null_in=True),
        _spec("|", 2, V.bitor, null_in=True),
        _spec("#", 2, V.bitxor, null_in=True),
        _spec("<<", 2, V.lshift, null_in=True),
        _spec(">>", 2, V.rshift, null_in=True),
        _spec("not", 1, V.not_, null_in=True),
        _spec("is", 2, V.is_, null_in=True),
        _spec("and", 2, None, _LAZY),
        _spec("or", 2, None, _LAZY),
        _spec("case", -2, None, _LAZY),
        # functions
        _spec("abs", 1, f_abs),
        _spec("debug", 1, None, FuncKind.DEBUG, null_in=True),
        _spec("double", 1, f_double),
        _spec("exp", 1, f_exp),
        _spec("greatest", -1, f_greatest),
        _spec("hash", 2, f_hash_murmur2),
        _spec("hash_fnv1a", 2, f_hash_fnv1a),
        _spec("hash_murmur2", 2, f_hash_murmur2),
        _spec("int", 1, f_int),
        _spec("least", -1, f_least),
        _spec("ln", 1, f_ln),
        _spec("permute", 3, f_permute),
        _spec("pi", 0, f_pi),
        _spec("pow", 2, f_pow),
        _spec("power", 2, f_pow),
        _spec("random", 2, random_uniform, _RANDOM, null_in=True),
        _spec("random_exponential", 3, random_exponential, _RANDOM, null_in=True),
        _spec("random_gaussian", 3, random_gaussian, _RANDOM, null_in=True),
        _spec("random_zipfian", 3, random_zipfian, _RANDOM, null_in=True),
        _spec("sqrt", 1, f_sqrt),
    )
}

#: Function names as users write them (any case) → (min, max) argument
#: counts; max None means "one or more" (least, greatest). ``hash*`` take
#: an optional seed and ``permute`` an optional seed, both defaulting to
#: ``:default_seed``. pgbench reports "unexpected number of arguments", or
#: "at least one argument expected" for least/greatest.
ARITY: Mapping[str, tuple[int, int | None]] = {
    "abs": (1, 1),
    "debug": (1, 1),
    "double": (1, 1),
    "exp": (1, 1),
    "greatest": (1, None),
    "hash": (1, 2),
    "hash_fnv1a": (1, 2),
    "hash_murmur2": (1, 2),
    "int": (1, 1),
    "least": (1, None),
    "ln": (1, 1),
    "mod": (2, 2),
    "permute": (2, 3),
    "pi": (0, 0),
    "pow": (2, 2),
    "power": (2, 2),
    "random": (2, 2),
    "random_exponential": (3, 3),
    "random_gaussian": (3, 3),
    "random_zipfian": (3, 3),
    "sqrt": (1, 1),
}

#: the functions whose omitted last argument is pgbench's implicit
#: ``:default_seed``, which both parsers (``parser``, the C one of
#: ``fastparse``) add: :data:`DEFAULT_SEED`
SEEDED_FUNCTIONS = frozenset({"hash", "hash_murmur2", "hash_fnv1a", "permute"})
DEFAULT_SEED = Var("default_seed")

"""The optional C extension against its pure-Python twins, and the switch.

``pgsurge._speedups`` must return exactly what the pure code returns: the
same draws from the same seeds (so runs stay bit-exact with pgbench), the
same hashes and permutations, the same state after each call. These tests
compare the two on many seeds and on the argument domain's edges. They
also check how ``pgsurge.prng`` picks an implementation: the extension
when it is built and current, pure Python under ``PGSURGE_PURE=1``.

When a C compiler is available the extension is expected to be built (the
editable install builds it); a missing build then fails here instead of
silently testing the pure code twice.
"""

from __future__ import annotations

import ast
import copy
import hashlib
import importlib
import math
import os
import pickle
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

import pgsurge.prng as prng_mod
from pgsurge.prng import PurePgPrng, derive_streams
from pgsurge.script import functions as F

try:
    from pgsurge import _speedups as C
except ImportError:
    C = None  # type: ignore[assignment]

M64 = (1 << 64) - 1
MIN = -(2**63)
MAX = 2**63 - 1


def _compiler_available() -> bool:
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    return shutil.which(cc) is not None


def test_extension_is_built_where_it_can_be() -> None:
    if C is None:
        if _compiler_available() and not os.environ.get("PGSURGE_NO_EXT"):
            pytest.fail(
                "pgsurge._speedups is not built although a C compiler exists: "
                "run `pip install -e .` (or `python setup.py build_ext --inplace`)"
            )
        pytest.skip("no C compiler: the pure-Python code is all there is")
    assert C.API_VERSION == prng_mod.SPEEDUPS_API


def test_fastpq_is_built_and_current_where_it_can_be() -> None:
    from pgsurge.engine import fastpq

    try:
        from pgsurge import _fastpq
    except ImportError:
        if _compiler_available() and not os.environ.get("PGSURGE_NO_EXT"):
            pytest.fail("pgsurge._fastpq is not built although a C compiler exists")
        pytest.skip("no C compiler: the engine uses psycopg's calls")
    # a stale build (another API) would silently fall back: catch it here
    assert _fastpq.API_VERSION == fastpq.FASTPQ_API
    if sys.platform.startswith("linux") and not os.environ.get("PGSURGE_PURE"):
        assert fastpq.available  # psycopg's libpq found and bound


def test_fastloop_is_built_and_current_where_it_can_be() -> None:
    from pgsurge.engine import fastloop, fastpq

    try:
        from pgsurge import _fastloop
    except ImportError:
        if _compiler_available() and not os.environ.get("PGSURGE_NO_EXT"):
            pytest.fail("pgsurge._fastloop is not built although a C compiler exists")
        pytest.skip("no C compiler: workers use the Python event loop")
    assert _fastloop.API_VERSION == fastloop.FASTLOOP_API
    if fastpq.available and not os.environ.get("PGSURGE_PURE"):
        assert fastloop.available


_ROOT = Path(__file__).resolve().parents[2]


def _hashed_extensions() -> dict[str, list[str]]:
    """setup.py's extensions built with a SOURCE_HASH: name -> the files
    it digests (sources, then depends), read from setup.py's text."""
    tree = ast.parse((_ROOT / "setup.py").read_text())
    out: dict[str, list[str]] = {}
    for node in ast.walk(tree):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "_hashed"
        ):
            continue
        kw = {
            k.arg: ast.literal_eval(k.value)
            for k in node.keywords
            if k.arg in ("name", "sources", "depends")
        }
        out[kw["name"]] = [*kw["sources"], *kw.get("depends", [])]
    return out


def _source_hash(paths: list[str]) -> str:
    """setup.py's source_hash."""
    h = hashlib.sha256()
    for path in paths:
        h.update(path.encode() + b"\0")
        h.update((_ROOT / path).read_bytes())
    return h.hexdigest()[:16]


def test_built_extensions_are_of_the_current_sources() -> None:
    # every source and header of an extension counts: an edit to any of
    # them without a rebuild leaves a stale in-place build behind, which
    # the API check alone does not see
    if not (_ROOT / "setup.py").exists():
        pytest.skip("not a source checkout")
    hashed = _hashed_extensions()
    assert {"pgsurge._fastpq", "pgsurge._fastloop"} <= set(hashed)
    for name, files in hashed.items():
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue  # not built: the tests above say whether it should be
        assert _source_hash(files) == module.SOURCE_HASH, (
            f"{name} was built from other sources than {files}: rebuild with "
            "`python setup.py build_ext --inplace`"
        )


def test_fastloop_imports_on_its_own() -> None:
    # in a fresh interpreter, before anything imported pgsurge._fastpq
    # (whose capsule it takes)
    pytest.importorskip("pgsurge._fastloop")
    code = "import pgsurge._fastloop"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


needs_c = pytest.mark.skipif(C is None, reason="pgsurge._speedups not built")

SEEDS = [
    *range(64),
    2**31 - 1,
    2**32,
    2**63 - 1,
    2**63,
    M64,
    0xDEADBEEF,
    0x9E3779B97F4A7C15,
]


def _seeds(n: int) -> list[int]:
    """A spread of 64-bit seeds, drawn from the pure generator."""
    g = PurePgPrng(20240601)
    return SEEDS + [g.uint64() for _ in range(n)]


def _pair(seed: int) -> tuple[PurePgPrng, C.PgPrng]:
    return PurePgPrng(seed), C.PgPrng(seed)


@needs_c
def test_seeding_and_raw_draws_match() -> None:
    for seed in _seeds(200):
        p, c = _pair(seed)
        assert p.getstate() == c.getstate()
        for _ in range(20):
            assert p.uint64() == c.uint64()
            assert p.int64() == c.int64()
            assert p.uint32() == c.uint32()
            assert p.bool() is c.bool()
        assert p.getstate() == c.getstate()


@needs_c
def test_doubles_match() -> None:
    for seed in _seeds(200):
        p, c = _pair(seed)
        for _ in range(10):
            assert p.double() == c.double()
            a, b = p.double_normal(), c.double_normal()
            assert a == b or (math.isnan(a) and math.isnan(b))
        assert p.getstate() == c.getstate()


INT64_RANGES = [
    (1, 100000),
    (1, 1000000),
    (0, 1),
    (-5000, 5000),
    (-3, 3),
    (7, 7),
    (9, 2),
    (0, 2**32),
    (MIN, MAX),
    (MIN, -2),
    (MIN, 0),
    (0, MAX),
    (-1, MAX - 1),
    (1, 2**62 + 1),
]


@needs_c
@pytest.mark.parametrize(("lo", "hi"), INT64_RANGES)
def test_int64_range_matches(lo: int, hi: int) -> None:
    for seed in _seeds(40):
        p, c = _pair(seed)
        for _ in range(25):
            v = p.int64_range(lo, hi)
            assert c.int64_range(lo, hi) == v
            assert lo <= v <= hi or (hi <= lo and v == lo)
        assert p.getstate() == c.getstate()


UINT64_RANGES = [
    (0, 1),
    (5, 104),
    (0, M64),
    (1, M64),
    (2**63, M64),
    (0, 2**63),
    (10, 3),
    (M64, M64),
]


@needs_c
@pytest.mark.parametrize(("lo", "hi"), UINT64_RANGES)
def test_uint64_range_matches(lo: int, hi: int) -> None:
    for seed in _seeds(40):
        p, c = _pair(seed)
        for _ in range(25):
            assert p.uint64_range(lo, hi) == c.uint64_range(lo, hi)
        assert p.getstate() == c.getstate()


@needs_c
def test_random_functions_match() -> None:
    # the evaluator's random functions on either state class
    cases = [
        (F.random_uniform, (1, 100000)),
        (F.random_uniform, (-5000, 5000.4)),
        (F.random_exponential, (1, 100000, 2.5)),
        (F.random_exponential, (MIN // 2 + 1, MAX // 2, 0.01)),
        (F.random_gaussian, (1, 100000, 2.5)),
        (F.random_gaussian, (-10, 10, 20.0)),
        (F.random_zipfian, (1, 100000, 1.07)),
        (F.random_zipfian, (1, 10, 3.5)),
    ]
    for seed in _seeds(20):
        for fn, args in cases:
            p, c = _pair(seed)
            got = [fn(p, *args) for _ in range(10)]  # type: ignore[operator]
            assert [fn(c, *args) for _ in range(10)] == got  # type: ignore[operator]
            assert p.getstate() == c.getstate()


HASH_VALUES = [0, 1, -1, 10, 5432, MIN, MAX, 2**32, -(2**32), 123456789]


@needs_c
def test_hashes_match() -> None:
    g = PurePgPrng(5)
    values = HASH_VALUES + [g.int64() for _ in range(300)]
    seeds = HASH_VALUES[:7] + [g.int64() for _ in range(5)]
    for v in values:
        for s in seeds:
            assert C.hash_murmur2(v, s) == F.pure_hash_murmur2(v, s)
            assert C.hash_fnv1a(v, s) == F.pure_hash_fnv1a(v, s)


@needs_c
def test_permute_matches() -> None:
    g = PurePgPrng(6)
    sizes = [1, 2, 3, 7, 8, 9, 100, 1000, 1000000, 2**31, 2**62, MAX - 1, MAX]
    sizes += [g.int64_range(1, MAX) for _ in range(20)]
    values = [0, 1, -1, MIN, MAX, 12, 99] + [g.int64() for _ in range(10)]
    for size in sizes:
        for seed in (0, 1, -1, 42, MIN, MAX, g.int64()):
            for v in values:
                assert C.permute(v, size, seed) == F.pure_permute(v, size, seed)
    for size in (0, -1, MIN):
        assert C.permute(5, size, 3) == F.pure_permute(5, size, 3) == 0


@needs_c
def test_permute_pgbench_vectors_compiled() -> None:
    # pgbench 18.6 (also in test_functions.py, through the selected impl)
    assert C.permute(5, 100, 3) == 21
    assert C.permute(0, 1000000, 12345) == 466056
    assert C.hash_murmur2(10, 5432) == -5817877081768721676
    assert C.hash_fnv1a(10, 5432) == -7793829335365542153


# --------------------------------------------------------------------------
# The compiled state as an object


@needs_c
def test_state_object_behaviour() -> None:
    r = C.PgPrng(3)
    assert r == C.PgPrng(3) and r != C.PgPrng(4)
    assert (r == PurePgPrng(3)) is False  # different classes never compare equal
    with pytest.raises(TypeError):
        hash(r)
    assert repr(r) == repr(PurePgPrng(3))
    assert (r.s0, r.s1) == r.getstate() == PurePgPrng(3).getstate()
    twin = r.copy()
    assert twin == r and twin is not r
    assert copy.copy(r) == r
    clone = pickle.loads(pickle.dumps(r))
    assert type(clone) is C.PgPrng and clone == r
    assert clone.uint64() == r.uint64()
    r.seed(-1)  # seeds are taken modulo 2**64, as in the pure class
    assert r == C.PgPrng(M64) and r.getstate() == PurePgPrng(-1).getstate()
    r.setstate((0, 0))
    assert r.getstate() == PurePgPrng.from_words(0, 0).getstate()
    r.setstate((-1, 2**64 + 5))
    assert r.getstate() == (M64, 5)
    r.s0 = 7
    assert r.getstate() == (7, 5)
    assert C.PgPrng.from_words(1, 2).uint64() == 5760
    assert C.PgPrng().getstate() == PurePgPrng().getstate()


@needs_c
def test_state_object_errors() -> None:
    r = C.PgPrng(1)
    before = r.getstate()
    with pytest.raises(TypeError):
        C.PgPrng("1")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        r.int64_range(1)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        r.int64_range(1.0, 2)  # type: ignore[arg-type]
    with pytest.raises(OverflowError):
        r.int64_range(0, 2**63)
    with pytest.raises(OverflowError):
        r.uint64_range(-1, 5)
    with pytest.raises(OverflowError):
        C.permute(1, 2**63, 0)
    assert r.getstate() == before


# --------------------------------------------------------------------------
# Choosing the implementation


def _probe(env_pure: str | None) -> list[str]:
    env = dict(os.environ)
    env.pop("PGSURGE_PURE", None)
    if env_pure is not None:
        env["PGSURGE_PURE"] = env_pure
    code = (
        "import pgsurge.prng as p, pgsurge.script.functions as f;"
        "print(p.PgPrng.__module__, p.speedups is None,"
        " f.permute is f.pure_permute, p.derive_streams(42, 1, 1)"
        ".clients[0].int64_range(1, 100000))"
    )
    return subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()


def test_pgsurge_pure_forces_python() -> None:
    # pgbench 18.6 draws 83532 first for --random-seed=42 (test_prng.py)
    assert _probe("1") == ["pgsurge.prng", "True", "True", "83532"]


@needs_c
def test_compiled_is_the_default() -> None:
    assert _probe(None) == ["pgsurge._speedups", "False", "False", "83532"]
    assert _probe("0") == _probe(None)


@needs_c
def test_stale_build_is_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PGSURGE_PURE", raising=False)
    assert prng_mod._load_speedups() is C
    monkeypatch.setattr(prng_mod, "SPEEDUPS_API", prng_mod.SPEEDUPS_API + 1)
    assert prng_mod._load_speedups() is None


def test_derived_streams_match_the_pure_derivation() -> None:
    plan = derive_streams(1234, 3, 2)
    base = PurePgPrng(1234)
    for rng in plan.clients:
        assert rng.getstate() == PurePgPrng(base.uint64()).getstate()


# --------------------------------------------------------------------------
# Evaluator shortcuts: random(k0, k * :var) computes the product inline


def _eval_random(var: object, k: int, lo: int, seed: int = 4) -> tuple[object, object]:
    """(result or error message, state after) of ``random(lo, k * :v)``."""
    from pgsurge.errors import EvalError
    from pgsurge.prng import PgPrng
    from pgsurge.script.ast import Call, Const, Var
    from pgsurge.script.evaluate import EvalContext, compile_expr

    variables = {} if var is None else {"v": var}
    ctx = EvalContext(variables, PgPrng(seed))  # type: ignore[arg-type]
    fn = compile_expr(Call("random", (Const(lo), Call("*", (Const(k), Var("v"))))))
    try:
        out: object = fn(ctx)
    except EvalError as e:
        out = e.message
    return out, ctx.rng.getstate()


def _reference_random(
    var: object, k: int, lo: int, seed: int = 4
) -> tuple[object, object]:
    """The same through the unspecialized functions (values.mul, random)."""
    from pgsurge.errors import EvalError
    from pgsurge.prng import PgPrng
    from pgsurge.script import values as V

    rng = PgPrng(seed)
    try:
        if var is None:
            raise EvalError('undefined variable "v"')
        v = V.parse_lazy("v", var) if isinstance(var, str) else var
        out: object = F.random_uniform(rng, lo, V.mul(k, v))  # type: ignore[arg-type]
    except EvalError as e:
        out = e.message
    return out, rng.getstate()


@pytest.mark.parametrize(
    ("var", "k", "lo"),
    [
        (10, 100000, 1),
        (1, 1, 1),
        (10, 10, 1),
        ("10", 100000, 1),  # a -D string, typed when read
        (" 7", 3, 1),
        (2.5, 4, 1),  # a double product
        (True, 5, 1),  # cannot coerce boolean to int
        (None, 2, 1),  # undefined variable
        ("x", 2, 1),  # malformed value
        (2**62, 4, 1),  # bigint mul out of range
        (-(2**62), 2, 0),  # INT64_MIN: empty range
        (0, 7, 1),  # empty range
        (2**62 - 1, 2, -1),  # range too large
        (2**62 - 1, 2, 0),  # the largest range allowed
        (-3, -2, 1),
    ],
)
def test_random_scaled_shortcut_matches_reference(var: object, k: int, lo: int) -> None:
    assert _eval_random(var, k, lo) == _reference_random(var, k, lo)


@pytest.mark.skipif(C is None, reason="pgsurge._speedups is not built")
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's calls")
def test_process_calls_of_the_pool() -> None:
    # engine.pool's two libc calls, made in a child so that its parent-death
    # signal and heap are its own: the signal is set as asked (read back
    # with prctl's getter through ctypes, in the test only), the trim runs
    code = (
        "import ctypes, signal\n"
        "from pgsurge import _speedups as C\n"
        "assert C.die_with_parent(signal.SIGUSR1) is True\n"
        "got = ctypes.c_int(0)\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "assert libc.prctl(2, ctypes.byref(got), 0, 0, 0) == 0\n"  # PR_GET_PDEATHSIG
        "print(got.value == signal.SIGUSR1, C.trim_heap())\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert out.stdout == "True True\n"

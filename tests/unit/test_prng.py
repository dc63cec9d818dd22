"""pg_prng reproduction: reference algorithm, pgbench-observed vectors, seeding.

The numbers marked "pgbench 18.6" were printed by the reference binary
(``debug()`` in a script, ``-n -t N --random-seed=S``); the server tests
(tests/server/test_eval_diff.py) re-derive such values on every run.

The generator tests run on both implementations: the pure-Python
``PurePgPrng`` and, when it is built, the compiled ``pgsurge._speedups``
one (tests/unit/test_speedups.py compares the two directly).
"""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from pgsurge.prng import (
    PgPrng,
    PurePgPrng,
    derive_streams,
    parse_seed_option,
    resolve_seed,
    to_int64,
)

try:
    from pgsurge._speedups import PgPrng as CPgPrng
except ImportError:  # not built: tests/unit/test_speedups.py says whether it must be
    CPgPrng = None

M64 = (1 << 64) - 1

IMPLS = [
    pytest.param(PurePgPrng, id="pure"),
    pytest.param(
        CPgPrng,
        id="compiled",
        marks=pytest.mark.skipif(CPgPrng is None, reason="_speedups not built"),
    ),
]


@pytest.fixture(params=IMPLS)
def Prng(request: pytest.FixtureRequest) -> Any:
    return request.param


# A plain, unoptimized transcription of xoroshiro128** and splitmix64, to
# check the folded arithmetic of the fast methods against.
def _rotl(x: int, k: int) -> int:
    return ((x << k) | (x >> (64 - k))) & M64


def _ref_next(state: list[int]) -> int:
    s0, s1 = state
    result = (_rotl((s0 * 5) & M64, 7) * 9) & M64
    s1 ^= s0
    state[0] = _rotl(s0, 24) ^ s1 ^ ((s1 << 16) & M64)
    state[1] = _rotl(s1, 37)
    return result


def _ref_seed(seed: int) -> list[int]:
    out = []
    x = seed
    for _ in range(2):
        x = (x + 0x9E3779B97F4A7C15) & M64
        z = x
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
        out.append(z ^ (z >> 31))
    return out


def test_splitmix64_seeding_known_vector(Prng: Any) -> None:
    # splitmix64's published first outputs for seed 0
    assert Prng(0).getstate() == (0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4)


@pytest.mark.parametrize("seed", [0, 1, 42, 2**63, M64, 0xDEADBEEF])
def test_uint64_matches_reference(Prng: Any, seed: int) -> None:
    ref = _ref_seed(seed)
    rng = Prng(seed)
    assert list(rng.getstate()) == ref
    for _ in range(1000):
        assert rng.uint64() == _ref_next(ref)


def test_first_output_from_small_state(Prng: Any) -> None:
    # rotl(1 * 5, 7) * 9 = 5760
    assert Prng.from_words(1, 2).uint64() == 5760


def test_all_zero_state_is_replaced(Prng: Any) -> None:
    rng = Prng.from_words(0, 0)
    assert rng.getstate() == (0x5851F42D4C957F2D, 0x14057B7EF767814F)
    assert rng.uint64() != 0


@pytest.mark.parametrize(
    ("rmin", "rmax"),
    [(0, 1), (0, 2), (5, 104), (0, 2**32), (1, 2**63 - 1), (0, M64), (3, 2**40 + 7)],
)
def test_uint64_range_is_bitmask_rejection(Prng: Any, rmin: int, rmax: int) -> None:
    rng = Prng(99)
    ref = list(rng.getstate())
    span = rmax - rmin
    shift = 63 - (span.bit_length() - 1)
    for _ in range(300):
        while True:
            v = _ref_next(ref) >> shift
            if v <= span:
                break
        assert rng.uint64_range(rmin, rmax) == rmin + v


def test_empty_range_does_not_draw(Prng: Any) -> None:
    rng = Prng(7)
    before = rng.getstate()
    assert rng.uint64_range(10, 10) == 10
    assert rng.uint64_range(10, 3) == 10
    assert rng.int64_range(-4, -4) == -4
    assert rng.getstate() == before


def test_int64_range_bounds_and_negative_values(Prng: Any) -> None:
    rng = Prng(3)
    seen = {rng.int64_range(-3, 3) for _ in range(500)}
    assert seen == set(range(-3, 4))
    lo = -(2**63)
    for _ in range(100):
        assert lo <= rng.int64_range(lo, -2) <= -2


def test_double_uses_top_52_bits(Prng: Any) -> None:
    rng = Prng(11)
    ref = list(rng.getstate())
    for _ in range(500):
        d = rng.double()
        assert d == (_ref_next(ref) >> 12) * 2.0**-52
        assert 0.0 <= d < 1.0


def test_derived_draws(Prng: Any) -> None:
    rng = Prng(5)
    ref = list(rng.getstate())
    assert rng.uint32() == _ref_next(ref) >> 32
    assert rng.int64() == to_int64(_ref_next(ref))
    assert rng.bool() == bool(_ref_next(ref) >> 63)


def test_double_normal_is_box_muller(Prng: Any) -> None:
    import math

    a, b = Prng(8), Prng(8)
    for _ in range(200):
        u1 = 1.0 - b.double()
        u2 = 1.0 - b.double()
        expected = math.sqrt(-2.0 * math.log(u1)) * math.sin(2.0 * math.pi * u2)
        assert a.double_normal() == expected


def test_state_save_restore_copy_and_pickle(Prng: Any) -> None:
    rng = Prng(1)
    rng.uint64()
    saved = rng.getstate()
    first = [rng.uint64() for _ in range(5)]
    rng.setstate(saved)
    assert [rng.uint64() for _ in range(5)] == first
    twin = rng.copy()
    assert twin == rng and twin is not rng
    assert twin.uint64() == rng.uint64()
    clone = pickle.loads(pickle.dumps(rng))
    assert clone == rng
    assert clone.uint64() == rng.uint64()


# --------------------------------------------------------------------------
# pgbench-observed values


def test_pgbench_seed_42_first_client() -> None:
    plan = derive_streams(42, 1, 1)
    # pgbench 18.6: random(1, 100000) and :default_seed for --random-seed=42
    assert plan.clients[0].int64_range(1, 100000) == 83532
    assert plan.default_seed == 4306334408478191133
    assert plan.random_seed == 42


def test_pgbench_two_clients_two_threads() -> None:
    # pgbench 18.6, --random-seed=1234 -c 2 -j 2, scripts weighted 1 and 3,
    # each printing random(0, 99999999): (script, value) per transaction
    observed = {
        0: [(0, 88539993), (1, 42543273), (0, 72509965), (1, 65559093), (1, 57162882)],
        1: [(1, 86597487), (1, 96976451), (1, 59983051), (1, 80118875), (1, 53909458)],
    }
    plan = derive_streams(1234, 2, 2)
    for client, seq in observed.items():
        rng = plan.clients[client]
        choose = plan.threads[client].choose
        for script, value in seq:
            assert (0 if choose.int64_range(0, 3) < 1 else 1) == script
            assert rng.int64_range(0, 99999999) == value


def test_derivation_order() -> None:
    base = PgPrng(77)
    draws = [base.uint64() for _ in range(3 + 1 + 2 * 3)]
    plan = derive_streams(77, 3, 2)
    assert [c.getstate() for c in plan.clients] == [
        PgPrng(d).getstate() for d in draws[:3]
    ]
    assert plan.default_seed == to_int64(draws[3])
    streams = [(t.choose, t.throttle, t.sample) for t in plan.threads]
    assert [s.getstate() for t in streams for s in t] == [
        PgPrng(d).getstate() for d in draws[4:]
    ]


def test_no_default_seed_draw_shifts_thread_states() -> None:
    with_draw = derive_streams(77, 2, 1)
    without = derive_streams(77, 2, 1, draw_default_seed=False)
    assert without.default_seed is None
    assert without.clients == with_draw.clients
    assert without.threads[0].choose == PgPrng(with_draw.default_seed or 0)


def test_threads_capped_at_clients() -> None:
    plan = derive_streams(1, 2, 8)
    assert len(plan.clients) == 2
    assert len(plan.threads) == 2


def test_random_seed_is_signed() -> None:
    assert derive_streams(M64, 1, 1).random_seed == -1
    assert to_int64(2**63) == -(2**63)
    assert to_int64(2**63 - 1) == 2**63 - 1


# --------------------------------------------------------------------------
# --random-seed values (sscanf "%lu%c", checked against pgbench 18.6)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("42", 42),
        (" 42", 42),
        ("+5", 5),
        ("-0", 0),
        ("-1", M64),
        ("18446744073709551615", M64),
        ("18446744073709551616", M64),
        ("99999999999999999999999", M64),
        ("-18446744073709551615", 1),
        ("42 ", None),
        ("0x10", None),
        ("", None),
        ("abc", None),
        ("+", None),
        ("4２", None),
    ],
)
def test_parse_seed_option(text: str, value: int | None) -> None:
    assert parse_seed_option(text) == value


def test_resolve_seed() -> None:
    assert resolve_seed("12") == 12
    assert 0 <= resolve_seed(None) <= M64
    assert 0 <= resolve_seed("time") <= M64
    assert 0 <= resolve_seed("rand") <= M64
    with pytest.raises(ValueError):
        resolve_seed("soon")

"""Per-``\\set`` cost of compiled expressions (tpcb-like's four lines and more).

Run: ``.venv/bin/python bench/expr_bench.py [-n LOOPS]``. Prints the
mean µs per evaluation (best of several timeit repeats) of each expression,
compiled once by ``compile_expr``, against a client context seeded like
pgbench's first client for ``--random-seed=42``. Also times the raw PRNG
draws the random functions are built on.

Expressions are parsed with ``pgsurge.script.parser.parse_expr`` when the
parser is available, else built by hand (the same trees the parser gives).
"""

from __future__ import annotations

import argparse
import timeit
from collections.abc import Callable

from pgsurge.prng import derive_streams
from pgsurge.script.ast import Call, Const, Expr, Var
from pgsurge.script.evaluate import EvalContext, compile_expr

TPCB = [
    ("aid", "random(1, 100000 * :scale)"),
    ("bid", "random(1, 1 * :scale)"),
    ("tid", "random(1, 10 * :scale)"),
    ("delta", "random(-5000, 5000)"),
]

OTHERS = [
    "random_exponential(1, 100000 * :scale, 2.5)",
    "random_gaussian(1, 100000 * :scale, 2.5)",
    "random_zipfian(1, 100000 * :scale, 1.07)",
    "hash(:aid)",
    "permute(:aid, 100000 * :scale)",
    ":aid % 10 + 1",
    "case when :aid > 50000 then 1 else 0 end",
]


def _by_hand(text: str) -> Expr:
    """The trees of the expressions above, for when no parser exists yet."""
    scaled = Call("*", (Const(100000), Var("scale")))
    trees: dict[str, Expr] = {
        "random(1, 100000 * :scale)": Call("random", (Const(1), scaled)),
        "random(1, 1 * :scale)": Call(
            "random", (Const(1), Call("*", (Const(1), Var("scale"))))
        ),
        "random(1, 10 * :scale)": Call(
            "random", (Const(1), Call("*", (Const(10), Var("scale"))))
        ),
        "random(-5000, 5000)": Call("random", (Const(-5000), Const(5000))),
        "random_exponential(1, 100000 * :scale, 2.5)": Call(
            "random_exponential", (Const(1), scaled, Const(2.5))
        ),
        "random_gaussian(1, 100000 * :scale, 2.5)": Call(
            "random_gaussian", (Const(1), scaled, Const(2.5))
        ),
        "random_zipfian(1, 100000 * :scale, 1.07)": Call(
            "random_zipfian", (Const(1), scaled, Const(1.07))
        ),
        "hash(:aid)": Call("hash", (Var("aid"), Var("default_seed"))),
        "permute(:aid, 100000 * :scale)": Call(
            "permute", (Var("aid"), scaled, Var("default_seed"))
        ),
        ":aid % 10 + 1": Call("+", (Call("mod", (Var("aid"), Const(10))), Const(1))),
        "case when :aid > 50000 then 1 else 0 end": Call(
            "case",
            (Call("<", (Const(50000), Var("aid"))), Const(1), Const(0)),
        ),
    }
    return trees[text]


def _parser() -> Callable[[str], Expr]:
    try:
        from pgsurge.script.parser import parse_expr  # type: ignore[attr-defined]
    except ImportError:
        return _by_hand
    return parse_expr  # type: ignore[no-any-return]


def _time(fn: Callable[[], object], loops: int) -> float:
    """Best mean µs per call over 5 repeats."""
    return min(timeit.repeat(fn, number=loops, repeat=5)) / loops * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", "--loops", type=int, default=100_000)
    loops = ap.parse_args().loops
    parse = _parser()
    print(f"parser: {'parse_expr' if parse is not _by_hand else 'hand-built trees'}")

    plan = derive_streams(42, 1, 1)
    variables: dict[str, object] = {
        "scale": 1,
        "client_id": 0,
        "default_seed": plan.default_seed,
        "random_seed": 42,
        "aid": 12345,
    }
    ctx = EvalContext(variables, plan.clients[0])  # type: ignore[arg-type]

    total = 0.0
    fns = []
    for var, text in TPCB:
        fn = compile_expr(parse(text))
        fns.append(fn)
        us = _time(lambda fn=fn: fn(ctx), loops)
        total += us
        print(f"  {us:6.3f} µs  \\set {var} {text}")
    print(f"  {total:6.3f} µs  sum of tpcb-like's four \\set lines")

    def four() -> None:
        for fn in fns:
            fn(ctx)

    print(f"  {_time(four, loops):6.3f} µs  the four in one loop")

    for text in OTHERS:
        fn = compile_expr(parse(text))
        print(f"  {_time(lambda fn=fn: fn(ctx), loops):6.3f} µs  {text}")

    rng = plan.clients[0].copy()
    print("raw PRNG:")
    print(f"  {_time(rng.uint64, loops) * 1000:6.0f} ns  uint64()")
    print(f"  {_time(rng.double, loops) * 1000:6.0f} ns  double()")
    print(
        f"  {_time(lambda: rng.int64_range(1, 100000), loops) * 1000:6.0f} ns"
        "  int64_range(1, 100000)"
    )
    print(f"  {_time(rng.double_normal, loops) * 1000:6.0f} ns  double_normal()")


if __name__ == "__main__":
    main()

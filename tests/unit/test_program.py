"""A worker's program (pgsurge.engine.program): what compile_scripts defers.

Expressions are compiled into closures on their first evaluation, not for
every ``\\set`` of the scripts up front (the C loop runs most of them);
the result of an evaluation must not change, nor the errors, which pgbench
raises at run time anyway. ``uses_debug`` is still known up front.
"""

from __future__ import annotations

import pytest

from pgsurge.config import QueryMode
from pgsurge.engine import state as C
from pgsurge.engine.program import compile_scripts
from pgsurge.errors import EvalError
from pgsurge.prng import PgPrng
from pgsurge.script.ast import IfCommand, SetCommand
from pgsurge.script.compile import parse_script
from pgsurge.script.evaluate import EvalContext, compile_expr

SCRIPT = """\
\\set x random(1, 1000000) + :y
\\if :x > 3 and debug(:x) > 0
\\set z :x / 0
\\endif
"""


def _ctx() -> EvalContext:
    return EvalContext(variables={"y": 5}, rng=PgPrng(42), debug=lambda line: None)


def test_expressions_are_compiled_on_their_first_call() -> None:
    parsed = parse_script("t", SCRIPT)
    ops = compile_scripts((parsed,), QueryMode.SIMPLE)[0]
    for op, cmd in zip(ops, parsed.commands, strict=False):
        if not isinstance(cmd, SetCommand | IfCommand):
            continue
        assert op.expr is not None
        stand_in = op.expr
        ctx, ref_ctx = _ctx(), _ctx()
        ctx.variables["x"] = ref_ctx.variables["x"] = 7
        try:
            expected: object = compile_expr(cmd.expr)(ref_ctx)
        except EvalError as e:
            expected = e.message
        try:
            got: object = op.expr(ctx)
        except EvalError as e:
            got = e.message
        assert got == expected
        # the stand-in put the compiled closure in its place ...
        assert op.expr is not stand_in
        # ... which goes on from the same state
        assert ctx.rng.getstate() == ref_ctx.rng.getstate()
        if isinstance(expected, int):
            assert op.expr(ctx) == compile_expr(cmd.expr)(ref_ctx)


@pytest.mark.parametrize(
    ("line", "uses"),
    [
        ("\\set x debug(1)", True),
        ("\\set x 1 + DeBuG(:y)", True),
        ("\\set x abs(\\\n debug(2))", True),
        ("\\if debug(true)", True),
        ("\\set debug 1", False),
        ("\\set x :debug + 1", False),
        ("\\set x 1 + 2", False),
    ],
)
def test_debug_calls_are_found_up_front(line: str, uses: bool) -> None:
    parsed = parse_script("t", line + "\n\\endif\n" if "\\if" in line else line)
    ops = compile_scripts((parsed,), QueryMode.SIMPLE)[0]
    assert ops[0].kind in (C.K_SET, C.K_IF)
    assert ops[0].uses_debug is uses

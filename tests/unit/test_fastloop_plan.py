"""Which runs the C event loop takes (pgsurge.engine.fastloop.plan_for), no server.

Every option the C loop does not implement must leave the run on the
Python loop, and so must every script it cannot run exactly; the plan of
an eligible script is checked op by op.
"""

from __future__ import annotations

import pytest

from pgsurge.cli.options import parse_command_line
from pgsurge.config import RunConfig
from pgsurge.engine import abi, fastloop
from pgsurge.engine.abi import Sql
from pgsurge.engine.program import compile_scripts
from pgsurge.runner import parse_scripts

pytestmark = pytest.mark.skipif(
    not fastloop.available, reason="pgsurge._fastloop not usable"
)

VARS = (("scale", 10), ("label", "x"), ("default_seed", 12345))


def _plan(args: list[str], tmp_path, text: str | None = None, **env: str):  # type: ignore[no-untyped-def]
    if text is not None:
        path = tmp_path / "s.sql"
        path.write_text(text)
        args = [*args, "-f", str(path)]
    cfg = parse_command_line(args, environ=env)
    assert isinstance(cfg, RunConfig)
    parsed = parse_scripts(cfg)
    ops = compile_scripts(parsed, cfg.query_mode)
    return fastloop.plan_for(cfg, parsed, ops, VARS, True)


@pytest.mark.parametrize("mode", ["simple", "extended", "prepared"])
@pytest.mark.parametrize("builtin", ["tpcb-like", "simple-update", "select-only"])
def test_builtins_are_eligible(tmp_path, builtin: str, mode: str) -> None:
    assert _plan(["-b", builtin, "-M", mode], tmp_path) is not None


@pytest.mark.parametrize(
    "option",
    [
        ["--debug"],
    ],
)
def test_excluded_options_take_the_python_loop(tmp_path, option: list[str]) -> None:
    assert _plan(["-b", "select-only", *option], tmp_path) is None


@pytest.mark.parametrize("mode", ["simple", "prepared"])
def test_connect_each_is_eligible(tmp_path, mode: str) -> None:
    # -C: C opens the connections; under -M prepared it prepares on each,
    # so the plan carries the statements' text
    plan = _plan(["-b", "select-only", "-C", "-M", mode], tmp_path)
    assert plan is not None
    sql = plan[3][0][1]
    assert isinstance(sql, Sql)
    want = b"SELECT abalance FROM pgbench_accounts WHERE aid = $1;"
    assert sql.sql == (b"" if mode == "simple" else want)


@pytest.mark.parametrize(
    "option",
    [
        ["--percentiles", "50"],
        ["--json", "out.json"],
        ["--html", "out.html"],
        ["-R", "100", "--percentiles", "50"],
        ["-r", "--json", "out.json", "--percentiles"],
        ["-l"],
        ["-R", "100", "-l", "--sampling-rate", "0.5"],
        ["-l", "--json", "out.json", "--percentiles"],
        ["-l", "--aggregate-interval", "1"],
    ],
)
def test_histogram_outputs_are_eligible(tmp_path, option: list[str]) -> None:
    assert _plan(["-b", "tpcb-like", *option], tmp_path) is not None


@pytest.mark.parametrize(
    "option",
    [["-R", "100"], ["-L", "5"], ["-R", "100", "-L", "5"], ["-R", "100", "-T", "5"]],
)
def test_throttled_runs_are_eligible(tmp_path, option: list[str]) -> None:
    assert _plan(["-b", "tpcb-like", *option], tmp_path) is not None


@pytest.mark.parametrize("option", [["-r"], ["-r", "-R", "100", "-L", "5"]])
def test_per_command_latencies_are_eligible(tmp_path, option: list[str]) -> None:
    assert _plan(["-b", "tpcb-like", *option], tmp_path) is not None


def test_switch_off(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGSURGE_NO_FASTLOOP", "1")
    assert _plan(["-b", "select-only"], tmp_path) is None


@pytest.mark.parametrize(
    "text",
    [
        # -D text (label) is C's too, typed when an expression reads it
        "\\sleep :nosuchvar\nSELECT 1;\n",
        "\\shell true\nSELECT 1;\n",
        "\\setshell v echo 1\nSELECT 1;\n",
        "\\set a debug(1)\nSELECT :a;\n",
        "SELECT :nosuchvar;\n",
    ],
)
def test_ineligible_scripts(tmp_path, text: str) -> None:
    # (C runs expressions, \\if and \\gset: test_eligible_logic)
    assert _plan(["-M", "prepared"], tmp_path, text) is None
    assert _plan(["-M", "simple"], tmp_path, text) is None


@pytest.mark.parametrize(
    "text",
    [
        "\\set a random(1, 10)\nSELECT :a \\gset\n",
        "\\set a random(1, 10)\nSELECT :a \\aset\n",
        # read before it is set: C checks at run time, Python gives the error
        "\\sleep :a us\n\\set a 1\nSELECT :a;\n",
        "\\sleep :b us\n\\set a 1\nSELECT :a;\n\\set b 2\n",
        "SELECT :a;\n\\set a 1\n",
        "\\if 1\nSELECT 1;\n\\endif\n",
        "\\if :scale > 1 and not (:scale = 3)\nSELECT 1;\n"
        "\\elif :scale\n\\else\n\\endif\n",
        "\\set a random(1, 10) + 1\nSELECT :a;\n",
        "\\set a :scale\nSELECT :a;\n",
        "\\set a random(10, 1)\nSELECT :a;\n",
        "\\set a random(1, 2 * :b)\n\\set b 3\nSELECT :a;\n",
        "\\set a abs(-3) + least(1, :scale) + greatest(:scale, 2) + hash(:scale)\n",
        "\\set a permute(1, 10) + hash_fnv1a(1, 2) + (:scale << 2) # 5\n",
        "SELECT 1 AS x \\gset p_\n\\set y :p_x * 2\nSELECT :y;\n",
        # pipelines (under -M simple C hands the client to Python's error)
        "\\startpipeline\nSELECT 1;\n\\syncpipeline\nSELECT 2;\n\\endpipeline\n",
    ],
)
def test_eligible_logic(tmp_path, text: str) -> None:
    assert _plan(["-M", "prepared"], tmp_path, text) is not None
    assert _plan(["-M", "simple"], tmp_path, text) is not None


@pytest.mark.parametrize(
    "text",
    [
        "\\set a :scale > 1\n",
        "\\set a 1.5 * :scale\n",
        "\\set a case when :scale > 1 then 1 else 2 end\n",
        "\\set a random_gaussian(1, :scale, 2.5)\n",
        "\\set a random_zipfian(1, :scale, 1.07) + random_exponential(1, 9, 2.0)\n",
        "\\set a null\n\\set b :a is null and sqrt(2.0) < pi()\n",
        "\\set a int(double(:scale) / 3) + mod(7, 2) + ln(exp(1))\n",
        "\\if :scale and 1\n\\endif\n",
        "\\set a 1 / 0\n",
        "\\set a :label\nSELECT :label, :a;\n\\sleep :label\n",
    ],
)
def test_eligible_values_of_every_type(tmp_path, text: str) -> None:
    assert _plan(["-M", "prepared"], tmp_path, text) is not None


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("\\set a debug(1)\n", "debug()"),
        ("\\shell true\n", "\\shell and \\setshell are not supported"),
        ("\\set a :nowhere\n", "variable nowhere is not one C holds"),
    ],
)
def test_refusal_names_the_reason(tmp_path, text: str, reason: str) -> None:
    path = tmp_path / "s.sql"
    path.write_text(text)
    cfg = parse_command_line(["-f", str(path)], environ={})
    assert isinstance(cfg, RunConfig)
    parsed = parse_scripts(cfg)
    ops = compile_scripts(parsed, cfg.query_mode)
    why = fastloop.decide(cfg, parsed, ops, VARS, True)
    assert isinstance(why, str) and reason in why, why


def test_plan_of_a_script(tmp_path) -> None:
    text = (
        "\\set a random(1, 1000 * :scale)\n"
        "\\set b 2 * 3\n"
        "\\set c random(-5, 5)\n"
        "SELECT :a, :b, :client_id, :scale, :c;\n"
    )
    names, nset, weights, scripts = _plan(["-M", "prepared"], tmp_path, text)
    assert names == ("a", "b", "c", "client_id", "scale")
    assert nset == 3
    assert weights == (1,)
    assert scripts == (
        (
            (2, 0, 1, 10000),
            (1, 1, 6),
            (2, 2, -5, 5),
            (3, b"P_0", (0, 1, 3, 4, 2), None, 0, "", b"SELECT $1, $2, $3, $4, $5;"),
            (0,),
        ),
    )
    _, _, _, simple = _plan(["-M", "simple"], tmp_path, text)
    assert simple[0][3] == (
        3,
        b"",
        (0, 1, 3, 4, 2),
        (b"SELECT ", b", ", b", ", b", ", b", ", b";"),
        0,
        "",
        b"",
    )


def test_plan_of_sleeps(tmp_path) -> None:
    text = (
        "\\set d random(1, 100)\n"
        "\\sleep 2 ms\n"
        "\\sleep :d us\n"
        "\\sleep :scale s\n"
        "\\sleep 3000000 s\n"
        "SELECT :d;\n"
    )
    names, nset, _, scripts = _plan(["-M", "prepared", "-R", "50"], tmp_path, text)
    assert names == ("d", "scale")
    assert nset == 1
    # a constant's µs as meta.sleep_usec computes it (C int wrap)
    wrapped = (3000000 * 1000000 + 2**31) % 2**32 - 2**31
    assert scripts == (
        (
            (2, 0, 1, 100),
            (4, 2000),
            (5, 0, 1),
            (5, 1, 1000000),
            (4, wrapped),
            (3, b"P_0", (0,), None, 0, "", b"SELECT $1;"),
            (0,),
        ),
    )


def test_flags() -> None:
    flags = fastloop.flags_for(2, 0, 123, True, True, 1, False, 5000, 250.0)
    assert flags == (2, 0, 123, 1, 1, 0, 0, 5000, 250.0, 0)
    per_command = fastloop.flags_for(0, 10, 0, False, False, 1, False, 0, 0.0, True)
    assert per_command[-1] == 1


def test_scripts_of_any_length_are_planned(tmp_path) -> None:
    # 200 SQL commands and 200 variables: no limit of C's
    text = "\\set a 1.5\n" + "SELECT :a;\n" * 200
    text += "".join(f"\\set v{i} {i}\nSELECT :v{i};\n" for i in range(200))
    plan = _plan(["-M", "prepared"], tmp_path, text)
    assert plan is not None
    names, nset, _, scripts = plan
    assert nset == len(names) == 201
    assert len(scripts[0]) == 1 + 200 + 400 + 1


def test_a_statement_of_many_references_plans_each_reference(tmp_path) -> None:
    # each distinct name is asked for its slot once; every reference gets it
    refs = [":a", ":scale", ":a", ":client_id"] * 1000
    text = "\\set a 3\nSELECT " + ", ".join(refs) + " -- é\n;\n"
    plan = _plan(["-M", "simple"], tmp_path, text)
    assert plan is not None
    names, _, _, scripts = plan
    assert names == ("a", "scale", "client_id")
    sql = scripts[0][1]
    assert isinstance(sql, Sql)
    assert sql.params == tuple(names.index(r[1:]) for r in refs)
    assert sql.lits == (b"SELECT ", *[b", "] * (len(refs) - 1), " -- é\n;".encode())


def test_refusal_names_the_command(tmp_path) -> None:
    """PGSURGE_FASTLOOP=require's message says which command of which script
    the C loop does not run, numbered from 0 as pgbench's messages are."""
    (tmp_path / "a.sql").write_text("SELECT 1;\n")
    (tmp_path / "b.sql").write_text("\\set x 1\nSELECT :x;\n\\setshell v echo 1\n")
    args = ["-f", str(tmp_path / "a.sql"), "-f", str(tmp_path / "b.sql")]
    cfg = parse_command_line(args, environ={})
    assert isinstance(cfg, RunConfig)
    parsed = parse_scripts(cfg)
    ops = compile_scripts(parsed, cfg.query_mode)
    why = fastloop.decide(cfg, parsed, ops, VARS, True)
    assert isinstance(why, str)
    assert why.startswith(
        f"script 1 command 2 (\\setshell) of {str(tmp_path / 'b.sql')!r}: "
    ), why


@pytest.mark.parametrize("mode", ["extended", "prepared"])
def test_pipelines_and_connect_with_values_of_every_type(tmp_path, mode: str) -> None:
    # the merged C loop: -C, a pipeline and doubles/text in one run
    text = (
        "\\set d random_gaussian(1, 10, 2.5) * 1.5\n"
        "\\startpipeline\nSELECT :d, :label;\n\\syncpipeline\n"
        "SELECT :d;\n\\endpipeline\n"
    )
    plan = _plan(["-C", "-M", mode, "-D", "label=x"], tmp_path, text)
    assert plan is not None
    kinds = [op[0] for op in plan[3][0]]
    assert kinds == [
        abi.OP_SET_EXPR,
        abi.OP_PSTART,
        abi.OP_SQL,
        abi.OP_PSYNC,
        abi.OP_SQL,
        abi.OP_PEND,
        abi.OP_END,
    ]


@pytest.mark.parametrize(
    ("args", "text", "reason"),
    [
        # what neither the expression side nor the pipeline/-C side runs
        (
            ["-C"],
            "\\startpipeline\nSELECT 1;\n\\endpipeline\n\\shell true\n",
            "script 0 command 3 (\\shell) of ",
        ),
        (
            ["-C"],
            "\\startpipeline\n\\set a debug(1)\nSELECT :a;\n\\endpipeline\n",
            "script 0 command 1 (\\set) of ",
        ),
        (
            ["-C", "--debug"],
            "\\startpipeline\nSELECT 1;\n\\endpipeline\n",
            "--debug is not supported by the C loop",
        ),
    ],
)
def test_merged_refusals(tmp_path, args: list[str], text: str, reason: str) -> None:
    path = tmp_path / "s.sql"
    path.write_text(text)
    cfg = parse_command_line([*args, "-f", str(path)], environ={})
    assert isinstance(cfg, RunConfig)
    parsed = parse_scripts(cfg)
    ops = compile_scripts(parsed, cfg.query_mode)
    why = fastloop.decide(cfg, parsed, ops, VARS, True)
    assert isinstance(why, str) and reason in why, why

"""Which runs the C event loop takes (pgsurge.engine.fastloop.plan_for), no server.

Every option the C loop does not implement must leave the run on the
Python loop, and so must every script it cannot run exactly; the plan of
an eligible script is checked op by op.
"""

from __future__ import annotations

import pytest

from pgsurge.cli.options import parse_command_line
from pgsurge.config import RunConfig
from pgsurge.engine import fastloop
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
        "\\sleep :label ms\nSELECT 1;\n",
        "\\sleep :nosuchvar\nSELECT 1;\n",
        "\\shell true\nSELECT 1;\n",
        "\\setshell v echo 1\nSELECT 1;\n",
        "\\set a random_gaussian(1, 10, 2.5)\nSELECT :a;\n",
        "\\set a 1.5\nSELECT :a;\n",
        "\\set a random(1, :label * 2)\nSELECT :a;\n",
        "\\set a debug(1)\nSELECT :a;\n",
        "\\set a 9223372036854775807 + 1\nSELECT :a;\n",
        "SELECT :label;\n",
        "SELECT :nosuchvar;\n",
    ],
)
def test_ineligible_scripts(tmp_path, text: str) -> None:
    # (C runs int expressions, \\if and \\gset: test_eligible_logic)
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
    ("text", "reason"),
    [
        ("\\set a :scale > 1\n", "\\set of a boolean"),
        ("\\set a 1.5 * :scale\n", "a value that is not an int"),
        ("\\set a case when :scale > 1 then 1 else 2 end\n", "case()"),
        ("\\set a random_gaussian(1, :scale, 2.5)\n", "random_gaussian()"),
        ("\\if :scale and 1\n\\endif\n", "an int where a boolean is expected"),
        ("\\shell true\n", "\\shell and \\setshell are not supported"),
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
    # a constant's µs as client_meta.sleep_usec computes it (C int wrap)
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
    flags = fastloop.flags_for(2, 0, 123, True, True, 1, 1, False, 5000, 250.0)
    assert flags == (2, 0, 123, 1, 1, 0, 0, 0, 5000, 250.0, 0)
    per_command = fastloop.flags_for(0, 10, 0, False, False, 1, 1, False, 0, 0.0, True)
    assert per_command[-1] == 1
    # unthrottled, one script: transactions restart inline
    assert fastloop.flags_for(0, 10, 0, False, False, 1, 1, False)[6] == 1


def test_too_many_commands_are_refused_before_planning(tmp_path) -> None:
    # 65 SQL commands: refused whatever the commands, before any of them
    # is planned (the \set of a double, planned first, would say so)
    text = "\\set a 1.5\n" + "SELECT :a;\n" * 65
    path = tmp_path / "s.sql"
    path.write_text(text)
    cfg = parse_command_line(["-f", str(path)], environ={})
    assert isinstance(cfg, RunConfig)
    parsed = parse_scripts(cfg)
    ops = compile_scripts(parsed, cfg.query_mode)
    why = fastloop.decide(cfg, parsed, ops, VARS, True)
    assert why == "more than 64 variables or SQL commands"
    text = "".join(f"\\set v{i} 1\n" for i in range(65)) + "SELECT 1;\n"
    path.write_text(text)
    cfg = parse_command_line(["-f", str(path)], environ={})
    assert isinstance(cfg, RunConfig)
    parsed = parse_scripts(cfg)
    ops = compile_scripts(parsed, cfg.query_mode)
    assert fastloop.decide(cfg, parsed, ops, VARS, True) == (
        "more than 64 variables or SQL commands"
    )


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

"""The HTML report as text: structure, embedded data, escaping, privacy, size.

The documents are built by ``report.json.build_document`` from synthetic
runs (as ``test_report_json`` does), so they are the real --json layout.
The page is parsed with the standard library's ``HTMLParser``; the browser
tests (tests/server/test_report_html_browser.py) draw it.
"""

from __future__ import annotations

import io
import json
import math
import os
import sys
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from pgsurge.cli.options import parse_command_line
from pgsurge.config import ConnParams, RunConfig, ScriptSource
from pgsurge.engine.fastloop import run_excluded
from pgsurge.engine.worker import wants_histograms
from pgsurge.report.command import report_main
from pgsurge.report.html import (
    DATA_ELEMENT_ID,
    RunDoc,
    command_line,
    embed_json,
    percentile_curve,
    redact,
    render_html,
)
from pgsurge.report.json import build_document
from pgsurge.report.verdict import compare_tps
from pgsurge.stats.counters import FailureKind
from pgsurge.stats.histogram import Histogram
from pgsurge.stats.results import (
    RunFacts,
    RunResult,
    ScriptInfo,
    WorkerResult,
)
from pgsurge.stats.series import WorkerRecorder
from tests.fix_cli import run_cli

SECOND = 1_000_000
SHIFT = 1_700_000_000_000_000
SECRET = "s3cr3t-pw"
HOSTILE = '</script><script>alert("x")</script><!-- & \u2028 </SCRIPT >'


def make_doc(
    *,
    seconds: int = 5,
    per_second: int = 40,
    script_names: tuple[str, ...] = ("/home/bench/work/a.sql", "b.sql"),
    host: str = "/tmp/pgsurge-sock/run",
    dbname: str = "bench",
    speed: float = 1.0,
) -> dict[str, Any]:
    """A --json document of a synthetic run of ``seconds`` 1 s intervals."""
    nscripts = len(script_names)
    commands = ("select 1", "\\set x 1")
    scripts = tuple(ScriptInfo(n, 1, commands) for n in script_names)
    facts = RunFacts(
        pgsurge_version="0.1.0",
        server_version_num=180006,
        server_version="18.6",
        scripts=scripts,
        clients=4,
        threads=2,
        duration_s=seconds,
        transactions_per_client=None,
        rate=None,
        report_per_command=True,
        max_tries=3,
    )
    shape = [len(commands)] * nscripts
    workers = []
    step = SECOND // per_second
    for wid in range(2):
        w = WorkerResult.empty(wid, 2, shape)
        rec = WorkerRecorder(w.total, shape, anchor_us=10 * SECOND, interval_us=SECOND)
        for k in range(seconds * per_second):
            now = 10 * SECOND + k * step + wid
            if now >= rec.next_us:
                rec.advance(now)
            script = k % nscripts
            if k % 97 == 7:
                w.total.record(0, failure=FailureKind.SERIALIZATION, tries=3)
                w.per_script[script].record(
                    0, failure=FailureKind.SERIALIZATION, tries=3
                )
                w.per_command[script][0].failures += 1
                continue
            # a log-normal-ish spread with a slow tail
            lat = int(
                (400 + (k * 7919) % 1600 + (30000 if k % 211 == 0 else 0)) / speed
            )
            w.total.record(lat, None)
            w.per_script[script].record(lat, None)
            w.per_command[script][0].latency.add(lat - 100)
            rec.latency(lat)
            rec.script[script](lat)
            rec.command[script][0](lat - 100)
        end = 10 * SECOND + seconds * SECOND
        w.histograms, w.intervals = rec.finish(end)
        w.conn_start_us, w.bench_start_us, w.end_us = 9 * SECOND, 10 * SECOND, end
        w.cpu_user_s, w.cpu_sys_s = 0.8 * seconds / 5, 0.1 * wid
        w.idle_us = seconds * SECOND // 2
        w.clients_finished = 2
        workers.append(w)
    result = RunResult.from_workers(workers, facts)
    result.epoch_shift_us = SHIFT
    cfg = RunConfig(
        conn=ConnParams(host=host, port="5432", user="bench", dbname=dbname),
        scripts=tuple(ScriptSource(n, "select 1") for n in script_names),
        clients=4,
        jobs=2,
        transactions=None,
        duration=seconds,
        report_per_command=True,
        json_path="out.json",
    )
    # as a reader gets it: through JSON text
    doc: dict[str, Any] = json.loads(json.dumps(build_document(result, cfg)))
    return doc


class Page(HTMLParser):
    """What the tests look at in a page: elements, data, text, scripts."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.scripts: list[tuple[dict[str, str | None], str]] = []
        self.text: list[str] = []
        self._in_script: dict[str, str | None] | None = None
        self._buf: list[str] = []
        self.feed(text)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag == "script":
            self._in_script = dict(attrs)
            self._buf = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "script" and self._in_script is not None:
            self.scripts.append((self._in_script, "".join(self._buf)))
            self._in_script = None

    def handle_data(self, data: str) -> None:
        if self._in_script is not None:
            self._buf.append(data)
        else:
            self.text.append(data)

    def data(self) -> dict[str, Any]:
        (body,) = [s for a, s in self.scripts if a.get("id") == DATA_ELEMENT_ID]
        loaded: dict[str, Any] = json.loads(body)
        return loaded

    def charts(self) -> list[str]:
        return [a["data-chart"] or "" for t, a in self.tags if "data-chart" in a]


@pytest.fixture(scope="module")
def doc() -> dict[str, Any]:
    return make_doc()


def test_page_structure_and_charts(doc: dict[str, Any]) -> None:
    page = Page(render_html([RunDoc("run.json", doc)]))
    assert page.charts() == ["tps", "latency", "percentiles"]
    # three scripts: the data, uPlot, the page's own
    assert len(page.scripts) == 3
    assert all("src" not in a for a, _ in page.scripts)
    text = " ".join(page.text)
    for heading in ("Scripts", "Commands (-r)", "Errors and failures", "Settings"):
        assert heading in text
    assert "Client CPU per worker" in text and "Not client-limited" in text
    assert "serialization failure" in text and "40001" in text
    assert any(t == "noscript" for t, _ in page.tags)


def test_data_round_trip(doc: dict[str, Any]) -> None:
    page = Page(render_html([RunDoc("run.json", doc)]))
    data = page.data()
    assert data["format"] == 1 and data["compare"] is None
    (run,) = data["runs"]
    assert run["label"] == "run.json" and run["side"] == "A"
    assert run["doc"] == redact(doc)
    # only the paths changed
    assert run["doc"]["intervals"] == doc["intervals"]
    assert run["doc"]["histograms"] == doc["histograms"]
    assert run["curve"] == percentile_curve(doc)


def test_percentile_curve_matches_the_histogram(doc: dict[str, Any]) -> None:
    curve = percentile_curve(doc)
    assert curve is not None
    hist = Histogram.from_dict(doc["histograms"]["latency"])
    xs, ms = curve["x"], curve["ms"]
    assert xs[0] == 0 and xs == sorted(xs) and ms == sorted(ms)
    assert xs[-1] == pytest.approx(math.log10(hist.count))
    assert ms[-1] == hist.max / 1000 and ms[0] == hist.min / 1000
    at_99 = xs.index(2.0)
    assert ms[at_99] == hist.percentile(99) / 1000
    assert percentile_curve({"histograms": None}) is None


def test_hostile_script_names_are_escaped() -> None:
    doc = make_doc(script_names=(HOSTILE, "b.sql"), seconds=2)
    text = render_html([RunDoc(HOSTILE, doc)], title=HOSTILE)
    # nothing ends an element early: exactly our three scripts
    assert text.lower().count("<script") == 3
    assert text.lower().count("</script") == 3
    page = Page(text)
    data = page.data()
    assert data["runs"][0]["label"] == HOSTILE
    assert data["runs"][0]["doc"]["scripts"][0]["desc"] == HOSTILE
    assert HOSTILE in " ".join(page.text)


def test_embed_json_escapes() -> None:
    text = embed_json({"a": "</script>&<!--\u2028\u2029"})
    assert not set("<>&") & set(text)
    assert "\u2028" not in text and "\u2029" not in text
    assert json.loads(text) == {"a": "</script>&<!--\u2028\u2029"}


def test_redact_shortens_absolute_paths_only() -> None:
    assert redact("/tmp/x/run") == "…/run"
    assert redact('socket "/var/run/pg/.s.PGSQL.5432" failed') == (
        'socket "…/.s.PGSQL.5432" failed'
    )
    keep = ["a/b/c", "x = 4/2/1", "https://example.org/a/b", "50%", "/tmp", ""]
    assert [redact(s) for s in keep] == keep
    hist = {"encoding": "u64le-zlib-base64", "counts": "+/ab/cd/e"}
    assert redact({"h": hist, "l": ["/a/b"]}) == {"h": hist, "l": ["…/b"]}


def _machine_paths(tmp_path: Path) -> list[str]:
    paths = {str(tmp_path), os.getcwd(), sys.prefix, sys.executable}
    paths.add(str(Path(__file__).resolve().parent))
    home = os.path.expanduser("~")
    if home not in ("/", "/root"):
        paths.add(home)
    return sorted(p for p in paths if len(p) > 1)


def test_golden_no_machine_path_and_no_password(tmp_path: Path) -> None:
    sock = tmp_path / "srv" / "run"
    script = tmp_path / "scripts" / "my.sql"
    conninfo = f"dbname=bench password={SECRET} host={sock}"
    doc = make_doc(host=str(sock), script_names=(str(script),), dbname=conninfo)
    doc["abort_messages"] = [
        f'connection to server on socket "{sock}/.s.PGSQL.5432" failed'
    ]
    src = tmp_path / "run.json"
    src.write_text(json.dumps(doc))
    out = tmp_path / "report.html"
    err = io.StringIO()
    assert report_main([str(src), "-o", str(out)], stderr=err) == 0, err.getvalue()
    text = out.read_text()
    assert SECRET not in text
    for path in _machine_paths(tmp_path):
        assert path not in text, path
    # what is left of them
    assert "…/my.sql" in text and "…/run" in text
    assert "…/.s.PGSQL.5432" in text


def test_size_budget_ten_minutes_at_one_second() -> None:
    doc = make_doc(seconds=600, per_second=60)
    assert len(doc["intervals"]) == 600
    text = render_html([RunDoc("long.json", doc)])
    size = len(text.encode())
    assert size < 500_000, size
    page = Page(text)
    assert len(page.data()["runs"][0]["doc"]["intervals"]) == 600
    # the noscript table groups the intervals
    assert "600 intervals in groups of 5" in text


def test_absent_sections_are_left_out() -> None:
    doc = make_doc(seconds=2)
    doc["intervals"] = []
    doc["histograms"] = None
    doc["client_cpu"] = None
    for s in doc["scripts"]:
        for c in s["commands"]:
            c.update(latency_ms=None, failures=0, retries=0)
    page = Page(render_html([RunDoc("bare.json", doc)]))
    assert page.charts() == []
    text = " ".join(page.text)
    assert "Commands (-r)" not in text and "Client CPU" not in text
    assert not any(t == "noscript" for t, _ in page.tags)


def test_unknown_sections_render_generically() -> None:
    doc = make_doc(seconds=3)
    doc["waits"] = {
        "source": "pg_stat_activity",
        "events": [
            {"type": "CPU", "event": None, "share": 0.5},
            {"type": "LWLock", "event": "WALInsert", "share": 0.25},
        ],
    }
    doc["server_stats"] = {"wal": {"bytes": 12345, "records": 67}}
    doc["future_thing"] = [{"k": "v<b>"}]
    for i, iv in enumerate(doc["intervals"]):
        iv["waits"] = {"CPU": 0.5, "LWLock:WALInsert": 0.1 * i}
    text = render_html([RunDoc("w.json", doc)])
    page = Page(text)
    assert "waits" in page.charts()
    body = " ".join(page.text)
    assert "Top 10 wait events" in body and "LWLock:WALInsert" in body
    assert "Server counters" in body and "12345" in body
    assert "future_thing" in body and "v<b>" in body
    assert "<b>" not in text.split("<main>")[1].split("</main>")[0]


def test_command_line_is_rebuilt_without_secrets(doc: dict[str, Any]) -> None:
    line = command_line(redact(doc))
    assert line.startswith("pgsurge -f …/a.sql@1 -f b.sql@1 -c 4 -j 2 -T 5 ")
    assert "-r" in line.split() and "-h …/run" in line
    assert SECRET not in command_line(make_doc(dbname=f"password={SECRET}"))


def test_comparison_page() -> None:
    a = [make_doc(seconds=4, per_second=n) for n in (40, 41, 39)]
    b = [make_doc(seconds=4, per_second=n, speed=1.5) for n in (50, 51, 49)]
    runs = [RunDoc(f"a{i}.json", d, "A") for i, d in enumerate(a)]
    runs += [RunDoc(f"b{i}.json", d, "B") for i, d in enumerate(b)]
    text = render_html(runs)
    page = Page(text)
    assert page.charts() == ["tps", "latency", "percentiles"]
    assert text.count('<svg class="dotplot"') == 1
    assert text.count('class="dot sideA"') == 3 and text.count('class="dot sideB"') == 3
    data = page.data()
    assert [r["side"] for r in data["runs"]] == ["A"] * 3 + ["B"] * 3
    assert data["compare"]["verdict"] == "faster"
    assert data["compare"]["ratio"] == pytest.approx(1.25, rel=0.02)
    assert "Verdict: B against A" in " ".join(page.text)


def test_verdict_rules() -> None:
    same = compare_tps([1000, 1010, 990, 1005], [1001, 1009, 991, 1004])
    assert same.verdict.startswith("no difference") and same.ci is not None
    assert same.ci[0] < 1 < same.ci[1]
    faster = compare_tps([1000, 1010, 990], [1200, 1210, 1190])
    assert faster.verdict == "faster" and faster.ratio == pytest.approx(1.2, 0.01)
    slower = compare_tps([1000, 1010, 990], [800, 810, 790])
    assert slower.verdict == "slower"
    noisy = compare_tps([1000, 1300, 700], [1050, 1350, 750])
    assert noisy.verdict == "inconclusive"
    single = compare_tps([1000], [1100])
    assert single.verdict == "no verdict" and single.ci is None
    assert "single run" in single.note
    with pytest.raises(ValueError):
        compare_tps([], [1.0])


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "the following arguments are required"),
        (["x.json"], "-o/--output"),
        (["missing.json", "-o", "r.html"], 'could not read "missing.json"'),
        (["not-json.json", "-o", "r.html"], '"not-json.json" is not JSON'),
        (["other.json", "-o", "r.html"], '"other.json" is not a pgsurge result'),
        (["newer.json", "-o", "r.html"], "schema 2, newer than"),
        (["ok.json", "--threshold", "x", "-o", "r.html"], "--threshold"),
        (["ok.json", "-o", "nodir/r.html"], "could not write HTML report"),
        (["broken.json", "-o", "r.html"], "could not render the report"),
    ],
)
def test_bad_input_is_one_line_exit_1(
    argv: list[str], message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "not-json.json").write_text("{nope")
    (tmp_path / "other.json").write_text('{"schema": 1, "tool": {"name": "x"}}')
    (tmp_path / "newer.json").write_text('{"schema": 2, "tool": {"name": "pgsurge"}}')
    (tmp_path / "ok.json").write_text(json.dumps(make_doc(seconds=1)))
    (tmp_path / "broken.json").write_text(
        '{"schema": 1, "tool": {"name": "pgsurge"}, "totals": 3, "scripts": 5}'
    )
    err = io.StringIO()
    assert report_main(argv, stderr=err) == 1
    lines = err.getvalue().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("pgsurge: error: ") and message in lines[0]
    assert not (tmp_path / "r.html").exists()


def test_report_command_writes_stdout_and_compares(tmp_path: Path) -> None:
    for name, speed in (("a.json", 1.0), ("b.json", 1.2)):
        (tmp_path / name).write_text(json.dumps(make_doc(seconds=2, speed=speed)))
    out = io.StringIO()
    argv = [str(tmp_path / "a.json"), "--vs", str(tmp_path / "b.json"), "-o", "-"]
    assert report_main(argv, stdout=out) == 0
    data = Page(out.getvalue()).data()
    assert [(r["label"], r["side"]) for r in data["runs"]] == [
        ("a.json", "A"),
        ("b.json", "B"),
    ]
    assert data["compare"]["verdict"] == "no verdict"


# -- --html on a run, and the report subcommand in the CLI ----------------------


def _parse(*args: str) -> RunConfig:
    err = io.StringIO()
    cfg = parse_command_line(list(args), environ={}, stderr=err)
    assert err.getvalue() == "" and isinstance(cfg, RunConfig)
    return cfg


def test_html_option(tmp_path: Path) -> None:
    target = tmp_path / "r.html"
    assert _parse(f"--html={target}").html_path == str(target)
    assert _parse("--ht", str(target), "db").html_path == str(target)
    assert _parse().html_path is None
    assert not target.exists()  # written when the run ends
    # it needs the histograms and the interval series, like --json
    assert wants_histograms(_parse(f"--html={target}"))
    # the C loop records the histograms too
    assert run_excluded(_parse(f"--html={target}")) is None


@pytest.mark.parametrize(
    ("args", "stderr"),
    [
        (
            ["--html=-"],
            'pgsurge: error: invalid value "-" for option --html\n'
            "pgsurge: detail: Expecting a file name.\n",
        ),
        (["--html"], "pgsurge: option '--html' requires an argument\n"),
        (["-i", "--html=x.html"], "pgsurge: error: some of the specified options"),
        (
            ["--html=/nonexistent/dir/x.html"],
            'pgsurge: error: cannot write file "/nonexistent/dir/x.html" for option'
            " --html: No such file or directory\n",
        ),
    ],
)
def test_html_option_errors(args: list[str], stderr: str) -> None:
    result = run_cli(args)
    assert (result.status, result.stdout) == (1, "")
    assert result.stderr.startswith(stderr)


def test_report_subcommand_through_main(tmp_path: Path) -> None:
    src = tmp_path / "a.json"
    src.write_text(json.dumps(make_doc(seconds=2)))
    out = tmp_path / "a.html"
    result = run_cli(["report", str(src), "-o", str(out)])
    assert (result.status, result.stdout, result.stderr) == (0, "", "")
    assert Page(out.read_text()).data()["runs"][0]["label"] == "a.json"
    result = run_cli(["report", str(tmp_path / "nope.json"), "-o", str(out)])
    assert result.status == 1
    assert result.stderr.startswith('pgsurge: error: could not read "')
    assert result.stderr.count("\n") == 1
    assert run_cli(["report", "--help"]).stdout.startswith("usage: pgsurge report")
    assert "pgsurge report RESULT.json" in run_cli(["--help"]).stdout

"""The HTML report of a real run, opened in headless Chromium.

A real ``pgsurge ... --json --html`` run against the test server gives the
page; Playwright drives Debian's ``chromium`` (``/usr/bin/chromium``, never
a downloaded browser: ``.ci/run`` installs it with apt). Every request
that is not for the ``file:`` page itself is aborted and recorded: none may
be attempted. The page must log no console error and raise no page error,
set ``window.pgsurgeReady``, draw the expected charts (counted, and their
canvases not blank), and hand back the embedded data unchanged.

These tests fail, never skip, when Playwright or Chromium is missing.

A screenshot of each page is written under the test's ``tmp_path``; with
``PGSURGE_REPORT_SCREENSHOT=FILE`` the single-run page's top is also
written to FILE (``docs/report-screenshot.png`` is made that way).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, Route, sync_playwright

from pgsurge.report.html import RunDoc, percentile_curve, redact, render_html
from tests.fix_db import create_database, db_dsn, drop_database

pytestmark = [pytest.mark.server, pytest.mark.slow]

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SECRET = "pw-n0t-in-the-page"
SCRIPT = """\
\\set aid random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :aid;
"""


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(
            f"{CHROMIUM} is missing: install Debian's chromium (apt-get install "
            "chromium); .ci/run does",
            pytrace=False,
        )
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture(scope="module")
def real_run(
    tmp_path_factory: pytest.TempPathFactory, server_dsn: str, bench_template: str
) -> tuple[dict[str, Any], Path]:
    """One real run (two scripts, -r, -P 1): its document and --html page."""
    work = tmp_path_factory.mktemp("html-run")
    name = create_database(server_dsn, "t_html", template=bench_template)
    dsn = db_dsn(server_dsn, name)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env.update(LC_ALL="C", PGPASSWORD=SECRET)
    script = work / "select <one> & co.sql"
    script.write_text(SCRIPT)
    doc_path, html_path = work / "result.json", work / "result.html"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pgsurge",
            "-b",
            "tpcb-like@3",
            "-f",
            f"{script}@1",
            "-c",
            "4",
            "-j",
            "2",
            "-T",
            "5",
            "-P",
            "1",
            "-r",
            f"--json={doc_path}",
            f"--html={html_path}",
            dsn,
        ],
        capture_output=True,
        text=True,
        cwd=work,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    drop_database(server_dsn, name)
    doc: dict[str, Any] = json.loads(doc_path.read_text())
    return doc, html_path


class Visit:
    """A page opened offline: requests, console messages, errors."""

    def __init__(self, browser: Browser, path: Path) -> None:
        self.blocked: list[str] = []
        self.requested: list[str] = []
        self.console: list[tuple[str, str]] = []
        self.errors: list[str] = []
        self.context = browser.new_context(
            viewport={"width": 1100, "height": 1350}, device_scale_factor=1
        )
        page: Page = self.context.new_page()
        self.page = page
        page.on("request", lambda r: self.requested.append(r.url))
        page.on("console", lambda m: self.console.append((m.type, m.text)))
        page.on("pageerror", lambda e: self.errors.append(str(e)))
        page.route("**/*", self._route)
        page.goto(path.as_uri())
        page.wait_for_function("window.pgsurgeReady === true", timeout=15_000)

    def _route(self, route: Route) -> None:
        url = route.request.url
        if url.startswith("file:"):
            route.continue_()
        else:
            self.blocked.append(url)
            route.abort()

    def check_clean(self, path: Path) -> None:
        assert self.blocked == []
        assert self.requested == [path.as_uri()]
        assert self.errors == []
        assert [m for m in self.console if m[0] in ("error", "warning")] == []

    def chart_count(self) -> int:
        count: int = self.page.evaluate("window.pgsurgeCharts")
        return count

    def drawn_canvases(self) -> list[int]:
        """Per uPlot canvas, the number of pixels that are not blank."""
        counts: list[int] = self.page.evaluate(
            """() => Array.from(document.querySelectorAll('.uplot canvas')).map(c => {
                const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
                let n = 0;
                for (let i = 3; i < d.length; i += 4) if (d[i] > 0) n++;
                return n;
            })"""
        )
        return counts

    def data(self) -> dict[str, Any]:
        data: dict[str, Any] = self.page.evaluate(
            "JSON.parse(document.getElementById('pgsurge-data').textContent)"
        )
        return data

    def close(self) -> None:
        self.context.close()


def test_run_html_page_offline(
    browser: Browser, real_run: tuple[dict[str, Any], Path], tmp_path: Path
) -> None:
    doc, html_path = real_run
    text = html_path.read_text()
    assert SECRET not in text and str(html_path.parent) not in text
    visit = Visit(browser, html_path)
    try:
        visit.check_clean(html_path)
        assert visit.chart_count() == 3
        assert visit.page.locator(".uplot").count() == 3
        assert all(n > 1000 for n in visit.drawn_canvases())
        # the run's document, paths shortened, and the decoded percentiles
        data = visit.data()
        (run,) = data["runs"]
        assert run["doc"] == redact(doc)
        assert run["curve"] == percentile_curve(doc)
        assert len(run["doc"]["intervals"]) >= 5
        # the hostile-looking script name shows as text
        assert "…/select <one> & co.sql" in visit.page.inner_text("#details")
        visit.page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
        target = os.environ.get("PGSURGE_REPORT_SCREENSHOT")
        if target:
            visit.page.set_viewport_size({"width": 1000, "height": 1560})
            visit.page.wait_for_timeout(300)  # the charts follow the resize
            visit.page.screenshot(path=target, full_page=False)
    finally:
        visit.close()


def test_comparison_page_offline(
    browser: Browser, real_run: tuple[dict[str, Any], Path], tmp_path: Path
) -> None:
    doc, _ = real_run

    def scaled(factor: float) -> dict[str, Any]:
        # a rescaled copy of the run is enough to draw
        copy: dict[str, Any] = json.loads(json.dumps(doc))
        copy["totals"]["tps"] *= factor
        for iv in copy["intervals"]:
            iv["tps"] = (iv["tps"] or 0) * factor
        return copy

    # side B about 10% faster; the runs of a side differ a little, as real
    # repeated runs do (identical runs have no spread: no verdict)
    runs = [RunDoc("a1.json", scaled(1.0), "A"), RunDoc("a2.json", scaled(1.01), "A")]
    faster = scaled(1.1)
    runs += [RunDoc("b1.json", faster, "B"), RunDoc("b2.json", scaled(1.11), "B")]
    page_path = tmp_path / "compare.html"
    page_path.write_text(render_html(runs))
    visit = Visit(browser, page_path)
    try:
        visit.check_clean(page_path)
        assert visit.chart_count() == 3
        assert visit.page.locator("svg.dotplot circle").count() == 4
        assert "faster" in visit.page.inner_text("#verdict")
        data = visit.data()
        assert [r["side"] for r in data["runs"]] == ["A", "A", "B", "B"]
        assert data["runs"][2]["doc"] == redact(faster)
        visit.page.screenshot(path=str(tmp_path / "compare.png"), full_page=True)
    finally:
        visit.close()


def test_comparison_axes_start_at_zero_and_waits_are_stacked(
    browser: Browser, real_run: tuple[dict[str, Any], Path], tmp_path: Path
) -> None:
    doc, _ = real_run
    # per-interval waits, as --waits records them, well above 0 everywhere
    # (the axis used to start at the smallest share)
    waited = json.loads(json.dumps(doc))
    for i, iv in enumerate(waited["intervals"]):
        iv["waits"] = {"CPU": 0.4 + 0.01 * i, "IO:DataFileRead": 0.2, "Lock:tuple": 0.1}
    runs = [RunDoc("a1.json", waited, "A"), RunDoc("a2.json", doc, "A")]
    runs += [RunDoc("b1.json", doc, "B"), RunDoc("b2.json", doc, "B")]
    page_path = tmp_path / "waits.html"
    page_path.write_text(render_html(runs))
    visit = Visit(browser, page_path)
    try:
        visit.check_clean(page_path)
        scales = {s["chart"]: s for s in visit.page.evaluate("window.pgsurgeScales()")}
        assert set(scales) == {"tps", "latency", "percentiles", "waits"}
        assert scales["tps"]["min"] == 0 and scales["tps"]["max"] > 0
        assert scales["waits"]["min"] == 0 and scales["waits"]["max"] == 1
        assert all(n > 1000 for n in visit.drawn_canvases())
        # the bands are opaque: the waits chart's filled pixels are solid
        data = visit.data()
        assert data["wait_stack"]["names"] == ["CPU", "IO:DataFileRead", "Lock:tuple"]
        assert set(data["side_curves"]) == {"A", "B"}
        visit.page.screenshot(path=str(tmp_path / "waits.png"), full_page=True)
    finally:
        visit.close()


def test_noscript_page_has_the_tables(
    browser: Browser, real_run: tuple[dict[str, Any], Path]
) -> None:
    _, html_path = real_run
    context = browser.new_context(java_script_enabled=False)
    try:
        page = context.new_page()
        page.goto(html_path.as_uri())
        text = page.inner_text("body")
        assert "The charts need JavaScript; their data:" in text
        assert "Commands (-r)" in text and "Client CPU per worker" in text
        assert page.locator(".uplot").count() == 0
    finally:
        context.close()

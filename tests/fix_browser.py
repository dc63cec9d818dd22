"""A pgsurge HTML page in headless Chromium, offline (the experiment pages).

``offline_page(path)`` opens the page in Debian's chromium through
Playwright (never a browser download; a missing binary fails the test),
lets no request leave the page's own file, waits for the page's
``window.pgsurgeReady`` and yields an :class:`OfflinePage`: the page and
what the browser said (console messages, page errors, blocked requests).
On leaving, the browser is closed and the page must have said nothing:
no page error, no request beyond the file, no console error or warning.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = "/usr/bin/chromium"


@dataclass
class OfflinePage:
    """The open page and what the browser reported while it was open."""

    page: Any
    console: list[tuple[str, str]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    blocked: list[str] = field(default_factory=list)


@contextmanager
def offline_page(path: Path) -> Iterator[OfflinePage]:
    """``path`` loaded and ready (see the module doc)."""
    from playwright.sync_api import Route, sync_playwright

    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(f"{CHROMIUM} is missing: apt-get install chromium", pytrace=False)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=CHROMIUM,
            args=["--headless", "--no-sandbox", "--disable-gpu"],
        )
        try:
            page = browser.new_page(viewport={"width": 1100, "height": 1300})
            seen = OfflinePage(page)

            def route(r: Route) -> None:
                if r.request.url.startswith("file:"):
                    r.continue_()
                else:
                    seen.blocked.append(r.request.url)
                    r.abort()

            page.on("console", lambda m: seen.console.append((m.type, m.text)))
            page.on("pageerror", lambda e: seen.errors.append(str(e)))
            page.route("**/*", route)
            page.goto(path.as_uri())
            page.wait_for_function("window.pgsurgeReady === true", timeout=15_000)
            yield seen
        finally:
            browser.close()
    assert seen.errors == [] and seen.blocked == []
    assert [m for m in seen.console if m[0] in ("error", "warning")] == []

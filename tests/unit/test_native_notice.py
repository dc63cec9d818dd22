"""The one-line notice of a run on pure-Python paths (issue 11, item 9).

Installed without a C compiler, pgsurge used to run its pure-Python paths
silently, at about twice the client CPU per transaction. The notice fires
only when an extension was wanted and could not be loaded, never when
``PGSURGE_PURE`` asked for the pure paths (the test suite's pure lanes).
"""

from __future__ import annotations

import pytest

from pgsurge import _native
from pgsurge.runner import pure_python_notice


def test_no_notice_when_everything_loaded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_native, "_unavailable", {})
    monkeypatch.delenv("PGSURGE_PURE", raising=False)
    assert pure_python_notice() == ""


def test_notice_names_the_missing_extension(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        _native, "_unavailable", {"_fastloop": "not built (No module named x)"}
    )
    monkeypatch.delenv("PGSURGE_PURE", raising=False)
    text = pure_python_notice()
    assert text.startswith("pgsurge: notice: this run uses pure-Python paths")
    assert "pgsurge._fastloop not built" in text
    assert "C compiler" in text and text.count("\n") == 1


def test_no_notice_when_pure_was_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_native, "_unavailable", {"_fastloop": "not built"})
    monkeypatch.setenv("PGSURGE_PURE", "1")
    assert pure_python_notice() == ""


def test_load_records_what_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_native, "_unavailable", {})
    monkeypatch.delenv("PGSURGE_PURE", raising=False)
    assert _native.load("_no_such_extension", 1) is None
    assert "_no_such_extension" in _native.unavailable()
    monkeypatch.setenv("PGSURGE_PURE", "1")
    monkeypatch.setattr(_native, "_unavailable", {})
    assert _native.load("_no_such_extension", 1) is None
    assert _native.unavailable() == {}

"""Hostile findings of the third pass over issue 25, in pure logic.

* ``PGSURGE_CONNECT=concurent`` (misspelt) was silently ignored: -C's
  connections then opened one at a time, not side by side as asked, and
  the run measured a connection pattern nobody asked for. It is an error
  before anything connects now, as a misspelt ``PGSURGE_WORKERS`` is.
"""

from __future__ import annotations

import pytest

from pgsurge.engine import fastloop
from pgsurge.errors import PgsurgeError
from tests.fix_cli import base_env, run_cli

# -- PGSURGE_CONNECT ------------------------------------------------------------


@pytest.mark.parametrize("value", ["concurent", "Concurrent", "1", "yes", " "])
def test_a_misspelt_connect_choice_is_an_error(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv(fastloop.CONNECT_ENV, value)
    with pytest.raises(PgsurgeError, match='must be "concurrent" or empty'):
        fastloop.concurrent_connect()


@pytest.mark.parametrize(("value", "side_by_side"), [("", False), ("concurrent", True)])
def test_the_connect_choices(
    monkeypatch: pytest.MonkeyPatch, value: str, side_by_side: bool
) -> None:
    monkeypatch.setenv(fastloop.CONNECT_ENV, value)
    assert fastloop.concurrent_connect() is side_by_side
    monkeypatch.delenv(fastloop.CONNECT_ENV)
    assert fastloop.concurrent_connect() is False


def test_a_misspelt_connect_choice_stops_the_run_before_it_connects() -> None:
    # PGHOST points nowhere (base_env): a run that went on would fail to
    # connect, with libpq's lines; the error is the only line, status 1
    env = {**base_env(), "PGSURGE_CONNECT": "concurent"}
    got = run_cli(["-n", "-S", "-C", "-c", "2", "-T", "1"], env=env)
    assert got.status == 1, got.stderr
    assert got.stderr == (
        'pgsurge: error: PGSURGE_CONNECT must be "concurrent" or empty, '
        'not "concurent"\n'
    )
    assert got.stdout == ""

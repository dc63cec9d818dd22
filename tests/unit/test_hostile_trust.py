"""Hostile-tester regressions on files written where another user can
plant things (no server needed; root acts for the other user).

* ``report --history -o PAGE`` writes the runs' pages into
  ``<PAGE>-runs/``: it took whatever stood there, so root's pages went
  through a symbolic link another user planted beside the page (into any
  directory), or into another user's directory. Both are refused now, as
  a link at the output file itself is.
* libpq's message about a connection string it cannot parse quotes the
  piece it stumbled on, often the password: ``invalid percent-encoded
  token: "PW"`` (a ``%`` not encoded in a URI's password), ``missing "="
  after "cret"`` (``password=my secret``, unquoted). ``--monitor``,
  ``--pooler-admin`` and the results store (``--store URI``, or
  ``PGSURGE_STORE`` from the environment, never on the command line)
  printed it; so did ``ab`` and ``sweep`` for a run that failed so, and
  their header showed the half of an unquoted ``password=my secret``
  after the masked one. The pieces are masked now (``redact.redact_echo``,
  ``redact_words``). A plain run keeps pgbench's message.
* ``history`` printed a stored run's labels as they were, ``compare`` a
  result file's environment: the escape sequences a writer of a shared
  store (or of a result file) put there reached the terminal (clear the
  screen, retitle it, OSC 52: write the clipboard). Control characters
  are shown as ``\\xNN`` now (``redact.printable``).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.fix_cli import run_cli
from tests.fix_data import write_result

NOBODY = 65534
needs_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="needs root to plant another user's files"
)


def _store(tmp_path: Path) -> Path:
    tmp_path.chmod(0o700)
    store = tmp_path / "s.sqlite"
    result = write_result(tmp_path / "r.json", 1.0)
    assert run_cli(["store", "import", result, f"--store={store}"]).status == 0
    return store


def _refused(store: Path, page: Path, runs: Path, why: str) -> None:
    """``report --history -o PAGE`` refuses the runs' folder, nobody's."""
    r = run_cli(["report", "--history", f"--store={store}", "-o", str(page)])
    assert r.stderr == (
        f'pgsurge: error: refusing to write the runs\' reports into "{runs}": '
        f'it is {why} "nobody"\n'
    )
    assert r.status == 1


@needs_root
def test_history_page_refuses_another_users_runs_link(tmp_path: Path) -> None:
    store = _store(tmp_path)
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chown(shared, NOBODY, NOBODY)  # nobody's directory
    victim = tmp_path / "victim"
    victim.mkdir()
    link = shared / "page-runs"
    link.symlink_to(victim)
    os.lchown(link, NOBODY, NOBODY)
    _refused(store, shared / "page.html", link, "a symbolic link owned by")
    assert list(victim.iterdir()) == []


@needs_root
def test_history_page_refuses_another_users_runs_directory(tmp_path: Path) -> None:
    store = _store(tmp_path)
    runs = tmp_path / "page-runs"
    runs.mkdir()
    os.chown(runs, NOBODY, NOBODY)
    _refused(store, tmp_path / "page.html", runs, "owned by")
    assert list(runs.iterdir()) == []


def test_history_page_writes_into_its_own_runs_directory(tmp_path: Path) -> None:
    store = _store(tmp_path)
    page = tmp_path / "page.html"
    for _ in range(2):  # made, then taken again
        r = run_cli(["report", "--history", f"--store={store}", "-o", str(page)])
        assert r.status == 0, r.stderr
        assert [p.name for p in (tmp_path / "page-runs").iterdir()] == ["run-1.html"]
    assert "page-runs/run-1.html" in page.read_text()


SECRET = "Hostile5Echo"


@pytest.mark.parametrize(
    ("option", "dsn"),
    [
        ("--monitor", f"postgresql://u:{SECRET}%zz@h/db"),
        ("--monitor", f"postgresql://h/db?password={SECRET}%zz"),
        ("--monitor", f"host=h password=my {SECRET}"),
        ("--pooler-admin", f"host=h password=my {SECRET}"),
    ],
)
def test_an_unparsable_dsn_option_shows_no_password(option: str, dsn: str) -> None:
    r = run_cli(["-t", "1", "--waits", f"{option}={dsn}", "host=h"])
    assert r.status == 1
    assert r.stderr.startswith(
        f"pgsurge: error: invalid connection string for option {option}: "
    ), r.stderr
    assert '"********"' in r.stderr
    assert SECRET not in r.stderr


def test_a_harmless_token_is_still_named() -> None:
    r = run_cli(["-t", "1", "--waits", "--monitor=host=h foo", "host=h"])
    assert 'missing "=" after "foo"' in r.stderr


@pytest.mark.parametrize("how", ["option", "environment"])
def test_an_unparsable_store_uri_shows_no_password(tmp_path: Path, how: str) -> None:
    uri = f"postgresql://u:{SECRET}%zz@127.0.0.1:1/db"
    result = write_result(tmp_path / "r.json", 1.0)
    if how == "option":
        r = run_cli(["store", "import", result, f"--store={uri}"])
    else:
        r = run_cli(["store", "import", result], env={"PGSURGE_STORE": uri})
    assert r.status == 1
    assert r.stderr == (
        "pgsurge: error: could not connect to results store "
        'postgresql://u:********@127.0.0.1:1/db: invalid percent-encoded token: "'
        '********"\n'
    )


@pytest.mark.parametrize(
    "target",
    [
        f"postgresql://u:{SECRET}%zz@127.0.0.1:1/db",
        f"host=127.0.0.1 password=my {SECRET}",
    ],
)
@pytest.mark.parametrize("command", ["ab", "sweep"])
def test_an_experiment_shows_no_piece_of_a_password(
    tmp_path: Path, command: str, target: str
) -> None:
    # the header masked "password=my" and showed the rest of the unquoted
    # password; the failed run's libpq message quoted a piece of it
    out = tmp_path / "out"
    own = ["--runs", "1", "--warmup", "0", "--out", str(out)]
    if command == "sweep":
        own += ["--vary", "-c 1,2"]
    r = run_cli([command, *own, "--", "-t", "1", target])
    assert r.status == 1, r.stderr
    assert "failed with exit status 1: " in r.stderr
    assert '"********"' in r.stderr
    assert SECRET not in r.stdout + r.stderr
    manifest = (out / "manifest.json").read_text()
    assert SECRET not in manifest


def test_history_shows_no_escape_sequence_of_a_stored_label(tmp_path: Path) -> None:
    # a shared store's labels are whatever its writers put there: printed
    # as they were, an escape sequence cleared the screen, retitled the
    # terminal (or, OSC 52, wrote the clipboard)
    tmp_path.chmod(0o700)
    store = tmp_path / "s.sqlite"
    evil = "c\x1b[2J\x1b]52;c;cHduZWQ=\x07\x9b"
    result = write_result(tmp_path / "r.json", 1.0, edit={"labels": {"commit": evil}})
    assert run_cli(["store", "import", result, f"--store={store}"]).status == 0
    r = run_cli(["history", f"--store={store}"])
    assert r.status == 0, r.stderr
    assert "commit=c\\x1b[2J\\x1b]52;c;cHduZWQ=\\x07\\x9b" in r.stdout
    assert not any(ch in r.stdout + r.stderr for ch in "\x1b\x07\x9b")


def test_compare_shows_no_escape_sequence_of_a_result(tmp_path: Path) -> None:
    evil = "Evil\x1b]0;pwned\x07CPU"
    plain = {"environment": {"client": {"cpu_model": "Plain CPU"}}}
    base = [
        write_result(tmp_path / f"a{i}.json", 1000.0, seq=i, edit=plain)
        for i in range(3)
    ]
    new = [
        write_result(
            tmp_path / f"b{i}.json",
            1000.0,
            seq=10 + i,
            edit={"environment": {"client": {"cpu_model": evil}}},
        )
        for i in range(3)
    ]
    r = run_cli(["compare", *base, "--vs", *new])
    assert "Evil\\x1b]0;pwned\\x07CPU" in r.stderr, r.stderr
    assert not any(ch in r.stdout + r.stderr for ch in "\x1b\x07")

"""Hostile-tester regressions on the results store, in-process.

* ``store import`` stored a document as the file had it: a result edited
  by hand or written by another tool, with a password in its connection
  items, a label or an abort message, kept it in clear in the store (and
  ``history`` printed the label); a password in an ``--label`` of
  ``store import`` itself too. A run's own ``--store`` was masked.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from tests.fix_cli import run_cli
from tests.fix_data import write_result

SECRET = "Hostile9Store"


def test_store_import_masks_passwords_in_the_document_and_labels(
    tmp_path: Path,
) -> None:
    path = write_result(
        tmp_path / "edited.json",
        1000.0,
        edit={
            "config.conn": {"dbname": f"postgresql://u:{SECRET}@h/db"},
            "labels": {"dsn": f"host=h password={SECRET}"},
            "abort_messages": [f"could not connect: password={SECRET}"],
        },
    )
    store = tmp_path / "s.sqlite"
    label = f"env=PGPASSWORD={SECRET}"
    r = run_cli(["store", "import", path, f"--store={store}", "--label", label])
    assert r.status == 0, r.stderr
    with sqlite3.connect(store) as db:
        tables = [
            t
            for (t,) in db.execute("SELECT name FROM sqlite_master WHERE type='table'")
        ]
        rows = [repr(row) for t in tables for row in db.execute(f"SELECT * FROM {t}")]
        labels = dict(db.execute("SELECT key, value FROM run_labels").fetchall())
    assert rows and not [row for row in rows if SECRET in row]
    assert labels["dsn"] == "host=h password=********"
    assert labels["env"] == "PGPASSWORD=********"
    r = run_cli(["history", f"--store={store}"])
    assert r.status == 0, r.stderr
    assert SECRET not in r.stdout + r.stderr


# SQLite uses the -wal and -shm files it finds beside a store: another user
# who can write in its directory (even a sticky one, as /tmp) plants them,
# with frames SQLite then replays into the store as its runs; a store file
# of theirs gives them what is stored and the history that is read back.


def test_a_store_in_a_directory_others_can_write_to_is_refused(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    path = write_result(tmp_path / "r.json", 1000.0)
    store = shared / "s.sqlite"
    r = run_cli(["store", "import", path, f"--store={store}"])
    assert (r.status, r.stdout) == (1, "")
    assert r.stderr == (
        f'pgsurge: error: refusing to use results store "{store}": its directory '
        f"{shared} is writable by other users (mode 1777), who could plant its "
        "-wal or -shm file\n"
    )
    assert list(shared.iterdir()) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a file away")
def test_another_users_store_is_read_but_never_written(tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    store = tmp_path / "s.sqlite"
    path = write_result(tmp_path / "r.json", 1000.0)
    assert run_cli(["store", "import", path, f"--store={store}"]).status == 0
    for name in os.listdir(tmp_path):
        if name.startswith("s.sqlite"):
            os.chown(tmp_path / name, 65534, 65534)  # nobody's now
    before = store.read_bytes()
    other = write_result(tmp_path / "o.json", 900.0, seq=3)
    r = run_cli(["store", "import", other, f"--store={store}"])
    assert r.status == 1
    assert r.stderr.startswith(
        f'pgsurge: error: refusing to use results store "{store}": it is owned by "'
    )
    r = run_cli(["history", f"--store={store}"])
    assert r.status == 0, r.stderr
    assert store.read_bytes() == before

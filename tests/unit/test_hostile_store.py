"""Hostile-tester regressions on the results store, in-process.

* ``store import`` stored a document as the file had it: a result edited
  by hand or written by another tool, with a password in its connection
  items, a label or an abort message, kept it in clear in the store (and
  ``history`` printed the label); a password in an ``--label`` of
  ``store import`` itself too. A run's own ``--store`` was masked.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

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

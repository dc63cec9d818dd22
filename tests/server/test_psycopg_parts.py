"""pgconn's partial psycopg import against a real server.

In a fresh interpreter (the test process has psycopg imported whole), a
connection is made through ``pgconn`` while psycopg's package is still
unexecuted; then the same process uses psycopg's full API (which completes
the package) and both must work side by side, raising the same classes.
And a whole run (setup connection, forked workers, report) must leave the
package unexecuted. tests/unit/test_psycopg_parts.py checks the modules
without a server.
"""

from __future__ import annotations

import pytest

from tests.fix_run import python_c

pytestmark = pytest.mark.server

_CODE = """
import sys
from pgsurge import pgconn
from psycopg.conninfo import conninfo_to_dict
dsn = sys.argv[1]
items = {k: str(v) for k, v in conninfo_to_dict(dsn).items() if v is not None}
conn = pgconn.connect_or_raise(items)
status, res = conn.exec_status("SELECT 6 * 7")
print(status == pgconn.TUPLES_OK, pgconn.value_text(res, 0, 0))
print('psycopg.connection' in sys.modules)
import psycopg
with psycopg.connect(dsn) as full:
    print(full.execute("SELECT %s::int + 1", [41]).fetchone()[0])
try:
    psycopg.connect(dsn + " port=1 host=/nonexistent/pgsurge-parts")
except pgconn.LibpqError as exc:
    print(type(exc) is psycopg.OperationalError)
status, res = conn.exec_status("SELECT 1/0")
print(pgconn.sqlstate(res))
conn.finish()
"""


def test_pgconn_then_psycopg_in_one_process(server_dsn: str) -> None:
    out = python_c(_CODE, server_dsn)
    assert out == "True 42\nFalse\n42\nTrue\n22012\n"


_RUN = """
import sys
from pgsurge.cli import main
status = main(["pgsurge", "-n", "-S", "-t", "3", "-c", "2", "-j", "2", sys.argv[1]])
print(status, sorted(m for m in sys.modules if m in sys.argv[2:]))
"""


def test_a_whole_run_leaves_psycopgs_package_unexecuted(bench_db: str) -> None:
    # the parent of a real run (setup connection, forked workers, report):
    # nothing on the way uses psycopg's package
    package_only = ["psycopg.connection", "psycopg.cursor", "psycopg.adapt"]
    out = python_c(_RUN, bench_db, "psycopg.pq", *package_only)
    assert "number of transactions actually processed: 6/6" in out
    assert out.splitlines()[-1] == "0 ['psycopg.pq']"

"""Server insight: what the server did during a run, seen from outside the workers.

One monitor connection in a thread of the parent (``monitor``), never in a
worker's loop:

* ``waits`` and ``sampling``: the wait-event profile of the run's own
  backends and of the server's background processes (``--waits[=MS]``);
* ``counters``: cumulative statistics views before, during and after the
  run (``--server-stats``);
* ``companions``: idle sessions held open for the run
  (``--idle-sessions N[:MODE]``);
* ``own``: the monitor's own statements, left out of the top statements;
* ``pooladmin``: PgBouncer's console per interval (``--pooler-admin``);
* ``pooled``: the waits and warnings that only a pooler needs.

Behind a connection pooler (found at set-up by the runner) the monitor
follows the server sessions by name, and ``--monitor DSN`` connects it
straight to the server (``monitor``'s docstring).

The runner starts and stops it (:class:`Monitor`); what it measured comes
back as JSON-ready sections (``waits``, ``server_stats``,
``idle_sessions``), which ``report/json.py`` writes and
``report/insight.py`` prints.
"""

from pgsurge.insight.monitor import Monitor

__all__ = ["Monitor"]

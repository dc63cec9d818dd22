"""The results store: every run kept with its labels and environment, and its history.

``--store[=PATH|URI]`` (or ``PGSURGE_STORE``) saves a run's result
document after its report (``records.save_document``); ``pgsurge store
import FILE...`` adds existing ``--json`` files; ``pgsurge history`` shows
the stored runs of one workload with their change points (``history``,
``changes``) and can fail a CI job on a regression. ``location`` says
where a store is, ``backend`` holds its versioned tables (SQLite or
PostgreSQL).

This package sits above ``experiment`` (it reads result documents with
``experiment.results``, the workload key ``compare`` uses, and
``experiment.fingerprint``) and below ``cli``, which calls it after a run:
the runner itself knows nothing of stores.
"""

from __future__ import annotations

from pgsurge.store.location import ENV_STORE, Location, StoreError, resolve

__all__ = ["ENV_STORE", "Location", "StoreError", "resolve"]

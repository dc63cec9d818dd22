"""Result documents into the store: the keys a stored run is found by.

``save_document`` stores one document (a run just finished, or a file
imported) with its labels: the document's own ``labels`` section (``--label``
at run time) merged with the ones given now (these win). The workload key
is a digest of ``experiment.results.Workload``, the very value ``compare``
requires two runs to share, so ``history`` never mixes runs that
``compare`` would refuse to compare. A document that is not a pgsurge
result, or of a newer schema, is refused with ``compare``'s message.

Secrets: the document is stored as the run wrote it, and ``--json``
documents hold no password (``report/json.py``: connection items only,
masked again by ``pgsurge.redact``); the store's own URI is never stored.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
from collections.abc import Mapping
from typing import Any

from pgsurge.experiment.fingerprint import fingerprint_key
from pgsurge.experiment.results import Workload, parse_result
from pgsurge.redact import redact_value
from pgsurge.store.backend import Store

__all__ = ["doc_labels", "now_text", "save_document", "workload_key"]


def workload_key(workload: Workload) -> str:
    """A short digest of a workload (equal workloads, equal keys)."""
    text = json.dumps(dataclasses.asdict(workload), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def doc_labels(doc: Mapping[str, Any]) -> dict[str, str]:
    """The ``labels`` section of a document (``--label``), as text."""
    labels = doc.get("labels")
    if not isinstance(labels, Mapping):
        return {}
    return {str(k): str(v) for k, v in labels.items()}


def now_text() -> str:
    """The current UTC time as the store writes it."""
    now = dt.datetime.now(tz=dt.UTC).isoformat(timespec="microseconds")
    return now.replace("+00:00", "Z")


def save_document(
    store: Store,
    doc: Mapping[str, Any],
    *,
    name: str,
    source: str,
    labels: Mapping[str, str] | None = None,
) -> tuple[int, bool]:
    """Store ``doc`` (``name`` for messages); (its id, whether it was new).

    The document and the labels are masked again: ``store import`` takes
    files pgsurge did not necessarily write (an edited one, another tool's)
    and ``--label`` values from its own command line."""
    doc = redact_value(doc)
    summary = parse_result(name, doc)
    merged = redact_value({**doc_labels(doc), **(labels or {})})
    return store.add(
        doc,
        workload_key=workload_key(summary.workload),
        fingerprint_key=fingerprint_key(doc),
        labels=merged,
        source=source,
        stored_at=now_text(),
    )

"""The environment fingerprint of a result, and what differs between two.

A run's document carries an ``environment`` section (``report/json.py``:
client host, server, pgsurge, engine). Two runs whose environments differ
in what can move the figures are not measuring the same thing even when
their workloads agree, so ``compare`` and ``history`` warn when they mix
them. What counts (:data:`COUNTED`):

* the client host: CPU model, cores usable, memory (to the GiB), kernel
  release, CPU frequency governor: a different machine or kernel;
* the server: its version and every setting that differs from the
  default, except those that only name places or a session
  (:data:`IGNORED_SETTINGS`: paths, ports, log file names, the
  application name...): ``synchronous_commit = off`` counts;
* pgsurge's version and whether the C loop ran: the client's own cost.

What does not count: the host name (the same machine may be renamed, and
a store may hold identical machines), the data size (it grows as a run's
inserts land; the workload's scale is already in the workload key), and
the times. A document without the section (older pgsurge) has no
fingerprint: nothing to compare, no warning.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

__all__ = [
    "COUNTED",
    "IGNORED_SETTINGS",
    "fingerprint",
    "fingerprint_differences",
    "fingerprint_key",
]

#: counted fields: (section, field) of the environment → how a message names it
COUNTED: Mapping[tuple[str, str], str] = {
    ("client", "cpu_model"): "client CPU",
    ("client", "cpus"): "client cores",
    ("client", "memory_gib"): "client memory (GiB)",
    ("client", "kernel"): "client kernel",
    ("client", "governor"): "CPU governor",
    ("server", "version"): "server version",
    ("pgsurge", "version"): "pgsurge version",
    ("pgsurge", "c_loop"): "C loop",
}

#: non-default server settings that say where, not how fast
IGNORED_SETTINGS = frozenset(
    {
        "application_name",
        "client_encoding",
        "config_file",
        "data_directory",
        "DateStyle",
        "default_text_search_config",
        "hba_file",
        "ident_file",
        "lc_messages",
        "lc_monetary",
        "lc_numeric",
        "lc_time",
        "listen_addresses",
        "log_directory",
        "log_filename",
        "log_line_prefix",
        "log_timezone",
        "port",
        "TimeZone",
        "transaction_deferrable",
        "transaction_isolation",
        "transaction_read_only",
        "unix_socket_directories",
        "unix_socket_permissions",
    }
)


def fingerprint(doc: Mapping[str, Any]) -> dict[str, Any] | None:
    """The counted fields of a document's environment (None without one):
    ``{"client CPU": ..., ..., "settings": {name: value}}``."""
    env = doc.get("environment")
    if not isinstance(env, Mapping):
        return None
    out: dict[str, Any] = {}
    for (section, name), label in COUNTED.items():
        part = env.get(section)
        out[label] = part.get(name) if isinstance(part, Mapping) else None
    server = env.get("server")
    settings = server.get("settings") if isinstance(server, Mapping) else None
    out["settings"] = {
        str(k): str(v)
        for k, v in (settings.items() if isinstance(settings, Mapping) else ())
        if k not in IGNORED_SETTINGS
    }
    return out


def fingerprint_key(doc: Mapping[str, Any]) -> str | None:
    """A short digest of :func:`fingerprint` (equal fingerprints, equal keys)."""
    fp = fingerprint(doc)
    if fp is None:
        return None
    text = json.dumps(fp, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _show(value: object) -> str:
    if value is None:
        return "unknown"
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def fingerprint_differences(
    a: Mapping[str, Any] | None, b: Mapping[str, Any] | None
) -> list[str]:
    """What differs between two fingerprints, one phrase each (``"server
    setting synchronous_commit on -> off"``); empty when either is None."""
    if a is None or b is None:
        return []
    found = [
        f"{label} {_show(a.get(label))} -> {_show(b.get(label))}"
        for label in COUNTED.values()
        if a.get(label) != b.get(label)
    ]
    sa, sb = a.get("settings") or {}, b.get("settings") or {}
    for name in sorted(set(sa) | set(sb)):
        if sa.get(name) != sb.get(name):
            old = sa.get(name, "default")
            new = sb.get(name, "default")
            found.append(f"server setting {name} {old} -> {new}")
    return found

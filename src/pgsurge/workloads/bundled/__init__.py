"""The workloads pgsurge ships, run by name like pgbench's builtins.

A data table: name (``-b NAME``), module file, description (``-b list``).
Names are looked up by prefix among these only after pgbench's own
builtins (``pgsurge.script.builtins``), so that every ``-b`` pgbench
accepts keeps its meaning (``-b tpc`` is still tpcb-like).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

__all__ = ["BUNDLED", "BundledWorkload", "find_bundled", "list_lines"]


@dataclass(frozen=True, slots=True)
class BundledWorkload:
    name: str
    module: str
    description: str

    @property
    def path(self) -> str:
        return os.path.join(os.path.dirname(__file__), self.module)


BUNDLED: tuple[BundledWorkload, ...] = (
    BundledWorkload("py-tpcb", "py_tpcb.py", "<python: TPC-B (sort of)>"),
    BundledWorkload("tpcc-like", "tpcc.py", "<python: TPC-C-like>"),
    BundledWorkload("ycsb-a", "ycsb_a.py", "<python: YCSB A, update heavy>"),
    BundledWorkload("ycsb-b", "ycsb_b.py", "<python: YCSB B, read mostly>"),
    BundledWorkload("ycsb-c", "ycsb_c.py", "<python: YCSB C, read only>"),
    BundledWorkload("ycsb-d", "ycsb_d.py", "<python: YCSB D, read latest>"),
    BundledWorkload("ycsb-e", "ycsb_e.py", "<python: YCSB E, short ranges>"),
    BundledWorkload("ycsb-f", "ycsb_f.py", "<python: YCSB F, read-modify-write>"),
)


def find_bundled(name: str) -> BundledWorkload | list[BundledWorkload] | None:
    """The bundled workload whose name is ``name`` or starts with it; None
    when none does; the candidates when several do."""
    for b in BUNDLED:
        if b.name == name:
            return b
    found = [b for b in BUNDLED if b.name.startswith(name)]
    if len(found) == 1:
        return found[0]
    return found or None


def list_lines() -> str:
    """``-b list``'s lines for these, in pgbench's format."""
    return "".join(f"  {b.name:>13}: {b.description}\n" for b in BUNDLED)

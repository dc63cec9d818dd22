"""The client host, as read from ``/proc`` and ``/sys``: its facts and its load.

``host_facts()`` is the client half of a result's environment fingerprint
(``report/json.py``'s ``environment.client``): CPU model, cores (online,
and usable by this process), memory, kernel release, the CPU frequency
governor where the kernel exposes it (virtual machines often do not:
None), the host name. Anything unreadable is None: a fingerprint is
never a reason for a run to fail.

``HostSnapshot.take()`` and ``host_figures(a, b)`` are ``--host-stats``:
the host's CPU split (user, system, iowait, steal, idle, in % of all
CPUs), context switches per second, memory available and dirty, and,
when ``disks`` is set (a local server), the whole disks' reads and
writes per second and MB/s between two snapshots. Linux only: elsewhere
``take`` returns None and the figures are left out.
"""

from __future__ import annotations

import os
import time
from dataclasses import field
from typing import Any

from pgsurge.records import record

__all__ = ["HostSnapshot", "host_facts", "host_figures"]

_GIB = 1024**3


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def _cpu_model(cpuinfo: str | None) -> str | None:
    for line in (cpuinfo or "").splitlines():
        key, _, value = line.partition(":")
        # x86 "model name"; arm64 has no model name, only its parts
        if key.strip() in ("model name", "Model", "cpu model"):
            return value.strip() or None
    # (imported here: every run imports this module, and platform costs
    # some 9 million instructions of start-up for this fallback alone)
    import platform

    return platform.processor() or None


def _meminfo(text: str | None) -> dict[str, int]:
    """/proc/meminfo as name → bytes."""
    out = {}
    for line in (text or "").splitlines():
        name, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            scale = 1024 if len(parts) > 1 and parts[1] == "kB" else 1
            out[name.strip()] = int(parts[0]) * scale
    return out


def _usable_cpus() -> int | None:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count()


def host_facts() -> dict[str, Any]:
    """The client host's facts (module doc)."""
    mem = _meminfo(_read("/proc/meminfo")).get("MemTotal")
    governor = _read("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor")
    uname = os.uname()
    return {
        "hostname": uname.nodename,
        "os": uname.sysname,
        "arch": uname.machine,
        "kernel": uname.release,
        "cpu_model": _cpu_model(_read("/proc/cpuinfo")),
        "cpus_online": os.cpu_count(),
        "cpus": _usable_cpus(),
        "memory_bytes": mem,
        # rounded: a kernel reserving a few MB more is the same machine
        "memory_gib": round(mem / _GIB) if mem else None,
        "governor": governor.strip() if governor else None,
    }


#: /proc/stat's cpu columns, in order
_CPU_FIELDS = (
    "user",
    "nice",
    "system",
    "idle",
    "iowait",
    "irq",
    "softirq",
    "steal",
)


def _is_whole_disk(name: str) -> bool:
    """A disk, not a partition nor a loop, ram or zram device."""
    if name.startswith(("loop", "ram", "zram", "dm-", "md")):
        return False
    return os.path.exists(f"/sys/block/{name}")


@record(frozen=True, slots=True)
class HostSnapshot:
    """Cumulative counters of the host at one moment."""

    taken_s: float
    cpu: tuple[int, ...]
    ctxt: int
    memory: dict[str, int]
    #: disk name → (reads, sectors read, writes, sectors written)
    disks: dict[str, tuple[int, int, int, int]] = field(default_factory=dict)

    @classmethod
    def take(cls, *, disks: bool) -> HostSnapshot | None:
        """Now's counters; None where /proc/stat cannot be read."""
        stat = _read("/proc/stat")
        if stat is None:
            return None
        cpu: tuple[int, ...] = ()
        ctxt = 0
        for line in stat.splitlines():
            parts = line.split()
            if parts and parts[0] == "cpu":
                cpu = tuple(int(x) for x in parts[1 : 1 + len(_CPU_FIELDS)])
            elif parts and parts[0] == "ctxt":
                ctxt = int(parts[1])
        found: dict[str, tuple[int, int, int, int]] = {}
        if disks:
            for line in (_read("/proc/diskstats") or "").splitlines():
                p = line.split()
                if len(p) >= 10 and _is_whole_disk(p[2]):
                    found[p[2]] = (int(p[3]), int(p[5]), int(p[7]), int(p[9]))
        return cls(
            taken_s=time.monotonic(),
            cpu=cpu,
            ctxt=ctxt,
            memory=_meminfo(_read("/proc/meminfo")),
            disks=found,
        )


def host_figures(a: HostSnapshot, b: HostSnapshot) -> dict[str, Any]:
    """The host's figures between snapshots ``a`` and ``b`` (module doc)."""
    seconds = max(b.taken_s - a.taken_s, 1e-6)
    ticks = [y - x for x, y in zip(a.cpu, b.cpu, strict=False)]
    total = sum(ticks) or 1
    share = dict(zip(_CPU_FIELDS, ticks, strict=False))
    out: dict[str, Any] = {
        "cpu_pct": {
            "user": 100.0 * (share.get("user", 0) + share.get("nice", 0)) / total,
            "system": 100.0
            * (share.get("system", 0) + share.get("irq", 0) + share.get("softirq", 0))
            / total,
            "iowait": 100.0 * share.get("iowait", 0) / total,
            "steal": 100.0 * share.get("steal", 0) / total,
            "idle": 100.0 * share.get("idle", 0) / total,
        },
        "context_switches_per_s": (b.ctxt - a.ctxt) / seconds,
        "memory_available_bytes": b.memory.get("MemAvailable"),
        "dirty_bytes": b.memory.get("Dirty"),
        "writeback_bytes": b.memory.get("Writeback"),
    }
    if b.disks:
        reads = writes = read_sectors = write_sectors = 0
        for name, (r, rs, w, ws) in b.disks.items():
            r0, rs0, w0, ws0 = a.disks.get(name, (r, rs, w, ws))
            reads += r - r0
            read_sectors += rs - rs0
            writes += w - w0
            write_sectors += ws - ws0
        out["disk"] = {
            "reads_per_s": reads / seconds,
            "writes_per_s": writes / seconds,
            # /proc/diskstats counts 512-byte sectors whatever the device
            "read_mb_per_s": read_sectors * 512 / 1e6 / seconds,
            "write_mb_per_s": write_sectors * 512 / 1e6 / seconds,
        }
    return out

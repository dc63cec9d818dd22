"""Multi-host runs on Dask: one benchmark driven from many client machines.

``pgsurge --dask tcp://SCHEDULER:8786 …`` runs any pgbench-style run on the
Dask workers that offer the ``pgsurge`` resource, one worker per load
host, and reports it as one run; ``--dask local:N`` starts a local cluster
of N workers on loopback. ``coordinator`` is the side of the command line,
``host`` the task on each load host, ``plan`` the layout and clocks as
plain data, ``intervals`` the per-interval deltas the hosts stream,
``progress`` the ``-P`` lines made of them, ``salvage`` what a lost host
leaves, ``watch`` the heartbeats both ways, ``signals`` the
coordinator's, ``clock`` the direct clock-offset exchange, ``cluster``
the Dask client's chores, ``logs`` the hosts' ``-l`` files and their
collection. Dask is an
optional extra (``pip install 'pgsurge[dask]'``); nothing here imports it
until a run asks for it.
"""

from __future__ import annotations

from pgsurge.distributed.coordinator import dask_driver

__all__ = ["dask_driver"]

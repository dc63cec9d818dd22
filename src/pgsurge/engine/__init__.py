"""One worker process of a run: its clients' state machine and event loop.

See ``ENGINE.md`` beside this file for the worker's flow, who owns a client
when (the Python loop or the C loop), the events that hand a client back,
and the checklist for changing the plain path. The modules, in the order
a transaction meets them:

* ``state`` — per-client and per-worker state, pgbench's CSTATE names;
* ``program`` — a parsed script turned into the ops a worker runs;
* ``sql``, ``meta``, ``tx`` — the steps of SQL commands, meta-commands and
  transaction accounting (retries, failures, logs);
* ``throttle`` — ``--rate`` and ``--latency-limit`` scheduling;
* ``client`` — ``advance``/``resume``: the reference state machine;
* ``loop`` — the Python event loop (waits on sockets, timers);
* ``fastpq``, ``fastloop`` — the C fast paths, and ``abi``, the contract
  between them and the Python reference;
* ``protocol`` — the messages between the parent and a worker;
* ``worker`` — a worker process from start to result.

The engine imports nothing of ``cli``, ``runner`` or ``report``.
"""

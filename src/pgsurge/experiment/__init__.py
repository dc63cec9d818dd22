"""Experiments: repeated and A/B runs, and the comparison of their results.

This package works on finished ``--json`` result documents only: it never
imports the engine, the workers or the report renderers of a run, and
``pgsurge ab`` runs each benchmark as a separate ``pgsurge`` process.

* ``stats``: the statistics, pure functions of per-run values (Welch's t
  on log values, exact permutation p-values, batch means, noise figures);
* ``results``: loading and validating result files into ``RunSummary``
  values, and the workload identity two results must share;
* ``compare``: a ``Comparison`` of two sides of runs, and its text and JSON
  renderings (pure functions of the finished comparison);
* ``ab``: the experiment runner behind ``pgsurge ab``;
* ``command``: ``pgsurge compare`` and ``pgsurge ab`` argument parsing and
  exit statuses;
* ``grid``, ``sweep``, ``sweep_report``, ``sweep_command``: ``pgsurge
  sweep`` (the ``--vary`` grid and its run order, the resumable runner on
  ``ab``'s machinery, the per-cell table and JSON, the command);
* ``knee``: one arm's interval and the knee of a client curve;
* ``capacity``: ``pgsurge capacity``, the highest ``-R`` meeting a
  latency target.
"""

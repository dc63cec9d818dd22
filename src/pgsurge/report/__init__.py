"""Reports: pure functions from a finished ``RunResult`` to text.

``text`` reproduces pgbench's report byte for byte; later formats (JSON,
HTML) render the same ``RunResult``.
"""

from pgsurge.report.text import render_abort_notice, render_banner, render_text

__all__ = ["render_abort_notice", "render_banner", "render_text"]

"""Every marked console example of README and the guide still runs, and its
output has the shape the page shows (tools/doc_examples.py --check)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.server, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def test_console_examples_run_and_keep_their_shape() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "doc_examples.py")],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "example(s) checked" in done.stderr

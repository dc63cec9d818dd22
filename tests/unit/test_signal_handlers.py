"""Signal handlers that must not deadlock (issue 21, item 16).

A Python signal handler runs in the main thread between two bytecodes of
whatever it interrupted, perhaps while that code holds a lock. Each check
runs in a fresh interpreter that delivers the signal from inside the
locked section, and is killed (its process group) if it hangs.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from tests.fix_run import plain_env

#: init's Output.write holds its lock while it writes to the stream: a
#: stream that signals itself on its first write runs the SIGINT handler
#: there (the stack of the hang: copy_in -> Progress -> Output.write)
_INIT_CHILD = textwrap.dedent(
    """
    import io, os, signal, sys
    from pgsurge.init import session

    class SignallingStream(io.StringIO):
        fired = False

        def write(self, text):
            if not SignallingStream.fired:
                SignallingStream.fired = True
                os.kill(os.getpid(), signal.SIGINT)  # handler runs here
            return super().write(text)

    class Conn:
        def cancel(self):
            pass

    class FakeSession:
        conn = Conn()

    stream = SignallingStream()
    out = session.Output(stream)
    session._OPEN.add(FakeSession())
    with session.cancel_on_interrupt(out):
        out.write("progress\\n")
    sys.stdout.write(stream.getvalue())
    """
)


#: ab's handler, run from inside a write to its stderr (which refuses a
#: write from inside itself, as a BufferedWriter does): the notice goes to
#: the descriptor, the interrupted write completes
_AB_CHILD = textwrap.dedent(
    """
    import io, os, signal
    from pgsurge.experiment.ab import Experiment

    class GuardedStream(io.TextIOBase):
        busy = fired = False

        def write(self, text):
            if self.busy:
                raise RuntimeError("reentrant write")
            self.busy = True
            try:
                if not self.fired:
                    self.fired = True
                    os.kill(os.getpid(), signal.SIGINT)  # handler runs here
                os.write(1, text.encode())
            finally:
                self.busy = False
            return len(text)

        def fileno(self):
            return 1

    experiment = Experiment(None, stderr=GuardedStream())
    restore = experiment._install()
    experiment.err.write("before\\n")
    restore()
    """
)


def _run_child(code: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=plain_env(),
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # a test that times out kills it
        proc.communicate()
        pytest.fail(f"deadlock: no exit within {timeout} s")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_init_sigint_inside_output_write_does_not_deadlock() -> None:
    """The cancel and its line come from outside the handler: the write
    that was interrupted completes, then "Cancel request sent"."""
    done = _run_child(_INIT_CHILD)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "progress\nCancel request sent\n", done.stderr


def test_ab_notice_is_not_written_through_the_stream() -> None:
    done = _run_child(_AB_CHILD)
    assert done.returncode == 0, done.stderr
    assert done.stdout == (
        "pgsurge ab: stopping after the current run "
        "(Ctrl-C again to stop it now and discard it)\nbefore\n"
    ), done.stderr


def test_parent_stop_counts_signals_through_the_report() -> None:
    """The run's first signal stops it gracefully, the second makes the
    Stop due at once; after the run one more is held (the report comes),
    and release_held puts the handler from before back."""
    from pgsurge.engine.interrupt import ParentStop, release_held

    killed: list[bool] = []
    before = signal.getsignal(signal.SIGINT)
    stopper = ParentStop(lambda: [], lambda: killed.append(True))
    with stopper:
        stopper.start_run()
        os.kill(os.getpid(), signal.SIGINT)
        assert stopper.signum == signal.SIGINT and stopper.stopping
        assert stopper.due() == 0  # the grace runs
        os.kill(os.getpid(), signal.SIGTERM)
        assert stopper.due() == 2  # the Stop, at once
        assert stopper.signum == signal.SIGINT  # the run's signal stays
    try:
        assert signal.getsignal(signal.SIGINT) is not before  # held
    finally:
        release_held()
    assert signal.getsignal(signal.SIGINT) is before
    assert not killed

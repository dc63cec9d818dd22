"""The C loop's ways back into the reference state machine.

``pgsurge._fastloop`` runs the plain case of the client states itself and
hands a client back to Python at the events listed in ENGINE.md ("Who
owns a client when", step 4), after writing everything back into the
:class:`~pgsurge.engine.state.Client`. When it is in the middle of a step
(a send done, a result read), ``advance`` cannot just take over where the
client's state says: ``resume`` first does what ``advance`` would have
done with what C saw, then calls ``advance``. ``gset`` stores a
``\\gset``/``\\aset`` value into a variable C does not hold, with
pgbench's messages on failure.

:func:`make_handback` builds both once per worker, from the same steps as
``advance`` (:func:`pgsurge.engine.client.make_engine` passes them), so
that the messages and states are exactly the reference's.
"""

from __future__ import annotations

from collections.abc import Callable

from pgsurge import pgconn
from pgsurge.engine.abi import (
    NEXT_STATE,
    R_WAIT,
    RESUME_CONNECT_FAILED,
    RESUME_FLUSH,
    RESUME_PREPARE_FAILED,
    RESUME_SEND_FAILED,
    RESUME_SYNC_FAILED,
)
from pgsurge.engine.sql import SqlSteps
from pgsurge.engine.state import (
    ABORTED,
    E_META,
    START_COMMAND,
    START_TX,
    WAIT_RESULT,
    Client,
    IoHooks,
    Support,
)

__all__ = ["Gset", "Resume", "make_handback"]

#: (client, event) -> None; see :func:`make_handback`
Resume = Callable[[Client, object], None]
#: (client, script, command, qrynum, got, context, name, value) -> stored?
Gset = Callable[[Client, int, int, int, int, str, str | None, str], bool]


def make_handback(
    io: IoHooks,
    sup: Support,
    sql: SqlSteps,
    advance: Callable[[Client], None],
) -> tuple[Resume, Gset]:
    """``resume`` and ``gset`` for one worker's clients (see
    ``pgsurge.engine.client.Engine`` for their contracts)."""
    error = sup.error
    command_failed = sup.command_failed
    store_variable = sup.store_variable
    after_drain = sql.after_drain

    def resume(st: Client, event: object) -> None:
        """The C loop hands ``st`` back in the middle of a step."""
        if event == RESUME_FLUSH:
            # as after a send in advance: wait for writability, then read
            io.want_write(st)
            st.state = WAIT_RESULT
        elif event == RESUME_SEND_FAILED:
            command_failed(st, "SQL", "SQL command send failed")
            st.state = ABORTED
        elif event == RESUME_SYNC_FAILED:
            # meta.run_meta's \\endpipeline whose flush failed
            command_failed(st, "endpipeline", "failed to send a pipeline sync")
            st.estatus = E_META
            st.state = ABORTED
        elif type(event) is str:
            # a \\gset/\\aset failed (its message given, or ``event``)
            if event:
                error(event)
            st.estatus = E_META
            st.state = ABORTED
        elif type(event) is tuple and 2 <= len(event) <= 3:
            code, payload = event[0], event[1]
            if code == RESUME_CONNECT_FAILED:
                # -C: the C loop could not open the transaction's connection
                # (tx.connect's messages): libpq's text when C opened it
                # itself, else the psycopg object C polled (or gave up on
                # at connect_timeout, still connecting)
                if type(payload) is bytes:
                    why = pgconn.connect_failure_message(payload)
                else:
                    failed = pgconn.Connecting(payload)
                    if not failed.bad and failed.several_hosts():
                        # given up at connect_timeout on one of several
                        # hosts: pgbench's blocking connect goes on to the
                        # next; tx.connect is that connect, from the host
                        # after this one (from the first when which one
                        # cannot be told), with its messages if all fail
                        rest = failed.rest_of_hosts()
                        if rest is not None:
                            began = event[2] if len(event) == 3 else 0
                            st.connect_rest = (rest, failed.timeout_message(), began)
                        failed.finish()
                        st.state = START_TX
                        advance(st)
                        return
                    why = failed.failure_message()
                    failed.finish()
                error(pgconn.strip_newline(why))
                error(f"client {st.id} aborted while establishing connection")
                st.state = ABORTED
            else:
                # -C: a pipeline's statement C prepared at \\startpipeline
                # failed (sql.prepare's message; it counts as prepared):
                # \\startpipeline prepares the others and starts it
                assert code == RESUME_PREPARE_FAILED
                error(pgconn.strip_newline(payload))
                st.state = START_COMMAND
        else:
            # what C's drain found (a count and a code, or a failed result):
            # what advance's WAIT_RESULT does with it
            r = after_drain(st, st.ops[st.command], event)
            st.state = NEXT_STATE[r]
            if r == R_WAIT:
                return
        advance(st)

    def gset(
        st: Client,
        script: int,
        command: int,
        qrynum: int,
        got: int,
        context: str,
        name: str | None,
        value: str,
    ) -> bool:
        """See ``Engine.gset`` (sql.store_gset's messages)."""
        where = f"client {st.id} script {script} command {command} query {qrynum}"
        if name is None:
            error(f"{where}: expected one row, got {got}")
            return False
        if store_variable(st, context, name, value):
            return True
        error(f"{where}: error storing into variable {name}")
        return False

    return resume, gset

/*
 * pgsurge._fastloop: a C-owned client's state machine.
 *
 * fl_advance() is pgsurge.engine.client's advance() for the plain case: script
 * choice, -R slots and -L skips, \set (constants, expressions),
 * \sleep, sending SQL with pgsurge._fastpq's libpq functions, reading the
 * results, first-try accounting, and the restart of the next transaction.
 * Anything else hands the client to Python (_fastloop_sync.c).
 *
 * All of it runs without the GIL (see fl_py in _fastloop.h) but where a
 * function says it takes it: a hand-back to Python, an error, -C's
 * connections Python opens or closes, the -l flushes.
 */

#include "_fastloop.h"

/* runs without the GIL (the text buffer is PyMem_Raw's); -3 with an
 * exception set (the GIL then held) */
static int
send_sql(FastLoop *fl, fl_client *c, const fl_op *op)
{
    const char *values[MAX_PARAMS];
    char ints[MAX_PARAMS][INT_TEXT];
    int i, ok;

    if (fl->mode == MODE_SIMPLE && op->lits != NULL) {
        /* the query text with the variables' values spliced in */
        char small[1024], *text = small;
        size_t len = 0, cap = sizeof small;

        for (i = 0; i <= op->nparams; i++) {
            const char *p = NULL;
            size_t n, m = (size_t)op->litlens[i];

            if (i < op->nparams) {
                p = fl_value_text(&c->vars[op->params[i]], ints[0]);
                n = strlen(p);
            } else
                n = 0;
            if (len + m + n + 1 > cap) {
                char *bigger;

                cap = (len + m + n + 1) * 2;
                bigger = PyMem_RawMalloc(cap);
                if (bigger == NULL) {
                    if (text != small)
                        PyMem_RawFree(text);
                    fl_nomem(fl);
                    return -3;
                }
                memcpy(bigger, text, len);
                if (text != small)
                    PyMem_RawFree(text);
                text = bigger;
            }
            memcpy(text + len, op->lits[i], m);
            len += m;
            if (p != NULL) {
                memcpy(text + len, p, n);
                len += n;
            }
        }
        text[len] = '\0';
        ok = pq->sendQuery(c->conn, text);
        if (text != small)
            PyMem_RawFree(text);
    } else if (fl->mode == MODE_SIMPLE) {
        ok = pq->sendQuery(c->conn, op->text);
    } else {
        for (i = 0; i < op->nparams; i++)
            values[i] = fl_value_text(&c->vars[op->params[i]], ints[i]);
        if (fl->mode == MODE_PREPARED)
            ok = pq->sendQueryPrepared(c->conn, op->text, op->nparams,
                                       op->nparams ? values : NULL, NULL, NULL, 0);
        else
            ok = pq->sendQueryParams(c->conn, op->text, op->nparams, NULL,
                                     op->nparams ? values : NULL, NULL, NULL, 0);
    }
    /* as pgsurge._fastpq: 0 all sent, 1 data left, -1 flush failed,
     * -2 send failed; in a pipeline the data goes with the next sync
     * (sql.queue_in_pipeline) */
    if (!ok)
        return -2;
    return c->in_pipeline ? 0 : pq->flush(c->conn);
}

static PyObject *
bytes_or_none(const char *s)
{
    if (s == NULL)
        Py_RETURN_NONE;
    return PyBytes_FromString(s);
}

/* The error result ``res`` of query ``q`` to Python (resume() classifies
 * it as read_results would): the client is handed back in WAIT_RESULT with
 * (q, status, sqlstate, message); ``res`` is cleared. The rare path, out
 * of the result loops. Takes the GIL. */
static int
hand_error(FastLoop *fl, int index, int q, int status, PGresult *res)
{
    PyObject *got;
    int r;

    fl_py(fl);
    got = Py_BuildValue("(iiNN)", q, status,
                        bytes_or_none(pq->resultErrorField(res, PG_DIAG_SQLSTATE)),
                        bytes_or_none(pq->resultErrorMessage(res)));
    pq->clear(res);
    if (got == NULL)
        return -1;
    fl->clients[index].qrynum = q;
    r = fl_to_python(fl, index, WAIT_RESULT, got);
    Py_DECREF(got);
    return r;
}

/* pgbench's getPoissonRand (pgsurge.engine.throttle.poisson_delay): the next
 * delay of the worker's schedule, from its throttle stream. The product
 * goes through a volatile so that no compiler fuses it with the addition
 * (an FMA rounds once, Python's code twice), whatever the build flags. */
static inline int64_t
poisson_delay(FastLoop *fl)
{
    double uniform = 1.0 - (double)(prng_next(&fl->t0, &fl->t1) >> 12) * TWO_M52;
    volatile double scaled = -log(uniform) * fl->throttle_delay;

    return (int64_t)(scaled + 0.5);
}

/* StatsData.record of a first-try success, or of a skipped slot */
static inline void
record(fl_stats *s, int64_t latency, int64_t lag, int skipped, int throttled)
{
    if (skipped) {
        s->skipped++;
        return;
    }
    s->cnt++;
    stats_add(&s->lat, latency);
    if (throttled)
        stats_add(&s->lag, lag);
}

/* TxLogWriter's line of a transaction C accounted (a success, or a slot
 * skipped under -L), after the sampling draw; the clock is read afresh,
 * as tx.process_xact (and pgbench's doLog) do; 0, or -1 with an error */
static int
log_line(FastLoop *fl, fl_client *c, int64_t latency, int64_t lag, int skipped)
{
    int64_t now;
    char *p;

    if (fl->sampling &&
        (double)(prng_next(&fl->l0, &fl->l1) >> 12) * TWO_M52 > fl->sample_rate)
        return 0;
    now = clock_us() + fl->epoch_shift;
    if (fl->agg_step > 0) {
        /* TxLogWriter's aggregate log: roll, then record */
        if (now >= fl->agg_start + fl->agg_step && fl_agg_roll(fl, now) < 0)
            return -1;
        record(&fl->agg, latency, lag, skipped, fl->throttled);
        return 0;
    }
    if (fl->loglen + 160 > fl->logcap && fl_log_flush(fl) < 0)
        return -1;
    /* "client cnt latency script sec usec [lag] [retries]", "skipped" in
     * the latency's place for a skipped slot (TxLogWriter.log) */
    p = put_int(fl->logbuf + fl->loglen, c->id);
    p = put_field(p, c->cnt);
    if (skipped) {
        memcpy(p, " skipped", 8);
        p += 8;
    } else
        p = put_field(p, latency);
    p = put_field(p, c->script);
    p = put_field(p, now / 1000000);
    p = put_field(p, now % 1000000);
    if (fl->log_lag)
        p = put_field(p, skipped ? 0 : lag);
    if (fl->log_retries)
        /* C accounts first tries only */
        p = put_field(p, 0);
    *p++ = '\n';
    fl->loglen = (size_t)(p - fl->logbuf);
    if (now - fl->log_flushed >= 1000000) {
        fl->log_flushed = now;
        if (fl_log_flush(fl) < 0)
            return -1;
    }
    return 0;
}

/* tx.py's process_xact for what C accounts (a first-try success, or
 * a slot skipped under -L): returns the clock, read if it was needed
 * (-1: an error is set) */
static int64_t
process_xact(FastLoop *fl, fl_client *c, int64_t now, int skipped)
{
    int64_t latency = 0, lag = 0;

    if (fl->detailed && !skipped) {
        if (!now)
            now = clock_us();
        latency = now - c->txn_scheduled;
        lag = c->txn_begin - c->txn_scheduled;
    }
    if (fl->recording && !skipped) {
        /* the recorder's histograms, as tx.process_xact */
        if (fl_hist_record(fl, &fl->hlat, latency) < 0 ||
            (fl->throttled && fl_hist_record(fl, &fl->hlag, lag) < 0) ||
            (fl->hscript != NULL && fl_hist_record(fl, &fl->hscript[c->script], latency) < 0))
            return -1;
    }
    record(&fl->total, latency, lag, skipped, fl->throttled);
    if (fl->latency_limit && latency > fl->latency_limit)
        fl->latency_late++;
    c->cnt++;
    c->skipped += skipped != 0;
    if (fl->txlog != NULL && log_line(fl, c, latency, lag, skipped) < 0)
        return -1;
    if (fl->per_script != NULL)
        record(&fl->per_script[c->script], latency, lag, skipped, fl->throttled);
    return now;
}

/* WAIT_RESULT of \endpipeline: sql.read_results in a pipeline, reading
 * every queued command's results up to the last sync, leaving pipeline
 * mode there. 1: all read; 0: the client waits, or was handed to Python
 * (an error result, a lost connection: resume() goes on as read_results
 * would); -1: error. */
static int
wait_pipeline(FastLoop *fl, int index)
{
    fl_client *c = &fl->clients[index];
    PGresult *res;
    int status, q = c->qrynum;

    if (!pq->consumeInput(c->conn))
        return fl_to_python_code(fl, index, WAIT_RESULT, (long)q * 4 + DRAIN_FAILED);
    for (;;) {
        if (pq->isBusy(c->conn)) {
            c->qrynum = q;
            c->state = WAIT_RESULT;
            return c->unwatched ? fl_watch(fl, index) : 0;
        }
        res = pq->getResult(c->conn);
        if (res == NULL) {
            c->qrynum = q;
            if (q == 0)
                /* "no results": Python's message */
                return fl_to_python_code(fl, index, WAIT_RESULT, DRAIN_DONE);
            if (c->in_pipeline) {
                q = 0; /* the next queued command */
                continue;
            }
            return 1;
        }
        status = pq->resultStatus(res);
        if (status == PGRES_TUPLES_OK || status == PGRES_COMMAND_OK ||
            status == PGRES_EMPTY_QUERY) {
            pq->clear(res);
            q++;
            continue;
        }
        if (status == PGRES_PIPELINE_SYNC) {
            pq->clear(res);
            if (--c->num_syncs == 0) {
                if (!pq->exitPipelineMode(c->conn)) {
                    /* Python logs this and stays in the pipeline, where
                     * the script's end aborts the client */
                    PyObject *msg;
                    int r;

                    fl_py(fl);
                    msg = PyUnicode_FromFormat("client %lld failed to exit pipeline mode: ",
                                               (long long)c->id);
                    if (msg == NULL)
                        return -1;
                    c->qrynum = q + 1;
                    r = fl_to_python(fl, index, WAIT_RESULT, msg);
                    Py_DECREF(msg);
                    return r;
                }
                c->in_pipeline = 0;
            }
            q++;
            continue;
        }
        /* an error: note_error classifies it (in a pipeline the ERROR
         * state discards up to a new sync) */
        return hand_error(fl, index, q, status, res);
    }
}

/* \startpipeline, \syncpipeline, \endpipeline (meta.run_meta): the next
 * state; PIPE_PREPARE when C sent the prepare of one of the pipeline's
 * statements first (under -C), -1 when Python must run the command (its
 * error messages, -M simple, the first prepares of the pipeline's
 * statements), -2 a prepare could not be sent */
#define PIPE_PREPARE 1000
static int
pipeline_command(FastLoop *fl, fl_client *c, const fl_script *sc, const fl_op *op)
{
    if (op->kind == OP_PSTART) {
        int j;

        if (fl->mode == MODE_SIMPLE || c->in_pipeline)
            return -1;
        if (fl->mode == MODE_PREPARED)
            /* the pipeline's statements are prepared before it starts
             * (meta.run_meta, one at a time); Python does it, or C on the
             * connections it opened under -C (without blocking) */
            for (j = c->command + 1; j < sc->nops; j++) {
                const fl_op *o = &sc->ops[j];

                if (o->kind == OP_PEND || o->kind == OP_END)
                    break;
                if (o->kind != OP_SQL || c->prepared[o->prep_bit])
                    continue;
                if (!fl->connect_each || o->sql == NULL ||
                    (c->pgobj == NULL && !c->rawconn))
                    return -1;
                if (!pq->sendPrepare(c->conn, o->text, o->sql, 0, NULL))
                    return -2;
                c->preparing = j + 1;
                return PIPE_PREPARE;
            }
        if (!pq->enterPipelineMode(c->conn))
            return -1;
        c->in_pipeline = 1;
        return END_COMMAND;
    }
    if (!c->in_pipeline || !pq->pipelineSync(c->conn))
        return -1;
    c->num_syncs++;
    if (op->kind == OP_PSYNC)
        return END_COMMAND;
    c->qrynum = 0;
    return WAIT_RESULT;
}

/* ---------------------------------------------------------------------- */
/* -C: a connection per transaction, opened without blocking              */

/* -C, one connection at a time (fl->connect_concurrent 0): wait for what
 * libpq asked of the socket, as pgbench's PQconnectdb waits in its
 * thread, without the GIL. Also woken by what the loop must not miss: the
 * control descriptor (the parent's stop), the signal wakeup descriptor (a
 * stop, -T's end on a thread), a signal (EINTR), and connect_timeout.
 * 1 the socket is ready; 0 not (the loop takes over: the client waits in
 * CONNECTING, on the epoll set, and the loop sees what woke it). */
static int
connect_wait(FastLoop *fl, fl_client *c, int fd, int reading)
{
    struct pollfd p[3];
    int n = 0, timeout_ms = -1, r;
    int64_t t0;

    p[n].fd = fd;
    p[n].events = reading ? POLLIN : POLLOUT;
    p[n++].revents = 0;
    if (fl->control_fd >= 0) {
        p[n].fd = fl->control_fd;
        p[n].events = POLLIN;
        p[n++].revents = 0;
    }
    if (fl->signal_fd >= 0) {
        p[n].fd = fl->signal_fd;
        p[n].events = POLLIN;
        p[n++].revents = 0;
    }
    if (fl->connect_timeout_us > 0) {
        int64_t left = c->conn_begin + fl->connect_timeout_us - clock_us();

        if (left <= 0)
            return 0;
        timeout_ms = (int)((left + 999) / 1000);
    }
    /* (the worker is idle meanwhile, as in the loop's waits: its busy
     * share must not count it, or every -C run looks client-bound) */
    t0 = clock_us();
    if (fl->saved == NULL) {
        /* held (a Python workload's loop, or a connection Python's
         * start() opened): given up while this thread waits */
        PyThreadState *ts = PyEval_SaveThread();

        r = poll(p, (nfds_t)n, timeout_ms);
        PyEval_RestoreThread(ts);
    } else
        r = poll(p, (nfds_t)n, timeout_ms);
    fl->idle_us += clock_us() - t0;
    if (r <= 0)
        return 0; /* connect_timeout, or a signal: the loop looks */
    for (r = 1; r < n; r++)
        if (p[r].revents)
            return 0;
    return p[0].revents != 0;
}

/* PQconnectPoll until the connection is open (tx.connect), waiting for
 * it in the worker (connect_wait), or, side by side (connect_concurrent)
 * or when something woke the wait, until libpq waits for the socket:
 * 1 connected; 0 the client waits in CONNECTING, or was handed to Python
 * (it could not connect: resume gives pgbench's messages and aborts it);
 * -1 error */
static int
connect_poll(FastLoop *fl, int index)
{
    fl_client *c = &fl->clients[index];
    int r = pq->connectPoll(c->conn), fd = pq->socket(c->conn), waited = 0;

    while (!fl->connect_concurrent && fd >= 0 &&
           (r == PGRES_POLLING_READING || r == PGRES_POLLING_WRITING) &&
           connect_wait(fl, c, fd, r == PGRES_POLLING_READING)) {
        r = pq->connectPoll(c->conn);
        fd = pq->socket(c->conn);
        waited = 1;
    }

    if (r == PGRES_POLLING_OK && pq->setnonblocking(c->conn, 1) == 0)
        /* (in the set for reading already, as a local socket usually is
         * once libpq waited for the server's answer; not after a wait
         * here, which may have gone on to another host: its socket may
         * have the old one's number, which the set no longer has) */
        return (waited || fd != c->fd || c->conn_events != EPOLLIN) &&
                       fl_conn_watch(fl, index, fd, EPOLLIN) < 0
                   ? -1
                   : 1;
    if (r == PGRES_POLLING_OK || r == PGRES_POLLING_FAILED) {
        PyObject *event;

        /* it could not connect: to Python (takes the GIL) */
        if (fl_conn_watch(fl, index, -1, 0) < 0)
            return -1;
        fl_py(fl);
        if (c->rawconn) {
            /* libpq's message for Python (bytes); C frees the connection */
            event = Py_BuildValue("(iy)", RESUME_CONNECT_FAILED, pq->errorMessage(c->conn));
            pq->finish(c->conn);
            c->rawconn = 0;
        } else
            /* Python reads libpq's message and frees it */
            event = Py_BuildValue("(iO)", RESUME_CONNECT_FAILED, c->pgobj);
        if (event == NULL)
            return -1;
        Py_CLEAR(c->pgobj);
        c->conn = NULL;
        r = fl_to_python(fl, index, START_TX, event);
        Py_DECREF(event);
        return r < 0 ? -1 : 0;
    }
    if (fl_conn_watch(fl, index, fd, r == PGRES_POLLING_READING ? EPOLLIN : EPOLLOUT) < 0)
        return -1;
    c->state = CONNECTING;
    return 0;
}

/* START_TX without a connection: PQconnectStart (Python's psycopg object,
 * set_connect's start), then poll it at once (libpq's first wait is for
 * writing, which a local socket is at once); as connect_poll */
static int
connect_start(FastLoop *fl, int index)
{
    fl_client *c = &fl->clients[index];
    PyObject *obj, *p;
    void *ptr;

    if (fl->connect_timeout_us > 0) {
        /* the loop looks for connections past connect_timeout from the
         * earliest deadline on (fl_connect_timeouts) */
        int64_t deadline = c->conn_begin + fl->connect_timeout_us;

        if (!fl->connect_deadline || deadline < fl->connect_deadline)
            fl->connect_deadline = deadline;
    }
    if (fl->raw_type != NULL) {
        /* libpq's PQconnectStart from C: no Python call, no psycopg
         * object (libpq's own notice processor writes notices to stderr,
         * as pgconn._write_notice does) */
        /* (the conninfo bytes live as long as the loop: their buffer
         * is read without the GIL) */
        c->conn = pq->connectStart(PyBytes_AS_STRING(fl->conninfo));
        if (c->conn == NULL)
            return fl_nomem(fl);
        c->rawconn = 1;
        fl->raw_connects++;
        memset(c->prepared, 0, (size_t)fl->nprep);
        return connect_poll(fl, index);
    }
    /* Python's start(): takes the GIL per connection */
    fl_py(fl);
    obj = PyObject_CallOneArg(fl->conn_start, fl->conninfo);
    if (obj == NULL)
        return -1;
    p = PyObject_GetAttr(obj, s_pgconn_ptr);
    ptr = p == NULL ? NULL : PyLong_AsVoidPtr(p);
    Py_XDECREF(p);
    if (ptr == NULL) {
        Py_DECREF(obj);
        if (!PyErr_Occurred())
            PyErr_NoMemory();
        return -1;
    }
    c->pgobj = obj;
    c->conn = (PGconn *)ptr;
    memset(c->prepared, 0, (size_t)fl->nprep);
    return connect_poll(fl, index);
}

/* -C's connect_timeout (fl->connect_timeout_us > 0): each client whose
 * connection is still opening past it is given up, as libpq's blocking
 * connect gives it up in pgbench's -C: handed to Python with psycopg's
 * object of the connection, still connecting (handback.py words it as
 * libpq's "timeout expired", naming the server), and aborted there. Sets
 * fl->connect_deadline to the earliest deadline of those still opening
 * (0: none) for the loop's wait (connect_start lowers it for a new one),
 * so that the loop scans the clients once a deadline passed, not at every
 * wake-up; -1 with an exception. Takes the GIL for a client given up. */
int
fl_connect_timeouts(FastLoop *fl)
{
    int64_t now = clock_us(), next = 0;
    int i;

    for (i = 0; i < fl->nclients; i++) {
        fl_client *c = &fl->clients[i];
        PyObject *obj, *event;
        int64_t deadline;
        int r;

        if (c->owner != OWN_C || c->state != CONNECTING || c->conn == NULL ||
            (!c->rawconn && c->pgobj == NULL))
            continue;
        deadline = c->conn_begin + fl->connect_timeout_us;
        if (deadline > now) {
            if (!next || deadline < next)
                next = deadline;
            continue;
        }
        if (fl_conn_watch(fl, i, -1, 0) < 0)
            return -1;
        fl_py(fl);
        if (c->rawconn) {
            /* the object owns (and finishes) the connection from here */
            obj = fl_wrap_raw(fl, c->conn);
            if (obj == NULL)
                return -1;
            c->rawconn = 0;
        } else
            obj = Py_NewRef(c->pgobj);
        Py_CLEAR(c->pgobj);
        c->conn = NULL;
        /* with when the attempt began: Python goes on to the next host
         * of several and counts the whole wait as connection time, as
         * pgbench's blocking connect does */
        event = Py_BuildValue("(iNL)", RESUME_CONNECT_FAILED, obj, (long long)c->conn_begin);
        if (event == NULL)
            return -1;
        r = fl_to_python(fl, i, START_TX, event);
        Py_DECREF(event);
        if (r < 0)
            return -1;
    }
    fl->connect_deadline = next;
    return 0;
}

/* -T's end (or a stop, which sets the same flag) under -C: each client
 * whose connection is still opening END_GRACE_US after the end is given
 * up and finishes without a transaction, as one in THROTTLE does: its
 * transaction would begin after the end. pgbench's blocking PQconnectdb
 * waits on, so a server that accepted and never answered (no
 * connect_timeout) kept pgbench and pgsurge running forever past -T
 * (hostile finding); the connection time of an attempt given up is not
 * counted (no connection came of it). Called by the loop at each
 * iteration from the grace's end on (no C client starts a connection
 * after timer_exceeded: CHOOSE_SCRIPT and THROTTLE finish first, so the
 * scans after the first find none); -1 with an exception. Takes the GIL
 * for a client given up. */
int
fl_connect_give_up(FastLoop *fl)
{
    int i;

    for (i = 0; i < fl->nclients; i++) {
        fl_client *c = &fl->clients[i];

        if (c->owner != OWN_C || c->state != CONNECTING)
            continue;
        if (fl_conn_watch(fl, i, -1, 0) < 0)
            return -1;
        if (c->rawconn) {
            pq->finish(c->conn);
            c->rawconn = 0;
        } else if (c->pgobj != NULL) {
            PyObject *r;

            fl_py(fl);
            r = PyObject_CallMethodNoArgs(c->pgobj, s_finish);
            Py_CLEAR(c->pgobj);
            if (r == NULL)
                return -1;
            Py_DECREF(r);
        }
        c->conn = NULL;
        if (fl_to_python(fl, i, FINISHED, NULL) < 0)
            return -1;
    }
    return 0;
}

/* END_TX under -C: close the transaction's connection (tx.disconnect),
 * the time it took into the connection time; *now is the clock after.
 * Runs without the GIL for a connection C opened itself (set_connect_raw);
 * takes it to close one of Python's (psycopg's object, or the client's
 * own first connection). */
static int
connect_release(FastLoop *fl, int index, int64_t *now)
{
    fl_client *c = &fl->clients[index];
    int64_t start = *now ? *now : clock_us();

    if (c->rawconn) {
        if (fl_conn_forget(fl, index) < 0)
            return -1;
        pq->finish(c->conn);
        c->rawconn = 0;
    } else if (c->pgobj != NULL || c->conn != NULL) {
        PyObject *r;

        fl_py(fl);
        if (c->pgobj != NULL) {
            if (fl_conn_forget(fl, index) < 0)
                return -1;
            r = PyObject_CallMethodNoArgs(c->pgobj, s_finish);
            Py_CLEAR(c->pgobj);
        } else {
            /* Python's (the client's first, or one it had when C took it) */
            if (fl_fd_publish(fl, index) < 0)
                return -1;
            r = PyObject_CallOneArg(fl->conn_release, c->st);
            if (r != NULL && fl_refresh_fd(fl, index) < 0)
                Py_CLEAR(r);
        }
        if (r == NULL)
            return -1;
        Py_DECREF(r);
    }
    c->conn = NULL;
    memset(c->prepared, 0, (size_t)fl->nprep);
    *now = clock_us();
    fl->conn_us += *now - start;
    return 0;
}

/* A prepare of C's (under -C) did not go well: hand the client to Python
 * in WAIT_RESULT as if its send_sql had sent it (drain_state PREPARING),
 * with libpq's message when a result failed: finish_prepare (or read_lost)
 * reads the rest, reports it as pgbench does, and sends the query.
 * Takes the GIL. */
static int
prepare_to_python(FastLoop *fl, int index, int failed, int flush)
{
    fl_client *c = &fl->clients[index];
    const char *msg = failed || c->command + 1 != c->preparing ? pq->errorMessage(c->conn)
                                                               : NULL;
    PyObject *text;
    int r;

    fl_py(fl);
    text = PyUnicode_DecodeUTF8(msg ? msg : "", msg ? (Py_ssize_t)strlen(msg) : 0,
                                "surrogateescape");
    if (text == NULL)
        return -1;
    if (c->command + 1 != c->preparing) {
        /* a statement of a pipeline, prepared at \startpipeline: its
         * failure is reported (pgbench's blocking PQprepare), it counts as
         * prepared, and Python prepares the others and starts the pipeline */
        PyObject *event;

        c->prepared[fl->scripts[c->script].ops[c->preparing - 1].prep_bit] = 1;
        event = Py_BuildValue("(iN)", RESUME_PREPARE_FAILED, text);
        if (event == NULL)
            return -1;
        r = fl_to_python(fl, index, START_COMMAND, event);
        Py_DECREF(event);
        return r;
    }
    r = PyObject_SetAttr(c->st, s_drain_msg, text);
    Py_DECREF(text);
    if (r < 0 || PyObject_SetAttr(c->st, s_drain_state, fl->preparing) < 0)
        return -1;
    /* flush: the prepare is not all sent, resume waits for writability */
    return flush ? fl_to_python_code(fl, index, WAIT_RESULT, RESUME_FLUSH)
                 : fl_to_python(fl, index, WAIT_RESULT, NULL);
}

/* WAIT_RESULT of C's prepare: 1 prepared (the query is sent next); 0 the
 * client waits, or was handed to Python; -1 error */
static int
wait_prepare(FastLoop *fl, int index, const fl_op *op)
{
    fl_client *c = &fl->clients[index];
    PGresult *res;
    int status, pushed;

    if (c->command + 1 != c->preparing) {
        /* a pipeline's statement, on a connection C opened (its socket
         * C's to watch): the prepare may be partly sent yet */
        if ((pushed = pq->flush(c->conn)) < 0)
            return prepare_to_python(fl, index, 1, 0);
        if (pushed > 0 || (c->conn_events & EPOLLOUT)) {
            if (fl_conn_watch(fl, index, c->fd, pushed ? EPOLLIN | EPOLLOUT : EPOLLIN) < 0)
                return -1;
            if (pushed) {
                c->state = WAIT_RESULT;
                return 0;
            }
        }
    }
    if (!pq->consumeInput(c->conn))
        /* lost: libpq's words now (Python's read of the dead connection
         * would add its "connection not open" to them) */
        return prepare_to_python(fl, index, 1, 0);
    for (;;) {
        if (pq->isBusy(c->conn)) {
            c->state = WAIT_RESULT;
            return c->unwatched ? fl_watch(fl, index) : 0;
        }
        res = pq->getResult(c->conn);
        if (res == NULL)
            break;
        status = pq->resultStatus(res);
        pq->clear(res);
        if (status != PGRES_COMMAND_OK)
            return prepare_to_python(fl, index, 1, 0);
    }
    c->preparing = 0;
    c->prepared[op->prep_bit] = 1;
    return 1;
}

/* C's int of a C int's bits (cnum.wrap_int32): how the x86 binary wraps */
static inline int64_t
c_int(int64_t v)
{
    return (int32_t)(uint32_t)(uint64_t)v;
}

/* Advance a C-owned client until it must wait, as client.advance does.
 * On return the client either waits for its socket (WAIT_RESULT) or a
 * deadline (SLEEP, THROTTLE: in the timers), is runnable (CHOOSE_SCRIPT,
 * queued), or belongs to Python (filed). Runs without the GIL but where
 * a step hands the client to Python or calls it (those take it). */
int
fl_advance(FastLoop *fl, int index)
{
    fl_client *c = &fl->clients[index];
    const fl_script *sc = &fl->scripts[c->script];
    int64_t now = 0;
    int state = c->state, jump = -1;
    /* the query after C's prepare: the same command, its clock kept */
    int resend = 0, r_conn;

    for (;;) {
        switch (state) {
        case END_COMMAND:
            if (fl->per_command) {
                /* the command's latency (client.py's END_COMMAND), from a
                 * fresh reading: a result that came in before the first
                 * look after the send must not count as taking no time */
                now = clock_us();
                stats_add(&sc->ops[c->command].cmd, now - c->stmt_begin);
                if (sc->ops[c->command].rec.obj != NULL &&
                    fl_hist_record(fl, &sc->ops[c->command].rec, now - c->stmt_begin) < 0)
                    return -1;
            }
            if (jump >= 0) {
                c->command = jump;
                jump = -1;
            } else
                c->command++;
            state = START_COMMAND;
            /* fall through */
        case START_COMMAND: {
            const fl_op *op = &sc->ops[c->command];
            int sent;

            if (op->kind == OP_END) {
                if (c->in_pipeline)
                    /* Python's "end of script reached with pipeline open" */
                    return fl_to_python(fl, index, START_COMMAND, NULL);
                state = END_TX;
                continue;
            }
            if (op->kind >= OP_PY) {
                /* a Python transaction: its generator says what comes next
                 * (_fastloop_gen.c); a batch's ops are Python's */
                if (op->kind == OP_PYONLY)
                    return fl_to_python(fl, index, START_COMMAND, NULL);
                if ((sent = fl_gen_step(fl, index, &state)) <= 0)
                    return sent;
                now = 0;
                continue;
            }
            if (fl->per_command && !resend) {
                /* fresh too, as client.py's START_COMMAND (but for the
                 * query after C's prepare, which keeps its command's clock) */
                now = clock_us();
                c->stmt_begin = now;
            }
            resend = 0;
            if (op->kind == OP_SET_CONST || op->kind == OP_SET_RANDOM) {
                fl_value *var = &c->vars[op->slot];

                var->i = op->kind == OP_SET_CONST ? op->a
                                                  : prng_range(&c->s0, &c->s1, op->a, op->b);
                var->type = FV_INT;
                var->assigned = 1;
                c->assigned = 1;
                now = 0;
                state = END_COMMAND;
                continue;
            }
            if (op->kind >= OP_PSTART) {
                state = pipeline_command(fl, c, sc, op);
                if (state == -2)
                    return fl_to_python_code(fl, index, START_COMMAND, RESUME_SEND_FAILED);
                if (state < 0)
                    return fl_to_python(fl, index, START_COMMAND, NULL);
                if (state == PIPE_PREPARE) {
                    /* wait for the prepare's result (wait_prepare flushes
                     * it), then \startpipeline again (its clock kept) */
                    state = WAIT_RESULT;
                    continue;
                }
                if (state == WAIT_RESULT) {
                    /* \endpipeline: push the queued commands and the sync */
                    int r = pq->flush(c->conn);

                    if (r < 0)
                        return fl_to_python_code(fl, index, START_COMMAND,
                                                 RESUME_SYNC_FAILED);
                    if (r > 0)
                        return fl_to_python_code(fl, index, WAIT_RESULT, RESUME_FLUSH);
                }
                now = 0;
                continue;
            }
            if (op->kind >= OP_SET_EXPR) {
                /* \set of an expression, \if, \elif, \else, \endif */
                fl_value v;

                if (op->kind == OP_SET_EXPR ||
                    (op->kind == OP_IF && (!op->is_elif || c->eval_elif))) {
                    uint64_t s0 = c->s0, s1 = c->s1;

                    if (fl_eval(c, op->code, op->ncode, &v)) {
                        /* Python evaluates it again, from the same state */
                        c->s0 = s0;
                        c->s1 = s1;
                        return fl_to_python(fl, index, START_COMMAND, NULL);
                    }
                    if (op->kind == OP_SET_EXPR) {
                        fl_var_assign(&c->vars[op->slot], &v);
                        c->assigned = 1;
                    } else {
                        c->eval_elif = 0;
                        if (!fl_truth(&v)) {
                            jump = op->false_next;
                            c->eval_elif = op->false_to_elif;
                        }
                    }
                } else if (op->kind == OP_IF || op->kind == OP_ELSE)
                    /* an \elif or \else after a true branch */
                    jump = op->end_next;
                now = 0;
                state = END_COMMAND;
                continue;
            }
            if (op->kind == OP_SLEEP_CONST || op->kind == OP_SLEEP_VAR) {
                /* meta.sleep_usec; the clock is not re-read after */
                int64_t usec = op->a;

                if (op->kind == OP_SLEEP_VAR) {
                    char buf[INT_TEXT];
                    const char *text = fl_value_text(&c->vars[op->slot], buf);

                    if (text == NULL)
                        /* not a value C holds: Python's sleep */
                        return fl_to_python(fl, index, START_COMMAND, NULL);
                    /* meta.sleep_usec: atoi() of the variable's text */
                    usec = atoi(text);
                    if (usec == 0 && !(text[0] >= '0' && text[0] <= '9'))
                        /* not a number: Python gives pgbench's error */
                        return fl_to_python(fl, index, START_COMMAND, NULL);
                    usec = c_int(usec * op->a);
                }
                if (!now)
                    now = clock_us();
                c->sleep_until = now + usec;
                state = SLEEP;
                continue;
            }
            if (c->in_pipeline && op->gset)
                /* Python's "\gset is not allowed in pipeline mode" */
                return fl_to_python(fl, index, START_COMMAND, NULL);
            if (fl->mode == MODE_PREPARED && !c->prepared[op->prep_bit]) {
                int r;

                if (!fl->connect_each || op->sql == NULL || c->in_pipeline)
                    /* its first use on this connection: Python prepares it */
                    return fl_to_python(fl, index, START_COMMAND, NULL);
                /* -C: every transaction's connection is new; C prepares
                 * without blocking, as sql.send_sql does, then sends */
                if (!pq->sendPrepare(c->conn, op->text, op->sql, 0, NULL))
                    return fl_to_python_code(fl, index, START_COMMAND, RESUME_SEND_FAILED);
                c->preparing = c->command + 1;
                c->qrynum = 0;
                r = pq->flush(c->conn);
                if (r < 0)
                    return fl_to_python_code(fl, index, START_COMMAND, RESUME_SEND_FAILED);
                if (r > 0)
                    return prepare_to_python(fl, index, 0, 1);
                state = WAIT_RESULT;
                continue;
            }
            {
                int i;

                for (i = 0; i < op->nparams; i++)
                    if (c->vars[op->params[i]].type == FV_NONE)
                        /* a value C does not hold: Python sends it */
                        return fl_to_python(fl, index, START_COMMAND, NULL);
            }
            sent = fl->gen != NULL ? fl_gen_send(fl, index, op) : send_sql(fl, c, op);
            if (sent == -3)
                return -1;
            c->qrynum = 0;
            if (sent < 0)
                return fl_to_python_code(fl, index, START_COMMAND, RESUME_SEND_FAILED);
            if (sent > 0)
                /* wait for writability: Python's slower path does it */
                return fl_to_python_code(fl, index, WAIT_RESULT, RESUME_FLUSH);
            /* in a pipeline only queued: its results are read at the sync */
            state = c->in_pipeline ? END_COMMAND : WAIT_RESULT;
            continue;
        }
        case WAIT_RESULT: {
            /* pgsurge._fastpq's drain(), and what advance does with it */
            PGresult *res;
            int status, q = c->qrynum;

            if (c->preparing) {
                int r = wait_prepare(fl, index, &sc->ops[c->preparing - 1]);

                if (r <= 0)
                    return r;
                resend = 1;
                state = START_COMMAND;
                continue;
            }
            if (fl->gen != NULL) {
                int r = fl_gen_wait(fl, index);

                if (r <= 0)
                    return r;
                state = END_COMMAND;
                continue;
            }
            if (sc->ops[c->command].kind == OP_PEND) {
                int r = wait_pipeline(fl, index);

                if (r <= 0)
                    return r;
                state = END_COMMAND;
                continue;
            }
            if (sc->ops[c->command].gset) {
                int r = fl_wait_gset(fl, index, (fl_op *)&sc->ops[c->command]);

                if (r <= 0)
                    return r;
                state = END_COMMAND;
                continue;
            }

            if (!pq->consumeInput(c->conn))
                return fl_to_python_code(fl, index, WAIT_RESULT, (long)q * 4 + DRAIN_FAILED);
            for (;;) {
                if (pq->isBusy(c->conn)) {
                    c->qrynum = q;
                    c->state = WAIT_RESULT;
                    /* sent while out of the epoll set (absorb) */
                    return c->unwatched ? fl_watch(fl, index) : 0;
                }
                res = pq->getResult(c->conn);
                if (res == NULL)
                    break;
                status = pq->resultStatus(res);
                if (status == PGRES_TUPLES_OK || status == PGRES_COMMAND_OK ||
                    status == PGRES_EMPTY_QUERY) {
                    pq->clear(res);
                    q++;
                    continue;
                }
                return hand_error(fl, index, q, status, res);
            }
            c->qrynum = q;
            if (!q)
                return fl_to_python_code(fl, index, WAIT_RESULT, DRAIN_DONE);
            state = END_COMMAND;
            continue;
        }
        case SLEEP:
            if (!now)
                now = clock_us();
            if (now < c->sleep_until) {
                c->state = SLEEP;
                fl_timer_push(fl, c->sleep_until, index);
                return 0;
            }
            state = END_COMMAND;
            continue;
        case END_TX: {
            if (pq->transactionStatus(c->conn) != PQTRANS_IDLE)
                /* left open, or a broken connection: Python accounts the
                 * transaction and aborts the client with its message */
                return fl_to_python(fl, index, END_TX, NULL);
            if (!fl->throttled && fl->per_script == NULL && fl->txlog == NULL) {
                /* the inline accounting of advance() */
                fl->total.cnt++;
                c->cnt++;
                if (fl->detailed) {
                    int64_t latency;

                    if (!now)
                        now = clock_us();
                    latency = now - c->txn_scheduled;
                    stats_add(&fl->total.lat, latency);
                    if (fl->latency_limit && latency > fl->latency_limit)
                        fl->latency_late++;
                    if (fl->recording && fl_hist_record(fl, &fl->hlat, latency) < 0)
                        return -1;
                } else
                    fl->total.lat.count++;
            } else if ((now = process_xact(fl, c, now, 0)) < 0)
                return -1;
            if (fl->connect_each && connect_release(fl, index, &now) < 0)
                return -1;
            if (fl->use_end ? fl->timer_exceeded : c->cnt >= fl->nxacts)
                return fl_to_python(fl, index, FINISHED, NULL);
            /* as pgbench, back to the loop after every transaction: the
             * next one starts in the loop's next round (the loop's
             * comment says why that matters) */
            c->state = CHOOSE_SCRIPT;
            fl->runq[fl->nrunq++] = index;
            return 0;
        }
        case CHOOSE_SCRIPT:
            if (fl->nscripts != 1) {
                /* tx.choose_script */
                int64_t wv = prng_range(&fl->c0, &fl->c1, 0, fl->total_weight - 1);
                int i = 0;

                do
                    wv -= fl->weights[i++];
                while (wv >= 0);
                c->script = i - 1;
                sc = &fl->scripts[c->script];
            }
            if (fl->timer_exceeded)
                return fl_to_python(fl, index, FINISHED, NULL);
            state = fl->throttled ? PREPARE_THROTTLE : START_TX;
            continue;
        case PREPARE_THROTTLE:
            /* the next slot of the worker's schedule */
            fl->trigger += poisson_delay(fl);
            c->txn_scheduled = fl->trigger;
            if (fl->latency_limit) {
                if (!now)
                    now = clock_us();
                if (fl->trigger < now - fl->latency_limit) {
                    /* too late already: skipped (throttle.is_late) */
                    if ((now = process_xact(fl, c, now, 1)) < 0)
                        return -1;
                    if (fl->timer_exceeded || (fl->nxacts > 0 && c->cnt >= fl->nxacts))
                        return fl_to_python(fl, index, FINISHED, NULL);
                    continue;
                }
            }
            if (fl->end_us && c->txn_scheduled > fl->end_us)
                return fl_to_python(fl, index, FINISHED, NULL);
            state = THROTTLE;
            /* fall through */
        case THROTTLE:
            if (!now)
                now = clock_us();
            if (now < c->txn_scheduled) {
                c->state = THROTTLE;
                fl_timer_push(fl, c->txn_scheduled, index);
                return 0;
            }
            if (fl->timer_exceeded)
                return fl_to_python(fl, index, FINISHED, NULL);
            state = START_TX;
            /* fall through */
        case START_TX:
            if (c->conn == NULL) {
                /* -C: a new connection for the transaction (the time
                 * until it is open is connection time, not latency) */
                if (!now)
                    now = clock_us();
                c->conn_begin = now;
                if ((r_conn = connect_start(fl, index)) <= 0)
                    return r_conn;
                now = clock_us();
                fl->conn_us += now - c->conn_begin;
            }
            if (fl->tx_clock && !now)
                now = clock_us();
            if (fl->save_rng) {
                c->saved0 = c->s0;
                c->saved1 = c->s1;
            }
            c->txn_begin = now;
            if (!fl->throttled)
                c->txn_scheduled = now;
            c->command = 0;
            state = START_COMMAND;
            continue;
        case CONNECTING:
            /* -C: its socket is ready for what libpq asked */
            if ((r_conn = connect_poll(fl, index)) <= 0)
                return r_conn;
            now = clock_us();
            fl->conn_us += now - c->conn_begin;
            /* START_TX, its connection open */
            state = START_TX;
            continue;
        default:
            fl_py(fl);
            PyErr_Format(PyExc_AssertionError, "C-owned client in state %d", state);
            return -1;
        }
    }
}

/* hand_error for _fastloop_gen.c */
int
fl_hand_error(FastLoop *fl, int index, int q, int status, PGresult *res)
{
    return hand_error(fl, index, q, status, res);
}

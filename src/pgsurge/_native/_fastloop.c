/*
 * pgsurge._fastloop: a worker's event loop and the common case of its
 * clients' state machine, in C.
 *
 * The Python engine (pgsurge.engine.loop.EventLoop.run driving the advance()
 * closure of pgsurge.engine.client) is the reference. For runs that
 * pgsurge.engine.fastloop finds eligible (scripts of SQL commands, \gset,
 * \aset, \sleep, \set and \if of expressions of any type, pipelines;
 * -C; histograms, series and -l lines included: see there and
 * pgsurge/engine/ENGINE.md) this module
 * runs the same loop, and runs every transaction that goes as planned
 * without entering Python at all -- throttled ones (-R, -L) included.
 *
 * Ownership. Each client is, at any time, owned either by Python or by C.
 * Every client starts owned by Python. When a Python-owned client is due
 * to choose its next script (CHOOSE_SCRIPT), or its throttle slot has come
 * (THROTTLE: Python's advance() goes on from a transaction into the next
 * slot's wait), C takes it over: it loads the
 * client's counters, PRNG state, its variables (typed slots) and which
 * statements its connection has prepared from the Python Client object.
 * From then on C runs its transactions: script choice with the worker's
 * choose stream, \set, sending the SQL with pgsurge._fastpq's libpq
 * functions, reading the results, accounting the transaction. Whenever
 * anything is not the plain case -- a statement not prepared yet on this
 * connection, an error result, a lost connection, a send that cannot be
 * flushed at once, a transaction left open, the end of the client's run --
 * C writes everything back into the Client object (state, command, result
 * count, timestamps, counters, variables, PRNG state) and hands the client
 * to Python: either to advance() itself, or to the engine's resume(), which
 * does with a result C has already read what advance() would have done.
 * The client stays Python-owned until it reaches CHOOSE_SCRIPT or THROTTLE
 * again, or until it waits for a result or a \sleep in a later
 * transaction than the one C handed it back in: Python's advance() goes
 * from one transaction straight into the next, so C takes the client back
 * there, with the transaction's position (command, result count,
 * timestamps) loaded too.
 *
 * Shared worker state. The worker's total and per-script stats, its
 * choose stream and, under -R, its throttle stream and schedule
 * (throttle_trigger), -L's late count and -r's latencies of each command
 * (on the script's Op objects) are shared between the clients,
 * whoever owns them: a slot is drawn by whichever client reaches
 * PREPARE_THROTTLE next, Python's or C's. C keeps
 * working copies (the same doubles, added in the same order) and writes
 * them back before any call into Python (advance, resume, absorbing a
 * notice) and before returning; it reloads them afterwards. The SimpleStats
 * min/max keep their Python type (an int once a latency was recorded, the
 * initial float otherwise), so what Python reads is what its own code would
 * have left.
 *
 * The loop itself follows EventLoop.run step by step: the same epoll
 * instance (Python's Waiter registers and modifies the descriptors, C only
 * waits on it -- but for the connections C opens under -C, whose sockets
 * it registers itself until Python adopts them), the same runnable queue and its order, the same heap of
 * timers ordered by (deadline, client id) for \sleep and throttle slots,
 * of Python's clients as of C's, the same order of a round (ready sockets,
 * due timers, the runnable queue, the progress tick), the same wait
 * timeouts and idle accounting, the same clock (CLOCK_MONOTONIC in whole
 * microseconds, as time.monotonic_ns() // 1000). Progress ticks are left
 * to Python: run() returns TICK when one is due and is called again.
 * Signals: pgsurge.engine.fastloop points signal.set_wakeup_fd at a pipe
 * whose read end is in the epoll set while the loop runs (set_signal_fd);
 * when it is readable, or a wait was interrupted, C runs Python's handlers
 * (PyErr_CheckSignals) and reads the worker's timer_exceeded, which the
 * SIGALRM handler sets (the end of -T) -- without that descriptor (not the
 * main thread, or someone else's), after every wait. A KeyboardInterrupt
 * propagates as an exception.
 *
 * The waits: epoll_wait, or epoll_pwait2 when there is a deadline (its
 * timeout in nanoseconds, as Python's Waiter; ppoll and a fetch where the
 * kernel lacks it). The GIL is given up around a blocking wait only when
 * the interpreter has another thread, which a worker has not.
 */

/*
 * This file is the module (the FastLoop type, construction, the interned
 * names); the other parts are listed in _fastloop.h.
 */

#include "_fastloop.h"

#include <fcntl.h>

const pgsurge_fastpq_api *pq;

/* interned attribute names */
PyObject *s_state, *s_script, *s_ops, *s_command, *s_qrynum, *s_cnt,
    *s_txn_scheduled, *s_txn_begin, *s_estatus, *s_tries, *s_saved_rng, *s_rng,
    *s_variables, *s_ptr, *s_fd, *s_prepared, *s_flush_pending, *s_drain_state,
    *s_in_pipeline, *s_count, *s_min, *s_max, *s_sum, *s_sum2, *s_latency,
    *s_timer_exceeded, *s_getstate, *s_setstate, *s_stats, *s_per_script,
    *s_choose_rng, *s_throttle_rng, *s_throttle_trigger, *s_latency_late,
    *s_skipped, *s_lag, *s_sleep_until, *s_stmt_begin, *s_unwatched, *s_layout,
    *s_add_counts, *s_eval_elif, *s_meta_failed, *s_id, *s_write_chunk, *s_current,
    *s_roll_to, *s_start_us, *s_pending, *s_num_syncs, *s_conn, *s_drain_msg,
    *s_conn_total_us, *s_pgconn_ptr, *s_finish, *s_shared_variables,
    *s_set_client_id, *s_client_id;

/* ---------------------------------------------------------------------- */
/* Construction                                                           */

static int
stats_init(fl_stats *s, PyObject *data)
{
    s->data = data;
    Py_INCREF(data);
    s->lat.obj = PyObject_GetAttr(data, s_latency);
    if (s->lat.obj == NULL)
        return -1;
    s->lag.obj = PyObject_GetAttr(data, s_lag);
    return s->lag.obj == NULL ? -1 : 0;
}

/* -r: the working copies of script k's commands' latencies, on the stats
 * of its Python ops (script_ops[k][i].stats.latency: the END op has none) */
static int
command_stats(FastLoop *fl, Py_ssize_t k)
{
    PyObject *ops = PyTuple_GET_ITEM(fl->script_ops, k), *stats;
    fl_script *sc = &fl->scripts[k];
    int i;

    if (!PyTuple_Check(ops) || PyTuple_GET_SIZE(ops) != sc->nops) {
        PyErr_SetString(PyExc_ValueError, "script_ops do not match the plan");
        return -1;
    }
    for (i = 0; i < sc->nops - 1; i++) {
        stats = PyObject_GetAttr(PyTuple_GET_ITEM(ops, i), s_stats);
        if (stats == NULL)
            return -1;
        sc->ops[i].cmd.obj = PyObject_GetAttr(stats, s_latency);
        Py_DECREF(stats);
        if (sc->ops[i].cmd.obj == NULL)
            return -1;
    }
    return 0;
}

/* The loop holds its hooks, which hold the worker's engine and event loop,
 * which holds the loop: a cycle the collector must be able to break. */
static int
FastLoop_traverse(FastLoop *fl, visitproc visit, void *arg)
{
    int i, k;

    for (i = 0; i < fl->nclients && fl->clients != NULL; i++)
        Py_VISIT(fl->clients[i].st);
    if (fl->per_script != NULL)
        for (k = 0; k < fl->nscripts; k++) {
            Py_VISIT(fl->per_script[k].data);
            Py_VISIT(fl->per_script[k].lat.obj);
            Py_VISIT(fl->per_script[k].lag.obj);
        }
    for (k = 0; k < fl->nscripts && fl->scripts != NULL; k++)
        for (i = 0; i < fl->scripts[k].nops; i++) {
            Py_VISIT(fl->scripts[k].ops[i].cmd.obj);
            Py_VISIT(fl->scripts[k].ops[i].rec.obj);
        }
    if (fl->hscript != NULL)
        for (k = 0; k < fl->nscripts; k++)
            Py_VISIT(fl->hscript[k].obj);
    Py_VISIT(fl->hlat.obj);
    Py_VISIT(fl->hlag.obj);
    Py_VISIT(fl->total.data);
    Py_VISIT(fl->total.lat.obj);
    Py_VISIT(fl->total.lag.obj);
    Py_VISIT(fl->script_ops);
    Py_VISIT(fl->var_names);
    Py_VISIT(fl->keep);
    Py_VISIT(fl->wstate);
    Py_VISIT(fl->choose_rng);
    Py_VISIT(fl->throttle_rng);
    Py_VISIT(fl->conn_start);
    Py_VISIT(fl->conn_adopt);
    Py_VISIT((PyObject *)fl->raw_type);
    Py_VISIT(fl->conn_release);
    Py_VISIT(fl->advance);
    Py_VISIT(fl->resume);
    Py_VISIT(fl->absorb);
    Py_VISIT(fl->gset_hook);
    Py_VISIT(fl->slot_of);
    Py_VISIT(fl->shared_vars);
    Py_VISIT(fl->txlog);
    Py_VISIT(fl->sample_rng);
    Py_VISIT(fl->agg.data);
    Py_VISIT(fl->agg.lat.obj);
    Py_VISIT(fl->agg.lag.obj);
    return 0;
}

/* Drop every reference (run() is not called again on a cleared loop; the
 * plan's ops point into ``keep``, which stays until deallocation). */
static int
FastLoop_clear(FastLoop *fl)
{
    int i, k;

    for (i = 0; i < fl->nclients && fl->clients != NULL; i++) {
        Py_CLEAR(fl->clients[i].st);
        /* -C: a connection C opened that Python never adopted (psycopg
         * closes it) */
        Py_CLEAR(fl->clients[i].pgobj);
        if (fl->clients[i].rawconn && pq != NULL) {
            pq->finish(fl->clients[i].conn);
            fl->clients[i].rawconn = 0;
            fl->clients[i].conn = NULL;
        }
    }
    Py_CLEAR(fl->raw_type);
    Py_CLEAR(fl->conninfo);
    Py_CLEAR(fl->conn_start);
    Py_CLEAR(fl->conn_adopt);
    Py_CLEAR(fl->conn_release);
    Py_CLEAR(fl->preparing);
    fl_gen_free(fl);
    if (fl->per_script != NULL)
        for (k = 0; k < fl->nscripts; k++) {
            Py_CLEAR(fl->per_script[k].data);
            Py_CLEAR(fl->per_script[k].lat.obj);
            Py_CLEAR(fl->per_script[k].lag.obj);
        }
    for (k = 0; k < fl->nscripts && fl->scripts != NULL; k++)
        for (i = 0; i < fl->scripts[k].nops; i++) {
            Py_CLEAR(fl->scripts[k].ops[i].cmd.obj);
            Py_CLEAR(fl->scripts[k].ops[i].rec.obj);
        }
    if (fl->hscript != NULL)
        for (k = 0; k < fl->nscripts; k++)
            Py_CLEAR(fl->hscript[k].obj);
    Py_CLEAR(fl->hlat.obj);
    Py_CLEAR(fl->hlag.obj);
    Py_CLEAR(fl->total.data);
    Py_CLEAR(fl->total.lat.obj);
    Py_CLEAR(fl->total.lag.obj);
    Py_CLEAR(fl->script_ops);
    Py_CLEAR(fl->var_names);
    Py_CLEAR(fl->wstate);
    Py_CLEAR(fl->choose_rng);
    Py_CLEAR(fl->throttle_rng);
    Py_CLEAR(fl->advance);
    Py_CLEAR(fl->resume);
    Py_CLEAR(fl->absorb);
    Py_CLEAR(fl->gset_hook);
    Py_CLEAR(fl->slot_of);
    Py_CLEAR(fl->shared_vars);
    Py_CLEAR(fl->txlog);
    Py_CLEAR(fl->sample_rng);
    Py_CLEAR(fl->agg.data);
    Py_CLEAR(fl->agg.lat.obj);
    Py_CLEAR(fl->agg.lag.obj);
    return 0;
}

static void
FastLoop_dealloc(FastLoop *fl)
{
    int i, j, k;

    PyObject_GC_UnTrack(fl);
    FastLoop_clear(fl);
    for (i = 0; i < fl->nclients && fl->clients != NULL; i++)
        if (fl->clients[i].pending != NULL && pq != NULL)
            pq->clear(fl->clients[i].pending);

    PyMem_Free(fl->clients);
    if (fl->varstore != NULL)
        for (i = 0; i < fl->nclients * fl->nvars; i++)
            PyMem_RawFree(fl->varstore[i].s); /* fl_var_set_text's */
    PyMem_Free(fl->varstore);
    PyMem_Free(fl->prepstore);
    for (k = 0; k < fl->nscripts && fl->scripts != NULL; k++) {
        for (i = 0; i < fl->scripts[k].nops; i++) {
            PyMem_Free(fl->scripts[k].ops[i].params);
            PyMem_Free((void *)fl->scripts[k].ops[i].lits);
            PyMem_Free(fl->scripts[k].ops[i].litlens);
            fl_hist_free(&fl->scripts[k].ops[i].rec);
            PyMem_Free(fl->scripts[k].ops[i].code);
            for (j = 0; j < GSET_CACHE; j++)
                PyMem_Free(fl->scripts[k].ops[i].colname[j]);
        }
        PyMem_Free(fl->scripts[k].ops);
    }
    if (fl->hscript != NULL)
        for (k = 0; k < fl->nscripts; k++)
            fl_hist_free(&fl->hscript[k]);
    PyMem_Free(fl->hscript);
    fl_hist_free(&fl->hlat);
    fl_hist_free(&fl->hlag);
    PyMem_Free(fl->scripts);
    PyMem_Free(fl->per_script);
    PyMem_Free(fl->weights);
    PyMem_RawFree(fl->by_fd); /* map_fd's, grown without the GIL */
    PyMem_Free(fl->runq);
    PyMem_Free(fl->batch);
    PyMem_Free(fl->events);
    PyMem_Free(fl->timers);
    PyMem_Free(fl->logbuf);
    Py_XDECREF(fl->keep);
    Py_TYPE(fl)->tp_free((PyObject *)fl);
}

/* -l: (writer, epoch_shift_us, sample_rate, sample_rng, lag, retries,
 * aggregate_interval_us) -- pgsurge.engine.fastloop._log_spec */
static int
log_init(FastLoop *fl, PyObject *log)
{
    PyObject *writer, *rng;
    long long shift, step;
    int lag, retries;

    if (fl->txlog != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "the log is set already");
        return -1;
    }
    if (!PyArg_ParseTuple(log, "OLdOiiL", &writer, &shift, &fl->sample_rate, &rng, &lag,
                          &retries, &step))
        return -1;
    fl->epoch_shift = shift;
    fl->log_lag = lag;
    fl->log_retries = retries;
    fl->sampling = fl->sample_rate >= 0.0;
    if (fl->sampling) {
        if (rng == Py_None) {
            PyErr_SetString(PyExc_ValueError, "sampling needs its stream");
            return -1;
        }
        fl->sample_rng = rng;
        Py_INCREF(rng);
        if (fl_shared_load_sampling(fl) < 0)
            return -1;
    }
    fl->agg_step = step;
    if (step <= 0) {
        fl->logcap = 1 << 16;
        fl->logbuf = PyMem_Malloc(fl->logcap);
        if (fl->logbuf == NULL) {
            PyErr_NoMemory();
            return -1;
        }
    }
    Py_INCREF(writer);
    fl->txlog = writer;
    /* the writer's current interval, loaded */
    return step > 0 ? fl_agg_roll(fl, INT64_MIN) : 0;
}

/* set_signal_fd(fd): see FastLoop_methods */
static PyObject *
FastLoop_set_signal_fd(FastLoop *fl, PyObject *arg)
{
    long fd = PyLong_AsLong(arg);
    struct epoll_event ev;

    if (fd == -1 && PyErr_Occurred())
        return NULL;
    if (fd < -1 || fd > INT_MAX) {
        PyErr_SetString(PyExc_ValueError, "not a descriptor");
        return NULL;
    }
    if (fl->signal_fd >= 0) {
        /* a descriptor closed since is out of the set already */
        if (epoll_ctl(fl->epfd, EPOLL_CTL_DEL, fl->signal_fd, NULL) < 0 && errno != ENOENT &&
            errno != EBADF)
            return PyErr_SetFromErrno(PyExc_OSError);
        fl->signal_fd = -1;
    }
    if (fd >= 0) {
        memset(&ev, 0, sizeof ev);
        ev.events = EPOLLIN;
        ev.data.fd = (int)fd;
        if (epoll_ctl(fl->epfd, EPOLL_CTL_ADD, (int)fd, &ev) < 0)
            return PyErr_SetFromErrno(PyExc_OSError);
        fl->signal_fd = (int)fd;
    }
    Py_RETURN_NONE;
}

/* set_connect_raw(probe): see FastLoop_methods. The PGconn pointer of
 * psycopg's object is found in its memory: the one pointer-sized field
 * that holds the probe's pgconn_ptr; a new object of the type must hold
 * NULL there and read back through pgconn_ptr what C writes. Anything
 * else (another implementation of psycopg.pq, a layout with no such
 * field) leaves -C's connections to start(). */
static PyObject *
FastLoop_set_connect_raw(FastLoop *fl, PyObject *probe)
{
    PyTypeObject *tp = Py_TYPE(probe);
    PyObject *p, *obj, *args, *back;
    void *ptr, *got;
    Py_ssize_t off, found = 0;
    int n = 0;

    if (pq == NULL || pq->connectStart == NULL)
        Py_RETURN_FALSE;
    p = PyObject_GetAttr(probe, s_pgconn_ptr);
    if (p == NULL)
        return NULL;
    ptr = p == Py_None ? NULL : PyLong_AsVoidPtr(p);
    Py_DECREF(p);
    if (ptr == NULL) {
        PyErr_Clear();
        Py_RETURN_FALSE;
    }
    if (tp->tp_new == NULL || tp->tp_itemsize != 0)
        Py_RETURN_FALSE;
    for (off = (Py_ssize_t)sizeof(PyObject);
         off + (Py_ssize_t)sizeof(void *) <= tp->tp_basicsize;
         off += (Py_ssize_t)sizeof(void *))
        if (*(void **)((char *)probe + off) == ptr) {
            found = off;
            n++;
        }
    if (n != 1)
        Py_RETURN_FALSE;
    args = PyTuple_New(0);
    if (args == NULL)
        return NULL;
    obj = tp->tp_new(tp, args, NULL);
    Py_DECREF(args);
    if (obj == NULL) {
        PyErr_Clear();
        Py_RETURN_FALSE;
    }
    if (*(void **)((char *)obj + found) != NULL) {
        Py_DECREF(obj);
        Py_RETURN_FALSE;
    }
    /* written, read back through psycopg's getter, and cleared again
     * before the object goes (it would finish the probe's connection) */
    *(void **)((char *)obj + found) = ptr;
    back = PyObject_GetAttr(obj, s_pgconn_ptr);
    *(void **)((char *)obj + found) = NULL;
    got = back == NULL || back == Py_None ? NULL : PyLong_AsVoidPtr(back);
    Py_XDECREF(back);
    Py_DECREF(obj);
    PyErr_Clear();
    if (got != ptr)
        Py_RETURN_FALSE;
    Py_INCREF(tp);
    Py_XSETREF(fl->raw_type, tp);
    fl->raw_offset = found;
    Py_RETURN_TRUE;
}

/* open_all: one connection being opened (what PQconnectPoll asked for) */
enum { RAMP_IDLE = 0, RAMP_WAIT, RAMP_OK, RAMP_FAILED };

typedef struct {
    PGconn *conn;
    int state, fd;
    /* failed without a message while the open-file limit was reached (a
     * failed socket() leaves libpq's message empty); tested then, before
     * the other connections are closed */
    int at_limit;
    int64_t begin;
} ramp_conn;

static void
ramp_failed(ramp_conn *r)
{
    const char *msg = pq->errorMessage(r->conn);

    r->state = RAMP_FAILED;
    if (msg == NULL || *msg == '\0') {
        int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);

        if (fd >= 0)
            close(fd);
        else
            r->at_limit = errno == EMFILE || errno == ENFILE;
    }
}

/* PQconnectPoll one connection (first == 1: not yet, libpq documents a
 * wait for writing first) and watch its socket for what libpq waits for;
 * 0, or -1 with an exception */
static int
ramp_poll(ramp_conn *r, int ep, int index, int first)
{
    struct epoll_event ev;
    int p;

    if (first)
        p = pq->status(r->conn) == CONNECTION_BAD ? PGRES_POLLING_FAILED
                                                  : PGRES_POLLING_WRITING;
    else {
        /* without the GIL: a step may block (a TLS handshake, the next
         * address's connect), and the other workers' threads and the
         * main thread's signal handlers run meanwhile */
        Py_BEGIN_ALLOW_THREADS
        p = pq->connectPoll(r->conn);
        Py_END_ALLOW_THREADS
    }

    if (p == PGRES_POLLING_OK) {
        r->state = RAMP_OK;
        return 0;
    }
    r->fd = pq->socket(r->conn);
    if (p == PGRES_POLLING_FAILED || r->fd < 0) {
        ramp_failed(r);
        return 0;
    }
    memset(&ev, 0, sizeof ev);
    ev.events = p == PGRES_POLLING_READING ? EPOLLIN : EPOLLOUT;
    ev.data.u32 = (uint32_t)index;
    if (epoll_ctl(ep, EPOLL_CTL_ADD, r->fd, &ev) < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    r->state = RAMP_WAIT;
    return 0;
}

/* open_all(conninfo, count, window, timeout_us): see FastLoop_methods
 * (pgsurge.engine.ramp.open_connections is the Python reference) */
static PyObject *
FastLoop_open_all(FastLoop *fl, PyObject *args)
{
    const char *info;
    int count, window, i, ep = -1, next = 0, inflight = 0, failed = -1;
    long long timeout_us;
    ramp_conn *rc = NULL;
    struct epoll_event evs[64];
    PyObject *out = NULL;

    if (!PyArg_ParseTuple(args, "yiiL", &info, &count, &window, &timeout_us))
        return NULL;
    if (fl->raw_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "open_all without set_connect_raw");
        return NULL;
    }
    if (count < 0 || window < 1) {
        PyErr_SetString(PyExc_ValueError, "open_all: bad count or window");
        return NULL;
    }
    rc = PyMem_Calloc((size_t)count + 1, sizeof *rc);
    ep = epoll_create1(EPOLL_CLOEXEC);
    if (rc == NULL || ep < 0) {
        if (rc == NULL)
            PyErr_NoMemory();
        else
            PyErr_SetFromErrno(PyExc_OSError);
        goto done;
    }
    for (;;) {
        int n, wait_ms = -1;

        /* start more while none failed (the lowest failure is reported;
         * what is in flight still ends, to be closed) */
        while (next < count && inflight < window && failed < 0) {
            ramp_conn *r = &rc[next];

            /* without the GIL: the host name is resolved here, blocking */
            Py_BEGIN_ALLOW_THREADS
            r->conn = pq->connectStart(info);
            Py_END_ALLOW_THREADS
            if (r->conn == NULL) {
                PyErr_NoMemory();
                goto done;
            }
            fl->raw_connects++;
            r->begin = clock_us();
            if (ramp_poll(r, ep, next, 1) < 0)
                goto done;
            if (r->state == RAMP_WAIT)
                inflight++;
            else if (r->state == RAMP_FAILED && failed < 0)
                failed = next;
            next++;
        }
        if (inflight == 0)
            break;
        if (timeout_us > 0) {
            int64_t oldest = INT64_MAX, now = clock_us();

            for (i = 0; i < next; i++)
                if (rc[i].state == RAMP_WAIT && rc[i].begin < oldest)
                    oldest = rc[i].begin;
            wait_ms = oldest + timeout_us <= now
                          ? 0
                          : (int)((oldest + timeout_us - now) / 1000 + 1);
        }
        /* the wait without the GIL: the workers are threads of one process
         * (engine/threaded.py), whose connects go on together and whose
         * main thread runs the signal handlers (a Ctrl-C while the clients
         * connect ends the run at once) */
        {
            int err;

            Py_BEGIN_ALLOW_THREADS
            n = epoll_wait(ep, evs, 64, wait_ms);
            err = errno;
            Py_END_ALLOW_THREADS
            errno = err;
        }
        if (n < 0) {
            if (errno != EINTR) {
                PyErr_SetFromErrno(PyExc_OSError);
                goto done;
            }
            /* a signal: Python's handler (a stop) runs now */
            if (PyErr_CheckSignals() < 0)
                goto done;
            continue;
        }
        for (i = 0; i < n; i++) {
            int k = (int)evs[i].data.u32;
            ramp_conn *r = &rc[k];

            /* out of the set before polling: libpq may close this socket
             * and open another (the next address of a host) */
            (void)epoll_ctl(ep, EPOLL_CTL_DEL, r->fd, NULL);
            inflight--;
            if (ramp_poll(r, ep, k, 0) < 0)
                goto done;
            if (r->state == RAMP_WAIT)
                inflight++;
            else if (r->state == RAMP_FAILED && (failed < 0 || k < failed))
                failed = k;
        }
        if (timeout_us > 0) {
            int64_t now = clock_us();

            for (i = 0; i < next; i++)
                if (rc[i].state == RAMP_WAIT && now - rc[i].begin >= timeout_us) {
                    (void)epoll_ctl(ep, EPOLL_CTL_DEL, rc[i].fd, NULL);
                    inflight--;
                    /* libpq's blocking connect says "timeout expired" */
                    rc[i].state = RAMP_FAILED;
                    rc[i].fd = -2;
                    if (failed < 0 || i < failed)
                        failed = i;
                }
        }
    }
    if (failed >= 0 && rc[failed].fd == -2) {
        /* timed out: psycopg's object, for Python to name the server as
         * libpq's blocking connect does (pgconn.timeout_text) */
        PyObject *obj = fl_wrap_raw(fl, rc[failed].conn);

        if (obj != NULL) {
            rc[failed].conn = NULL;
            out = Py_BuildValue("(iNi)", failed, obj, 0);
        }
        goto done;
    }
    if (failed >= 0) {
        const char *msg = pq->errorMessage(rc[failed].conn);

        out = Py_BuildValue("(iyi)", failed, msg != NULL ? msg : "", rc[failed].at_limit);
        goto done;
    }
    out = PyList_New(count);
    if (out == NULL)
        goto done;
    for (i = 0; i < count; i++) {
        PyObject *obj = fl_wrap_raw(fl, rc[i].conn);

        if (obj == NULL) {
            Py_CLEAR(out);
            goto done;
        }
        /* the object owns it from here */
        rc[i].conn = NULL;
        PyList_SET_ITEM(out, i, obj);
    }
done:
    if (ep >= 0)
        close(ep);
    if (rc != NULL) {
        for (i = 0; i < count; i++)
            if (rc[i].conn != NULL)
                pq->finish(rc[i].conn);
        PyMem_Free(rc);
    }
    return out;
}

/* set_connect(spec): see FastLoop_methods */
static PyObject *
FastLoop_set_connect(FastLoop *fl, PyObject *spec)
{
    PyObject *info, *start, *adopt, *release, *preparing;
    long long timeout_us = 0;
    int concurrent = 0;

    if (fl->started) {
        PyErr_SetString(PyExc_RuntimeError, "set_connect after run()");
        return NULL;
    }
    if (!PyArg_ParseTuple(spec, "SOOOO|Lp", &info, &start, &adopt, &release, &preparing,
                          &timeout_us, &concurrent))
        return NULL;
    fl->connect_concurrent = concurrent;
    fl->connect_timeout_us = timeout_us > 0 ? timeout_us : 0;
    Py_INCREF(info);
    Py_INCREF(start);
    Py_INCREF(adopt);
    Py_INCREF(release);
    Py_INCREF(preparing);
    Py_XSETREF(fl->conninfo, info);
    Py_XSETREF(fl->conn_start, start);
    Py_XSETREF(fl->conn_adopt, adopt);
    Py_XSETREF(fl->conn_release, release);
    Py_XSETREF(fl->preparing, preparing);
    fl->connect_each = 1;
    Py_RETURN_NONE;
}

static PyObject *
FastLoop_set_log(FastLoop *fl, PyObject *log)
{
    if (log_init(fl, log) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/*
 * FastLoop(clients, script_ops, plan, wstate, hooks, epoll_fd, control_fd,
 *          flags[, hists])
 *
 * plan: (var_names, nset, weights, scripts) -- see pgsurge.engine.fastloop;
 * hooks: (advance, resume, absorb[, gset]); flags: (mode, nxacts, end_us,
 * detailed, tx_clock, save_rng, exit_on_abort,
 * latency_limit_us, throttle_delay, per_command) -- throttle_delay a float
 * (pgsurge.engine.abi.RunFlags); hists: None, or the recorder's histograms
 * (latency, lag, per-script tuple, per-command tuple of tuples) --
 * pgsurge.stats.series.WorkerRecorder.targets().
 */
static int
hists_init(FastLoop *fl, PyObject *hists)
{
    PyObject *per_script, *per_command;
    int i, k;

    if (!PyTuple_Check(hists) || PyTuple_GET_SIZE(hists) != 4)
        goto bad;
    per_script = PyTuple_GET_ITEM(hists, 2);
    per_command = PyTuple_GET_ITEM(hists, 3);
    if (!PyTuple_Check(per_script) || !PyTuple_Check(per_command) ||
        PyTuple_GET_SIZE(per_script) != fl->nscripts ||
        PyTuple_GET_SIZE(per_command) != fl->nscripts)
        goto bad;
    fl->recording = 1;
    if (fl_hist_init(&fl->hlat, PyTuple_GET_ITEM(hists, 0)) < 0 ||
        fl_hist_init(&fl->hlag, PyTuple_GET_ITEM(hists, 1)) < 0)
        return -1;
    if (fl->nscripts > 1) {
        fl->hscript = PyMem_Calloc(fl->nscripts, sizeof(fl_hist));
        if (fl->hscript == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        for (k = 0; k < fl->nscripts; k++)
            if (fl_hist_init(&fl->hscript[k], PyTuple_GET_ITEM(per_script, k)) < 0)
                return -1;
    }
    if (!fl->per_command)
        return 0;
    for (k = 0; k < fl->nscripts; k++) {
        PyObject *cmds = PyTuple_GET_ITEM(per_command, k);

        if (!PyTuple_Check(cmds) || PyTuple_GET_SIZE(cmds) != fl->scripts[k].nops - 1)
            goto bad;
        for (i = 0; i < fl->scripts[k].nops - 1; i++)
            if (fl_hist_init(&fl->scripts[k].ops[i].rec, PyTuple_GET_ITEM(cmds, i)) < 0)
                return -1;
    }
    return 0;
bad:
    PyErr_SetString(PyExc_ValueError, "malformed fast loop histograms");
    return -1;
}

/* The variables the clients share until they write one
 * (WorkerState.shared_variables, None when each has its own), and the slot
 * of client_id, which a client sharing them takes from its id */
static int
shared_vars_init(FastLoop *fl, PyObject *wstate)
{
    PyObject *shared, *flag, *slot;

    fl->client_id_slot = -1;
    shared = PyObject_GetAttr(wstate, s_shared_variables);
    if (shared == NULL)
        return -1;
    if (shared == Py_None) {
        Py_DECREF(shared);
        return 0;
    }
    if (!PyDict_CheckExact(shared)) {
        Py_DECREF(shared);
        PyErr_SetString(PyExc_TypeError, "shared_variables must be a dict or None");
        return -1;
    }
    fl->shared_vars = shared;
    flag = PyObject_GetAttr(wstate, s_set_client_id);
    if (flag == NULL)
        return -1;
    fl->set_client_id = PyObject_IsTrue(flag);
    Py_DECREF(flag);
    if (fl->set_client_id <= 0)
        return fl->set_client_id;
    slot = PyDict_GetItemWithError(fl->slot_of, s_client_id);
    if (slot != NULL)
        fl->client_id_slot = (int)PyLong_AsLong(slot);
    return PyErr_Occurred() ? -1 : 0;
}

static PyObject *
FastLoop_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    PyObject *clients, *script_ops, *plan, *wstate, *hooks, *flags, *hists = NULL,
             *log = NULL;
    PyObject *scripts, *weights, *per_script, *total;
    int epfd, control_fd, nprep = 0, per_command;
    long long f[8];
    double delay;
    Py_ssize_t i, k;
    FastLoop *fl;

    if (kwds != NULL && PyDict_GET_SIZE(kwds)) {
        PyErr_SetString(PyExc_TypeError, "FastLoop() takes no keyword arguments");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "O!O!O!OO!iiO!|OO", &PyList_Type, &clients, &PyTuple_Type,
                          &script_ops, &PyTuple_Type, &plan, &wstate, &PyTuple_Type,
                          &hooks, &epfd, &control_fd, &PyTuple_Type, &flags, &hists,
                          &log))
        return NULL;
    if (pq == NULL || !pq->bound) {
        PyErr_SetString(PyExc_RuntimeError, "pgsurge._fastpq is not bound");
        return NULL;
    }
    if ((PyTuple_GET_SIZE(hooks) != 3 && PyTuple_GET_SIZE(hooks) != 4) ||
        PyTuple_GET_SIZE(plan) != 4 ||
        !PyArg_ParseTuple(flags, "LLLLLLLLdi", &f[0], &f[1], &f[2], &f[3], &f[4],
                          &f[5], &f[6], &f[7], &delay, &per_command)) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "malformed fast loop arguments");
        return NULL;
    }
    fl = (FastLoop *)type->tp_alloc(type, 0);
    if (fl == NULL)
        return NULL;
    fl->mode = (int)f[0];
    fl->nxacts = f[1];
    fl->end_us = f[2];
    fl->use_end = f[2] != 0;
    fl->detailed = (int)f[3];
    fl->tx_clock = (int)f[4];
    fl->save_rng = (int)f[5];
    fl->exit_on_abort = (int)f[6];
    fl->latency_limit = f[7];
    fl->throttle_delay = delay;
    fl->throttled = delay > 0.0;
    fl->per_command = per_command;
    fl->epfd = epfd;
    fl->control_fd = control_fd;
    fl->signal_fd = -1;
    Py_INCREF(plan);
    fl->keep = plan;
    Py_INCREF(script_ops);
    fl->script_ops = script_ops;
    Py_INCREF(wstate);
    fl->wstate = wstate;
    fl->advance = PyTuple_GET_ITEM(hooks, 0);
    fl->resume = PyTuple_GET_ITEM(hooks, 1);
    fl->absorb = PyTuple_GET_ITEM(hooks, 2);
    Py_INCREF(fl->advance);
    Py_INCREF(fl->resume);
    Py_INCREF(fl->absorb);
    if (PyTuple_GET_SIZE(hooks) == 4) {
        fl->gset_hook = PyTuple_GET_ITEM(hooks, 3);
        Py_INCREF(fl->gset_hook);
    }

    fl->var_names = PyTuple_GET_ITEM(plan, 0);
    Py_INCREF(fl->var_names);
    fl->nset = (int)PyLong_AsLong(PyTuple_GET_ITEM(plan, 1));
    weights = PyTuple_GET_ITEM(plan, 2);
    scripts = PyTuple_GET_ITEM(plan, 3);
    if (PyErr_Occurred())
        goto fail;
    if (!PyTuple_Check(fl->var_names) || PyTuple_GET_SIZE(fl->var_names) > INT_MAX / 2 ||
        !PyTuple_Check(weights) || !PyTuple_Check(scripts) ||
        PyTuple_GET_SIZE(scripts) != PyTuple_GET_SIZE(weights) ||
        PyTuple_GET_SIZE(scripts) != PyTuple_GET_SIZE(script_ops) ||
        PyTuple_GET_SIZE(scripts) < 1) {
        PyErr_SetString(PyExc_ValueError, "malformed fast loop plan");
        goto fail;
    }
    fl->nvars = (int)PyTuple_GET_SIZE(fl->var_names);
    if (fl->nset < 0 || fl->nset > fl->nvars) {
        PyErr_SetString(PyExc_ValueError, "malformed fast loop plan");
        goto fail;
    }
    /* {name: slot}, for \gset */
    fl->slot_of = PyDict_New();
    if (fl->slot_of == NULL)
        goto fail;
    for (i = 0; i < fl->nvars; i++) {
        PyObject *slot = PyLong_FromSsize_t(i);

        if (slot == NULL ||
            PyDict_SetItem(fl->slot_of, PyTuple_GET_ITEM(fl->var_names, i), slot) < 0) {
            Py_XDECREF(slot);
            goto fail;
        }
        Py_DECREF(slot);
    }
    fl->nscripts = (int)PyTuple_GET_SIZE(scripts);
    fl->weights = PyMem_New(int64_t, fl->nscripts);
    /* zeroed: the deallocator walks what was built before a failure */
    fl->scripts = PyMem_Calloc(fl->nscripts, sizeof(fl_script));
    if (fl->weights == NULL || fl->scripts == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    for (k = 0; k < fl->nscripts; k++) {
        PyObject *ops = PyTuple_GET_ITEM(scripts, k);

        fl->weights[k] = PyLong_AsLongLong(PyTuple_GET_ITEM(weights, k));
        if (PyErr_Occurred())
            goto fail;
        fl->total_weight += fl->weights[k];
        if (!PyTuple_Check(ops) || PyTuple_GET_SIZE(ops) < 1) {
            PyErr_SetString(PyExc_ValueError, "malformed fast loop plan");
            goto fail;
        }
        fl->scripts[k].ops = PyMem_New(fl_op, PyTuple_GET_SIZE(ops));
        if (fl->scripts[k].ops == NULL) {
            PyErr_NoMemory();
            goto fail;
        }
        for (i = 0; i < PyTuple_GET_SIZE(ops); i++) {
            fl->scripts[k].nops = (int)i + 1;
            if (fl_parse_op(fl, PyTuple_GET_ITEM(ops, i), &fl->scripts[k].ops[i], &nprep) <
                0)
                goto fail;
        }
        if (fl->scripts[k].ops[i - 1].kind != OP_END) {
            PyErr_SetString(PyExc_ValueError, "a script must end with OP_END");
            goto fail;
        }
        for (i = 0; i < fl->scripts[k].nops; i++) {
            fl_op *op = &fl->scripts[k].ops[i];
            int n = fl->scripts[k].nops;

            if ((op->kind == OP_IF &&
                 (op->false_next < 0 || op->false_next >= n || op->end_next < 0 ||
                  op->end_next >= n)) ||
                (op->kind == OP_ELSE && (op->end_next < 0 || op->end_next >= n)) ||
                (op->gset != GSET_NONE && fl->gset_hook == NULL)) {
                PyErr_SetString(PyExc_ValueError, "malformed fast loop plan");
                goto fail;
            }
        }
        if (fl->per_command && command_stats(fl, k) < 0)
            goto fail;
    }

    if (hists != NULL && hists != Py_None && hists_init(fl, hists) < 0)
        goto fail;
    if (fl->total_weight <= 0) {
        PyErr_SetString(PyExc_ValueError, "the weights must add up to more than 0");
        goto fail;
    }
    total = PyObject_GetAttr(wstate, s_stats);
    if (total == NULL)
        goto fail;
    i = stats_init(&fl->total, total);
    Py_DECREF(total);
    if (i < 0)
        goto fail;
    per_script = PyObject_GetAttr(wstate, s_per_script);
    if (per_script == NULL)
        goto fail;
    if (per_script != Py_None) {
        if (!PyList_Check(per_script) || PyList_GET_SIZE(per_script) != fl->nscripts) {
            Py_DECREF(per_script);
            PyErr_SetString(PyExc_ValueError, "per_script must be a list per script");
            goto fail;
        }
        fl->per_script = PyMem_Calloc(fl->nscripts, sizeof(fl_stats));
        if (fl->per_script == NULL) {
            Py_DECREF(per_script);
            PyErr_NoMemory();
            goto fail;
        }
        for (k = 0; k < fl->nscripts; k++)
            if (stats_init(&fl->per_script[k], PyList_GET_ITEM(per_script, k)) < 0) {
                Py_DECREF(per_script);
                goto fail;
            }
        fl->choose_rng = PyObject_GetAttr(wstate, s_choose_rng);
        if (fl->choose_rng == NULL) {
            Py_DECREF(per_script);
            goto fail;
        }
    } else if (fl->nscripts != 1) {
        Py_DECREF(per_script);
        PyErr_SetString(PyExc_ValueError, "several scripts need per-script stats");
        goto fail;
    }
    Py_DECREF(per_script);
    if (fl->throttled) {
        fl->throttle_rng = PyObject_GetAttr(wstate, s_throttle_rng);
        if (fl->throttle_rng == NULL)
            goto fail;
    }
    if (shared_vars_init(fl, wstate) < 0)
        goto fail;

    fl->clients = PyMem_Calloc(PyList_GET_SIZE(clients) + 1, sizeof(fl_client));
    if (fl->clients == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    fl->nclients = (int)PyList_GET_SIZE(clients);
    fl->runq = PyMem_New(int, fl->nclients + 1);
    fl->batch = PyMem_New(int, fl->nclients + 1);
    fl->events = PyMem_New(struct epoll_event, fl->nclients + 3);
    fl->timers = PyMem_New(fl_timer, fl->nclients + 1);
    if (fl->clients == NULL || fl->runq == NULL || fl->batch == NULL ||
        fl->events == NULL || fl->timers == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    /* each client's variables and prepared flags (one block each) */
    fl->nprep = nprep;
    fl->varstore = PyMem_Calloc((size_t)fl->nclients * fl->nvars + 1, sizeof(fl_value));
    fl->prepstore = PyMem_Calloc((size_t)fl->nclients * nprep + 1, 1);
    if (fl->varstore == NULL || fl->prepstore == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    for (i = 0; i < fl->nclients; i++) {
        fl->clients[i].vars = fl->varstore + (size_t)i * fl->nvars;
        fl->clients[i].prepared = fl->prepstore + (size_t)i * nprep;
        fl->clients[i].st = PyList_GET_ITEM(clients, i);
        Py_INCREF(fl->clients[i].st);
        fl->clients[i].fd = -1;
        fl->clients[i].fd_py = -1;
        fl->clients[i].owner = OWN_PY;
        if (fl_get_i64(fl->clients[i].st, s_id, &fl->clients[i].id) < 0)
            goto fail;
    }
    if (log != NULL && log != Py_None && log_init(fl, log) < 0)
        goto fail;
    return (PyObject *)fl;
fail:
    Py_DECREF(fl);
    return NULL;
}

static PyObject *
FastLoop_get_idle(FastLoop *fl, void *closure)
{
    (void)closure;
    return PyLong_FromLongLong(fl->idle_us);
}

static PyObject *
FastLoop_get_now(FastLoop *fl, void *closure)
{
    (void)closure;
    return PyLong_FromLongLong(fl->now_us);
}

static PyObject *
FastLoop_get_handbacks(FastLoop *fl, void *closure)
{
    (void)closure;
    return PyLong_FromLongLong(fl->handbacks);
}

static PyObject *
FastLoop_get_raw_connects(FastLoop *fl, void *closure)
{
    (void)closure;
    return PyLong_FromLongLong(fl->raw_connects);
}

static PyObject *
FastLoop_get_py_calls(FastLoop *fl, void *closure)
{
    (void)closure;
    return PyLong_FromLongLong(fl->py_calls);
}

static PyObject *
FastLoop_get_gil_takes(FastLoop *fl, void *closure)
{
    (void)closure;
    return PyLong_FromLongLong(fl->gil_takes);
}

static PyGetSetDef FastLoop_getset[] = {
    {"handbacks", (getter)FastLoop_get_handbacks, NULL,
     "how many times a C-owned client was handed to Python", NULL},
    {"raw_connects", (getter)FastLoop_get_raw_connects, NULL,
     "-C: connections C opened from the conninfo without Python", NULL},
    {"py_calls", (getter)FastLoop_get_py_calls, NULL,
     "how many times the loop called Python's advance, resume or absorb", NULL},
    {"gil_takes", (getter)FastLoop_get_gil_takes, NULL,
     "how many times run() took the GIL back after giving it up (a run of "
     "scripts gives it up while its loop runs)",
     NULL},
    {"gen_steps", (getter)fl_gen_steps, NULL,
     "how many times C stepped a Python workload's generator", NULL},
    {"idle_us", (getter)FastLoop_get_idle, NULL, "µs spent blocked in waits", NULL},
    {"now_us", (getter)FastLoop_get_now, NULL, "the clock when run() returned TICK",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef FastLoop_methods[] = {
    {"run", (PyCFunction)fl_run, METH_O, fl_run_doc},
    {"set_signal_fd", (PyCFunction)FastLoop_set_signal_fd, METH_O,
     "set_signal_fd(fd)\n--\n\nWatch fd, the read end of signal.set_wakeup_fd's "
     "non-blocking\ndescriptor, in the epoll set (-1: stop): run() then runs "
     "Python's\nsignal handlers only when a signal came, not after every wait."},
    {"open_all", (PyCFunction)FastLoop_open_all, METH_VARARGS,
     "open_all(conninfo, count, window, timeout_us)\n--\n\n"
     "The worker's initial connections (after set_connect_raw): count\n"
     "connections of conninfo opened in parallel without blocking, at most\n"
     "window in flight, PQconnectPoll on an epoll set, timeout_us (0: none)\n"
     "for each; a list of psycopg PGconn objects in order, or (index,\n"
     "libpq's message, at the open-file limit) of the lowest that failed\n"
     "(every other one closed); for a timeout, psycopg's PGconn in place\n"
     "of the message."},
    {"set_connect_raw", (PyCFunction)FastLoop_set_connect_raw, METH_O,
     "set_connect_raw(probe)\n--\n\n"
     "-C (after set_connect): open each connection from C with PQconnectStart\n"
     "of the conninfo, no Python call per connection; probe is a psycopg\n"
     "PGconn with a connection (any), to find where its type keeps the\n"
     "pointer, so that a hand-back can wrap a connection C opened. True when\n"
     "C will do so, False when start() keeps opening them."},
    {"set_connect", (PyCFunction)FastLoop_set_connect, METH_O,
     "set_connect((conninfo, start, adopt, release, preparing[, timeout_us]))\n--\n\n"
     "-C: open a connection per transaction without blocking: start(conninfo)\n"
     "gives a psycopg PGconn whose PQconnectPoll C drives; adopt(client, pgconn)\n"
     "makes it the client's before a hand-back; release(client) closes\n"
     "Python's; preparing is state.PREPARING (a prepare of C's handed back);\n"
     "timeout_us: connect_timeout, after which one still opening is given up\n"
     "(handed back with its psycopg PGconn, still connecting)."},
    {"set_python", (PyCFunction)fl_gen_set, METH_O,
     "set_python((caught, raised, bind, scripts))\n--\n\n"
     "A Python workload: C steps its generators (_fastloop_gen.c;\n"
     "pgsurge.engine.fastloop._py_spec)."},
    {"set_log", (PyCFunction)FastLoop_set_log, METH_O,
     "set_log(spec)\n--\n\nWrite -l as the TxLogWriter of spec does "
     "(pgsurge.engine.fastloop._log_spec)."},
    {NULL, NULL, 0, NULL},
};

/* _record_into(hist, values): count values as the loop does and add
 * them to the Histogram (tests compare with Histogram.record) */
static PyObject *
record_into(PyObject *module, PyObject *args)
{
    PyObject *hist, *values, *seq;
    fl_hist h;
    Py_ssize_t i;
    int r = 0;

    (void)module;
    if (!PyArg_ParseTuple(args, "OO", &hist, &values))
        return NULL;
    seq = PySequence_Fast(values, "values must be a sequence");
    if (seq == NULL)
        return NULL;
    if (fl_hist_init(&h, hist) < 0) {
        Py_DECREF(seq);
        return NULL;
    }
    for (i = 0; i < PySequence_Fast_GET_SIZE(seq) && r == 0; i++) {
        int64_t v = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seq, i));

        r = (v == -1 && PyErr_Occurred()) ? -1 : fl_hist_record(NULL, &h, v);
    }
    if (r == 0)
        r = fl_hist_flush(&h);
    Py_DECREF(seq);
    Py_DECREF(h.obj);
    fl_hist_free(&h);
    if (r < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* _stats_add(values): SimpleStats.add of each value as the loop does it;
 * returns (count, min, max, sum, sum2) (tests compare with SimpleStats) */
static PyObject *
stats_add_values(PyObject *module, PyObject *values)
{
    PyObject *seq;
    fl_simple s;
    Py_ssize_t i;

    (void)module;
    memset(&s, 0, sizeof s);
    seq = PySequence_Fast(values, "values must be a sequence");
    if (seq == NULL)
        return NULL;
    for (i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
        int64_t v = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seq, i));

        if (v == -1 && PyErr_Occurred()) {
            Py_DECREF(seq);
            return NULL;
        }
        stats_add(&s, v);
    }
    Py_DECREF(seq);
    return Py_BuildValue("(Ldddd)", (long long)s.count, s.min, s.max, s.sum, s.sum2);
}

/* _log_fields(values): the ints as an -l line writes them, separated by
 * spaces (tests compare with str) */
static PyObject *
log_fields(PyObject *module, PyObject *values)
{
    PyObject *seq, *out;
    char *buf, *p;
    Py_ssize_t i, n;

    (void)module;
    seq = PySequence_Fast(values, "values must be a sequence");
    if (seq == NULL)
        return NULL;
    n = PySequence_Fast_GET_SIZE(seq);
    buf = PyMem_Malloc((size_t)(n + 1) * INT_TEXT);
    if (buf == NULL) {
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    p = buf;
    for (i = 0; i < n; i++) {
        int64_t v = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seq, i));

        if (v == -1 && PyErr_Occurred()) {
            PyMem_Free(buf);
            Py_DECREF(seq);
            return NULL;
        }
        p = i ? put_field(p, v) : put_int(p, v);
    }
    out = PyUnicode_DecodeASCII(buf, p - buf, NULL);
    PyMem_Free(buf);
    Py_DECREF(seq);
    return out;
}

/* _eval(code, values, s0, s1): run an expression program as the loop
 * does, over variables ``values`` (None, a bool, an int, a float or a
 * str; anything else: not held by C) and the PRNG words; returns (bailed, value, s0,
 * s1) (tests compare with pgsurge.script.evaluate) */
static PyObject *
eval_expr(PyObject *module, PyObject *args)
{
    PyObject *code, *values, *value = NULL;
    unsigned long long s0, s1;
    fl_op op;
    fl_client c;
    fl_value v;
    Py_ssize_t i, n;
    int r;

    (void)module;
    if (!PyArg_ParseTuple(args, "O!O!KK", &PyTuple_Type, &code, &PyTuple_Type, &values,
                          &s0, &s1))
        return NULL;
    memset(&op, 0, sizeof op);
    memset(&c, 0, sizeof c);
    memset(&v, 0, sizeof v);
    n = PyTuple_GET_SIZE(values);
    c.vars = PyMem_Calloc((size_t)n + 1, sizeof(fl_value));
    if (c.vars == NULL)
        return PyErr_NoMemory();
    for (i = 0; i < n; i++) {
        PyObject *x = PyTuple_GET_ITEM(values, i);
        fl_value *var = &c.vars[i];

        if (x == Py_None)
            var->type = FV_NULL;
        else if (PyBool_Check(x)) {
            var->type = FV_BOOL;
            var->i = x == Py_True;
        } else if (PyFloat_Check(x)) {
            var->type = FV_DOUBLE;
            var->d = PyFloat_AsDouble(x);
        } else if (PyLong_Check(x)) {
            var->type = FV_INT;
            var->i = PyLong_AsLongLong(x);
        } else if (PyUnicode_Check(x)) {
            Py_ssize_t len;
            const char *text = PyUnicode_AsUTF8AndSize(x, &len);

            if (text == NULL)
                goto done;
            if (fl_var_set_text(var, text, len) < 0) {
                PyErr_NoMemory();
                goto done;
            }
        }
        if (PyErr_Occurred())
            goto done;
    }
    if (fl_parse_code(code, &op) < 0)
        goto done;
    for (i = 0; i < op.ncode; i++)
        if (op.code[i].code == 1 && op.code[i].arg >= n) {
            PyErr_SetString(PyExc_ValueError, "a variable out of range");
            goto done;
        }
    c.s0 = s0;
    c.s1 = s1;
    r = fl_eval(&c, op.code, op.ncode, &v);
    if (r)
        value = Py_NewRef(Py_None);
    else if (v.type == FV_INT)
        value = PyLong_FromLongLong(v.i);
    else if (v.type == FV_DOUBLE)
        value = PyFloat_FromDouble(v.d);
    else if (v.type == FV_BOOL)
        value = PyBool_FromLong((long)v.i);
    else
        value = Py_NewRef(Py_None);
    if (value != NULL) {
        char buf[INT_TEXT];
        const char *text = r ? NULL : fl_value_text(&v, buf);

        value = Py_BuildValue("(iNKKs)", r, value, (unsigned long long)c.s0,
                              (unsigned long long)c.s1, text);
    }
done:
    PyMem_Free(op.code);
    for (i = 0; i < n; i++)
        PyMem_RawFree(c.vars[i].s);
    PyMem_Free(c.vars);
    return value;
}

static PyMethodDef module_methods[] = {
    {"_eval", eval_expr, METH_VARARGS,
     "_eval(code, values, s0, s1)\n--\n\nRun an expression program as the loop "
     "does (tests)."},
    {"_stats_add", stats_add_values, METH_O,
     "_stats_add(values)\n--\n\nSimpleStats.add of each value as the loop does it "
     "(tests)."},
    {"_log_fields", log_fields, METH_O,
     "_log_fields(values)\n--\n\nThe ints as an -l line writes them (tests)."},
    {"_record_into", record_into, METH_VARARGS,
     "_record_into(hist, values)\n--\n\nCount values as the loop does, add them "
     "to hist."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject FastLoop_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "pgsurge._fastloop.FastLoop",
    .tp_basicsize = sizeof(FastLoop),
    .tp_dealloc = (destructor)FastLoop_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_traverse = (traverseproc)FastLoop_traverse,
    .tp_clear = (inquiry)FastLoop_clear,
    .tp_doc = "A worker's event loop with its clients' common case in C.",
    .tp_new = FastLoop_new,
    .tp_methods = FastLoop_methods,
    .tp_getset = FastLoop_getset,
};

static struct PyModuleDef fastloop_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "pgsurge._fastloop",
    .m_doc = "A worker's event loop and its clients' common case in C "
             "(optional; see pgsurge.engine.fastloop).",
    .m_size = -1,
    .m_methods = module_methods,
};

/* Every attribute C reads or writes, with the class that owns it: the
 * interned names, and the module's READS ((owner, name), ...), which
 * tests/unit/test_abi.py checks against the owners' __slots__. */
static const struct {
    const char *owner, *name;
    PyObject **var;
} reads[] = {
    {"Client", "state", &s_state},
    {"Client", "script", &s_script},
    {"Client", "ops", &s_ops},
    {"Client", "command", &s_command},
    {"Client", "qrynum", &s_qrynum},
    {"Client", "cnt", &s_cnt},
    {"Client", "skipped", &s_skipped},
    {"Client", "txn_scheduled", &s_txn_scheduled},
    {"Client", "txn_begin", &s_txn_begin},
    {"Client", "estatus", &s_estatus},
    {"Client", "tries", &s_tries},
    {"Client", "saved_rng", &s_saved_rng},
    {"Client", "rng", &s_rng},
    {"Client", "variables", &s_variables},
    {"Client", "ptr", &s_ptr},
    {"Client", "fd", &s_fd},
    {"Client", "prepared", &s_prepared},
    {"Client", "flush_pending", &s_flush_pending},
    {"Client", "drain_state", &s_drain_state},
    {"Client", "in_pipeline", &s_in_pipeline},
    {"Client", "num_syncs", &s_num_syncs},
    {"Client", "conn", &s_conn},
    {"Client", "drain_msg", &s_drain_msg},
    {"WorkerState", "conn_total_us", &s_conn_total_us},
    {"Client", "sleep_until", &s_sleep_until},
    {"Client", "stmt_begin", &s_stmt_begin},
    {"Client", "unwatched", &s_unwatched},
    {"Client", "eval_elif", &s_eval_elif},
    {"Client", "meta_failed", &s_meta_failed},
    {"Client", "id", &s_id},
    {"Client", "pending", &s_pending},
    {"TxLogWriter", "write_chunk", &s_write_chunk},
    {"TxLogWriter", "current", &s_current},
    {"TxLogWriter", "roll_to", &s_roll_to},
    {"StatsData", "start_us", &s_start_us},
    {"SimpleStats", "count", &s_count},
    {"SimpleStats", "min", &s_min},
    {"SimpleStats", "max", &s_max},
    {"SimpleStats", "sum", &s_sum},
    {"SimpleStats", "sum2", &s_sum2},
    {"StatsData", "latency", &s_latency},
    {"StatsData", "cnt", &s_cnt},
    {"StatsData", "skipped", &s_skipped},
    {"StatsData", "lag", &s_lag},
    {"WorkerState", "timer_exceeded", &s_timer_exceeded},
    {"WorkerState", "stats", &s_stats},
    {"WorkerState", "per_script", &s_per_script},
    {"WorkerState", "choose_rng", &s_choose_rng},
    {"WorkerState", "throttle_rng", &s_throttle_rng},
    {"WorkerState", "throttle_trigger", &s_throttle_trigger},
    {"WorkerState", "latency_late", &s_latency_late},
    {"WorkerState", "shared_variables", &s_shared_variables},
    {"WorkerState", "set_client_id", &s_set_client_id},
    {"Op", "stats", &s_stats},
    {"CommandStats", "latency", &s_latency},
    {"PgPrng", "getstate", &s_getstate},
    {"PgPrng", "setstate", &s_setstate},
    {"Histogram", "layout", &s_layout},
    {"Histogram", "add_counts", &s_add_counts},
};

/* the READS tuple of the module */
static PyObject *
reads_tuple(void)
{
    int i, n = (int)(sizeof reads / sizeof reads[0]);
    PyObject *t = PyTuple_New(n);

    if (t == NULL)
        return NULL;
    for (i = 0; i < n; i++) {
        PyObject *pair = Py_BuildValue("(ss)", reads[i].owner, reads[i].name);

        if (pair == NULL) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, i, pair);
    }
    return t;
}

static int
add_int(PyObject *m, const char *name, long value)
{
    return PyModule_AddIntConstant(m, name, value);
}

PyMODINIT_FUNC
PyInit__fastloop(void)
{
    PyObject *m, *t;
    int i;

    /* PyCapsule_Import only imports the package and then reads attributes:
     * import pgsurge._fastpq first, or importing this module on its own
     * fails with an AttributeError */
    m = PyImport_ImportModule("pgsurge._fastpq");
    if (m == NULL)
        return NULL;
    Py_DECREF(m);
    pq = PyCapsule_Import(PGSURGE_FASTPQ_CAPSULE, 0);
    if (pq == NULL)
        return NULL;
    if (pq->version != PGSURGE_FASTPQ_TABLE_VERSION) {
        PyErr_SetString(PyExc_ImportError, "pgsurge._fastpq's table is of another version");
        return NULL;
    }
    for (i = 0; i < (int)(sizeof reads / sizeof reads[0]); i++)
        if (*reads[i].var == NULL &&
            (*reads[i].var = PyUnicode_InternFromString(reads[i].name)) == NULL)
            return NULL;
    /* psycopg's PGconn, under -C */
    if ((s_pgconn_ptr == NULL &&
         (s_pgconn_ptr = PyUnicode_InternFromString("pgconn_ptr")) == NULL) ||
        (s_finish == NULL && (s_finish = PyUnicode_InternFromString("finish")) == NULL) ||
        (s_client_id == NULL &&
         (s_client_id = PyUnicode_InternFromString("client_id")) == NULL))
        return NULL;
    if (PyType_Ready(&FastLoop_Type) < 0)
        return NULL;
    m = PyModule_Create(&fastloop_module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&FastLoop_Type);
    if (PyModule_AddObject(m, "FastLoop", (PyObject *)&FastLoop_Type) < 0 ||
        PyModule_AddIntConstant(m, "API_VERSION", FASTLOOP_API) < 0 ||
        PyModule_AddStringConstant(m, "SOURCE_HASH", PGSURGE_SOURCE_HASH) < 0 ||
        PyModule_AddIntConstant(m, "CHOOSE_SCRIPT", CHOOSE_SCRIPT) < 0 ||
        PyModule_AddIntConstant(m, "START_TX", START_TX) < 0 ||
        PyModule_AddIntConstant(m, "PREPARE_THROTTLE", PREPARE_THROTTLE) < 0 ||
        PyModule_AddIntConstant(m, "THROTTLE", THROTTLE) < 0 ||
        PyModule_AddIntConstant(m, "SLEEP", SLEEP) < 0 ||
        PyModule_AddIntConstant(m, "START_COMMAND", START_COMMAND) < 0 ||
        PyModule_AddIntConstant(m, "WAIT_RESULT", WAIT_RESULT) < 0 ||
        PyModule_AddIntConstant(m, "END_COMMAND", END_COMMAND) < 0 ||
        PyModule_AddIntConstant(m, "WAIT_ROLLBACK_RESULT", WAIT_ROLLBACK_RESULT) < 0 ||
        PyModule_AddIntConstant(m, "END_TX", END_TX) < 0 ||
        PyModule_AddIntConstant(m, "ABORTED", ABORTED) < 0 ||
        PyModule_AddIntConstant(m, "FINISHED", FINISHED) < 0 ||
        PyModule_AddIntConstant(m, "MODE_SIMPLE", MODE_SIMPLE) < 0 ||
        PyModule_AddIntConstant(m, "MODE_EXTENDED", MODE_EXTENDED) < 0 ||
        PyModule_AddIntConstant(m, "MODE_PREPARED", MODE_PREPARED) < 0 ||
        PyModule_AddIntConstant(m, "RESUME_FLUSH", RESUME_FLUSH) < 0 ||
        PyModule_AddIntConstant(m, "RESUME_SEND_FAILED", RESUME_SEND_FAILED) < 0 ||
        PyModule_AddIntConstant(m, "RESUME_SYNC_FAILED", RESUME_SYNC_FAILED) < 0 ||
        PyModule_AddIntConstant(m, "RESUME_CONNECT_FAILED", RESUME_CONNECT_FAILED) < 0 ||
        PyModule_AddIntConstant(m, "RESUME_PREPARE_FAILED", RESUME_PREPARE_FAILED) < 0 ||
        PyModule_AddIntConstant(m, "CONNECTING", CONNECTING) < 0 ||
        add_int(m, "OP_PSTART", OP_PSTART) < 0 || add_int(m, "OP_PSYNC", OP_PSYNC) < 0 ||
        add_int(m, "OP_PEND", OP_PEND) < 0 || add_int(m, "OP_PY", OP_PY) < 0 ||
        add_int(m, "OP_PYONLY", OP_PYONLY) < 0 ||
        PyModule_AddIntConstant(m, "LOOK_US", LOOK_US) < 0 ||
        add_int(m, "OP_END", OP_END) < 0 || add_int(m, "OP_SET_CONST", OP_SET_CONST) < 0 ||
        add_int(m, "OP_SET_RANDOM", OP_SET_RANDOM) < 0 || add_int(m, "OP_SQL", OP_SQL) < 0 ||
        add_int(m, "OP_SLEEP_CONST", OP_SLEEP_CONST) < 0 ||
        add_int(m, "OP_SLEEP_VAR", OP_SLEEP_VAR) < 0 ||
        add_int(m, "OUT_DONE", OUT_DONE) < 0 ||
        add_int(m, "OUT_EXIT_ON_ABORT", OUT_EXIT_ON_ABORT) < 0 ||
        add_int(m, "OUT_STOPPED", OUT_STOPPED) < 0 || add_int(m, "OUT_TICK", OUT_TICK) < 0 ||
        add_int(m, "DRAIN_BUSY", DRAIN_BUSY) < 0 || add_int(m, "DRAIN_DONE", DRAIN_DONE) < 0 ||
        add_int(m, "DRAIN_FAILED", DRAIN_FAILED) < 0 ||
        fl_add_expr_codes(m) < 0 || add_int(m, "MAX_PARAMS", MAX_PARAMS) < 0 ||
        add_int(m, "OP_SET_EXPR", OP_SET_EXPR) < 0 || add_int(m, "OP_IF", OP_IF) < 0 ||
        add_int(m, "OP_ELSE", OP_ELSE) < 0 || add_int(m, "OP_ENDIF", OP_ENDIF) < 0 ||
        add_int(m, "GSET_NONE", GSET_NONE) < 0 || add_int(m, "GSET_ONE", GSET_ONE) < 0 ||
        add_int(m, "GSET_ALL", GSET_ALL) < 0 || add_int(m, "MAX_STACK", MAX_STACK) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    t = reads_tuple();
    if (t == NULL || PyModule_AddObject(m, "READS", t) < 0) {
        Py_XDECREF(t);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}


/*
 * pgsurge._fastloop: the Python side of the loop.
 *
 * C keeps working copies of what the worker's clients share (stats, the
 * choose and throttle streams, the -R schedule, -L's late count) and of a
 * C-owned client's state; this unit loads them from the Python objects and
 * writes them back before any call into Python, takes clients over from
 * Python and hands them back (to advance() or resume()), and files a
 * client Python has run as EventLoop.run's settle() does.
 */

#include "_fastloop.h"

/* The GIL (see fl_py in _fastloop.h): the functions that take a FastLoop
 * and touch CPython take it themselves (fl_py first); those that take no
 * FastLoop (fl_get_i64, fl_set_i64, rng_*, attr_*, the stats and
 * histogram flushes) are called only by those, with the GIL held. */

int
fl_get_i64(PyObject *obj, PyObject *name, int64_t *out)
{
    PyObject *v = PyObject_GetAttr(obj, name);

    if (v == NULL)
        return -1;
    *out = PyLong_AsLongLong(v);
    Py_DECREF(v);
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

int
fl_set_i64(PyObject *obj, PyObject *name, int64_t value)
{
    PyObject *v = PyLong_FromLongLong(value);
    int r;

    if (v == NULL)
        return -1;
    r = PyObject_SetAttr(obj, name, v);
    Py_DECREF(v);
    return r;
}

/* a PgPrng's words, through its getstate()/setstate() */
static int
rng_load(PyObject *rng, uint64_t *s0, uint64_t *s1)
{
    PyObject *t = PyObject_CallMethodNoArgs(rng, s_getstate);

    if (t == NULL)
        return -1;
    if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != 2) {
        Py_DECREF(t);
        PyErr_SetString(PyExc_TypeError, "getstate() must give two words");
        return -1;
    }
    *s0 = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(t, 0));
    *s1 = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(t, 1));
    Py_DECREF(t);
    return PyErr_Occurred() ? -1 : 0;
}

static PyObject *
words(uint64_t s0, uint64_t s1)
{
    return Py_BuildValue("(KK)", (unsigned long long)s0, (unsigned long long)s1);
}

static int
rng_store(PyObject *rng, uint64_t s0, uint64_t s1)
{
    PyObject *t = words(s0, s1), *r;

    if (t == NULL)
        return -1;
    r = PyObject_CallMethodOneArg(rng, s_setstate, t);
    Py_DECREF(t);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}

static int
attr_is_true(PyObject *obj, PyObject *name)
{
    PyObject *v = PyObject_GetAttr(obj, name);
    int r;

    if (v == NULL)
        return -1;
    r = PyObject_IsTrue(v);
    Py_DECREF(v);
    return r;
}

/* 1 when obj.name is None, 0 when not, -1 on error. */
static int
attr_is_none(PyObject *obj, PyObject *name)
{
    PyObject *v = PyObject_GetAttr(obj, name);
    int r;

    if (v == NULL)
        return -1;
    r = v == Py_None;
    Py_DECREF(v);
    return r;
}

/* ---------------------------------------------------------------------- */
/* Stats working copies                                                   */

static int
minmax_load(PyObject *simple, PyObject *name, double *v, int *is_int)
{
    PyObject *o = PyObject_GetAttr(simple, name);

    if (o == NULL)
        return -1;
    *is_int = PyLong_CheckExact(o);
    *v = PyFloat_AsDouble(o);
    Py_DECREF(o);
    return (*v == -1.0 && PyErr_Occurred()) ? -1 : 0;
}

static int
double_load(PyObject *simple, PyObject *name, double *v)
{
    PyObject *o = PyObject_GetAttr(simple, name);

    if (o == NULL)
        return -1;
    if (!PyFloat_CheckExact(o)) {
        Py_DECREF(o);
        PyErr_SetString(PyExc_TypeError, "SimpleStats sums must be floats");
        return -1;
    }
    *v = PyFloat_AS_DOUBLE(o);
    Py_DECREF(o);
    return 0;
}

int
fl_stats_load(fl_simple *s)
{
    if (fl_get_i64(s->obj, s_count, &s->count) < 0 ||
        minmax_load(s->obj, s_min, &s->min, &s->min_int) < 0 ||
        minmax_load(s->obj, s_max, &s->max, &s->max_int) < 0 ||
        double_load(s->obj, s_sum, &s->sum) < 0 ||
        double_load(s->obj, s_sum2, &s->sum2) < 0)
        return -1;
    return 0;
}

static int
stats_load(fl_stats *s, int throttled)
{
    if (fl_get_i64(s->data, s_cnt, &s->cnt) < 0 || fl_stats_load(&s->lat) < 0)
        return -1;
    if (throttled &&
        (fl_get_i64(s->data, s_skipped, &s->skipped) < 0 || fl_stats_load(&s->lag) < 0))
        return -1;
    return 0;
}

static int
set_number(PyObject *obj, PyObject *name, double v, int is_int)
{
    PyObject *o = is_int ? PyLong_FromLongLong((long long)v) : PyFloat_FromDouble(v);
    int r;

    if (o == NULL)
        return -1;
    r = PyObject_SetAttr(obj, name, o);
    Py_DECREF(o);
    return r;
}

int
fl_stats_store(fl_simple *s)
{
    if (fl_set_i64(s->obj, s_count, s->count) < 0 ||
        set_number(s->obj, s_min, s->min, s->min_int) < 0 ||
        set_number(s->obj, s_max, s->max, s->max_int) < 0 ||
        set_number(s->obj, s_sum, s->sum, 0) < 0 ||
        set_number(s->obj, s_sum2, s->sum2, 0) < 0)
        return -1;
    return 0;
}

static int
stats_store(fl_stats *s, int throttled)
{
    if (fl_set_i64(s->data, s_cnt, s->cnt) < 0 || fl_stats_store(&s->lat) < 0)
        return -1;
    if (throttled &&
        (fl_set_i64(s->data, s_skipped, s->skipped) < 0 || fl_stats_store(&s->lag) < 0))
        return -1;
    return 0;
}

/* ---------------------------------------------------------------------- */
/* Histograms: C counts, Python's Histogram adds them (add_counts)        */

/* the buckets of a histogram of the default layout up to 2**18 µs; more
 * are added as needed, as Histogram._grow does */
#define HIST_INITIAL_RANGES 8

int
fl_hist_init(fl_hist *h, PyObject *obj)
{
    PyObject *layout;
    int ok;

    memset(h, 0, sizeof *h);
    layout = PyObject_CallMethodNoArgs(obj, s_layout);
    if (layout == NULL)
        return -1;
    ok = PyArg_ParseTuple(layout, "ii", &h->sub_bits, &h->half_bits);
    Py_DECREF(layout);
    if (!ok)
        return -1;
    if (h->sub_bits < 1 || h->sub_bits > 30 || h->half_bits < 1 ||
        h->half_bits >= h->sub_bits) {
        PyErr_SetString(PyExc_ValueError, "unexpected histogram layout");
        return -1;
    }
    Py_INCREF(obj);
    h->obj = obj;
    return 0;
}

void
fl_hist_free(fl_hist *h)
{
    PyMem_RawFree(h->counts);
    h->counts = NULL;
    h->cap = 0;
}

int
fl_hist_grow(fl_hist *h, Py_ssize_t idx)
{
    Py_ssize_t cap = idx + 1 + ((Py_ssize_t)1 << h->half_bits), initial;
    uint64_t *c;

    initial = (Py_ssize_t)(HIST_INITIAL_RANGES + 2) << h->half_bits;
    if (cap < initial)
        cap = initial;
    /* PyMem_Raw: grown while a transaction is accounted, without the GIL */
    c = PyMem_RawRealloc(h->counts, sizeof(uint64_t) * cap);
    if (c == NULL)
        return -1;
    memset(c + h->cap, 0, sizeof(uint64_t) * (cap - h->cap));
    h->counts = c;
    h->cap = cap;
    return 0;
}

/* add what C counted to the Python Histogram, and start afresh */
int
fl_hist_flush(fl_hist *h)
{
    PyObject *raw, *r;
    Py_ssize_t n;

    if (h->obj == NULL || h->n == 0)
        return 0;
    n = h->dhi - h->dlo + 1;
    raw = PyBytes_FromStringAndSize((const char *)(h->counts + h->dlo),
                                    n * (Py_ssize_t)sizeof(uint64_t));
    if (raw == NULL)
        return -1;
    r = PyObject_CallMethod(h->obj, "add_counts", "nNLLL", h->dlo, raw,
                            (long long)h->total, (long long)h->lo, (long long)h->hi);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    memset(h->counts + h->dlo, 0, sizeof(uint64_t) * n);
    h->n = h->total = 0;
    return 0;
}

static int
hists_flush(FastLoop *fl)
{
    int i, k;

    if (!fl->recording)
        return 0;
    if (fl_hist_flush(&fl->hlat) < 0 || fl_hist_flush(&fl->hlag) < 0)
        return -1;
    if (fl->hscript != NULL)
        for (k = 0; k < fl->nscripts; k++)
            if (fl_hist_flush(&fl->hscript[k]) < 0)
                return -1;
    for (k = 0; k < fl->nscripts; k++)
        for (i = 0; i < fl->scripts[k].nops; i++)
            if (fl_hist_flush(&fl->scripts[k].ops[i].rec) < 0)
                return -1;
    return 0;
}

/* -l: the lines C wrote, to the writer (after those Python wrote before) */
int
fl_log_flush(FastLoop *fl)
{
    PyObject *text, *r;

    if (fl->loglen == 0)
        return 0;
    /* takes the GIL: at most once a second or per 64 kB of lines */
    fl_py(fl);
    text = PyUnicode_DecodeASCII(fl->logbuf, (Py_ssize_t)fl->loglen, NULL);
    if (text == NULL)
        return -1;
    fl->loglen = 0;
    r = PyObject_CallMethodOneArg(fl->txlog, s_write_chunk, text);
    Py_DECREF(text);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}

/* --sampling-rate: the stream's words, loaded (when the log is set) */
int
fl_shared_load_sampling(FastLoop *fl)
{
    return rng_load(fl->sample_rng, &fl->l0, &fl->l1);
}

/* --aggregate-interval: C's copy of the writer's current interval, from
 * ``data`` (a StatsData) */
static int
agg_bind(FastLoop *fl, PyObject *data)
{
    PyObject *lat, *lag;

    if (data != fl->agg.data) {
        lat = PyObject_GetAttr(data, s_latency);
        lag = lat == NULL ? NULL : PyObject_GetAttr(data, s_lag);
        if (lag == NULL) {
            Py_XDECREF(lat);
            return -1;
        }
        Py_INCREF(data);
        Py_XSETREF(fl->agg.data, data);
        Py_XSETREF(fl->agg.lat.obj, lat);
        Py_XSETREF(fl->agg.lag.obj, lag);
    }
    if (fl_get_i64(data, s_start_us, &fl->agg_start) < 0)
        return -1;
    return stats_load(&fl->agg, fl->throttled);
}

/* --aggregate-interval: store C's copy, have the writer write the intervals
 * complete at ``now`` (Unix µs; INT64_MIN: none, only load), and take its
 * current interval */
int
fl_agg_roll(FastLoop *fl, int64_t now)
{
    PyObject *data;
    int r;

    /* takes the GIL: once an interval */
    fl_py(fl);
    if (fl->agg.data != NULL && stats_store(&fl->agg, fl->throttled) < 0)
        return -1;
    if (now == INT64_MIN)
        data = PyObject_CallMethodNoArgs(fl->txlog, s_current);
    else {
        PyObject *arg = PyLong_FromLongLong(now);

        if (arg == NULL)
            return -1;
        data = PyObject_CallMethodOneArg(fl->txlog, s_roll_to, arg);
        Py_DECREF(arg);
    }
    if (data == NULL)
        return -1;
    r = agg_bind(fl, data);
    Py_DECREF(data);
    return r;
}

/* -r: every command's latency copy, loaded or stored */
static int
per_command_sync(FastLoop *fl, int (*sync)(fl_simple *))
{
    int i, k;

    if (!fl->per_command)
        return 0;
    for (k = 0; k < fl->nscripts; k++)
        for (i = 0; i < fl->scripts[k].nops; i++)
            if (fl->scripts[k].ops[i].cmd.obj != NULL &&
                sync(&fl->scripts[k].ops[i].cmd) < 0)
                return -1;
    return 0;
}

/* everything shared by the worker's clients: C's copies -> Python
 * (takes the GIL) */
int
fl_shared_store(FastLoop *fl)
{
    int i;

    fl_py(fl);
    if (stats_store(&fl->total, fl->throttled) < 0)
        return -1;
    if (fl->per_script != NULL) {
        for (i = 0; i < fl->nscripts; i++)
            if (stats_store(&fl->per_script[i], fl->throttled) < 0)
                return -1;
        if (rng_store(fl->choose_rng, fl->c0, fl->c1) < 0)
            return -1;
    }
    if (fl->throttled && (rng_store(fl->throttle_rng, fl->t0, fl->t1) < 0 ||
                          fl_set_i64(fl->wstate, s_throttle_trigger, fl->trigger) < 0))
        return -1;
    if (fl->latency_limit && fl_set_i64(fl->wstate, s_latency_late, fl->latency_late) < 0)
        return -1;
    if (fl->conn_us) {
        /* -C: the time C's clients spent opening and closing connections */
        int64_t total;

        if (fl_get_i64(fl->wstate, s_conn_total_us, &total) < 0 ||
            fl_set_i64(fl->wstate, s_conn_total_us, total + fl->conn_us) < 0)
            return -1;
        fl->conn_us = 0;
    }
    if (hists_flush(fl) < 0)
        return -1;
    if (fl->txlog != NULL &&
        (fl_log_flush(fl) < 0 ||
         (fl->agg.data != NULL && stats_store(&fl->agg, fl->throttled) < 0) ||
         (fl->sampling && rng_store(fl->sample_rng, fl->l0, fl->l1) < 0)))
        return -1;
    return per_command_sync(fl, fl_stats_store);
}

/* the worker's timer_exceeded, which its SIGALRM handler sets (-T), or
 * the thread that stops a threaded worker (takes the GIL) */
int
fl_read_timer(FastLoop *fl)
{
    fl_py(fl);
    fl->timer_exceeded = attr_is_true(fl->wstate, s_timer_exceeded);
    return fl->timer_exceeded < 0 ? -1 : 0;
}

/* Python -> C's copies (after Python ran: it may have changed them;
 * takes the GIL) */
int
fl_shared_load(FastLoop *fl)
{
    int i;

    fl_py(fl);
    if (stats_load(&fl->total, fl->throttled) < 0)
        return -1;
    if (fl->per_script != NULL) {
        for (i = 0; i < fl->nscripts; i++)
            if (stats_load(&fl->per_script[i], fl->throttled) < 0)
                return -1;
        if (rng_load(fl->choose_rng, &fl->c0, &fl->c1) < 0)
            return -1;
    }
    if (fl->throttled && (rng_load(fl->throttle_rng, &fl->t0, &fl->t1) < 0 ||
                          fl_get_i64(fl->wstate, s_throttle_trigger, &fl->trigger) < 0))
        return -1;
    if (fl->latency_limit && fl_get_i64(fl->wstate, s_latency_late, &fl->latency_late) < 0)
        return -1;
    if (per_command_sync(fl, fl_stats_load) < 0)
        return -1;
    if (fl->sampling && rng_load(fl->sample_rng, &fl->l0, &fl->l1) < 0)
        return -1;
    if (fl->agg_step > 0 && fl->txlog != NULL) {
        /* Python's log may have rolled to a new interval */
        PyObject *data = PyObject_CallMethodNoArgs(fl->txlog, s_current);
        int r;

        if (data == NULL)
            return -1;
        r = agg_bind(fl, data);
        Py_DECREF(data);
        if (r < 0)
            return -1;
    }
    return fl_read_timer(fl);
}

/* ---------------------------------------------------------------------- */
/* Clients: taking over from Python, handing back                         */

/* runs without the GIL (-C maps each new connection's socket):
 * PyMem_Raw's memory */
static int
map_fd(FastLoop *fl, int fd, int index)
{
    if (fd < 0)
        return 0;
    if (fd >= fl->by_fd_len) {
        int len = fd * 2 + 16, *m = PyMem_RawRealloc(fl->by_fd, sizeof(int) * len);

        if (m == NULL)
            return fl_nomem(fl);
        memset(m + fl->by_fd_len, 0, sizeof(int) * (len - fl->by_fd_len));
        fl->by_fd = m;
        fl->by_fd_len = len;
    }
    fl->by_fd[fd] = index + 1;
    return 0;
}

/* after Python ran for a client: follow its descriptor (a detach sets
 * -1); takes the GIL */
int
fl_refresh_fd(FastLoop *fl, int index)
{
    fl_client *c = &fl->clients[index];
    int64_t fd;

    fl_py(fl);
    if (fl_get_i64(c->st, s_fd, &fd) < 0)
        return -1;
    c->fd_py = (int)fd;
    if (fd != c->fd) {
        if (c->fd >= 0 && c->fd < fl->by_fd_len && fl->by_fd[c->fd] == index + 1)
            fl->by_fd[c->fd] = 0;
        c->fd = (int)fd;
        if (map_fd(fl, c->fd, index) < 0)
            return -1;
    }
    return 0;
}

/* -C: a connection C opened (or is opening) waits for events on fd: the
 * socket into the epoll set (a socket libpq closed since, for the next
 * address, out of it), or out of the set and unmapped (events 0), as
 * EventLoop.wait_connect does; Client.fd follows. Runs without the GIL
 * (but for an error). */
int
fl_conn_watch(FastLoop *fl, int index, int fd, uint32_t events)
{
    fl_client *c = &fl->clients[index];
    struct epoll_event ev;

    if (c->fd >= 0 && (c->fd != fd || events == 0)) {
        /* a descriptor closed since is out of the set already */
        if (epoll_ctl(fl->epfd, EPOLL_CTL_DEL, c->fd, NULL) < 0 && errno != ENOENT &&
            errno != EBADF)
            return fl_oserror(fl);
        if (c->fd < fl->by_fd_len && fl->by_fd[c->fd] == index + 1)
            fl->by_fd[c->fd] = 0;
        c->fd = -1;
    }
    c->unwatched = 0;
    c->conn_events = events;
    if (fd >= 0 && events) {
        memset(&ev, 0, sizeof ev);
        ev.events = events;
        ev.data.fd = fd;
        int op = c->fd == fd ? EPOLL_CTL_MOD : EPOLL_CTL_ADD;

        /* the same number may be a new socket: libpq closed the old one
         * (which took it out of the set) and opened the next host's, which
         * got the lowest free number, the old one's (ENOENT: added, not
         * modified; a worker died of it, hostile finding); a number the
         * set still has is modified (EEXIST) */
        if (epoll_ctl(fl->epfd, op, fd, &ev) < 0 &&
            (errno == EEXIST   ? epoll_ctl(fl->epfd, EPOLL_CTL_MOD, fd, &ev) < 0
             : errno == ENOENT ? epoll_ctl(fl->epfd, EPOLL_CTL_ADD, fd, &ev) < 0
                               : 1))
            return fl_oserror(fl);
        if (map_fd(fl, fd, index) < 0)
            return -1;
        c->fd = fd;
    }
    return 0;
}

/* -C: the socket of a connection about to be closed out of the client's
 * map (closing it takes it out of the epoll set: no epoll_ctl); runs
 * without the GIL */
int
fl_conn_forget(FastLoop *fl, int index)
{
    fl_client *c = &fl->clients[index];

    if (c->fd >= 0 && c->fd < fl->by_fd_len && fl->by_fd[c->fd] == index + 1)
        fl->by_fd[c->fd] = 0;
    c->fd = -1;
    c->conn_events = 0;
    c->unwatched = 0;
    return 0;
}

/* Client.fd = C's descriptor of the client, if Python's copy is not it:
 * before Python runs for the client, at a hand-back, and before run()
 * returns (fl_conn_watch and fl_conn_forget leave Client.fd behind);
 * takes the GIL when it writes */
int
fl_fd_publish(FastLoop *fl, int index)
{
    fl_client *c = &fl->clients[index];

    if (c->fd == c->fd_py)
        return 0;
    fl_py(fl);
    if (fl_set_i64(c->st, s_fd, c->fd) < 0)
        return -1;
    c->fd_py = c->fd;
    return 0;
}

/* Put a client's socket back into the epoll set, which pgsurge.engine.loop's
 * absorb took it out of (Client.unwatched), now that the client waits on
 * it: EventLoop.watch, for the clients that wait without Python's settle
 * (C-owned ones, and Python's filed by fl_settle_py). Takes the GIL (a
 * client absorb had taken out of the set: rare). */
int
fl_watch(FastLoop *fl, int index)
{
    fl_client *c = &fl->clients[index];
    struct epoll_event ev;
    int flush;

    fl_py(fl);
    c->unwatched = 0;
    if (PyObject_SetAttr(c->st, s_unwatched, Py_False) < 0)
        return -1;
    if (c->fd < 0)
        return 0;
    flush = attr_is_true(c->st, s_flush_pending);
    if (flush < 0)
        return -1;
    memset(&ev, 0, sizeof ev);
    ev.events = EPOLLIN | (flush ? EPOLLOUT : 0);
    /* the key Python's select.epoll gives a descriptor it registers */
    ev.data.fd = c->fd;
    if (epoll_ctl(fl->epfd, EPOLL_CTL_ADD, c->fd, &ev) < 0 &&
        (errno != EEXIST || epoll_ctl(fl->epfd, EPOLL_CTL_MOD, c->fd, &ev) < 0)) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    return 0;
}

/* Python's mid-transaction state of a client waiting in WAIT_RESULT or
 * SLEEP, into C's copy: 1 loaded; 0 not a state C runs (a retry, a failed
 * \gset, a \gset's lookahead result, a command C does not run); -1 error. */
static int
load_mid_tx(FastLoop *fl, fl_client *c, int state, int in_pipeline)
{
    PyObject *st = c->st, *v;
    int64_t command, qrynum, estatus, tries;
    const fl_script *sc;
    int kind, r;

    if (fl_get_i64(st, s_estatus, &estatus) < 0 || fl_get_i64(st, s_tries, &tries) < 0 ||
        fl_get_i64(st, s_command, &command) < 0 || fl_get_i64(st, s_qrynum, &qrynum) < 0)
        return -1;
    /* C accounts first tries that went well so far only */
    if (estatus != 0 || tries != 1 || c->script < 0 || c->script >= fl->nscripts)
        return 0;
    sc = &fl->scripts[c->script];
    if (command < 0 || command >= sc->nops - 1 || qrynum < 0 || qrynum > INT_MAX)
        return 0;
    kind = sc->ops[command].kind;
    /* a command's results, \endpipeline's (a pipeline's), a \sleep */
    if (state == WAIT_RESULT ? (in_pipeline ? kind != OP_PEND : kind != OP_SQL && kind != OP_PEND)
                             : kind != OP_SLEEP_CONST && kind != OP_SLEEP_VAR)
        return 0;
    if ((r = attr_is_true(st, s_meta_failed)) != 0)
        return r < 0 ? -1 : 0;
    if ((r = attr_is_none(st, s_pending)) != 1)
        return r;
    if (fl_get_i64(st, s_txn_scheduled, &c->txn_scheduled) < 0 ||
        fl_get_i64(st, s_txn_begin, &c->txn_begin) < 0 ||
        (fl->per_command && fl_get_i64(st, s_stmt_begin, &c->stmt_begin) < 0) ||
        (state == SLEEP && fl_get_i64(st, s_sleep_until, &c->sleep_until) < 0))
        return -1;
    if ((r = attr_is_true(st, s_eval_elif)) < 0)
        return -1;
    c->eval_elif = r;
    if (fl->save_rng) {
        /* the transaction's start, for a retry Python may yet make */
        v = PyObject_GetAttr(st, s_saved_rng);
        if (v == NULL)
            return -1;
        if (!PyTuple_Check(v) || PyTuple_GET_SIZE(v) != 2) {
            Py_DECREF(v);
            PyErr_SetString(PyExc_TypeError, "saved_rng must be two words");
            return -1;
        }
        c->saved0 = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(v, 0));
        c->saved1 = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(v, 1));
        Py_DECREF(v);
        if (PyErr_Occurred())
            return -1;
    }
    c->command = (int)command;
    c->qrynum = (int)qrynum;
    return 1;
}

/* Take a Python-owned client over: in CHOOSE_SCRIPT, in THROTTLE (its
 * slot drawn, waiting for it), or within a transaction, waiting in
 * WAIT_RESULT or SLEEP (Python's advance() goes from one transaction
 * straight into the next: C takes the client back at its next wait).
 * 1: done; 0: this client is not for C now (Python keeps it); -1: error.
 * Takes the GIL. */
int
fl_take_over(FastLoop *fl, int index, int state)
{
    fl_client *c = &fl->clients[index];
    PyObject *st = c->st, *v, *vars, *prepared;
    int64_t ptr, script;
    int i, k, r, in_pipeline, mid_tx = state == WAIT_RESULT || state == SLEEP;
    int64_t num_syncs = 0;

    fl_py(fl);
    if (fl_get_i64(st, s_ptr, &ptr) < 0)
        return -1;
    if (ptr == 0) {
        /* psycopg's calls drive this connection; or, under -C, there is
         * none: C opens the next one */
        if (!fl->connect_each || mid_tx)
            return 0;
        if ((r = attr_is_none(st, s_conn)) != 1)
            return r;
    }
    /* data still to flush: Python's slower path */
    if ((r = attr_is_true(st, s_flush_pending)) != 0)
        return r < 0 ? -1 : 0;
    /* in a pipeline: only at the wait for \endpipeline's results (a
     * script of pipelines has no other wait, and Python's advance goes
     * from one transaction into the next) */
    if ((in_pipeline = attr_is_true(st, s_in_pipeline)) != 0) {
        if (in_pipeline < 0)
            return -1;
        if (state != WAIT_RESULT)
            return 0;
    }
    if ((r = attr_is_none(st, s_drain_state)) != 1)
        return r;
    if (mid_tx) {
        if (fl_get_i64(st, s_script, &script) < 0)
            return -1;
        c->script = (int)script;
        if ((r = load_mid_tx(fl, c, state, in_pipeline)) <= 0)
            return r;
        if (in_pipeline && fl_get_i64(st, s_num_syncs, &num_syncs) < 0)
            return -1;
    }
    vars = PyObject_GetAttr(st, s_variables);
    if (vars == NULL)
        return -1;
    /* every variable of the plan that holds a value C has a type for;
     * the others are Python's until C assigns them (reading one hands the
     * client back) */
    for (i = 0; i < fl->nvars; i++) {
        fl_value *var = &c->vars[i];

        var->type = FV_NONE;
        var->assigned = 0;
        v = PyDict_GetItemWithError(vars, PyTuple_GET_ITEM(fl->var_names, i));
        if (v == NULL) {
            if (PyErr_Occurred()) {
                Py_DECREF(vars);
                return -1;
            }
            if (i == fl->client_id_slot && vars == fl->shared_vars) {
                /* the worker's shared variables: client_id is what the
                 * client's own copy would hold (own_variables), its id */
                var->i = c->id;
                var->type = FV_INT;
            }
            continue;
        }
        if (PyUnicode_CheckExact(v)) {
            /* text (-D, \gset): typed when read, as Python's str; an int
             * written canonically is that int (the same text, the same
             * value) */
            Py_ssize_t len;
            const char *text = PyUnicode_AsUTF8AndSize(v, &len);

            if (text == NULL) {
                PyErr_Clear(); /* surrogates: Python's */
                continue;
            }
            if (fl_canonical_int(text, len, &var->i))
                var->type = FV_INT;
            else if (fl_var_set_text(var, text, len) < 0) {
                Py_DECREF(vars);
                PyErr_NoMemory();
                return -1;
            }
            continue;
        }
        if (v == Py_None) {
            var->type = FV_NULL;
        } else if (PyBool_Check(v)) {
            var->i = v == Py_True;
            var->type = FV_BOOL;
        } else if (PyFloat_CheckExact(v)) {
            var->d = PyFloat_AS_DOUBLE(v);
            var->type = FV_DOUBLE;
        } else if (PyLong_CheckExact(v)) {
            var->i = PyLong_AsLongLong(v);
            if (var->i == -1 && PyErr_Occurred())
                PyErr_Clear(); /* beyond int64: Python formats it */
            else
                var->type = FV_INT;
        }
    }
    Py_DECREF(vars);
    if (fl->nprep)
        memset(c->prepared, 0, (size_t)fl->nprep);
    if (fl->mode == MODE_PREPARED && ptr != 0) {
        prepared = PyObject_GetAttr(st, s_prepared);
        if (prepared == NULL)
            return -1;
        for (k = 0; k < fl->nscripts; k++) {
            for (i = 0; i < fl->scripts[k].nops; i++) {
                fl_op *op = &fl->scripts[k].ops[i];

                if (op->kind != OP_SQL)
                    continue;
                r = PySequence_Contains(prepared, op->prepname);
                if (r < 0) {
                    Py_DECREF(prepared);
                    return -1;
                }
                if (r)
                    c->prepared[op->prep_bit] = 1;
            }
        }
        Py_DECREF(prepared);
    }
    if (fl_get_i64(st, s_script, &script) < 0 || fl_get_i64(st, s_cnt, &c->cnt) < 0 ||
        fl_get_i64(st, s_skipped, &c->skipped) < 0 ||
        (state == THROTTLE && fl_get_i64(st, s_txn_scheduled, &c->txn_scheduled) < 0))
        return -1;
    v = PyObject_GetAttr(st, s_rng);
    if (v == NULL)
        return -1;
    r = rng_load(v, &c->s0, &c->s1);
    Py_DECREF(v);
    if (r < 0)
        return -1;
    if ((r = attr_is_true(st, s_unwatched)) < 0)
        return -1;
    c->unwatched = r;
    c->script = (int)script;
    c->conn = (PGconn *)(intptr_t)ptr;
    c->assigned = 0;
    c->meta_failed = 0;
    c->pending = NULL;
    c->preparing = 0;
    c->in_pipeline = in_pipeline;
    c->num_syncs = (int)num_syncs;
    c->state = state;
    if (!mid_tx) {
        c->eval_elif = 0;
        c->command = 0;
        c->qrynum = 0;
    }
    c->owner = OWN_C;
    return 1;
}

/* -C: psycopg's PGconn object for a connection C opened (set_connect_raw
 * found where the type keeps its pointer): a new object of the type, its
 * pointer field set; it finishes the connection when it is freed.
 * Takes the GIL. */
PyObject *
fl_wrap_raw(FastLoop *fl, PGconn *conn)
{
    PyTypeObject *tp = fl->raw_type;
    PyObject *args, *obj;

    fl_py(fl);
    args = PyTuple_New(0);
    if (args == NULL)
        return NULL;
    obj = tp->tp_new(tp, args, NULL);
    Py_DECREF(args);
    if (obj == NULL)
        return NULL;
    *(PGconn **)((char *)obj + fl->raw_offset) = conn;
    return obj;
}

/* The client's variables (a new reference) in a dict of its own: while it
 * holds the worker's shared one, a copy with its client_id is made its
 * own first -- pgsurge.engine.state.own_variables, which this mirrors.
 * Before any write. The GIL held. */
PyObject *
fl_own_vars(FastLoop *fl, fl_client *c)
{
    PyObject *vars = PyObject_GetAttr(c->st, s_variables), *id;
    int r;

    if (vars == NULL || vars != fl->shared_vars)
        return vars;
    Py_SETREF(vars, PyDict_Copy(vars));
    if (vars == NULL)
        return NULL;
    if (fl->set_client_id) {
        id = PyLong_FromLongLong(c->id);
        r = id == NULL ? -1 : PyDict_SetItem(vars, s_client_id, id);
        Py_XDECREF(id);
        if (r < 0) {
            Py_DECREF(vars);
            return NULL;
        }
    }
    if (PyObject_SetAttr(c->st, s_variables, vars) < 0) {
        Py_DECREF(vars);
        return NULL;
    }
    return vars;
}

/* Write a C-owned client back into its Client, in ``state``; it is then
 * Python's. Takes the GIL. */
static int
hand_back(FastLoop *fl, int index, int state)
{
    fl_client *c = &fl->clients[index];
    PyObject *st = c->st, *v, *vars;
    int i, r;

    fl_py(fl);
    if (fl->gen != NULL && fl_gen_hand_back(fl, index) < 0)
        return -1;
    c->owner = OWN_PY;
    c->retake_at = c->cnt + 1;
    fl->handbacks++;
    c->preparing = 0;
    if (c->rawconn) {
        /* -C: a connection C opened itself: wrapped into psycopg's object
         * now (which owns it from here), then adopted as below */
        c->pgobj = fl_wrap_raw(fl, c->conn);
        if (c->pgobj == NULL)
            return -1;
        c->rawconn = 0;
    }
    if (c->pgobj != NULL) {
        /* -C: the connection C opened becomes the Client's (Python's
         * loop registers its socket anew) */
        PyObject *ok;

        if (fl_conn_watch(fl, index, -1, 0) < 0 || fl_fd_publish(fl, index) < 0)
            return -1;
        ok = PyObject_CallFunctionObjArgs(fl->conn_adopt, st, c->pgobj, NULL);
        Py_CLEAR(c->pgobj);
        if (ok == NULL)
            return -1;
        Py_DECREF(ok);
    }
    if (fl->connect_each && fl->mode == MODE_PREPARED && c->conn != NULL) {
        /* the statements C prepared on the connection */
        PyObject *prepared = PyObject_GetAttr(st, s_prepared);
        int k;

        if (prepared == NULL)
            return -1;
        for (k = 0; k < fl->nscripts; k++)
            for (i = 0; i < fl->scripts[k].nops; i++) {
                fl_op *op = &fl->scripts[k].ops[i];

                if (op->kind == OP_SQL && c->prepared[op->prep_bit] &&
                    PySet_Add(prepared, op->prepname) < 0) {
                    Py_DECREF(prepared);
                    return -1;
                }
            }
        Py_DECREF(prepared);
    }
    if (c->pending != NULL) {
        /* Python's reading of an error drops the lookahead too */
        pq->clear(c->pending);
        c->pending = NULL;
    }
    if (PyObject_SetAttr(st, s_eval_elif, c->eval_elif ? Py_True : Py_False) < 0 ||
        PyObject_SetAttr(st, s_meta_failed, c->meta_failed ? Py_True : Py_False) < 0 ||
        PyObject_SetAttr(st, s_in_pipeline, c->in_pipeline ? Py_True : Py_False) < 0 ||
        fl_set_i64(st, s_num_syncs, c->num_syncs) < 0)
        return -1;
    if (fl_set_i64(st, s_state, state) < 0 || fl_set_i64(st, s_script, c->script) < 0 ||
        PyObject_SetAttr(st, s_ops, PyTuple_GET_ITEM(fl->script_ops, c->script)) < 0 ||
        fl_set_i64(st, s_command, c->command) < 0 ||
        fl_set_i64(st, s_qrynum, c->qrynum) < 0 ||
        fl_set_i64(st, s_txn_scheduled, c->txn_scheduled) < 0 ||
        fl_set_i64(st, s_txn_begin, c->txn_begin) < 0 ||
        fl_set_i64(st, s_estatus, 0) < 0 || fl_set_i64(st, s_tries, 1) < 0 ||
        fl_set_i64(st, s_cnt, c->cnt) < 0 || fl_set_i64(st, s_skipped, c->skipped) < 0 ||
        (fl->per_command && fl_set_i64(st, s_stmt_begin, c->stmt_begin) < 0))
        return -1;
    if (fl->save_rng) {
        v = words(c->saved0, c->saved1);
        if (v == NULL)
            return -1;
        r = PyObject_SetAttr(st, s_saved_rng, v);
        Py_DECREF(v);
        if (r < 0)
            return -1;
    }
    v = PyObject_GetAttr(st, s_rng);
    if (v == NULL)
        return -1;
    r = rng_store(v, c->s0, c->s1);
    Py_DECREF(v);
    if (r < 0)
        return -1;
    if (c->assigned) {
        vars = fl_own_vars(fl, c);
        if (vars == NULL)
            return -1;
        for (i = 0; i < fl->nvars; i++) {
            fl_value *var = &c->vars[i];

            if (!var->assigned || var->type == FV_NONE)
                continue;
            var->assigned = 0;
            switch (var->type) {
            case FV_INT:
                v = PyLong_FromLongLong(var->i);
                break;
            case FV_DOUBLE:
                v = PyFloat_FromDouble(var->d);
                break;
            case FV_BOOL:
                v = Py_NewRef(var->i ? Py_True : Py_False);
                break;
            case FV_STR:
                v = PyUnicode_DecodeUTF8(var->s, var->len, "surrogateescape");
                break;
            default:
                v = Py_NewRef(Py_None);
            }
            if (v == NULL ||
                PyDict_SetItem(vars, PyTuple_GET_ITEM(fl->var_names, i), v) < 0) {
                Py_XDECREF(v);
                Py_DECREF(vars);
                return -1;
            }
            Py_DECREF(v);
        }
        Py_DECREF(vars);
        c->assigned = 0;
    }
    return 0;
}

/* A Python-owned client came back from Python: file it as
 * EventLoop.run's settle() does. Takes the GIL. */
int
fl_settle_py(FastLoop *fl, int index)
{
    fl_client *c = &fl->clients[index];
    int64_t state;

    fl_py(fl);
    if (fl_refresh_fd(fl, index) < 0 || fl_get_i64(c->st, s_state, &state) < 0)
        return -1;
    if (state == CHOOSE_SCRIPT) {
        fl->runq[fl->nrunq++] = index;
    } else if (state == SLEEP || state == THROTTLE) {
        int64_t deadline;

        if (fl_get_i64(c->st, state == SLEEP ? s_sleep_until : s_txn_scheduled, &deadline) <
            0)
            return -1;
        fl_timer_push(fl, deadline, index);
    } else if (state == FINISHED || state == ABORTED) {
        c->owner = OWN_DONE;
        fl->remains--;
        if (fl->exit_on_abort && state == ABORTED)
            fl->aborted_exit = 1;
    } else if (state == WAIT_RESULT || state == WAIT_ROLLBACK_RESULT) {
        /* it sent while out of the epoll set: watch it again, as
         * EventLoop.run's settle does */
        int r = attr_is_true(c->st, s_unwatched);

        if (r < 0 || (r && fl_watch(fl, index) < 0))
            return -1;
    } else {
        PyErr_Format(PyExc_AssertionError, "client stopped in state %lld",
                     (long long)state);
        return -1;
    }
    return 0;
}

/* Call fn(st[, arg]) for a Python-owned client, with the shared state
 * written back before and reloaded after. Takes the GIL. */
int
fl_call_python(FastLoop *fl, PyObject *fn, int index, PyObject *arg)
{
    PyObject *r;

    fl_py(fl);
    fl->py_calls++;
    if (fl_fd_publish(fl, index) < 0 || fl_shared_store(fl) < 0)
        return -1;
    if (arg == NULL)
        r = PyObject_CallOneArg(fn, fl->clients[index].st);
    else
        r = PyObject_CallFunctionObjArgs(fn, fl->clients[index].st, arg, NULL);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return fl_shared_load(fl);
}

/* Hand a C-owned client to Python in ``state``: advance() (event NULL)
 * or resume(event); then file it. Takes the GIL (an event the caller made
 * was made with it). */
int
fl_to_python(FastLoop *fl, int index, int state, PyObject *event)
{
    fl_py(fl);
    if (hand_back(fl, index, state) < 0)
        return -1;
    if (fl_call_python(fl, event == NULL ? fl->advance : fl->resume, index, event) < 0)
        return -1;
    return fl_settle_py(fl, index);
}

int
fl_to_python_code(FastLoop *fl, int index, int state, long code)
{
    PyObject *event;
    int r;

    fl_py(fl);
    event = PyLong_FromLong(code);
    if (event == NULL)
        return -1;
    r = fl_to_python(fl, index, state, event);
    Py_DECREF(event);
    return r;
}

/* a PgPrng's words (_fastloop_gen.c: the generator draws from Client.rng) */
int
fl_rng_load(PyObject *rng, uint64_t *s0, uint64_t *s1)
{
    return rng_load(rng, s0, s1);
}

/*
 * pgsurge._fastloop: a worker's event loop and the common case of its
 * clients' state machine, in C.
 *
 * The Python engine (pgsurge.loop.EventLoop.run driving the advance()
 * closure of pgsurge.client) is the reference. For runs that
 * pgsurge.fastloop finds eligible (plain scripts of SQL commands, \set of
 * constants or random(lo, hi) and \sleep, no per-command timing, no logs:
 * see there) this module runs the same loop, and runs every transaction
 * that goes as planned without entering Python at all -- throttled ones
 * (-R, -L) included.
 *
 * Ownership. Each client is, at any time, owned either by Python or by C.
 * Every client starts owned by Python. When a Python-owned client is due
 * to choose its next script (CHOOSE_SCRIPT), or its throttle slot has come
 * (THROTTLE: Python's advance() goes on from a transaction into the next
 * slot's wait), C takes it over: it loads the
 * client's counters, PRNG state, its constant integer variables and which
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
 * The client stays Python-owned until it reaches CHOOSE_SCRIPT again.
 *
 * Shared worker state. The worker's total and per-script stats, its
 * choose stream and, under -R, its throttle stream and schedule
 * (throttle_trigger) and -L's late count are shared between the clients,
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
 * waits on it), the same runnable queue and its order, the same heap of
 * timers ordered by (deadline, client id) for \sleep and throttle slots,
 * of Python's clients as of C's, the same order of a round (ready sockets,
 * due timers, the runnable queue, the progress tick), the same wait
 * timeouts and idle accounting, the same clock (CLOCK_MONOTONIC in whole
 * microseconds, as time.monotonic_ns() // 1000). Progress ticks are left
 * to Python: run() returns TICK when one is due and is called again.
 * Signals: a wait interrupted by one, or any loop iteration, runs Python's
 * handlers (PyErr_CheckSignals); the SIGALRM handler sets the worker's
 * timer_exceeded (the end of -T), which C then reads; a KeyboardInterrupt
 * propagates as an exception.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <math.h>
#include <poll.h>
#include <stdint.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>

#include "_fastpq_api.h"

#define FASTLOOP_API 2

/* pgsurge.client_state's numbers (checked by pgsurge.fastloop) */
#define CHOOSE_SCRIPT 0
#define START_TX 1
#define PREPARE_THROTTLE 2
#define THROTTLE 3
#define START_COMMAND 4
#define WAIT_RESULT 5
#define SLEEP 6
#define END_COMMAND 7
#define WAIT_ROLLBACK_RESULT 10
#define END_TX 13
#define ABORTED 14
#define FINISHED 15

#define MODE_SIMPLE 0
#define MODE_EXTENDED 1
#define MODE_PREPARED 2

/* run() outcomes: pgsurge.loop.LoopOutcome's, and TICK */
#define OUT_DONE 0
#define OUT_EXIT_ON_ABORT 1
#define OUT_STOPPED 2
#define OUT_TICK 3

/* what resume() is told besides a drain() result (always >= 0) */
#define RESUME_FLUSH (-1)
#define RESUME_SEND_FAILED (-2)

/* libpq values */
#define PGRES_EMPTY_QUERY 0
#define PGRES_COMMAND_OK 1
#define PGRES_TUPLES_OK 2
#define PQTRANS_IDLE 0
#define PG_DIAG_SQLSTATE 'C'

/* pgsurge.client.TX_BUDGET */
#define TX_BUDGET 4
/* pg_prng_double's scale: 2**-52 */
#define TWO_M52 (1.0 / 4503599627370496.0)
/* room for an int64 in decimal, sign and NUL included */
#define INT_TEXT 24
/* client variables C keeps as int64 (a bit each in a mask) */
#define MAX_VARS 64
/* parameters of an extended/prepared command: pgbench's limit (a variable
 * read twice is two); simple mode splices the values in and has none */
#define MAX_PARAMS 255

static const pgsurge_fastpq_api *pq;

/* ---------------------------------------------------------------------- */
/* The plan: scripts as C ops                                             */

enum {
    OP_END = 0,
    OP_SET_CONST = 1,
    OP_SET_RANDOM = 2,
    OP_SQL = 3,
    OP_SLEEP_CONST = 4,
    OP_SLEEP_VAR = 5
};

typedef struct {
    int kind;
    /* \set: the variable's slot, the constant or the bounds;
     * \sleep: the µs (constant), or the variable's slot and a = the unit */
    int slot;
    int64_t a, b;
    /* SQL: prepared statement name (prepared), query text (extended, and
     * simple without variables); NULL in simple mode with variables */
    const char *text;
    /* variables ($n order; simple mode: between the literal parts) */
    int nparams;
    int *params;
    /* simple mode with variables: nparams + 1 literal parts */
    const char **lits;
    Py_ssize_t *litlens;
    /* the bit of this statement in a client's prepared mask */
    int prep_bit;
    /* prepared: the name as Python bytes, to look up in Client.prepared */
    PyObject *prepname;
} fl_op;

typedef struct {
    int nops;
    fl_op *ops;
} fl_script;

/* a SimpleStats, as a working copy */
typedef struct {
    PyObject *obj;
    int64_t count;
    double min, max, sum, sum2;
    int min_int, max_int;
} fl_simple;

/* a StatsData's counters C moves, as working copies (lag and skipped
 * only under --rate) */
typedef struct {
    PyObject *data; /* StatsData */
    int64_t cnt, skipped;
    fl_simple lat, lag;
} fl_stats;

enum { OWN_PY = 0, OWN_C = 1, OWN_DONE = 2 };

typedef struct {
    int64_t deadline;
    int index;
} fl_timer;

typedef struct {
    PyObject *st; /* the Client */
    PGconn *conn;
    int fd;
    int owner;
    /* the rest is meaningful while owner == OWN_C */
    int state, script, command, qrynum;
    int64_t txn_scheduled, txn_begin, sleep_until, cnt;
    uint64_t s0, s1, saved0, saved1;
    uint64_t assigned; /* slots \set by C, to write back */
    uint64_t prepared; /* statements prepared on the connection */
    int64_t vals[MAX_VARS];
} fl_client;

typedef struct {
    PyObject_HEAD
    int nclients, nscripts, nvars, nset, mode;
    fl_client *clients;
    fl_script *scripts;
    PyObject *script_ops; /* tuple of the Python Op tuples (Client.ops) */
    PyObject *var_names;  /* tuple of str */
    PyObject *keep;       /* the plan, kept alive: ops point into its bytes */
    int64_t *weights;
    int64_t total_weight;
    /* flags of the run */
    int64_t nxacts, end_us, latency_limit;
    int use_end, detailed, tx_clock, save_rng, restart_inline, exit_on_abort;
    /* --rate: the worker's mean Poisson delay (µs); 0.0 when not throttled */
    double throttle_delay;
    int throttled;
    PyObject *wstate, *choose_rng, *throttle_rng, *advance, *resume, *absorb;
    fl_stats total;
    fl_stats *per_script; /* NULL with one script */
    uint64_t c0, c1;      /* the choose stream */
    uint64_t t0, t1;      /* the throttle stream (--rate) */
    int64_t trigger;      /* WorkerState.throttle_trigger */
    int64_t latency_late; /* WorkerState.latency_late (-L) */
    int timer_exceeded;
    int epfd, control_fd;
    /* fd -> client index + 1 (0: none) */
    int *by_fd;
    int by_fd_len;
    /* the runnable queue and the batch being run */
    int *runq, *batch;
    int nrunq;
    int remains, aborted_exit, started;
    int64_t idle_us, now_us;
    struct epoll_event *events;
    /* pgsurge.loop's timers: a heap of (deadline, client) -- a worker's
     * client ids grow with their index, so the index orders as the id */
    fl_timer *timers;
    int ntimers;
} FastLoop;

/* interned attribute names */
static PyObject *s_state, *s_script, *s_ops, *s_command, *s_qrynum, *s_cnt,
    *s_txn_scheduled, *s_txn_begin, *s_estatus, *s_tries, *s_saved_rng, *s_rng,
    *s_variables, *s_ptr, *s_fd, *s_prepared, *s_flush_pending, *s_drain_state,
    *s_in_pipeline, *s_count, *s_min, *s_max, *s_sum, *s_sum2, *s_latency,
    *s_timer_exceeded, *s_getstate, *s_setstate, *s_stats, *s_per_script,
    *s_choose_rng, *s_throttle_rng, *s_throttle_trigger, *s_latency_late,
    *s_skipped, *s_lag, *s_sleep_until;

/* ---------------------------------------------------------------------- */
/* Small helpers                                                          */

static inline int64_t
clock_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    /* time.monotonic_ns() // 1000: the same clock, floored to µs */
    return ((int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec) / 1000;
}

/* pg_prng's xoroshiro128**: the next output, the state moved on */
static inline uint64_t
prng_next(uint64_t *s0, uint64_t *s1)
{
    uint64_t a = *s0, x = *s1 ^ a;
    uint64_t r = a * 5;

    r = ((r << 7) | (r >> 57)) * 9;
    *s0 = ((a << 24) | (a >> 40)) ^ x ^ (x << 16);
    *s1 = (x << 37) | (x >> 27);
    return r;
}

/* PgPrng.int64_range: rmin + a uniform draw in [0, rmax - rmin] by
 * rejection of the top bits (the caller checked that the span fits) */
static inline int64_t
prng_range(uint64_t *s0, uint64_t *s1, int64_t rmin, int64_t rmax)
{
    uint64_t span, v;
    int shift;

    if (rmax <= rmin)
        return rmin;
    span = (uint64_t)rmax - (uint64_t)rmin;
    shift = __builtin_clzll(span);
    do {
        v = prng_next(s0, s1) >> shift;
    } while (v > span);
    return (int64_t)((uint64_t)rmin + v);
}

/* n in decimal into buf (NUL-terminated); returns buf */
static const char *
int_text(int64_t n, char *buf)
{
    char tmp[INT_TEXT];
    char *p = tmp + sizeof tmp;
    uint64_t u = n < 0 ? 0ULL - (uint64_t)n : (uint64_t)n;
    size_t len;

    *--p = '\0';
    do {
        *--p = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (n < 0)
        *--p = '-';
    len = (size_t)(tmp + sizeof tmp - p);
    memcpy(buf, p, len);
    return buf;
}

static int
get_i64(PyObject *obj, PyObject *name, int64_t *out)
{
    PyObject *v = PyObject_GetAttr(obj, name);

    if (v == NULL)
        return -1;
    *out = PyLong_AsLongLong(v);
    Py_DECREF(v);
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

static int
set_i64(PyObject *obj, PyObject *name, int64_t value)
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

static int
simple_load(fl_simple *s)
{
    if (get_i64(s->obj, s_count, &s->count) < 0 ||
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
    if (get_i64(s->data, s_cnt, &s->cnt) < 0 || simple_load(&s->lat) < 0)
        return -1;
    if (throttled &&
        (get_i64(s->data, s_skipped, &s->skipped) < 0 || simple_load(&s->lag) < 0))
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

static int
simple_store(fl_simple *s)
{
    if (set_i64(s->obj, s_count, s->count) < 0 ||
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
    if (set_i64(s->data, s_cnt, s->cnt) < 0 || simple_store(&s->lat) < 0)
        return -1;
    if (throttled &&
        (set_i64(s->data, s_skipped, s->skipped) < 0 || simple_store(&s->lag) < 0))
        return -1;
    return 0;
}

/* SimpleStats.add(latency) of an int latency, as Python does it: min/max
 * become ints, the sums stay floats (float + int rounds the int once) */
static inline void
stats_add(fl_simple *s, int64_t latency)
{
    double v = (double)latency;
    __int128 sq = (__int128)latency * latency;

    if (s->count == 0) {
        s->min = s->max = v;
        s->min_int = s->max_int = 1;
    } else if (v < s->min) {
        s->min = v;
        s->min_int = 1;
    } else if (v > s->max) {
        s->max = v;
        s->max_int = 1;
    }
    s->count++;
    s->sum += v;
    s->sum2 += (double)sq;
}

/* everything shared by the worker's clients: C's copies -> Python */
static int
shared_store(FastLoop *fl)
{
    int i;

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
                          set_i64(fl->wstate, s_throttle_trigger, fl->trigger) < 0))
        return -1;
    if (fl->latency_limit && set_i64(fl->wstate, s_latency_late, fl->latency_late) < 0)
        return -1;
    return 0;
}

/* the worker's timer_exceeded, which its SIGALRM handler sets (-T) */
static int
read_timer(FastLoop *fl)
{
    fl->timer_exceeded = attr_is_true(fl->wstate, s_timer_exceeded);
    return fl->timer_exceeded < 0 ? -1 : 0;
}

/* Python -> C's copies (after Python ran: it may have changed them) */
static int
shared_load(FastLoop *fl)
{
    int i;

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
                          get_i64(fl->wstate, s_throttle_trigger, &fl->trigger) < 0))
        return -1;
    if (fl->latency_limit && get_i64(fl->wstate, s_latency_late, &fl->latency_late) < 0)
        return -1;
    return read_timer(fl);
}

/* ---------------------------------------------------------------------- */
/* The timers: pgsurge.loop's heap of (deadline, client id)               */

static inline int
timer_before(const fl_timer *a, const fl_timer *b)
{
    return a->deadline < b->deadline || (a->deadline == b->deadline && a->index < b->index);
}

/* a client is in the heap at most once, so there is room for all */
static void
timer_push(FastLoop *fl, int64_t deadline, int index)
{
    fl_timer t = {deadline, index}, *h = fl->timers;
    int i = fl->ntimers++;

    while (i > 0) {
        int parent = (i - 1) / 2;

        if (!timer_before(&t, &h[parent]))
            break;
        h[i] = h[parent];
        i = parent;
    }
    h[i] = t;
}

static int
timer_pop(FastLoop *fl)
{
    fl_timer *h = fl->timers, last;
    int top = h[0].index, n = --fl->ntimers, i = 0;

    if (n == 0)
        return top;
    last = h[n];
    for (;;) {
        int child = 2 * i + 1;

        if (child >= n)
            break;
        if (child + 1 < n && timer_before(&h[child + 1], &h[child]))
            child++;
        if (!timer_before(&h[child], &last))
            break;
        h[i] = h[child];
        i = child;
    }
    h[i] = last;
    return top;
}

/* ---------------------------------------------------------------------- */
/* Clients: taking over from Python, handing back                         */

static int
map_fd(FastLoop *fl, int fd, int index)
{
    if (fd < 0)
        return 0;
    if (fd >= fl->by_fd_len) {
        int len = fd * 2 + 16, *m = PyMem_Realloc(fl->by_fd, sizeof(int) * len);

        if (m == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        memset(m + fl->by_fd_len, 0, sizeof(int) * (len - fl->by_fd_len));
        fl->by_fd = m;
        fl->by_fd_len = len;
    }
    fl->by_fd[fd] = index + 1;
    return 0;
}

/* after Python ran for a client: follow its descriptor (a detach sets -1) */
static int
refresh_fd(FastLoop *fl, int index)
{
    fl_client *c = &fl->clients[index];
    int64_t fd;

    if (get_i64(c->st, s_fd, &fd) < 0)
        return -1;
    if (fd != c->fd) {
        if (c->fd >= 0 && c->fd < fl->by_fd_len && fl->by_fd[c->fd] == index + 1)
            fl->by_fd[c->fd] = 0;
        c->fd = (int)fd;
        if (map_fd(fl, c->fd, index) < 0)
            return -1;
    }
    return 0;
}

/* Take a Python-owned client in CHOOSE_SCRIPT or THROTTLE (its slot
 * drawn, waiting for it) over. 1: done; 0: this client is not for C now
 * (Python keeps it); -1: error. */
static int
take_over(FastLoop *fl, int index, int state)
{
    fl_client *c = &fl->clients[index];
    PyObject *st = c->st, *v, *vars, *prepared;
    int64_t ptr, script;
    int i, k, r;

    if (get_i64(st, s_ptr, &ptr) < 0)
        return -1;
    if (ptr == 0)
        return 0; /* psycopg's calls drive this connection */
    /* data still to flush, or a pipeline: Python's slower paths */
    if ((r = attr_is_true(st, s_flush_pending)) != 0 ||
        (r = attr_is_true(st, s_in_pipeline)) != 0)
        return r < 0 ? -1 : 0;
    v = PyObject_GetAttr(st, s_drain_state);
    if (v == NULL)
        return -1;
    r = v == Py_None;
    Py_DECREF(v);
    if (!r)
        return 0;
    vars = PyObject_GetAttr(st, s_variables);
    if (vars == NULL)
        return -1;
    /* the constant integer variables the SQL reads (never \set) */
    for (i = fl->nset; i < fl->nvars; i++) {
        v = PyDict_GetItemWithError(vars, PyTuple_GET_ITEM(fl->var_names, i));
        if (v == NULL || !PyLong_CheckExact(v)) {
            Py_DECREF(vars);
            return PyErr_Occurred() ? -1 : 0;
        }
        c->vals[i] = PyLong_AsLongLong(v);
        if (c->vals[i] == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            Py_DECREF(vars);
            return 0; /* beyond int64: Python formats it */
        }
    }
    Py_DECREF(vars);
    c->prepared = 0;
    if (fl->mode == MODE_PREPARED) {
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
                    c->prepared |= 1ULL << op->prep_bit;
            }
        }
        Py_DECREF(prepared);
    }
    if (get_i64(st, s_script, &script) < 0 || get_i64(st, s_cnt, &c->cnt) < 0 ||
        (state == THROTTLE && get_i64(st, s_txn_scheduled, &c->txn_scheduled) < 0))
        return -1;
    v = PyObject_GetAttr(st, s_rng);
    if (v == NULL)
        return -1;
    r = rng_load(v, &c->s0, &c->s1);
    Py_DECREF(v);
    if (r < 0)
        return -1;
    c->script = (int)script;
    c->conn = (PGconn *)(intptr_t)ptr;
    c->assigned = 0;
    c->state = state;
    c->command = 0;
    c->qrynum = 0;
    c->owner = OWN_C;
    return 1;
}

/* Write a C-owned client back into its Client, in ``state``; it is then
 * Python's. */
static int
hand_back(FastLoop *fl, int index, int state)
{
    fl_client *c = &fl->clients[index];
    PyObject *st = c->st, *v, *vars;
    int i, r;

    c->owner = OWN_PY;
    if (set_i64(st, s_state, state) < 0 || set_i64(st, s_script, c->script) < 0 ||
        PyObject_SetAttr(st, s_ops, PyTuple_GET_ITEM(fl->script_ops, c->script)) < 0 ||
        set_i64(st, s_command, c->command) < 0 ||
        set_i64(st, s_qrynum, c->qrynum) < 0 ||
        set_i64(st, s_txn_scheduled, c->txn_scheduled) < 0 ||
        set_i64(st, s_txn_begin, c->txn_begin) < 0 ||
        set_i64(st, s_estatus, 0) < 0 || set_i64(st, s_tries, 1) < 0 ||
        set_i64(st, s_cnt, c->cnt) < 0)
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
        vars = PyObject_GetAttr(st, s_variables);
        if (vars == NULL)
            return -1;
        for (i = 0; i < fl->nset; i++) {
            if (!(c->assigned & (1ULL << i)))
                continue;
            v = PyLong_FromLongLong(c->vals[i]);
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
 * EventLoop.run's settle() does. */
static int
settle_py(FastLoop *fl, int index)
{
    fl_client *c = &fl->clients[index];
    int64_t state;

    if (refresh_fd(fl, index) < 0 || get_i64(c->st, s_state, &state) < 0)
        return -1;
    if (state == CHOOSE_SCRIPT) {
        fl->runq[fl->nrunq++] = index;
    } else if (state == SLEEP || state == THROTTLE) {
        int64_t deadline;

        if (get_i64(c->st, state == SLEEP ? s_sleep_until : s_txn_scheduled, &deadline) <
            0)
            return -1;
        timer_push(fl, deadline, index);
    } else if (state == FINISHED || state == ABORTED) {
        c->owner = OWN_DONE;
        fl->remains--;
        if (fl->exit_on_abort && state == ABORTED)
            fl->aborted_exit = 1;
    } else if (state != WAIT_RESULT && state != WAIT_ROLLBACK_RESULT) {
        PyErr_Format(PyExc_AssertionError, "client stopped in state %lld",
                     (long long)state);
        return -1;
    }
    return 0;
}

/* Call fn(st[, arg]) for a Python-owned client, with the shared state
 * written back before and reloaded after. */
static int
call_python(FastLoop *fl, PyObject *fn, int index, PyObject *arg)
{
    PyObject *r;

    if (shared_store(fl) < 0)
        return -1;
    if (arg == NULL)
        r = PyObject_CallOneArg(fn, fl->clients[index].st);
    else
        r = PyObject_CallFunctionObjArgs(fn, fl->clients[index].st, arg, NULL);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return shared_load(fl);
}

/* Hand a C-owned client to Python in ``state``: advance() (event NULL)
 * or resume(event); then file it. */
static int
to_python(FastLoop *fl, int index, int state, PyObject *event)
{
    if (hand_back(fl, index, state) < 0)
        return -1;
    if (call_python(fl, event == NULL ? fl->advance : fl->resume, index, event) < 0)
        return -1;
    return settle_py(fl, index);
}

static int
to_python_code(FastLoop *fl, int index, int state, long code)
{
    PyObject *event = PyLong_FromLong(code);
    int r;

    if (event == NULL)
        return -1;
    r = to_python(fl, index, state, event);
    Py_DECREF(event);
    return r;
}

/* ---------------------------------------------------------------------- */
/* A C-owned client's state machine (client.advance's common case)        */

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
                p = int_text(c->vals[op->params[i]], ints[0]);
                n = strlen(p);
            } else
                n = 0;
            if (len + m + n + 1 > cap) {
                char *bigger;

                cap = (len + m + n + 1) * 2;
                bigger = PyMem_Malloc(cap);
                if (bigger == NULL) {
                    if (text != small)
                        PyMem_Free(text);
                    PyErr_NoMemory();
                    return -3;
                }
                memcpy(bigger, text, len);
                if (text != small)
                    PyMem_Free(text);
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
            PyMem_Free(text);
    } else if (fl->mode == MODE_SIMPLE) {
        ok = pq->sendQuery(c->conn, op->text);
    } else {
        for (i = 0; i < op->nparams; i++)
            values[i] = int_text(c->vals[op->params[i]], ints[i]);
        if (fl->mode == MODE_PREPARED)
            ok = pq->sendQueryPrepared(c->conn, op->text, op->nparams,
                                       op->nparams ? values : NULL, NULL, NULL, 0);
        else
            ok = pq->sendQueryParams(c->conn, op->text, op->nparams, NULL,
                                     op->nparams ? values : NULL, NULL, NULL, 0);
    }
    /* as pgsurge._fastpq: 0 all sent, 1 data left, -1 flush failed,
     * -2 send failed */
    return ok ? pq->flush(c->conn) : -2;
}

static PyObject *
bytes_or_none(const char *s)
{
    if (s == NULL)
        Py_RETURN_NONE;
    return PyBytes_FromString(s);
}

/* pgbench's getPoissonRand (pgsurge.throttle.poisson_delay): the next
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

/* client_tx's process_xact for what C accounts (a first-try success, or
 * a slot skipped under -L): returns the clock, read if it was needed */
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
    record(&fl->total, latency, lag, skipped, fl->throttled);
    if (fl->latency_limit && latency > fl->latency_limit)
        fl->latency_late++;
    c->cnt++;
    if (fl->per_script != NULL)
        record(&fl->per_script[c->script], latency, lag, skipped, fl->throttled);
    return now;
}

/* C's int of a C int's bits (client_meta.c_int): how the x86 binary wraps */
static inline int64_t
c_int(int64_t v)
{
    return (int32_t)(uint32_t)(uint64_t)v;
}

/* Advance a C-owned client until it must wait, as client.advance does.
 * On return the client either waits for its socket (WAIT_RESULT) or a
 * deadline (SLEEP, THROTTLE: in the timers), is runnable (CHOOSE_SCRIPT,
 * queued), or belongs to Python (filed). */
static int
c_advance(FastLoop *fl, int index)
{
    fl_client *c = &fl->clients[index];
    const fl_script *sc = &fl->scripts[c->script];
    int64_t now = 0;
    int io_done = 0, budget = TX_BUDGET, state = c->state;

    for (;;) {
        switch (state) {
        case END_COMMAND:
            c->command++;
            state = START_COMMAND;
            /* fall through */
        case START_COMMAND: {
            const fl_op *op = &sc->ops[c->command];
            int sent;

            if (op->kind == OP_END) {
                state = END_TX;
                continue;
            }
            if (op->kind == OP_SET_CONST || op->kind == OP_SET_RANDOM) {
                c->vals[op->slot] = op->kind == OP_SET_CONST
                                        ? op->a
                                        : prng_range(&c->s0, &c->s1, op->a, op->b);
                c->assigned |= 1ULL << op->slot;
                now = 0;
                state = END_COMMAND;
                continue;
            }
            if (op->kind == OP_SLEEP_CONST || op->kind == OP_SLEEP_VAR) {
                /* client_meta.sleep_usec; the clock is not re-read after */
                int64_t usec = op->a;

                if (op->kind == OP_SLEEP_VAR) {
                    int64_t v = c->vals[op->slot];

                    usec = c_int(v);
                    if (usec == 0 && v < 0)
                        /* atoi() of "-...": Python gives pgbench's error */
                        return to_python(fl, index, START_COMMAND, NULL);
                    usec = c_int(usec * op->a);
                }
                if (!now)
                    now = clock_us();
                c->sleep_until = now + usec;
                state = SLEEP;
                continue;
            }
            if (fl->mode == MODE_PREPARED && !(c->prepared & (1ULL << op->prep_bit)))
                /* its first use on this connection: Python prepares it */
                return to_python(fl, index, START_COMMAND, NULL);
            sent = send_sql(fl, c, op);
            if (sent == -3)
                return -1;
            c->qrynum = 0;
            if (sent < 0)
                return to_python_code(fl, index, START_COMMAND, RESUME_SEND_FAILED);
            if (sent > 0)
                /* wait for writability: Python's slower path does it */
                return to_python_code(fl, index, WAIT_RESULT, RESUME_FLUSH);
            state = WAIT_RESULT;
            continue;
        }
        case WAIT_RESULT: {
            /* pgsurge._fastpq's drain(), and what advance does with it */
            PGresult *res;
            int status, q = c->qrynum;

            if (!pq->consumeInput(c->conn))
                return to_python_code(fl, index, WAIT_RESULT, (long)q * 4 + 3);
            for (;;) {
                if (pq->isBusy(c->conn)) {
                    c->qrynum = q;
                    c->state = WAIT_RESULT;
                    return 0;
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
                {
                    PyObject *got = Py_BuildValue(
                        "(iiNN)", q, status,
                        bytes_or_none(pq->resultErrorField(res, PG_DIAG_SQLSTATE)),
                        bytes_or_none(pq->resultErrorMessage(res)));
                    int r;

                    pq->clear(res);
                    if (got == NULL)
                        return -1;
                    c->qrynum = q;
                    r = to_python(fl, index, WAIT_RESULT, got);
                    Py_DECREF(got);
                    return r;
                }
            }
            c->qrynum = q;
            if (!q)
                return to_python_code(fl, index, WAIT_RESULT, 1);
            io_done = 1;
            state = END_COMMAND;
            continue;
        }
        case SLEEP:
            if (!now)
                now = clock_us();
            if (now < c->sleep_until) {
                c->state = SLEEP;
                timer_push(fl, c->sleep_until, index);
                return 0;
            }
            state = END_COMMAND;
            continue;
        case END_TX: {
            if (pq->transactionStatus(c->conn) != PQTRANS_IDLE)
                /* left open, or a broken connection: Python accounts the
                 * transaction and aborts the client with its message */
                return to_python(fl, index, END_TX, NULL);
            if (!fl->throttled && fl->per_script == NULL) {
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
                } else
                    fl->total.lat.count++;
            } else
                now = process_xact(fl, c, now, 0);
            if (fl->use_end ? fl->timer_exceeded : c->cnt >= fl->nxacts)
                return to_python(fl, index, FINISHED, NULL);
            if (!io_done || !budget) {
                c->state = CHOOSE_SCRIPT;
                fl->runq[fl->nrunq++] = index;
                return 0;
            }
            io_done = 0;
            budget--;
            now = 0;
            if (!fl->restart_inline) {
                state = CHOOSE_SCRIPT;
                continue;
            }
            if (fl->tx_clock) {
                now = clock_us();
                c->txn_begin = c->txn_scheduled = now;
            }
            if (fl->save_rng) {
                c->saved0 = c->s0;
                c->saved1 = c->s1;
            }
            c->command = 0;
            state = START_COMMAND;
            continue;
        }
        case CHOOSE_SCRIPT:
            if (fl->nscripts != 1) {
                /* client_tx.choose_script */
                int64_t wv = prng_range(&fl->c0, &fl->c1, 0, fl->total_weight - 1);
                int i = 0;

                do
                    wv -= fl->weights[i++];
                while (wv >= 0);
                c->script = i - 1;
                sc = &fl->scripts[c->script];
            }
            if (fl->timer_exceeded)
                return to_python(fl, index, FINISHED, NULL);
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
                    now = process_xact(fl, c, now, 1);
                    if (fl->timer_exceeded || (fl->nxacts > 0 && c->cnt >= fl->nxacts))
                        return to_python(fl, index, FINISHED, NULL);
                    continue;
                }
            }
            if (fl->end_us && c->txn_scheduled > fl->end_us)
                return to_python(fl, index, FINISHED, NULL);
            state = THROTTLE;
            /* fall through */
        case THROTTLE:
            if (!now)
                now = clock_us();
            if (now < c->txn_scheduled) {
                c->state = THROTTLE;
                timer_push(fl, c->txn_scheduled, index);
                return 0;
            }
            if (fl->timer_exceeded)
                return to_python(fl, index, FINISHED, NULL);
            state = START_TX;
            /* fall through */
        case START_TX:
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
        default:
            PyErr_Format(PyExc_AssertionError, "C-owned client in state %d", state);
            return -1;
        }
    }
}

/* ---------------------------------------------------------------------- */
/* The loop                                                               */

/* Run a client of the runnable queue, or whose deadline has come
 * (pgsurge.loop: advance, settle). */
static int
run_client(FastLoop *fl, int index)
{
    fl_client *c = &fl->clients[index];
    int64_t state;
    int r;

    if (c->owner == OWN_PY) {
        if (get_i64(c->st, s_state, &state) < 0)
            return -1;
        r = state == CHOOSE_SCRIPT || state == THROTTLE
                ? take_over(fl, index, (int)state)
                : 0;
        if (r < 0)
            return -1;
        if (!r) {
            if (call_python(fl, fl->advance, index, NULL) < 0)
                return -1;
            return settle_py(fl, index);
        }
    }
    return c_advance(fl, index);
}

/* A socket is ready (pgsurge.loop: the events part of run). */
static int
socket_ready(FastLoop *fl, int index)
{
    fl_client *c = &fl->clients[index];
    int64_t state;

    if (c->owner == OWN_C) {
        if (c->state == WAIT_RESULT)
            return c_advance(fl, index);
    } else if (c->owner == OWN_PY) {
        if (get_i64(c->st, s_state, &state) < 0)
            return -1;
        if (state == WAIT_RESULT || state == WAIT_ROLLBACK_RESULT) {
            if (call_python(fl, fl->advance, index, NULL) < 0)
                return -1;
            if (get_i64(c->st, s_state, &state) < 0)
                return -1;
            return state == WAIT_RESULT ? refresh_fd(fl, index) : settle_py(fl, index);
        }
    }
    /* not waiting for it: a notice, or the server closed the connection */
    if (call_python(fl, fl->absorb, index, NULL) < 0)
        return -1;
    return refresh_fd(fl, index);
}

/* Wait on the epoll instance: timeout_us < 0 without limit. epoll_wait
 * counts milliseconds; like pgsurge.loop.Waiter, a finite timeout waits on
 * the epoll descriptor with ppoll (nanoseconds), then fetches. */
static int
wait_events(FastLoop *fl, int64_t timeout_us)
{
    int n, max = fl->nclients + 1;

    if (timeout_us > 0) {
        struct pollfd pfd = {fl->epfd, POLLIN, 0};
        struct timespec ts = {(time_t)(timeout_us / 1000000),
                              (long)(timeout_us % 1000000) * 1000};

        Py_BEGIN_ALLOW_THREADS
        n = ppoll(&pfd, 1, &ts, NULL);
        Py_END_ALLOW_THREADS
        if (n <= 0)
            return n < 0 && errno != EINTR ? -1 : 0;
        timeout_us = 0;
    }
    if (timeout_us == 0)
        n = epoll_wait(fl->epfd, fl->events, max, 0);
    else {
        Py_BEGIN_ALLOW_THREADS
        n = epoll_wait(fl->epfd, fl->events, max, -1);
        Py_END_ALLOW_THREADS
    }
    if (n < 0)
        return errno == EINTR ? 0 : -1;
    return n;
}

/* write everything back before leaving run() */
static PyObject *
leave(FastLoop *fl, int outcome)
{
    if (shared_store(fl) < 0)
        return NULL;
    return PyLong_FromLong(outcome);
}

PyDoc_STRVAR(run_doc,
             "run(next_tick)\n--\n\n"
             "Run the loop until every client is done (0), a client aborted\n"
             "under --exit-on-abort (1), the control descriptor is readable (2),\n"
             "or the clock reached next_tick (3; 0: no tick): then call again.\n"
             "The shared stats and choose stream are written back on return.");

static PyObject *
FastLoop_run(FastLoop *fl, PyObject *arg)
{
    int64_t next_tick = PyLong_AsLongLong(arg);
    int i, n;

    if (next_tick == -1 && PyErr_Occurred())
        return NULL;
    if (shared_load(fl) < 0)
        return NULL;
    if (!fl->started) {
        fl->started = 1;
        for (i = 0; i < fl->nclients; i++) {
            int64_t state;

            if (get_i64(fl->clients[i].st, s_state, &state) < 0 ||
                refresh_fd(fl, i) < 0)
                return NULL;
            if (state != FINISHED && state != ABORTED) {
                fl->remains++;
                fl->runq[fl->nrunq++] = i;
            } else
                fl->clients[i].owner = OWN_DONE;
        }
    }
    while (fl->remains > 0) {
        int *batch, nbatch;

        if (fl->nrunq)
            n = wait_events(fl, 0);
        else {
            /* until the nearest deadline: a sleep, a slot, a progress tick */
            int64_t deadline = fl->ntimers ? fl->timers[0].deadline : 0, t0;

            if (next_tick && (!deadline || next_tick < deadline))
                deadline = next_tick;
            t0 = clock_us();
            n = wait_events(fl, deadline ? (deadline > t0 ? deadline - t0 : 0) : -1);
            fl->idle_us += clock_us() - t0;
        }
        if (n < 0)
            return PyErr_SetFromErrno(PyExc_OSError);
        /* the alarm of -T (or a Ctrl-C) lands here */
        if (PyErr_CheckSignals() < 0)
            return NULL;
        if (read_timer(fl) < 0)
            return NULL;
        for (i = 0; i < n; i++) {
            int fd = fl->events[i].data.fd, index;

            index = fd >= 0 && fd < fl->by_fd_len ? fl->by_fd[fd] - 1 : -1;
            if (index < 0) {
                if (fd == fl->control_fd)
                    return leave(fl, OUT_STOPPED);
                continue;
            }
            if (socket_ready(fl, index) < 0)
                return NULL;
            if (fl->aborted_exit)
                return leave(fl, OUT_EXIT_ON_ABORT);
        }
        if (fl->ntimers) {
            int64_t now = clock_us();

            while (fl->ntimers && fl->timers[0].deadline <= now) {
                if (run_client(fl, timer_pop(fl)) < 0)
                    return NULL;
                if (fl->aborted_exit)
                    return leave(fl, OUT_EXIT_ON_ABORT);
            }
        }
        if (fl->nrunq) {
            batch = fl->runq;
            nbatch = fl->nrunq;
            fl->runq = fl->batch;
            fl->batch = batch;
            fl->nrunq = 0;
            for (i = 0; i < nbatch; i++) {
                if (run_client(fl, batch[i]) < 0)
                    return NULL;
                if (fl->aborted_exit)
                    return leave(fl, OUT_EXIT_ON_ABORT);
            }
        }
        if (next_tick) {
            int64_t now = clock_us();

            if (now >= next_tick) {
                fl->now_us = now;
                return leave(fl, OUT_TICK);
            }
        }
    }
    return leave(fl, OUT_DONE);
}

/* ---------------------------------------------------------------------- */
/* Construction                                                           */

static int
parse_op(FastLoop *fl, PyObject *spec, fl_op *op, int *nprep)
{
    PyObject *params, *lits;
    Py_ssize_t i, n;

    memset(op, 0, sizeof *op);
    if (!PyTuple_Check(spec) || PyTuple_GET_SIZE(spec) < 1)
        goto bad;
    op->kind = (int)PyLong_AsLong(PyTuple_GET_ITEM(spec, 0));
    switch (op->kind) {
    case OP_END:
        return 0;
    case OP_SET_CONST:
    case OP_SET_RANDOM:
        if (PyTuple_GET_SIZE(spec) != (op->kind == OP_SET_CONST ? 3 : 4))
            goto bad;
        op->slot = (int)PyLong_AsLong(PyTuple_GET_ITEM(spec, 1));
        op->a = PyLong_AsLongLong(PyTuple_GET_ITEM(spec, 2));
        if (op->kind == OP_SET_RANDOM)
            op->b = PyLong_AsLongLong(PyTuple_GET_ITEM(spec, 3));
        if (PyErr_Occurred())
            return -1;
        if (op->slot < 0 || op->slot >= fl->nset ||
            (op->kind == OP_SET_RANDOM &&
             (op->a > op->b || (uint64_t)op->b - (uint64_t)op->a >= INT64_MAX)))
            goto bad;
        return 0;
    case OP_SLEEP_CONST:
        /* (4, usec) */
        if (PyTuple_GET_SIZE(spec) != 2)
            goto bad;
        op->a = PyLong_AsLongLong(PyTuple_GET_ITEM(spec, 1));
        return PyErr_Occurred() ? -1 : 0;
    case OP_SLEEP_VAR:
        /* (5, slot, unit in µs) */
        if (PyTuple_GET_SIZE(spec) != 3)
            goto bad;
        op->slot = (int)PyLong_AsLong(PyTuple_GET_ITEM(spec, 1));
        op->a = PyLong_AsLongLong(PyTuple_GET_ITEM(spec, 2));
        if (PyErr_Occurred())
            return -1;
        if (op->slot < 0 || op->slot >= fl->nvars || op->a < 1 || op->a > 1000000)
            goto bad;
        return 0;
    case OP_SQL:
        /* (3, text, params, literal parts or None) */
        if (PyTuple_GET_SIZE(spec) != 4 || !PyBytes_Check(PyTuple_GET_ITEM(spec, 1)) ||
            !PyTuple_Check(PyTuple_GET_ITEM(spec, 2)))
            goto bad;
        op->prepname = PyTuple_GET_ITEM(spec, 1);
        op->text = PyBytes_AS_STRING(op->prepname);
        params = PyTuple_GET_ITEM(spec, 2);
        n = PyTuple_GET_SIZE(params);
        if (fl->mode != MODE_SIMPLE && n > MAX_PARAMS)
            goto bad;
        op->nparams = (int)n;
        op->params = PyMem_New(int, n + 1);
        if (op->params == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        for (i = 0; i < n; i++) {
            op->params[i] = (int)PyLong_AsLong(PyTuple_GET_ITEM(params, i));
            if (op->params[i] < 0 || op->params[i] >= fl->nvars)
                goto bad;
        }
        lits = PyTuple_GET_ITEM(spec, 3);
        if (lits != Py_None) {
            if (!PyTuple_Check(lits) || PyTuple_GET_SIZE(lits) != n + 1)
                goto bad;
            op->lits = PyMem_New(const char *, n + 1);
            op->litlens = PyMem_New(Py_ssize_t, n + 1);
            if (op->lits == NULL || op->litlens == NULL) {
                PyErr_NoMemory();
                return -1;
            }
            for (i = 0; i <= n; i++) {
                PyObject *b = PyTuple_GET_ITEM(lits, i);

                if (!PyBytes_Check(b))
                    goto bad;
                op->lits[i] = PyBytes_AS_STRING(b);
                op->litlens[i] = PyBytes_GET_SIZE(b);
            }
        }
        if (*nprep >= 64)
            goto bad;
        op->prep_bit = (*nprep)++;
        return 0;
    default:
        break;
    }
bad:
    if (!PyErr_Occurred())
        PyErr_SetString(PyExc_ValueError, "malformed fast loop plan");
    return -1;
}

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
    Py_VISIT(fl->total.data);
    Py_VISIT(fl->total.lat.obj);
    Py_VISIT(fl->total.lag.obj);
    Py_VISIT(fl->script_ops);
    Py_VISIT(fl->var_names);
    Py_VISIT(fl->keep);
    Py_VISIT(fl->wstate);
    Py_VISIT(fl->choose_rng);
    Py_VISIT(fl->throttle_rng);
    Py_VISIT(fl->advance);
    Py_VISIT(fl->resume);
    Py_VISIT(fl->absorb);
    return 0;
}

/* Drop every reference (run() is not called again on a cleared loop; the
 * plan's ops point into ``keep``, which stays until deallocation). */
static int
FastLoop_clear(FastLoop *fl)
{
    int i, k;

    for (i = 0; i < fl->nclients && fl->clients != NULL; i++)
        Py_CLEAR(fl->clients[i].st);
    if (fl->per_script != NULL)
        for (k = 0; k < fl->nscripts; k++) {
            Py_CLEAR(fl->per_script[k].data);
            Py_CLEAR(fl->per_script[k].lat.obj);
            Py_CLEAR(fl->per_script[k].lag.obj);
        }
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
    return 0;
}

static void
FastLoop_dealloc(FastLoop *fl)
{
    int i, k;

    PyObject_GC_UnTrack(fl);
    FastLoop_clear(fl);

    PyMem_Free(fl->clients);
    for (k = 0; k < fl->nscripts && fl->scripts != NULL; k++) {
        for (i = 0; i < fl->scripts[k].nops; i++) {
            PyMem_Free(fl->scripts[k].ops[i].params);
            PyMem_Free((void *)fl->scripts[k].ops[i].lits);
            PyMem_Free(fl->scripts[k].ops[i].litlens);
        }
        PyMem_Free(fl->scripts[k].ops);
    }
    PyMem_Free(fl->scripts);
    PyMem_Free(fl->per_script);
    PyMem_Free(fl->weights);
    PyMem_Free(fl->by_fd);
    PyMem_Free(fl->runq);
    PyMem_Free(fl->batch);
    PyMem_Free(fl->events);
    PyMem_Free(fl->timers);
    Py_XDECREF(fl->keep);
    Py_TYPE(fl)->tp_free((PyObject *)fl);
}

/*
 * FastLoop(clients, script_ops, plan, wstate, hooks, epoll_fd, control_fd,
 *          flags)
 *
 * plan: (var_names, nset, weights, scripts) -- see pgsurge.fastloop;
 * hooks: (advance, resume, absorb); flags: (mode, nxacts, end_us,
 * detailed, tx_clock, save_rng, restart_inline, exit_on_abort,
 * latency_limit_us, throttle_delay) -- the last one a float.
 */
static PyObject *
FastLoop_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    PyObject *clients, *script_ops, *plan, *wstate, *hooks, *flags;
    PyObject *scripts, *weights, *per_script, *total;
    int epfd, control_fd, nprep = 0;
    long long f[9];
    double delay;
    Py_ssize_t i, k;
    FastLoop *fl;

    if (kwds != NULL && PyDict_GET_SIZE(kwds)) {
        PyErr_SetString(PyExc_TypeError, "FastLoop() takes no keyword arguments");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "O!O!O!OO!iiO!", &PyList_Type, &clients, &PyTuple_Type,
                          &script_ops, &PyTuple_Type, &plan, &wstate, &PyTuple_Type,
                          &hooks, &epfd, &control_fd, &PyTuple_Type, &flags))
        return NULL;
    if (pq == NULL || !pq->bound) {
        PyErr_SetString(PyExc_RuntimeError, "pgsurge._fastpq is not bound");
        return NULL;
    }
    if (PyTuple_GET_SIZE(hooks) != 3 || PyTuple_GET_SIZE(plan) != 4 ||
        !PyArg_ParseTuple(flags, "LLLLLLLLLd", &f[0], &f[1], &f[2], &f[3], &f[4], &f[5],
                          &f[6], &f[7], &f[8], &delay)) {
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
    fl->restart_inline = (int)f[6];
    fl->exit_on_abort = (int)f[7];
    fl->latency_limit = f[8];
    fl->throttle_delay = delay;
    fl->throttled = delay > 0.0;
    fl->epfd = epfd;
    fl->control_fd = control_fd;
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

    fl->var_names = PyTuple_GET_ITEM(plan, 0);
    Py_INCREF(fl->var_names);
    fl->nset = (int)PyLong_AsLong(PyTuple_GET_ITEM(plan, 1));
    weights = PyTuple_GET_ITEM(plan, 2);
    scripts = PyTuple_GET_ITEM(plan, 3);
    if (PyErr_Occurred())
        goto fail;
    if (!PyTuple_Check(fl->var_names) || PyTuple_GET_SIZE(fl->var_names) > MAX_VARS ||
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
            if (parse_op(fl, PyTuple_GET_ITEM(ops, i), &fl->scripts[k].ops[i], &nprep) <
                0)
                goto fail;
        }
        if (fl->scripts[k].ops[i - 1].kind != OP_END) {
            PyErr_SetString(PyExc_ValueError, "a script must end with OP_END");
            goto fail;
        }
    }

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

    fl->clients = PyMem_Calloc(PyList_GET_SIZE(clients) + 1, sizeof(fl_client));
    if (fl->clients == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    fl->nclients = (int)PyList_GET_SIZE(clients);
    fl->runq = PyMem_New(int, fl->nclients + 1);
    fl->batch = PyMem_New(int, fl->nclients + 1);
    fl->events = PyMem_New(struct epoll_event, fl->nclients + 2);
    fl->timers = PyMem_New(fl_timer, fl->nclients + 1);
    if (fl->clients == NULL || fl->runq == NULL || fl->batch == NULL ||
        fl->events == NULL || fl->timers == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    for (i = 0; i < fl->nclients; i++) {
        fl->clients[i].st = PyList_GET_ITEM(clients, i);
        Py_INCREF(fl->clients[i].st);
        fl->clients[i].fd = -1;
        fl->clients[i].owner = OWN_PY;
    }
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

static PyGetSetDef FastLoop_getset[] = {
    {"idle_us", (getter)FastLoop_get_idle, NULL, "µs spent blocked in waits", NULL},
    {"now_us", (getter)FastLoop_get_now, NULL, "the clock when run() returned TICK",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef FastLoop_methods[] = {
    {"run", (PyCFunction)FastLoop_run, METH_O, run_doc},
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
             "(optional; see pgsurge.fastloop).",
    .m_size = -1,
};

#define INTERN(var, text)                                    \
    do {                                                     \
        if ((var = PyUnicode_InternFromString(text)) == NULL) \
            return NULL;                                     \
    } while (0)

PyMODINIT_FUNC
PyInit__fastloop(void)
{
    PyObject *m;

    pq = PyCapsule_Import(PGSURGE_FASTPQ_CAPSULE, 0);
    if (pq == NULL)
        return NULL;
    if (pq->version != PGSURGE_FASTPQ_TABLE_VERSION) {
        PyErr_SetString(PyExc_ImportError, "pgsurge._fastpq's table is of another version");
        return NULL;
    }
    INTERN(s_state, "state");
    INTERN(s_script, "script");
    INTERN(s_ops, "ops");
    INTERN(s_command, "command");
    INTERN(s_qrynum, "qrynum");
    INTERN(s_cnt, "cnt");
    INTERN(s_txn_scheduled, "txn_scheduled");
    INTERN(s_txn_begin, "txn_begin");
    INTERN(s_estatus, "estatus");
    INTERN(s_tries, "tries");
    INTERN(s_saved_rng, "saved_rng");
    INTERN(s_rng, "rng");
    INTERN(s_variables, "variables");
    INTERN(s_ptr, "ptr");
    INTERN(s_fd, "fd");
    INTERN(s_prepared, "prepared");
    INTERN(s_flush_pending, "flush_pending");
    INTERN(s_drain_state, "drain_state");
    INTERN(s_in_pipeline, "in_pipeline");
    INTERN(s_count, "count");
    INTERN(s_min, "min");
    INTERN(s_max, "max");
    INTERN(s_sum, "sum");
    INTERN(s_sum2, "sum2");
    INTERN(s_latency, "latency");
    INTERN(s_timer_exceeded, "timer_exceeded");
    INTERN(s_getstate, "getstate");
    INTERN(s_setstate, "setstate");
    INTERN(s_stats, "stats");
    INTERN(s_per_script, "per_script");
    INTERN(s_choose_rng, "choose_rng");
    INTERN(s_throttle_rng, "throttle_rng");
    INTERN(s_throttle_trigger, "throttle_trigger");
    INTERN(s_latency_late, "latency_late");
    INTERN(s_skipped, "skipped");
    INTERN(s_lag, "lag");
    INTERN(s_sleep_until, "sleep_until");
    if (PyType_Ready(&FastLoop_Type) < 0)
        return NULL;
    m = PyModule_Create(&fastloop_module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&FastLoop_Type);
    if (PyModule_AddObject(m, "FastLoop", (PyObject *)&FastLoop_Type) < 0 ||
        PyModule_AddIntConstant(m, "API_VERSION", FASTLOOP_API) < 0 ||
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
        PyModule_AddIntConstant(m, "TX_BUDGET", TX_BUDGET) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}

/*
 * pgsurge._fastloop's private header: what its translation units share.
 *
 * The extension is one module built from seven files, each with a role
 * (the design is described at the top of _fastloop.c):
 *
 *   _fastloop.c         the module: the FastLoop type, its construction
 *                       and destruction, the interned attribute names;
 *   _fastloop_plan.c    pgsurge.engine.fastloop's plan -> the C ops of a script;
 *   _fastloop_sync.c    the Python side: loading and writing back the
 *                       shared working copies and a client's state, taking
 *                       clients over and handing them to advance/resume;
 *   _fastloop_client.c  a C-owned client's state machine (sends, results,
 *                       \set, \if, \sleep, throttling, accounting, -l lines);
 *   _fastloop_logic.c   expressions (\set, \if) and \gset/\aset;
 *   _fastloop_gen.c     a Python workload's generators, stepped by C;
 *   _fastloop_loop.c    the loop: waits, ready sockets, timers, the
 *                       runnable queue, run().
 *
 * The small hot helpers (clock, PRNG, timer heap) are inline here.
 */
#ifndef PGSURGE_FASTLOOP_H
#define PGSURGE_FASTLOOP_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <float.h>
#include <math.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "_fastpq_api.h"

/* the units' shared symbols stay inside the extension's shared object */
#if defined(__GNUC__)
#define FL_HIDDEN __attribute__((visibility("hidden")))
#else
#define FL_HIDDEN
#endif

/* 10: run() gives the GIL up while a script's loop runs (gil_takes);
 * 11: a client may share WorkerState.shared_variables until it writes one */
#define FASTLOOP_API 12

/* setup.py's digest of the sources this was built from (see there) */
#ifndef PGSURGE_SOURCE_HASH
#define PGSURGE_SOURCE_HASH ""
#endif

/* pgsurge.engine.state's numbers; every constant the module exports is
 * compared with pgsurge.engine.abi.MIRRORED when it is loaded */
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
/* -C: a connection being opened (pgsurge.engine.state.CONNECTING, the
 * state --reconnect's clients open theirs in) */
#define CONNECTING 17

#define MODE_SIMPLE 0
#define MODE_EXTENDED 1
#define MODE_PREPARED 2

/* run() outcomes: pgsurge.engine.loop.LoopOutcome's, and TICK */
#define OUT_DONE 0
#define OUT_EXIT_ON_ABORT 1
#define OUT_STOPPED 2
#define OUT_TICK 3

/* what resume() is told besides a drain() result (always >= 0) */
#define RESUME_FLUSH (-1)
#define RESUME_SEND_FAILED (-2)
/* \endpipeline's sync could not be flushed */
#define RESUME_SYNC_FAILED (-3)
/* -C: (RESUME_CONNECT_FAILED, the psycopg PGconn whose PQconnectPoll failed) */
#define RESUME_CONNECT_FAILED (-4)
/* -C: (RESUME_PREPARE_FAILED, libpq's message) of a pipeline's statement C
 * prepared at \startpipeline */
#define RESUME_PREPARE_FAILED (-5)

/* libpq's PostgresPollingStatusType */
#define PGRES_POLLING_FAILED 0
#define PGRES_POLLING_READING 1
#define PGRES_POLLING_WRITING 2
#define PGRES_POLLING_OK 3
/* libpq's ConnStatusType: a connection that failed */
#define CONNECTION_BAD 1

/* pgsurge._fastpq's drain() codes (the low two bits of its result) */
#define DRAIN_BUSY 0
#define DRAIN_DONE 1
#define DRAIN_FAILED 3

/* libpq values */
#define PGRES_EMPTY_QUERY 0
#define PGRES_COMMAND_OK 1
#define PGRES_TUPLES_OK 2
#define PGRES_PIPELINE_SYNC 10
#define PQTRANS_IDLE 0
#define PG_DIAG_SQLSTATE 'C'

/* pgsurge.engine.loop.LOOK_US */
#define LOOK_US 1000


/* pg_prng_double's scale: 2**-52 */
#define TWO_M52 (1.0 / 4503599627370496.0)
/* room for a value's text (fl_value_text): an int64 in decimal, a
 * double as %.15g, sign and NUL included */
#define INT_TEXT 32
/* parameters of an extended/prepared command: pgbench's limit (a variable
 * read twice is two); simple mode splices the values in and has none */
#define MAX_PARAMS 255

/* pgsurge._fastpq's libpq functions (set by the module's init) */
FL_HIDDEN extern const pgsurge_fastpq_api *pq;

/* ---------------------------------------------------------------------- */
/* The plan: scripts as C ops                                             */

enum {
    OP_END = 0,
    OP_SET_CONST = 1,
    OP_SET_RANDOM = 2,
    OP_SQL = 3,
    OP_SLEEP_CONST = 4,
    OP_SLEEP_VAR = 5,
    OP_SET_EXPR = 6,
    OP_IF = 7,
    OP_ELSE = 8,
    OP_ENDIF = 9,
    /* \startpipeline, \syncpipeline, \endpipeline */
    OP_PSTART = 10,
    OP_PSYNC = 11,
    OP_PEND = 12,
    /* a Python workload (_fastloop_gen.c): step the generator; an op C
     * leaves to Python (a batch's, the target of ctx.sleep) */
    OP_PY = 13,
    OP_PYONLY = 14
};

/* \gset kinds (pgsurge.engine.state) */
#define GSET_NONE 0
#define GSET_ONE 1
#define GSET_ALL 2

/* \gset columns whose slot an op remembers */
#define GSET_CACHE 8

/* the expression evaluator's stack (pgsurge.engine.fastexpr.MAX_STACK) */
#define MAX_STACK 32

/* a value's type (pgsurge.script.values): FV_STR is a variable's text
 * (-D, \gset), typed when an expression reads it, as pgbench does;
 * FV_NONE is a variable C does not hold (undefined, or text that is not
 * UTF-8 without NUL): reading it hands the client to Python */
enum { FV_NONE = 0, FV_NULL = 1, FV_BOOL = 2, FV_INT = 3, FV_DOUBLE = 4, FV_STR = 5 };

/* a typed value: of a client's variable (assigned: C set it since it
 * took the client over, to write back) or on the evaluator's stack
 * (never FV_STR there) */
typedef struct {
    union {
        int64_t i; /* FV_INT, and FV_BOOL (0 or 1) */
        double d;  /* FV_DOUBLE */
    };
    /* a variable's text buffer (FV_STR: NUL-terminated, len bytes), cap
     * bytes, kept when the variable gets another type; freed with the loop */
    char *s;
    int32_t len, cap;
    unsigned char type;
    unsigned char assigned;
} fl_value;

/* a variable takes a computed value (its text buffer stays its own) */
static inline void
fl_var_assign(fl_value *var, const fl_value *v)
{
    var->i = v->i; /* the union: int or double bits */
    var->type = v->type;
    var->assigned = 1;
}

/* one instruction of an expression (pgsurge.engine.fastexpr's X_ codes) */
typedef struct {
    int code;
    int64_t arg;
} fl_code;

/* a SimpleStats, as a working copy */
typedef struct {
    PyObject *obj;
    int64_t count;
    double min, max, sum, sum2;
    int min_int, max_int;
} fl_simple;

/* A latency histogram's values counted by C (pgsurge.stats.histogram's
 * layout: exact below 2**sub_bits, then 2**half_bits buckets per power of
 * two), added to the Python Histogram ``obj`` (its add_counts) by
 * fl_hist_flush before Python reads: the counts of buckets dlo..dhi, their
 * sum, min and max. obj NULL: nothing records here. */
typedef struct {
    PyObject *obj;
    int sub_bits, half_bits;
    uint64_t *counts;
    Py_ssize_t cap, dlo, dhi;
    int64_t n, total, lo, hi;
} fl_hist;

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
    /* prepared under -C: the statement's text, which C prepares on each
     * new connection (NULL: Python prepares it) */
    const char *sql;
    /* -r: the latencies of this command (its Op's stats.latency) */
    fl_simple cmd;
    /* -r with histograms: this command's histogram (its Op's rec) */
    fl_hist rec;
    /* \set of an expression, \if/\elif: the program */
    fl_code *code;
    int ncode;
    /* \if/\elif/\else: the Op's jumps (pgsurge.engine.state.Op) */
    int false_next, false_to_elif, end_next, is_elif;
    /* SQL with \gset/\aset: the kind and the variables' prefix (str) */
    int gset;
    PyObject *prefix;
    /* the slots of its first columns, by field name, as last looked up
     * (-1: not a variable C holds): the common case allocates nothing */
    char *colname[GSET_CACHE];
    int colslot[GSET_CACHE];
} fl_op;

typedef struct {
    int nops;
    fl_op *ops;
} fl_script;

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
    int64_t id;   /* Client.id */
    PGconn *conn;
    int fd;
    /* the Client.fd Python holds: under -C the socket changes with every
     * connection, and C writes it only when Python may look
     * (fl_fd_publish), not at each change (an attribute write per
     * connection costs more than the rest of the bookkeeping) */
    int fd_py;
    int owner;
    /* Client.unwatched, while owner == OWN_C (Python's absorb took the
     * socket out of the epoll set; its next wait for a result puts it back) */
    int unwatched;
    /* the rest is meaningful while owner == OWN_C */
    int state, script, command, qrynum;
    int64_t txn_scheduled, txn_begin, sleep_until, stmt_begin, cnt;
    /* Client.skipped: of cnt, the slots skipped (failures are Python's) */
    int64_t skipped;
    uint64_t s0, s1, saved0, saved1;
    int assigned;      /* C assigned a variable (vars[].assigned says which) */
    int eval_elif;     /* Client.eval_elif: the next \elif is evaluated */
    int meta_failed;   /* Client.meta_failed: a \aset failed, draining */
    PGresult *pending; /* \gset's lookahead (Client.pending) */
    /* Client.in_pipeline and num_syncs: inside \startpipeline, and the
     * syncs sent whose PGRES_PIPELINE_SYNC has not been read */
    int in_pipeline, num_syncs;
    /* statements prepared on the connection (by fl_op.prep_bit) */
    unsigned char *prepared;
    /* -C: the connection C opened (a psycopg PGconn, from
     * FastLoop.set_connect's start), until Python adopts it at a hand-back
     * (NULL: none, or Client.conn's); when its opening began; a prepare
     * of C's in flight (WAIT_RESULT) */
    PyObject *pgobj;
    /* -C: c->conn is a connection C opened itself with PQconnectStart
     * (set_connect_raw): no psycopg object until a hand-back wraps it */
    int rawconn;
    int64_t conn_begin;
    int preparing; /* the prepared op's index + 1 (0: none) */
    /* the events its socket is in the epoll set for, as fl_conn_watch
     * last put it there (a wait for the same saves the epoll_ctl) */
    uint32_t conn_events;
    /* while Python owns it: the Client.cnt from which C may take it back
     * within a transaction (at a wait of the next one after a hand-back) */
    int64_t retake_at;
    /* the plan's variables (FastLoop.nvars), by slot */
    fl_value *vars;
} fl_client;

typedef struct {
    PyObject_HEAD
    int nclients, nscripts, nvars, nset, mode;
    fl_client *clients;
    /* the clients' variables and prepared flags, nvars and nprep each */
    fl_value *varstore;
    unsigned char *prepstore;
    int nprep;
    fl_script *scripts;
    PyObject *script_ops; /* tuple of the Python Op tuples (Client.ops) */
    PyObject *var_names;  /* tuple of str */
    PyObject *keep;       /* the plan, kept alive: ops point into its bytes */
    int64_t *weights;
    int64_t total_weight;
    /* flags of the run */
    int64_t nxacts, end_us, latency_limit;
    int use_end, detailed, tx_clock, save_rng, exit_on_abort;
    /* -r: each command's latency into its working copy (fl_op.cmd) */
    int per_command;
    /* --rate: the worker's mean Poisson delay (µs); 0.0 when not throttled */
    double throttle_delay;
    int throttled;
    PyObject *wstate, *choose_rng, *throttle_rng, *advance, *resume, *absorb;
    /* Engine.gset, and {variable name: slot} for \gset */
    PyObject *gset_hook, *slot_of;
    /* WorkerState.shared_variables (NULL: None), the dict the clients
     * hold until they write a variable (pgsurge.engine.state.
     * own_variables); WorkerState.set_client_id, whether a client's own
     * copy gets its client_id; and then client_id's slot, which a client
     * sharing the dict takes from its id (-1: none) */
    PyObject *shared_vars;
    int set_client_id, client_id_slot;
    /* -C (set_connect): a connection per transaction, opened by C without
     * blocking; the conninfo (bytes), start(conninfo) -> psycopg PGconn,
     * adopt(client, pgconn) and release(client) (Python's side of a
     * connection), state.PREPARING; and the connection time not yet added
     * to WorkerState.conn_total_us */
    int connect_each;
    PyObject *conninfo, *conn_start, *conn_adopt, *conn_release, *preparing;
    int64_t conn_us;
    /* -C's connect_timeout (µs; 0: none): a connection still opening then
     * is given up, as libpq's blocking connect gives it up (pgbench's -C);
     * the earliest deadline of those opening (0: none), the loop's wait */
    int64_t connect_timeout_us, connect_deadline;
    /* -C: 1 opens the clients' connections side by side on the loop, each
     * client's on its own (PGSURGE_CONNECT=concurrent); 0 (the default)
     * opens one at a time, the worker waiting for it as pgbench's
     * PQconnectdb and the Python engine's tx.connect do (connect_poll) */
    int connect_concurrent;
    /* -C: when connections still opening at the end are given up
     * (fl_connect_give_up): END_GRACE_US after the loop first saw
     * timer_exceeded (0: not yet seen) */
    int64_t give_up_at;
    /* -C opened by C from the conninfo, no Python call per connection
     * (set_connect_raw): psycopg's PGconn type and the offset of its PGconn
     * pointer, to wrap a connection for Python at a hand-back (raw_type
     * NULL: start() opens each one); the connections C opened so */
    PyTypeObject *raw_type;
    Py_ssize_t raw_offset;
    int64_t raw_connects;
    fl_stats total;
    fl_stats *per_script; /* NULL with one script */
    /* latency histograms (--percentiles, --json, --html): the recorder's
     * current latency and lag (lag under --rate), and each script's (with
     * several); recording is 0 when no output needs them */
    int recording;
    fl_hist hlat, hlag;
    fl_hist *hscript;
    uint64_t c0, c1;      /* the choose stream */
    uint64_t t0, t1;      /* the throttle stream (--rate) */
    int64_t trigger;      /* WorkerState.throttle_trigger */
    int64_t latency_late; /* WorkerState.latency_late (-L) */
    int timer_exceeded;
    int epfd, control_fd;
    /* signal.set_wakeup_fd's read end, in the epoll set while run() is
     * called (-1: none; then C runs the signal handlers after every wait) */
    int signal_fd;
    /* the thread that called run(), and its interpreter */
    PyThreadState *tstate;
    PyInterpreterState *interp;
    /* The GIL while run() runs (fl_py, fl_nopy): nogil 1 when the loop
     * gives it up (a script's run; a Python workload's generators keep
     * it), saved the thread state while it is given up (NULL: this thread
     * holds the GIL), gil_takes the times the loop took it back (tests
     * check that a run of scripts takes it O(1) times, not per
     * transaction) */
    int nogil;
    PyThreadState *saved;
    int64_t gil_takes;
    /* fd -> client index + 1 (0: none) */
    int *by_fd;
    int by_fd_len;
    /* the runnable queue and the batch being run */
    int *runq, *batch;
    int nrunq;
    int remains, aborted_exit, started;
    int64_t idle_us, now_us;
    /* when the loop last looked at its descriptors (LOOK_US) */
    int64_t looked_us;
    /* clients handed to Python, and calls into Python's advance, resume
     * and absorb (tests check that C ran the run) */
    int64_t handbacks, py_calls;
    /* -l: the worker's TxLogWriter (its write_chunk), Unix minus monotonic
     * µs, the sampling rate and stream (--sampling-rate), the optional
     * fields (lag under -R, retries when --max-tries is not 1), and the
     * lines not written yet */
    PyObject *txlog, *sample_rng;
    int64_t epoch_shift;
    double sample_rate;
    int sampling, log_lag, log_retries;
    uint64_t l0, l1;
    char *logbuf;
    size_t loglen, logcap;
    /* when C last handed its -l lines to the writer (Unix time, us): at
     * least once a second, so that the file is never far behind */
    int64_t log_flushed;
    /* --aggregate-interval: its µs, the writer's current interval (a
     * working copy) and its start (Unix µs) */
    int64_t agg_step, agg_start;
    fl_stats agg;
    struct epoll_event *events;
    /* pgsurge.engine.loop's timers: a heap of (deadline, client) -- a worker's
     * client ids grow with their index, so the index orders as the id */
    fl_timer *timers;
    int ntimers;
    /* a Python workload's generators, stepped by C (set_python; NULL: scripts) */
    struct fl_gen *gen;
} FastLoop;

/* interned attribute names */
FL_HIDDEN extern PyObject *s_state, *s_script, *s_ops, *s_command, *s_qrynum, *s_cnt,
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

/* ---------------------------------------------------------------------- */
/* The GIL                                                                */

/* Two workers may run as threads of one process, each its C loop: run()
 * gives the GIL up once its loop starts (fl_nopy), and takes it back only
 * where the run path must touch CPython (fl_py): a call into Python, an
 * attribute read or written, an object made or released, an exception
 * set. Every such point is preceded by fl_py, or is in a function whose
 * callers hold the GIL (said in its comment); what runs per transaction
 * of a script (sends, results, \set, \sleep, expressions, accounting,
 * -C's libpq connects, pipelines) touches no CPython API and runs without
 * it. errno is kept across the take: PyErr_SetFromErrno follows some. */
static inline void
fl_py(FastLoop *fl)
{
    if (fl->saved != NULL) {
        PyThreadState *ts = fl->saved;
        int err = errno;

        fl->saved = NULL;
        PyEval_RestoreThread(ts);
        errno = err;
        fl->gil_takes++;
    }
}

/* give the GIL up again, if this run gives it up at all (fl->nogil) and
 * holds it; the loop does this at the top of each iteration, so that a
 * client handed to Python costs one take, whatever it called */
static inline void
fl_nopy(FastLoop *fl)
{
    if (fl->nogil && fl->saved == NULL)
        fl->saved = PyEval_SaveThread();
}

/* errors set from where the GIL may be given up: -1, the GIL held */
static inline int
fl_oserror(FastLoop *fl)
{
    fl_py(fl);
    PyErr_SetFromErrno(PyExc_OSError);
    return -1;
}

static inline int
fl_nomem(FastLoop *fl)
{
    fl_py(fl);
    PyErr_NoMemory();
    return -1;
}

/* ---------------------------------------------------------------------- */
/* The timers: pgsurge.engine.loop's heap of (deadline, client id)               */

static inline int
fl_timer_before(const fl_timer *a, const fl_timer *b)
{
    return a->deadline < b->deadline || (a->deadline == b->deadline && a->index < b->index);
}

/* a client is in the heap at most once, so there is room for all */
static inline void
fl_timer_push(FastLoop *fl, int64_t deadline, int index)
{
    fl_timer t = {deadline, index}, *h = fl->timers;
    int i = fl->ntimers++;

    while (i > 0) {
        int parent = (i - 1) / 2;

        if (!fl_timer_before(&t, &h[parent]))
            break;
        h[i] = h[parent];
        i = parent;
    }
    h[i] = t;
}

static inline int
fl_timer_pop(FastLoop *fl)
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
        if (child + 1 < n && fl_timer_before(&h[child + 1], &h[child]))
            child++;
        if (!fl_timer_before(&h[child], &last))
            break;
        h[i] = h[child];
        i = child;
    }
    h[i] = last;
    return top;
}

/* ---------------------------------------------------------------------- */
/* Histograms                                                             */

/* room for bucket idx (PyMem_Raw: no GIL); -1 out of memory, no
 * exception set (fl_hist_record sets it) */
FL_HIDDEN int fl_hist_grow(fl_hist *h, Py_ssize_t idx);

/* Histogram.record(v) of a value, into C's counts; runs without the GIL
 * (fl: the loop whose GIL an error takes; NULL: the caller holds it) */
static inline int
fl_hist_record(FastLoop *fl, fl_hist *h, int64_t v)
{
    Py_ssize_t idx;

    if (v < 0) {
        if (fl != NULL)
            fl_py(fl);
        PyErr_Format(PyExc_ValueError, "cannot record a negative value: %lld",
                     (long long)v);
        return -1;
    }
    if (v >> h->sub_bits) {
        int shift = 64 - __builtin_clzll((uint64_t)v) - h->sub_bits;

        idx = ((Py_ssize_t)shift << h->half_bits) + (Py_ssize_t)(v >> shift);
    } else
        idx = (Py_ssize_t)v;
    if (idx >= h->cap && fl_hist_grow(h, idx) < 0) {
        if (fl != NULL)
            fl_py(fl);
        PyErr_NoMemory();
        return -1;
    }
    h->counts[idx]++;
    if (h->n++ == 0) {
        h->dlo = h->dhi = idx;
        h->lo = h->hi = v;
    } else {
        if (idx < h->dlo)
            h->dlo = idx;
        else if (idx > h->dhi)
            h->dhi = idx;
        if (v < h->lo)
            h->lo = v;
        else if (v > h->hi)
            h->hi = v;
    }
    h->total += v;
    return 0;
}

/* ---------------------------------------------------------------------- */
/* Accounting and -l formatting (inline: per transaction)                 */

/* SimpleStats.add(latency) of an int latency, as Python does it: min/max
 * become ints, the sums stay floats (float + int rounds the int once) */
static inline void
stats_add(fl_simple *s, int64_t latency)
{
    double v = (double)latency;
    /* the square exactly, rounded once to a double; in int64 (one
     * conversion instruction) whenever it fits, as it does for any latency
     * below 50 minutes, else in 128 bits (a libgcc call per value) */
    double sq = latency > -3037000499LL && latency < 3037000499LL
                    ? (double)(latency * latency)
                    : (double)((__int128)latency * latency);

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
    s->sum2 += sq;
}

/* n in decimal at p (no NUL); returns the end. The -l line's fields are
 * formatted here rather than by sprintf, whose format parsing costs some
 * 2,500 instructions a line (bench/instr_bench.py): a line is written per
 * transaction. */
static inline char *
put_int(char *p, int64_t n)
{
    char tmp[INT_TEXT];
    char *q = tmp + sizeof tmp;
    uint64_t u = n < 0 ? 0ULL - (uint64_t)n : (uint64_t)n;
    size_t len;

    do {
        *--q = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (n < 0)
        *--q = '-';
    len = (size_t)(tmp + sizeof tmp - q);
    memcpy(p, q, len);
    return p + len;
}

/* a space, then n */
static inline char *
put_field(char *p, int64_t n)
{
    *p++ = ' ';
    return put_int(p, n);
}

/* ---------------------------------------------------------------------- */
/* Between the units                                                      */

/* _fastloop_plan.c: one op of the plan into *op (-1: error set) */
FL_HIDDEN int fl_parse_op(FastLoop *fl, PyObject *spec, fl_op *op, int *nprep);

/* _fastloop_sync.c (all -1 with an exception set on error) */
FL_HIDDEN int fl_get_i64(PyObject *obj, PyObject *name, int64_t *out);
FL_HIDDEN int fl_set_i64(PyObject *obj, PyObject *name, int64_t value);
FL_HIDDEN int fl_rng_load(PyObject *rng, uint64_t *s0, uint64_t *s1);
FL_HIDDEN int fl_shared_store(FastLoop *fl);
FL_HIDDEN int fl_shared_load(FastLoop *fl);
FL_HIDDEN int fl_read_timer(FastLoop *fl);
FL_HIDDEN int fl_refresh_fd(FastLoop *fl, int index);
FL_HIDDEN int fl_watch(FastLoop *fl, int index);
FL_HIDDEN int fl_take_over(FastLoop *fl, int index, int state);
FL_HIDDEN int fl_settle_py(FastLoop *fl, int index);
FL_HIDDEN int fl_stats_load(fl_simple *s);
FL_HIDDEN int fl_stats_store(fl_simple *s);
FL_HIDDEN int fl_hist_init(fl_hist *h, PyObject *obj);
FL_HIDDEN void fl_hist_free(fl_hist *h);
FL_HIDDEN int fl_hist_flush(fl_hist *h);
FL_HIDDEN int fl_log_flush(FastLoop *fl);
FL_HIDDEN int fl_agg_roll(FastLoop *fl, int64_t now);
FL_HIDDEN int fl_shared_load_sampling(FastLoop *fl);
FL_HIDDEN int fl_call_python(FastLoop *fl, PyObject *fn, int index, PyObject *arg);
FL_HIDDEN int fl_to_python(FastLoop *fl, int index, int state, PyObject *event);
FL_HIDDEN int fl_to_python_code(FastLoop *fl, int index, int state, long code);

/* -C (_fastloop_sync.c): watch a C-opened connection's socket for
 * events (0: none, out of the set), the client mapped to it */
FL_HIDDEN int fl_conn_watch(FastLoop *fl, int index, int fd, uint32_t events);
FL_HIDDEN int fl_conn_forget(FastLoop *fl, int index);
FL_HIDDEN int fl_fd_publish(FastLoop *fl, int index);
FL_HIDDEN PyObject *fl_wrap_raw(FastLoop *fl, PGconn *conn);
FL_HIDDEN PyObject *fl_own_vars(FastLoop *fl, fl_client *c);

/* _fastloop_client.c */
FL_HIDDEN int fl_advance(FastLoop *fl, int index);
FL_HIDDEN int fl_connect_timeouts(FastLoop *fl);
FL_HIDDEN int fl_connect_give_up(FastLoop *fl);
/* -C: how long after the end a connection still opening may take before
 * it is given up: long enough for a server that answers to answer (its
 * transaction then runs, as pgbench's does after its PQconnectdb, and
 * the connection is closed cleanly: given up at once, every -T run left
 * a "could not send data to client" and a FATAL in the server's log for
 * each worker), short enough that a server that never answers does not
 * hold the end. pgsurge.engine.ramp.END_GRACE_S is the Python engine's. */
#define END_GRACE_US 500000
/* an error result of query q to Python's resume (res is cleared) */
FL_HIDDEN int fl_hand_error(FastLoop *fl, int index, int q, int status, PGresult *res);

/* _fastloop_gen.c: a Python workload's generators, stepped from the loop.
 * fl_gen_step: an OP_PY op (1: *state and c->command set; 0: the client
 * waits or went to Python; -1 error); fl_gen_send: send_sql for its
 * statements; fl_gen_wait: WAIT_RESULT for them (as fl_wait_gset);
 * fl_gen_hand_back: before a hand-back, what Python's engine needs */
FL_HIDDEN PyObject *fl_gen_set(FastLoop *fl, PyObject *spec);
FL_HIDDEN int fl_gen_step(FastLoop *fl, int index, int *state);
FL_HIDDEN int fl_gen_send(FastLoop *fl, int index, const fl_op *op);
FL_HIDDEN int fl_gen_wait(FastLoop *fl, int index);
FL_HIDDEN int fl_gen_hand_back(FastLoop *fl, int index);
FL_HIDDEN void fl_gen_free(FastLoop *fl);
FL_HIDDEN PyObject *fl_gen_steps(FastLoop *fl, void *closure);

/* _fastloop_logic.c: expressions and \gset */
FL_HIDDEN int fl_parse_code(PyObject *spec, fl_op *op);
/* text that is an int64 as Python writes it (-?[1-9][0-9]*|0): 1 and *out */
FL_HIDDEN int fl_canonical_int(const char *s, Py_ssize_t len, int64_t *out);
/* 0: *out is the value; 1: Python must evaluate it (an error, a value C
 * does not hold); the client's PRNG may have moved on */
FL_HIDDEN int fl_eval(fl_client *c, const fl_code *code, int n, fl_value *out);
/* the text pgbench substitutes for a value (values.to_text) into buf
 * (INT_TEXT bytes), or a FV_STR's own text; NULL for FV_NONE */
FL_HIDDEN const char *fl_value_text(const fl_value *v, char *buf);
/* a variable takes text (FV_STR; FV_NONE when it holds a NUL): 0, or -1
 * out of memory, no exception set (runs without the GIL: the buffer is
 * PyMem_Raw's) */
FL_HIDDEN int fl_var_set_text(fl_value *var, const char *text, Py_ssize_t len);
/* the op codes and their pops, exported to be compared with fastexpr's */
FL_HIDDEN int fl_add_expr_codes(PyObject *module);

/* valueTruth: the condition of \if (NULL false, non-zero numbers true) */
static inline int
fl_truth(const fl_value *v)
{
    if (v->type == FV_DOUBLE)
        return v->d != 0.0;
    return v->type != FV_NULL && v->i != 0;
}
/* WAIT_RESULT of a \gset/\aset command: 1 its results are in and
 * stored; 0 the client waits, or was handed to Python; -1 error */
FL_HIDDEN int fl_wait_gset(FastLoop *fl, int index, fl_op *op);

/* _fastloop_loop.c: FastLoop.run and its docstring */
FL_HIDDEN PyObject *fl_run(FastLoop *fl, PyObject *arg);
FL_HIDDEN extern const char fl_run_doc[];

#endif

/*
 * pgsurge._fastloop: the loop itself, step by step as pgsurge.engine.loop's
 * EventLoop.run: one wait on the worker's epoll instance (Python's Waiter
 * registers the descriptors), then the ready sockets, the due timers, the
 * runnable queue and the progress tick, in that order.
 *
 * The GIL: run() gives it up once its loop starts (a script's run: two
 * workers may be threads of one process) and takes it back only where it
 * must touch CPython (fl_py, _fastloop.h): a client's hand-back to Python
 * or a call into it, an error, a signal's look at timer_exceeded, a tick
 * and the return. It gives it up again at the top of each iteration.
 */

#include "_fastloop.h"

/* A Python-owned client waiting within a transaction (WAIT_RESULT,
 * SLEEP): take it over once it is in a transaction after the one C handed
 * back (Client.cnt >= retake_at), so that a client Python's advance() runs
 * from one transaction straight into the next comes back to C, and one
 * that C hands back at every transaction (a variable C does not hold, ...)
 * costs one hand-back per transaction, not one per wait. 1: C owns it.
 * Takes the GIL. */
static int
retake(FastLoop *fl, int index, int state)
{
    fl_client *c = &fl->clients[index];
    int64_t cnt;
    int r;

    fl_py(fl);
    if (fl_get_i64(c->st, s_cnt, &cnt) < 0)
        return -1;
    if (cnt < c->retake_at)
        return 0;
    r = fl_take_over(fl, index, state);
    if (r == 0)
        c->retake_at = cnt + 1;
    return r;
}

/* Run a client of the runnable queue, or whose deadline has come
 * (pgsurge.engine.loop: advance, settle). Without the GIL for a C-owned
 * client; a Python-owned one takes it. */
static int
run_client(FastLoop *fl, int index)
{
    fl_client *c = &fl->clients[index];
    int64_t state;
    int r;

    if (c->owner == OWN_PY) {
        fl_py(fl);
        if (fl_get_i64(c->st, s_state, &state) < 0)
            return -1;
        r = state == CHOOSE_SCRIPT || state == THROTTLE
                ? fl_take_over(fl, index, (int)state)
                : state == SLEEP ? retake(fl, index, SLEEP) : 0;
        if (r < 0)
            return -1;
        if (!r) {
            if (fl_call_python(fl, fl->advance, index, NULL) < 0)
                return -1;
            return fl_settle_py(fl, index);
        }
    }
    return fl_advance(fl, index);
}

/* A socket is ready (pgsurge.engine.loop: the events part of run).
 * Without the GIL for a C-owned client's result or connection; anything
 * else (a notice, a closed connection, a Python-owned client) takes it. */
static int
socket_ready(FastLoop *fl, int index)
{
    fl_client *c = &fl->clients[index];
    int64_t state;

    if (c->owner == OWN_C && (c->state == WAIT_RESULT || c->state == CONNECTING))
        return fl_advance(fl, index);
    fl_py(fl);
    if (c->owner == OWN_C) {
        if (c->pgobj != NULL || c->rawconn) {
            /* -C: a connection C opened, which Python's absorb does not
             * know: out of the set, as absorb does (fl_watch puts it back) */
            if (epoll_ctl(fl->epfd, EPOLL_CTL_DEL, c->fd, NULL) < 0 && errno != ENOENT &&
                errno != EBADF)
                return fl_oserror(fl);
            c->unwatched = 1;
            c->conn_events = 0;
            return PyObject_SetAttr(c->st, s_unwatched, Py_True);
        }
    } else if (c->owner == OWN_PY) {
        if (fl_get_i64(c->st, s_state, &state) < 0)
            return -1;
        if (state == WAIT_RESULT) {
            int r = retake(fl, index, WAIT_RESULT);

            if (r < 0)
                return -1;
            if (r)
                return fl_advance(fl, index);
        }
        if (state == WAIT_RESULT || state == WAIT_ROLLBACK_RESULT) {
            if (fl_call_python(fl, fl->advance, index, NULL) < 0)
                return -1;
            if (fl_get_i64(c->st, s_state, &state) < 0)
                return -1;
            return state == WAIT_RESULT ? fl_refresh_fd(fl, index) : fl_settle_py(fl, index);
        }
    }
    /* not waiting for it: a notice, or the server closed the connection;
     * absorb takes the socket out of the epoll set (Client.unwatched) */
    if (fl_call_python(fl, fl->absorb, index, NULL) < 0)
        return -1;
    if (c->owner == OWN_C) {
        int64_t r;

        if (fl_get_i64(c->st, s_unwatched, &r) < 0)
            return -1;
        c->unwatched = r != 0;
    }
    return fl_refresh_fd(fl, index);
}

/* Whether another thread may want the GIL while this one waits, holding
 * it (a Python workload's run: fl->nogil 0): the interpreter has another
 * thread state. A worker has none, and then
 * giving the GIL up and taking it back around every wait (a few atomic
 * operations and a mutex each) buys nothing. Any other thread of the
 * interpreter has a thread state from its start (threading, or a C thread
 * through PyGILState_Ensure), so it is seen at the next wait. */
static inline int
others(const FastLoop *fl)
{
    return PyInterpreterState_ThreadHead(fl->interp) != fl->tstate ||
           PyThreadState_Next(fl->tstate) != NULL;
}

#ifdef SYS_epoll_pwait2
/* 0 once the kernel (before 5.11) or a seccomp filter refused epoll_pwait2.
 * Shared by the loops of all threads, which read and write it without the
 * GIL: a flag that only ever goes from 1 to 0, accessed atomically
 * (relaxed); a loop that read 1 late makes one more refused call, then
 * falls back as the first did. */
static int have_pwait2 = 1;
#endif

/* Wait on the epoll instance: timeout_us < 0 without limit; the number of
 * events, WAIT_EINTR when a signal interrupted the wait, or -1 (errno).
 * epoll_wait counts milliseconds; like pgsurge.engine.loop.Waiter, a finite
 * timeout waits in nanoseconds: epoll_pwait2 (one call), or where it is
 * missing, ppoll on the epoll descriptor, then a fetch. */
#define WAIT_EINTR (-2)

/* Runs without the GIL when the loop gave it up (fl->saved); holding it
 * (a Python workload), it gives it up around a blocking wait when another
 * thread may want it (others()). */
static int
wait_events(FastLoop *fl, int64_t timeout_us)
{
    int n, err, max = fl->nclients + 2;
    PyThreadState *ts = NULL;

    if (timeout_us == 0)
        n = epoll_wait(fl->epfd, fl->events, max, 0);
    else {
        if (fl->saved == NULL && others(fl))
            ts = PyEval_SaveThread();
        if (timeout_us < 0)
            n = epoll_wait(fl->epfd, fl->events, max, -1);
        else {
            struct timespec tv = {(time_t)(timeout_us / 1000000),
                                  (long)(timeout_us % 1000000) * 1000};

            n = -1;
            errno = ENOSYS;
#ifdef SYS_epoll_pwait2
            if (__atomic_load_n(&have_pwait2, __ATOMIC_RELAXED)) {
                n = (int)syscall(SYS_epoll_pwait2, fl->epfd, fl->events, max, &tv, NULL, 0);
                if (n < 0 && (errno == ENOSYS || errno == EPERM))
                    __atomic_store_n(&have_pwait2, 0, __ATOMIC_RELAXED);
            }
#endif
            if (n < 0 && (errno == ENOSYS || errno == EPERM)) {
                struct pollfd pfd = {fl->epfd, POLLIN, 0};

                n = ppoll(&pfd, 1, &tv, NULL);
                if (n > 0)
                    n = epoll_wait(fl->epfd, fl->events, max, 0);
            }
        }
        if (ts != NULL) {
            err = errno;
            PyEval_RestoreThread(ts);
            errno = err;
        }
    }
    if (n < 0)
        return errno == EINTR ? WAIT_EINTR : -1;
    return n;
}

/* Whether the control descriptor or the signal wakeup descriptor is
 * readable (or cannot be polled): a look at those two only, which leaves
 * the clients' sockets to the next wait. */
static int
flagged(const FastLoop *fl)
{
    struct pollfd p[2];
    nfds_t k = 0;

    if (fl->control_fd >= 0)
        p[k++] = (struct pollfd){fl->control_fd, POLLIN, 0};
    if (fl->signal_fd >= 0)
        p[k++] = (struct pollfd){fl->signal_fd, POLLIN, 0};
    return k > 0 && poll(p, k, 0) != 0;
}

/* Run Python's signal handlers and read what they set (the -T alarm's
 * timer_exceeded, a stop); -1 with an exception (a KeyboardInterrupt).
 * Takes the GIL. In a thread other than the main one PyErr_CheckSignals
 * runs no handler: there the stop is the main thread's write to the
 * wakeup descriptor (set_signal_fd) after it set timer_exceeded, which
 * fl_read_timer reads. */
static int
check_signals(FastLoop *fl)
{
    fl_py(fl);
    if (PyErr_CheckSignals() < 0)
        return -1;
    return fl_read_timer(fl);
}

/* the signal wakeup descriptor became readable: empty it, then look */
static int
signalled(FastLoop *fl)
{
    char buf[64];

    while (read(fl->signal_fd, buf, sizeof buf) > 0)
        ;
    return check_signals(fl);
}

/* write everything back before leaving run(); at a tick also each
 * C-owned client's transaction count (--warmup's window start takes them
 * as its base: the per-server figures count the window's only). Takes the
 * GIL. */
static PyObject *
leave(FastLoop *fl, int outcome)
{
    int i;

    fl_py(fl);
    if (fl_shared_store(fl) < 0)
        return NULL;
    for (i = 0; i < fl->nclients; i++)
        if (fl_fd_publish(fl, i) < 0)
            return NULL;
    if (outcome == OUT_TICK) {
        for (i = 0; i < fl->nclients; i++) {
            fl_client *c = &fl->clients[i];

            if (c->owner != OWN_C)
                continue;
            if (fl_set_i64(c->st, s_cnt, c->cnt) < 0 ||
                fl_set_i64(c->st, s_skipped, c->skipped) < 0)
                return NULL;
        }
    }
    return PyLong_FromLong(outcome);
}

const char fl_run_doc[] =
    "run(next_tick)\n--\n\n"
    "Run the loop until every client is done (0), a client aborted\n"
    "under --exit-on-abort (1), the control descriptor is readable (2),\n"
    "or the clock reached next_tick (3; 0: no tick): then call again.\n"
    "The shared stats and choose stream are written back on return.";

/* The loop of run() from its first wait on: entered with the GIL given
 * up (scripts) or held (a Python workload); returns with it held or not
 * (fl_run takes it back). Every return of NULL has an exception set with
 * the GIL held. */
static PyObject *
loop(FastLoop *fl, int64_t next_tick)
{
    int i, n;

    while (fl->remains > 0) {
        int *batch, nbatch, looked = 1;

        /* what the last iteration took the GIL for is done */
        fl_nopy(fl);
        if (fl->nrunq) {
            /* pgbench's round: while clients are runnable (they finished
             * a transaction), they run again before any socket is looked
             * at; the answers of those that wait are read once no client
             * is runnable. How often a client gets to run again while its
             * backend is still on the CPU decides how much the server
             * switches between backends: looking at every round (as this
             * loop did) cost a thousand clients 7-9 % of pgbench's tps.
             * Every LOOK_US the control and signal descriptors alone are
             * looked at (a run whose clients never wait, a script of
             * meta-commands only, still sees a stop and -T's alarm): a
             * look at the sockets too, even once a millisecond, fills the
             * queue again before it drains and costs as much. */
            int64_t now = clock_us();

            n = 0;
            if (now - fl->looked_us < LOOK_US)
                looked = 0;
            else {
                fl->looked_us = now;
                if (flagged(fl))
                    n = wait_events(fl, 0);
            }
        } else {
            /* until the nearest deadline: a sleep, a slot, a progress tick */
            int64_t deadline = fl->ntimers ? fl->timers[0].deadline : 0, t0;

            if (next_tick && (!deadline || next_tick < deadline))
                deadline = next_tick;
            /* -C: a connection given up at connect_timeout, or after the
             * end's grace */
            if (fl->connect_deadline && (!deadline || fl->connect_deadline < deadline))
                deadline = fl->connect_deadline;
            if (fl->give_up_at && (!deadline || fl->give_up_at < deadline))
                deadline = fl->give_up_at;
            t0 = clock_us();
            n = wait_events(fl, deadline ? (deadline > t0 ? deadline - t0 : 0) : -1);
            fl->looked_us = clock_us();
            fl->idle_us += fl->looked_us - t0;
        }
        if (n == -1) {
            fl_oserror(fl);
            return NULL;
        }
        /* The alarm of -T (or a Ctrl-C) lands here: Python's handler sets
         * timer_exceeded. With the signal wakeup descriptor (set_signal_fd)
         * C looks when a signal came (its descriptor is among the events,
         * or it interrupted the wait), else after every wait (which takes
         * the GIL at every wait). */
        if (looked && (fl->signal_fd < 0 || n == WAIT_EINTR) && check_signals(fl) < 0)
            return NULL;
        for (i = 0; i < n; i++) {
            int fd = fl->events[i].data.fd, index;

            index = fd >= 0 && fd < fl->by_fd_len ? fl->by_fd[fd] - 1 : -1;
            if (index < 0) {
                if (fd == fl->control_fd)
                    return leave(fl, OUT_STOPPED);
                if (fd == fl->signal_fd && fd >= 0 && signalled(fl) < 0)
                    return NULL;
                continue;
            }
            if (socket_ready(fl, index) < 0)
                return NULL;
            if (fl->aborted_exit)
                return leave(fl, OUT_EXIT_ON_ABORT);
        }
        /* -C: the end came while connections were opening (a server
         * that never answers would keep the run going forever): those
         * still opening END_GRACE_US later are given up (the scan runs
         * only in the run's tail, once the flag is up) */
        if (fl->timer_exceeded && fl->connect_each) {
            int64_t now = clock_us();

            if (!fl->give_up_at)
                fl->give_up_at = now + END_GRACE_US;
            else if (now >= fl->give_up_at && fl_connect_give_up(fl) < 0)
                return NULL;
        }
        if (fl->ntimers) {
            int64_t now = clock_us();

            while (fl->ntimers && fl->timers[0].deadline <= now) {
                if (run_client(fl, fl_timer_pop(fl)) < 0)
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
        if (fl->connect_deadline && clock_us() >= fl->connect_deadline) {
            /* -C's connect_timeout: a connection may be past it (the
             * earliest deadline also bounds the wait) */
            if (fl_connect_timeouts(fl) < 0)
                return NULL;
            if (fl->aborted_exit)
                return leave(fl, OUT_EXIT_ON_ABORT);
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

PyObject *
fl_run(FastLoop *fl, PyObject *arg)
{
    int64_t next_tick = PyLong_AsLongLong(arg);
    PyObject *r;
    int i;

    if (next_tick == -1 && PyErr_Occurred())
        return NULL;
    if (fl->saved != NULL) {
        /* its loop runs in another thread, without the GIL */
        PyErr_SetString(PyExc_RuntimeError, "this FastLoop runs in another thread");
        return NULL;
    }
    /* this thread's state, for the waits (others()) */
    fl->tstate = PyThreadState_Get();
    fl->interp = PyThreadState_GetInterpreter(fl->tstate);
    if (fl_shared_load(fl) < 0)
        return NULL;
    if (!fl->started) {
        fl->started = 1;
        for (i = 0; i < fl->nclients; i++) {
            int64_t state;

            if (fl_get_i64(fl->clients[i].st, s_state, &state) < 0 ||
                fl_refresh_fd(fl, i) < 0)
                return NULL;
            if (state != FINISHED && state != ABORTED) {
                fl->remains++;
                fl->runq[fl->nrunq++] = i;
            } else
                fl->clients[i].owner = OWN_DONE;
        }
    }
    /* a script's loop gives the GIL up (fl_nopy at each iteration); a
     * Python workload steps its generators with it */
    fl->nogil = fl->gen == NULL;
    r = loop(fl, next_tick);
    /* every return with the GIL held */
    fl_py(fl);
    fl->nogil = 0;
    return r;
}

/*
 * pgsurge._fastloop: a Python workload's generators, stepped from the C loop.
 *
 * A Python transaction (pgsurge.engine.pyworkload) is a script of ops:
 * K_PY ops that advance its generator, one K_SQL op per declared
 * statement, the target of ``ctx.sleep`` and the ops of a batch. The plan
 * (pgsurge.engine.fastloop._py_plan) makes the K_PY ops OP_PY, the
 * statements OP_SQL without variables, and the rest OP_PYONLY. Here:
 *
 *   fl_gen_step   an OP_PY op: PyIter_Send the previous result into the
 *                 generator (a new one at op 0), and file what it yields:
 *                 a statement call (its arguments kept, to be sent as
 *                 they are), ``ctx.sleep`` (SLEEP), the end (END_TX);
 *                 anything else (a batch, a mistake, an exception) goes
 *                 to Python's py_step as a caught error's next item does
 *                 (``PyClient.thrown``, ``batch = CAUGHT``);
 *   fl_gen_send   the statement with its arguments bound straight into
 *                 libpq's paramValues (int, str, float, bool, bytes, None;
 *                 any other value went through str() when it was yielded,
 *                 as pyworkload._text does);
 *   fl_gen_wait   its results; the last one of a fetched statement is kept
 *                 and given to the generator as the workload's Result over
 *                 a small result object of this file (FlResult: what
 *                 workloads.api.Result reads of psycopg's PGresult), made
 *                 only when the generator is stepped;
 *   fl_gen_hand_back  before any hand-back: what Python's engine keeps
 *                 where C does not (the parameters in "$1".., a result not
 *                 yet given, the PRNG words the generator moved on).
 *
 * Errors (an error result goes to Python's resume, which throws SqlError
 * into the generator), retries, batches and -C's first prepares are
 * Python's, as for scripts.
 *
 * The GIL: a Python workload is Python by nature (a generator stepped per
 * transaction), so run() keeps the GIL for it (fl->nogil 0; the waits give
 * it up while other threads exist, as before). Each entry below still
 * takes it first (fl_py: nothing when held), so that none of them can run
 * without it.
 */

#include "_fastloop.h"

typedef struct {
    /* parts: per op, None or (-M simple) its text split at its parameters
     * (bytes at even indexes, the 0-based argument at odd ones) */
    PyObject *fn, *index, *counts, *wrap, *sleep_type, *parts;
    int sleep_index, resume_index;
    /* per op: its statement's result goes to the generator */
    unsigned char *fetch;
    /* per op: its statement's parameter count (counts, read once) */
    int *nparams;
    /* per K_PY op: the statement the generator yielded last time it was
     * stepped from there (borrowed: index keeps it) and that statement's
     * op. A transaction yields the same statements in the same order
     * nearly every time, so this spares the dict lookup of each yield */
    PyObject **seen;
    int *seen_at;
    int nops;
} fl_gen_script;

typedef struct fl_gen {
    fl_gen_script *scripts;
    int nscripts;
    /* pyworkload.CAUGHT, pyworkload.Raised, pyworkload.bind_params */
    PyObject *caught, *raised, *bind;
    /* per client: the arguments of the statement being sent, the result
     * the generator has not had yet */
    PyObject **args;
    PGresult **res;
    /* per client: its PyClient and Context (read once: a client keeps
     * them), and, while own[i], its generator (NULL: none) as C's copy of
     * PyClient.gen, written back at a hand-back (attribute reads and
     * writes per step cost more than the rest of a step) */
    PyObject **py, **ctx, **gen;
    unsigned char *own;
    int nclients;
    int64_t steps;
} fl_gen;

static PyObject *s_py, *s_gen, *s_ctx, *s_batch, *s_thrown, *s_res, *s_usec;

/* ---------------------------------------------------------------------- */
/* FlResult: a PGresult as the workload's Result reads it                 */

typedef struct {
    PyObject_HEAD
    PGresult *res;
} FlResult;

static void
FlResult_dealloc(FlResult *self)
{
    if (self->res != NULL)
        pq->clear(self->res);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
FlResult_ntuples(FlResult *self, void *closure)
{
    (void)closure;
    return PyLong_FromLong(pq->ntuples(self->res));
}

static PyObject *
FlResult_nfields(FlResult *self, void *closure)
{
    (void)closure;
    return PyLong_FromLong(pq->nfields(self->res));
}

static PyObject *
FlResult_status(FlResult *self, void *closure)
{
    (void)closure;
    return PyLong_FromLong(pq->resultStatus(self->res));
}

/* psycopg's: PQcmdTuples as an int, None when empty */
static PyObject *
FlResult_command_tuples(FlResult *self, void *closure)
{
    const char *t = pq->cmdTuples(self->res);

    (void)closure;
    if (t == NULL || !*t)
        Py_RETURN_NONE;
    return PyLong_FromString(t, NULL, 10);
}

static int
field_index(FlResult *self, PyObject *arg, int *out)
{
    long c = PyLong_AsLong(arg);

    if (c == -1 && PyErr_Occurred())
        return -1;
    if (c < 0 || c >= pq->nfields(self->res)) {
        PyErr_Format(PyExc_IndexError, "column %ld out of range", c);
        return -1;
    }
    *out = (int)c;
    return 0;
}

static PyObject *
FlResult_ftype(FlResult *self, PyObject *arg)
{
    int c;

    if (field_index(self, arg, &c) < 0)
        return NULL;
    return PyLong_FromUnsignedLong(pq->ftype(self->res, c));
}

static PyObject *
FlResult_fname(FlResult *self, PyObject *arg)
{
    int c;
    const char *name;

    if (field_index(self, arg, &c) < 0)
        return NULL;
    name = pq->fname(self->res, c);
    if (name == NULL)
        Py_RETURN_NONE;
    return PyBytes_FromString(name);
}

static PyObject *
FlResult_get_value(FlResult *self, PyObject *const *args, Py_ssize_t nargs)
{
    long r;
    int c;

    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "get_value(row, column)");
        return NULL;
    }
    r = PyLong_AsLong(args[0]);
    if (r == -1 && PyErr_Occurred())
        return NULL;
    if (field_index(self, args[1], &c) < 0)
        return NULL;
    if (r < 0 || r >= pq->ntuples(self->res)) {
        PyErr_Format(PyExc_IndexError, "row %ld out of range", r);
        return NULL;
    }
    if (pq->getisnull(self->res, (int)r, c))
        Py_RETURN_NONE;
    return PyBytes_FromStringAndSize(pq->getvalue(self->res, (int)r, c),
                                     pq->getlength(self->res, (int)r, c));
}

static PyGetSetDef FlResult_getset[] = {
    {"ntuples", (getter)FlResult_ntuples, NULL, NULL, NULL},
    {"nfields", (getter)FlResult_nfields, NULL, NULL, NULL},
    {"status", (getter)FlResult_status, NULL, NULL, NULL},
    {"command_tuples", (getter)FlResult_command_tuples, NULL, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef FlResult_methods[] = {
    {"ftype", (PyCFunction)FlResult_ftype, METH_O, NULL},
    {"fname", (PyCFunction)FlResult_fname, METH_O, NULL},
    {"get_value", (PyCFunction)(void (*)(void))FlResult_get_value, METH_FASTCALL, NULL},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject FlResult_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "pgsurge._fastloop.Result",
    .tp_basicsize = sizeof(FlResult),
    .tp_dealloc = (destructor)FlResult_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A statement's result, as psycopg's PGresult gives what a workload's "
              "Result reads.",
    .tp_getset = FlResult_getset,
    .tp_methods = FlResult_methods,
};

/* a result object owning res (cleared on failure) */
static PyObject *
result_object(PGresult *res)
{
    FlResult *r = PyObject_New(FlResult, &FlResult_Type);

    if (r == NULL) {
        pq->clear(res);
        return NULL;
    }
    r->res = res;
    return (PyObject *)r;
}

/* ---------------------------------------------------------------------- */
/* set_python(spec)                                                       */

static int
intern(PyObject **slot, const char *name)
{
    if (*slot == NULL && (*slot = PyUnicode_InternFromString(name)) == NULL)
        return -1;
    return 0;
}

void
fl_gen_free(FastLoop *fl)
{
    fl_gen *g = fl->gen;
    int i;

    if (g == NULL)
        return;
    fl->gen = NULL;
    for (i = 0; i < g->nscripts; i++) {
        fl_gen_script *gs = &g->scripts[i];

        Py_XDECREF(gs->fn);
        Py_XDECREF(gs->index);
        Py_XDECREF(gs->counts);
        Py_XDECREF(gs->wrap);
        Py_XDECREF(gs->sleep_type);
        Py_XDECREF(gs->parts);
        PyMem_Free(gs->fetch);
        PyMem_Free(gs->nparams);
        PyMem_Free(gs->seen);
        PyMem_Free(gs->seen_at);
    }
    PyMem_Free(g->scripts);
    for (i = 0; i < g->nclients; i++) {
        Py_XDECREF(g->args[i]);
        if (g->res[i] != NULL)
            pq->clear(g->res[i]);
        Py_XDECREF(g->py[i]);
        Py_XDECREF(g->ctx[i]);
        Py_XDECREF(g->gen[i]);
    }
    PyMem_Free(g->args);
    PyMem_Free(g->res);
    PyMem_Free(g->py);
    PyMem_Free(g->ctx);
    PyMem_Free(g->gen);
    PyMem_Free(g->own);
    Py_XDECREF(g->caught);
    Py_XDECREF(g->raised);
    Py_XDECREF(g->bind);
    PyMem_Free(g);
}

/* set_python((caught, raised, bind, scripts)); each script
 * (fn, index, counts, fetch, wrap, sleep_type, sleep_index, resume_index,
 * parts) */
PyObject *
fl_gen_set(FastLoop *fl, PyObject *spec)
{
    PyObject *caught, *raised, *bind, *scripts;
    fl_gen *g;
    int k;

    if (fl->started || fl->gen != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "set_python after run(), or twice");
        return NULL;
    }
    if (!PyArg_ParseTuple(spec, "OOOO!", &caught, &raised, &bind, &PyTuple_Type, &scripts))
        return NULL;
    if (PyTuple_GET_SIZE(scripts) != fl->nscripts) {
        PyErr_SetString(PyExc_ValueError, "set_python: one entry per script");
        return NULL;
    }
    if (FlResult_Type.tp_flags & Py_TPFLAGS_READY ? 0 : PyType_Ready(&FlResult_Type) < 0)
        return NULL;
    if (intern(&s_py, "py") < 0 || intern(&s_gen, "gen") < 0 || intern(&s_ctx, "ctx") < 0 ||
        intern(&s_batch, "batch") < 0 || intern(&s_thrown, "thrown") < 0 ||
        intern(&s_res, "res") < 0 || intern(&s_usec, "usec") < 0)
        return NULL;
    g = PyMem_Calloc(1, sizeof *g);
    if (g == NULL)
        return PyErr_NoMemory();
    fl->gen = g;
    g->caught = Py_NewRef(caught);
    g->raised = Py_NewRef(raised);
    g->bind = Py_NewRef(bind);
    g->nclients = fl->nclients;
    g->args = PyMem_Calloc((size_t)fl->nclients + 1, sizeof *g->args);
    g->res = PyMem_Calloc((size_t)fl->nclients + 1, sizeof *g->res);
    g->py = PyMem_Calloc((size_t)fl->nclients + 1, sizeof *g->py);
    g->ctx = PyMem_Calloc((size_t)fl->nclients + 1, sizeof *g->ctx);
    g->gen = PyMem_Calloc((size_t)fl->nclients + 1, sizeof *g->gen);
    g->own = PyMem_Calloc((size_t)fl->nclients + 1, 1);
    g->scripts = PyMem_Calloc((size_t)fl->nscripts, sizeof *g->scripts);
    if (g->args == NULL || g->res == NULL || g->scripts == NULL || g->py == NULL ||
        g->ctx == NULL || g->gen == NULL || g->own == NULL) {
        fl_gen_free(fl);
        return PyErr_NoMemory();
    }
    g->nscripts = fl->nscripts;
    for (k = 0; k < fl->nscripts; k++) {
        fl_gen_script *gs = &g->scripts[k];
        PyObject *fn, *index, *counts, *fetch, *wrap, *sleep_type, *parts;
        int i;

        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(scripts, k), "OO!O!SOOiiO!", &fn,
                              &PyDict_Type, &index, &PyTuple_Type, &counts, &fetch, &wrap,
                              &sleep_type, &gs->sleep_index, &gs->resume_index, &PyTuple_Type,
                              &parts))
            goto fail;
        gs->nops = fl->scripts[k].nops;
        if (PyTuple_GET_SIZE(counts) != gs->nops || PyBytes_GET_SIZE(fetch) != gs->nops ||
            PyTuple_GET_SIZE(parts) != gs->nops ||
            !PyType_Check(sleep_type) || gs->sleep_index <= 0 ||
            gs->sleep_index >= gs->nops || gs->resume_index <= 0 ||
            gs->resume_index >= gs->nops ||
            fl->scripts[k].ops[gs->resume_index].kind != OP_PY) {
            PyErr_SetString(PyExc_ValueError, "set_python: malformed script");
            goto fail;
        }
        gs->fn = Py_NewRef(fn);
        gs->index = Py_NewRef(index);
        gs->counts = Py_NewRef(counts);
        gs->wrap = Py_NewRef(wrap);
        gs->sleep_type = Py_NewRef(sleep_type);
        gs->parts = Py_NewRef(parts);
        for (i = 0; i < gs->nops; i++) {
            PyObject *pp = PyTuple_GET_ITEM(parts, i);
            Py_ssize_t j;

            if (pp == Py_None)
                continue;
            if (!PyTuple_Check(pp) || PyTuple_GET_SIZE(pp) % 2 != 1)
                goto malformed;
            for (j = 0; j < PyTuple_GET_SIZE(pp); j++)
                if (j % 2 == 0 ? !PyBytes_Check(PyTuple_GET_ITEM(pp, j))
                               : !PyLong_Check(PyTuple_GET_ITEM(pp, j)))
                    goto malformed;
        }
        gs->fetch = PyMem_Malloc((size_t)gs->nops);
        if (gs->fetch == NULL) {
            PyErr_NoMemory();
            goto fail;
        }
        memcpy(gs->fetch, PyBytes_AS_STRING(fetch), (size_t)gs->nops);
        gs->nparams = PyMem_Calloc((size_t)gs->nops, sizeof *gs->nparams);
        gs->seen = PyMem_Calloc((size_t)gs->nops, sizeof *gs->seen);
        gs->seen_at = PyMem_Calloc((size_t)gs->nops, sizeof *gs->seen_at);
        if (gs->nparams == NULL || gs->seen == NULL || gs->seen_at == NULL) {
            PyErr_NoMemory();
            goto fail;
        }
        for (i = 0; i < gs->nops; i++) {
            Py_ssize_t n = PyLong_AsSsize_t(PyTuple_GET_ITEM(counts, i));

            if (n < 0 || n > INT_MAX) {
                if (!PyErr_Occurred())
                    PyErr_SetString(PyExc_ValueError, "set_python: a bad parameter count");
                goto fail;
            }
            gs->nparams[i] = (int)n;
        }
        /* every statement the generator may name is an OP_SQL of the plan */
        for (i = 0; i < gs->nops; i++)
            if (gs->fetch[i] && fl->scripts[k].ops[i].kind != OP_SQL) {
                PyErr_SetString(PyExc_ValueError, "set_python: fetch of a non-SQL op");
                goto fail;
            }
    }
    Py_RETURN_NONE;
malformed:
    PyErr_SetString(PyExc_ValueError, "set_python: malformed parts");
fail:
    fl_gen_free(fl);
    return NULL;
}

PyObject *
fl_gen_steps(FastLoop *fl, void *closure)
{
    (void)closure;
    return PyLong_FromLongLong(fl->gen == NULL ? 0 : fl->gen->steps);
}

/* ---------------------------------------------------------------------- */
/* Stepping                                                               */

/* The arguments of a statement call as C sends them: the tuple itself
 * when every value is one C binds (an int64, str without NUL or
 * surrogates, float, bool, bytes without NUL, None), a new tuple where
 * every other value is its str() (pyworkload._text's), or NULL (Python
 * sends it: an int beyond int64, text C cannot pass); -1 in *err on error */
static PyObject *
bindable(PyObject *args, int simple, int *err)
{
    Py_ssize_t i, n = PyTuple_GET_SIZE(args), len;
    PyObject *out = NULL;

    for (i = 0; i < n; i++) {
        PyObject *v = PyTuple_GET_ITEM(args, i), *s;
        const char *t;
        int overflow;

        if (v == Py_None || PyBool_Check(v) || PyFloat_CheckExact(v))
            continue;
        if (PyLong_CheckExact(v)) {
            (void)PyLong_AsLongLongAndOverflow(v, &overflow);
            if (overflow)
                goto python;
            continue;
        }
        if (PyBytes_CheckExact(v)) {
            if ((Py_ssize_t)strlen(PyBytes_AS_STRING(v)) != PyBytes_GET_SIZE(v))
                goto python;
            if (simple) {
                /* -M simple decodes it strictly: not UTF-8 is Python's error */
                s = PyUnicode_DecodeUTF8(PyBytes_AS_STRING(v), PyBytes_GET_SIZE(v), NULL);
                if (s == NULL) {
                    PyErr_Clear();
                    goto python;
                }
                Py_DECREF(s);
            }
            continue;
        }
        if (PyUnicode_CheckExact(v)) {
            t = PyUnicode_AsUTF8AndSize(v, &len);
            if (t == NULL) {
                PyErr_Clear();
                goto python;
            }
            if ((Py_ssize_t)strlen(t) != len)
                goto python;
            continue;
        }
        /* Decimal, date, ...: their text, as Python's path sends it */
        if (out == NULL) {
            out = PyTuple_GetSlice(args, 0, n);
            if (out == NULL) {
                *err = -1;
                return NULL;
            }
        }
        s = PyObject_Str(v);
        if (s == NULL) {
            PyErr_Clear();
            goto python;
        }
        t = PyUnicode_AsUTF8AndSize(s, &len);
        if (t == NULL || (Py_ssize_t)strlen(t) != len) {
            PyErr_Clear();
            Py_DECREF(s);
            goto python;
        }
        PyTuple_SET_ITEM(out, i, s);
        Py_DECREF(v);
    }
    return out != NULL ? out : Py_NewRef(args);
python:
    Py_XDECREF(out);
    return NULL;
}

/* What C leaves to Python's py_step: ``item`` (what the generator
 * yielded, or a Raised of its exception) filed by the K_PY op at
 * resume_index, as after a caught error. */
static int
to_py_step(FastLoop *fl, int index, PyObject *py, PyObject *item)
{
    fl_client *c = &fl->clients[index];

    if (PyObject_SetAttr(py, s_thrown, item) < 0 ||
        PyObject_SetAttr(py, s_batch, fl->gen->caught) < 0)
        return -1;
    c->command = fl->gen->scripts[c->script].resume_index;
    return fl_to_python(fl, index, START_COMMAND, NULL);
}

int
fl_gen_step(FastLoop *fl, int index, int *state)
{
    fl_gen *g = fl->gen;
    fl_client *c = &fl->clients[index];
    fl_gen_script *gs = &g->scripts[c->script];
    PyObject *py = g->py[index], *gen, *value = NULL, *item = NULL, *v;
    PySendResult sent;
    int r = -1;

    fl_py(fl);
    if (py == NULL) {
        /* the client's PyClient (Python's first transaction made it) */
        py = PyObject_GetAttr(c->st, s_py);
        if (py == NULL)
            return -1;
        if (py == Py_None) {
            Py_DECREF(py);
            return fl_to_python(fl, index, START_COMMAND, NULL);
        }
        g->ctx[index] = PyObject_GetAttr(py, s_ctx);
        if (g->ctx[index] == NULL) {
            Py_DECREF(py);
            return -1;
        }
        g->py[index] = py;
    }
    Py_INCREF(py);
    if (!g->own[index]) {
        /* Python had the client: its generator, unless it is inside a
         * batch or after a caught error (Python's to go on with) */
        v = PyObject_GetAttr(py, s_batch);
        if (v == NULL)
            goto done;
        Py_DECREF(v);
        if (v != Py_None)
            goto python;
        v = PyObject_GetAttr(py, s_gen);
        if (v == NULL)
            goto done;
        if (v == Py_None)
            Py_DECREF(v);
        else
            Py_XSETREF(g->gen[index], v);
        g->own[index] = 1;
    }
    gen = g->gen[index];
    if (c->command == 0) {
        if (gen != NULL)
            /* the last try's generator is still open: Python closes it */
            goto python;
        if (fl->save_rng) {
            /* the transaction's start, for a retry (the generator draws
             * from Client.rng itself) */
            PyObject *rng = PyObject_GetAttr(c->st, s_rng);

            if (rng == NULL)
                goto done;
            r = fl_rng_load(rng, &c->saved0, &c->saved1);
            Py_DECREF(rng);
            if (r < 0)
                goto done;
            r = -1;
        }
        gen = g->gen[index] = PyObject_CallOneArg(gs->fn, g->ctx[index]);
        if (gen == NULL)
            goto raised;
        value = Py_NewRef(Py_None);
    } else {
        if (gen == NULL)
            goto python;
        if (g->res[index] != NULL) {
            PyObject *res = result_object(g->res[index]);

            g->res[index] = NULL;
            if (res == NULL)
                goto done;
            value = PyObject_CallOneArg(gs->wrap, res);
            Py_DECREF(res);
            if (value == NULL)
                goto done;
        } else
            value = Py_NewRef(Py_None);
    }
    g->steps++;
    sent = PyIter_Send(gen, value, &item);
    Py_CLEAR(value);
    if (sent == PYGEN_RETURN) {
        Py_CLEAR(item);
        Py_CLEAR(g->gen[index]);
        *state = END_TX;
        r = 1;
        goto done;
    }
    if (sent == PYGEN_ERROR)
        goto raised;
    if (PyTuple_CheckExact(item) && PyTuple_GET_SIZE(item) == 2) {
        PyObject *stmt = PyTuple_GET_ITEM(item, 0), *args = PyTuple_GET_ITEM(item, 1);
        int from = c->command, i = -1;

        if (stmt == gs->seen[from])
            i = gs->seen_at[from];
        else {
            PyObject *at = PyDict_GetItemWithError(gs->index, stmt);

            if (at == NULL)
                PyErr_Clear(); /* not a statement, unhashable: Python's message */
            else {
                long k = PyLong_AsLong(at);

                if (k <= 0 || k >= gs->nops ||
                    fl->scripts[c->script].ops[k].kind != OP_SQL) {
                    if (!PyErr_Occurred())
                        PyErr_SetString(PyExc_ValueError,
                                        "set_python: a bad statement index");
                    goto done;
                }
                i = (int)k;
                /* borrowed: the key of index, which lives as long */
                gs->seen[from] = stmt;
                gs->seen_at[from] = i;
            }
        }
        if (i > 0 && PyTuple_CheckExact(args) && gs->nparams[i] == PyTuple_GET_SIZE(args)) {
            int err = 0;
            PyObject *bound = bindable(args, fl->mode == MODE_SIMPLE, &err);

            if (err)
                goto done;
            if (bound != NULL) {
                Py_XSETREF(g->args[index], bound);
                c->command = i;
                *state = START_COMMAND;
                r = 1;
                goto done;
            }
        }
    } else if ((PyObject *)Py_TYPE(item) == gs->sleep_type) {
        int64_t usec;

        v = PyObject_GetAttr(item, s_usec);
        if (v == NULL)
            goto done;
        usec = PyLong_AsLongLong(v);
        Py_DECREF(v);
        if (usec == -1 && PyErr_Occurred())
            goto done;
        c->command = gs->sleep_index;
        c->sleep_until = clock_us() + usec;
        *state = SLEEP;
        r = 1;
        goto done;
    }
    /* a batch, a mistake: Python's */
    r = to_py_step(fl, index, py, item);
    goto done;
raised:
    /* the generator's exception: Python's py_step reports it (the user's
     * traceback) and aborts the client, a BaseException too (a workload's
     * asyncio.CancelledError, SystemExit, KeyboardInterrupt: a worker's
     * Ctrl-C only sets timer_exceeded, so one raised here is the
     * workload's own; they ended the worker with what it had measured) */
    {
        PyObject *type, *exc, *tb;

        PyErr_Fetch(&type, &exc, &tb);
        PyErr_NormalizeException(&type, &exc, &tb);
        if (tb != NULL)
            PyException_SetTraceback(exc, tb);
        item = PyObject_CallOneArg(g->raised, exc);
        Py_XDECREF(type);
        Py_XDECREF(exc);
        Py_XDECREF(tb);
        if (item == NULL)
            goto done;
        r = to_py_step(fl, index, py, item);
    }
    goto done;
python:
    r = fl_to_python(fl, index, START_COMMAND, NULL);
done:
    Py_XDECREF(item);
    Py_XDECREF(value);
    Py_DECREF(py);
    return r;
}

/* append n bytes to a growing buffer (-1: MemoryError) */
static int
append(char **buf, size_t *len, size_t *cap, const char *p, size_t n)
{
    if (*len + n + 1 > *cap) {
        size_t want = (*len + n + 1) * 2;
        char *bigger = PyMem_Realloc(*buf, want);

        if (bigger == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        *buf = bigger;
        *cap = want;
    }
    memcpy(*buf + *len, p, n);
    *len += n;
    return 0;
}

/* -M simple: pyworkload._literal of an argument (bindable's types) */
static int
append_literal(char **buf, size_t *len, size_t *cap, PyObject *v)
{
    char num[INT_TEXT];

    if (v == Py_None)
        return append(buf, len, cap, "NULL", 4);
    if (PyBool_Check(v))
        return v == Py_True ? append(buf, len, cap, "true", 4)
                            : append(buf, len, cap, "false", 5);
    if (PyLong_CheckExact(v)) {
        char *end = put_int(num, PyLong_AsLongLong(v));

        return append(buf, len, cap, num, (size_t)(end - num));
    }
    if (PyFloat_CheckExact(v)) {
        char *t = PyOS_double_to_string(PyFloat_AS_DOUBLE(v), 'r', 0, Py_DTSF_ADD_DOT_0,
                                        NULL);
        int r;

        if (t == NULL)
            return -1;
        r = append(buf, len, cap, t, strlen(t));
        PyMem_Free(t);
        return r;
    } else {
        /* text (str, or bytes bindable checked as UTF-8): quoted, its
         * quotes doubled */
        Py_ssize_t n, i, from = 0;
        const char *t;

        if (PyBytes_CheckExact(v)) {
            t = PyBytes_AS_STRING(v);
            n = PyBytes_GET_SIZE(v);
        } else
            t = PyUnicode_AsUTF8AndSize(v, &n);

        if (t == NULL || append(buf, len, cap, "'", 1) < 0)
            return -1;
        for (i = 0; i < n; i++)
            if (t[i] == '\'') {
                if (append(buf, len, cap, t + from, (size_t)(i + 1 - from)) < 0)
                    return -1;
                from = i;
            }
        if (append(buf, len, cap, t + from, (size_t)(n - from)) < 0)
            return -1;
        return append(buf, len, cap, "'", 1);
    }
}

/* -M simple: the statement's text with its arguments written in as
 * literals (pyworkload's set_params and sql.substitute) */
static int
send_simple(FastLoop *fl, int index, const fl_op *op)
{
    fl_client *c = &fl->clients[index];
    PyObject *parts = PyTuple_GET_ITEM(fl->gen->scripts[c->script].parts, c->command);
    PyObject *args = fl->gen->args[index];
    char *buf = NULL;
    size_t len = 0, cap = 0;
    Py_ssize_t j;
    int ok;

    if (parts == Py_None || args == NULL)
        ok = pq->sendQuery(c->conn, op->text);
    else {
        for (j = 0; j < PyTuple_GET_SIZE(parts); j++) {
            PyObject *p = PyTuple_GET_ITEM(parts, j);
            int r;

            if (j % 2 == 0)
                r = append(&buf, &len, &cap, PyBytes_AS_STRING(p),
                           (size_t)PyBytes_GET_SIZE(p));
            else {
                Py_ssize_t k = PyLong_AsSsize_t(p);

                if (k < 0 || k >= PyTuple_GET_SIZE(args)) {
                    if (!PyErr_Occurred())
                        PyErr_SetString(PyExc_ValueError, "set_python: a bad part");
                    r = -1;
                } else
                    r = append_literal(&buf, &len, &cap, PyTuple_GET_ITEM(args, k));
            }
            if (r < 0) {
                PyMem_Free(buf);
                return -3;
            }
        }
        if (buf == NULL && append(&buf, &len, &cap, "", 0) < 0)
            return -3;
        buf[len] = '\0';
        ok = pq->sendQuery(c->conn, buf);
        PyMem_Free(buf);
    }
    return !ok ? -2 : pq->flush(c->conn);
}

/* send_sql for a statement of a Python transaction: its arguments bound
 * as pyworkload's set_params and sql.params_of would send them */
int
fl_gen_send(FastLoop *fl, int index, const fl_op *op)
{
    fl_client *c = &fl->clients[index];
    PyObject *args = fl->gen->args[index];
    Py_ssize_t i, n = args == NULL ? 0 : PyTuple_GET_SIZE(args);
    const char *small[16], **values = small;
    char ibuf[16][INT_TEXT], (*ints)[INT_TEXT] = ibuf;
    char *freed[16], **floats = freed;
    int nfloats = 0, ok;

    fl_py(fl);
    if (fl->mode == MODE_SIMPLE)
        return send_simple(fl, index, op);
    if (n > 16) {
        values = PyMem_Malloc((size_t)n * sizeof *values);
        ints = PyMem_Malloc((size_t)n * sizeof *ints);
        floats = PyMem_Malloc((size_t)n * sizeof *floats);
        if (values == NULL || ints == NULL || floats == NULL) {
            PyErr_NoMemory();
            ok = -3;
            goto out;
        }
    }
    for (i = 0; i < n; i++) {
        PyObject *v = PyTuple_GET_ITEM(args, i);

        if (v == Py_None)
            values[i] = NULL;
        else if (PyBool_Check(v))
            values[i] = v == Py_True ? "true" : "false";
        else if (PyLong_CheckExact(v)) {
            *put_int(ints[i], PyLong_AsLongLong(v)) = '\0';
            values[i] = ints[i];
        } else if (PyUnicode_CheckExact(v))
            values[i] = PyUnicode_AsUTF8(v); /* checked by bindable: cached */
        else if (PyBytes_CheckExact(v))
            values[i] = PyBytes_AS_STRING(v);
        else {
            /* a float: repr() */
            char *t = PyOS_double_to_string(PyFloat_AS_DOUBLE(v), 'r', 0, Py_DTSF_ADD_DOT_0,
                                            NULL);

            if (t == NULL) {
                ok = -3;
                goto out;
            }
            floats[nfloats++] = t;
            values[i] = t;
        }
    }
    if (fl->mode == MODE_PREPARED)
        ok = pq->sendQueryPrepared(c->conn, op->text, (int)n, n ? values : NULL, NULL, NULL,
                                   0);
    else
        ok = pq->sendQueryParams(c->conn, op->text, (int)n, NULL, n ? values : NULL, NULL,
                                 NULL, 0);
    /* as send_sql: 0 all sent, 1 data left, -1 flush failed, -2 send failed */
    ok = !ok ? -2 : pq->flush(c->conn);
out:
    while (nfloats > 0)
        PyMem_Free(floats[--nfloats]);
    if (values != small) {
        PyMem_Free(values);
        PyMem_Free(ints);
        PyMem_Free(floats);
    }
    return ok;
}

/* WAIT_RESULT of a Python transaction's statement: its results read, the
 * last kept when the generator fetches it (sql.store_gset's GSET_PY). 1:
 * all read; 0: the client waits, or went to Python; -1 error. */
int
fl_gen_wait(FastLoop *fl, int index)
{
    fl_gen *g = fl->gen;
    fl_client *c = &fl->clients[index];
    int fetch = g->scripts[c->script].fetch[c->command], q = c->qrynum, status;
    PGresult *res;

    fl_py(fl);
    if (!pq->consumeInput(c->conn))
        return fl_to_python_code(fl, index, WAIT_RESULT, (long)q * 4 + DRAIN_FAILED);
    for (;;) {
        if (pq->isBusy(c->conn)) {
            c->qrynum = q;
            c->state = WAIT_RESULT;
            return c->unwatched ? fl_watch(fl, index) : 0;
        }
        res = pq->getResult(c->conn);
        if (res == NULL)
            break;
        status = pq->resultStatus(res);
        if (status == PGRES_TUPLES_OK || status == PGRES_COMMAND_OK ||
            status == PGRES_EMPTY_QUERY) {
            if (fetch) {
                if (g->res[index] != NULL)
                    pq->clear(g->res[index]);
                g->res[index] = res;
            } else
                pq->clear(res);
            q++;
            continue;
        }
        if (g->res[index] != NULL) {
            pq->clear(g->res[index]);
            g->res[index] = NULL;
        }
        /* resume() reads it; py_error throws it into the generator */
        return fl_hand_error(fl, index, q, status, res);
    }
    c->qrynum = q;
    if (!q)
        return fl_to_python_code(fl, index, WAIT_RESULT, DRAIN_DONE);
    return 1;
}

/* Before a hand-back: the statement's parameters into the variables
 * Python's send reads, a result not given yet into PyClient.res (py_step
 * wraps it), and C's PRNG words from Client.rng (the generator drew from
 * it: hand_back writes C's words back) */
int
fl_gen_hand_back(FastLoop *fl, int index)
{
    fl_gen *g = fl->gen;
    fl_client *c = &fl->clients[index];
    PyObject *rng, *r;
    int ok;

    fl_py(fl);
    if (g->res[index] != NULL) {
        PyObject *res = result_object(g->res[index]), *py;

        g->res[index] = NULL;
        if (res == NULL)
            return -1;
        py = PyObject_GetAttr(c->st, s_py);
        ok = py == NULL ? -1 : PyObject_SetAttr(py, s_res, res);
        Py_XDECREF(py);
        Py_DECREF(res);
        if (ok < 0)
            return -1;
    }
    if (g->args[index] != NULL) {
        r = PyObject_CallFunctionObjArgs(g->bind, c->st, g->args[index], NULL);
        Py_CLEAR(g->args[index]);
        if (r == NULL)
            return -1;
        Py_DECREF(r);
    }
    if (g->own[index]) {
        /* C's copy of PyClient.gen, Python's again */
        g->own[index] = 0;
        ok = PyObject_SetAttr(g->py[index], s_gen,
                              g->gen[index] != NULL ? g->gen[index] : Py_None);
        Py_CLEAR(g->gen[index]);
        if (ok < 0)
            return -1;
    }
    rng = PyObject_GetAttr(c->st, s_rng);
    if (rng == NULL)
        return -1;
    ok = fl_rng_load(rng, &c->s0, &c->s1);
    Py_DECREF(rng);
    return ok;
}

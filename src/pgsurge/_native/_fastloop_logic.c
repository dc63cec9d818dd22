/*
 * pgsurge._fastloop: scripts with logic -- int expressions (\set, \if,
 * \elif) and \gset/\aset.
 *
 * An expression is the program pgsurge.engine.fastexpr compiled: (code,
 * argument) pairs run on a small stack of int64 values (booleans are 0
 * and 1). fl_eval computes exactly what pgsurge.script.values and
 * functions compute for ints, or says that it cannot (1): an overflow, a
 * division by zero, an empty random range, a permute size below 1, a
 * variable whose value C does not hold as an int. The caller then puts
 * the client's PRNG back and hands the client to Python at the start of
 * the command, which evaluates it again and gives pgbench's message.
 *
 * fl_wait_gset reads a \gset/\aset command's results as sql.read_results
 * does (the lookahead ``pending`` result, the last row stored), storing a
 * value that is an int written canonically into the variable's slot, and
 * any other value, or a variable C has no slot for, into the client's
 * variables as Python does (Engine.gset for names C does not know).
 */

#include "_fastloop.h"

/* pgsurge.engine.fastexpr's op codes */
enum {
    X_CONST = 0,
    X_VAR = 1,
    X_ADD = 2,
    X_SUB = 3,
    X_MUL = 4,
    X_DIV = 5,
    X_MOD = 6,
    X_EQ = 7,
    X_NE = 8,
    X_LT = 9,
    X_LE = 10,
    X_BAND = 11,
    X_BOR = 12,
    X_BXOR = 13,
    X_SHL = 14,
    X_SHR = 15,
    X_NOT = 16,
    X_JFALSE = 17,
    X_JTRUE = 18,
    X_ABS = 19,
    X_LEAST = 20,
    X_GREATEST = 21,
    X_RANDOM = 22,
    X_MURMUR2 = 23,
    X_FNV1A = 24,
    X_PERMUTE = 25,
    X_LAST = 25
};

/* pops and pushes of each code (LEAST/GREATEST: arg pops) */
static const signed char pops[X_LAST + 1] = {0, 0, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2,
                                             2, 2, 2, 1, 1, 1, 1, -1, -1, 2, 2, 2, 3};

int
fl_parse_code(PyObject *spec, fl_op *op)
{
    Py_ssize_t i, n;
    int depth = 0;

    if (!PyTuple_Check(spec) || PyTuple_GET_SIZE(spec) % 2 || PyTuple_GET_SIZE(spec) == 0)
        goto bad;
    n = PyTuple_GET_SIZE(spec) / 2;
    op->code = PyMem_New(fl_code, n);
    if (op->code == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    op->ncode = (int)n;
    for (i = 0; i < n; i++) {
        fl_code *x = &op->code[i];
        int in;

        x->code = (int)PyLong_AsLong(PyTuple_GET_ITEM(spec, 2 * i));
        x->arg = PyLong_AsLongLong(PyTuple_GET_ITEM(spec, 2 * i + 1));
        if (PyErr_Occurred())
            return -1;
        if (x->code < 0 || x->code > X_LAST)
            goto bad;
        /* the stack's depth along the straight line (a jump keeps the
         * value it tested, which the other path pops and pushes again) */
        in = pops[x->code] < 0 ? (int)x->arg : pops[x->code];
        if ((x->code == X_LEAST || x->code == X_GREATEST) && (x->arg < 1 || x->arg > MAX_STACK))
            goto bad;
        if ((x->code == X_JFALSE || x->code == X_JTRUE) && (x->arg <= i || x->arg > n))
            goto bad;
        if (x->code == X_VAR && (x->arg < 0 || x->arg >= MAX_VARS))
            goto bad;
        if (depth < in)
            goto bad;
        depth -= in;
        if (x->code != X_JFALSE && x->code != X_JTRUE)
            depth++;
        if (depth > MAX_STACK)
            goto bad;
    }
    if (depth != 1)
        goto bad;
    return 0;
bad:
    if (!PyErr_Occurred())
        PyErr_SetString(PyExc_ValueError, "malformed fast loop expression");
    return -1;
}

/* ---------------------------------------------------------------------- */
/* The hashes and permute of pgsurge.script.functions (_speedups.c's)     */

#define FNV_PRIME UINT64_C(0x00000100000001B3)
#define FNV_OFFSET_BASIS UINT64_C(0xCBF29CE484222325)
#define MM2_MUL UINT64_C(0xC6A4A7935BD1E995)
#define MM2_ROT 47
#define GOLDEN UINT64_C(0x9E3779B97F4A7C15)
#define MIX1 UINT64_C(0xBF58476D1CE4E5B9)
#define MIX2 UINT64_C(0x94D049BB133111EB)
#define ZERO_FIX0 UINT64_C(0x5851F42D4C957F2D)
#define ZERO_FIX1 UINT64_C(0x14057B7EF767814F)

static int64_t
hash_fnv1a(uint64_t v, uint64_t seed)
{
    uint64_t h = FNV_OFFSET_BASIS ^ seed;
    int i;

    for (i = 0; i < 8; i++) {
        h = (h ^ (v & 0xFF)) * FNV_PRIME;
        v >>= 8;
    }
    return (int64_t)h;
}

static int64_t
hash_murmur2(uint64_t v, uint64_t seed)
{
    uint64_t h = seed ^ (MM2_MUL * 8), k = v * MM2_MUL;

    k ^= k >> MM2_ROT;
    k *= MM2_MUL;
    h = (h ^ k) * MM2_MUL;
    h ^= h >> MM2_ROT;
    h *= MM2_MUL;
    h ^= h >> MM2_ROT;
    return (int64_t)h;
}

static inline uint64_t
splitmix64(uint64_t *x)
{
    uint64_t z = (*x += GOLDEN);

    z = (z ^ (z >> 30)) * MIX1;
    z = (z ^ (z >> 27)) * MIX2;
    return z ^ (z >> 31);
}

static inline uint64_t
scramble(uint64_t x, uint64_t mul, uint64_t xr, uint64_t mask, int top)
{
    x = ((x * mul) ^ xr) & mask;
    return ((x << 1) & mask) | (x >> top);
}

/* pgbench's permute of val in [0, isize) (isize >= 1) */
static int64_t
permute(uint64_t val, int64_t isize, uint64_t seed)
{
    uint64_t s0, s1, size, v, mask, last, m1, r1, m2, r2, t, span, d;
    int masklen, top, round, shift;

    if (isize < 2)
        return 0;
    size = (uint64_t)isize;
    s0 = splitmix64(&seed);
    s1 = splitmix64(&seed);
    if (s0 == 0 && s1 == 0) {
        s0 = ZERO_FIX0;
        s1 = ZERO_FIX1;
    }
    v = val % size;
    masklen = 64 - __builtin_clzll(size) - 1;
    mask = (UINT64_C(1) << masklen) - 1;
    top = masklen - 1;
    last = size - 1;
    for (round = 0; round < 6; round++) {
        m1 = (prng_next(&s0, &s1) & mask) | 1;
        r1 = prng_next(&s0, &s1) & mask;
        if (v <= mask)
            v = scramble(v, m1, r1, mask, top);
        m2 = (prng_next(&s0, &s1) & mask) | 1;
        r2 = prng_next(&s0, &s1) & mask;
        t = last - v;
        if (t <= mask)
            v = last - scramble(t, m2, r2, mask, top);
        /* a random offset in [0, size - 1] */
        span = last;
        shift = __builtin_clzll(span);
        do {
            d = prng_next(&s0, &s1) >> shift;
        } while (d > span);
        v = (v + d) % size;
    }
    return (int64_t)v;
}

/* ---------------------------------------------------------------------- */
/* The evaluator                                                          */

int
fl_eval(fl_client *c, const fl_code *code, int n, int64_t *out)
{
    int64_t st[MAX_STACK + 1], a, b;
    int sp = 0, pc = 0, k;

    while (pc < n) {
        const fl_code *x = &code[pc++];

        switch (x->code) {
        case X_CONST:
            st[sp++] = x->arg;
            continue;
        case X_VAR:
            if (!(c->valid & (UINT64_C(1) << x->arg)))
                return 1;
            st[sp++] = c->vals[x->arg];
            continue;
        case X_NOT:
            st[sp - 1] = !st[sp - 1];
            continue;
        case X_ABS:
            a = st[sp - 1];
            st[sp - 1] = a < 0 ? (int64_t)(UINT64_C(0) - (uint64_t)a) : a;
            continue;
        case X_JFALSE:
            if (st[sp - 1] == 0)
                pc = (int)x->arg;
            else
                sp--;
            continue;
        case X_JTRUE:
            if (st[sp - 1] != 0)
                pc = (int)x->arg;
            else
                sp--;
            continue;
        case X_LEAST:
        case X_GREATEST:
            /* C's "a > b ? a : b" chain of _extremum: the later wins ties */
            sp -= (int)x->arg;
            a = st[sp];
            for (k = 1; k < (int)x->arg; k++) {
                b = st[sp + k];
                if (!(x->code == X_GREATEST ? a > b : a < b))
                    a = b;
            }
            st[sp++] = a;
            continue;
        case X_PERMUTE:
            sp -= 2;
            if (st[sp] <= 0)
                return 1; /* "permute size parameter must be greater than zero" */
            st[sp - 1] = permute((uint64_t)st[sp - 1], st[sp], (uint64_t)st[sp + 1]);
            continue;
        default:
            break;
        }
        /* binary operators */
        b = st[--sp];
        a = st[sp - 1];
        switch (x->code) {
        case X_ADD:
            if (__builtin_add_overflow(a, b, &st[sp - 1]))
                return 1;
            break;
        case X_SUB:
            if (__builtin_sub_overflow(a, b, &st[sp - 1]))
                return 1;
            break;
        case X_MUL:
            if (__builtin_mul_overflow(a, b, &st[sp - 1]))
                return 1;
            break;
        case X_DIV:
            if (b == 0 || (b == -1 && a == INT64_MIN))
                return 1;
            st[sp - 1] = b == -1 ? -a : a / b;
            break;
        case X_MOD:
            if (b == 0)
                return 1;
            st[sp - 1] = b == -1 ? 0 : a % b;
            break;
        case X_EQ:
            st[sp - 1] = a == b;
            break;
        case X_NE:
            st[sp - 1] = a != b;
            break;
        case X_LT:
            st[sp - 1] = a < b;
            break;
        case X_LE:
            st[sp - 1] = a <= b;
            break;
        case X_BAND:
            st[sp - 1] = a & b;
            break;
        case X_BOR:
            st[sp - 1] = a | b;
            break;
        case X_BXOR:
            st[sp - 1] = a ^ b;
            break;
        case X_SHL:
            st[sp - 1] = (int64_t)((uint64_t)a << (b & 63));
            break;
        case X_SHR:
            st[sp - 1] = a >> (b & 63);
            break;
        case X_RANDOM:
            if (a > b || (uint64_t)b - (uint64_t)a >= (uint64_t)INT64_MAX)
                return 1;
            st[sp - 1] = prng_range(&c->s0, &c->s1, a, b);
            break;
        case X_MURMUR2:
            st[sp - 1] = hash_murmur2((uint64_t)a, (uint64_t)b);
            break;
        case X_FNV1A:
            st[sp - 1] = hash_fnv1a((uint64_t)a, (uint64_t)b);
            break;
        default:
            return 1;
        }
    }
    *out = st[0];
    return 0;
}

/* ---------------------------------------------------------------------- */
/* \gset and \aset                                                        */

/* an int64 written as Python writes it: -?[1-9][0-9]* or 0 */
int
fl_canonical_int(const char *s, Py_ssize_t len, int64_t *out)
{
    Py_ssize_t i = 0;
    int neg = 0;
    uint64_t v = 0, limit;

    if (len > 0 && s[0] == '-') {
        neg = 1;
        i = 1;
    }
    if (i >= len || s[i] < '0' || s[i] > '9' || (s[i] == '0' && len > i + 1) ||
        (neg && s[i] == '0'))
        return 0;
    limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    for (; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return 0;
        if (v > (limit - (uint64_t)(s[i] - '0')) / 10)
            return 0;
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    *out = neg ? (int64_t)(UINT64_C(0) - v) : (int64_t)v;
    return 1;
}

/* Engine.gset(st, script, command, qrynum, got, context, name, value) */
static int
call_gset_hook(FastLoop *fl, fl_client *c, int q, int got, const char *context,
               PyObject *name, PyObject *value)
{
    PyObject *r;
    int ok;

    if (fl->gset_hook == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "no gset hook");
        return -1;
    }
    if (fl_shared_store(fl) < 0)
        return -1;
    r = PyObject_CallFunction(fl->gset_hook, "OiiiisOO", c->st, c->script, c->command,
                              q, got, context, name == NULL ? Py_None : name,
                              value == NULL ? Py_None : value);
    if (r == NULL)
        return -1;
    ok = PyObject_IsTrue(r);
    Py_DECREF(r);
    if (ok < 0 || fl_shared_load(fl) < 0)
        return -1;
    return ok;
}

/* sql.store_gset of one result: 1 stored, 0 failed (message given),
 * -1 error */
static int
store_gset(FastLoop *fl, fl_client *c, fl_op *op, PGresult *res, int is_last, int q)
{
    const char *context = op->gset == GSET_ALL ? "aset" : "gset";
    PyObject *vars = NULL;
    int status, ntuples, nfields, col, r = 1;

    if (op->gset == GSET_ONE && !is_last)
        return 1;
    status = pq->resultStatus(res);
    if (status != PGRES_TUPLES_OK)
        return op->gset == GSET_ONE ? call_gset_hook(fl, c, q, 0, context, NULL, NULL) : 1;
    ntuples = pq->ntuples(res);
    if (op->gset == GSET_ONE && ntuples != 1)
        return call_gset_hook(fl, c, q, ntuples, context, NULL, NULL);
    if (ntuples <= 0)
        return 1;
    nfields = pq->nfields(res);
    for (col = 0; col < nfields && r == 1; col++) {
        const char *fname = pq->fname(res, col), *text = "";
        PyObject *field, *name, *slot, *value;
        int len = 0;
        int64_t iv;

        if (!pq->getisnull(res, ntuples - 1, col)) {
            text = pq->getvalue(res, ntuples - 1, col);
            len = pq->getlength(res, ntuples - 1, col);
        }
        if (col < GSET_CACHE && fname != NULL && op->colname[col] != NULL &&
            op->colslot[col] >= 0 && strcmp(op->colname[col], fname) == 0 &&
            fl_canonical_int(text, len, &iv)) {
            /* the common case: a known column into its slot */
            uint64_t bit = UINT64_C(1) << op->colslot[col];

            c->vals[op->colslot[col]] = iv;
            c->valid |= bit;
            c->assigned |= bit;
            continue;
        }
        field = PyUnicode_DecodeUTF8(fname ? fname : "", fname ? (Py_ssize_t)strlen(fname) : 0,
                                     "replace");
        if (field == NULL)
            return -1;
        name = PyUnicode_Concat(op->prefix, field);
        Py_DECREF(field);
        if (name == NULL)
            return -1;
        slot = PyDict_GetItemWithError(fl->slot_of, name);
        if (slot == NULL && PyErr_Occurred()) {
            Py_DECREF(name);
            return -1;
        }
        if (col < GSET_CACHE && fname != NULL) {
            /* remember this column's slot for the next results */
            size_t n = strlen(fname) + 1;
            char *copy = PyMem_Realloc(op->colname[col], n);

            if (copy == NULL) {
                Py_DECREF(name);
                PyErr_NoMemory();
                return -1;
            }
            memcpy(copy, fname, n);
            op->colname[col] = copy;
            op->colslot[col] = slot == NULL ? -1 : (int)PyLong_AsLong(slot);
        }
        if (slot != NULL) {
            int i = (int)PyLong_AsLong(slot);
            uint64_t bit = UINT64_C(1) << i;

            if (fl_canonical_int(text, len, &iv)) {
                c->vals[i] = iv;
                c->valid |= bit;
                c->assigned |= bit;
                Py_DECREF(name);
                continue;
            }
            /* not an int of C's: the variable is Python's (a str) */
            c->valid &= ~bit;
            c->assigned &= ~bit;
        }
        value = PyUnicode_DecodeUTF8(text, len, "surrogateescape");
        if (value == NULL) {
            Py_DECREF(name);
            return -1;
        }
        if (slot != NULL) {
            /* a name C planned for is a valid one: store it as Python does */
            if (vars == NULL && (vars = PyObject_GetAttr(c->st, s_variables)) == NULL)
                r = -1;
            else if (PyDict_SetItem(vars, name, value) < 0)
                r = -1;
        } else
            r = call_gset_hook(fl, c, q, 0, context, name, value);
        Py_DECREF(value);
        Py_DECREF(name);
    }
    Py_XDECREF(vars);
    return r;
}

static PyObject *
bytes_or_none(const char *s)
{
    if (s == NULL)
        Py_RETURN_NONE;
    return PyBytes_FromString(s);
}

static void
drop_pending(fl_client *c)
{
    if (c->pending != NULL) {
        pq->clear(c->pending);
        c->pending = NULL;
    }
}

/* a \gset/\aset failed: Python aborts the client (E_META) */
static int
gset_failed(FastLoop *fl, int index)
{
    PyObject *event = PyUnicode_FromString("");
    int r;

    if (event == NULL)
        return -1;
    fl->clients[index].meta_failed = 0;
    r = fl_to_python(fl, index, WAIT_RESULT, event);
    Py_DECREF(event);
    return r;
}

int
fl_wait_gset(FastLoop *fl, int index, fl_op *op)
{
    fl_client *c = &fl->clients[index];
    int q = c->qrynum, status, r;
    PGresult *res;

    if (!pq->consumeInput(c->conn)) {
        drop_pending(c);
        c->meta_failed = 0;
        r = fl_to_python_code(fl, index, WAIT_RESULT, (long)q * 4 + DRAIN_FAILED);
        return r < 0 ? -1 : 0;
    }
    for (;;) {
        if (pq->isBusy(c->conn)) {
            c->qrynum = q;
            c->state = WAIT_RESULT;
            return c->unwatched && fl_watch(fl, index) < 0 ? -1 : 0;
        }
        res = pq->getResult(c->conn);
        if (res == NULL) {
            if (c->meta_failed) {
                c->qrynum = q;
                return gset_failed(fl, index) < 0 ? -1 : 0;
            }
            if (c->pending != NULL) {
                PGresult *p = c->pending;

                c->pending = NULL;
                r = store_gset(fl, c, op, p, 1, q);
                pq->clear(p);
                if (r < 0)
                    return -1;
                if (r == 0) {
                    c->qrynum = q;
                    return gset_failed(fl, index) < 0 ? -1 : 0;
                }
                q++;
            }
            c->qrynum = q;
            if (q == 0) {
                /* Python says "no results" and aborts the client */
                r = fl_to_python_code(fl, index, WAIT_RESULT, DRAIN_DONE);
                return r < 0 ? -1 : 0;
            }
            return 1;
        }
        if (c->meta_failed) {
            pq->clear(res);
            continue; /* discarding the rest of the failed command */
        }
        if (c->pending != NULL) {
            PGresult *p = c->pending;

            c->pending = NULL;
            r = store_gset(fl, c, op, p, 0, q);
            pq->clear(p);
            if (r < 0) {
                pq->clear(res);
                return -1;
            }
            if (r == 0) {
                c->meta_failed = 1;
                pq->clear(res);
                continue;
            }
            q++;
        }
        status = pq->resultStatus(res);
        if (status == PGRES_TUPLES_OK || status == PGRES_COMMAND_OK ||
            status == PGRES_EMPTY_QUERY) {
            c->pending = res;
            continue;
        }
        {
            /* an error (or an unexpected result): Python's note_error */
            PyObject *got = Py_BuildValue(
                "(iiNN)", q, status,
                bytes_or_none(pq->resultErrorField(res, PG_DIAG_SQLSTATE)),
                bytes_or_none(pq->resultErrorMessage(res)));

            pq->clear(res);
            if (got == NULL)
                return -1;
            c->qrynum = q;
            r = fl_to_python(fl, index, WAIT_RESULT, got);
            Py_DECREF(got);
            return r < 0 ? -1 : 0;
        }
    }
}

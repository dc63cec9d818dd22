/*
 * pgsurge._speedups: optional C versions of the uint64 arithmetic hot spots.
 *
 * pgsurge is pure Python; this module only makes it cheaper to run. It
 * holds a compiled twin of pgsurge.prng.PurePgPrng (pg_prng's
 * xoroshiro128** state with its derived draws) and of the hash functions
 * and permute() of pgsurge.script.functions. Python has no machine
 * integers, so each 64-bit step of those costs several big-int objects
 * there (~350 ns per draw); here a draw is a few instructions.
 *
 * Contract: every function returns exactly what its pure-Python twin
 * returns, for the argument domain the callers use (int64 or uint64
 * values, as documented per function); tests/unit/test_speedups.py
 * compares both on many seeds. pgsurge.prng imports this module only when
 * it was built, PGSURGE_PURE is unset, and SPEEDUPS_API matches; bump
 * SPEEDUPS_API whenever the interface changes so that a stale build is
 * ignored rather than trusted.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <math.h>
#include <stdint.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif
#ifdef __GLIBC__
#include <malloc.h>
#endif

#define SPEEDUPS_API 4

/* splitmix64 constants (seeding) */
#define GOLDEN UINT64_C(0x9E3779B97F4A7C15)
#define MIX1 UINT64_C(0xBF58476D1CE4E5B9)
#define MIX2 UINT64_C(0x94D049BB133111EB)
/* the replacement for the all-zero state, a fixed point of the generator */
#define ZERO_FIX0 UINT64_C(0x5851F42D4C957F2D)
#define ZERO_FIX1 UINT64_C(0x14057B7EF767814F)
/* hashes */
#define FNV_PRIME UINT64_C(0x00000100000001B3)
#define FNV_OFFSET_BASIS UINT64_C(0xCBF29CE484222325)
#define MM2_MUL UINT64_C(0xC6A4A7935BD1E995)
#define MM2_ROT 47

/* 2.0 * pi as Python computes 2.0 * math.pi: doubling is exact */
static const double TWO_PI = 2.0 * 3.14159265358979323846;
static const double TWO_M52 = 1.0 / 4503599627370496.0; /* 2**-52 */

static inline uint64_t
rotl64(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

/* Position of the highest set bit plus one (x > 0): Python's bit_length. */
static inline int
bit_length64(uint64_t x)
{
#if defined(__GNUC__) || defined(__clang__)
    return 64 - __builtin_clzll(x);
#else
    int n = 0;
    while (x) {
        x >>= 1;
        n++;
    }
    return n;
#endif
}

/* ---------------------------------------------------------------------- */
/* The generator on a bare state                                          */

typedef struct {
    uint64_t s0;
    uint64_t s1;
} state_t;

static inline uint64_t
next64(state_t *st)
{
    uint64_t s0 = st->s0;
    uint64_t s1 = st->s1 ^ s0;
    uint64_t out = rotl64(s0 * 5, 7) * 9;

    st->s0 = rotl64(s0, 24) ^ s1 ^ (s1 << 16);
    st->s1 = rotl64(s1, 37);
    return out;
}

static inline uint64_t
splitmix64(uint64_t *x)
{
    uint64_t z = (*x += GOLDEN);

    z = (z ^ (z >> 30)) * MIX1;
    z = (z ^ (z >> 27)) * MIX2;
    return z ^ (z >> 31);
}

static inline void
seed_state(state_t *st, uint64_t seed)
{
    st->s0 = splitmix64(&seed);
    st->s1 = splitmix64(&seed);
    if (st->s0 == 0 && st->s1 == 0) {
        st->s0 = ZERO_FIX0;
        st->s1 = ZERO_FIX1;
    }
}

static inline void
set_words(state_t *st, uint64_t s0, uint64_t s1)
{
    if (s0 == 0 && s1 == 0) {
        s0 = ZERO_FIX0;
        s1 = ZERO_FIX1;
    }
    st->s0 = s0;
    st->s1 = s1;
}

/* Uniform in [0, span] by bitmask rejection (span > 0): the top
 * bit_length(span) bits of each draw until one fits. */
static inline uint64_t
draw_upto(state_t *st, uint64_t span)
{
    int shift = 64 - bit_length64(span);
    uint64_t v;

    do {
        v = next64(st) >> shift;
    } while (v > span);
    return v;
}

static inline double
draw_double(state_t *st)
{
    return (double)(next64(st) >> 12) * TWO_M52;
}

/* ---------------------------------------------------------------------- */
/* The PgPrng type                                                         */

typedef struct {
    PyObject_HEAD
    state_t st;
} PrngObject;

static PyTypeObject PrngType;

#define Prng_Check(op) PyObject_TypeCheck(op, &PrngType)

/* Exactly n positional arguments, with Python's message otherwise. */
static int
check_nargs(const char *name, Py_ssize_t nargs, Py_ssize_t n)
{
    if (nargs == n)
        return 1;
    PyErr_Format(PyExc_TypeError, "%s() takes exactly %zd arguments (%zd given)",
                 name, n, nargs);
    return 0;
}

/* Any Python int reduced modulo 2**64 (Python's "x & (2**64 - 1)"). */
static int
as_u64_mask(PyObject *o, uint64_t *out)
{
    unsigned long long v;

    if (!PyLong_Check(o)) {
        PyErr_Format(PyExc_TypeError, "an integer is required, not %.100s",
                     Py_TYPE(o)->tp_name);
        return -1;
    }
    v = PyLong_AsUnsignedLongLongMask(o);
    if (v == (unsigned long long)-1 && PyErr_Occurred())
        return -1;
    *out = (uint64_t)v;
    return 0;
}

static int
as_i64(PyObject *o, int64_t *out)
{
    long long v = PyLong_AsLongLong(o);

    if (v == -1 && PyErr_Occurred())
        return -1;
    *out = (int64_t)v;
    return 0;
}

static int
as_u64(PyObject *o, uint64_t *out)
{
    unsigned long long v;

    if (!PyLong_Check(o)) {
        PyErr_Format(PyExc_TypeError, "an integer is required, not %.100s",
                     Py_TYPE(o)->tp_name);
        return -1;
    }
    v = PyLong_AsUnsignedLongLong(o);
    if (v == (unsigned long long)-1 && PyErr_Occurred())
        return -1;
    *out = (uint64_t)v;
    return 0;
}

static int
Prng_init(PrngObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"seed", NULL};
    PyObject *seed = NULL;
    uint64_t s = 0;

    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|O:PgPrng", kwlist, &seed))
        return -1;
    if (seed != NULL && as_u64_mask(seed, &s) < 0)
        return -1;
    seed_state(&self->st, s);
    return 0;
}

static PyObject *
Prng_new_words(PyTypeObject *type, uint64_t s0, uint64_t s1)
{
    PrngObject *obj = (PrngObject *)type->tp_alloc(type, 0);

    if (obj == NULL)
        return NULL;
    set_words(&obj->st, s0, s1);
    return (PyObject *)obj;
}

PyDoc_STRVAR(seed_doc, "seed(seed)\n--\n\n"
                       "pg_prng_seed: fill the state from a 64-bit seed.");

static PyObject *
Prng_seed(PrngObject *self, PyObject *arg)
{
    uint64_t s;

    if (as_u64_mask(arg, &s) < 0)
        return NULL;
    seed_state(&self->st, s);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(from_words_doc,
             "from_words(s0, s1)\n--\n\n"
             "A state with these exact words (the all-zero fix applies).");

static PyObject *
Prng_from_words(PyObject *cls, PyObject *const *args, Py_ssize_t nargs)
{
    uint64_t s0, s1;

    if (!check_nargs("from_words", nargs, 2))
        return NULL;
    if (as_u64_mask(args[0], &s0) < 0 || as_u64_mask(args[1], &s1) < 0)
        return NULL;
    return Prng_new_words((PyTypeObject *)cls, s0, s1);
}

static PyObject *
Prng_getstate(PrngObject *self, PyObject *Py_UNUSED(ignored))
{
    return Py_BuildValue("(KK)", (unsigned long long)self->st.s0,
                         (unsigned long long)self->st.s1);
}

static PyObject *
Prng_setstate(PrngObject *self, PyObject *state)
{
    PyObject *a, *b;
    uint64_t s0, s1;
    int bad;

    a = PySequence_GetItem(state, 0);
    if (a == NULL)
        return NULL;
    b = PySequence_GetItem(state, 1);
    if (b == NULL) {
        Py_DECREF(a);
        return NULL;
    }
    bad = as_u64_mask(a, &s0) < 0 || as_u64_mask(b, &s1) < 0;
    Py_DECREF(a);
    Py_DECREF(b);
    if (bad)
        return NULL;
    set_words(&self->st, s0, s1);
    Py_RETURN_NONE;
}

static PyObject *
Prng_copy(PrngObject *self, PyObject *Py_UNUSED(ignored))
{
    PrngObject *obj = (PrngObject *)Py_TYPE(self)->tp_alloc(Py_TYPE(self), 0);

    if (obj == NULL)
        return NULL;
    obj->st = self->st;
    return (PyObject *)obj;
}

/* Pickle as from_words(s0, s1). */
static PyObject *
Prng_reduce(PrngObject *self, PyObject *Py_UNUSED(ignored))
{
    PyObject *ctor = PyObject_GetAttrString((PyObject *)Py_TYPE(self), "from_words");
    PyObject *res;

    if (ctor == NULL)
        return NULL;
    res = Py_BuildValue("(N(KK))", ctor, (unsigned long long)self->st.s0,
                        (unsigned long long)self->st.s1);
    return res;
}

static PyObject *
Prng_uint64(PrngObject *self, PyObject *Py_UNUSED(ignored))
{
    return PyLong_FromUnsignedLongLong(next64(&self->st));
}

static PyObject *
Prng_int64(PrngObject *self, PyObject *Py_UNUSED(ignored))
{
    return PyLong_FromLongLong((long long)(int64_t)next64(&self->st));
}

static PyObject *
Prng_uint32(PrngObject *self, PyObject *Py_UNUSED(ignored))
{
    return PyLong_FromUnsignedLongLong(next64(&self->st) >> 32);
}

static PyObject *
Prng_bool(PrngObject *self, PyObject *Py_UNUSED(ignored))
{
    return PyBool_FromLong((long)(next64(&self->st) >> 63));
}

PyDoc_STRVAR(uint64_range_doc,
             "uint64_range(rmin, rmax)\n--\n\n"
             "pg_prng_uint64_range: uniform in [rmin, rmax]; both are uint64s.");

static PyObject *
Prng_uint64_range(PrngObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    uint64_t lo, hi;

    if (!check_nargs("uint64_range", nargs, 2))
        return NULL;
    if (as_u64(args[0], &lo) < 0 || as_u64(args[1], &hi) < 0)
        return NULL;
    if (hi <= lo) {
        Py_INCREF(args[0]);
        return args[0];
    }
    return PyLong_FromUnsignedLongLong(lo + draw_upto(&self->st, hi - lo));
}

PyDoc_STRVAR(int64_range_doc,
             "int64_range(rmin, rmax)\n--\n\n"
             "pgbench's getrand: uniform in [rmin, rmax]; both are int64s.");

static PyObject *
Prng_int64_range(PrngObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    int64_t lo, hi;
    uint64_t v;

    if (!check_nargs("int64_range", nargs, 2))
        return NULL;
    if (as_i64(args[0], &lo) < 0 || as_i64(args[1], &hi) < 0)
        return NULL;
    if (hi <= lo) {
        Py_INCREF(args[0]);
        return args[0];
    }
    /* unsigned arithmetic: the span of two int64s always fits a uint64,
     * and the sum lands back inside [lo, hi] */
    v = draw_upto(&self->st, (uint64_t)hi - (uint64_t)lo);
    return PyLong_FromLongLong((long long)(int64_t)((uint64_t)lo + v));
}

static PyObject *
Prng_double(PrngObject *self, PyObject *Py_UNUSED(ignored))
{
    return PyFloat_FromDouble(draw_double(&self->st));
}

static PyObject *
Prng_double_normal(PrngObject *self, PyObject *Py_UNUSED(ignored))
{
    double u1 = 1.0 - draw_double(&self->st);
    double u2 = 1.0 - draw_double(&self->st);
    double r = sqrt(-2.0 * log(u1));

    return PyFloat_FromDouble(r * sin(TWO_PI * u2));
}

static PyObject *
Prng_get_word(PrngObject *self, void *which)
{
    return PyLong_FromUnsignedLongLong(which ? self->st.s1 : self->st.s0);
}

static int
Prng_set_word(PrngObject *self, PyObject *value, void *which)
{
    uint64_t v;

    if (value == NULL) {
        PyErr_SetString(PyExc_AttributeError, "cannot delete a state word");
        return -1;
    }
    if (as_u64(value, &v) < 0)
        return -1;
    if (which)
        self->st.s1 = v;
    else
        self->st.s0 = v;
    return 0;
}

static PyObject *
Prng_richcompare(PyObject *a, PyObject *b, int op)
{
    int eq;

    if (!Prng_Check(a) || !Prng_Check(b) || (op != Py_EQ && op != Py_NE))
        Py_RETURN_NOTIMPLEMENTED;
    eq = ((PrngObject *)a)->st.s0 == ((PrngObject *)b)->st.s0 &&
         ((PrngObject *)a)->st.s1 == ((PrngObject *)b)->st.s1;
    return PyBool_FromLong(op == Py_EQ ? eq : !eq);
}

static PyObject *
Prng_repr(PrngObject *self)
{
    char buf[80];

    snprintf(buf, sizeof buf, "PgPrng.from_words(0x%016llx, 0x%016llx)",
             (unsigned long long)self->st.s0, (unsigned long long)self->st.s1);
    return PyUnicode_FromString(buf);
}

static PyMethodDef Prng_methods[] = {
    {"seed", (PyCFunction)Prng_seed, METH_O, seed_doc},
    {"from_words", (PyCFunction)(void (*)(void))Prng_from_words,
     METH_FASTCALL | METH_CLASS, from_words_doc},
    {"getstate", (PyCFunction)Prng_getstate, METH_NOARGS,
     "The two state words (s0, s1)."},
    {"setstate", (PyCFunction)Prng_setstate, METH_O,
     "Restore words saved by getstate() (the all-zero fix applies)."},
    {"copy", (PyCFunction)Prng_copy, METH_NOARGS, "An independent twin."},
    {"__copy__", (PyCFunction)Prng_copy, METH_NOARGS, NULL},
    {"__reduce__", (PyCFunction)Prng_reduce, METH_NOARGS, NULL},
    {"uint64", (PyCFunction)Prng_uint64, METH_NOARGS,
     "pg_prng_uint64: the next raw 64-bit output."},
    {"int64", (PyCFunction)Prng_int64, METH_NOARGS,
     "pg_prng_int64: the next output as a signed int64."},
    {"uint32", (PyCFunction)Prng_uint32, METH_NOARGS,
     "pg_prng_uint32: the upper 32 bits of the next output."},
    {"bool", (PyCFunction)Prng_bool, METH_NOARGS,
     "pg_prng_bool: the top bit of the next output."},
    {"uint64_range", (PyCFunction)(void (*)(void))Prng_uint64_range,
     METH_FASTCALL, uint64_range_doc},
    {"int64_range", (PyCFunction)(void (*)(void))Prng_int64_range,
     METH_FASTCALL, int64_range_doc},
    {"double", (PyCFunction)Prng_double, METH_NOARGS,
     "pg_prng_double: uniform in [0, 1) from the top 52 bits."},
    {"double_normal", (PyCFunction)Prng_double_normal, METH_NOARGS,
     "pg_prng_double_normal: one Box-Muller standard normal."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Prng_getset[] = {
    {"s0", (getter)Prng_get_word, (setter)Prng_set_word, "first state word",
     NULL},
    {"s1", (getter)Prng_get_word, (setter)Prng_set_word, "second state word",
     (void *)1},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject PrngType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pgsurge._speedups.PgPrng",
    .tp_basicsize = sizeof(PrngObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "PgPrng(seed=0)\n--\n\n"
              "One pg_prng state (xoroshiro128**), compiled; see "
              "pgsurge.prng.PurePgPrng.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Prng_init,
    .tp_repr = (reprfunc)Prng_repr,
    .tp_hash = PyObject_HashNotImplemented,
    .tp_richcompare = Prng_richcompare,
    .tp_methods = Prng_methods,
    .tp_getset = Prng_getset,
};

/* ---------------------------------------------------------------------- */
/* Hashes and permute                                                     */

static PyObject *
hash_fnv1a(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    uint64_t v, seed, h;
    int i;

    if (!check_nargs("hash_fnv1a", nargs, 2))
        return NULL;
    if (as_u64_mask(args[0], &v) < 0 || as_u64_mask(args[1], &seed) < 0)
        return NULL;
    h = FNV_OFFSET_BASIS ^ seed;
    for (i = 0; i < 8; i++) {
        h = (h ^ (v & 0xFF)) * FNV_PRIME;
        v >>= 8;
    }
    return PyLong_FromLongLong((long long)(int64_t)h);
}

static PyObject *
hash_murmur2(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    uint64_t v, seed, h, k;

    if (!check_nargs("hash_murmur2", nargs, 2))
        return NULL;
    if (as_u64_mask(args[0], &v) < 0 || as_u64_mask(args[1], &seed) < 0)
        return NULL;
    h = seed ^ (MM2_MUL * 8);
    k = v * MM2_MUL;
    k ^= k >> MM2_ROT;
    k *= MM2_MUL;
    h = (h ^ k) * MM2_MUL;
    h ^= h >> MM2_ROT;
    h *= MM2_MUL;
    h ^= h >> MM2_ROT;
    return PyLong_FromLongLong((long long)(int64_t)h);
}

/* One half-round of permute on x (x <= mask): odd multiply, XOR, then a
 * one-bit left rotation within the mask's width. */
static inline uint64_t
scramble(uint64_t x, uint64_t mul, uint64_t xr, uint64_t mask, int top)
{
    x = ((x * mul) ^ xr) & mask;
    return ((x << 1) & mask) | (x >> top);
}

static PyObject *
permute(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    uint64_t val, seed, size, v, mask, last, m1, r1, m2, r2, t;
    int64_t isize;
    int masklen, top, round;
    state_t st;

    if (!check_nargs("permute", nargs, 3))
        return NULL;
    if (as_u64_mask(args[0], &val) < 0 || as_i64(args[1], &isize) < 0 ||
        as_u64_mask(args[2], &seed) < 0)
        return NULL;
    if (isize < 2)
        return PyLong_FromLong(0);
    size = (uint64_t)isize;
    seed_state(&st, seed);
    v = val % size;
    masklen = bit_length64(size) - 1;
    mask = (UINT64_C(1) << masklen) - 1;
    top = masklen - 1;
    last = size - 1;
    for (round = 0; round < 6; round++) {
        m1 = (next64(&st) & mask) | 1;
        r1 = next64(&st) & mask;
        if (v <= mask)
            v = scramble(v, m1, r1, mask, top);
        m2 = (next64(&st) & mask) | 1;
        r2 = next64(&st) & mask;
        t = last - v;
        if (t <= mask)
            v = last - scramble(t, m2, r2, mask, top);
        /* a random offset in [0, size - 1]; both terms < 2**63, no wrap */
        v = (v + draw_upto(&st, last)) % size;
    }
    return PyLong_FromUnsignedLongLong(v);
}

/* Two process calls for pgsurge.engine.pool, which otherwise reaches them
 * through ctypes: the ctypes package (its classes, a CDLL's own function
 * pointer class) would be memory in every process of a run. */

/* die_with_parent(signum): prctl(PR_SET_PDEATHSIG); False where there is
 * no such call. */
static PyObject *
die_with_parent(PyObject *module, PyObject *arg)
{
    long signum = PyLong_AsLong(arg);

    if (signum == -1 && PyErr_Occurred())
        return NULL;
#ifdef __linux__
    if (prctl(PR_SET_PDEATHSIG, (unsigned long)signum, 0, 0, 0) < 0)
        return PyErr_SetFromErrno(PyExc_OSError);
    Py_RETURN_TRUE;
#else
    Py_RETURN_FALSE;
#endif
}

/* trim_heap(): glibc's malloc_trim(0); False where malloc is not glibc's. */
static PyObject *
trim_heap(PyObject *module, PyObject *unused)
{
#ifdef __GLIBC__
    malloc_trim(0);
    Py_RETURN_TRUE;
#else
    Py_RETURN_FALSE;
#endif
}

/* compile_source(source, filename, mode): what compile(source, filename,
 * mode, dont_inherit=True) gives for a str source and mode "exec" or
 * "eval", for pgsurge._native.compile_source. The builtin first asks
 * whether source is an ast object (PyAST_Check), and the first such
 * question in a process makes all of the ast module's node types: some
 * 200 KiB of every run (issue 25), which never sees an ast object. The
 * compiler itself does without them. */
static PyObject *
compile_source(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    PyCompilerFlags flags = {.cf_flags = PyCF_SOURCE_IS_UTF8 | PyCF_IGNORE_COOKIE,
                             .cf_feature_version = PY_MINOR_VERSION};
    const char *text, *mode;
    Py_ssize_t size;
    int start;

    if (nargs != 3 || !PyUnicode_Check(args[0]) || !PyUnicode_Check(args[1]) ||
        !PyUnicode_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError,
                        "compile_source(source: str, filename: str, mode: str)");
        return NULL;
    }
    mode = PyUnicode_AsUTF8(args[2]);
    if (mode == NULL)
        return NULL;
    if (strcmp(mode, "exec") == 0)
        start = Py_file_input;
    else if (strcmp(mode, "eval") == 0)
        start = Py_eval_input;
    else {
        PyErr_SetString(PyExc_ValueError, "compile_source() mode must be 'exec' or 'eval'");
        return NULL;
    }
    text = PyUnicode_AsUTF8AndSize(args[0], &size);
    if (text == NULL)
        return NULL;
    if (strlen(text) != (size_t)size) {
        /* the builtin's error for the same source */
        PyErr_SetString(PyExc_ValueError, "source code string cannot contain null bytes");
        return NULL;
    }
    return Py_CompileStringObject(text, args[1], start, &flags, -1);
}

static PyMethodDef module_methods[] = {
    {"die_with_parent", (PyCFunction)die_with_parent, METH_O,
     "die_with_parent(signum): the kernel sends signum to this process when "
     "its parent dies (Linux's PR_SET_PDEATHSIG); False where unsupported."},
    {"trim_heap", (PyCFunction)trim_heap, METH_NOARGS,
     "trim_heap(): hand malloc's free memory back to the kernel (glibc's "
     "malloc_trim); False where malloc is not glibc's."},
    {"compile_source", (PyCFunction)(void (*)(void))compile_source, METH_FASTCALL,
     "compile_source(source, filename, mode): compile(source, filename, mode, "
     "dont_inherit=True) of a str in mode 'exec' or 'eval', without making "
     "the ast module's node types."},
    {"hash_fnv1a", (PyCFunction)(void (*)(void))hash_fnv1a, METH_FASTCALL,
     "hash_fnv1a(val, seed): FNV-1a over the 8 bytes of val."},
    {"hash_murmur2", (PyCFunction)(void (*)(void))hash_murmur2, METH_FASTCALL,
     "hash_murmur2(val, seed): MurmurHash64A of one 8-byte block."},
    {"permute", (PyCFunction)(void (*)(void))permute, METH_FASTCALL,
     "permute(val, size, seed): pgbench's permutation of [0, size); size is "
     "an int64."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef speedups_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "pgsurge._speedups",
    .m_doc = "Optional compiled twins of pgsurge's uint64 hot spots "
             "(pg_prng, hashes, permute).",
    .m_size = -1,
    .m_methods = module_methods,
};


/* ---------------------------------------------------------------------- */
/* A Python workload's hot calls (pgsurge.workloads.api)                   */

/* ContextBase: the base of workloads.api.Context when built. Its
 * random(lo, hi) and random_uniform(lo, hi) are C methods of the class,
 * not attributes of each instance: ``ctx.random(...)`` is then a method
 * call the interpreter specialises (no lookup in the instance's dict, no
 * Python frame). Two ints with lo <= hi < lo + INT64_MAX draw from the
 * PgPrng given to _fast_rng() as int64_range does (Context._random's own
 * fast path); anything else, or without such a PgPrng, is
 * self._random(*args, **kwargs), Context's Python code, which gives its
 * results and its errors. */
typedef struct {
    PyObject_HEAD
    PrngObject *rng; /* NULL: every call is self._random's */
} ContextBaseObject;

static PyObject *s_random_fallback;

static PyObject *
ContextBase_random(ContextBaseObject *self, PyObject *const *args, Py_ssize_t nargs,
                   PyObject *kwnames)
{
    long long lo, hi;
    int o1, o2;
    uint64_t v;
    PyObject *fallback, *out;

    if (self->rng != NULL && nargs == 2 && kwnames == NULL && PyLong_CheckExact(args[0]) &&
        PyLong_CheckExact(args[1])) {
        lo = PyLong_AsLongLongAndOverflow(args[0], &o1);
        hi = PyLong_AsLongLongAndOverflow(args[1], &o2);
        if (!o1 && !o2 && !(lo == -1 && PyErr_Occurred()) &&
            !(hi == -1 && PyErr_Occurred()) && lo <= hi &&
            (uint64_t)hi - (uint64_t)lo < (uint64_t)INT64_MAX) {
            if (hi == lo)
                return PyLong_FromLongLong(lo);
            v = draw_upto(&self->rng->st, (uint64_t)hi - (uint64_t)lo);
            return PyLong_FromLongLong((long long)(int64_t)((uint64_t)lo + v));
        }
        PyErr_Clear();
    }
    fallback = PyObject_GetAttr((PyObject *)self, s_random_fallback);
    if (fallback == NULL)
        return NULL;
    out = PyObject_Vectorcall(fallback, args, (size_t)nargs, kwnames);
    Py_DECREF(fallback);
    return out;
}

/* _fast_rng(rng): draw from rng in C when it is this module's PgPrng */
static PyObject *
ContextBase_fast_rng(ContextBaseObject *self, PyObject *rng)
{
    if (Py_IS_TYPE(rng, &PrngType))
        Py_XSETREF(self->rng, (PrngObject *)Py_NewRef(rng));
    else
        Py_CLEAR(self->rng);
    Py_RETURN_NONE;
}

static int
ContextBase_traverse(ContextBaseObject *self, visitproc visit, void *arg)
{
    Py_VISIT(self->rng);
    return 0;
}

static int
ContextBase_clear(ContextBaseObject *self)
{
    Py_CLEAR(self->rng);
    return 0;
}

static void
ContextBase_dealloc(ContextBaseObject *self)
{
    PyObject_GC_UnTrack(self);
    ContextBase_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef ContextBase_methods[] = {
    {"random", (PyCFunction)(void (*)(void))ContextBase_random, METH_FASTCALL | METH_KEYWORDS,
     "random(lo, hi): uniform in [lo, hi]."},
    {"random_uniform", (PyCFunction)(void (*)(void))ContextBase_random,
     METH_FASTCALL | METH_KEYWORDS, "random_uniform(lo, hi): random(lo, hi)."},
    {"_fast_rng", (PyCFunction)ContextBase_fast_rng, METH_O,
     "Draw from this PgPrng in C (another PRNG: Context._random)."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ContextBaseType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "pgsurge._speedups.ContextBase",
    .tp_basicsize = sizeof(ContextBaseObject),
    .tp_dealloc = (destructor)ContextBase_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The base of a workload's Context: random(lo, hi) in C.",
    .tp_traverse = (traverseproc)ContextBase_traverse,
    .tp_clear = (inquiry)ContextBase_clear,
    .tp_methods = ContextBase_methods,
    .tp_new = PyType_GenericNew,
};

/* StatementCall: the base of workloads.api.Statement, whose call makes
 * the (statement, args) tuple a transaction yields: the call's own
 * argument tuple, its length checked against nparams (a wrong count:
 * self._arity_error(count), Python's message) */
typedef struct {
    PyObject_HEAD
    Py_ssize_t nparams;
} StatementCallObject;

static PyObject *
StatementCall_call(StatementCallObject *self, PyObject *args, PyObject *kwargs)
{
    if (kwargs != NULL && PyDict_GET_SIZE(kwargs) != 0) {
        PyErr_SetString(PyExc_TypeError, "a statement takes no keyword arguments");
        return NULL;
    }
    if (PyTuple_GET_SIZE(args) != self->nparams)
        return PyObject_CallMethod((PyObject *)self, "_arity_error", "n",
                                   PyTuple_GET_SIZE(args));
    return PyTuple_Pack(2, (PyObject *)self, args);
}

static PyMemberDef StatementCall_members[] = {
    {"nparams", T_PYSSIZET, offsetof(StatementCallObject, nparams), 0,
     "the number of $n parameters"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject StatementCallType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "pgsurge._speedups.StatementCall",
    .tp_basicsize = sizeof(StatementCallObject),
    .tp_call = (ternaryfunc)StatementCall_call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "The base of a workload's Statement: calling it makes (self, args).",
    .tp_members = StatementCall_members,
    .tp_new = PyType_GenericNew,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    PyObject *m;

    if (PyType_Ready(&PrngType) < 0)
        return NULL;
    m = PyModule_Create(&speedups_module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&PrngType);
    if (PyModule_AddObject(m, "PgPrng", (PyObject *)&PrngType) < 0) {
        Py_DECREF(&PrngType);
        Py_DECREF(m);
        return NULL;
    }
    s_random_fallback = PyUnicode_InternFromString("_random");
    if (s_random_fallback == NULL || PyType_Ready(&ContextBaseType) < 0 ||
        PyType_Ready(&StatementCallType) < 0 ||
        PyModule_AddObjectRef(m, "ContextBase", (PyObject *)&ContextBaseType) < 0 ||
        PyModule_AddObjectRef(m, "StatementCall", (PyObject *)&StatementCallType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    if (PyModule_AddIntConstant(m, "API_VERSION", SPEEDUPS_API) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}

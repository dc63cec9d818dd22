/*
 * pgsurge._fastloop: scripts with logic -- expressions (\set, \if,
 * \elif) and \gset/\aset.
 *
 * An expression is the program pgsurge.engine.fastexpr compiled: (code,
 * argument) pairs run on a small stack of typed values (NULL, boolean,
 * int64, double). fl_eval computes exactly what pgsurge.script.values and
 * functions compute -- pgbench's int/double promotion, its coercions, the
 * random functions' draws from the client's stream -- or says that it
 * cannot (1): an overflow, a division by zero, a coercion pgbench refuses,
 * a bad random range or parameter, a variable whose value C does not hold
 * (a string, an undefined variable). The caller then puts the client's
 * PRNG back and hands the client to Python at the start of the command,
 * which evaluates it again and gives pgbench's message.
 *
 * fl_wait_gset reads a \gset/\aset command's results as sql.read_results
 * does (the lookahead ``pending`` result, the last row stored), storing a
 * value that is an int written canonically into the variable's slot, and
 * any other value, or a variable C has no slot for, into the client's
 * variables as Python does (Engine.gset for names C does not know).
 */

#include "_fastloop.h"

/* pgsurge.engine.fastexpr's op codes (exported by fl_add_expr_codes and
 * compared with fastexpr.CODES and POPS when the module is loaded) */
#define FL_EXPR_CODES(X)                                                                  \
    X(X_CONST, 0, 0)                                                                      \
    X(X_VAR, 1, 0)                                                                        \
    X(X_ADD, 2, 2)                                                                        \
    X(X_SUB, 3, 2)                                                                        \
    X(X_MUL, 4, 2)                                                                        \
    X(X_DIV, 5, 2)                                                                        \
    X(X_MOD, 6, 2)                                                                        \
    X(X_EQ, 7, 2)                                                                         \
    X(X_NE, 8, 2)                                                                         \
    X(X_LT, 9, 2)                                                                         \
    X(X_LE, 10, 2)                                                                        \
    X(X_BAND, 11, 2)                                                                      \
    X(X_BOR, 12, 2)                                                                       \
    X(X_BXOR, 13, 2)                                                                      \
    X(X_SHL, 14, 2)                                                                       \
    X(X_SHR, 15, 2)                                                                       \
    X(X_NOT, 16, 1)                                                                       \
    X(X_JFALSE, 17, 1)                                                                    \
    X(X_JTRUE, 18, 1)                                                                     \
    X(X_ABS, 19, 1)                                                                       \
    X(X_LEAST, 20, -1)                                                                    \
    X(X_GREATEST, 21, -1)                                                                 \
    X(X_RANDOM, 22, 2)                                                                    \
    X(X_MURMUR2, 23, 2)                                                                   \
    X(X_FNV1A, 24, 2)                                                                     \
    X(X_PERMUTE, 25, 3)                                                                   \
    X(X_NULL, 26, 0)                                                                      \
    X(X_BOOL, 27, 0)                                                                      \
    X(X_DOUBLE, 28, 0)                                                                    \
    X(X_INT, 29, 1)                                                                       \
    X(X_TODOUBLE, 30, 1)                                                                  \
    X(X_SQRT, 31, 1)                                                                      \
    X(X_LN, 32, 1)                                                                        \
    X(X_EXP, 33, 1)                                                                       \
    X(X_POW, 34, 2)                                                                       \
    X(X_IS, 35, 2)                                                                        \
    X(X_CHKBOOL, 36, 1)                                                                   \
    X(X_JUMP, 37, 0)                                                                      \
    X(X_JNOTTRUE, 38, 1)                                                                  \
    X(X_REXP, 39, 3)                                                                      \
    X(X_RGAUSS, 40, 3)                                                                    \
    X(X_RZIPF, 41, 3)                                                                     \
    X(X_FAIL, 42, 0)

#define FL_CODE_ENUM(name, value, npops) name = value,
enum { FL_EXPR_CODES(FL_CODE_ENUM) X_LAST = 42 };

/* what each code pops (-1: its argument says; a jump that keeps the value
 * it tests pops it on the path that goes on) */
#define FL_CODE_POPS(name, value, npops) npops,
static const signed char pops[X_LAST + 1] = {FL_EXPR_CODES(FL_CODE_POPS)};

int
fl_add_expr_codes(PyObject *module)
{
    PyObject *t;
    int i;

#define FL_CODE_ADD(name, value, npops)                                                   \
    if (PyModule_AddIntConstant(module, #name, value) < 0)                                \
        return -1;
    FL_EXPR_CODES(FL_CODE_ADD)
#undef FL_CODE_ADD
    t = PyTuple_New(X_LAST + 1);
    if (t == NULL)
        return -1;
    for (i = 0; i <= X_LAST; i++) {
        PyObject *n = PyLong_FromLong(pops[i]);

        if (n == NULL) {
            Py_DECREF(t);
            return -1;
        }
        PyTuple_SET_ITEM(t, i, n);
    }
    return PyModule_AddObject(module, "EXPR_POPS", t) < 0 ? (Py_DECREF(t), -1) : 0;
}

/* The program is checked once, when the plan is read: every code known,
 * jumps forward and inside it, the stack's depth the same on every path
 * into an instruction, never below what it pops nor above MAX_STACK, and
 * one value left at the end. fl_eval relies on it. */
int
fl_parse_code(PyObject *spec, fl_op *op)
{
    Py_ssize_t i, n;
    int depth = 0, *at = NULL;

    if (!PyTuple_Check(spec) || PyTuple_GET_SIZE(spec) % 2 || PyTuple_GET_SIZE(spec) == 0)
        goto bad;
    n = PyTuple_GET_SIZE(spec) / 2;
    op->code = PyMem_New(fl_code, n);
    at = PyMem_New(int, n + 1);
    if (op->code == NULL || at == NULL) {
        PyErr_NoMemory();
        goto bad;
    }
    for (i = 0; i <= n; i++)
        at[i] = -1;
    op->ncode = (int)n;
    for (i = 0; i < n; i++) {
        fl_code *x = &op->code[i];
        int in;

        x->code = (int)PyLong_AsLong(PyTuple_GET_ITEM(spec, 2 * i));
        x->arg = PyLong_AsLongLong(PyTuple_GET_ITEM(spec, 2 * i + 1));
        if (PyErr_Occurred())
            goto bad;
        if (x->code < 0 || x->code > X_LAST)
            goto bad;
        /* the depth here: from the line before, or from the jumps to it */
        if (at[i] >= 0) {
            if (depth >= 0 && depth != at[i])
                goto bad;
            depth = at[i];
        }
        if (depth < 0)
            goto bad; /* nothing reaches it */
        in = pops[x->code] < 0 ? (int)x->arg : pops[x->code];
        if ((x->code == X_LEAST || x->code == X_GREATEST) && (x->arg < 1 || x->arg > MAX_STACK))
            goto bad;
        if (x->code == X_VAR && x->arg < 0)
            goto bad;
        if (x->code == X_BOOL && x->arg != 0 && x->arg != 1)
            goto bad;
        if (depth < in)
            goto bad;
        switch (x->code) {
        case X_JFALSE:
        case X_JTRUE:
        case X_JNOTTRUE:
        case X_JUMP: {
            /* the depth at the target */
            int there = x->code == X_JNOTTRUE ? depth - 1 : depth;

            if (x->arg <= i || x->arg > n)
                goto bad;
            if (at[x->arg] >= 0 && at[x->arg] != there)
                goto bad;
            at[x->arg] = there;
            depth = x->code == X_JUMP ? -1 : depth - 1;
            continue;
        }
        default:
            depth = depth - in + 1;
        }
        if (depth > MAX_STACK)
            goto bad;
    }
    if (at[n] >= 0) {
        if (depth >= 0 && depth != at[n])
            goto bad;
        depth = at[n];
    }
    if (depth != 1)
        goto bad;
    PyMem_Free(at);
    return 0;
bad:
    PyMem_Free(at);
    if (!PyErr_Occurred())
        PyErr_SetString(PyExc_ValueError, "malformed fast loop expression");
    return -1;
}

/* ---------------------------------------------------------------------- */
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
/* Coercions (pgsurge.script.values): 0 done, 1 pgbench refuses           */

/* coerce_to_int: a double rounded half to even (rint, as Python's round),
 * then checked against the int64 range; NaN and the infinities fail */
static inline int
to_int(const fl_value *v, int64_t *out)
{
    if (v->type == FV_INT) {
        *out = v->i;
        return 0;
    }
    if (v->type == FV_DOUBLE) {
        double r = rint(v->d);

        if (!(r >= -9223372036854775808.0 && r < 9223372036854775808.0))
            return 1;
        *out = (int64_t)r;
        return 0;
    }
    return 1;
}

static inline int
to_double(const fl_value *v, double *out)
{
    if (v->type == FV_DOUBLE) {
        *out = v->d;
        return 0;
    }
    if (v->type == FV_INT) {
        *out = (double)v->i;
        return 0;
    }
    return 1;
}

/* C's (int64) of a double on x86-64 (cnum.double_to_int64): truncation,
 * INT64_MIN out of range */
static inline int64_t
double_to_int64(double d)
{
    if (!(d >= -9223372036854775808.0 && d < 9223372036854775808.0))
        return INT64_MIN;
    return (int64_t)d;
}

static inline void
set_int(fl_value *v, int64_t i)
{
    v->type = FV_INT;
    v->i = i;
}

static inline void
set_double(fl_value *v, double d)
{
    v->type = FV_DOUBLE;
    v->d = d;
}

static inline void
set_bool(fl_value *v, int b)
{
    v->type = FV_BOOL;
    v->i = b != 0;
}

/* pg_prng_double: uniform in [0, 1) from the top 52 bits */
static inline double
prng_double(fl_client *c)
{
    return (double)(prng_next(&c->s0, &c->s1) >> 12) * TWO_M52;
}

/* random functions' bounds (functions._range_args) */
static inline int
range_args(const fl_value *a, const fl_value *b, int64_t *lo, int64_t *hi)
{
    if (to_int(a, lo) || to_int(b, hi) || *lo > *hi ||
        (uint64_t)*hi - (uint64_t)*lo >= (uint64_t)INT64_MAX)
        return 1;
    return 0;
}

/* lo + (int64)(width * r), wrapped as the x86 binary does */
static inline int64_t
scaled_draw(int64_t lo, int64_t hi, double r)
{
    double width = (double)(hi - lo + 1);

    return (int64_t)((uint64_t)lo + (uint64_t)double_to_int64(width * r));
}

/* random_exponential, _gaussian, _zipfian of functions.py: the same
 * draws in the same order, the same operations on doubles (the build has
 * no fused multiply-add) */
static int
random_skewed(fl_client *c, int code, const fl_value *a, const fl_value *b,
              const fl_value *p, fl_value *out)
{
    int64_t lo, hi;
    double param;

    if (range_args(a, b, &lo, &hi) || to_double(p, &param))
        return 1;
    if (code == X_REXP) {
        double cut, uniform, r;

        if (param <= 0.0)
            return 1;
        cut = exp(-param);
        uniform = 1.0 - prng_double(c);
        r = -log(cut + (1.0 - cut) * uniform) / param;
        set_int(out, scaled_draw(lo, hi, r));
    } else if (code == X_RGAUSS) {
        double stdev;

        if (param < 2.0)
            return 1;
        do {
            /* pg_prng_double_normal: Box-Muller, the sine branch */
            double u1 = 1.0 - prng_double(c), u2 = 1.0 - prng_double(c);

            stdev = sqrt(-2.0 * log(u1)) * sin(2.0 * M_PI * u2);
        } while (stdev < -param || stdev >= param);
        set_int(out, scaled_draw(lo, hi, (stdev + param) / (param * 2.0)));
    } else {
        /* computeIterativeZipfian: Devroye's rejection method */
        int64_t n = hi - lo + 1;
        double x = 1.0;

        if (!(param >= 1.001 && param <= 1000.0))
            return 1;
        if (n > 1) {
            double bb = pow(2.0, param - 1.0), e = -1.0 / (param - 1.0);
            double s1 = param - 1.0, nf = (double)n;

            for (;;) {
                double u = prng_double(c), v = prng_double(c), t;

                if (u == 0.0)
                    continue;
                x = floor(pow(u, e));
                if (isinf(x))
                    continue;
                t = pow(1.0 + 1.0 / x, s1);
                if (v * x * (t - 1.0) / (bb - 1.0) <= t / bb && x <= nf)
                    break;
            }
        }
        set_int(out, (int64_t)((uint64_t)lo - 1 + (uint64_t)(int64_t)x));
    }
    return 0;
}

/* C's int64 remainder with pgbench's checks (values._imod) */
static inline int
int_mod(int64_t a, int64_t b, int64_t *out)
{
    if (b == 0)
        return 1;
    *out = b == -1 ? 0 : a % b;
    return 0;
}

/* a binary operator of values.py on a, b -> *a */
static int
binary(fl_client *c, int code, fl_value *a, const fl_value *b)
{
    int64_t x, y;
    double dx, dy;

    if (code == X_IS) {
        /* the right side is NULL, TRUE or FALSE (the parser's) */
        if (b->type == FV_NULL)
            set_bool(a, a->type == FV_NULL);
        else
            set_bool(a, a->type == FV_BOOL && b->type == FV_BOOL && a->i == b->i);
        return 0;
    }
    if (a->type == FV_NULL || b->type == FV_NULL) {
        a->type = FV_NULL;
        return 0;
    }
    switch (code) {
    case X_ADD:
    case X_SUB:
    case X_MUL:
    case X_DIV:
    case X_EQ:
    case X_NE:
    case X_LT:
    case X_LE:
        /* a double makes it double; else both must be ints */
        if (a->type == FV_DOUBLE || b->type == FV_DOUBLE) {
            if (to_double(a, &dx) || to_double(b, &dy))
                return 1;
            switch (code) {
            case X_ADD:
                set_double(a, dx + dy);
                break;
            case X_SUB:
                set_double(a, dx - dy);
                break;
            case X_MUL:
                set_double(a, dx * dy);
                break;
            case X_DIV:
                set_double(a, dx / dy); /* IEEE: ±Infinity, NaN */
                break;
            case X_EQ:
                set_bool(a, dx == dy);
                break;
            case X_NE:
                set_bool(a, dx != dy);
                break;
            case X_LT:
                set_bool(a, dx < dy);
                break;
            default:
                set_bool(a, dx <= dy);
            }
            return 0;
        }
        if (a->type != FV_INT || b->type != FV_INT)
            return 1; /* "cannot coerce boolean to int" */
        x = a->i;
        y = b->i;
        switch (code) {
        case X_ADD:
            return __builtin_add_overflow(x, y, &a->i);
        case X_SUB:
            return __builtin_sub_overflow(x, y, &a->i);
        case X_MUL:
            return __builtin_mul_overflow(x, y, &a->i);
        case X_DIV:
            if (y == 0 || (y == -1 && x == INT64_MIN))
                return 1;
            a->i = y == -1 ? -x : x / y;
            return 0;
        case X_EQ:
            set_bool(a, x == y);
            return 0;
        case X_NE:
            set_bool(a, x != y);
            return 0;
        case X_LT:
            set_bool(a, x < y);
            return 0;
        default:
            set_bool(a, x <= y);
            return 0;
        }
    default:
        break;
    }
    /* on ints only, doubles rounded: mod, the bitwise operators, shifts */
    if (to_int(a, &x) || to_int(b, &y))
        return 1;
    a->type = FV_INT;
    switch (code) {
    case X_MOD:
        return int_mod(x, y, &a->i);
    case X_BAND:
        a->i = x & y;
        return 0;
    case X_BOR:
        a->i = x | y;
        return 0;
    case X_BXOR:
        a->i = x ^ y;
        return 0;
    case X_SHL:
        /* x86-64 takes the count modulo 64; the result wraps */
        a->i = (int64_t)((uint64_t)x << (y & 63));
        return 0;
    case X_SHR:
        a->i = x >> (y & 63);
        return 0;
    case X_RANDOM:
        if (x > y || (uint64_t)y - (uint64_t)x >= (uint64_t)INT64_MAX)
            return 1;
        a->i = prng_range(&c->s0, &c->s1, x, y);
        return 0;
    case X_MURMUR2:
        a->i = hash_murmur2((uint64_t)x, (uint64_t)y);
        return 0;
    case X_FNV1A:
        a->i = hash_fnv1a((uint64_t)x, (uint64_t)y);
        return 0;
    default:
        return 1;
    }
}

/* a function of one argument (NULL gives NULL) */
static int
unary(int code, fl_value *a)
{
    int64_t x;
    double d;

    if (a->type == FV_NULL)
        return 0;
    switch (code) {
    case X_NOT:
        if (a->type != FV_BOOL)
            return 1;
        a->i = !a->i;
        return 0;
    case X_ABS:
        if (a->type == FV_INT)
            a->i = a->i < 0 ? (int64_t)(UINT64_C(0) - (uint64_t)a->i) : a->i;
        else if (a->type == FV_DOUBLE)
            a->d = a->d < 0.0 ? -a->d : a->d;
        else
            /* pgbench reads a boolean's union as a double: true is the
             * smallest subnormal */
            set_double(a, a->i ? 4.9406564584124654e-324 : 0.0);
        return 0;
    case X_INT:
        if (to_int(a, &x))
            return 1;
        set_int(a, x);
        return 0;
    default:
        break;
    }
    if (to_double(a, &d))
        return 1;
    switch (code) {
    case X_TODOUBLE:
        break;
    case X_SQRT:
        d = d >= 0.0 || d != d ? sqrt(d) : NAN;
        break;
    case X_LN:
        d = log(d);
        break;
    case X_EXP:
        d = exp(d);
        break;
    default:
        return 1;
    }
    set_double(a, d);
    return 0;
}

/* least/greatest of n values: C's "a > b ? a : b" chain of
 * functions._extremum (the later wins ties, and NaN) */
static int
extremum(fl_value *v, int n, int greatest)
{
    int k, dbl = 0;

    for (k = 0; k < n; k++) {
        if (v[k].type == FV_NULL) {
            v[0].type = FV_NULL;
            return 0;
        }
        dbl |= v[k].type == FV_DOUBLE;
    }
    if (dbl) {
        double e, d;

        if (to_double(&v[0], &e))
            return 1;
        for (k = 1; k < n; k++) {
            if (to_double(&v[k], &d))
                return 1;
            if (!(greatest ? e > d : e < d))
                e = d;
        }
        set_double(&v[0], e);
    } else {
        int64_t e, i;

        if (to_int(&v[0], &e))
            return 1;
        for (k = 1; k < n; k++) {
            if (to_int(&v[k], &i))
                return 1;
            if (!(greatest ? e > i : e < i))
                e = i;
        }
        set_int(&v[0], e);
    }
    return 0;
}

int
fl_var_set_text(fl_value *var, const char *text, Py_ssize_t len)
{
    if (len > INT32_MAX - 1 || memchr(text, '\0', (size_t)len) != NULL) {
        /* pgbench's variables are C strings: Python's */
        var->type = FV_NONE;
        return 0;
    }
    if (len + 1 > var->cap) {
        /* PyMem_Raw: \gset stores text without the GIL */
        char *s = PyMem_RawRealloc(var->s, (size_t)len + 1);

        if (s == NULL)
            return -1;
        var->s = s;
        var->cap = (int32_t)len + 1;
    }
    memcpy(var->s, text, (size_t)len);
    var->s[len] = '\0';
    var->len = (int32_t)len;
    var->type = FV_STR;
    return 0;
}

/* values.parse_lazy of a variable's text, for what it types as C does
 * without doubt: an int written canonically, or a number strtod reads in
 * full (glibc's strtod is pgbench's) that is neither int-shaped, nor
 * subnormal, nor out of range. 1: Python types it (a boolean or NULL
 * word, " 7", "007", an error) */
static int
lazy_value(const fl_value *var, fl_value *out)
{
    const char *s = var->s, *p, *end;
    double d;

    if (fl_canonical_int(s, var->len, &out->i)) {
        out->type = FV_INT;
        return 0;
    }
    if (var->len == 0 || !((s[0] >= '0' && s[0] <= '9') || s[0] == '+' || s[0] == '-' ||
                           s[0] == '.'))
        return 1;
    /* int-shaped (a sign, then only digits): Python's int rules */
    p = s + (s[0] == '+' || s[0] == '-');
    while (*p >= '0' && *p <= '9')
        p++;
    if (*p == '\0')
        return 1;
    errno = 0;
    d = strtod(s, (char **)&end);
    if (errno != 0 || end != s + var->len || (d != 0.0 && isfinite(d) && fabs(d) < DBL_MIN))
        return 1;
    set_double(out, d);
    return 0;
}

int
fl_eval(fl_client *c, const fl_code *code, int n, fl_value *out)
{
    fl_value st[MAX_STACK + 1];
    int sp = 0, pc = 0;

    while (pc < n) {
        const fl_code *x = &code[pc++];
        fl_value *top;

        switch (x->code) {
        case X_CONST:
            set_int(&st[sp++], x->arg);
            continue;
        case X_NULL:
            st[sp++].type = FV_NULL;
            continue;
        case X_BOOL:
            set_bool(&st[sp++], (int)x->arg);
            continue;
        case X_DOUBLE: {
            double d;

            memcpy(&d, &x->arg, sizeof d);
            set_double(&st[sp++], d);
            continue;
        }
        case X_VAR: {
            const fl_value *v = &c->vars[x->arg];

            if (v->type == FV_STR) {
                if (lazy_value(v, &st[sp]))
                    return 1;
            } else if (v->type == FV_NONE)
                return 1; /* undefined: Python's error */
            else
                st[sp] = *v;
            sp++;
            continue;
        }
        case X_JFALSE:
        case X_JTRUE:
            /* and/or: NULL, or the deciding boolean, is the result */
            top = &st[sp - 1];
            if (top->type == FV_NULL || (top->type == FV_BOOL &&
                                         top->i == (x->code == X_JTRUE)))
                pc = (int)x->arg;
            else if (top->type == FV_BOOL)
                sp--;
            else
                return 1;
            continue;
        case X_CHKBOOL:
            if (st[sp - 1].type != FV_NULL && st[sp - 1].type != FV_BOOL)
                return 1;
            continue;
        case X_JNOTTRUE:
            sp--;
            if (!fl_truth(&st[sp]))
                pc = (int)x->arg;
            continue;
        case X_JUMP:
            pc = (int)x->arg;
            continue;
        case X_FAIL:
            return 1;
        case X_NOT:
        case X_ABS:
        case X_INT:
        case X_TODOUBLE:
        case X_SQRT:
        case X_LN:
        case X_EXP:
            if (unary(x->code, &st[sp - 1]))
                return 1;
            continue;
        case X_LEAST:
        case X_GREATEST:
            sp -= (int)x->arg;
            if (extremum(&st[sp], (int)x->arg, x->code == X_GREATEST))
                return 1;
            sp++;
            continue;
        case X_POW: {
            double a, b;

            sp--;
            if (st[sp - 1].type == FV_NULL || st[sp].type == FV_NULL) {
                st[sp - 1].type = FV_NULL;
                continue;
            }
            if (to_double(&st[sp - 1], &a) || to_double(&st[sp], &b))
                return 1;
            set_double(&st[sp - 1], pow(a, b));
            continue;
        }
        case X_PERMUTE: {
            int64_t v, size, seed;

            sp -= 2;
            top = &st[sp - 1];
            if (top[0].type == FV_NULL || top[1].type == FV_NULL || top[2].type == FV_NULL) {
                top->type = FV_NULL;
                continue;
            }
            if (to_int(&top[0], &v) || to_int(&top[1], &size) || to_int(&top[2], &seed) ||
                size <= 0)
                return 1; /* "permute size parameter must be greater than zero" */
            set_int(top, permute((uint64_t)v, size, (uint64_t)seed));
            continue;
        }
        case X_REXP:
        case X_RGAUSS:
        case X_RZIPF:
            sp -= 2;
            top = &st[sp - 1];
            if (top[0].type == FV_NULL || top[1].type == FV_NULL || top[2].type == FV_NULL) {
                top->type = FV_NULL;
                continue;
            }
            if (random_skewed(c, x->code, &top[0], &top[1], &top[2], top))
                return 1;
            continue;
        default:
            break;
        }
        /* binary operators and two-argument functions */
        sp--;
        if (binary(c, x->code, &st[sp - 1], &st[sp]))
            return 1;
    }
    *out = st[0];
    out->assigned = 0;
    return 0;
}

/* values.to_text: ints in decimal, doubles as %.15g with NaN and the
 * infinities spelled out, booleans as true/false, NULL as NULL */
const char *
fl_value_text(const fl_value *v, char *buf)
{
    switch (v->type) {
    case FV_INT:
        *put_int(buf, v->i) = '\0';
        return buf;
    case FV_DOUBLE:
        if (isnan(v->d))
            return "NaN";
        if (isinf(v->d))
            return v->d > 0 ? "Infinity" : "-Infinity";
        snprintf(buf, INT_TEXT, "%.15g", v->d);
        return buf;
    case FV_BOOL:
        return v->i ? "true" : "false";
    case FV_NULL:
        return "NULL";
    case FV_STR:
        return v->s;
    default:
        return NULL;
    }
}

/* ---------------------------------------------------------------------- */
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

/* Engine.gset(st, script, command, qrynum, got, context, name, value);
 * takes the GIL */
static int
call_gset_hook(FastLoop *fl, fl_client *c, int q, int got, const char *context,
               PyObject *name, PyObject *value)
{
    PyObject *r;
    int ok;

    fl_py(fl);
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

/* a \gset value into a variable C holds: an int written canonically as
 * an int, any other text as text (typed when read, as Python's str). 1
 * stored; 0 the variable is Python's (text with a NUL); -1 error. Runs
 * without the GIL (but for an error). */
static int
store_var(FastLoop *fl, fl_client *c, fl_value *var, const char *text, Py_ssize_t len)
{
    if (fl_canonical_int(text, len, &var->i))
        var->type = FV_INT;
    else if (fl_var_set_text(var, text, len) < 0)
        return fl_nomem(fl);
    if (var->type == FV_NONE) {
        var->assigned = 0;
        return 0;
    }
    var->assigned = 1;
    c->assigned = 1;
    return 1;
}

/* sql.store_gset of one result: 1 stored, 0 failed (message given),
 * -1 error. Runs without the GIL while each column is one whose slot the
 * op remembers (the common case); takes it for any other. */
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

        if (!pq->getisnull(res, ntuples - 1, col)) {
            text = pq->getvalue(res, ntuples - 1, col);
            len = pq->getlength(res, ntuples - 1, col);
        }
        if (col < GSET_CACHE && fname != NULL && op->colname[col] != NULL &&
            op->colslot[col] >= 0 && strcmp(op->colname[col], fname) == 0) {
            /* the common case: a known column into its slot */
            int done = store_var(fl, c, &c->vars[op->colslot[col]], text, len);

            if (done < 0)
                return -1;
            if (done)
                continue;
        }
        fl_py(fl);
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
            int done = store_var(fl, c, &c->vars[PyLong_AsLong(slot)], text, len);

            if (done != 0) {
                Py_DECREF(name);
                if (done < 0)
                    return -1;
                continue;
            }
        }
        value = PyUnicode_DecodeUTF8(text, len, "surrogateescape");
        if (value == NULL) {
            Py_DECREF(name);
            return -1;
        }
        if (slot != NULL) {
            /* a name C planned for is a valid one: store it as Python does */
            if (vars == NULL && (vars = fl_own_vars(fl, c)) == NULL)
                r = -1;
            else if (PyDict_SetItem(vars, name, value) < 0)
                r = -1;
        } else
            r = call_gset_hook(fl, c, q, 0, context, name, value);
        Py_DECREF(value);
        Py_DECREF(name);
    }
    /* NULL unless set with the GIL held (then still held): no CPython
     * call without it */
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

/* a \gset/\aset failed: Python aborts the client (E_META); takes the GIL */
static int
gset_failed(FastLoop *fl, int index)
{
    PyObject *event;
    int r;

    fl_py(fl);
    event = PyUnicode_FromString("");
    if (event == NULL)
        return -1;
    fl->clients[index].meta_failed = 0;
    r = fl_to_python(fl, index, WAIT_RESULT, event);
    Py_DECREF(event);
    return r;
}

/* runs without the GIL while the results go into variables C holds; a
 * failure, an error result or a column C has no slot for takes it */
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
            PyObject *got;

            fl_py(fl);
            got = Py_BuildValue(
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

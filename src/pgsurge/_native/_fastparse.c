/*
 * pgsurge._fastparse: the common \set, \if and \elif lines parsed in C.
 *
 * pgsurge.script.parser (a precedence climber over pgsurge.script.lexer's
 * tokens) is the reference: it reproduces every message and caret column
 * of pgbench's expression parser. It costs some 30 us per line, which made
 * a script of 10,000 "\set v random(1, 100000 * :scale) + N" lines parse
 * nine times slower than pgbench (issue 11, item 8). This module reads such
 * a line at C speed and builds the very same tree: the same
 * pgsurge.script.ast Const, Var and Call objects, with the same names,
 * argument tuples and columns.
 *
 * It only ever accepts what the Python parser accepts. meta_expr() returns
 * None -- and the caller runs the Python lexer and parser on the line,
 * which report the error exactly as pgbench does -- for:
 *
 *   - any other command (only \set, \if and \elif, in any letter case);
 *   - a line that holds a non-ASCII character or a second backslash
 *     (a continuation "\<newline>", a meta command after the expression):
 *     byte columns and continuations stay the Python lexer's business;
 *   - any lexing or syntax error, an unknown function, a wrong argument
 *     count, an integer or double constant out of range;
 *   - nesting deeper than MAX_DEPTH: far below the point where pgbench's
 *     parser stack overflows ("memory exhausted"), which the Python parser
 *     counts; so no accepted line can be one pgbench rejects for depth.
 *
 * Everything else about a line -- the command name word, the variable
 * word of \set, the first_line text, where SQL scanning resumes -- follows
 * MetaLexer.next_word and MetaLexer.line_text. tests/unit/test_fastparse.py
 * compares both parsers node for node (columns included) with Hypothesis.
 *
 * The AST classes are frozen dataclasses with __slots__: configure() takes
 * them and records the byte offsets of their slots (from their member
 * descriptors), and nodes are made as object.__new__ makes them, with the
 * slots filled in directly -- what pgsurge.script.ast.sql_command does in
 * Python, for the same reason (a frozen dataclass's __init__ is slow).
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define FASTPARSE_API 1

/* expression nesting (recursive expr() calls) beyond which C gives up */
#define MAX_DEPTH 64

/* precedence levels, as in pgsurge.script.parser */
enum { L_OR = 1, L_AND, L_NOT, L_IS, L_CMP, L_BIT, L_ADD, L_MUL, L_UNARY };

typedef enum {
    K_OP,
    K_LPAREN,
    K_RPAREN,
    K_COMMA,
    K_INT,
    K_DOUBLE,
    K_MAXINT_PLUS_ONE,
    K_VARIABLE,
    K_FUNCTION,
    K_NULL,
    K_BOOLEAN,
    K_AND,
    K_OR,
    K_NOT,
    K_IS,
    K_ISNULL,
    K_NOTNULL,
    K_CASE,
    K_WHEN,
    K_THEN,
    K_ELSE,
    K_END,
    K_EOL,
} TokKind;

/* binary operators (and "~", a prefix operator only) */
enum {
    OP_EQ,
    OP_NE,
    OP_NE2, /* != */
    OP_LT,
    OP_LE,
    OP_GT,
    OP_GE,
    OP_BOR,
    OP_BXOR,
    OP_BAND,
    OP_SHL,
    OP_SHR,
    OP_ADD,
    OP_SUB,
    OP_MUL,
    OP_DIV,
    OP_MOD,
    OP_TILDE,
    N_OPS
};

typedef struct {
    int level;
    const char *name; /* the Call's name */
    int swap;         /* operands swapped: a > b is "<"(b, a) */
} BinOp;

static const BinOp BINOPS[N_OPS] = {
    [OP_EQ] = {L_CMP, "=", 0},    [OP_NE] = {L_CMP, "<>", 0},
    [OP_NE2] = {L_CMP, "<>", 0},  [OP_LT] = {L_CMP, "<", 0},
    [OP_LE] = {L_CMP, "<=", 0},   [OP_GT] = {L_CMP, "<", 1},
    [OP_GE] = {L_CMP, "<=", 1},   [OP_BOR] = {L_BIT, "|", 0},
    [OP_BXOR] = {L_BIT, "#", 0},  [OP_BAND] = {L_BIT, "&", 0},
    [OP_SHL] = {L_BIT, "<<", 0},  [OP_SHR] = {L_BIT, ">>", 0},
    [OP_ADD] = {L_ADD, "+", 0},   [OP_SUB] = {L_ADD, "-", 0},
    [OP_MUL] = {L_MUL, "*", 0},   [OP_DIV] = {L_MUL, "/", 0},
    [OP_MOD] = {L_MUL, "mod", 0}, [OP_TILDE] = {0, "#", 0},
};

/* the Call names used by the desugaring, made once (interned) */
enum { N_AND, N_OR, N_NOT, N_IS, N_CASE, N_MINUS, N_XOR, N_NAMES };
static const char *const NAME_TEXT[N_NAMES] = {"and", "or",  "not", "is",
                                               "case", "-", "#"};
static PyObject *op_names[N_OPS];
static PyObject *names[N_NAMES];

/* configure(): the AST classes, their slot offsets, the function table */
static PyTypeObject *const_type, *var_type, *call_type;
static Py_ssize_t off_const_value, off_var_name, off_call_name, off_call_args,
    off_call_column;
/* name -> (low, high or None, seeded) */
static PyObject *functions;
static PyObject *default_seed;
static int configured;

typedef struct {
    TokKind kind;
    Py_ssize_t start; /* offset in the line */
    Py_ssize_t end;
    int op;           /* K_OP */
    long long ival;   /* K_INT; K_BOOLEAN: 0 or 1 */
    double dval;      /* K_DOUBLE */
} Token;

typedef struct {
    const char *s;  /* the line, from its backslash */
    Py_ssize_t n;   /* its length up to the newline or the end of the text */
    Py_ssize_t pos; /* the lexer's position */
    Token tok;      /* the lookahead ... */
    int has_tok;    /* ... when read */
    int depth;
} Parser;

/* ------------------------------------------------------------------------
 * nodes */

/* A node the cyclic garbage collector does not track: a tree is built
 * bottom up from immutable parts (frozen nodes, str, int, float, tuples of
 * nodes), so it cannot be part of a reference cycle, and reference
 * counting frees it. Tracked, the 10,000 trees of a big script were some
 * 150,000 objects that every collection during (and after) the parse
 * walked again: it doubled the parse time. CPython untracks such tuples
 * itself, but only once a collection has looked at them. */
static inline PyObject *
new_node(PyTypeObject *type)
{
    PyObject *node = type->tp_alloc(type, 0);

    if (node != NULL && PyObject_GC_IsTracked(node))
        PyObject_GC_UnTrack(node);
    return node;
}

static inline void
untrack_tuple(PyObject *tuple)
{
    if (PyObject_GC_IsTracked(tuple))
        PyObject_GC_UnTrack(tuple);
}

#define SLOT(obj, off) (*(PyObject **)((char *)(obj) + (off)))

/* Const(value), stealing the reference to value */
static PyObject *
make_const(PyObject *value)
{
    PyObject *node;

    if (value == NULL)
        return NULL;
    node = new_node(const_type);
    if (node == NULL) {
        Py_DECREF(value);
        return NULL;
    }
    SLOT(node, off_const_value) = value;
    return node;
}

static PyObject *
make_var(const char *s, Py_ssize_t len)
{
    PyObject *name = PyUnicode_FromStringAndSize(s, len);
    PyObject *node;

    if (name == NULL)
        return NULL;
    node = new_node(var_type);
    if (node == NULL) {
        Py_DECREF(name);
        return NULL;
    }
    SLOT(node, off_var_name) = name;
    return node;
}

/* Call(name, args, column), stealing the reference to args */
static PyObject *
make_call(PyObject *name, PyObject *args, Py_ssize_t column)
{
    PyObject *col, *node;

    if (args == NULL)
        return NULL;
    col = PyLong_FromSsize_t(column);
    if (col == NULL) {
        Py_DECREF(args);
        return NULL;
    }
    node = new_node(call_type);
    if (node == NULL) {
        Py_DECREF(args);
        Py_DECREF(col);
        return NULL;
    }
    untrack_tuple(args);
    Py_INCREF(name);
    SLOT(node, off_call_name) = name;
    SLOT(node, off_call_args) = args;
    SLOT(node, off_call_column) = col;
    return node;
}

/* Call(name, (a, b), column), stealing a and b (either may be NULL) */
static PyObject *
call2(PyObject *name, PyObject *a, PyObject *b, Py_ssize_t column)
{
    PyObject *args;

    if (a == NULL || b == NULL) {
        Py_XDECREF(a);
        Py_XDECREF(b);
        return NULL;
    }
    args = PyTuple_New(2);
    if (args == NULL) {
        Py_DECREF(a);
        Py_DECREF(b);
        return NULL;
    }
    PyTuple_SET_ITEM(args, 0, a);
    PyTuple_SET_ITEM(args, 1, b);
    return make_call(name, args, column);
}

/* Call(name, (a,), column), stealing a (may be NULL) */
static PyObject *
call1(PyObject *name, PyObject *a, Py_ssize_t column)
{
    PyObject *args;

    if (a == NULL)
        return NULL;
    args = PyTuple_New(1);
    if (args == NULL) {
        Py_DECREF(a);
        return NULL;
    }
    PyTuple_SET_ITEM(args, 0, a);
    return make_call(name, args, column);
}

/* ------------------------------------------------------------------------
 * the lexer: lexer.MetaLexer.next_token on an ASCII line without
 * backslashes. Returns 0, or -1 at a lexing error (the caller gives up). */

static inline int
is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v';
}

static inline int
is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static inline int
is_ident_start(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static inline int
is_ident_char(char c)
{
    return is_ident_start(c) || is_digit(c);
}

/* does s[0..len) equal the lower-case keyword kw, ignoring ASCII case? */
static int
word_is(const char *s, Py_ssize_t len, const char *kw)
{
    Py_ssize_t i;

    for (i = 0; i < len; i++) {
        char c = s[i];
        if (c >= 'A' && c <= 'Z')
            c = (char)(c - 'A' + 'a');
        if (kw[i] == '\0' || c != kw[i])
            return 0;
    }
    return kw[len] == '\0';
}

static TokKind
keyword(const char *s, Py_ssize_t len, long long *bval)
{
    static const struct {
        const char *word;
        TokKind kind;
    } KEYWORDS[] = {
        {"and", K_AND},         {"or", K_OR},       {"not", K_NOT},
        {"is", K_IS},           {"isnull", K_ISNULL}, {"notnull", K_NOTNULL},
        {"case", K_CASE},       {"when", K_WHEN},   {"then", K_THEN},
        {"else", K_ELSE},       {"end", K_END},     {"null", K_NULL},
        {"true", K_BOOLEAN},    {"false", K_BOOLEAN},
    };
    size_t i;

    if (len > 7)
        return K_FUNCTION;
    for (i = 0; i < sizeof(KEYWORDS) / sizeof(KEYWORDS[0]); i++) {
        if (word_is(s, len, KEYWORDS[i].word)) {
            *bval = KEYWORDS[i].word[0] == 't';
            return KEYWORDS[i].kind;
        }
    }
    return K_FUNCTION;
}

/* lexer.parse_double: float(text), None (here: -1) when out of range */
static int
number_double(const char *s, Py_ssize_t len, double *out)
{
    char buf[128];
    char *text = buf;
    double value;
    Py_ssize_t i;
    int rc = 0;

    if (len >= (Py_ssize_t)sizeof(buf)) {
        text = PyMem_Malloc((size_t)len + 1);
        if (text == NULL) {
            PyErr_NoMemory();
            return -1;
        }
    }
    memcpy(text, s, (size_t)len);
    text[len] = '\0';
    value = PyOS_string_to_double(text, NULL, NULL);
    if (value == -1.0 && PyErr_Occurred())
        rc = -1;
    else if (isinf(value))
        rc = -1;
    else if (value == 0.0) {
        /* underflow to zero: a non-zero digit before the exponent */
        for (i = 0; i < len && s[i] != 'e' && s[i] != 'E'; i++) {
            if (s[i] >= '1' && s[i] <= '9') {
                rc = -1;
                break;
            }
        }
    }
    else if (fabs(value) < DBL_MIN)
        rc = -1; /* a subnormal result */
    if (text != buf)
        PyMem_Free(text);
    *out = value;
    return rc;
}

static int
next_token(Parser *p, Token *t)
{
    const char *s = p->s;
    Py_ssize_t n = p->n, pos = p->pos, start;
    char c, d;

    while (pos < n && is_space(s[pos]))
        pos++;
    t->start = start = pos;
    if (pos >= n) {
        /* the newline that ends the command, or the end of the text */
        t->kind = K_EOL;
        t->end = p->pos = n;
        return 0;
    }
    c = s[pos];
    d = pos + 1 < n ? s[pos + 1] : '\0';
    t->kind = K_OP;
    switch (c) {
    case '<':
        t->op = d == '>' ? OP_NE : d == '=' ? OP_LE : d == '<' ? OP_SHL : OP_LT;
        pos += t->op == OP_LT ? 1 : 2;
        break;
    case '>':
        t->op = d == '=' ? OP_GE : d == '>' ? OP_SHR : OP_GT;
        pos += t->op == OP_GT ? 1 : 2;
        break;
    case '!':
        if (d != '=')
            return -1; /* "unexpected character" */
        t->op = OP_NE2;
        pos += 2;
        break;
    case '=': t->op = OP_EQ; pos++; break;
    case '-': t->op = OP_SUB; pos++; break;
    case '+': t->op = OP_ADD; pos++; break;
    case '*': t->op = OP_MUL; pos++; break;
    case '/': t->op = OP_DIV; pos++; break;
    case '%': t->op = OP_MOD; pos++; break;
    case '|': t->op = OP_BOR; pos++; break;
    case '&': t->op = OP_BAND; pos++; break;
    case '#': t->op = OP_BXOR; pos++; break;
    case '~': t->op = OP_TILDE; pos++; break;
    case '(': t->kind = K_LPAREN; pos++; break;
    case ')': t->kind = K_RPAREN; pos++; break;
    case ',': t->kind = K_COMMA; pos++; break;
    case ':':
        /* a variable: ":" and one or more identifier characters */
        pos++;
        while (pos < n && is_ident_char(s[pos]))
            pos++;
        if (pos == start + 1)
            return -1; /* a lone ":" */
        t->kind = K_VARIABLE;
        break;
    default:
        if (is_ident_start(c)) {
            while (pos < n && is_ident_char(s[pos]))
                pos++;
            t->kind = keyword(s + start, pos - start, &t->ival);
            break;
        }
        if (is_digit(c) || (c == '.' && is_digit(d))) {
            /* [0-9]+(\.[0-9]*)?([eE][-+]?[0-9]+)? | \.[0-9]+([eE][-+]?[0-9]+)? */
            int integer = 1;
            Py_ssize_t e;

            while (pos < n && is_digit(s[pos]))
                pos++;
            if (pos < n && s[pos] == '.' && (c != '.' || pos == start)) {
                integer = 0;
                pos++;
                while (pos < n && is_digit(s[pos]))
                    pos++;
            }
            if (pos < n && (s[pos] == 'e' || s[pos] == 'E')) {
                e = pos + 1;
                if (e < n && (s[e] == '+' || s[e] == '-'))
                    e++;
                if (e < n && is_digit(s[e])) {
                    integer = 0;
                    while (e < n && is_digit(s[e]))
                        e++;
                    pos = e;
                }
            }
            if (integer) {
                static const char MAXP1[] = "9223372036854775808";
                unsigned long long v = 0;
                Py_ssize_t i;

                if (pos - start == 19 && memcmp(s + start, MAXP1, 19) == 0) {
                    t->kind = K_MAXINT_PLUS_ONE;
                    break;
                }
                for (i = start; i < pos; i++) {
                    unsigned digit = (unsigned)(s[i] - '0');
                    if (v > (unsigned long long)(INT64_MAX - digit) / 10)
                        return -1; /* "bigint constant overflow" */
                    v = v * 10 + digit;
                }
                t->kind = K_INT;
                t->ival = (long long)v;
            }
            else {
                if (number_double(s + start, pos - start, &t->dval) < 0)
                    return -1; /* "double constant overflow" (or no memory) */
                t->kind = K_DOUBLE;
            }
            break;
        }
        return -1; /* "unexpected character" */
    }
    t->end = p->pos = pos;
    return 0;
}

static inline Token *
peek(Parser *p)
{
    if (!p->has_tok) {
        if (next_token(p, &p->tok) < 0)
            return NULL;
        p->has_tok = 1;
    }
    return &p->tok;
}

/* the next token, consumed (copied to *t) */
static inline int
advance(Parser *p, Token *t)
{
    Token *next = peek(p);

    if (next == NULL)
        return -1;
    *t = *next;
    p->has_tok = 0;
    return 0;
}

/* consume a token of this kind, or fail */
static inline int
expect(Parser *p, TokKind kind)
{
    Token *next = peek(p);

    if (next == NULL || next->kind != kind)
        return -1;
    p->has_tok = 0;
    return 0;
}

static inline int
peek_is(Parser *p, TokKind kind)
{
    Token *next = peek(p);

    return next != NULL && next->kind == kind;
}

/* ------------------------------------------------------------------------
 * the parser: parser.ExprParser, less its error reporting. Every function
 * returns a new reference, or NULL: with an exception set (no memory), or
 * without one when C gives the line up. */

static PyObject *expr(Parser *p, int min_level);

static PyObject *
postfix(Parser *p, PyObject *operand)
{
    Token tok;
    Py_ssize_t col;
    PyObject *value, *test;
    int negate = 0;

    if (advance(p, &tok) < 0) {
        Py_DECREF(operand);
        return NULL;
    }
    col = tok.start;
    if (tok.kind == K_ISNULL || tok.kind == K_NOTNULL) {
        test = call2(names[N_IS], operand, make_const(Py_NewRef(Py_None)), col);
        return tok.kind == K_ISNULL ? test : call1(names[N_NOT], test, col);
    }
    if (peek_is(p, K_NOT)) {
        p->has_tok = 0;
        negate = 1;
    }
    if (advance(p, &tok) < 0) {
        Py_DECREF(operand);
        return NULL;
    }
    if (tok.kind == K_NULL)
        value = Py_NewRef(Py_None);
    else if (tok.kind == K_BOOLEAN)
        value = PyBool_FromLong((long)tok.ival);
    else {
        Py_DECREF(operand);
        return NULL;
    }
    test = call2(names[N_IS], operand, make_const(value), col);
    return negate ? call1(names[N_NOT], test, col) : test;
}

static PyObject *
function(Parser *p, const Token *name_tok)
{
    char lower[64];
    Py_ssize_t len = name_tok->end - name_tok->start, i, nargs;
    PyObject *name, *spec, *args = NULL, *arg, *tuple;
    long low;
    int seeded;

    if (len >= (Py_ssize_t)sizeof(lower))
        return NULL; /* no such function */
    for (i = 0; i < len; i++) {
        char c = p->s[name_tok->start + i];
        lower[i] = (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : c;
    }
    name = PyUnicode_FromStringAndSize(lower, len);
    if (name == NULL)
        return NULL;
    spec = PyDict_GetItemWithError(functions, name); /* borrowed */
    if (spec == NULL)
        goto fail;
    if (expect(p, K_LPAREN) < 0)
        goto fail;
    args = PyList_New(0);
    if (args == NULL)
        goto fail;
    if (!peek_is(p, K_RPAREN)) {
        if (peek_is(p, K_COMMA))
            p->has_tok = 0; /* one leading comma: pgbench accepts it */
        for (;;) {
            arg = expr(p, L_OR);
            if (arg == NULL)
                goto fail;
            if (PyList_Append(args, arg) < 0) {
                Py_DECREF(arg);
                goto fail;
            }
            Py_DECREF(arg);
            if (!peek_is(p, K_COMMA))
                break;
            p->has_tok = 0;
        }
    }
    if (expect(p, K_RPAREN) < 0)
        goto fail;
    nargs = PyList_GET_SIZE(args);
    low = PyLong_AsLong(PyTuple_GET_ITEM(spec, 0));
    if (low == -1 && PyErr_Occurred())
        goto fail;
    if (nargs < low)
        goto fail;
    if (PyTuple_GET_ITEM(spec, 1) != Py_None) {
        long high = PyLong_AsLong(PyTuple_GET_ITEM(spec, 1));
        if (high == -1 && PyErr_Occurred())
            goto fail;
        if (nargs > high)
            goto fail;
    }
    seeded = PyObject_IsTrue(PyTuple_GET_ITEM(spec, 2));
    if (seeded < 0)
        goto fail;
    if (seeded && nargs == low && PyList_Append(args, default_seed) < 0)
        goto fail;
    tuple = PyList_AsTuple(args);
    Py_DECREF(args);
    {
        /* the table's own key: one name object for every call of it */
        PyObject *key = PyTuple_GET_ITEM(spec, 3);
        PyObject *node = make_call(key, tuple, name_tok->start);
        Py_DECREF(name);
        return node;
    }
fail:
    Py_XDECREF(args);
    Py_DECREF(name);
    return NULL;
}

static PyObject *
case_expr(Parser *p, Py_ssize_t col)
{
    PyObject *args, *arg, *tuple;
    Token *next;

    if (expect(p, K_WHEN) < 0)
        return NULL;
    args = PyList_New(0);
    if (args == NULL)
        return NULL;
    for (;;) {
        arg = expr(p, L_OR);
        if (arg == NULL || PyList_Append(args, arg) < 0)
            goto fail_arg;
        Py_DECREF(arg);
        if (expect(p, K_THEN) < 0)
            goto fail;
        arg = expr(p, L_OR);
        if (arg == NULL || PyList_Append(args, arg) < 0)
            goto fail_arg;
        Py_DECREF(arg);
        next = peek(p);
        if (next == NULL)
            goto fail;
        if (next->kind == K_WHEN) {
            p->has_tok = 0;
            continue;
        }
        if (next->kind == K_ELSE) {
            p->has_tok = 0;
            arg = expr(p, L_OR);
            if (arg == NULL || PyList_Append(args, arg) < 0)
                goto fail_arg;
            Py_DECREF(arg);
            if (expect(p, K_END) < 0)
                goto fail;
        }
        else if (next->kind == K_END) {
            p->has_tok = 0;
            arg = make_const(Py_NewRef(Py_None));
            if (arg == NULL || PyList_Append(args, arg) < 0)
                goto fail_arg;
            Py_DECREF(arg);
        }
        else
            goto fail;
        break;
    }
    tuple = PyList_AsTuple(args);
    Py_DECREF(args);
    return make_call(names[N_CASE], tuple, col);
fail_arg:
    Py_XDECREF(arg);
fail:
    Py_DECREF(args);
    return NULL;
}

static PyObject *
prefix(Parser *p)
{
    Token tok;
    PyObject *inner;

    if (advance(p, &tok) < 0)
        return NULL;
    switch (tok.kind) {
    case K_INT:
        return make_const(PyLong_FromLongLong(tok.ival));
    case K_DOUBLE:
        return make_const(PyFloat_FromDouble(tok.dval));
    case K_BOOLEAN:
        return make_const(PyBool_FromLong((long)tok.ival));
    case K_NULL:
        return make_const(Py_NewRef(Py_None));
    case K_VARIABLE:
        return make_var(p->s + tok.start + 1, tok.end - tok.start - 1);
    case K_OP:
        if (tok.op == OP_SUB) {
            if (peek_is(p, K_MAXINT_PLUS_ONE)) {
                p->has_tok = 0;
                return make_const(PyLong_FromLongLong(INT64_MIN));
            }
            return call2(names[N_MINUS], make_const(PyLong_FromLong(0)),
                         expr(p, L_UNARY + 1), tok.start);
        }
        if (tok.op == OP_ADD)
            return expr(p, L_UNARY + 1);
        if (tok.op == OP_TILDE)
            return call2(names[N_XOR], make_const(PyLong_FromLong(-1)),
                         expr(p, L_BIT + 1), tok.start);
        return NULL;
    case K_NOT:
        return call1(names[N_NOT], expr(p, L_NOT + 1), tok.start);
    case K_LPAREN:
        inner = expr(p, L_OR);
        if (inner != NULL && expect(p, K_RPAREN) < 0)
            Py_CLEAR(inner);
        return inner;
    case K_FUNCTION:
        return function(p, &tok);
    case K_CASE:
        return case_expr(p, tok.start);
    default:
        return NULL;
    }
}

static PyObject *
expr(Parser *p, int min_level)
{
    PyObject *left, *right;
    Token *next, tok;
    int after_cmp = 0, level;

    if (++p->depth > MAX_DEPTH)
        return NULL;
    left = prefix(p);
    while (left != NULL) {
        next = peek(p);
        if (next == NULL) {
            Py_CLEAR(left);
            break;
        }
        if (next->kind == K_OP) {
            const BinOp *op = &BINOPS[next->op];

            if (next->op == OP_TILDE || op->level < min_level)
                break;
            if (op->level == L_CMP && after_cmp) {
                /* comparisons do not chain */
                Py_CLEAR(left);
                break;
            }
            tok = *next;
            p->has_tok = 0;
            right = expr(p, op->level + 1);
            if (op->swap)
                left = call2(op_names[tok.op], right, left, tok.start);
            else
                left = call2(op_names[tok.op], left, right, tok.start);
            after_cmp = op->level == L_CMP;
            continue;
        }
        if (next->kind == K_AND || next->kind == K_OR) {
            level = next->kind == K_AND ? L_AND : L_OR;
            if (level < min_level)
                break;
            tok = *next;
            p->has_tok = 0;
            right = expr(p, level + 1);
            left = call2(names[level == L_AND ? N_AND : N_OR], left, right,
                         tok.start);
            after_cmp = 0;
            continue;
        }
        if (next->kind == K_IS || next->kind == K_ISNULL ||
            next->kind == K_NOTNULL) {
            if (min_level > L_IS)
                break;
            left = postfix(p, left);
            after_cmp = 0;
            continue;
        }
        break;
    }
    p->depth--;
    return left;
}

/* ------------------------------------------------------------------------
 * the module functions */

/* MetaLexer.next_word in a line without backslashes: skip blanks, take a
 * run of non-blanks; returns its length (0 at the end of the line) */
static Py_ssize_t
next_word(const char *s, Py_ssize_t n, Py_ssize_t *pos)
{
    Py_ssize_t i = *pos, start;

    while (i < n && is_space(s[i]))
        i++;
    start = i;
    while (i < n && !is_space(s[i]))
        i++;
    *pos = i;
    return i - start;
}

PyDoc_STRVAR(meta_expr_doc,
"meta_expr(src, pos) -> (kind, var, expr, first_line, start, next_pos) or None\n\n"
"Read the \\set (kind 0), \\if (1) or \\elif (2) command whose backslash is\n"
"at src[pos], or after what the SQL scanner drops between statements there\n"
"(blanks, newlines, -- comments): start is the backslash's index, var the\n"
"\\set variable (None otherwise), expr its tree, first_line the command's\n"
"text without its newline, next_pos where SQL scanning resumes. None: no\n"
"backslash there, another command, or a line left to the Python lexer and\n"
"parser (see the module comment).");

static PyObject *
meta_expr(PyObject *self, PyObject *const *argv, Py_ssize_t argc)
{
    PyObject *src, *var = NULL, *tree = NULL, *line = NULL, *result;
    Py_ssize_t start, len, pos, wlen, i, nl, next_pos, trim;
    int kind_u, meta;
    const void *data;
    char *copy = NULL;
    const char *s;
    Parser p;

    if (!configured) {
        PyErr_SetString(PyExc_RuntimeError, "_fastparse.configure() not called");
        return NULL;
    }
    if (argc != 2 || !PyUnicode_Check(argv[0])) {
        PyErr_SetString(PyExc_TypeError, "meta_expr(src: str, start: int)");
        return NULL;
    }
    src = argv[0];
    start = PyLong_AsSsize_t(argv[1]);
    if (start == -1 && PyErr_Occurred())
        return NULL;
    len = PyUnicode_GET_LENGTH(src);
    if (start < 0)
        Py_RETURN_NONE;
    kind_u = PyUnicode_KIND(src);
    data = PyUnicode_DATA(src);
    /* sqlruns.LEADING: blanks, newlines and -- comments (no \v) */
    while (start < len) {
        Py_UCS4 c = PyUnicode_READ(kind_u, data, start);

        if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f')
            start++;
        else if (c == '-' && start + 1 < len &&
                 PyUnicode_READ(kind_u, data, start + 1) == '-') {
            start += 2;
            while (start < len) {
                c = PyUnicode_READ(kind_u, data, start);
                if (c == '\n' || c == '\r')
                    break;
                start++;
            }
        }
        else
            break;
    }
    if (start >= len || PyUnicode_READ(kind_u, data, start) != '\\')
        Py_RETURN_NONE;

    /* the line: up to the newline; ASCII and no second backslash, or
     * nothing. The command name is checked first: other commands are
     * given up without reading their (maybe long) lines. */
    nl = start + 1;
    for (i = 0; nl < len && i < 8; nl++, i++) {
        Py_UCS4 c = PyUnicode_READ(kind_u, data, nl);
        if (c == '\n' || c >= 0x80 || c == '\\')
            break;
    }
    {
        /* "\" [blanks] (set|if|elif) blank-or-end: at most 8 characters */
        char head[9];
        Py_ssize_t hp = 0, hn = nl - start - 1;

        for (i = 0; i < hn; i++)
            head[i] = (char)PyUnicode_READ(kind_u, data, start + 1 + i);
        while (hp < hn && is_space(head[hp]))
            hp++;
        i = hp;
        while (i < hn && !is_space(head[i]))
            i++;
        if (i == hn && nl < len && PyUnicode_READ(kind_u, data, nl) != '\n')
            Py_RETURN_NONE; /* the name may go on */
        if (word_is(head + hp, i - hp, "set"))
            meta = 0;
        else if (word_is(head + hp, i - hp, "if"))
            meta = 1;
        else if (word_is(head + hp, i - hp, "elif"))
            meta = 2;
        else
            Py_RETURN_NONE;
    }
    for (; nl < len; nl++) {
        Py_UCS4 c = PyUnicode_READ(kind_u, data, nl);
        if (c == '\n')
            break;
        if (c >= 0x80 || c == '\\')
            Py_RETURN_NONE;
    }
    if (kind_u == PyUnicode_1BYTE_KIND)
        s = (const char *)data + start;
    else {
        copy = PyMem_Malloc((size_t)(nl - start) + 1);
        if (copy == NULL)
            return PyErr_NoMemory();
        for (i = start; i < nl; i++)
            copy[i - start] = (char)PyUnicode_READ(kind_u, data, i);
        s = copy;
    }

    p.s = s;
    p.n = nl - start;
    p.has_tok = 0;
    p.depth = 0;
    pos = 1;
    wlen = next_word(s, p.n, &pos); /* the command name */
    if (meta == 0) {
        wlen = next_word(s, p.n, &pos);
        if (wlen == 0)
            goto give_up; /* "missing argument" */
        var = PyUnicode_FromStringAndSize(s + pos - wlen, wlen);
        if (var == NULL)
            goto error;
    }
    p.pos = pos;
    tree = expr(&p, L_OR);
    if (tree == NULL || expect(&p, K_EOL) < 0)
        goto give_up;

    next_pos = nl < len ? nl + 1 : len;
    /* line_text(): without the trailing CR and LF characters */
    trim = nl;
    while (trim > start && PyUnicode_READ(kind_u, data, trim - 1) == '\r')
        trim--;
    line = PyUnicode_Substring(src, start, trim);
    if (line == NULL)
        goto error;
    PyMem_Free(copy);
    result = Py_BuildValue("(iNNNnn)", meta, var ? var : Py_NewRef(Py_None),
                           tree, line, start, next_pos);
    return result;

give_up:
    if (PyErr_Occurred())
        goto error;
    PyMem_Free(copy);
    Py_XDECREF(var);
    Py_XDECREF(tree);
    Py_RETURN_NONE;
error:
    PyMem_Free(copy);
    Py_XDECREF(var);
    Py_XDECREF(tree);
    return NULL;
}

/* the byte offset of an object slot, from the class's member descriptor */
static int
slot_offset(PyTypeObject *type, const char *name, Py_ssize_t *out)
{
    PyObject *descr = PyObject_GetAttrString((PyObject *)type, name);
    PyMemberDef *member;

    if (descr == NULL)
        return -1;
    if (!Py_IS_TYPE(descr, &PyMemberDescr_Type)) {
        PyErr_Format(PyExc_TypeError, "%s.%s is not a slot", type->tp_name,
                     name);
        Py_DECREF(descr);
        return -1;
    }
    member = ((PyMemberDescrObject *)descr)->d_member;
    if (member->type != T_OBJECT_EX) {
        PyErr_Format(PyExc_TypeError, "%s.%s is not an object slot",
                     type->tp_name, name);
        Py_DECREF(descr);
        return -1;
    }
    *out = member->offset;
    Py_DECREF(descr);
    return 0;
}

PyDoc_STRVAR(configure_doc,
"configure(Const, Var, Call, functions, default_seed)\n\n"
"The AST classes (slotted dataclasses: Const(value), Var(name),\n"
"Call(name, args, column)), the function table {name: (low, high or None,\n"
"seeded, name)} and the Var of the implicit seed argument.");

static PyObject *
configure(PyObject *self, PyObject *const *argv, Py_ssize_t argc)
{
    int i;

    if (argc != 5 || !PyType_Check(argv[0]) || !PyType_Check(argv[1]) ||
        !PyType_Check(argv[2]) || !PyDict_CheckExact(argv[3])) {
        PyErr_SetString(PyExc_TypeError,
                        "configure(Const, Var, Call, functions, default_seed)");
        return NULL;
    }
    configured = 0;
    if (slot_offset((PyTypeObject *)argv[0], "value", &off_const_value) < 0 ||
        slot_offset((PyTypeObject *)argv[1], "name", &off_var_name) < 0 ||
        slot_offset((PyTypeObject *)argv[2], "name", &off_call_name) < 0 ||
        slot_offset((PyTypeObject *)argv[2], "args", &off_call_args) < 0 ||
        slot_offset((PyTypeObject *)argv[2], "column", &off_call_column) < 0)
        return NULL;
    {
        /* every entry: (int, int or None, bool, str) */
        PyObject *key, *value;
        Py_ssize_t it = 0;

        while (PyDict_Next(argv[3], &it, &key, &value)) {
            if (!PyTuple_CheckExact(value) || PyTuple_GET_SIZE(value) != 4 ||
                !PyLong_Check(PyTuple_GET_ITEM(value, 0)) ||
                !(PyLong_Check(PyTuple_GET_ITEM(value, 1)) ||
                  PyTuple_GET_ITEM(value, 1) == Py_None) ||
                !PyUnicode_Check(PyTuple_GET_ITEM(value, 3))) {
                PyErr_SetString(PyExc_TypeError,
                                "functions: {name: (low, high, seeded, name)}");
                return NULL;
            }
        }
    }
    for (i = 0; i < N_OPS; i++) {
        if (op_names[i] == NULL) {
            op_names[i] = PyUnicode_InternFromString(BINOPS[i].name);
            if (op_names[i] == NULL)
                return NULL;
        }
    }
    for (i = 0; i < N_NAMES; i++) {
        if (names[i] == NULL) {
            names[i] = PyUnicode_InternFromString(NAME_TEXT[i]);
            if (names[i] == NULL)
                return NULL;
        }
    }
    Py_XSETREF(const_type, (PyTypeObject *)Py_NewRef(argv[0]));
    Py_XSETREF(var_type, (PyTypeObject *)Py_NewRef(argv[1]));
    Py_XSETREF(call_type, (PyTypeObject *)Py_NewRef(argv[2]));
    Py_XSETREF(functions, Py_NewRef(argv[3]));
    Py_XSETREF(default_seed, Py_NewRef(argv[4]));
    configured = 1;
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"configure", (PyCFunction)(void (*)(void))configure, METH_FASTCALL,
     configure_doc},
    {"meta_expr", (PyCFunction)(void (*)(void))meta_expr, METH_FASTCALL,
     meta_expr_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef fastparse_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "pgsurge._fastparse",
    .m_doc = "The common \\set/\\if/\\elif lines parsed in C into "
             "pgsurge.script.ast trees (pgsurge.script.parser is the "
             "reference).",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC
PyInit__fastparse(void)
{
    PyObject *m = PyModule_Create(&fastparse_module);

    if (m == NULL)
        return NULL;
    if (PyModule_AddIntConstant(m, "API_VERSION", FASTPARSE_API) < 0 ||
        PyModule_AddStringConstant(m, "SOURCE_HASH", PGSURGE_SOURCE_HASH) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}

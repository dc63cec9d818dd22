/*
 * pgsurge._fastpq: the run engine's per-transaction libpq calls, fused.
 *
 * The engine talks to the server through psycopg's libpq wrapper; a
 * select-only transaction makes about ten calls through it (send, flush,
 * consume, is-busy, get-result, result status, ...), each a Python method
 * call with an object or two to allocate. This optional module does the
 * two common sequences in one C call each, on the very same PGconn:
 *
 *   send_prepared / send_params / send_query: PQsendQuery* and PQflush;
 *   drain: PQconsumeInput, then PQisBusy/PQgetResult/PQresultStatus until
 *          the command's results are all read or libpq needs more data.
 *
 * The *_vars/parts variants also build the parameters (or, in simple mode,
 * the query text) from the client's variables, as pgsurge.engine.sql's
 * params_of/substitute do, for the common values (ints and strings); for
 * any other value they send nothing and return FALLBACK, and the caller
 * does it in Python.
 *
 * It does not link against libpq. psycopg has already loaded one libpq into
 * the process (its wheel bundles its own copy); bind() finds that library
 * among the loaded objects and takes its functions from it, so both work on
 * the same PGconn structures. If no single libpq is loaded, or its version
 * is not the one psycopg reports, bind() fails and pgsurge keeps using
 * psycopg's calls (pgsurge.engine.fastpq decides; see there).
 *
 * Connections are given as PGconn addresses (psycopg's pgconn_ptr).
 * Nothing here owns a connection; results are cleared before returning.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <string.h>

#if defined(__linux__) || defined(__FreeBSD__) || defined(__NetBSD__) || \
    defined(__OpenBSD__)
#define HAVE_PHDR 1
#include <dlfcn.h>
#include <link.h>
#endif

#define FASTPQ_API 3

/* setup.py's digest of the sources this was built from (see there) */
#ifndef PGSURGE_SOURCE_HASH
#define PGSURGE_SOURCE_HASH ""
#endif

#include "_fastpq_api.h"

/* libpq's public enum values (stable ABI since libpq 7.x / 14 for pipelines) */
#define PGRES_EMPTY_QUERY 0
#define PGRES_COMMAND_OK 1
#define PGRES_TUPLES_OK 2
#define PG_DIAG_SQLSTATE 'C'

static int (*f_sendQueryPrepared)(PGconn *, const char *, int, const char *const *,
                                  const int *, const int *, int);
static int (*f_sendQueryParams)(PGconn *, const char *, int, const void *,
                                const char *const *, const int *, const int *, int);
static int (*f_sendQuery)(PGconn *, const char *);
static int (*f_flush)(PGconn *);
static int (*f_consumeInput)(PGconn *);
static int (*f_isBusy)(PGconn *);
static PGresult *(*f_getResult)(PGconn *);
static int (*f_resultStatus)(const PGresult *);
static char *(*f_resultErrorMessage)(const PGresult *);
static char *(*f_resultErrorField)(const PGresult *, int);
static void (*f_clear)(PGresult *);
static int (*f_socket)(const PGconn *);
static int (*f_libVersion)(void);
static int (*f_transactionStatus)(const PGconn *);
static int (*f_ntuples)(const PGresult *);
static int (*f_nfields)(const PGresult *);
static char *(*f_fname)(const PGresult *, int);
static char *(*f_getvalue)(const PGresult *, int, int);
static int (*f_getlength)(const PGresult *, int, int);
static int (*f_getisnull)(const PGresult *, int, int);
static int (*f_enterPipelineMode)(PGconn *);
static int (*f_exitPipelineMode)(PGconn *);
static int (*f_pipelineSync)(PGconn *);
static PGconn *(*f_connectStart)(const char *);
static int (*f_connectPoll)(PGconn *);
static int (*f_status)(const PGconn *);
static int (*f_setnonblocking)(PGconn *, int);
static void (*f_finish)(PGconn *);
static char *(*f_errorMessage)(const PGconn *);
static int (*f_sendPrepare)(PGconn *, const char *, const char *, int, const void *);
static unsigned int (*f_ftype)(const PGresult *, int);
static char *(*f_cmdTuples)(PGresult *);

/* the same functions, published for pgsurge._fastloop (see _fastpq_api.h) */
static pgsurge_fastpq_api c_api = {PGSURGE_FASTPQ_TABLE_VERSION, 0};

static int bound = 0;

/* ---------------------------------------------------------------------- */
/* Finding the loaded libpq                                               */

#ifdef HAVE_PHDR
typedef struct {
    char path[4096];
    int count;
} libpq_search;

/* "libpq.so.5", "libpq-e9b5c9ac.so.5.18", "libpq.5.dylib"-like names */
static int
is_libpq(const char *path)
{
    const char *base = strrchr(path, '/');

    base = base ? base + 1 : path;
    return strncmp(base, "libpq", 5) == 0 && (base[5] == '.' || base[5] == '-') &&
           strstr(base, ".so") != NULL;
}

static int
visit_object(struct dl_phdr_info *info, size_t size, void *data)
{
    libpq_search *s = (libpq_search *)data;

    (void)size;
    if (info->dlpi_name == NULL || !is_libpq(info->dlpi_name))
        return 0;
    if (s->count == 0 || strcmp(s->path, info->dlpi_name) != 0) {
        s->count++;
        strncpy(s->path, info->dlpi_name, sizeof s->path - 1);
        s->path[sizeof s->path - 1] = '\0';
    }
    return 0;
}

#define BIND(var, name)                              \
    do {                                             \
        *(void **)(&var) = dlsym(handle, name);      \
        if (var == NULL)                             \
            return 0;                                \
    } while (0)

static int
bind_symbols(void *handle)
{
    BIND(f_sendQueryPrepared, "PQsendQueryPrepared");
    BIND(f_sendQueryParams, "PQsendQueryParams");
    BIND(f_sendQuery, "PQsendQuery");
    BIND(f_flush, "PQflush");
    BIND(f_consumeInput, "PQconsumeInput");
    BIND(f_isBusy, "PQisBusy");
    BIND(f_getResult, "PQgetResult");
    BIND(f_resultStatus, "PQresultStatus");
    BIND(f_resultErrorMessage, "PQresultErrorMessage");
    BIND(f_resultErrorField, "PQresultErrorField");
    BIND(f_clear, "PQclear");
    BIND(f_socket, "PQsocket");
    BIND(f_libVersion, "PQlibVersion");
    BIND(f_transactionStatus, "PQtransactionStatus");
    BIND(f_ntuples, "PQntuples");
    BIND(f_nfields, "PQnfields");
    BIND(f_fname, "PQfname");
    BIND(f_getvalue, "PQgetvalue");
    BIND(f_getlength, "PQgetlength");
    BIND(f_getisnull, "PQgetisnull");
    BIND(f_enterPipelineMode, "PQenterPipelineMode");
    BIND(f_exitPipelineMode, "PQexitPipelineMode");
    BIND(f_pipelineSync, "PQpipelineSync");
    BIND(f_connectStart, "PQconnectStart");
    BIND(f_connectPoll, "PQconnectPoll");
    BIND(f_status, "PQstatus");
    BIND(f_setnonblocking, "PQsetnonblocking");
    BIND(f_finish, "PQfinish");
    BIND(f_errorMessage, "PQerrorMessage");
    BIND(f_sendPrepare, "PQsendPrepare");
    BIND(f_ftype, "PQftype");
    BIND(f_cmdTuples, "PQcmdTuples");
    return 1;
}

/* fill the table other extensions read through the capsule */
static void
publish_api(void)
{
    c_api.sendQueryPrepared = f_sendQueryPrepared;
    c_api.sendQueryParams = f_sendQueryParams;
    c_api.sendQuery = f_sendQuery;
    c_api.flush = f_flush;
    c_api.consumeInput = f_consumeInput;
    c_api.isBusy = f_isBusy;
    c_api.getResult = f_getResult;
    c_api.resultStatus = f_resultStatus;
    c_api.resultErrorMessage = f_resultErrorMessage;
    c_api.resultErrorField = f_resultErrorField;
    c_api.clear = f_clear;
    c_api.transactionStatus = f_transactionStatus;
    c_api.ntuples = f_ntuples;
    c_api.nfields = f_nfields;
    c_api.fname = f_fname;
    c_api.getvalue = f_getvalue;
    c_api.getlength = f_getlength;
    c_api.getisnull = f_getisnull;
    c_api.enterPipelineMode = f_enterPipelineMode;
    c_api.exitPipelineMode = f_exitPipelineMode;
    c_api.pipelineSync = f_pipelineSync;
    c_api.connectStart = f_connectStart;
    c_api.connectPoll = f_connectPoll;
    c_api.status = f_status;
    c_api.socket = f_socket;
    c_api.setnonblocking = f_setnonblocking;
    c_api.finish = f_finish;
    c_api.errorMessage = f_errorMessage;
    c_api.sendPrepare = f_sendPrepare;
    c_api.ftype = f_ftype;
    c_api.cmdTuples = f_cmdTuples;
    c_api.bound = 1;
}
#endif

PyDoc_STRVAR(bind_doc,
             "bind(libpq_version)\n--\n\n"
             "Take libpq's functions from the one libpq loaded in this process;\n"
             "True when it is there, alone, and of this PQlibVersion().");

static PyObject *
fastpq_bind(PyObject *Py_UNUSED(module), PyObject *arg)
{
    long want = PyLong_AsLong(arg);

    if (want == -1 && PyErr_Occurred())
        return NULL;
    if (bound)
        return PyBool_FromLong(f_libVersion() == want);
#ifdef HAVE_PHDR
    {
        libpq_search s;
        void *handle;

        s.count = 0;
        s.path[0] = '\0';
        dl_iterate_phdr(visit_object, &s);
        if (s.count != 1)
            Py_RETURN_FALSE;
        /* RTLD_NOLOAD: only a library already in the process */
        handle = dlopen(s.path, RTLD_LAZY | RTLD_NOLOAD);
        if (handle == NULL)
            Py_RETURN_FALSE;
        if (!bind_symbols(handle) || f_libVersion() != want) {
            dlclose(handle);
            Py_RETURN_FALSE;
        }
        /* the handle stays open: psycopg keeps the library loaded anyway */
        bound = 1;
        publish_api();
        Py_RETURN_TRUE;
    }
#else
    Py_RETURN_FALSE;
#endif
}

/* ---------------------------------------------------------------------- */
/* Calls                                                                  */

static PGconn *
as_conn(PyObject *o)
{
    void *p;

    if (!bound) {
        PyErr_SetString(PyExc_RuntimeError, "pgsurge._fastpq is not bound");
        return NULL;
    }
    p = PyLong_AsVoidPtr(o);
    if (p == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "no connection (null PGconn)");
        return NULL;
    }
    return (PGconn *)p;
}

#define SMALL_NPARAMS 16

/* Text parameters from a sequence of bytes or None (SQL NULL); *values is
 * either small or a PyMem block the caller frees. */
static int
collect_params(PyObject *params, const char **small, const char ***values,
               PyObject **fast)
{
    Py_ssize_t i, n;
    PyObject **items;

    *values = NULL;
    *fast = NULL;
    if (params == Py_None)
        return 0;
    *fast = PySequence_Fast(params, "parameters must be a sequence");
    if (*fast == NULL)
        return -1;
    n = PySequence_Fast_GET_SIZE(*fast);
    if (n > 65535) {
        PyErr_SetString(PyExc_ValueError, "too many parameters");
        return -1;
    }
    if (n == 0)
        return 0;
    *values = n <= SMALL_NPARAMS ? small : PyMem_New(const char *, n);
    if (*values == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    items = PySequence_Fast_ITEMS(*fast);
    for (i = 0; i < n; i++) {
        if (items[i] == Py_None)
            (*values)[i] = NULL;
        else if (PyBytes_Check(items[i]))
            (*values)[i] = PyBytes_AS_STRING(items[i]);
        else {
            PyErr_Format(PyExc_TypeError, "parameter %zd must be bytes or None, not %.100s",
                         i, Py_TYPE(items[i])->tp_name);
            return -1;
        }
    }
    return (int)n;
}

static void
release_params(const char **small, const char **values, PyObject *fast)
{
    if (values != NULL && values != small)
        PyMem_Free((void *)values);
    Py_XDECREF(fast);
}

/* After a successful send: push the data out. 0: all sent; 1: some is left
 * (wait for the socket to be writable); -1: PQflush failed. */
static PyObject *
flushed(PGconn *conn)
{
    return PyLong_FromLong(f_flush(conn));
}

static int
need_bytes(PyObject *o, const char *what)
{
    if (PyBytes_Check(o))
        return 1;
    PyErr_Format(PyExc_TypeError, "%s must be bytes, not %.100s", what,
                 Py_TYPE(o)->tp_name);
    return 0;
}

PyDoc_STRVAR(send_prepared_doc,
             "send_prepared(conn, name, params)\n--\n\n"
             "PQsendQueryPrepared with text parameters (a sequence of bytes or\n"
             "None, or None for no parameters), then PQflush. Returns 0 when\n"
             "all is sent, 1 when data is left to flush, -2 when the send\n"
             "failed and -1 when the flush failed.");

static PyObject *
fastpq_send_prepared(PyObject *Py_UNUSED(module), PyObject *const *args,
                     Py_ssize_t nargs)
{
    PGconn *conn;
    const char *small[SMALL_NPARAMS];
    const char **values;
    PyObject *fast;
    int n, ok;

    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "send_prepared() takes 3 arguments");
        return NULL;
    }
    if ((conn = as_conn(args[0])) == NULL || !need_bytes(args[1], "name"))
        return NULL;
    n = collect_params(args[2], small, &values, &fast);
    if (n < 0) {
        release_params(small, values, fast);
        return NULL;
    }
    ok = f_sendQueryPrepared(conn, PyBytes_AS_STRING(args[1]), n, values, NULL,
                             NULL, 0);
    release_params(small, values, fast);
    if (!ok)
        return PyLong_FromLong(-2);
    return flushed(conn);
}

PyDoc_STRVAR(send_params_doc,
             "send_params(conn, sql, params)\n--\n\n"
             "PQsendQueryParams (text parameters, no types), then PQflush;\n"
             "returns as send_prepared().");

static PyObject *
fastpq_send_params(PyObject *Py_UNUSED(module), PyObject *const *args,
                   Py_ssize_t nargs)
{
    PGconn *conn;
    const char *small[SMALL_NPARAMS];
    const char **values;
    PyObject *fast;
    int n, ok;

    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "send_params() takes 3 arguments");
        return NULL;
    }
    if ((conn = as_conn(args[0])) == NULL || !need_bytes(args[1], "sql"))
        return NULL;
    n = collect_params(args[2], small, &values, &fast);
    if (n < 0) {
        release_params(small, values, fast);
        return NULL;
    }
    ok = f_sendQueryParams(conn, PyBytes_AS_STRING(args[1]), n, NULL, values, NULL,
                           NULL, 0);
    release_params(small, values, fast);
    if (!ok)
        return PyLong_FromLong(-2);
    return flushed(conn);
}

PyDoc_STRVAR(send_query_doc,
             "send_query(conn, sql)\n--\n\n"
             "PQsendQuery, then PQflush; returns as send_prepared().");

static PyObject *
fastpq_send_query(PyObject *Py_UNUSED(module), PyObject *const *args,
                  Py_ssize_t nargs)
{
    PGconn *conn;

    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "send_query() takes 2 arguments");
        return NULL;
    }
    if ((conn = as_conn(args[0])) == NULL || !need_bytes(args[1], "sql"))
        return NULL;
    if (!f_sendQuery(conn, PyBytes_AS_STRING(args[1])))
        return PyLong_FromLong(-2);
    return flushed(conn);
}

static PyObject *
bytes_or_none(const char *s)
{
    if (s == NULL)
        Py_RETURN_NONE;
    return PyBytes_FromString(s);
}

PyDoc_STRVAR(drain_doc,
             "drain(conn, count)\n--\n\n"
             "PQconsumeInput, then read every result libpq holds, counting the\n"
             "successful ones (tuples, command, empty query) from count.\n"
             "Returns count * 4 + code, code 0: libpq needs more data; 1: all\n"
             "results read (PQgetResult gave NULL); 3: PQconsumeInput failed.\n"
             "Any other result stops the reading: then the return value is a\n"
             "tuple (count, status, sqlstate or None, error message), the\n"
             "result being cleared.");

static PyObject *
fastpq_drain(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    PGconn *conn;
    PGresult *res;
    long count;
    int status;
    PyObject *out;

    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "drain() takes 2 arguments");
        return NULL;
    }
    if ((conn = as_conn(args[0])) == NULL)
        return NULL;
    count = PyLong_AsLong(args[1]);
    if (count == -1 && PyErr_Occurred())
        return NULL;
    if (count < 0 || count > (LONG_MAX >> 3)) {
        PyErr_SetString(PyExc_ValueError, "count out of range");
        return NULL;
    }
    if (!f_consumeInput(conn))
        return PyLong_FromLong(count * 4 + 3);
    for (;;) {
        if (f_isBusy(conn))
            return PyLong_FromLong(count * 4);
        res = f_getResult(conn);
        if (res == NULL)
            return PyLong_FromLong(count * 4 + 1);
        status = f_resultStatus(res);
        if (status == PGRES_TUPLES_OK || status == PGRES_COMMAND_OK ||
            status == PGRES_EMPTY_QUERY) {
            f_clear(res);
            count++;
            continue;
        }
        out = Py_BuildValue("(liNN)", count, status,
                            bytes_or_none(f_resultErrorField(res, PG_DIAG_SQLSTATE)),
                            bytes_or_none(f_resultErrorMessage(res)));
        f_clear(res);
        return out;
    }
}


/* ---------------------------------------------------------------------- */
/* Parameters and query text from the client's variables                  */

/* nothing sent: a value needs pgsurge.script.values.to_text */
#define FALLBACK (-3)
/* room for an int64 in decimal, sign and NUL included */
#define INT_TEXT 24

/* n in decimal, as "%lld" writes it (snprintf costs more than the rest of
 * a parameter's handling); returns the length, buf NUL-terminated. */
static Py_ssize_t
format_int64(long long n, char *buf)
{
    char tmp[INT_TEXT];
    char *p = tmp + sizeof tmp;
    /* the magnitude as unsigned: -LLONG_MIN does not fit a long long */
    unsigned long long u = n < 0 ? 0ULL - (unsigned long long)n : (unsigned long long)n;
    Py_ssize_t len;

    do {
        *--p = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (n < 0)
        *--p = '-';
    len = (Py_ssize_t)(tmp + sizeof tmp - p);
    memcpy(buf, p, (size_t)len);
    buf[len] = '\0';
    return len;
}

/* The text of a variable's value, or NULL with *fallback set (a value only
 * Python formats) or with an exception set. Ints are written into buf. */
static const char *
value_text(PyObject *v, char *buf, Py_ssize_t *len, int *fallback)
{
    if (PyLong_CheckExact(v)) {
        int overflow;
        long long n = PyLong_AsLongLongAndOverflow(v, &overflow);

        if (overflow || (n == -1 && PyErr_Occurred())) {
            PyErr_Clear();
            *fallback = 1;
            return NULL;
        }
        *len = format_int64(n, buf);
        return buf;
    }
    if (PyUnicode_CheckExact(v))
        /* UTF-8, strict, as str.encode(); cached in the str object */
        return PyUnicode_AsUTF8AndSize(v, len);
    *fallback = 1;
    return NULL;
}

/* params_of(variables, names) into values[]: a missing variable is an SQL
 * NULL. Returns 0, FALLBACK, or -1 with an exception set. */
static int
vars_params(PyObject *variables, PyObject *names, const char **values, char *ints)
{
    Py_ssize_t i, n = PyTuple_GET_SIZE(names), len;
    int fallback = 0;

    for (i = 0; i < n; i++) {
        PyObject *v = PyDict_GetItemWithError(variables, PyTuple_GET_ITEM(names, i));

        if (v == NULL) {
            if (PyErr_Occurred())
                return -1;
            values[i] = NULL;
            continue;
        }
        values[i] = value_text(v, ints + i * INT_TEXT, &len, &fallback);
        if (values[i] == NULL)
            return fallback ? FALLBACK : -1;
    }
    return 0;
}

static int
check_vars_args(PyObject *const *args, const char *what)
{
    if (!PyBytes_Check(args[1])) {
        PyErr_Format(PyExc_TypeError, "%s must be bytes", what);
        return 0;
    }
    if (!PyDict_Check(args[2]) || !PyTuple_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError, "variables must be a dict, names a tuple");
        return 0;
    }
    return 1;
}

/* shared by send_prepared_vars and send_params_vars */
static PyObject *
send_vars(PyObject *const *args, Py_ssize_t nargs, int prepared)
{
    PGconn *conn;
    const char *small[SMALL_NPARAMS];
    char small_ints[SMALL_NPARAMS * INT_TEXT];
    const char **values = small;
    char *ints = small_ints;
    Py_ssize_t n;
    int r, ok;

    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "takes 4 arguments");
        return NULL;
    }
    if ((conn = as_conn(args[0])) == NULL ||
        !check_vars_args(args, prepared ? "name" : "sql"))
        return NULL;
    n = PyTuple_GET_SIZE(args[3]);
    if (n > 65535) {
        PyErr_SetString(PyExc_ValueError, "too many parameters");
        return NULL;
    }
    if (n > SMALL_NPARAMS) {
        values = PyMem_New(const char *, n);
        ints = PyMem_Malloc((size_t)n * INT_TEXT);
        if (values == NULL || ints == NULL) {
            PyMem_Free((void *)values);
            PyMem_Free(ints);
            return PyErr_NoMemory();
        }
    }
    r = vars_params(args[2], args[3], values, ints);
    if (r == 0) {
        if (prepared)
            ok = f_sendQueryPrepared(conn, PyBytes_AS_STRING(args[1]), (int)n,
                                     n ? values : NULL, NULL, NULL, 0);
        else
            ok = f_sendQueryParams(conn, PyBytes_AS_STRING(args[1]), (int)n, NULL,
                                   n ? values : NULL, NULL, NULL, 0);
        r = ok ? f_flush(conn) : -2;
    }
    if (values != small) {
        PyMem_Free((void *)values);
        PyMem_Free(ints);
    }
    if (r == -1 && PyErr_Occurred())
        return NULL;
    return PyLong_FromLong(r);
}

PyDoc_STRVAR(send_prepared_vars_doc,
             "send_prepared_vars(conn, name, variables, names)\n--\n\n"
             "send_prepared() with params_of(variables, names) built here; -3\n"
             "(nothing sent) when a value is neither an int nor a str.");

static PyObject *
fastpq_send_prepared_vars(PyObject *Py_UNUSED(module), PyObject *const *args,
                          Py_ssize_t nargs)
{
    return send_vars(args, nargs, 1);
}

PyDoc_STRVAR(send_params_vars_doc,
             "send_params_vars(conn, sql, variables, names)\n--\n\n"
             "send_params() with params_of(variables, names) built here; -3\n"
             "(nothing sent) when a value is neither an int nor a str.");

static PyObject *
fastpq_send_params_vars(PyObject *Py_UNUSED(module), PyObject *const *args,
                        Py_ssize_t nargs)
{
    return send_vars(args, nargs, 0);
}

/* a growing byte buffer for the query text */
typedef struct {
    char *data;
    size_t len;
    size_t cap;
    char small[512];
} text_buf;

static int
buf_add(text_buf *b, const char *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t cap = (b->len + n + 1) * 2;
        char *data = PyMem_Malloc(cap);

        if (data == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        memcpy(data, b->data, b->len);
        if (b->data != b->small)
            PyMem_Free(b->data);
        b->data = data;
        b->cap = cap;
    }
    memcpy(b->data + b->len, s, n);
    b->len += n;
    return 0;
}

PyDoc_STRVAR(send_query_parts_doc,
             "send_query_parts(conn, parts, variables)\n--\n\n"
             "send_query() of substitute(variables, parts): literal text at even\n"
             "indexes, variable names at odd ones (a missing variable stays\n"
             "':name'); -3 (nothing sent) when a value is neither an int nor a\n"
             "str.");

static PyObject *
fastpq_send_query_parts(PyObject *Py_UNUSED(module), PyObject *const *args,
                        Py_ssize_t nargs)
{
    PGconn *conn;
    PyObject *parts, *variables;
    text_buf b;
    Py_ssize_t i, n, len;
    const char *text;
    char ints[INT_TEXT];
    int fallback = 0, r = -1;

    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "send_query_parts() takes 3 arguments");
        return NULL;
    }
    if ((conn = as_conn(args[0])) == NULL)
        return NULL;
    parts = args[1];
    variables = args[2];
    if (!PyTuple_Check(parts) || !PyDict_Check(variables)) {
        PyErr_SetString(PyExc_TypeError, "parts must be a tuple, variables a dict");
        return NULL;
    }
    b.data = b.small;
    b.len = 0;
    b.cap = sizeof b.small;
    n = PyTuple_GET_SIZE(parts);
    for (i = 0; i < n; i++) {
        PyObject *part = PyTuple_GET_ITEM(parts, i);

        if (!PyUnicode_Check(part)) {
            PyErr_SetString(PyExc_TypeError, "parts must be strings");
            goto done;
        }
        if (i & 1) {
            PyObject *v = PyDict_GetItemWithError(variables, part);

            if (v == NULL) {
                if (PyErr_Occurred())
                    goto done;
                if (buf_add(&b, ":", 1) < 0)
                    goto done;
                text = PyUnicode_AsUTF8AndSize(part, &len);
            } else {
                text = value_text(v, ints, &len, &fallback);
            }
        } else {
            text = PyUnicode_AsUTF8AndSize(part, &len);
        }
        if (text == NULL) {
            if (fallback)
                r = FALLBACK;
            goto done;
        }
        if (buf_add(&b, text, (size_t)len) < 0)
            goto done;
    }
    b.data[b.len] = '\0';
    r = f_sendQuery(conn, b.data) ? f_flush(conn) : -2;
done:
    if (b.data != b.small)
        PyMem_Free(b.data);
    if (r == -1 && PyErr_Occurred())
        return NULL;
    return PyLong_FromLong(r);
}

PyDoc_STRVAR(socket_doc, "socket(conn)\n--\n\nPQsocket (a sanity check of bind()).");

static PyObject *
fastpq_socket(PyObject *Py_UNUSED(module), PyObject *arg)
{
    PGconn *conn = as_conn(arg);

    if (conn == NULL)
        return NULL;
    return PyLong_FromLong(f_socket(conn));
}

static PyMethodDef module_methods[] = {
    {"bind", (PyCFunction)fastpq_bind, METH_O, bind_doc},
    {"send_prepared", (PyCFunction)(void (*)(void))fastpq_send_prepared,
     METH_FASTCALL, send_prepared_doc},
    {"send_params", (PyCFunction)(void (*)(void))fastpq_send_params, METH_FASTCALL,
     send_params_doc},
    {"send_query", (PyCFunction)(void (*)(void))fastpq_send_query, METH_FASTCALL,
     send_query_doc},
    {"send_prepared_vars", (PyCFunction)(void (*)(void))fastpq_send_prepared_vars,
     METH_FASTCALL, send_prepared_vars_doc},
    {"send_params_vars", (PyCFunction)(void (*)(void))fastpq_send_params_vars,
     METH_FASTCALL, send_params_vars_doc},
    {"send_query_parts", (PyCFunction)(void (*)(void))fastpq_send_query_parts,
     METH_FASTCALL, send_query_parts_doc},
    {"drain", (PyCFunction)(void (*)(void))fastpq_drain, METH_FASTCALL, drain_doc},
    {"socket", (PyCFunction)fastpq_socket, METH_O, socket_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef fastpq_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "pgsurge._fastpq",
    .m_doc = "Fused per-transaction libpq calls on psycopg's own libpq "
             "(optional; see pgsurge.engine.fastpq).",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC
PyInit__fastpq(void)
{
    PyObject *m = PyModule_Create(&fastpq_module);
    PyObject *capsule;

    if (m == NULL)
        return NULL;
    if (PyModule_AddIntConstant(m, "API_VERSION", FASTPQ_API) < 0 ||
        PyModule_AddStringConstant(m, "SOURCE_HASH", PGSURGE_SOURCE_HASH) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    capsule = PyCapsule_New(&c_api, PGSURGE_FASTPQ_CAPSULE, NULL);
    if (capsule == NULL || PyModule_AddObject(m, "_C_API", capsule) < 0) {
        Py_XDECREF(capsule);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}

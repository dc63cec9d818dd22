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
 * It does not link against libpq. psycopg has already loaded one libpq into
 * the process (its wheel bundles its own copy); bind() finds that library
 * among the loaded objects and takes its functions from it, so both work on
 * the same PGconn structures. If no single libpq is loaded, or its version
 * is not the one psycopg reports, bind() fails and pgsurge keeps using
 * psycopg's calls (pgsurge.fastpq decides; see there).
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

#define FASTPQ_API 1

/* libpq's public enum values (stable ABI since libpq 7.x / 14 for pipelines) */
#define PGRES_EMPTY_QUERY 0
#define PGRES_COMMAND_OK 1
#define PGRES_TUPLES_OK 2
#define PG_DIAG_SQLSTATE 'C'

typedef struct pg_conn PGconn;
typedef struct pg_result PGresult;

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
    return 1;
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
    {"drain", (PyCFunction)(void (*)(void))fastpq_drain, METH_FASTCALL, drain_doc},
    {"socket", (PyCFunction)fastpq_socket, METH_O, socket_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef fastpq_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "pgsurge._fastpq",
    .m_doc = "Fused per-transaction libpq calls on psycopg's own libpq "
             "(optional; see pgsurge.fastpq).",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC
PyInit__fastpq(void)
{
    PyObject *m = PyModule_Create(&fastpq_module);

    if (m == NULL)
        return NULL;
    if (PyModule_AddIntConstant(m, "API_VERSION", FASTPQ_API) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}

/*
 * pgsurge._fastloop: the plan of pgsurge.engine.fastloop (plain tuples) as C ops.
 *
 * plan_for() decided which scripts C may run and turned each command into
 * a tuple; here each tuple is checked and becomes an fl_op. The ops point
 * into the plan's bytes, which the FastLoop keeps alive.
 */

#include "_fastloop.h"

static void
goto_bad(void)
{
    PyErr_SetString(PyExc_ValueError, "malformed fast loop plan");
}

/* the variables an expression reads are the plan's */
static int
check_slots(FastLoop *fl, const fl_op *op)
{
    int i;

    for (i = 0; i < op->ncode; i++)
        if (op->code[i].code == 1 /* X_VAR */ && op->code[i].arg >= fl->nvars) {
            goto_bad();
            return -1;
        }
    return 0;
}

int
fl_parse_op(FastLoop *fl, PyObject *spec, fl_op *op, int *nprep)
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
    case OP_SET_EXPR:
        /* (6, slot, program) */
        if (PyTuple_GET_SIZE(spec) != 3)
            goto bad;
        op->slot = (int)PyLong_AsLong(PyTuple_GET_ITEM(spec, 1));
        if (PyErr_Occurred())
            return -1;
        if (op->slot < 0 || op->slot >= fl->nset)
            goto bad;
        return fl_parse_code(PyTuple_GET_ITEM(spec, 2), op) < 0 ||
                       check_slots(fl, op) < 0
                   ? -1
                   : 0;
    case OP_IF:
        /* (7, program, false_next, false_to_elif, end_next, is_elif) */
        if (PyTuple_GET_SIZE(spec) != 6)
            goto bad;
        op->false_next = (int)PyLong_AsLong(PyTuple_GET_ITEM(spec, 2));
        op->false_to_elif = (int)PyLong_AsLong(PyTuple_GET_ITEM(spec, 3));
        op->end_next = (int)PyLong_AsLong(PyTuple_GET_ITEM(spec, 4));
        op->is_elif = (int)PyLong_AsLong(PyTuple_GET_ITEM(spec, 5));
        if (PyErr_Occurred())
            return -1;
        return fl_parse_code(PyTuple_GET_ITEM(spec, 1), op) < 0 ||
                       check_slots(fl, op) < 0
                   ? -1
                   : 0;
    case OP_ELSE:
        /* (8, end_next) */
        if (PyTuple_GET_SIZE(spec) != 2)
            goto bad;
        op->end_next = (int)PyLong_AsLong(PyTuple_GET_ITEM(spec, 1));
        return PyErr_Occurred() ? -1 : 0;
    case OP_ENDIF:
    case OP_PY:
    case OP_PYONLY:
    case OP_PSTART:
    case OP_PSYNC:
    case OP_PEND:
        return PyTuple_GET_SIZE(spec) == 1 ? 0 : (goto_bad(), -1);
    case OP_SQL:
        /* (3, text, params, literal parts or None[, gset, prefix[, sql]]) */
        if ((PyTuple_GET_SIZE(spec) != 4 && PyTuple_GET_SIZE(spec) != 6 &&
             PyTuple_GET_SIZE(spec) != 7) ||
            !PyBytes_Check(PyTuple_GET_ITEM(spec, 1)) ||
            !PyTuple_Check(PyTuple_GET_ITEM(spec, 2)))
            goto bad;
        if (PyTuple_GET_SIZE(spec) >= 6) {
            op->gset = (int)PyLong_AsLong(PyTuple_GET_ITEM(spec, 4));
            op->prefix = PyTuple_GET_ITEM(spec, 5);
            if (PyErr_Occurred())
                return -1;
            if (op->gset < GSET_NONE || op->gset > GSET_ALL || !PyUnicode_Check(op->prefix))
                goto bad;
            if (op->gset == GSET_NONE)
                op->prefix = NULL;
            else if (fl->slot_of == NULL)
                goto bad;
        }
        if (PyTuple_GET_SIZE(spec) == 7) {
            /* -M prepared: the statement, for C's prepares under -C */
            PyObject *sql = PyTuple_GET_ITEM(spec, 6);

            if (!PyBytes_Check(sql))
                goto bad;
            if (PyBytes_GET_SIZE(sql) > 0)
                op->sql = PyBytes_AS_STRING(sql);
        }
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
        if (*nprep >= INT_MAX / 2)
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

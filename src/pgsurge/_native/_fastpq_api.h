/*
 * The libpq entry points pgsurge._fastpq has bound, for other extensions.
 *
 * pgsurge._fastpq finds the one libpq psycopg loaded and takes its
 * functions from it (see _fastpq.c). pgsurge._fastloop needs the same
 * functions on the same PGconn structures; rather than search the process
 * a second time, it reads them from this table, which _fastpq publishes as
 * the capsule PGSURGE_FASTPQ_CAPSULE. The pointers are set once bind()
 * has succeeded (``bound`` is then 1) and never change afterwards.
 */
#ifndef PGSURGE_FASTPQ_API_H
#define PGSURGE_FASTPQ_API_H

#define PGSURGE_FASTPQ_CAPSULE "pgsurge._fastpq._C_API"
/* bumped whenever the table below changes */
#define PGSURGE_FASTPQ_TABLE_VERSION 4

typedef struct pg_conn PGconn;
typedef struct pg_result PGresult;

typedef struct {
    int version;
    int bound;
    int (*sendQueryPrepared)(PGconn *, const char *, int, const char *const *,
                             const int *, const int *, int);
    int (*sendQueryParams)(PGconn *, const char *, int, const void *,
                           const char *const *, const int *, const int *, int);
    int (*sendQuery)(PGconn *, const char *);
    int (*flush)(PGconn *);
    int (*consumeInput)(PGconn *);
    int (*isBusy)(PGconn *);
    PGresult *(*getResult)(PGconn *);
    int (*resultStatus)(const PGresult *);
    char *(*resultErrorMessage)(const PGresult *);
    char *(*resultErrorField)(const PGresult *, int);
    void (*clear)(PGresult *);
    int (*transactionStatus)(const PGconn *);
    /* reading a \gset's row */
    int (*ntuples)(const PGresult *);
    int (*nfields)(const PGresult *);
    char *(*fname)(const PGresult *, int);
    char *(*getvalue)(const PGresult *, int, int);
    int (*getlength)(const PGresult *, int, int);
    int (*getisnull)(const PGresult *, int, int);
    /* pipelines (\startpipeline, \syncpipeline, \endpipeline) */
    int (*enterPipelineMode)(PGconn *);
    int (*exitPipelineMode)(PGconn *);
    int (*pipelineSync)(PGconn *);
    /* -C: a connection per transaction, opened without blocking, and the
     * statements prepared on it */
    PGconn *(*connectStart)(const char *);
    int (*connectPoll)(PGconn *);
    int (*status)(const PGconn *);
    int (*socket)(const PGconn *);
    int (*setnonblocking)(PGconn *, int);
    void (*finish)(PGconn *);
    char *(*errorMessage)(const PGconn *);
    int (*sendPrepare)(PGconn *, const char *, const char *, int, const void *);
    /* a Python workload's result object (_fastloop_gen.c) */
    unsigned int (*ftype)(const PGresult *, int);
    char *(*cmdTuples)(PGresult *);
} pgsurge_fastpq_api;

#endif

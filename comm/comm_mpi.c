/* The MPI communicator (strata/comm.h): ranks are MPI processes.
 *
 * Nodes come from MPI_Comm_split_type(MPI_COMM_TYPE_SHARED), or, when the
 * environment variable STRATA_RANKS_PER_NODE=K is set, from consecutive
 * blocks of K ranks (several "nodes" emulated on one machine).
 *
 * Deterministic mode (the default): a reduction sums the ranks'
 * contributions in rank order, starting from +0 — ((0 + x_0) + x_1) + ... —
 * on the rank that needs the result, after gathering them, so an N-rank run
 * is bit-identical to one rank that accumulates the same N contributions in
 * the same order. Fast mode uses MPI's own reductions (MPI_Reduce,
 * MPI_Allreduce), whose order is the library's choice: results can differ in
 * the last bits from run to run and from the single-rank sum (float32
 * round-off, ~1e-7 relative per addition).
 *
 * Errors: every MPI call goes through one wrapper that turns its error code
 * into STRATA_ERR_IO with the call, file, line and MPI's message. The
 * communicator is set to MPI_ERRORS_RETURN so that an error comes back here.
 * Counters: bytes this rank sent and received, split by whether the peer is
 * on the same node.
 *
 * Non-blocking reductions (ireduce_start/ireduce_test, strata_comm_request):
 * deterministic mode, and any request with several owners, runs a chain in
 * rank order: rank 0 sends 0 + x_0 to rank 1, rank r adds its x_r to the
 * partial it received from r - 1 and sends the result to r + 1, and the last
 * rank ships the total to every owner. The sums are exactly the blocking
 * ones (((0 + x_0) + x_1) + ..., IEEE addition being commutative), each
 * rank holds one extra buffer per request (the caller's scratch, n floats)
 * instead of the owner gathering N - 1 contributions, and with nodes that
 * are blocks of consecutive ranks exactly one hop crosses each node
 * boundary, as in the hierarchical reduce_to_owners. A rank's add-and-forward
 * runs inside ireduce_test, so the chain advances when ranks call the
 * communicator (progress at each backward hook, the wait at the step).
 * Fast mode with one owner uses MPI_Ireduce. Each request gets the next tag
 * of a sequence that every rank advances alike (they start requests in the
 * same order), so concurrent requests between the same two ranks never
 * match each other's messages.
 *
 * Timeouts (issue #22 item 11): no call waits forever. Every collective and
 * message is started non-blocking (MPI_I*) and polled with MPI_Test against
 * a deadline of STRATA_COMM_TIMEOUT_S seconds (default 600; 0 waits forever,
 * with MPI's own blocking wait); a non-blocking reduction that is not done
 * that long after its start times out at the next test. On expiry the rank
 * sends a one-int notice to every other rank of the communicator on a
 * second duplicate (`ctl`) and listens for theirs for a short grace period:
 * the ranks that time out too answer, and the ones that do not are the ones
 * waited for (stopped, stalled on a disk, stuck computing, or cut off); a
 * rank that was itself stopped restarts its clock when it runs again. The
 * call then fails with STRATA_ERR_TIMEOUT naming the call, the time waited
 * and those world ranks; the caller (the trainer) prints it and ends the job
 * with MPI_Abort, so the ranks that do not answer are ended too.
 */
#include "strata/comm.h"
#include "base/env.h"

#include <mpi.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct mpi_ctx {
    MPI_Comm comm;      /* a duplicate: strata's traffic never mixes with the caller's */
    int rank, size;
    int node_rank, node_size;
    int *node_of;       /* node index of every rank */
    bool deterministic;
    bool own_init;      /* MPI_Init was called here: finalize at destroy */
    float *stage;       /* gathered contributions (size - 1 buffers) */
    size_t stage_floats;
    bool contiguous;    /* every node is a block of consecutive ranks */
    unsigned seq;       /* non-blocking requests started (tags) */
    MPI_Comm ctl;       /* a second duplicate: timeout notices only */
    int world_rank;     /* this rank in MPI_COMM_WORLD (messages) */
    int *world_of;      /* world rank of every rank (messages) */
    double timeout_s;   /* a wait longer than this fails; 0: none */
    int *notes;         /* timeout notices received (size ints; kept: pending receives) */
    uint64_t intra_own, inter_own;
    uint64_t *intra, *inter; /* bytes received + sent, by peer's node (a sub-communicator
                                counts into its parent's) */
} mpi_ctx;

static strata_status mpi_check(int rc, const char *what, const char *file, int line)
{
    if (rc == MPI_SUCCESS)
        return STRATA_OK;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    return strata_error(STRATA_ERR_IO, "%s failed (%s:%d): %s", what, file, line, msg);
}
#define MPI_TRY(expr) mpi_check((expr), #expr, __FILE__, __LINE__)

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

enum { TAG_NOTE = 7 };

/* A wait of `what` ran past the deadline: tell every other rank, listen for
 * a grace period (half the timeout, at most 2 s) for the ranks that time
 * out too, and fail naming those that did not answer. `peer` is the rank
 * waited for when the call knows it (a message), else -1. */
static strata_status timed_out(mpi_ctx *c, const char *what, int peer, double waited)
{
    static const int note = 1; /* the sends may outlive this call */
    const int N = c->size;
    const double grace = c->timeout_s < 4.0 ? c->timeout_s / 2.0 : 2.0;
    MPI_Request *rq = malloc(2 * (size_t)N * sizeof *rq);
    if (!c->notes)
        c->notes = calloc((size_t)N, sizeof *c->notes);
    char missing[256] = "", answered[256] = "";
    int n_missing = 0;
    if (rq && c->notes) {
        for (int r = 0; r < N; r++) {
            rq[r] = rq[N + r] = MPI_REQUEST_NULL;
            if (r == c->rank)
                continue;
            MPI_Irecv(&c->notes[r], 1, MPI_INT, r, TAG_NOTE, c->ctl, &rq[r]);
            MPI_Isend(&note, 1, MPI_INT, r, TAG_NOTE, c->ctl, &rq[N + r]);
        }
        const double t0 = now_s();
        int all = 0;
        while (!all && now_s() - t0 < grace) {
            MPI_Testall(N, rq, &all, MPI_STATUSES_IGNORE); /* the receives only */
            if (!all) {
                struct timespec ts = {0, 1000000};
                nanosleep(&ts, NULL);
            }
        }
        for (int r = 0; r < N; r++) {
            if (r == c->rank)
                continue;
            int got = rq[r] == MPI_REQUEST_NULL;
            if (!got)
                MPI_Test(&rq[r], &got, MPI_STATUS_IGNORE);
            char *list = got ? answered : missing;
            size_t len = strlen(list);
            if (len < sizeof missing - 16)
                snprintf(list + len, sizeof missing - len, "%s%d", len ? ", " : "",
                         c->world_of[r]);
            n_missing += !got;
        }
    }
    free(rq); /* the requests left pending are never waited on: the job ends */
    char peer_s[32] = "";
    if (peer >= 0)
        snprintf(peer_s, sizeof peer_s, " for rank %d", c->world_of[peer]);
    return strata_error(STRATA_ERR_TIMEOUT,
                        "mpi comm: rank %d waited %.1f s in %s%s (STRATA_COMM_TIMEOUT_S=%g); "
                        "%s%s%s%s%s; raise STRATA_COMM_TIMEOUT_S, or 0 to wait forever",
                        c->world_rank, waited, what, peer_s, c->timeout_s,
                        n_missing ? (n_missing > 1 ? "not answering: ranks " :
                                                     "not answering: rank ") :
                                    "every rank answered (each waits for another)",
                        missing, *answered ? " (timed out too: " : "", answered,
                        *answered ? ")" : "");
}

/* Wait for n requests, at most the communicator's timeout. Spins for the
 * first millisecond, then yields the core between tests (an oversubscribed
 * machine's ranks need it), then sleeps 50 us between tests after 20 ms. */
static strata_status wait_all(mpi_ctx *c, int n, MPI_Request *req, const char *what, int peer)
{
    if (c->timeout_s <= 0)
        return MPI_TRY(MPI_Waitall(n, req, MPI_STATUSES_IGNORE));
    double t0 = now_s(), last = t0;
    for (;;) {
        int flag = 0;
        strata_status st = MPI_TRY(MPI_Testall(n, req, &flag, MPI_STATUSES_IGNORE));
        if (st != STRATA_OK || flag)
            return st;
        const double now = now_s();
        if (now - last > 1.0) /* this rank itself did not run (stopped): the clock restarts */
            t0 = now;
        last = now;
        const double t = now - t0;
        if (t > c->timeout_s)
            return timed_out(c, what, peer, t);
        if (t > 0.02) {
            struct timespec ts = {0, 50000};
            nanosleep(&ts, NULL);
        } else if (t > 0.001) {
            sched_yield();
        }
    }
}

/* A started call (`st`, the start's status; it filled *rq): wait for it. */
static strata_status started(mpi_ctx *c, strata_status st, MPI_Request *rq, const char *what,
                             int peer)
{
    return st == STRATA_OK ? wait_all(c, 1, rq, what, peer) : st;
}

static void count(mpi_ctx *c, int peer, size_t bytes)
{
    if (c->node_of[peer] == c->node_of[c->rank])
        *c->intra += bytes;
    else
        *c->inter += bytes;
}

static int m_rank(void *ctx) { return ((mpi_ctx *)ctx)->rank; }
static int m_size(void *ctx) { return ((mpi_ctx *)ctx)->size; }
static int m_node_rank(void *ctx) { return ((mpi_ctx *)ctx)->node_rank; }
static int m_node_size(void *ctx) { return ((mpi_ctx *)ctx)->node_size; }

static strata_status stage_reserve(mpi_ctx *c, size_t floats)
{
    if (floats <= c->stage_floats)
        return STRATA_OK;
    float *s = realloc(c->stage, floats * sizeof(float));
    if (!s)
        return strata_error(STRATA_ERR_NOMEM, "mpi comm: cannot stage %zu floats", floats);
    c->stage = s;
    c->stage_floats = floats;
    return STRATA_OK;
}

static strata_status m_allreduce(void *ctx, double *vals, int n, strata_reduce_op op)
{
    mpi_ctx *c = ctx;
    MPI_Request rq;
    if (!c->deterministic || op == STRATA_REDUCE_MAX)
        return started(c, MPI_TRY(MPI_Iallreduce(MPI_IN_PLACE, vals, n, MPI_DOUBLE,
                                                 op == STRATA_REDUCE_SUM ? MPI_SUM : MPI_MAX,
                                                 c->comm, &rq)),
                       &rq, "allreduce_f64 (MPI_Iallreduce)", -1);
    /* Gather every rank's vector, sum in rank order from +0 on every rank. */
    double *all = malloc((size_t)n * (size_t)c->size * sizeof *all);
    if (!all)
        return strata_error(STRATA_ERR_NOMEM, "mpi comm: out of memory");
    strata_status st = started(c, MPI_TRY(MPI_Iallgather(vals, n, MPI_DOUBLE, all, n, MPI_DOUBLE,
                                                         c->comm, &rq)),
                               &rq, "allreduce_f64 (MPI_Iallgather)", -1);
    if (st == STRATA_OK)
        for (int i = 0; i < n; i++) {
            double s = 0.0;
            for (int r = 0; r < c->size; r++)
                s += all[(size_t)r * n + i];
            vals[i] = s;
        }
    free(all);
    return st;
}

static strata_status m_reduce_to_owner(void *ctx, float *buf, size_t n, int owner)
{
    mpi_ctx *c = ctx;
    if (n > INT32_MAX)
        return strata_error(STRATA_ERR_INVALID_ARG, "mpi comm: %zu floats in one message", n);
    if (c->size == 1)
        return STRATA_OK;
    MPI_Request rq;
    if (!c->deterministic) {
        strata_status st = started(c, MPI_TRY(MPI_Ireduce(c->rank == owner ? MPI_IN_PLACE : buf,
                                                          c->rank == owner ? buf : NULL, (int)n,
                                                          MPI_FLOAT, MPI_SUM, owner, c->comm,
                                                          &rq)),
                                   &rq, "reduce_to_owner (MPI_Ireduce)", -1);
        if (c->rank != owner)
            count(c, owner, n * sizeof(float));
        return st;
    }
    if (c->rank != owner) {
        count(c, owner, n * sizeof(float));
        return started(c, MPI_TRY(MPI_Isend(buf, (int)n, MPI_FLOAT, owner, 17, c->comm, &rq)),
                       &rq, "reduce_to_owner (send to the owner)", owner);
    }
    strata_status st = stage_reserve(c, n * (size_t)(c->size - 1));
    if (st != STRATA_OK)
        return st;
    MPI_Request *req = malloc((size_t)c->size * sizeof *req);
    if (!req)
        return strata_error(STRATA_ERR_NOMEM, "mpi comm: out of memory");
    int k = 0;
    for (int r = 0; r < c->size && st == STRATA_OK; r++) {
        if (r == owner)
            continue;
        st = MPI_TRY(MPI_Irecv(c->stage + (size_t)k * n, (int)n, MPI_FLOAT, r, 17, c->comm,
                               &req[k]));
        if (st == STRATA_OK)
            count(c, r, n * sizeof(float));
        k++;
    }
    if (st == STRATA_OK)
        st = wait_all(c, k, req, "reduce_to_owner (the owner's receives)", -1);
    free(req);
    if (st != STRATA_OK)
        return st;
    /* ((0 + x_0) + x_1) + ... in rank order; x_owner is buf itself. */
    for (size_t i = 0; i < n; i++) {
        float s = 0.0f;
        int j = 0;
        for (int r = 0; r < c->size; r++)
            s += r == owner ? buf[i] : c->stage[(size_t)(j++) * n + i];
        buf[i] = s;
    }
    return STRATA_OK;
}

static strata_status m_broadcast(void *ctx, float *buf, size_t n, int owner)
{
    mpi_ctx *c = ctx;
    if (n > INT32_MAX)
        return strata_error(STRATA_ERR_INVALID_ARG, "mpi comm: %zu floats in one message", n);
    if (c->size == 1)
        return STRATA_OK;
    if (c->rank == owner) {
        for (int r = 0; r < c->size; r++)
            if (r != owner)
                count(c, r, n * sizeof(float));
    } else {
        count(c, owner, n * sizeof(float));
    }
    MPI_Request rq;
    return started(c, MPI_TRY(MPI_Ibcast(buf, (int)n, MPI_FLOAT, owner, c->comm, &rq)), &rq,
                   "broadcast_from_owner (MPI_Ibcast)", -1);
}

static strata_status to_int_arrays(const mpi_ctx *c, const size_t *counts, const size_t *displs,
                                   int **ic, int **id)
{
    *ic = malloc((size_t)c->size * sizeof **ic);
    *id = malloc((size_t)c->size * sizeof **id);
    if (!*ic || !*id) {
        free(*ic);
        free(*id);
        return strata_error(STRATA_ERR_NOMEM, "mpi comm: out of memory");
    }
    for (int r = 0; r < c->size; r++) {
        if (counts[r] > INT32_MAX || displs[r] > INT32_MAX) {
            free(*ic);
            free(*id);
            return strata_error(STRATA_ERR_INVALID_ARG, "mpi comm: counts past 2^31 floats");
        }
        (*ic)[r] = (int)counts[r];
        (*id)[r] = (int)displs[r];
    }
    return STRATA_OK;
}

static strata_status m_allgatherv(void *ctx, const float *send, float *recv, const size_t *counts,
                                  const size_t *displs)
{
    mpi_ctx *c = ctx;
    int *ic, *id;
    strata_status st = to_int_arrays(c, counts, displs, &ic, &id);
    if (st != STRATA_OK)
        return st;
    for (int r = 0; r < c->size; r++)
        if (r != c->rank) {
            count(c, r, counts[r] * sizeof(float));           /* received */
            count(c, r, counts[c->rank] * sizeof(float));     /* sent */
        }
    const bool in_place = send == recv + displs[c->rank];
    MPI_Request rq;
    st = started(c, MPI_TRY(MPI_Iallgatherv(in_place ? MPI_IN_PLACE : send, ic[c->rank],
                                            MPI_FLOAT, recv, ic, id, MPI_FLOAT, c->comm, &rq)),
                 &rq, "allgatherv_f32 (MPI_Iallgatherv)", -1);
    free(ic);
    free(id);
    return st;
}

/* Each rank's piece [displs[r], +counts[r]) of the rank-ordered sum. */
static strata_status m_reduce_scatter(void *ctx, const float *send, float *recv,
                                      const size_t *counts, const size_t *displs)
{
    mpi_ctx *c = ctx;
    int *ic, *id;
    strata_status st = to_int_arrays(c, counts, displs, &ic, &id);
    if (st != STRATA_OK)
        return st;
    const size_t mine = counts[c->rank];
    MPI_Request rq;
    if (!c->deterministic) {
        st = started(c, MPI_TRY(MPI_Ireduce_scatter(send, recv, ic, MPI_FLOAT, MPI_SUM, c->comm,
                                                    &rq)),
                     &rq, "reduce_scatter_f32 (MPI_Ireduce_scatter)", -1);
    } else {
        /* Every rank sends piece r to rank r (alltoallv), then sums its pieces
         * in rank order from +0. */
        int *rc = calloc((size_t)c->size, sizeof *rc), *rd = calloc((size_t)c->size, sizeof *rd);
        st = rc && rd ? stage_reserve(c, mine * (size_t)c->size + 1)
                      : strata_error(STRATA_ERR_NOMEM, "mpi comm: out of memory");
        if (st == STRATA_OK) {
            for (int r = 0; r < c->size; r++) {
                rc[r] = (int)mine;
                rd[r] = (int)(mine * (size_t)r);
            }
            st = started(c, MPI_TRY(MPI_Ialltoallv(send, ic, id, MPI_FLOAT, c->stage, rc, rd,
                                                   MPI_FLOAT, c->comm, &rq)),
                         &rq, "reduce_scatter_f32 (MPI_Ialltoallv)", -1);
        }
        if (st == STRATA_OK)
            for (size_t i = 0; i < mine; i++) {
                float s = 0.0f;
                for (int r = 0; r < c->size; r++)
                    s += c->stage[mine * (size_t)r + i];
                recv[i] = s;
            }
        free(rc);
        free(rd);
    }
    for (int r = 0; r < c->size; r++)
        if (r != c->rank) {
            count(c, r, counts[r] * sizeof(float));
            count(c, r, mine * sizeof(float));
        }
    free(ic);
    free(id);
    return st;
}

static strata_status m_barrier(void *ctx)
{
    mpi_ctx *c = ctx;
    MPI_Request rq;
    return started(c, MPI_TRY(MPI_Ibarrier(c->comm, &rq)), &rq, "barrier (MPI_Ibarrier)", -1);
}

static void m_destroy(void *ctx)
{
    mpi_ctx *c = ctx;
    if (!c)
        return;
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && c->comm != MPI_COMM_NULL)
        MPI_Comm_free(&c->comm);
    if (!finalized && c->ctl != MPI_COMM_NULL)
        MPI_Comm_free(&c->ctl);
    if (!finalized && c->own_init)
        MPI_Finalize();
    free(c->node_of);
    free(c->world_of);
    free(c->notes);
    free(c->stage);
    free(c);
}

static void m_abort(void *ctx, int code)
{
    MPI_Abort(((mpi_ctx *)ctx)->comm, code);
}

static strata_status m_bytes(void *ctx, uint64_t *intra, uint64_t *inter)
{
    mpi_ctx *c = ctx;
    *intra = *c->intra;
    *inter = *c->inter;
    return STRATA_OK;
}

/* The rank-ordered sum ((0 + x_0) + x_1) + ... of every rank's buf, delivered
 * to every listed owner. Nodes that are blocks of consecutive ranks make it
 * hierarchical without changing the order: each node's leader (its lowest
 * rank) receives the running sum from the previous node's leader (one
 * inter-node message), adds its members' contributions in rank order
 * (intra-node), and passes it on; the last leader ships the total to the
 * owners. Otherwise (or in a single node) the first owner gathers everyone
 * directly and ships the total. */
static strata_status m_reduce_to_owners(void *ctx, float *buf, size_t n, const int *owners,
                                        int n_owners)
{
    mpi_ctx *c = ctx;
    if (n > INT32_MAX)
        return strata_error(STRATA_ERR_INVALID_ARG, "mpi comm: %zu floats in one message", n);
    if (c->size == 1)
        return STRATA_OK;
    const int me = c->rank, N = c->size;
    strata_status st = STRATA_OK;
    int holder; /* the rank that ends up with the total */
    MPI_Request rq;
    if (!c->contiguous) {
        holder = owners[0];
        st = c->deterministic
                 ? m_reduce_to_owner(ctx, buf, n, holder)
                 : started(c, MPI_TRY(MPI_Ireduce(me == holder ? MPI_IN_PLACE : buf,
                                                  me == holder ? buf : NULL, (int)n, MPI_FLOAT,
                                                  MPI_SUM, holder, c->comm, &rq)),
                           &rq, "reduce_to_owners (MPI_Ireduce)", -1);
    } else {
        /* my node's block [a, b) and its leader a */
        int a = me, b = me + 1;
        while (a > 0 && c->node_of[a - 1] == c->node_of[me])
            a--;
        while (b < N && c->node_of[b] == c->node_of[me])
            b++;
        int last_a = N - 1;
        while (last_a > 0 && c->node_of[last_a - 1] == c->node_of[N - 1])
            last_a--;
        holder = last_a;
        if (me != a) {
            count(c, a, n * sizeof(float));
            st = started(c, MPI_TRY(MPI_Isend(buf, (int)n, MPI_FLOAT, a, 19, c->comm, &rq)),
                         &rq, "reduce_to_owners (send to the node leader)", a);
        } else {
            const int members = b - a - 1;
            st = stage_reserve(c, n * (size_t)(members + 1));
            float *prev = c->stage + n * (size_t)members;
            MPI_Request req[64];
            int k = 0;
            for (int r = a + 1; r < b && st == STRATA_OK && k < 64; r++, k++) {
                st = MPI_TRY(MPI_Irecv(c->stage + n * (size_t)k, (int)n, MPI_FLOAT, r, 19,
                                       c->comm, &req[k]));
                count(c, r, n * sizeof(float));
            }
            if (st == STRATA_OK && members > 64)
                st = strata_error(STRATA_ERR_UNSUPPORTED, "mpi comm: > 65 ranks on one node");
            if (st == STRATA_OK && a > 0) {
                int pa = a - 1;
                while (pa > 0 && c->node_of[pa - 1] == c->node_of[a - 1])
                    pa--;
                count(c, pa, n * sizeof(float));
                st = started(c, MPI_TRY(MPI_Irecv(prev, (int)n, MPI_FLOAT, pa, 19, c->comm,
                                                  &rq)),
                             &rq, "reduce_to_owners (the previous node's partial sum)", pa);
            }
            if (st == STRATA_OK)
                st = wait_all(c, k, req, "reduce_to_owners (the node members' sums)", -1);
            if (st == STRATA_OK)
                for (size_t i = 0; i < n; i++) {
                    float s = a > 0 ? prev[i] : 0.0f;
                    s += buf[i];
                    for (int j = 0; j < members; j++)
                        s += c->stage[n * (size_t)j + i];
                    buf[i] = s;
                }
            if (st == STRATA_OK && b < N) {
                count(c, b, n * sizeof(float));
                st = started(c, MPI_TRY(MPI_Isend(buf, (int)n, MPI_FLOAT, b, 19, c->comm, &rq)),
                             &rq, "reduce_to_owners (send to the next node)", b);
            }
        }
    }
    /* Ship the total from the holder to the other owners. */
    for (int k = 0; k < n_owners && st == STRATA_OK; k++) {
        const int o = owners[k];
        if (o == holder)
            continue;
        if (me == holder) {
            count(c, o, n * sizeof(float));
            st = started(c, MPI_TRY(MPI_Isend(buf, (int)n, MPI_FLOAT, o, 23, c->comm, &rq)),
                         &rq, "reduce_to_owners (ship the total to an owner)", o);
        } else if (me == o) {
            count(c, holder, n * sizeof(float));
            st = started(c, MPI_TRY(MPI_Irecv(buf, (int)n, MPI_FLOAT, holder, 23, c->comm,
                                              &rq)),
                         &rq, "reduce_to_owners (the total)", holder);
        }
    }
    return st;
}

/* ---- non-blocking reduce-to-owners (see the top of the file) */

enum { NB_RECV = 1, NB_SEND, NB_SHIP, NB_FAST };
enum { NB_TAG0 = 1000, NB_TAGS = 30000 }; /* tags 1000..30999 <= MPI_TAG_UB (>= 32767) */

_Static_assert(2 * sizeof(MPI_Request) <= 2 * sizeof(void *) && sizeof(double) <= sizeof(void *),
               "strata_comm_request.impl holds two MPI requests and the start time");

static MPI_Request *nb_mpi(strata_comm_request *q)
{
    return (MPI_Request *)(void *)q->impl;
}

/* The request's start time (kept in impl[2]). */
static double nb_t0(const strata_comm_request *q)
{
    double t;
    memcpy(&t, &q->impl[2], sizeof t);
    return t;
}

static const char *nb_phase_name(int phase)
{
    switch (phase) {
    case NB_RECV: return "ireduce (the previous rank's partial sum)";
    case NB_SEND: return "ireduce (forward to the next rank, or the owner's total)";
    case NB_SHIP: return "ireduce (ship the total to an owner)";
    default: return "ireduce (MPI_Ireduce)";
    }
}

/* Not done yet: fine until the timeout after the start. */
static strata_status nb_pending(mpi_ctx *c, strata_comm_request *q)
{
    const double t = now_s() - nb_t0(q);
    if (c->timeout_s <= 0 || t <= c->timeout_s)
        return STRATA_OK;
    const int peer = q->phase == NB_RECV ? c->rank - 1 : q->phase == NB_SEND ? c->rank + 1 : -1;
    return timed_out(c, nb_phase_name(q->phase), peer, t);
}

static bool nb_is_owner(const strata_comm_request *q, int rank)
{
    for (int k = 0; k < q->n_owners; k++)
        if (q->owners[k] == rank)
            return true;
    return false;
}

/* After the add: forward the partial, and an owner that is not the last rank
 * posts the receive of the total into its (now free) scratch. */
static strata_status nb_forward(mpi_ctx *c, strata_comm_request *q)
{
    MPI_Request *mr = nb_mpi(q);
    const int n = (int)q->n, last = c->size - 1;
    const size_t bytes = q->n * sizeof(float);
    count(c, c->rank + 1, bytes);
    strata_status st = MPI_TRY(MPI_Isend(q->buf, n, MPI_FLOAT, c->rank + 1, q->tag, c->comm,
                                         &mr[0]));
    if (st == STRATA_OK && nb_is_owner(q, c->rank)) {
        count(c, last, bytes);
        st = MPI_TRY(MPI_Irecv(q->scratch, n, MPI_FLOAT, last, q->tag, c->comm, &mr[1]));
    }
    q->phase = NB_SEND;
    return st;
}

static strata_status m_ireduce_start(void *ctx, strata_comm_request *q)
{
    mpi_ctx *c = ctx;
    MPI_Request *mr = nb_mpi(q);
    mr[0] = mr[1] = MPI_REQUEST_NULL;
    if (q->n > INT32_MAX)
        return strata_error(STRATA_ERR_INVALID_ARG, "mpi comm: %zu floats in one message", q->n);
    q->tag = NB_TAG0 + (int)(c->seq++ % NB_TAGS);
    const double t0 = now_s();
    memcpy(&q->impl[2], &t0, sizeof t0);
    if (c->size == 1) {
        q->done = true;
        return STRATA_OK;
    }
    const int n = (int)q->n, me = c->rank;
    if (!c->deterministic && q->n_owners == 1) {
        const int owner = q->owners[0];
        if (me != owner)
            count(c, owner, q->n * sizeof(float));
        q->phase = NB_FAST;
        return MPI_TRY(MPI_Ireduce(me == owner ? MPI_IN_PLACE : q->buf, me == owner ? q->buf : NULL,
                                   n, MPI_FLOAT, MPI_SUM, owner, c->comm, &mr[0]));
    }
    if (me == 0) {
        for (size_t i = 0; i < q->n; i++)
            q->buf[i] = 0.0f + q->buf[i]; /* the sum starts from +0, as the blocking one */
        return nb_forward(c, q);
    }
    count(c, me - 1, q->n * sizeof(float));
    q->phase = NB_RECV;
    return MPI_TRY(MPI_Irecv(q->scratch, n, MPI_FLOAT, me - 1, q->tag, c->comm, &mr[0]));
}

static strata_status m_ireduce_test(void *ctx, strata_comm_request *q)
{
    mpi_ctx *c = ctx;
    MPI_Request *mr = nb_mpi(q);
    const int last = c->size - 1;
    strata_status st = STRATA_OK;
    int flag = 0;
    while (!q->done && st == STRATA_OK) {
        switch (q->phase) {
        case NB_RECV: /* the partial sum of ranks 0..me-1 */
            st = MPI_TRY(MPI_Test(&mr[0], &flag, MPI_STATUS_IGNORE));
            if (st != STRATA_OK || !flag)
                return st != STRATA_OK ? st : nb_pending(c, q);
            for (size_t i = 0; i < q->n; i++)
                q->buf[i] = q->scratch[i] + q->buf[i];
            if (c->rank < last) {
                st = nb_forward(c, q);
            } else {
                q->phase = NB_SHIP;
                q->next_owner = 0;
            }
            break;
        case NB_SEND: /* the forward, and an owner's total */
            st = MPI_TRY(MPI_Testall(2, mr, &flag, MPI_STATUSES_IGNORE));
            if (st != STRATA_OK || !flag)
                return st != STRATA_OK ? st : nb_pending(c, q);
            if (nb_is_owner(q, c->rank))
                memcpy(q->buf, q->scratch, q->n * sizeof(float));
            q->done = true;
            break;
        case NB_SHIP: /* the last rank: the total to each owner, one at a time */
            st = MPI_TRY(MPI_Test(&mr[0], &flag, MPI_STATUS_IGNORE));
            if (st != STRATA_OK || !flag)
                return st != STRATA_OK ? st : nb_pending(c, q);
            while (q->next_owner < q->n_owners && q->owners[q->next_owner] == c->rank)
                q->next_owner++;
            if (q->next_owner == q->n_owners) {
                q->done = true;
                break;
            }
            {
                const int o = q->owners[q->next_owner++];
                count(c, o, q->n * sizeof(float));
                st = MPI_TRY(MPI_Isend(q->buf, (int)q->n, MPI_FLOAT, o, q->tag, c->comm,
                                       &mr[0]));
            }
            break;
        case NB_FAST:
            st = MPI_TRY(MPI_Test(&mr[0], &flag, MPI_STATUS_IGNORE));
            if (st != STRATA_OK || !flag)
                return st != STRATA_OK ? st : nb_pending(c, q);
            q->done = true;
            break;
        default:
            return strata_error(STRATA_ERR_INTERNAL, "mpi comm: request in phase %d", q->phase);
        }
    }
    return st;
}

static strata_status ctx_finish(mpi_ctx *c)
{
    c->contiguous = true;
    for (int r = 1; r < c->size; r++)
        if (c->node_of[r] != c->node_of[r - 1])
            for (int q = 0; q < r - 1; q++)
                if (c->node_of[q] == c->node_of[r])
                    c->contiguous = false;
    c->node_rank = c->node_size = 0;
    for (int r = 0; r < c->size; r++) {
        if (c->node_of[r] == c->node_of[c->rank]) {
            if (r < c->rank)
                c->node_rank++;
            c->node_size++;
        }
    }
    return STRATA_OK;
}

static const strata_comm_iface mpi_iface;

static strata_status m_split(void *ctx, int color, int key, strata_comm **out)
{
    mpi_ctx *p = ctx;
    mpi_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return strata_error(STRATA_ERR_NOMEM, "mpi comm: out of memory");
    c->comm = c->ctl = MPI_COMM_NULL;
    c->deterministic = p->deterministic;
    c->intra = p->intra;
    c->inter = p->inter;
    c->timeout_s = p->timeout_s;
    c->world_rank = p->world_rank;
    strata_status st = MPI_TRY(MPI_Comm_split(p->comm, color, key, &c->comm));
    if (st == STRATA_OK)
        st = MPI_TRY(MPI_Comm_dup(c->comm, &c->ctl));
    if (st == STRATA_OK) {
        MPI_Comm_set_errhandler(c->comm, MPI_ERRORS_RETURN);
        MPI_Comm_set_errhandler(c->ctl, MPI_ERRORS_RETURN);
        MPI_Comm_rank(c->comm, &c->rank);
        MPI_Comm_size(c->comm, &c->size);
        c->node_of = calloc((size_t)c->size, sizeof *c->node_of);
        c->world_of = calloc((size_t)c->size, sizeof *c->world_of);
        st = c->node_of && c->world_of
                 ? MPI_TRY(MPI_Allgather(&p->node_of[p->rank], 1, MPI_INT, c->node_of, 1,
                                         MPI_INT, c->comm))
                 : strata_error(STRATA_ERR_NOMEM, "mpi comm: out of memory");
        if (st == STRATA_OK)
            st = MPI_TRY(MPI_Allgather(&c->world_rank, 1, MPI_INT, c->world_of, 1, MPI_INT,
                                       c->comm));
    }
    if (st == STRATA_OK)
        st = ctx_finish(c);
    if (st == STRATA_OK)
        st = strata_comm_create(&mpi_iface, c, out);
    if (st != STRATA_OK) {
        if (c->comm != MPI_COMM_NULL)
            MPI_Comm_free(&c->comm);
        if (c->ctl != MPI_COMM_NULL)
            MPI_Comm_free(&c->ctl);
        free(c->node_of);
        free(c->world_of);
        free(c);
    }
    return st;
}

static const strata_comm_iface mpi_iface = {
    .version = STRATA_COMM_IFACE_VERSION,
    .name = "mpi",
    .rank = m_rank,
    .size = m_size,
    .node_rank = m_node_rank,
    .node_size = m_node_size,
    .allreduce_f64 = m_allreduce,
    .reduce_to_owner = m_reduce_to_owner,
    .broadcast_from_owner = m_broadcast,
    .allgatherv_f32 = m_allgatherv,
    .reduce_scatter_f32 = m_reduce_scatter,
    .barrier = m_barrier,
    .reduce_to_owners = m_reduce_to_owners,
    .split = m_split,
    .bytes = m_bytes,
    .abort = m_abort,
    .destroy = m_destroy,
    .ireduce_start = m_ireduce_start,
    .ireduce_test = m_ireduce_test,
};

strata_status strata_comm_mpi_create(const void *mpi_comm, bool deterministic, strata_comm **out)
{
    if (!out)
        return strata_error(STRATA_ERR_INVALID_ARG, "comm_mpi_create: out is NULL");
    *out = NULL;
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited && mpi_comm)
        return strata_error(STRATA_ERR_STATE, "comm_mpi_create: MPI is not initialized");
    if (!inited) {
        int provided = 0;
        strata_status st = MPI_TRY(MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided));
        if (st != STRATA_OK)
            return st;
    }
    mpi_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return strata_error(STRATA_ERR_NOMEM, "comm_mpi_create: out of memory");
    c->comm = c->ctl = MPI_COMM_NULL;
    c->own_init = !inited;
    c->intra = &c->intra_own;
    c->inter = &c->inter_own;
    c->deterministic = deterministic;
    MPI_Comm base = mpi_comm ? *(const MPI_Comm *)mpi_comm : MPI_COMM_WORLD;
    strata_status st = MPI_TRY(MPI_Comm_dup(base, &c->comm));
    if (st != STRATA_OK) {
        m_destroy(c);
        return st;
    }
    st = MPI_TRY(MPI_Comm_dup(base, &c->ctl));
    if (st != STRATA_OK) {
        m_destroy(c);
        return st;
    }
    MPI_Comm_set_errhandler(c->comm, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(c->ctl, MPI_ERRORS_RETURN);
    MPI_Comm_rank(c->comm, &c->rank);
    MPI_Comm_size(c->comm, &c->size);
    MPI_Comm_rank(MPI_COMM_WORLD, &c->world_rank);
    c->node_of = calloc((size_t)c->size, sizeof *c->node_of);
    c->world_of = calloc((size_t)c->size, sizeof *c->world_of);
    if (!c->node_of || !c->world_of) {
        m_destroy(c);
        return strata_error(STRATA_ERR_NOMEM, "comm_mpi_create: out of memory");
    }
    long timeout;
    bool timeout_set;
    st = strata_env_int(STRATA_ENV_COMM_TIMEOUT_S, 600, &timeout, &timeout_set);
    if (st != STRATA_OK) {
        char why[256];
        snprintf(why, sizeof why, "%s", strata_last_error());
        m_destroy(c);
        return strata_error(st, "comm_mpi_create: %s", why);
    }
    c->timeout_s = (double)timeout;
    st = MPI_TRY(MPI_Allgather(&c->world_rank, 1, MPI_INT, c->world_of, 1, MPI_INT, c->comm));
    if (st != STRATA_OK) {
        m_destroy(c);
        return st;
    }
    long per;
    bool per_set;
    st = strata_env_int(STRATA_ENV_RANKS_PER_NODE, 0, &per, &per_set);
    if (st != STRATA_OK) { /* a bad value is refused (base/env.h names it) */
        char why[256];
        snprintf(why, sizeof why, "%s", strata_last_error());
        m_destroy(c);
        return strata_error(st, "comm_mpi_create: %s", why);
    }
    if (per > 0) {
        for (int r = 0; r < c->size; r++)
            c->node_of[r] = (int)(r / per);
    } else {
        /* Shared-memory groups; a group's node index is its lowest world rank. */
        MPI_Comm node;
        st = MPI_TRY(MPI_Comm_split_type(c->comm, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL,
                                         &node));
        int leader = c->rank;
        if (st == STRATA_OK) {
            st = MPI_TRY(MPI_Allreduce(MPI_IN_PLACE, &leader, 1, MPI_INT, MPI_MIN, node));
            MPI_Comm_free(&node);
        }
        if (st == STRATA_OK)
            st = MPI_TRY(MPI_Allgather(&leader, 1, MPI_INT, c->node_of, 1, MPI_INT, c->comm));
        if (st != STRATA_OK) {
            m_destroy(c);
            return st;
        }
    }
    ctx_finish(c);
    st = strata_comm_create(&mpi_iface, c, out);
    if (st != STRATA_OK)
        m_destroy(c);
    return st;
}

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
 */
#include "strata/comm.h"
#include "base/env.h"

#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    if (!c->deterministic || op == STRATA_REDUCE_MAX)
        return MPI_TRY(MPI_Allreduce(MPI_IN_PLACE, vals, n, MPI_DOUBLE,
                                     op == STRATA_REDUCE_SUM ? MPI_SUM : MPI_MAX, c->comm));
    /* Gather every rank's vector, sum in rank order from +0 on every rank. */
    double *all = malloc((size_t)n * (size_t)c->size * sizeof *all);
    if (!all)
        return strata_error(STRATA_ERR_NOMEM, "mpi comm: out of memory");
    strata_status st = MPI_TRY(MPI_Allgather(vals, n, MPI_DOUBLE, all, n, MPI_DOUBLE, c->comm));
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
    if (!c->deterministic) {
        strata_status st = MPI_TRY(MPI_Reduce(c->rank == owner ? MPI_IN_PLACE : buf,
                                              c->rank == owner ? buf : NULL, (int)n, MPI_FLOAT,
                                              MPI_SUM, owner, c->comm));
        if (c->rank != owner)
            count(c, owner, n * sizeof(float));
        return st;
    }
    if (c->rank != owner) {
        count(c, owner, n * sizeof(float));
        return MPI_TRY(MPI_Send(buf, (int)n, MPI_FLOAT, owner, 17, c->comm));
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
        st = MPI_TRY(MPI_Waitall(k, req, MPI_STATUSES_IGNORE));
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
    return MPI_TRY(MPI_Bcast(buf, (int)n, MPI_FLOAT, owner, c->comm));
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
    st = MPI_TRY(MPI_Allgatherv(in_place ? MPI_IN_PLACE : send, ic[c->rank], MPI_FLOAT, recv, ic,
                                id, MPI_FLOAT, c->comm));
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
    if (!c->deterministic) {
        st = MPI_TRY(MPI_Reduce_scatter(send, recv, ic, MPI_FLOAT, MPI_SUM, c->comm));
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
            st = MPI_TRY(MPI_Alltoallv(send, ic, id, MPI_FLOAT, c->stage, rc, rd, MPI_FLOAT,
                                       c->comm));
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
    return MPI_TRY(MPI_Barrier(((mpi_ctx *)ctx)->comm));
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
    if (!finalized && c->own_init)
        MPI_Finalize();
    free(c->node_of);
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
    if (!c->contiguous) {
        holder = owners[0];
        st = c->deterministic ? m_reduce_to_owner(ctx, buf, n, holder)
                              : MPI_TRY(MPI_Reduce(me == holder ? MPI_IN_PLACE : buf,
                                                   me == holder ? buf : NULL, (int)n, MPI_FLOAT,
                                                   MPI_SUM, holder, c->comm));
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
            st = MPI_TRY(MPI_Send(buf, (int)n, MPI_FLOAT, a, 19, c->comm));
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
                st = MPI_TRY(MPI_Recv(prev, (int)n, MPI_FLOAT, pa, 19, c->comm,
                                      MPI_STATUS_IGNORE));
            }
            if (st == STRATA_OK)
                st = MPI_TRY(MPI_Waitall(k, req, MPI_STATUSES_IGNORE));
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
                st = MPI_TRY(MPI_Send(buf, (int)n, MPI_FLOAT, b, 19, c->comm));
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
            st = MPI_TRY(MPI_Send(buf, (int)n, MPI_FLOAT, o, 23, c->comm));
        } else if (me == o) {
            count(c, holder, n * sizeof(float));
            st = MPI_TRY(MPI_Recv(buf, (int)n, MPI_FLOAT, holder, 23, c->comm,
                                  MPI_STATUS_IGNORE));
        }
    }
    return st;
}

/* ---- non-blocking reduce-to-owners (see the top of the file) */

enum { NB_RECV = 1, NB_SEND, NB_SHIP, NB_FAST };
enum { NB_TAG0 = 1000, NB_TAGS = 30000 }; /* tags 1000..30999 <= MPI_TAG_UB (>= 32767) */

_Static_assert(2 * sizeof(MPI_Request) <= sizeof(((strata_comm_request *)0)->impl),
               "strata_comm_request.impl holds two MPI requests");

static MPI_Request *nb_mpi(strata_comm_request *q)
{
    return (MPI_Request *)(void *)q->impl;
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
                return st;
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
                return st;
            if (nb_is_owner(q, c->rank))
                memcpy(q->buf, q->scratch, q->n * sizeof(float));
            q->done = true;
            break;
        case NB_SHIP: /* the last rank: the total to each owner, one at a time */
            st = MPI_TRY(MPI_Test(&mr[0], &flag, MPI_STATUS_IGNORE));
            if (st != STRATA_OK || !flag)
                return st;
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
                return st;
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
    c->comm = MPI_COMM_NULL;
    c->deterministic = p->deterministic;
    c->intra = p->intra;
    c->inter = p->inter;
    strata_status st = MPI_TRY(MPI_Comm_split(p->comm, color, key, &c->comm));
    if (st == STRATA_OK) {
        MPI_Comm_set_errhandler(c->comm, MPI_ERRORS_RETURN);
        MPI_Comm_rank(c->comm, &c->rank);
        MPI_Comm_size(c->comm, &c->size);
        c->node_of = calloc((size_t)c->size, sizeof *c->node_of);
        st = c->node_of ? MPI_TRY(MPI_Allgather(&p->node_of[p->rank], 1, MPI_INT, c->node_of, 1,
                                                MPI_INT, c->comm))
                        : strata_error(STRATA_ERR_NOMEM, "mpi comm: out of memory");
    }
    if (st == STRATA_OK)
        st = ctx_finish(c);
    if (st == STRATA_OK)
        st = strata_comm_create(&mpi_iface, c, out);
    if (st != STRATA_OK) {
        if (c->comm != MPI_COMM_NULL)
            MPI_Comm_free(&c->comm);
        free(c->node_of);
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
    c->comm = MPI_COMM_NULL;
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
    MPI_Comm_set_errhandler(c->comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(c->comm, &c->rank);
    MPI_Comm_size(c->comm, &c->size);
    c->node_of = calloc((size_t)c->size, sizeof *c->node_of);
    if (!c->node_of) {
        m_destroy(c);
        return strata_error(STRATA_ERR_NOMEM, "comm_mpi_create: out of memory");
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

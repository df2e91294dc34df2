/* The NCCL communicator (comm_nccl.h): bootstrap over MPI, host buffers
 * staged through device buffers on one communication stream, and the
 * deterministic / NCCL-ordered sums described in the header.
 *
 * Life: create (collective) -> collectives in the same order on every rank
 * -> destroy (collective: ncclCommDestroy, MPI_Comm_free). Every collective
 * ends with the stream synchronized, so the host buffers hold the result on
 * return (the interface is blocking). Staging buffers only grow.
 *
 * Errors: NCCL, CUDA and MPI codes are converted at the three wrappers at the
 * top, which record the expression, file and line.
 */
#include "comm/comm_nccl.h"
#include "comm/comm_nccl_plan.h"
#include "base/env.h"

#include <cuda_runtime_api.h>
#include <mpi.h>
/* nccl.h declares `f()` for `f(void)`: not ours to fix */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static strata_status nccl_status(ncclResult_t r, const char *expr, const char *file, int line)
{
    if (r == ncclSuccess)
        return STRATA_OK;
    return strata_error(r == ncclInvalidArgument || r == ncclInvalidUsage ? STRATA_ERR_INVALID_ARG
                                                                          : STRATA_ERR_INTERNAL,
                        "%s:%d: %s failed: %s", file, line, expr, ncclGetErrorString(r));
}

static strata_status cuda_status(cudaError_t e, const char *expr, const char *file, int line)
{
    if (e == cudaSuccess)
        return STRATA_OK;
    return strata_error(e == cudaErrorMemoryAllocation ? STRATA_ERR_NOMEM : STRATA_ERR_INTERNAL,
                        "%s:%d: %s failed: %s", file, line, expr, cudaGetErrorString(e));
}

static strata_status mpi_status(int rc, const char *expr, const char *file, int line)
{
    if (rc == MPI_SUCCESS)
        return STRATA_OK;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    return strata_error(STRATA_ERR_INTERNAL, "%s:%d: %s failed: %s", file, line, expr, msg);
}

#define NC(expr)                                                                              \
    do {                                                                                      \
        strata_status s_ = nccl_status((expr), #expr, __FILE__, __LINE__);                    \
        if (s_ != STRATA_OK)                                                                  \
            return s_;                                                                        \
    } while (0)
#define CU(expr)                                                                              \
    do {                                                                                      \
        strata_status s_ = cuda_status((expr), #expr, __FILE__, __LINE__);                    \
        if (s_ != STRATA_OK)                                                                  \
            return s_;                                                                        \
    } while (0)
#define MP(expr)                                                                              \
    do {                                                                                      \
        strata_status s_ = mpi_status((expr), #expr, __FILE__, __LINE__);                     \
        if (s_ != STRATA_OK)                                                                  \
            return s_;                                                                        \
    } while (0)

/* Inside ncclGroupStart/ncclGroupEnd (review N1): a failure closes the group
 * before returning, so this thread's group depth does not stay raised (every
 * later NCCL call would be deferred and the next collective hang). */
#define NCG(expr)                                                                             \
    do {                                                                                      \
        strata_status s_ = nccl_status((expr), #expr, __FILE__, __LINE__);                    \
        if (s_ != STRATA_OK) {                                                                \
            (void)ncclGroupEnd();                                                             \
            return s_;                                                                        \
        }                                                                                     \
    } while (0)
#define CUG(expr)                                                                             \
    do {                                                                                      \
        strata_status s_ = cuda_status((expr), #expr, __FILE__, __LINE__);                    \
        if (s_ != STRATA_OK) {                                                                \
            (void)ncclGroupEnd();                                                             \
            return s_;                                                                        \
        }                                                                                     \
    } while (0)

typedef struct nccl_ctx {
    MPI_Comm world;
    int rank, size, node_rank, node_size;
    bool deterministic;
    int *node_of;           /* node id of every rank */
    strata_nccl_topo topo;
    strata_nccl_r2o plan;   /* reduce_to_owners' schedule (rebuilt per call) */
    uint64_t *intra, *inter; /* byte counters, shared with the communicators split from it */
    uint64_t counts[2];     /* the counters of a root communicator */
    ncclComm_t comm;
    ncclComm_t node_comm;   /* the ranks of my node (ncclCommSplit by node index) */
    ncclComm_t cross_comm;  /* the ranks with my node rank (node_rank 0: the node leaders) */
    cudaStream_t stream;
    void *d_send, *d_recv;  /* device staging */
    size_t cap_send, cap_recv;
    void *h_tmp;            /* host staging for the rank-order sums */
    size_t cap_tmp;
    double timeout_s;       /* a wait longer than this fails (STRATA_NCCL_TIMEOUT_S) */
    bool failed;            /* an asynchronous NCCL error or a timeout: destroy aborts */
} nccl_ctx;

static strata_status grow_dev(void **p, size_t *cap, size_t bytes)
{
    if (bytes <= *cap)
        return STRATA_OK;
    CU(cudaFree(*p));
    *p = NULL;
    *cap = 0;
    CU(cudaMalloc(p, bytes));
    *cap = bytes;
    return STRATA_OK;
}

static strata_status grow_host(nccl_ctx *c, size_t bytes)
{
    if (bytes <= c->cap_tmp)
        return STRATA_OK;
    void *p = realloc(c->h_tmp, bytes);
    if (!p)
        return strata_error(STRATA_ERR_NOMEM, "nccl comm: cannot allocate %zu bytes", bytes);
    c->h_tmp = p;
    c->cap_tmp = bytes;
    return STRATA_OK;
}

static strata_status staging(nccl_ctx *c, size_t send_bytes, size_t recv_bytes)
{
    strata_status st = grow_dev(&c->d_send, &c->cap_send, send_bytes ? send_bytes : 8);
    if (st == STRATA_OK)
        st = grow_dev(&c->d_recv, &c->cap_recv, recv_bytes ? recv_bytes : 8);
    return st;
}

static strata_status to_dev(nccl_ctx *c, void *d, const void *h, size_t bytes)
{
    if (bytes)
        CU(cudaMemcpyAsync(d, h, bytes, cudaMemcpyDefault, c->stream));
    return STRATA_OK;
}

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Wait for the stream without trusting it to finish (review N2): poll it,
 * and every communicator's asynchronous error (a dead or failed peer leaves
 * NCCL kernels spinning forever, so cudaStreamSynchronize would hang);
 * an error or c->timeout_s marks the communicator failed, and its destroy
 * then aborts (ncclCommAbort) instead of ncclCommDestroy. Errors:
 * STRATA_ERR_INTERNAL (the NCCL or CUDA error), STRATA_ERR_TIMEOUT. */
static strata_status wait_stream(nccl_ctx *c)
{
    const double t0 = mono_s();
    for (unsigned spins = 0;; spins++) {
        const cudaError_t e = cudaStreamQuery(c->stream);
        if (e == cudaSuccess)
            return STRATA_OK;
        if (e != cudaErrorNotReady) {
            c->failed = true;
            return cuda_status(e, "cudaStreamQuery", __FILE__, __LINE__);
        }
        const ncclComm_t comms[] = {c->comm, c->node_comm, c->cross_comm};
        for (size_t i = 0; i < sizeof comms / sizeof comms[0]; i++) {
            ncclResult_t ar = ncclSuccess;
            if (!comms[i])
                continue;
            const ncclResult_t r = ncclCommGetAsyncError(comms[i], &ar);
            if (r != ncclSuccess || (ar != ncclSuccess && ar != ncclInProgress)) {
                c->failed = true;
                return nccl_status(r != ncclSuccess ? r : ar, "ncclCommGetAsyncError", __FILE__,
                                   __LINE__);
            }
        }
        if (mono_s() - t0 > c->timeout_s) {
            c->failed = true;
            return strata_error(STRATA_ERR_TIMEOUT, "nccl comm: rank %d: a collective did not "
                                "complete in %.0f s (a peer stopped?); the communicator is "
                                "aborted at destroy", c->rank, c->timeout_s);
        }
        if (spins > 64) { /* about 100 us of polling, then sleep between looks */
            const struct timespec ts = {0, 20000};
            nanosleep(&ts, NULL);
        }
    }
}

/* Copy back and wait: every collective returns complete. */
static strata_status to_host(nccl_ctx *c, void *h, const void *d, size_t bytes)
{
    if (bytes)
        CU(cudaMemcpyAsync(h, d, bytes, cudaMemcpyDefault, c->stream));
    return wait_stream(c);
}

static int n_rank(void *ctx) { return ((nccl_ctx *)ctx)->rank; }
static int n_size(void *ctx) { return ((nccl_ctx *)ctx)->size; }
static int n_node_rank(void *ctx) { return ((nccl_ctx *)ctx)->node_rank; }
static int n_node_size(void *ctx) { return ((nccl_ctx *)ctx)->node_size; }

static strata_status n_allreduce_f64(void *ctx, double *vals, int n, strata_reduce_op op)
{
    nccl_ctx *c = ctx;
    const size_t bytes = (size_t)n * sizeof(double);
    if (n <= 0)
        return STRATA_OK;
    if (op == STRATA_REDUCE_MAX || !c->deterministic) {
        strata_status st = staging(c, bytes, bytes);
        if (st == STRATA_OK)
            st = to_dev(c, c->d_send, vals, bytes);
        if (st != STRATA_OK)
            return st;
        NC(ncclAllReduce(c->d_send, c->d_recv, (size_t)n, ncclDouble,
                         op == STRATA_REDUCE_MAX ? ncclMax : ncclSum, c->comm, c->stream));
        return to_host(c, vals, c->d_recv, bytes);
    }
    /* deterministic sum: gather every rank's values, add in rank order */
    strata_status st = staging(c, bytes, bytes * (size_t)c->size);
    if (st == STRATA_OK)
        st = grow_host(c, bytes * (size_t)c->size);
    if (st == STRATA_OK)
        st = to_dev(c, c->d_send, vals, bytes);
    if (st != STRATA_OK)
        return st;
    NC(ncclAllGather(c->d_send, c->d_recv, (size_t)n, ncclDouble, c->comm, c->stream));
    st = to_host(c, c->h_tmp, c->d_recv, bytes * (size_t)c->size);
    if (st != STRATA_OK)
        return st;
    const double *all = c->h_tmp;
    for (int i = 0; i < n; i++) {
        double acc = 0.0; /* rank order from +0 */
        for (int r = 0; r < c->size; r++)
            acc += all[(size_t)r * n + i];
        vals[i] = acc;
    }
    return STRATA_OK;
}

/* Gather `n` floats from every rank's d_send into `root`'s d_recv (rank r
 * at r * n) with grouped send/recv, then sum them in rank order into out. */
static strata_status gather_sum_f32(nccl_ctx *c, int root, size_t n, float *out)
{
    NC(ncclGroupStart());
    if (c->rank == root) {
        for (int r = 0; r < c->size; r++) {
            float *slot = (float *)c->d_recv + (size_t)r * n;
            if (r == root)
                CUG(cudaMemcpyAsync(slot, c->d_send, n * sizeof(float), cudaMemcpyDeviceToDevice,
                                   c->stream));
            else
                NCG(ncclRecv(slot, n, ncclFloat, r, c->comm, c->stream));
        }
    } else {
        NCG(ncclSend(c->d_send, n, ncclFloat, root, c->comm, c->stream));
    }
    NC(ncclGroupEnd());
    if (c->rank != root)
        return to_host(c, NULL, NULL, 0);
    strata_status st = to_host(c, c->h_tmp, c->d_recv, n * sizeof(float) * (size_t)c->size);
    if (st != STRATA_OK)
        return st;
    const float *all = c->h_tmp;
    for (size_t i = 0; i < n; i++) {
        float acc = 0.0f; /* rank order from +0 */
        for (int r = 0; r < c->size; r++)
            acc += all[(size_t)r * n + i];
        out[i] = acc;
    }
    return STRATA_OK;
}

static strata_status n_reduce_to_owner(void *ctx, float *buf, size_t n, int owner)
{
    nccl_ctx *c = ctx;
    const size_t bytes = n * sizeof(float);
    if (n == 0)
        return STRATA_OK;
    if (!c->deterministic) {
        strata_status st = staging(c, bytes, bytes);
        if (st == STRATA_OK)
            st = to_dev(c, c->d_send, buf, bytes);
        if (st != STRATA_OK)
            return st;
        NC(ncclReduce(c->d_send, c->d_recv, n, ncclFloat, ncclSum, owner, c->comm, c->stream));
        return c->rank == owner ? to_host(c, buf, c->d_recv, bytes) : to_host(c, NULL, NULL, 0);
    }
    strata_status st = staging(c, bytes, c->rank == owner ? bytes * (size_t)c->size : 0);
    if (st == STRATA_OK && c->rank == owner)
        st = grow_host(c, bytes * (size_t)c->size);
    if (st == STRATA_OK)
        st = to_dev(c, c->d_send, buf, bytes);
    if (st != STRATA_OK)
        return st;
    return gather_sum_f32(c, owner, n, buf);
}

static strata_status n_broadcast_from_owner(void *ctx, float *buf, size_t n, int owner)
{
    nccl_ctx *c = ctx;
    const size_t bytes = n * sizeof(float);
    if (n == 0)
        return STRATA_OK;
    strata_status st = staging(c, bytes, 0);
    if (st == STRATA_OK && c->rank == owner)
        st = to_dev(c, c->d_send, buf, bytes);
    if (st != STRATA_OK)
        return st;
    NC(ncclBroadcast(c->d_send, c->d_send, n, ncclFloat, owner, c->comm, c->stream));
    return to_host(c, buf, c->d_send, bytes);
}

static strata_status n_allgatherv_f32(void *ctx, const float *send, float *recv,
                                      const size_t *counts, const size_t *displs)
{
    nccl_ctx *c = ctx;
    size_t total = 0;
    for (int r = 0; r < c->size; r++)
        total = displs[r] + counts[r] > total ? displs[r] + counts[r] : total;
    const size_t mine = counts[c->rank] * sizeof(float);
    strata_status st = staging(c, mine, total * sizeof(float));
    if (st == STRATA_OK)
        st = to_dev(c, c->d_send, send, mine);
    if (st != STRATA_OK)
        return st;
    /* one broadcast per rank with a piece, grouped: pure data movement */
    NC(ncclGroupStart());
    for (int r = 0; r < c->size; r++)
        if (counts[r])
            NCG(ncclBroadcast(c->d_send, (float *)c->d_recv + displs[r], counts[r], ncclFloat, r,
                             c->comm, c->stream));
    NC(ncclGroupEnd());
    return to_host(c, recv, c->d_recv, total * sizeof(float));
}

static strata_status n_reduce_scatter_f32(void *ctx, const float *send, float *recv,
                                          const size_t *counts, const size_t *displs)
{
    nccl_ctx *c = ctx;
    size_t total = 0, maxc = 0;
    for (int r = 0; r < c->size; r++) {
        total = displs[r] + counts[r] > total ? displs[r] + counts[r] : total;
        maxc = counts[r] > maxc ? counts[r] : maxc;
    }
    const size_t mine = counts[c->rank];
    if (!c->deterministic) {
        strata_status st = staging(c, total * sizeof(float), mine * sizeof(float));
        if (st == STRATA_OK)
            st = to_dev(c, c->d_send, send, total * sizeof(float));
        if (st != STRATA_OK)
            return st;
        NC(ncclGroupStart());
        for (int r = 0; r < c->size; r++)
            if (counts[r])
                NCG(ncclReduce((float *)c->d_send + displs[r], c->d_recv, counts[r], ncclFloat,
                              ncclSum, r, c->comm, c->stream));
        NC(ncclGroupEnd());
        return to_host(c, recv, c->d_recv, mine * sizeof(float));
    }
    /* deterministic: each piece gathered at its rank, summed in rank order */
    strata_status st = staging(c, total * sizeof(float), mine * sizeof(float) * (size_t)c->size);
    if (st == STRATA_OK)
        st = grow_host(c, mine * sizeof(float) * (size_t)c->size);
    if (st == STRATA_OK)
        st = to_dev(c, c->d_send, send, total * sizeof(float));
    if (st != STRATA_OK)
        return st;
    NC(ncclGroupStart());
    for (int r = 0; r < c->size; r++) {
        if (!counts[r])
            continue;
        if (r == c->rank) {
            for (int q = 0; q < c->size; q++)
                NCG(ncclRecv((float *)c->d_recv + (size_t)q * mine, mine, ncclFloat, q, c->comm,
                            c->stream));
        }
        NCG(ncclSend((float *)c->d_send + displs[r], counts[r], ncclFloat, r, c->comm, c->stream));
    }
    NC(ncclGroupEnd());
    st = to_host(c, c->h_tmp, c->d_recv, mine * sizeof(float) * (size_t)c->size);
    if (st != STRATA_OK)
        return st;
    const float *all = c->h_tmp;
    for (size_t i = 0; i < mine; i++) {
        float acc = 0.0f; /* rank order from +0 */
        for (int q = 0; q < c->size; q++)
            acc += all[(size_t)q * mine + i];
        recv[i] = acc;
    }
    return STRATA_OK;
}

/* Logical bytes of one message of `bytes` with `peer` (what the schedule
 * moves, not NCCL's wire traffic: a ring or tree moves its own chunks). */
static void count(nccl_ctx *c, int peer, size_t bytes)
{
    strata_nccl_count(c->node_of, c->rank, peer, bytes, c->intra, c->inter);
}

/* Deterministic reduce_to_owners: the schedule of comm_nccl_plan.h with NCCL
 * point-to-point messages, the sums on the host in rank order. */
static strata_status r2o_deterministic(nccl_ctx *c, float *buf, size_t n)
{
    const strata_nccl_r2o *p = &c->plan;
    const size_t bytes = n * sizeof(float);
    const int me = c->rank;
    strata_status st = STRATA_OK;
    if (p->send_to >= 0) {
        st = staging(c, bytes, 0);
        if (st == STRATA_OK)
            st = to_dev(c, c->d_send, buf, bytes);
        if (st != STRATA_OK)
            return st;
        NC(ncclSend(c->d_send, n, ncclFloat, p->send_to, c->comm, c->stream));
        count(c, p->send_to, bytes);
        st = to_host(c, NULL, NULL, 0);
    } else if (p->gatherer == me) {
        const int k = p->block_b - p->block_a;
        const size_t slots = (size_t)k + 1; /* the block, then the running sum */
        st = staging(c, bytes, bytes * slots);
        if (st == STRATA_OK)
            st = grow_host(c, bytes * slots);
        if (st != STRATA_OK)
            return st;
        NC(ncclGroupStart());
        for (int j = 0; j < p->n_gather; j++) {
            const int q = p->gather_from[j];
            NCG(ncclRecv((float *)c->d_recv + (size_t)(q - p->block_a) * n, n, ncclFloat, q,
                        c->comm, c->stream));
            count(c, q, bytes);
        }
        if (p->recv_prev >= 0) {
            NCG(ncclRecv((float *)c->d_recv + (size_t)k * n, n, ncclFloat, p->recv_prev, c->comm,
                        c->stream));
            count(c, p->recv_prev, bytes);
        }
        NC(ncclGroupEnd());
        st = to_host(c, c->h_tmp, c->d_recv, bytes * slots);
        if (st != STRATA_OK)
            return st;
        const float *all = c->h_tmp;
        const float *contrib[STRATA_NCCL_MAX_GATHER + 1];
        for (int j = 0; j < k; j++)
            contrib[j] = p->block_a + j == me ? buf : all + (size_t)j * n;
        strata_nccl_sum_block(buf, n, p->recv_prev >= 0 ? all + (size_t)k * n : NULL, contrib, k);
        if (p->send_next >= 0) {
            st = to_dev(c, c->d_send, buf, bytes);
            if (st != STRATA_OK)
                return st;
            NC(ncclSend(c->d_send, n, ncclFloat, p->send_next, c->comm, c->stream));
            count(c, p->send_next, bytes);
            st = to_host(c, NULL, NULL, 0);
        }
    }
    return st;
}

/* NCCL-ordered reduce_to_owners: nodes as consecutive blocks: ncclReduce to
 * the node leader on the node communicator, then among the leaders to the
 * last one on the cross-node communicator; otherwise one ncclReduce to the
 * holder. The sum order is NCCL's (see comm_nccl.h). */
static strata_status r2o_nccl(nccl_ctx *c, float *buf, size_t n)
{
    const strata_nccl_r2o *p = &c->plan;
    const size_t bytes = n * sizeof(float);
    const int me = c->rank;
    strata_status st = staging(c, bytes, bytes);
    if (st == STRATA_OK)
        st = to_dev(c, c->d_send, buf, bytes);
    if (st != STRATA_OK)
        return st;
    const bool hier = c->topo.contiguous && c->topo.n_nodes > 1;
    if (!hier) {
        NC(ncclReduce(c->d_send, c->d_recv, n, ncclFloat, ncclSum, p->holder, c->comm,
                      c->stream));
        if (me == p->holder) {
            for (int r = 0; r < c->size; r++)
                if (r != me)
                    count(c, r, bytes);
        } else {
            count(c, p->holder, bytes);
        }
    } else {
        NC(ncclReduce(c->d_send, c->d_recv, n, ncclFloat, ncclSum, 0, c->node_comm, c->stream));
        if (me == p->gatherer) {
            for (int j = 0; j < p->n_gather; j++)
                count(c, p->gather_from[j], bytes);
            /* leaders: the cross communicator of node rank 0, ordered by rank,
             * so leader i is node i and the holder (the last leader) is root */
            NC(ncclReduce(c->d_recv, c->d_recv, n, ncclFloat, ncclSum, c->topo.n_nodes - 1,
                          c->cross_comm, c->stream));
            if (me == p->holder) {
                for (int r = 0; r < c->size; r++)
                    if (r != me && c->node_of[r] != c->node_of[me] &&
                        (r == 0 || c->node_of[r - 1] != c->node_of[r]))
                        count(c, r, bytes);
            } else {
                count(c, p->holder, bytes);
            }
        } else {
            count(c, p->gatherer, bytes);
        }
    }
    if (me == p->holder)
        return to_host(c, buf, c->d_recv, bytes);
    return to_host(c, NULL, NULL, 0);
}

/* The holder ships the total to the other owners (point-to-point). */
static strata_status r2o_ship(nccl_ctx *c, float *buf, size_t n)
{
    const strata_nccl_r2o *p = &c->plan;
    const size_t bytes = n * sizeof(float);
    if (p->n_ship == 0 && p->ship_from < 0)
        return STRATA_OK;
    strata_status st = staging(c, bytes, bytes);
    if (st != STRATA_OK)
        return st;
    if (p->n_ship > 0) {
        st = to_dev(c, c->d_send, buf, bytes);
        if (st != STRATA_OK)
            return st;
        NC(ncclGroupStart());
        for (int k = 0; k < p->n_ship; k++) {
            NCG(ncclSend(c->d_send, n, ncclFloat, p->ship_to[k], c->comm, c->stream));
            count(c, p->ship_to[k], bytes);
        }
        NC(ncclGroupEnd());
        return to_host(c, NULL, NULL, 0);
    }
    NC(ncclRecv(c->d_recv, n, ncclFloat, p->ship_from, c->comm, c->stream));
    count(c, p->ship_from, bytes);
    return to_host(c, buf, c->d_recv, bytes);
}

static strata_status n_reduce_to_owners(void *ctx, float *buf, size_t n, const int *owners,
                                        int n_owners)
{
    nccl_ctx *c = ctx;
    if (n == 0 || c->size == 1)
        return STRATA_OK;
    strata_status st = strata_nccl_r2o_plan(&c->topo, c->node_of, owners, n_owners, &c->plan);
    if (st == STRATA_OK)
        st = c->deterministic ? r2o_deterministic(c, buf, n) : r2o_nccl(c, buf, n);
    if (st == STRATA_OK)
        st = r2o_ship(c, buf, n);
    return st;
}

static strata_status n_bytes(void *ctx, uint64_t *intra, uint64_t *inter)
{
    nccl_ctx *c = ctx;
    *intra = *c->intra;
    *inter = *c->inter;
    return STRATA_OK;
}

/* Abort (review N2): the NCCL communicators first (their kernels stop, no
 * rank waits in them), then the MPI job. */
static void n_abort(void *ctx, int code)
{
    nccl_ctx *c = ctx;
    if (c->cross_comm)
        (void)ncclCommAbort(c->cross_comm);
    if (c->node_comm)
        (void)ncclCommAbort(c->node_comm);
    if (c->comm)
        (void)ncclCommAbort(c->comm);
    c->cross_comm = c->node_comm = c->comm = NULL;
    MPI_Abort(c->world, code);
}

static strata_status n_barrier(void *ctx)
{
    nccl_ctx *c = ctx;
    strata_status st = wait_stream(c);
    if (st != STRATA_OK)
        return st;
    MP(MPI_Barrier(c->world));
    return STRATA_OK;
}

/* ncclCommDestroy waits for the communicator's work, so a failed one
 * (asynchronous error, timeout) is aborted instead (review N2). */
static void comm_end(ncclComm_t comm, bool failed)
{
    if (comm)
        (void)(failed ? ncclCommAbort(comm) : ncclCommDestroy(comm));
}

static void n_destroy(void *ctx)
{
    nccl_ctx *c = ctx;
    if (!c)
        return;
    if (c->stream && !c->failed && wait_stream(c) != STRATA_OK)
        c->failed = true;
    comm_end(c->cross_comm, c->failed);
    comm_end(c->node_comm, c->failed);
    comm_end(c->comm, c->failed);
    if (c->stream)
        cudaStreamDestroy(c->stream);
    cudaFree(c->d_send);
    cudaFree(c->d_recv);
    free(c->h_tmp);
    free(c->node_of);
    if (c->world != MPI_COMM_NULL)
        MPI_Comm_free(&c->world);
    free(c);
}

static strata_status n_split(void *ctx, int color, int key, strata_comm **out);

static const strata_comm_iface nccl_iface = {
    .version = STRATA_COMM_IFACE_VERSION,
    .name = "nccl",
    .rank = n_rank,
    .size = n_size,
    .node_rank = n_node_rank,
    .node_size = n_node_size,
    .allreduce_f64 = n_allreduce_f64,
    .reduce_to_owner = n_reduce_to_owner,
    .broadcast_from_owner = n_broadcast_from_owner,
    .allgatherv_f32 = n_allgatherv_f32,
    .reduce_scatter_f32 = n_reduce_scatter_f32,
    .barrier = n_barrier,
    .reduce_to_owners = n_reduce_to_owners,
    .split = n_split,
    .bytes = n_bytes,
    .abort = n_abort,
    .destroy = n_destroy,
};

/* Every rank's node id over c->world (a collective): `my_node`
 * allgathered; then the topology, node rank and size. */
static strata_status learn_nodes(nccl_ctx *c, int my_node)
{
    c->node_of = calloc((size_t)c->size, sizeof *c->node_of);
    if (!c->node_of)
        return strata_error(STRATA_ERR_NOMEM, "nccl comm: out of memory");
    MP(MPI_Allgather(&my_node, 1, MPI_INT, c->node_of, 1, MPI_INT, c->world));
    strata_status st = strata_nccl_topo_init(c->rank, c->size, c->node_of, &c->topo);
    c->node_rank = c->topo.node_rank;
    c->node_size = c->topo.node_size;
    return st;
}

/* The node-local and cross-node NCCL communicators of c->comm (collective):
 * node_comm by node index, cross_comm by node rank, both ordered by rank. */
static strata_status split_levels(nccl_ctx *c)
{
    NC(ncclCommSplit(c->comm, c->topo.node_index, c->rank, &c->node_comm, NULL));
    NC(ncclCommSplit(c->comm, c->topo.node_rank, c->rank, &c->cross_comm, NULL));
    return STRATA_OK;
}

/* MPI world dup, node ids (STRATA_RANKS_PER_NODE overrides the shared-
 * memory grouping), GPU choice, NCCL bootstrap, the two level communicators. */
static strata_status bootstrap(nccl_ctx *c, MPI_Comm user)
{
    MP(MPI_Comm_dup(user, &c->world));
    MP(MPI_Comm_rank(c->world, &c->rank));
    MP(MPI_Comm_size(c->world, &c->size));
    long per_node; /* the one parser (base/env.h): a bad value is refused, as MPI's */
    bool per_set;
    strata_status est = strata_env_int(STRATA_ENV_RANKS_PER_NODE, 0, &per_node, &per_set);
    if (est != STRATA_OK) {
        char why[256]; /* the caller destroys c */
        snprintf(why, sizeof why, "%s", strata_last_error());
        return strata_error(est, "comm_nccl_create: %s", why);
    }
    int my_node = per_node > 0 ? (int)(c->rank / per_node) : 0;
    if (per_node <= 0) { /* the node's lowest world rank names it */
        MPI_Comm node = MPI_COMM_NULL;
        MP(MPI_Comm_split_type(c->world, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &node));
        const int rc = MPI_Allreduce(&c->rank, &my_node, 1, MPI_INT, MPI_MIN, node);
        MPI_Comm_free(&node);
        MP(rc);
    }
    strata_status st = learn_nodes(c, my_node);
    if (st != STRATA_OK)
        return st;

    int ndev = 0;
    const cudaError_t e = cudaGetDeviceCount(&ndev);
    if (e != cudaSuccess || ndev == 0) {
        (void)cudaGetLastError();
        return strata_error(STRATA_ERR_UNSUPPORTED, "nccl comm: rank %d has no CUDA device (%s)",
                            c->rank, e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    }
    CU(cudaSetDevice(c->node_rank % ndev));
    CU(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
    ncclUniqueId id;
    if (c->rank == 0)
        NC(ncclGetUniqueId(&id));
    MP(MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, c->world));
    NC(ncclCommInitRank(&c->comm, c->size, id, c->rank));
    return split_levels(c);
}

/* A communicator over the ranks with `color`, ordered by (key, rank): MPI's
 * split for the bootstrap side, ncclCommSplit for NCCL (both collective over
 * the parent), the members' node ids carried over, the byte counters shared
 * with the parent (which must outlive it). */
static strata_status n_split(void *ctx, int color, int key, strata_comm **out)
{
    nccl_ctx *p = ctx;
    if (color < 0)
        return strata_error(STRATA_ERR_INVALID_ARG, "nccl split: color %d < 0", color);
    nccl_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return strata_error(STRATA_ERR_NOMEM, "nccl comm: out of memory");
    c->world = MPI_COMM_NULL;
    c->deterministic = p->deterministic;
    c->timeout_s = p->timeout_s;
    c->intra = p->intra;
    c->inter = p->inter;
    strata_status st = mpi_status(MPI_Comm_split(p->world, color, key, &c->world),
                                  "MPI_Comm_split", __FILE__, __LINE__);
    if (st == STRATA_OK) {
        MPI_Comm_rank(c->world, &c->rank);
        MPI_Comm_size(c->world, &c->size);
        st = learn_nodes(c, p->node_of[p->rank]);
    }
    if (st == STRATA_OK)
        st = cuda_status(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking),
                         "cudaStreamCreateWithFlags", __FILE__, __LINE__);
    if (st == STRATA_OK) {
        st = nccl_status(ncclCommSplit(p->comm, color, key, &c->comm, NULL), "ncclCommSplit",
                         __FILE__, __LINE__);
    } else {
        /* ncclCommSplit is collective over the parent: take part without a
         * color so the other ranks do not wait for this one (review N4). */
        ncclComm_t none = NULL;
        (void)ncclCommSplit(p->comm, NCCL_SPLIT_NOCOLOR, key, &none, NULL);
    }
    if (st == STRATA_OK)
        st = split_levels(c);
    if (st == STRATA_OK)
        st = strata_comm_create(&nccl_iface, c, out);
    if (st != STRATA_OK)
        n_destroy(c);
    return st;
}

strata_status strata_comm_nccl_create(const void *mpi_comm, bool deterministic, strata_comm **out)
{
    if (!mpi_comm || !out)
        return strata_error(STRATA_ERR_INVALID_ARG, "comm_nccl_create: NULL argument");
    *out = NULL;
    nccl_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return strata_error(STRATA_ERR_NOMEM, "comm_nccl_create: out of memory");
    c->world = MPI_COMM_NULL;
    c->deterministic = deterministic;
    long timeout_s;
    bool timeout_set;
    strata_status env_st = strata_env_int(STRATA_ENV_NCCL_TIMEOUT_S, 600, &timeout_s,
                                          &timeout_set);
    if (env_st != STRATA_OK) {
        free(c);
        return env_st;
    }
    c->timeout_s = (double)timeout_s;
    c->intra = &c->counts[0];
    c->inter = &c->counts[1];
    strata_status st = bootstrap(c, *(const MPI_Comm *)mpi_comm);
    if (st == STRATA_OK)
        st = strata_comm_create(&nccl_iface, c, out);
    if (st != STRATA_OK)
        n_destroy(c);
    return st;
}

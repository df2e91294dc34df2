/* The communication seam (strata/comm.h): the handle with its argument
 * checks, and the single-process backend. */
#include "comm_ops.h"

#include <stdlib.h>
#include <string.h>

struct strata_comm {
    const strata_comm_iface *iface;
    void *ctx;
};

strata_status strata_comm_create(const strata_comm_iface *iface, void *ctx, strata_comm **out)
{
    if (!iface || !out)
        return strata_error(STRATA_ERR_INVALID_ARG, "comm_create: NULL argument");
    *out = NULL;
    if (iface->version != STRATA_COMM_IFACE_VERSION)
        return strata_error(STRATA_ERR_INVALID_ARG, "comm_create: interface version %d, "
                            "expected %d", iface->version, STRATA_COMM_IFACE_VERSION);
    if (!iface->name || !iface->rank || !iface->size || !iface->node_rank || !iface->node_size ||
        !iface->allreduce_f64 || !iface->reduce_to_owner || !iface->broadcast_from_owner ||
        !iface->allgatherv_f32 || !iface->reduce_scatter_f32 || !iface->barrier ||
        !iface->reduce_to_owners || !iface->split)
        return strata_error(STRATA_ERR_INVALID_ARG, "comm_create: '%s' lacks a required slot",
                            iface->name ? iface->name : "?");
    strata_comm *c = calloc(1, sizeof *c);
    if (!c)
        return strata_error(STRATA_ERR_NOMEM, "comm_create: out of memory");
    c->iface = iface;
    c->ctx = ctx;
    *out = c;
    return STRATA_OK;
}

void strata_comm_destroy(strata_comm *c)
{
    if (!c)
        return;
    if (c->iface->destroy)
        c->iface->destroy(c->ctx);
    free(c);
}

void strata_comm_bytes(const strata_comm *c, uint64_t *intra_node, uint64_t *inter_node)
{
    uint64_t a = 0, b = 0;
    if (c && c->iface->bytes)
        c->iface->bytes(c->ctx, &a, &b);
    if (intra_node)
        *intra_node = a;
    if (inter_node)
        *inter_node = b;
}

void strata_comm_abort(strata_comm *c, int code)
{
    if (c && c->iface->abort)
        c->iface->abort(c->ctx, code);
}

bool strata_comm_mpi_launched(void)
{
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK");
}

const char *strata_comm_name(const strata_comm *c)
{
    return c ? c->iface->name : "none";
}

int strata_comm_rank(const strata_comm *c)
{
    return c ? c->iface->rank(c->ctx) : 0;
}

int strata_comm_size(const strata_comm *c)
{
    return c ? c->iface->size(c->ctx) : 1;
}

int strata_comm_node_rank(const strata_comm *c)
{
    return c ? c->iface->node_rank(c->ctx) : 0;
}

int strata_comm_node_size(const strata_comm *c)
{
    return c ? c->iface->node_size(c->ctx) : 1;
}

static strata_status check_owner(const strata_comm *c, int owner, const char *who)
{
    if (!c)
        return strata_error(STRATA_ERR_INVALID_ARG, "%s: NULL communicator", who);
    if (owner < 0 || owner >= c->iface->size(c->ctx))
        return strata_error(STRATA_ERR_INVALID_ARG, "%s: owner %d not in 0..%d", who, owner,
                            c->iface->size(c->ctx) - 1);
    return STRATA_OK;
}

strata_status strata_comm_allreduce_f64(strata_comm *c, double *vals, int n, strata_reduce_op op)
{
    if (!c || n < 0 || (n > 0 && !vals) || (op != STRATA_REDUCE_SUM && op != STRATA_REDUCE_MAX))
        return strata_error(STRATA_ERR_INVALID_ARG, "comm_allreduce_f64: bad arguments");
    return n == 0 ? STRATA_OK : c->iface->allreduce_f64(c->ctx, vals, n, op);
}

strata_status strata_comm_reduce_to_owner(strata_comm *c, float *buf, size_t n, int owner)
{
    strata_status st = check_owner(c, owner, "comm_reduce_to_owner");
    if (st == STRATA_OK && n > 0 && !buf)
        st = strata_error(STRATA_ERR_INVALID_ARG, "comm_reduce_to_owner: NULL buffer");
    return st == STRATA_OK && n > 0 ? c->iface->reduce_to_owner(c->ctx, buf, n, owner) : st;
}

strata_status strata_comm_reduce_to_owners(strata_comm *c, float *buf, size_t n,
                                           const int *owners, int n_owners)
{
    if (!c || (n > 0 && !buf) || n_owners < 1 || !owners)
        return strata_error(STRATA_ERR_INVALID_ARG, "comm_reduce_to_owners: bad arguments");
    for (int k = 0; k < n_owners; k++) {
        strata_status st = check_owner(c, owners[k], "comm_reduce_to_owners");
        if (st != STRATA_OK)
            return st;
    }
    return n > 0 ? c->iface->reduce_to_owners(c->ctx, buf, n, owners, n_owners) : STRATA_OK;
}

strata_status strata_comm_split(strata_comm *c, int color, int key, strata_comm **out)
{
    if (!c || !out || color < 0)
        return strata_error(STRATA_ERR_INVALID_ARG, "comm_split: bad arguments");
    *out = NULL;
    return c->iface->split(c->ctx, color, key, out);
}

strata_status strata_comm_broadcast_from_owner(strata_comm *c, float *buf, size_t n, int owner)
{
    strata_status st = check_owner(c, owner, "comm_broadcast_from_owner");
    if (st == STRATA_OK && n > 0 && !buf)
        st = strata_error(STRATA_ERR_INVALID_ARG, "comm_broadcast_from_owner: NULL buffer");
    return st == STRATA_OK && n > 0 ? c->iface->broadcast_from_owner(c->ctx, buf, n, owner) : st;
}

strata_status strata_comm_allgatherv_f32(strata_comm *c, const float *send, float *recv,
                                         const size_t *counts, const size_t *displs)
{
    if (!c || !recv || !counts || !displs)
        return strata_error(STRATA_ERR_INVALID_ARG, "comm_allgatherv_f32: NULL argument");
    return c->iface->allgatherv_f32(c->ctx, send, recv, counts, displs);
}

strata_status strata_comm_reduce_scatter_f32(strata_comm *c, const float *send, float *recv,
                                             const size_t *counts, const size_t *displs)
{
    if (!c || !send || !counts || !displs)
        return strata_error(STRATA_ERR_INVALID_ARG, "comm_reduce_scatter_f32: NULL argument");
    return c->iface->reduce_scatter_f32(c->ctx, send, recv, counts, displs);
}

strata_status strata_comm_barrier(strata_comm *c)
{
    if (!c)
        return strata_error(STRATA_ERR_INVALID_ARG, "comm_barrier: NULL communicator");
    return c->iface->barrier(c->ctx);
}

/* ---- the single-process backend: one rank, every collective an identity */

static int self_zero(void *ctx)
{
    (void)ctx;
    return 0;
}

static int self_one(void *ctx)
{
    (void)ctx;
    return 1;
}

static strata_status self_allreduce(void *ctx, double *vals, int n, strata_reduce_op op)
{
    (void)ctx;
    (void)vals;
    (void)n;
    (void)op;
    return STRATA_OK;
}

static strata_status self_rooted(void *ctx, float *buf, size_t n, int owner)
{
    (void)ctx;
    (void)buf;
    (void)n;
    (void)owner;
    return STRATA_OK;
}

static strata_status self_gatherv(void *ctx, const float *send, float *recv, const size_t *counts,
                                  const size_t *displs)
{
    (void)ctx;
    if (counts[0] > 0 && send != recv + displs[0])
        memmove(recv + displs[0], send, counts[0] * sizeof(float));
    return STRATA_OK;
}

static strata_status self_reduce_scatter(void *ctx, const float *send, float *recv,
                                         const size_t *counts, const size_t *displs)
{
    (void)ctx;
    if (counts[0] > 0 && recv != send + displs[0])
        memmove(recv, send + displs[0], counts[0] * sizeof(float));
    return STRATA_OK;
}

static strata_status self_owners(void *ctx, float *buf, size_t n, const int *owners,
                                 int n_owners)
{
    (void)ctx;
    (void)buf;
    (void)n;
    (void)owners;
    (void)n_owners;
    return STRATA_OK;
}

static strata_status self_split(void *ctx, int color, int key, strata_comm **out)
{
    (void)ctx;
    (void)color;
    (void)key;
    return strata_comm_self_create(out);
}

static strata_status self_barrier(void *ctx)
{
    (void)ctx;
    return STRATA_OK;
}

static const strata_comm_iface self_iface = {
    .version = STRATA_COMM_IFACE_VERSION,
    .name = "self",
    .rank = self_zero,
    .size = self_one,
    .node_rank = self_zero,
    .node_size = self_one,
    .allreduce_f64 = self_allreduce,
    .reduce_to_owner = self_rooted,
    .broadcast_from_owner = self_rooted,
    .allgatherv_f32 = self_gatherv,
    .reduce_scatter_f32 = self_reduce_scatter,
    .barrier = self_barrier,
    .reduce_to_owners = self_owners,
    .split = self_split,
    .destroy = NULL,
};

strata_status strata_comm_self_create(strata_comm **out)
{
    return strata_comm_create(&self_iface, NULL, out);
}

/* The communication seam (strata/comm.h): the handle with its argument
 * checks, the in-flight list of non-blocking reductions, and the
 * single-process backend.
 *
 * In-flight list: a communicator and every communicator split from it share
 * one FIFO of started, not yet completed non-blocking reductions (kept by the
 * root, the communicator nobody split). Progress and waits test them in
 * start order; every blocking collective but the broadcast first drains the
 * list (the broadcast advances it: see strata_comm_broadcast_from_owner). Since every
 * rank starts the same requests and calls the same collectives in the same
 * order, a rank inside a blocking collective has finished its part of every
 * request started before it, so no rank waits for one that sits in a
 * collective (the deterministic chain of comm_mpi.c needs each rank to add
 * and forward, which happens only inside these calls). Single thread, like
 * the rest of the handle.
 */
#include "comm/comm.h"

#include "base/env.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>

struct strata_comm {
    const strata_comm_iface *iface;
    void *ctx;
    strata_comm *root;                  /* holder of the in-flight list (itself, or the
                                           communicator this one was split from) */
    strata_comm_request *head, *tail;   /* in-flight reductions, in start order */
    int in_flight;
};

static strata_status drain(strata_comm *c);
static strata_status progress_root(strata_comm *root);

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
    if (!iface->ireduce_start != !iface->ireduce_test)
        return strata_error(STRATA_ERR_INVALID_ARG, "comm_create: '%s' has one of "
                            "ireduce_start/ireduce_test without the other", iface->name);
    strata_comm *c = calloc(1, sizeof *c);
    if (!c)
        return strata_error(STRATA_ERR_NOMEM, "comm_create: out of memory");
    c->iface = iface;
    c->ctx = ctx;
    c->root = c;
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
    return strata_env_is_set(STRATA_ENV_OMPI_WORLD_SIZE) || strata_env_is_set(STRATA_ENV_PMI_SIZE) ||
           strata_env_is_set(STRATA_ENV_PMIX_RANK);
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
    strata_status st = drain(c);
    return st != STRATA_OK || n == 0 ? st : c->iface->allreduce_f64(c->ctx, vals, n, op);
}

strata_status strata_comm_reduce_to_owner(strata_comm *c, float *buf, size_t n, int owner)
{
    strata_status st = check_owner(c, owner, "comm_reduce_to_owner");
    if (st == STRATA_OK && n > 0 && !buf)
        st = strata_error(STRATA_ERR_INVALID_ARG, "comm_reduce_to_owner: NULL buffer");
    if (st == STRATA_OK)
        st = drain(c);
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
    strata_status st = drain(c);
    return st == STRATA_OK && n > 0 ? c->iface->reduce_to_owners(c->ctx, buf, n, owners, n_owners)
                                    : st;
}

strata_status strata_comm_split(strata_comm *c, int color, int key, strata_comm **out)
{
    if (!c || !out || color < 0)
        return strata_error(STRATA_ERR_INVALID_ARG, "comm_split: bad arguments");
    *out = NULL;
    strata_status st = drain(c);
    if (st == STRATA_OK)
        st = c->iface->split(c->ctx, color, key, out);
    if (st == STRATA_OK)
        (*out)->root = c->root; /* one in-flight list for the family */
    return st;
}

strata_status strata_comm_broadcast_from_owner(strata_comm *c, float *buf, size_t n, int owner)
{
    strata_status st = check_owner(c, owner, "comm_broadcast_from_owner");
    if (st == STRATA_OK && n > 0 && !buf)
        st = strata_error(STRATA_ERR_INVALID_ARG, "comm_broadcast_from_owner: NULL buffer");
    /* The one collective that only advances what is in flight instead of
     * draining it: managed weights are broadcast between backward hooks (the
     * next layer's backward needs them), and a drain there would end the
     * overlap of the reductions with the rest of the backward. No rank waits
     * on a reduction while inside a broadcast (the waits are in drains and in
     * strata_comm_request_wait), and the transport progresses its own
     * messages inside the broadcast, so nobody waits for a rank that sits in
     * one. */
    if (st == STRATA_OK && c->root->head)
        st = progress_root(c->root);
    return st == STRATA_OK && n > 0 ? c->iface->broadcast_from_owner(c->ctx, buf, n, owner) : st;
}

strata_status strata_comm_allgatherv_f32(strata_comm *c, const float *send, float *recv,
                                         const size_t *counts, const size_t *displs)
{
    if (!c || !recv || !counts || !displs)
        return strata_error(STRATA_ERR_INVALID_ARG, "comm_allgatherv_f32: NULL argument");
    strata_status st = drain(c);
    return st == STRATA_OK ? c->iface->allgatherv_f32(c->ctx, send, recv, counts, displs) : st;
}

strata_status strata_comm_reduce_scatter_f32(strata_comm *c, const float *send, float *recv,
                                             const size_t *counts, const size_t *displs)
{
    if (!c || !send || !counts || !displs)
        return strata_error(STRATA_ERR_INVALID_ARG, "comm_reduce_scatter_f32: NULL argument");
    strata_status st = drain(c);
    return st == STRATA_OK ? c->iface->reduce_scatter_f32(c->ctx, send, recv, counts, displs)
                           : st;
}

strata_status strata_comm_barrier(strata_comm *c)
{
    if (!c)
        return strata_error(STRATA_ERR_INVALID_ARG, "comm_barrier: NULL communicator");
    strata_status st = drain(c);
    return st == STRATA_OK ? c->iface->barrier(c->ctx) : st;
}

/* ---- non-blocking reductions: the in-flight list */

bool strata_comm_has_ireduce(const strata_comm *c)
{
    return c && c->iface->ireduce_start;
}

int strata_comm_in_flight(const strata_comm *c)
{
    return c ? c->root->in_flight : 0;
}

static void unlink_done(strata_comm *root)
{
    strata_comm_request **pp = &root->head, *last = NULL;
    while (*pp) {
        strata_comm_request *r = *pp;
        if (r->done) {
            *pp = r->next;
            r->next = NULL;
            root->in_flight--;
        } else {
            last = r;
            pp = &r->next;
        }
    }
    root->tail = last;
}

strata_status strata_comm_ireduce_start(strata_comm *c, strata_comm_request *req)
{
    if (!c || !req || (req->n > 0 && (!req->buf || !req->scratch)) || !req->owners ||
        req->n_owners < 1)
        return strata_error(STRATA_ERR_INVALID_ARG, "comm_ireduce_start: bad arguments");
    for (int k = 0; k < req->n_owners; k++) {
        strata_status st = check_owner(c, req->owners[k], "comm_ireduce_start");
        if (st != STRATA_OK)
            return st;
    }
    req->done = false;
    req->phase = 0;
    req->next_owner = 0;
    req->comm = c;
    req->next = NULL;
    if (req->n == 0) {
        req->done = true;
        return STRATA_OK;
    }
    if (!c->iface->ireduce_start) {
        /* No non-blocking slots: the blocking reduction, now. */
        strata_status st =
            req->n_owners == 1
                ? strata_comm_reduce_to_owner(c, req->buf, req->n, req->owners[0])
                : strata_comm_reduce_to_owners(c, req->buf, req->n, req->owners, req->n_owners);
        req->done = st == STRATA_OK;
        return st;
    }
    strata_status st = c->iface->ireduce_start(c->ctx, req);
    if (st != STRATA_OK || req->done)
        return st;
    strata_comm *root = c->root;
    if (root->tail)
        root->tail->next = req;
    else
        root->head = req;
    root->tail = req;
    root->in_flight++;
    return STRATA_OK;
}

/* Test every in-flight request once, in start order. */
static strata_status progress_root(strata_comm *root)
{
    strata_status st = STRATA_OK;
    for (strata_comm_request *r = root->head; r && st == STRATA_OK; r = r->next)
        if (!r->done)
            st = r->comm->iface->ireduce_test(r->comm->ctx, r);
    unlink_done(root);
    return st;
}

strata_status strata_comm_progress(strata_comm *c)
{
    if (!c)
        return strata_error(STRATA_ERR_INVALID_ARG, "comm_progress: NULL communicator");
    return c->root->head ? progress_root(c->root) : STRATA_OK;
}

/* Poll every in-flight request (each may need this rank to add and forward
 * before another rank can finish), yielding the core between rounds: on an
 * oversubscribed machine the ranks we wait for need it. */
strata_status strata_comm_request_wait(strata_comm *c, strata_comm_request *req)
{
    if (!c || !req)
        return strata_error(STRATA_ERR_INVALID_ARG, "comm_request_wait: NULL argument");
    strata_status st = STRATA_OK;
    while (!req->done && st == STRATA_OK) {
        st = progress_root(c->root);
        if (!req->done && st == STRATA_OK)
            sched_yield();
    }
    return st;
}

static strata_status drain(strata_comm *c)
{
    strata_status st = STRATA_OK;
    strata_comm *root = c->root;
    while (root->head && st == STRATA_OK) {
        st = progress_root(root);
        if (root->head && st == STRATA_OK)
            sched_yield();
    }
    return st;
}

strata_status strata_comm_drain(strata_comm *c)
{
    if (!c)
        return strata_error(STRATA_ERR_INVALID_ARG, "comm_drain: NULL communicator");
    return drain(c);
}

void strata_comm_request_abandon(strata_comm *c, strata_comm_request *req)
{
    if (!c || !req || req->done)
        return;
    req->done = true; /* unlinked below; its transport state is left as it is */
    unlink_done(c->root);
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

/* comm/comm.h — the collectives of a strata_comm, argument-checked
 * (internal: the runtime and the tests call these; a transport fills the
 * slots of strata_comm_iface). */
#ifndef STRATA_COMM_COMM_H
#define STRATA_COMM_COMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/ops.h"
#include "strata/comm.h"

/* strata_comm_iface.reduce_to_owners, argument-checked (every owner a rank). */
strata_status strata_comm_reduce_to_owners(strata_comm *c, float *buf, size_t n,
                                           const int *owners, int n_owners);

/* A sub-communicator of the ranks with the same color (>= 0), ordered by
 * key; the caller destroys it. */
strata_status strata_comm_split(strata_comm *c, int color, int key, strata_comm **out);

/* The collectives above, argument-checked (STRATA_ERR_INVALID_ARG), with the
 * transport's error converted to a strata_status and a message. */
strata_status strata_comm_reduce_to_owner(strata_comm *c, float *buf, size_t n,
                                                     int owner);
strata_status strata_comm_broadcast_from_owner(strata_comm *c, float *buf, size_t n,
                                                          int owner);
strata_status strata_comm_allgatherv_f32(strata_comm *c, const float *send,
                                                    float *recv, const size_t *counts,
                                                    const size_t *displs);
strata_status strata_comm_reduce_scatter_f32(strata_comm *c, const float *send,
                                                        float *recv, const size_t *counts,
                                                        const size_t *displs);

/* ---- non-blocking reductions (strata_comm_request). Every rank starts the
 * same requests in the same order (with its collectives); a communicator
 * and those split from it keep one in-flight list, and every blocking
 * collective above first completes it (comm.c explains why). */

/* True when the transport has the non-blocking slots. */
bool strata_comm_has_ireduce(const strata_comm *c);

/* Start `req` (its caller block filled: buf, scratch, n, owners, n_owners;
 * every owner a rank). Without the transport's slots it runs the blocking
 * reduce_to_owner(s) now and returns with req->done set. Errors:
 * STRATA_ERR_INVALID_ARG, the transport's. */
strata_status strata_comm_ireduce_start(strata_comm *c, strata_comm_request *req);

/* Advance every in-flight request without blocking. */
strata_status strata_comm_progress(strata_comm *c);

/* Block until `req` completed, advancing every in-flight request meanwhile
 * (requests started before it usually finish first). */
strata_status strata_comm_request_wait(strata_comm *c, strata_comm_request *req);

/* Block until no request is in flight. */
strata_status strata_comm_drain(strata_comm *c);

/* Requests in flight on c's list. */
int strata_comm_in_flight(const strata_comm *c);

/* Forget an in-flight request without completing it (error paths, before
 * its memory goes: the job is ending; its transport state is not freed). */
void strata_comm_request_abandon(strata_comm *c, strata_comm_request *req);

/* ---- gradient buckets ---------------------------------------------- */
/* gradients to their owners in buckets, without
 * blocking the backward pass (DESIGN.md "The step, as data flows"; issue #9
 * item 3).
 *
 * At commit the runtime lists every gradient with its layer and its owners
 * (one rank; the owner in every group with HSDP). Gradients of one layer
 * going to the same owners are packed, in registration order, into buckets
 * of at most bucket_bytes (a tensor larger than that travels alone). After a
 * layer's backward, strata_gb_post_layer packs each of its buckets into a
 * staging ring and starts one non-blocking reduction per bucket
 * (strata_comm_ireduce_start), then advances every reduction in flight;
 * strata_gb_finish_all (at the step) waits for the rest. Completion, in post
 * order, copies the sum back into the owners' gradients and scales it to the
 * mean where asked. Every rank builds the same buckets and posts them in the
 * same order.
 *
 * Memory: one staging ring per rank, allocated at create, of
 * 2 x max(largest bucket, min(all gradients, STRATA_GB_IN_FLIGHT x
 * bucket_bytes)) bytes: each bucket in flight holds its packed gradients and
 * as much scratch for the transport. When the ring is full, posting waits for
 * the oldest bucket. Nothing is allocated after create.
 *
 * Results: the transport's sums, unchanged (deterministic MPI: rank order
 * from +0), are element-wise, so packing never changes a bit.
 */

#define STRATA_GB_IN_FLIGHT 4 /* buckets' worth of staging (bucket_bytes each) */

typedef struct strata_gb_item {
    int layer;            /* >= 0 */
    float *grad;          /* n floats, host-addressable; read at post, written back at
                             completion on an owner. A non-owner's (receives false) may
                             be NULL at create and lent later (strata_gb_set_grad): it
                             is read only at post, so the buffer is free once
                             strata_gb_post_layer returns */
    size_t n;             /* >= 1 */
    const int *owners;    /* n_owners ranks receiving the sum (copied) */
    int n_owners;
    bool receives;        /* this rank is among the owners */
    bool average;         /* after the sum lands: grad *= scale (backend scale) */
} strata_gb_item;

typedef struct strata_gb_config {
    strata_comm *comm;     /* not owned */
    strata_backend *be;    /* scales the owners' sums (not owned) */
    size_t bucket_bytes;   /* cap of one bucket, a multiple of 4, >= 4 */
    float scale;           /* the mean's factor (1 / world) */
} strata_gb_config;

typedef struct strata_gb_stats {
    int n_buckets;              /* buckets per backward pass */
    size_t staging_bytes;       /* the ring */
    int64_t posted;             /* buckets posted, cumulative */
    uint64_t posted_bytes;      /* their float32 bytes, cumulative */
    int64_t ring_waits;         /* posts that waited for an older bucket (ring full) */
} strata_gb_stats;

typedef struct strata_grad_buckets strata_grad_buckets;

/* Build the buckets of items[0..n) and the ring. Errors:
 * STRATA_ERR_INVALID_ARG, STRATA_ERR_NOMEM. */
strata_status strata_gb_create(const strata_gb_config *cfg, const strata_gb_item *items, int n,
                               strata_grad_buckets **out);

/* After `layer`'s backward: post its buckets (a bucket of this layer still
 * in flight from an earlier call completes first), then advance all in
 * flight. Collective in the communicator's order. Errors: the transport's. */
strata_status strata_gb_post_layer(strata_grad_buckets *gb, int layer);

/* Complete every bucket in flight (in post order); *waited_s (may be NULL)
 * gets the wall time spent. Errors: the transport's, the backend's. */
strata_status strata_gb_finish_all(strata_grad_buckets *gb, double *waited_s);

/* Re-point item `item` (its index in create's items) at `grad` (NULL: none
 * lent; posting its layer then fails with STRATA_ERR_STATE). Only an item
 * that does not receive its sum: the packing copies it at post, so any
 * time outside strata_gb_post_layer is safe (sharded gradients, runtime.c).
 * Errors: STRATA_ERR_INVALID_ARG (bad item, an item that receives). */
strata_status strata_gb_set_grad(strata_grad_buckets *gb, int item, float *grad);

/* Buckets posted and not completed. */
int strata_gb_in_flight(const strata_grad_buckets *gb);

void strata_gb_stats_get(const strata_grad_buckets *gb, strata_gb_stats *out);

/* NULL is a no-op. Buckets still in flight are abandoned (error paths). */
void strata_gb_destroy(strata_grad_buckets *gb);

#endif

/* runtime/grad_bucket.h — gradients to their owners in buckets, without
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
#ifndef STRATA_RUNTIME_GRAD_BUCKET_H
#define STRATA_RUNTIME_GRAD_BUCKET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/ops.h"
#include "strata/comm.h"

#define STRATA_GB_IN_FLIGHT 4 /* buckets' worth of staging (bucket_bytes each) */

typedef struct strata_gb_item {
    int layer;            /* >= 0 */
    float *grad;          /* n floats, host-addressable; read at post, written back at
                             completion on an owner */
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

/* Buckets posted and not completed. */
int strata_gb_in_flight(const strata_grad_buckets *gb);

void strata_gb_stats_get(const strata_grad_buckets *gb, strata_gb_stats *out);

/* NULL is a no-op. Buckets still in flight are abandoned (error paths). */
void strata_gb_destroy(strata_grad_buckets *gb);

#endif

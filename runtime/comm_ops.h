/* runtime/comm_ops.h — the collectives of a strata_comm, argument-checked
 * (internal: the runtime and the tests call these; a transport fills the
 * slots of strata_comm_iface). */
#ifndef STRATA_RUNTIME_COMM_OPS_H
#define STRATA_RUNTIME_COMM_OPS_H

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

#endif

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

#endif

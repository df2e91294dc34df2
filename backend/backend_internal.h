/* backend/backend_internal.h — what backend.c shares with ops.c (private). */
#ifndef STRATA_BACKEND_INTERNAL_H
#define STRATA_BACKEND_INTERNAL_H

#include "strata/backend.h"

const strata_backend_iface *backend_iface(const strata_backend *be);
void *backend_ctx(const strata_backend *be);

/* The backend's handle for stream `s` (NULL: default stream) in *impl.
 * Errors: STRATA_ERR_INVALID_ARG (NULL backend, stream of another backend),
 * recorded with `who`. */
strata_status backend_stream_impl(const strata_backend *be, const strata_stream *s, void **impl,
                                  const char *who);

#endif

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

/* The CUDA backend (backend/cuda/cuda.c; backend/cuda/none.c when strata is
 * built without CUDA, where both return STRATA_ERR_UNSUPPORTED saying so).
 * available: *count = CUDA devices visible (cudaGetDeviceCount); STRATA_OK
 * when >= 1, else STRATA_ERR_UNSUPPORTED with the reason. create: a backend
 * on the current device (cudaSetDevice / CUDA_VISIBLE_DEVICES choose it);
 * errors: STRATA_ERR_UNSUPPORTED (not built, no device, no memory pools),
 * STRATA_ERR_NOMEM, or a converted CUDA/cuBLAS error. */
strata_status strata_backend_cuda_available(int *count);

/* The CPU backend's SSYRK mirror (backend/cpu.c): copy the strict lower
 * triangle of the n x n row-major matrix c (leading dimension ldc) onto its
 * upper triangle, tile by tile. Shared for bench/bench_syrk.c. */
void strata_cpu_mirror_lower(int n, float *c, int ldc);
strata_status strata_backend_cuda_create(strata_backend **out);

#endif

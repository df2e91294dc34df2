/* gpt_cuda.h — the byte-level GPT of gpt.h with its forward and backward on
 * a GPU: cuBLAS for every matrix product (attention's per-head products as
 * strided batched GEMMs), small CUDA C kernels for the embedding, LayerNorm,
 * attention softmax, GELU, bias and cross-entropy (in the spirit of llm.c's
 * train_gpt2.cu; our own code, following trainer/gpt_impl.inc step by
 * step so that the CPU model stays the reference).
 *
 * Same architecture, tensor table, initialization (the CPU model with the
 * same seed is built and its parameters copied), hook-layer order and
 * gradient accumulation rules as gpt.h. Float32 throughout.
 *
 * Memory: parameters and gradients live in CUDA managed memory (one
 * allocation each, preferred location the GPU), so the optimizer can run on
 * the CUDA backend (in place) or on the CPU backend (the pages migrate; in
 * place on GB10/GH200-class coherent memory); gpt_tensor.data/.grad point
 * there and the runtime's parameter descriptor says STRATA_MEM_MANAGED.
 * Activations and their gradients are device memory.
 *
 * Synchronization: work runs on the model's own stream, a blocking one: it
 * orders after work queued before on the legacy default stream (where the
 * CUDA backend's optimizer step runs) and that stream after it. gpt_cuda_forward
 * returns after the loss is on the host; gpt_cuda_backward synchronizes the
 * stream before each after_layer callback (the layer's gradients are then
 * complete and readable from the host) and before returning. Parameters
 * written by the host (a CPU optimizer) between steps are seen by the next
 * forward; a GPU optimizer on the legacy default stream is ordered before it
 * by the stream's kind, one on a non-blocking stream must finish before it.
 *
 * Accuracy against the CPU model (tests/cuda/test_gpt_cuda.c): the CPU model
 * uses its own exp/tanh polynomials and sequential sums, the GPU libdevice
 * expf/tanhf and warp-parallel sums (all accumulations in double where the
 * CPU's are), and cuBLAS products in another order. Loss agrees within
 * 1e-5 relative, every gradient within 1e-3 of its tensor's max |grad|.
 *
 * Errors: 0 or a strata_status with strata_last_error() detail, as gpt.h:
 * STRATA_ERR_UNSUPPORTED (built without CUDA, or no device), STRATA_ERR_NOMEM,
 * STRATA_ERR_INVALID_ARG, STRATA_ERR_STATE, STRATA_ERR_INTERNAL (a CUDA or
 * cuBLAS failure, with the call, file and line). One thread per model.
 */
#ifndef STRATA_EXAMPLES_GPT_CUDA_H
#define STRATA_EXAMPLES_GPT_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "gpt.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gpt_cuda gpt_cuda;

/* Build the model on the current CUDA device, initialized exactly as
 * gpt_create(cfg, seed). Errors: as gpt_create, and STRATA_ERR_UNSUPPORTED. */
int gpt_cuda_create(const gpt_config *cfg, uint64_t seed, gpt_cuda **out);

/* Free everything (NULL is a no-op). */
void gpt_cuda_destroy(gpt_cuda *m);

/* As gpt_num_tensors / gpt_tensor_at / gpt_num_params; data and grad are
 * managed memory. */
int gpt_cuda_num_tensors(const gpt_cuda *m);
const gpt_tensor *gpt_cuda_tensor_at(const gpt_cuda *m, int i);
size_t gpt_cuda_num_params(const gpt_cuda *m);

/* As gpt_forward (inputs and targets are host arrays, copied). */
int gpt_cuda_forward(gpt_cuda *m, const uint8_t *inputs, const uint8_t *targets, int B, int T,
                     gpt_layer_cb before_layer, void *ctx, float *loss_out);

/* As gpt_backward: gradients accumulate into the tensors' grad. */
int gpt_cuda_backward(gpt_cuda *m, gpt_layer_cb after_layer, void *ctx);

/* Set every gradient to zero (stream-ordered; complete on return). */
int gpt_cuda_zero_grad(gpt_cuda *m);

/* Wait for all the device's queued work (cudaDeviceSynchronize): the
 * model's and a GPU optimizer's, before the host reads the managed
 * parameters (the final weights' hash). 0 or STRATA_ERR_INTERNAL. */
int gpt_cuda_sync(gpt_cuda *m);

#ifdef __cplusplus
}
#endif
#endif /* STRATA_EXAMPLES_GPT_CUDA_H */

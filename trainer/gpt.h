/* gpt.h — a byte-level GPT-2-style decoder in plain C: forward and backward
 * on the CPU, every matrix product by OpenBLAS sgemm.
 *
 * Architecture (GPT-2, Radford et al. 2019, "Language Models are
 * Unsupervised Multitask Learners"; llm.c by A. Karpathy is the layout this
 * follows in spirit, the code is our own):
 *
 *   x0      = wte[token] + wpe[position]
 *   for each block:
 *     x     = x + attn(ln1(x))          causal multi-head self-attention
 *     x     = x + mlp(ln2(x))           fc -> GELU (tanh form) -> proj
 *   logits  = lnf(x) @ wte^T            LM head tied to the token embedding
 *   loss    = mean over the B*T positions of cross-entropy(logits, target)
 *
 * Shapes and storage. Every tensor is float32, row-major. A linear layer is
 * stored "in x out" (the GPT-2 Conv1D convention): y = x @ W + b with W of
 * shape (in, out). With C = d_model, V = vocab, H = C / n_head:
 *
 *   name                   shape        role       init
 *   wte                    (V, C)       EMBEDDING  N(0, 0.02)
 *   wpe                    (max_seq, C) EMBEDDING  N(0, 0.02)
 *   h.<i>.ln1.weight       (C)          VECTOR     1
 *   h.<i>.ln1.bias         (C)          VECTOR     0
 *   h.<i>.attn.qkv.weight  (C, 3C)      MATRIX     N(0, 0.02)
 *   h.<i>.attn.qkv.bias    (3C)         VECTOR     0
 *   h.<i>.attn.proj.weight (C, C)       MATRIX     N(0, 0.02 / sqrt(2 n_layer))
 *   h.<i>.attn.proj.bias   (C)          VECTOR     0
 *   h.<i>.ln2.weight       (C)          VECTOR     1
 *   h.<i>.ln2.bias         (C)          VECTOR     0
 *   h.<i>.mlp.fc.weight    (C, 4C)      MATRIX     N(0, 0.02)
 *   h.<i>.mlp.fc.bias      (4C)         VECTOR     0
 *   h.<i>.mlp.proj.weight  (4C, C)      MATRIX     N(0, 0.02 / sqrt(2 n_layer))
 *   h.<i>.mlp.proj.bias    (C)          VECTOR     0
 *   lnf.weight             (C)          VECTOR     1
 *   lnf.bias               (C)          VECTOR     0
 *
 * The qkv output of a token is [q | k | v], each C wide; head h owns columns
 * [h*H, (h+1)*H) of each. Tensors are enumerated in the order above (the
 * 12 block tensors repeated for i = 0..n_layer-1), and they lie in that
 * order, contiguous, in one parameter allocation; gradients mirror them in a
 * second allocation. So each hook layer's parameters form one contiguous
 * range.
 *
 * Hook layers. Tensors carry a `layer` for the runtime's per-layer hooks:
 *   0            the embeddings wte and wpe
 *   1..n_layer   transformer block i = layer - 1 (the "h.<i>." tensors)
 *   n_layer + 1  the final layernorm lnf
 * gpt_forward calls before_layer(0), (1), ..., (n_layer + 1) in that order,
 * each just before that layer's computation; gpt_backward calls
 * after_layer(n_layer + 1), ..., (1), (0), each just after that layer's
 * gradients are complete. The LM head is tied to wte, so the head's forward
 * (after before_layer(n_layer + 1)) reads wte, and its backward adds into
 * wte's gradient before after_layer(n_layer + 1); wte's gradient is complete
 * only at after_layer(0). A runtime that materializes parameters per layer
 * must therefore make wte available again for the head: the forward reads
 * wte's `data` anew after before_layer(n_layer + 1), and the backward reads
 * it before after_layer(n_layer + 1).
 *
 * Errors. Functions that can fail return 0 on success or a strata_status
 * (include/strata/status.h), with a detail message recorded by
 * strata_error() (read it with strata_last_error()). A layer callback's
 * nonzero return value is returned unchanged.
 *
 * Threads. A model is used by one thread at a time. The model code is
 * single-threaded except inside sgemm (OpenBLAS's own threads). No global
 * state: several models may live in one process.
 *
 * A double-precision instance of the same code (gpt_double.h, prefix gptd_)
 * exists for gradient checks.
 */
#ifndef STRATA_EXAMPLES_GPT_H
#define STRATA_EXAMPLES_GPT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Model shape. All fields must be > 0; vocab <= 65536 (token ids are
 * uint16: bytes through gpt_forward, token files' ids through
 * gpt_forward_tokens); d_model % n_head == 0. The MLP hidden width is
 * 4 * d_model. */
typedef struct gpt_config {
    int vocab;    /* vocabulary size V; 256 for byte-level models, V for token files */
    int max_seq;  /* longest sequence (rows of wpe) */
    int n_layer;  /* transformer blocks */
    int n_head;   /* attention heads per block */
    int d_model;  /* residual width C */
} gpt_config;

/* How an optimizer should treat a tensor. */
typedef enum {
    GPT_ROLE_EMBEDDING, /* wte, wpe: 2-D, rows are looked up by index */
    GPT_ROLE_MATRIX,    /* 2-D weight of a linear layer, (in, out) */
    GPT_ROLE_VECTOR,    /* 1-D: biases, layernorm gains and shifts */
} gpt_role;

/* One parameter tensor. `data` and `grad` point into the model's parameter
 * and gradient allocations (owned by the model, valid until gpt_destroy);
 * both hold shape[0] * (ndim == 2 ? shape[1] : 1) floats, row-major. */
typedef struct gpt_tensor {
    const char *name;   /* e.g. "h.0.attn.qkv.weight"; owned by the model */
    float *data;
    float *grad;
    int ndim;           /* 1 or 2 */
    int64_t shape[2];   /* (rows, cols) as stored; shape[1] = 1 when ndim = 1 */
    int layer;          /* hook layer, see above */
    gpt_role role;
} gpt_tensor;

typedef struct gpt_model gpt_model;

/* Per-layer callback; `layer` is a hook layer (0..n_layer+1). A nonzero
 * return aborts the forward or backward pass and is returned by it. */
typedef int (*gpt_layer_cb)(void *ctx, int layer);

/* Validate `cfg` and build a model with GPT-2 initialization (table above)
 * drawn from a deterministic generator seeded by `seed` (xoshiro256** seeded
 * by splitmix64, normals by Box-Muller; values drawn in double and rounded,
 * so the double instance gets the same numbers before rounding). Gradients
 * start at zero. No activations are allocated until the first forward.
 * On success *out owns the model (free with gpt_destroy).
 * Errors: STRATA_ERR_INVALID_ARG (NULL pointer, a field <= 0, vocab > 65536,
 * d_model % n_head != 0, a size too large to index), STRATA_ERR_NOMEM. */
int gpt_create(const gpt_config *cfg, uint64_t seed, gpt_model **out);

/* Free the model and everything it owns. NULL is a no-op. */
void gpt_destroy(gpt_model *m);

/* Give up the model's parameter allocation (a runtime that manages the
 * weights holds them instead, e.g. strata's managed parameters): it is
 * freed and every tensor's `data` becomes NULL. From then on the caller
 * points each tensor at its weights with gpt_tensor_bind before a pass reads
 * them: a layer's tensors before its forward (the before_layer callback is
 * the place) and again before its backward (the after_layer callback of the
 * layer above; the tied LM head reads wte in the forward and the backward of
 * layer n_layer + 1); wte and wpe are not read by layer 0's backward.
 * Gradients stay the model's. NULL is a no-op. */
void gpt_params_release(gpt_model *m);

/* Point tensor i's `data` at `data` (prod(shape) floats that stay valid
 * while a pass reads them; not owned). Only after gpt_params_release.
 * Errors: STRATA_ERR_INVALID_ARG (NULL model, i out of range, the model
 * still owns its parameters). */
int gpt_tensor_bind(gpt_model *m, int i, float *data);

/* Give up the model's gradient allocation (a runtime that shards the
 * gradients holds them instead: strata's sharded gradients): it is freed
 * and every tensor's `grad` becomes NULL. From then on the caller points
 * each tensor at its gradient buffer with gpt_tensor_bind_grad before the
 * backward writes it: layer l's tensors before its backward starts (the
 * after_layer callback of the layer above), wte also before the backward of
 * layer n_layer + 1 (the tied head adds into it). gpt_zero_grad zeroes the
 * buffers bound then. NULL is a no-op. */
void gpt_grads_release(gpt_model *m);

/* Point tensor i's `grad` at `grad` (prod(shape) floats, valid while a
 * backward writes them; not owned; NULL: none). Only after
 * gpt_grads_release. Errors: STRATA_ERR_INVALID_ARG (NULL model, i out of
 * range, the model still owns its gradients). */
int gpt_tensor_bind_grad(gpt_model *m, int i, float *grad);

/* The model's configuration (never NULL for a valid model). */
const gpt_config *gpt_get_config(const gpt_model *m);

/* Number of parameter tensors: 2 + 12 * n_layer + 2. */
int gpt_num_tensors(const gpt_model *m);

/* Tensor i in enumeration order (0 <= i < gpt_num_tensors), or NULL when i
 * is out of range. The pointer is valid until gpt_destroy. */
const gpt_tensor *gpt_tensor_at(const gpt_model *m, int i);

/* Total number of scalar parameters (sum over tensors). */
size_t gpt_num_params(const gpt_model *m);

/* The tensors gpt_create would make for `cfg`, in the same order, names,
 * shapes, layers and roles, without allocating the model (data and grad
 * NULL): fills at most `cap` entries of `out`, their names in `names`
 * (cap * GPT_DESCRIBE_NAME_LEN bytes). Returns the tensor count, or -1 for
 * an invalid cfg. For planning (`strata plan`). */
#define GPT_DESCRIBE_NAME_LEN 48
int gpt_describe(const gpt_config *cfg, gpt_tensor *out, char *names, int cap);

/* Bytes of the parameter allocation for `cfg` (float32). The gradient
 * allocation is the same size again. 0 if cfg is invalid. */
size_t gpt_param_bytes(const gpt_config *cfg);

/* Bytes that gpt_forward allocates for a (B, T) batch: forward activations,
 * activation gradients and token copies. Dominated by
 * n_layer * (16 B T C + n_head B T^2) floats. 0 if the arguments are
 * invalid. */
size_t gpt_activation_bytes(const gpt_config *cfg, int B, int T);

/* Forward pass over B sequences of T byte tokens.
 * inputs:  B*T token ids (row b is sequence b), each < vocab.
 * targets: B*T next-token ids, each < vocab, or NULL for no loss.
 * before_layer: called with 0..n_layer+1 before each layer (may be NULL).
 * loss_out: if non-NULL receives the mean cross-entropy (nats per token)
 *   over the B*T positions, or NAN when targets is NULL.
 * The activation buffer is allocated on first use and re-allocated only
 * when a larger (B, T) needs more room. Afterwards gpt_probs() holds the
 * next-token distribution. Inputs and targets are copied, so the caller's
 * buffers may be reused at once.
 * Errors: STRATA_ERR_INVALID_ARG (NULL model/inputs, B < 1, T < 1,
 * T > max_seq, a token >= vocab), STRATA_ERR_NOMEM, or the callback's value.
 * On error no backward is possible until the next successful forward. */
int gpt_forward(gpt_model *m, const uint8_t *inputs, const uint8_t *targets,
                int B, int T, gpt_layer_cb before_layer, void *ctx,
                float *loss_out);

/* gpt_forward with 2-byte token ids (0 <= id < vocab <= 65536): token files'
 * ids. The ids are the only difference: a batch of byte ids gives the same
 * loss, probabilities and (after gpt_backward) gradients, bit for bit, either
 * way. Same errors as gpt_forward. */
int gpt_forward_tokens(gpt_model *m, const uint16_t *inputs, const uint16_t *targets,
                       int B, int T, gpt_layer_cb before_layer, void *ctx,
                       float *loss_out);

/* Backward pass of the last forward, which must have had targets: adds
 * d(mean loss)/d(param) into every tensor's grad (gradients ACCUMULATE; call
 * gpt_zero_grad to start over). With k micro-batches accumulated, the
 * gradient of the mean over all of them is the sum divided by k.
 * Activations are not modified, so calling it twice adds the gradient twice.
 * after_layer: called with n_layer+1 .. 0 after each layer's gradients are
 *   complete (may be NULL).
 * Errors: STRATA_ERR_INVALID_ARG (NULL model), STRATA_ERR_STATE (no
 * successful forward with targets before), or the callback's value (the
 * gradients are then partially accumulated). */
int gpt_backward(gpt_model *m, gpt_layer_cb after_layer, void *ctx);

/* Set every gradient to zero. */
void gpt_zero_grad(gpt_model *m);

/* Next-token probabilities of the last successful forward: B*T rows of
 * vocab floats (row b*T + t is the distribution after inputs[b][0..t]).
 * NULL before the first forward and after a failed one. Valid until the
 * next forward or gpt_destroy. */
const float *gpt_probs(const gpt_model *m);

#ifdef __cplusplus
}
#endif
#endif /* STRATA_EXAMPLES_GPT_H */

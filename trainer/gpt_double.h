/* gpt_double.h — the GPT model of gpt.h in double precision, for gradient
 * checks and as a float64 reference for the float32 model.
 *
 * The same source (gpt_impl.inc) is compiled twice: gpt.c with float and
 * cblas_sgemm, gpt_double.c with double and cblas_dgemm. Every gptd_
 * function behaves as its gpt_ namesake in gpt.h, with double wherever that
 * one has float; the tensor enumeration, names, shapes, hook layers, seeded
 * initialization and errors are identical. For a given seed, a float model's
 * parameters are the double model's rounded to float.
 */
#ifndef STRATA_EXAMPLES_GPT_DOUBLE_H
#define STRATA_EXAMPLES_GPT_DOUBLE_H

#include "gpt.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gptd_tensor {
    const char *name;
    double *data;
    double *grad;
    int ndim;
    int64_t shape[2];
    int layer;
    gpt_role role;
} gptd_tensor;

typedef struct gptd_model gptd_model;

int gptd_create(const gpt_config *cfg, uint64_t seed, gptd_model **out);
void gptd_destroy(gptd_model *m);
void gptd_params_release(gptd_model *m);
int gptd_tensor_bind(gptd_model *m, int i, double *data);
void gptd_grads_release(gptd_model *m);
int gptd_tensor_bind_grad(gptd_model *m, int i, double *grad);
const gpt_config *gptd_get_config(const gptd_model *m);
int gptd_num_tensors(const gptd_model *m);
const gptd_tensor *gptd_tensor_at(const gptd_model *m, int i);
size_t gptd_num_params(const gptd_model *m);
size_t gptd_param_bytes(const gpt_config *cfg);
size_t gptd_activation_bytes(const gpt_config *cfg, int B, int T);
int gptd_forward(gptd_model *m, const uint8_t *inputs, const uint8_t *targets,
                 int B, int T, gpt_layer_cb before_layer, void *ctx,
                 double *loss_out);
int gptd_forward_tokens(gptd_model *m, const uint16_t *inputs, const uint16_t *targets,
                        int B, int T, gpt_layer_cb before_layer, void *ctx,
                        double *loss_out);
int gptd_backward(gptd_model *m, gpt_layer_cb after_layer, void *ctx);
void gptd_zero_grad(gptd_model *m);
const double *gptd_probs(const gptd_model *m);

#ifdef __cplusplus
}
#endif
#endif /* STRATA_EXAMPLES_GPT_DOUBLE_H */

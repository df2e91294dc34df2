/* gpt.c — the float32 GPT model of gpt.h (body in gpt_impl.inc).
 *
 * The float instance uses its own exp and tanh: plain arithmetic that the
 * compiler vectorizes, where libm's expf/tanhf are calls per element (they
 * took a quarter of a training step). Measured against double libm on a
 * fine grid: exp_f relative error <= 8.3e-8 on [-87, 88] (inputs are
 * clamped to that range: below it the result is 2^-126, not 0); tanh_f
 * absolute error <= 1.8e-7, which is what GELU needs (relative to 1 + tanh).
 * tests/gpt/test_gpt_gradcheck.c compares this model's loss and gradients
 * with the double instance, which uses libm.
 */
#include "gpt.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* e^x: x = k ln2 + r with |r| <= ln2/2, e^r by the Cephes expf polynomial,
 * 2^k from the exponent bits. Input clamped to [-87, 88]. */
static inline float exp_f(float x)
{
    x = x < -87.0f ? -87.0f : x;
    x = x > 88.0f ? 88.0f : x;
    const float t = x * 1.44269504088896341f;
    const int k = (int)(t + (t >= 0.0f ? 0.5f : -0.5f));
    const float kf = (float)k;
    const float r = (x - kf * 0.693359375f) + kf * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    const uint32_t bits = (uint32_t)(k + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

/* tanh u = 1 - 2 / (e^{2u} + 1); exact limits +-1 far out. */
static inline float tanh_f(float u)
{
    return 1.0f - 2.0f / (exp_f(2.0f * u) + 1.0f);
}

#define REAL float
#define GEMM cblas_sgemm
#define GPT_SYM(x) gpt_##x
#define R_EXP exp_f
#define R_TANH tanh_f

#include "gpt_impl.inc"

int gpt_describe(const gpt_config *cfg, gpt_tensor *out, char *names, int cap)
{
    if (!cfg || !config_valid(cfg))
        return -1;
    const int L = cfg->n_layer;
    const int64_t C = cfg->d_model;
    const int n = 2 + NBLOCK * L + 2;
    for (int i = 0; out && names && i < n && i < cap; i++) {
        char *nm = names + (size_t)i * GPT_DESCRIBE_NAME_LEN;
        gpt_tensor *t = &out[i];
        memset(t, 0, sizeof *t);
        t->name = nm;
        t->ndim = 2;
        t->shape[1] = C;
        if (i < 2) {
            snprintf(nm, GPT_DESCRIBE_NAME_LEN, "%s", i == 0 ? "wte" : "wpe");
            t->shape[0] = i == 0 ? cfg->vocab : cfg->max_seq;
            t->role = GPT_ROLE_EMBEDDING;
        } else if (i < 2 + NBLOCK * L) {
            const int l = (i - 2) / NBLOCK;
            const block_spec *s = &block_specs[(i - 2) % NBLOCK];
            snprintf(nm, GPT_DESCRIBE_NAME_LEN, "h.%d.%s", l, s->suffix);
            t->ndim = s->cols_c ? 2 : 1;
            t->shape[0] = s->rows_c * C;
            t->shape[1] = s->cols_c ? s->cols_c * C : 1;
            t->layer = l + 1;
            t->role = s->role;
        } else {
            snprintf(nm, GPT_DESCRIBE_NAME_LEN, "%s", i == n - 2 ? "lnf.weight" : "lnf.bias");
            t->ndim = 1;
            t->shape[0] = C;
            t->shape[1] = 1;
            t->layer = L + 1;
            t->role = GPT_ROLE_VECTOR;
        }
    }
    return n;
}

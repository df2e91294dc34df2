/* test_gpt_api.c — the float32 GPT model's contract apart from gradients:
 * config validation, tensor enumeration and layout, GPT-2 initialization,
 * argument errors, batch independence, causality, activation reuse across
 * batch sizes, gradients bound to the caller's buffers, numerical safety of the loss, and that SGD on one batch
 * lowers its loss. cmocka; exit 0 pass, 1 fail.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gpt.h"
#include "gpt_rng.h"
#include "strata/status.h"

/* cmocka's check with a message; a failure ends the test. */
#define CHECK(cond, ...)               \
    do {                               \
        if (!(cond))                   \
            fail_msg(__VA_ARGS__);     \
    } while (0)

static size_t numel(const gpt_tensor *t) { return (size_t)(t->shape[0] * t->shape[1]); }

static gpt_model *make(const gpt_config *cfg, uint64_t seed)
{
    gpt_model *m = NULL;
    int rc = gpt_create(cfg, seed, &m);
    if (rc) {
        fail_msg("gpt_create: %s %s", strata_status_str(rc), strata_last_error());
    }
    return m;
}

static void fill_tokens(uint8_t *p, size_t n, uint64_t seed, int vocab)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(gpt_splitmix64(&seed) % (uint64_t)vocab);
}

static void test_config_validation(void **state)
{
    (void)state;
    const gpt_config good = { 256, 16, 2, 2, 8 };
    gpt_model *m = (gpt_model *)&m;   /* must be reset to NULL on failure */
    const gpt_config bad[] = {
        { 0, 16, 2, 2, 8 }, { 65537, 16, 2, 2, 8 }, { 256, 0, 2, 2, 8 },
        { 256, 16, 0, 2, 8 }, { 256, 16, 2, 0, 8 }, { 256, 16, 2, 3, 8 },
        { 256, 16, 2, 2, 0 }, { 256, 16, 2, 2, -8 }, { 256, -1, 2, 2, 8 },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        strata_error_clear();
        int rc = gpt_create(&bad[i], 1, &m);
        CHECK(rc == STRATA_ERR_INVALID_ARG, "bad config %zu accepted (rc %d)", i, rc);
        CHECK(m == NULL, "out not reset on failure");
        CHECK(strata_last_error()[0] != '\0', "no error message");
        CHECK(gpt_param_bytes(&bad[i]) == 0, "param_bytes of bad config %zu", i);
        CHECK(gpt_activation_bytes(&bad[i], 1, 1) == 0, "activation_bytes of bad config");
    }
    CHECK(gpt_create(NULL, 1, &m) == STRATA_ERR_INVALID_ARG, "NULL cfg");
    CHECK(gpt_create(&good, 1, NULL) == STRATA_ERR_INVALID_ARG, "NULL out");
    gpt_destroy(NULL);
    CHECK(gpt_activation_bytes(&good, 0, 4) == 0, "B = 0");
    CHECK(gpt_activation_bytes(&good, 2, 17) == 0, "T > max_seq");
    CHECK(gpt_activation_bytes(&good, 2, 8) < gpt_activation_bytes(&good, 4, 8),
          "activation bytes grow with B");

    /* Valid but far too large to allocate (~840 TB): a clean NOMEM. Not
     * under ASan, which reports an oversized allocation as an error. */
    const gpt_config huge = { 256, 1 << 20, 4096, 1, 65536 };
    CHECK(gpt_param_bytes(&huge) > ((size_t)1 << 49), "param_bytes of huge config");
#if !defined(__SANITIZE_ADDRESS__)
    m = (gpt_model *)&m;
    int rc = gpt_create(&huge, 1, &m);
    CHECK(rc == STRATA_ERR_NOMEM && m == NULL, "huge config: rc %d", rc);
#endif
}

static void test_enumeration(void **state)
{
    (void)state;
    const gpt_config cfg = { 256, 16, 3, 2, 8 };
    gpt_model *m = make(&cfg, 5);
    const int L = cfg.n_layer, C = cfg.d_model;
    CHECK(gpt_num_tensors(m) == 2 + 12 * L + 2, "num_tensors %d", gpt_num_tensors(m));
    CHECK(gpt_tensor_at(m, -1) == NULL && gpt_tensor_at(m, gpt_num_tensors(m)) == NULL,
          "out-of-range tensor_at");
    CHECK(gpt_get_config(m)->d_model == C, "get_config");

    static const struct { const char *suffix; int rows, cols; gpt_role role; } blk[12] = {
        { "ln1.weight", 1, 0, GPT_ROLE_VECTOR }, { "ln1.bias", 1, 0, GPT_ROLE_VECTOR },
        { "attn.qkv.weight", 1, 3, GPT_ROLE_MATRIX }, { "attn.qkv.bias", 3, 0, GPT_ROLE_VECTOR },
        { "attn.proj.weight", 1, 1, GPT_ROLE_MATRIX }, { "attn.proj.bias", 1, 0, GPT_ROLE_VECTOR },
        { "ln2.weight", 1, 0, GPT_ROLE_VECTOR }, { "ln2.bias", 1, 0, GPT_ROLE_VECTOR },
        { "mlp.fc.weight", 1, 4, GPT_ROLE_MATRIX }, { "mlp.fc.bias", 4, 0, GPT_ROLE_VECTOR },
        { "mlp.proj.weight", 4, 1, GPT_ROLE_MATRIX }, { "mlp.proj.bias", 1, 0, GPT_ROLE_VECTOR },
    };
    const gpt_tensor *t = gpt_tensor_at(m, 0);
    CHECK(!strcmp(t->name, "wte") && t->ndim == 2 && t->shape[0] == 256 && t->shape[1] == C
          && t->layer == 0 && t->role == GPT_ROLE_EMBEDDING, "wte descriptor");
    t = gpt_tensor_at(m, 1);
    CHECK(!strcmp(t->name, "wpe") && t->ndim == 2 && t->shape[0] == 16 && t->shape[1] == C
          && t->layer == 0 && t->role == GPT_ROLE_EMBEDDING, "wpe descriptor");
    for (int l = 0; l < L; l++) {
        for (int f = 0; f < 12; f++) {
            char want[64];
            snprintf(want, sizeof want, "h.%d.%s", l, blk[f].suffix);
            t = gpt_tensor_at(m, 2 + 12 * l + f);
            CHECK(!strcmp(t->name, want), "tensor %d is %s, want %s", 2 + 12 * l + f,
                  t->name, want);
            CHECK(t->layer == l + 1 && t->role == blk[f].role, "%s layer/role", want);
            CHECK(t->ndim == (blk[f].cols ? 2 : 1), "%s ndim", want);
            CHECK(t->shape[0] == blk[f].rows * C
                  && t->shape[1] == (blk[f].cols ? blk[f].cols * C : 1), "%s shape", want);
        }
    }
    const int n = gpt_num_tensors(m);
    CHECK(!strcmp(gpt_tensor_at(m, n - 2)->name, "lnf.weight")
          && !strcmp(gpt_tensor_at(m, n - 1)->name, "lnf.bias"), "lnf names");
    CHECK(gpt_tensor_at(m, n - 1)->layer == L + 1 && gpt_tensor_at(m, n - 2)->layer == L + 1,
          "lnf layer");

    /* one contiguous allocation each for data and grad, in order */
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        t = gpt_tensor_at(m, i);
        if (i + 1 < n) {
            CHECK(gpt_tensor_at(m, i + 1)->data == t->data + numel(t), "data not contiguous");
            CHECK(gpt_tensor_at(m, i + 1)->grad == t->grad + numel(t), "grad not contiguous");
        }
        total += numel(t);
        for (size_t j = 0; j < numel(t); j++)
            if (t->grad[j] != 0.0f) {
                CHECK(0, "%s: grad not zero after create", t->name);
                break;
            }
    }
    CHECK(total == gpt_num_params(m), "num_params %zu vs sum %zu", gpt_num_params(m), total);
    CHECK(gpt_param_bytes(&cfg) == total * sizeof(float), "param_bytes");
    gpt_destroy(m);
}

static void stats(const gpt_tensor *t, double *mean, double *sd)
{
    double s = 0.0, s2 = 0.0;
    const size_t n = numel(t);
    for (size_t j = 0; j < n; j++) {
        s += t->data[j];
        s2 += (double)t->data[j] * t->data[j];
    }
    *mean = s / n;
    *sd = sqrt(s2 / n - *mean * *mean);
}

static void test_init(void **state)
{
    (void)state;
    const gpt_config cfg = { 256, 128, 4, 4, 128 };
    gpt_model *m = make(&cfg, 42), *m2 = make(&cfg, 42), *m3 = make(&cfg, 43);
    const size_t bytes = gpt_param_bytes(&cfg);
    CHECK(!memcmp(gpt_tensor_at(m, 0)->data, gpt_tensor_at(m2, 0)->data, bytes),
          "same seed, different params");
    CHECK(memcmp(gpt_tensor_at(m, 0)->data, gpt_tensor_at(m3, 0)->data, bytes),
          "different seeds, same params");
    const double resid = 0.02 / sqrt(2.0 * cfg.n_layer);
    for (int i = 0; i < gpt_num_tensors(m); i++) {
        const gpt_tensor *t = gpt_tensor_at(m, i);
        double mean, sd;
        stats(t, &mean, &sd);
        const size_t len = strlen(t->name);
        if (t->ndim == 2) {
            const int is_resid = strstr(t->name, ".proj.weight") != NULL;
            const double want = is_resid ? resid : 0.02;
            CHECK(fabs(sd - want) < 0.05 * want, "%s: std %.5f, want %.5f", t->name, sd, want);
            CHECK(fabs(mean) < 0.1 * want, "%s: mean %.5f", t->name, mean);
        } else if (len > 7 && !strcmp(t->name + len - 7, ".weight")) {
            CHECK(mean == 1.0 && sd == 0.0, "%s: layernorm gain not all 1", t->name);
        } else {
            CHECK(mean == 0.0 && sd == 0.0, "%s: bias not all 0", t->name);
        }
    }
    gpt_destroy(m);
    gpt_destroy(m2);
    gpt_destroy(m3);
}

static void test_forward_errors(void **state)
{
    (void)state;
    const gpt_config cfg = { 100, 8, 1, 2, 8 };
    gpt_model *m = make(&cfg, 1);
    uint8_t x[16] = { 0 }, y[16] = { 0 };
    float loss;
    CHECK(gpt_probs(m) == NULL, "probs before forward");
    CHECK(gpt_forward(m, x, y, 0, 4, NULL, NULL, &loss) == STRATA_ERR_INVALID_ARG, "B = 0");
    CHECK(gpt_forward(m, x, y, 2, 0, NULL, NULL, &loss) == STRATA_ERR_INVALID_ARG, "T = 0");
    CHECK(gpt_forward(m, x, y, 1, 9, NULL, NULL, &loss) == STRATA_ERR_INVALID_ARG, "T > max");
    CHECK(gpt_forward(m, NULL, y, 2, 4, NULL, NULL, &loss) == STRATA_ERR_INVALID_ARG, "NULL x");
    CHECK(gpt_forward(NULL, x, y, 2, 4, NULL, NULL, &loss) == STRATA_ERR_INVALID_ARG, "NULL m");
    x[3] = 100;
    CHECK(gpt_forward(m, x, y, 2, 4, NULL, NULL, &loss) == STRATA_ERR_INVALID_ARG,
          "input token >= vocab");
    x[3] = 99;
    y[5] = 200;
    CHECK(gpt_forward(m, x, y, 2, 4, NULL, NULL, &loss) == STRATA_ERR_INVALID_ARG,
          "target token >= vocab");
    CHECK(gpt_backward(m, NULL, NULL) == STRATA_ERR_STATE, "backward after failed forward");
    y[5] = 0;
    CHECK(gpt_forward(m, x, y, 2, 4, NULL, NULL, NULL) == 0, "NULL loss_out is allowed");
    CHECK(gpt_backward(m, NULL, NULL) == 0, "backward");
    CHECK(gpt_backward(NULL, NULL, NULL) == STRATA_ERR_INVALID_ARG, "backward NULL");
    gpt_zero_grad(NULL);
    gpt_destroy(m);
}

/* Loss at init is close to ln(vocab); probabilities are distributions; each
 * sequence of a batch is computed independently; position t does not see
 * inputs after t. */
static void test_semantics(void **state)
{
    (void)state;
    enum { B = 3, T = 12 };
    const gpt_config cfg = { 256, 16, 2, 4, 32 };
    gpt_model *m = make(&cfg, 3);
    uint8_t x[B * T], y[B * T];
    fill_tokens(x, sizeof x, 1, 256);
    fill_tokens(y, sizeof y, 2, 256);
    float loss;
    CHECK(gpt_forward(m, x, y, B, T, NULL, NULL, &loss) == 0, "forward");
    CHECK(fabsf(loss - logf(256.0f)) < 0.1f, "init loss %.4f, ln 256 = %.4f", loss,
          logf(256.0f));
    static float probs[B * T * 256];
    memcpy(probs, gpt_probs(m), sizeof probs);
    for (int n = 0; n < B * T; n++) {
        double s = 0.0;
        for (int v = 0; v < 256; v++)
            s += probs[n * 256 + v];
        CHECK(fabs(s - 1.0) < 1e-5, "probs row %d sums to %.7f", n, s);
    }

    /* each row alone gives the same distributions; mean of row losses */
    double mean_loss = 0.0;
    float maxdiff = 0.0f;
    for (int b = 0; b < B; b++) {
        float lb;
        CHECK(gpt_forward(m, x + b * T, y + b * T, 1, T, NULL, NULL, &lb) == 0, "row fwd");
        mean_loss += lb / B;
        const float *p = gpt_probs(m);
        for (int j = 0; j < T * 256; j++)
            maxdiff = fmaxf(maxdiff, fabsf(p[j] - probs[b * T * 256 + j]));
    }
    CHECK(fabs(mean_loss - loss) < 1e-5 * loss, "batch loss %.7f vs mean of rows %.7f", loss,
          mean_loss);
    CHECK(maxdiff < 1e-6f, "row-alone probs differ by %g", maxdiff);

    /* causality: changing input t0 leaves positions < t0 unchanged */
    const int t0 = 7;
    x[T + t0] ^= 0x55;
    CHECK(gpt_forward(m, x, y, B, T, NULL, NULL, &loss) == 0, "forward");
    const float *p = gpt_probs(m);
    float before = 0.0f, after = 0.0f;
    for (int t = 0; t < T; t++)
        for (int v = 0; v < 256; v++) {
            float d = fabsf(p[(T + t) * 256 + v] - probs[(T + t) * 256 + v]);
            if (t < t0)
                before = fmaxf(before, d);
            else
                after = fmaxf(after, d);
        }
    CHECK(before < 1e-6f, "positions before the change moved by %g", before);
    CHECK(after > 1e-4f, "positions from the change did not move (%g)", after);
    gpt_destroy(m);
}

/* Batches of different sizes in one model give what a fresh model gives. */
static void test_activation_reuse(void **state)
{
    (void)state;
    const gpt_config cfg = { 256, 32, 2, 2, 16 };
    gpt_model *m = make(&cfg, 9);
    static const int shapes[][2] = { { 4, 8 }, { 1, 4 }, { 8, 32 }, { 2, 16 }, { 32, 1 } };
    uint8_t x[8 * 32], y[8 * 32];
    fill_tokens(x, sizeof x, 11, 256);
    fill_tokens(y, sizeof y, 12, 256);
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const int B = shapes[i][0], T = shapes[i][1];
        gpt_model *fresh = make(&cfg, 9);
        float l1, l2;
        CHECK(gpt_forward(m, x, y, B, T, NULL, NULL, &l1) == 0, "forward B=%d T=%d", B, T);
        CHECK(gpt_forward(fresh, x, y, B, T, NULL, NULL, &l2) == 0, "fresh forward");
        CHECK(l1 == l2, "B=%d T=%d: reused model loss %.8f vs fresh %.8f", B, T, l1, l2);
        gpt_zero_grad(m);
        CHECK(gpt_backward(m, NULL, NULL) == 0 && gpt_backward(fresh, NULL, NULL) == 0,
              "backward");
        CHECK(!memcmp(gpt_tensor_at(m, 0)->grad, gpt_tensor_at(fresh, 0)->grad,
                      gpt_param_bytes(&cfg)), "B=%d T=%d: reused model grads differ", B, T);
        gpt_destroy(fresh);
    }
    gpt_destroy(m);
}

/* Gradients given up (gpt_grads_release) and bound per tensor to the
 * caller's buffers (sharded gradients): gpt_zero_grad zeroes the bound ones
 * and the backward writes there what the model's own allocation holds, bit
 * for bit; binding before the release is refused. */
static void test_grads_bound(void **state)
{
    (void)state;
    enum { B = 2, T = 8 };
    const gpt_config cfg = { 256, 16, 2, 2, 16 };
    gpt_model *a = make(&cfg, 5), *b = make(&cfg, 5);
    CHECK(gpt_tensor_bind_grad(b, 0, NULL) != 0, "bind_grad before the release accepted");
    gpt_grads_release(b);
    const int n = gpt_num_tensors(b);
    float **g = calloc((size_t)n, sizeof *g);
    CHECK(g != NULL, "calloc");
    for (int i = 0; i < n; i++) {
        CHECK(gpt_tensor_at(b, i)->grad == NULL, "tensor %d keeps a gradient", i);
        const size_t k = numel(gpt_tensor_at(b, i));
        g[i] = malloc(k * sizeof(float));
        CHECK(g[i] != NULL, "malloc");
        memset(g[i], 0x7f, k * sizeof(float)); /* garbage: zero_grad must clear it */
        CHECK(gpt_tensor_bind_grad(b, i, g[i]) == 0, "bind_grad %d", i);
    }
    uint8_t x[B * T], y[B * T];
    fill_tokens(x, sizeof x, 21, 256);
    fill_tokens(y, sizeof y, 22, 256);
    float la, lb;
    gpt_zero_grad(b);
    CHECK(gpt_forward(a, x, y, B, T, NULL, NULL, &la) == 0 &&
          gpt_forward(b, x, y, B, T, NULL, NULL, &lb) == 0 && la == lb, "forward");
    CHECK(gpt_backward(a, NULL, NULL) == 0 && gpt_backward(b, NULL, NULL) == 0, "backward");
    for (int i = 0; i < n; i++)
        CHECK(!memcmp(gpt_tensor_at(a, i)->grad, g[i], numel(gpt_tensor_at(a, i)) *
                                                         sizeof(float)),
              "tensor %d: the bound gradient differs from the model's own", i);
    gpt_destroy(a);
    gpt_destroy(b);
    for (int i = 0; i < n; i++)
        free(g[i]);
    free(g);
}

/* Huge logits: the loss stays finite (log-sum-exp), probabilities finite. */
static void test_extreme_logits(void **state)
{
    (void)state;
    enum { B = 2, T = 4 };
    const gpt_config cfg = { 256, 8, 1, 2, 8 };
    gpt_model *m = make(&cfg, 4);
    const gpt_tensor *wte = gpt_tensor_at(m, 0);
    for (size_t j = 0; j < numel(wte); j++)
        wte->data[j] *= 5000.0f;
    uint8_t x[B * T], y[B * T];
    fill_tokens(x, sizeof x, 5, 256);
    fill_tokens(y, sizeof y, 6, 256);
    float loss;
    CHECK(gpt_forward(m, x, y, B, T, NULL, NULL, &loss) == 0, "forward");
    CHECK(isfinite(loss) && loss > 10.0f, "loss with huge logits: %g", loss);
    const float *p = gpt_probs(m);
    for (int j = 0; j < B * T * 256; j++)
        if (!isfinite(p[j])) {
            CHECK(0, "non-finite probability");
            break;
        }
    CHECK(gpt_backward(m, NULL, NULL) == 0, "backward");
    const size_t n = gpt_num_params(m);
    const float *g = gpt_tensor_at(m, 0)->grad;
    for (size_t j = 0; j < n; j++)
        if (!isfinite(g[j])) {
            CHECK(0, "non-finite gradient at %zu", j);
            break;
        }
    gpt_destroy(m);
}

/* Plain SGD on one fixed batch must drive its loss down: forward, backward
 * and the tensor enumeration fit together. */
static void test_overfit(void **state)
{
    (void)state;
    enum { B = 4, T = 16 };
    const gpt_config cfg = { 256, 16, 2, 2, 32 };
    gpt_model *m = make(&cfg, 8);
    uint8_t x[B * T], y[B * T];
    const char *text = "the quick brown fox jumps over the lazy dog, again and again. ";
    for (int i = 0; i < B * T; i++) {
        x[i] = (uint8_t)text[i % 63];
        y[i] = (uint8_t)text[(i + 1) % 63];
    }
    float first = 0.0f, loss = 0.0f;
    for (int step = 0; step < 150; step++) {
        gpt_zero_grad(m);
        CHECK(gpt_forward(m, x, y, B, T, NULL, NULL, &loss) == 0, "forward");
        CHECK(gpt_backward(m, NULL, NULL) == 0, "backward");
        if (step == 0)
            first = loss;
        for (int i = 0; i < gpt_num_tensors(m); i++) {
            const gpt_tensor *t = gpt_tensor_at(m, i);
            for (size_t j = 0; j < numel(t); j++)
                t->data[j] -= 0.5f * t->grad[j];
        }
    }
    printf("overfit one batch with SGD: loss %.3f -> %.3f after 150 steps\n", first, loss);
    CHECK(loss < 0.5f * first, "loss did not fall: %.3f -> %.3f", first, loss);
    gpt_destroy(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_validation),
        cmocka_unit_test(test_enumeration),
        cmocka_unit_test(test_init),
        cmocka_unit_test(test_forward_errors),
        cmocka_unit_test(test_semantics),
        cmocka_unit_test(test_activation_reuse),
        cmocka_unit_test(test_grads_bound),
        cmocka_unit_test(test_extreme_logits),
        cmocka_unit_test(test_overfit),
    };
    return cmocka_run_group_tests_name("gpt_api", tests, NULL, NULL) ? 1 : 0;
}

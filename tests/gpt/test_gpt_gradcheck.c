/* test_gpt_gradcheck.c — the GPT model's gradients against finite
 * differences, in double; the float32 model against the double one; gradient
 * accumulation; the order of the layer callbacks.
 *
 * Tiny config: vocab 256, max_seq 6, 2 layers, d_model 8, 2 heads, B 2, T 5
 * (T < max_seq so one wpe row is unused and must get a zero gradient).
 * Parameters are set well away from GPT-2's small init (matrices N(0, 0.4),
 * vectors init + N(0, 0.2)) so that attention is far from uniform and GELU
 * far from linear: every path then carries a gradient worth checking.
 *
 * Checks and tolerances:
 *   1. double analytic gradient vs central difference, h = 1e-5, on a
 *      random subset of coordinates of EVERY tensor (all coordinates of the
 *      small ones; for wte, mostly rows of tokens that occur):
 *        |a - fd| <= 1e-6 * max(|a|, |fd|) + 1e-9
 *      i.e. 1e-6 relative, with an absolute floor of 1e-9 for gradients that
 *      are zero or tiny (central-difference roundoff is about
 *      eps * loss / h = 1e-10 here).
 *   2. float32 loss vs double loss, same parameters: relative error <= 1e-5.
 *   3. float32 gradient vs double, per tensor: ||g32 - g64|| / ||g64|| <= 1e-3.
 *   4. backward accumulates: a second backward doubles the gradients
 *      (relative 1e-12 in double, 1e-6 in float); forward + backward on a
 *      second batch adds that batch's gradient.
 *   5. callbacks: forward 0, 1, ..., L+1; backward L+1, ..., 0; a nonzero
 *      return aborts and is returned; backward needs a forward with targets.
 *   6. 2-byte ids: byte ids through gpt_forward_tokens are bit-identical to
 *      gpt_forward; vocab 300 passes 1.'s check on wte and a qkv matrix.
 * cmocka, one test per numbered check; exit 0 pass, 1 fail.
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
#include "gpt_double.h"
#include "gpt_rng.h"
#include "strata/status.h"

enum { B = 2, T = 5, L = 2 };
static const gpt_config cfg = { .vocab = 256, .max_seq = 6, .n_layer = L, .n_head = 2,
                                .d_model = 8 };

#define FD_H 1e-5
#define FD_REL 1e-6
#define FD_ABS 1e-9
#define LOSS_REL_F32 1e-5
#define GRAD_REL_F32 1e-3

/* cmocka's check with a message; a failure ends the test. */
#define CHECK(cond, ...)               \
    do {                               \
        if (!(cond))                   \
            fail_msg(__VA_ARGS__);     \
    } while (0)

static size_t numel(int64_t const shape[2]) { return (size_t)(shape[0] * shape[1]); }

static double loss_of(gptd_model *m, const uint8_t *x, const uint8_t *y)
{
    double loss = NAN;
    int rc = gptd_forward(m, x, y, B, T, NULL, NULL, &loss);
    CHECK(rc == 0, "gptd_forward: %s %s", strata_status_str(rc), strata_last_error());
    return loss;
}

/* ---- 1. finite differences -------------------------------------------- */

typedef struct fd_stats {
    int checked, failed;
    double max_rel;      /* over coordinates with |grad| >= 1e-6 */
    double max_abs;
} fd_stats;

static void check_coord(gptd_model *m, const gptd_tensor *t, size_t j, const uint8_t *x,
                        const uint8_t *y, fd_stats *st)
{
    const double orig = t->data[j], a = t->grad[j];
    t->data[j] = orig + FD_H;
    const double lp = loss_of(m, x, y);
    t->data[j] = orig - FD_H;
    const double lm = loss_of(m, x, y);
    t->data[j] = orig;
    const double fd = (lp - lm) / (2 * FD_H);
    const double err = fabs(a - fd), scale = fmax(fabs(a), fabs(fd));
    st->checked++;
    if (err > st->max_abs)
        st->max_abs = err;
    if (fabs(a) >= 1e-6 && err / scale > st->max_rel)
        st->max_rel = err / scale;
    if (err > FD_REL * scale + FD_ABS) {
        st->failed++;
        print_error("%s[%zu]: analytic %.12g, central difference %.12g (rel %.3g)\n", t->name,
                    j, a, fd, scale > 0 ? err / scale : 0.0);
    }
}

static void gradcheck(gptd_model *m, const uint8_t *x, const uint8_t *y)
{
    gptd_zero_grad(m);
    loss_of(m, x, y);
    int rc = gptd_backward(m, NULL, NULL);
    CHECK(rc == 0, "gptd_backward: %s", strata_status_str(rc));

    gpt_rng r;
    gpt_rng_seed(&r, 99);
    fd_stats all = { 0 };
    const int nt = gptd_num_tensors(m);
    for (int i = 0; i < nt; i++) {
        const gptd_tensor *t = gptd_tensor_at(m, i);
        const size_t n = numel(t->shape), cols = (size_t)t->shape[1];
        fd_stats st = { 0 };
        if (strcmp(t->name, "wte") == 0) {
            /* rows of tokens that occur carry the gradient; check 20 of
             * those and 4 anywhere (mostly rows that must stay exactly 0) */
            for (int k = 0; k < 24; k++) {
                size_t row = k < 20 ? x[gpt_rng_next(&r) % (B * T)] : gpt_rng_next(&r) % 256;
                check_coord(m, t, row * cols + gpt_rng_next(&r) % cols, x, y, &st);
            }
        } else if (n <= 48) {
            for (size_t j = 0; j < n; j++)
                check_coord(m, t, j, x, y, &st);
        } else {
            for (int k = 0; k < 32; k++)
                check_coord(m, t, gpt_rng_next(&r) % n, x, y, &st);
        }
        if (strcmp(t->name, "wpe") == 0) {   /* row T is past the sequence */
            for (size_t c = 0; c < cols; c++)
                CHECK(t->grad[(size_t)T * cols + c] == 0.0, "wpe row %d grad not 0", T);
        }
        printf("  %-22s checked %3d  max rel %.2e  max abs %.2e\n", t->name, st.checked,
               st.max_rel, st.max_abs);
        all.checked += st.checked;
        all.failed += st.failed;
        all.max_rel = fmax(all.max_rel, st.max_rel);
        all.max_abs = fmax(all.max_abs, st.max_abs);
    }
    printf("gradcheck (double, h=%g): %d coordinates of %d tensors, %d failed; "
           "max rel err %.3e (|g| >= 1e-6), max abs err %.3e; tolerance %g rel + %g abs\n",
           FD_H, all.checked, nt, all.failed, all.max_rel, all.max_abs, FD_REL, FD_ABS);
    CHECK(all.failed == 0, "%d of %d coordinates outside the tolerance", all.failed, all.checked);
}

/* ---- 2, 3. float32 vs double ------------------------------------------- */

static void compare_f32(gpt_model *mf, gptd_model *md, const uint8_t *x, const uint8_t *y)
{
    double ld;
    float lf;
    gptd_zero_grad(md);
    gpt_zero_grad(mf);
    CHECK(gptd_forward(md, x, y, B, T, NULL, NULL, &ld) == 0, "gptd_forward");
    CHECK(gptd_backward(md, NULL, NULL) == 0, "gptd_backward");
    CHECK(gpt_forward(mf, x, y, B, T, NULL, NULL, &lf) == 0, "gpt_forward");
    CHECK(gpt_backward(mf, NULL, NULL) == 0, "gpt_backward");
    const double loss_rel = fabs((double)lf - ld) / fabs(ld);
    CHECK(loss_rel <= LOSS_REL_F32, "float loss %.9g vs double %.12g: rel %.3g", lf, ld,
          loss_rel);

    double worst = 0.0;
    const char *worst_name = "";
    for (int i = 0; i < gpt_num_tensors(mf); i++) {
        const gpt_tensor *tf = gpt_tensor_at(mf, i);
        const gptd_tensor *td = gptd_tensor_at(md, i);
        double diff = 0.0, ref = 0.0;
        for (size_t j = 0; j < numel(td->shape); j++) {
            diff += ((double)tf->grad[j] - td->grad[j]) * ((double)tf->grad[j] - td->grad[j]);
            ref += td->grad[j] * td->grad[j];
        }
        CHECK(ref > 0.0, "%s: double gradient is all zero", td->name);
        const double rel = sqrt(diff / ref);
        CHECK(rel <= GRAD_REL_F32, "%s: float grad rel err %.3g", td->name, rel);
        if (rel > worst) {
            worst = rel;
            worst_name = td->name;
        }
    }
    printf("float32 vs double: loss %.9g vs %.12g (rel %.2e, tol %g); "
           "worst tensor grad rel err %.2e (%s, tol %g)\n",
           lf, ld, loss_rel, LOSS_REL_F32, worst, worst_name, GRAD_REL_F32);
}

/* ---- 4. accumulation --------------------------------------------------- */

static double *grads_copy_d(const gptd_model *m)
{
    double *g = malloc(gptd_num_params(m) * sizeof *g);
    if (!g)
        abort();
    size_t off = 0;
    for (int i = 0; i < gptd_num_tensors(m); i++) {
        const gptd_tensor *t = gptd_tensor_at(m, i);
        memcpy(g + off, t->grad, numel(t->shape) * sizeof *g);
        off += numel(t->shape);
    }
    return g;
}

/* max over tensors of ||grad - (a * g1 + b * g2)|| / ||a * g1 + b * g2|| */
static double grads_rel_err_d(const gptd_model *m, const double *g1, double a,
                              const double *g2, double b)
{
    double worst = 0.0;
    size_t off = 0;
    for (int i = 0; i < gptd_num_tensors(m); i++) {
        const gptd_tensor *t = gptd_tensor_at(m, i);
        double diff = 0.0, ref = 0.0;
        for (size_t j = 0; j < numel(t->shape); j++, off++) {
            double want = a * g1[off] + (g2 ? b * g2[off] : 0.0);
            diff += (t->grad[j] - want) * (t->grad[j] - want);
            ref += want * want;
        }
        if (ref > 0.0)
            worst = fmax(worst, sqrt(diff / ref));
        else
            worst = fmax(worst, sqrt(diff));
    }
    return worst;
}

static void check_accumulation(gpt_model *mf, gptd_model *md, const uint8_t *x,
                               const uint8_t *y, const uint8_t *x2, const uint8_t *y2)
{
    /* double: backward twice == 2x; then a second batch adds its gradient */
    gptd_zero_grad(md);
    loss_of(md, x2, y2);
    gptd_backward(md, NULL, NULL);
    double *g2 = grads_copy_d(md);
    gptd_zero_grad(md);
    loss_of(md, x, y);
    gptd_backward(md, NULL, NULL);
    double *g1 = grads_copy_d(md);
    CHECK(gptd_backward(md, NULL, NULL) == 0, "second backward");
    const double e2 = grads_rel_err_d(md, g1, 2.0, NULL, 0.0);
    CHECK(e2 <= 1e-12, "double: two backward passes != 2x gradient (rel %.3g)", e2);
    loss_of(md, x2, y2);
    gptd_backward(md, NULL, NULL);
    const double e3 = grads_rel_err_d(md, g1, 2.0, g2, 1.0);
    CHECK(e3 <= 1e-12, "double: accumulated batch != sum of gradients (rel %.3g)", e3);

    /* float: backward twice == 2x */
    gpt_zero_grad(mf);
    float lf;
    gpt_forward(mf, x, y, B, T, NULL, NULL, &lf);
    gpt_backward(mf, NULL, NULL);
    const size_t n = gpt_num_params(mf);
    float *f1 = malloc(n * sizeof *f1);
    if (!f1)
        abort();
    memcpy(f1, gpt_tensor_at(mf, 0)->grad, n * sizeof *f1);   /* contiguous */
    gpt_backward(mf, NULL, NULL);
    const float *fg = gpt_tensor_at(mf, 0)->grad;
    double diff = 0.0, ref = 0.0;
    for (size_t j = 0; j < n; j++) {
        diff += ((double)fg[j] - 2.0 * f1[j]) * ((double)fg[j] - 2.0 * f1[j]);
        ref += 4.0 * f1[j] * f1[j];
    }
    const double ef = sqrt(diff / ref);
    CHECK(ef <= 1e-6, "float: two backward passes != 2x gradient (rel %.3g)", ef);
    printf("accumulation: double 2x rel %.2e, batch sum rel %.2e; float 2x rel %.2e\n",
           e2, e3, ef);
    free(f1);
    free(g1);
    free(g2);
}

/* ---- 5. callbacks ------------------------------------------------------ */

typedef struct trace {
    int seq[64];
    int n;
    int fail_at;   /* return 42 + layer at this layer; -1 never */
} trace;

static int record(void *ctx, int layer)
{
    trace *tr = ctx;
    if (tr->n < 64)
        tr->seq[tr->n++] = layer;
    return layer == tr->fail_at ? 42 + layer : 0;
}

static void check_callbacks(gptd_model *md, gpt_model *mf, const uint8_t *x, const uint8_t *y)
{
    gptd_model *fresh = NULL;
    CHECK(gptd_create(&cfg, 1, &fresh) == 0, "create");
    int rc = gptd_backward(fresh, NULL, NULL);
    CHECK(rc == STRATA_ERR_STATE, "backward before any forward: got %d", rc);
    gptd_destroy(fresh);

    trace tr = { .n = 0, .fail_at = -1 };
    double loss;
    CHECK(gptd_forward(md, x, y, B, T, record, &tr, &loss) == 0, "forward with callback");
    CHECK(tr.n == L + 2, "forward: %d callbacks, want %d", tr.n, L + 2);
    for (int i = 0; i < tr.n && i < L + 2; i++)
        CHECK(tr.seq[i] == i, "forward callback %d got layer %d", i, tr.seq[i]);
    tr.n = 0;
    CHECK(gptd_backward(md, record, &tr) == 0, "backward with callback");
    CHECK(tr.n == L + 2, "backward: %d callbacks, want %d", tr.n, L + 2);
    for (int i = 0; i < tr.n && i < L + 2; i++)
        CHECK(tr.seq[i] == L + 1 - i, "backward callback %d got layer %d", i, tr.seq[i]);

    /* float instance: same order */
    float lf;
    tr.n = 0;
    CHECK(gpt_forward(mf, x, y, B, T, record, &tr, &lf) == 0, "float forward");
    CHECK(gpt_backward(mf, record, &tr) == 0, "float backward");
    CHECK(tr.n == 2 * (L + 2), "float: %d callbacks", tr.n);
    for (int i = 0; i < L + 2 && i < tr.n; i++)
        CHECK(tr.seq[i] == i && tr.seq[L + 2 + i] == L + 1 - i, "float callback order");

    /* aborts */
    tr.n = 0;
    tr.fail_at = 1;
    rc = gptd_forward(md, x, y, B, T, record, &tr, &loss);
    CHECK(rc == 43, "forward abort returned %d, want 43", rc);
    CHECK(tr.n == 2, "forward went on after abort (%d callbacks)", tr.n);
    rc = gptd_backward(md, NULL, NULL);
    CHECK(rc == STRATA_ERR_STATE, "backward after aborted forward: got %d", rc);
    tr.fail_at = -1;
    CHECK(gptd_forward(md, x, y, B, T, NULL, NULL, &loss) == 0, "forward");
    tr.n = 0;
    tr.fail_at = L;
    rc = gptd_backward(md, record, &tr);
    CHECK(rc == 42 + L, "backward abort returned %d, want %d", rc, 42 + L);
    CHECK(tr.n == 2, "backward went on after abort (%d callbacks)", tr.n);

    /* no targets: loss is NaN and backward is refused */
    loss = 0.0;
    CHECK(gptd_forward(md, x, NULL, B, T, NULL, NULL, &loss) == 0, "forward without targets");
    CHECK(isnan(loss), "loss without targets should be NaN, got %g", loss);
    rc = gptd_backward(md, NULL, NULL);
    CHECK(rc == STRATA_ERR_STATE, "backward after forward without targets: got %d", rc);
    printf("callbacks: forward 0..%d, backward %d..0, aborts and state errors ok\n",
           L + 1, L + 1);
}

/* ---- setup ------------------------------------------------------------- */

/* The two models after the init check, moved away from the init to
 * float-representable values shared by both, and two batches. */
typedef struct fixture {
    gptd_model *md;
    gpt_model *mf;
    char init_mismatch[160]; /* first difference between the inits; "" when none */
    uint8_t x[B * T], y[B * T], x2[B * T], y2[B * T];
} fixture;

static int fixture_setup(void **state)
{
    static fixture f;
    memset(&f, 0, sizeof f);
    int rc = gptd_create(&cfg, 2024, &f.md);
    if (!rc)
        rc = gpt_create(&cfg, 2024, &f.mf);
    if (rc) {
        print_error("create: %s %s\n", strata_status_str(rc), strata_last_error());
        gptd_destroy(f.md);
        return -1;
    }

    /* Same seed, same numbers: the float init is the double init rounded
     * (asserted by test_init_is_double_init_rounded). */
    for (int i = 0; i < gptd_num_tensors(f.md) && !f.init_mismatch[0]; i++) {
        const gptd_tensor *td = gptd_tensor_at(f.md, i);
        const gpt_tensor *tf = gpt_tensor_at(f.mf, i);
        if (strcmp(td->name, tf->name) != 0) {
            snprintf(f.init_mismatch, sizeof f.init_mismatch, "tensor %d names differ: %s, %s",
                     i, td->name, tf->name);
            break;
        }
        for (size_t j = 0; j < numel(td->shape); j++)
            if (tf->data[j] != (float)td->data[j]) {
                snprintf(f.init_mismatch, sizeof f.init_mismatch,
                         "%s[%zu]: float init %g != (float) double init %g", tf->name, j,
                         tf->data[j], td->data[j]);
                break;
            }
    }

    gpt_rng r;
    gpt_rng_seed(&r, 7);
    for (int i = 0; i < gptd_num_tensors(f.md); i++) {
        const gptd_tensor *td = gptd_tensor_at(f.md, i);
        const gpt_tensor *tf = gpt_tensor_at(f.mf, i);
        const double sigma = td->ndim == 2 ? 0.4 : 0.2;
        for (size_t j = 0; j < numel(td->shape); j++) {
            tf->data[j] = (float)(td->data[j] + sigma * gpt_rng_normal(&r));
            td->data[j] = (double)tf->data[j];
        }
    }
    for (int i = 0; i < B * T; i++) {
        f.x[i] = (uint8_t)('a' + gpt_rng_next(&r) % 5);   /* repeats: shared wte rows */
        f.y[i] = (uint8_t)gpt_rng_next(&r);
        f.x2[i] = (uint8_t)gpt_rng_next(&r);
        f.y2[i] = (uint8_t)('a' + gpt_rng_next(&r) % 7);
    }
    *state = &f;
    return 0;
}

static int fixture_teardown(void **state)
{
    fixture *f = *state;
    gpt_destroy(f->mf);
    gptd_destroy(f->md);
    return 0;
}

static void test_init_is_double_init_rounded(void **state)
{
    const fixture *f = *state;
    CHECK(f->init_mismatch[0] == '\0', "%s", f->init_mismatch);
}

static void test_gradcheck(void **state)
{
    fixture *f = *state;
    gradcheck(f->md, f->x, f->y);
}

static void test_f32_vs_double(void **state)
{
    fixture *f = *state;
    compare_f32(f->mf, f->md, f->x, f->y);
}

static void test_accumulation(void **state)
{
    fixture *f = *state;
    check_accumulation(f->mf, f->md, f->x, f->y, f->x2, f->y2);
}

static void test_callbacks(void **state)
{
    fixture *f = *state;
    check_callbacks(f->md, f->mf, f->x, f->y);
}

/* 6. 2-byte ids (gpt_forward_tokens): byte ids give gpt_forward's loss and
 * gradients bit for bit; a vocabulary of 300 (ids above 255 as inputs and
 * targets) passes the finite-difference check of 1. on wte and the first
 * block's qkv; an id >= vocab is refused. */
static void test_tokens(void **state)
{
    fixture *f = *state;
    uint16_t x16[B * T], y16[B * T];
    for (int i = 0; i < B * T; i++) {
        x16[i] = f->x[i];
        y16[i] = f->y[i];
    }
    float l8 = NAN, l16 = NAN;
    gpt_zero_grad(f->mf);
    CHECK(gpt_forward(f->mf, f->x, f->y, B, T, NULL, NULL, &l8) == 0 &&
          gpt_backward(f->mf, NULL, NULL) == 0, "byte forward/backward");
    const size_t np = gpt_num_params(f->mf);
    float *g8 = malloc(np * sizeof *g8);
    CHECK(g8 != NULL, "out of memory");
    for (int i = 0, o = 0; i < gpt_num_tensors(f->mf); i++) {
        const gpt_tensor *t = gpt_tensor_at(f->mf, i);
        memcpy(g8 + o, t->grad, numel(t->shape) * sizeof *g8);
        o += (int)numel(t->shape);
    }
    gpt_zero_grad(f->mf);
    CHECK(gpt_forward_tokens(f->mf, x16, y16, B, T, NULL, NULL, &l16) == 0 &&
          gpt_backward(f->mf, NULL, NULL) == 0, "token forward/backward");
    CHECK(memcmp(&l8, &l16, sizeof l8) == 0, "loss: bytes %.9g, tokens %.9g", l8, l16);
    for (int i = 0, o = 0; i < gpt_num_tensors(f->mf); i++) {
        const gpt_tensor *t = gpt_tensor_at(f->mf, i);
        CHECK(memcmp(g8 + o, t->grad, numel(t->shape) * sizeof *g8) == 0,
              "%s: gradients differ between byte and token ids", t->name);
        o += (int)numel(t->shape);
    }
    free(g8);

    gpt_config c300 = cfg;
    c300.vocab = 300;
    gptd_model *m = NULL;
    CHECK(gptd_create(&c300, 5, &m) == 0, "vocab 300: %s", strata_last_error());
    gpt_rng r;
    gpt_rng_seed(&r, 11);
    for (int i = 0; i < gptd_num_tensors(m); i++) {
        const gptd_tensor *t = gptd_tensor_at(m, i);
        for (size_t j = 0; j < numel(t->shape); j++)
            t->data[j] += (t->ndim == 2 ? 0.4 : 0.2) * gpt_rng_normal(&r);
    }
    for (int i = 0; i < B * T; i++) {
        x16[i] = (uint16_t)(250 + gpt_rng_next(&r) % 50); /* straddles 256 */
        y16[i] = (uint16_t)(gpt_rng_next(&r) % 300);
    }
    double loss = NAN;
    gptd_zero_grad(m);
    CHECK(gptd_forward_tokens(m, x16, y16, B, T, NULL, NULL, &loss) == 0 &&
          gptd_backward(m, NULL, NULL) == 0, "vocab 300 forward/backward");
    fd_stats st = {0};
    const gptd_tensor *wte = gptd_tensor_at(m, 0), *qkv = gptd_tensor_at(m, 4);
    CHECK(wte->shape[0] == 300 && strcmp(qkv->name, "h.0.attn.qkv.weight") == 0,
          "tensor table: %s %lld", qkv->name, (long long)wte->shape[0]);
    for (int k = 0; k < 24; k++) {
        const size_t row = k < 16 ? x16[k % (B * T)] : k < 20 ? y16[k % (B * T)] : 256 + k,
                     jw = row * (size_t)wte->shape[1] + (size_t)(k % wte->shape[1]),
                     jq = gpt_rng_next(&r) % numel(qkv->shape);
        const struct { const gptd_tensor *t; size_t j; } pick[2] = {{wte, jw}, {qkv, jq}};
        for (int p = 0; p < 2; p++) {
            double *d = pick[p].t->data;
            const double orig = d[pick[p].j], a = pick[p].t->grad[pick[p].j];
            double lp, lm;
            d[pick[p].j] = orig + FD_H;
            CHECK(gptd_forward_tokens(m, x16, y16, B, T, NULL, NULL, &lp) == 0, "fd +");
            d[pick[p].j] = orig - FD_H;
            CHECK(gptd_forward_tokens(m, x16, y16, B, T, NULL, NULL, &lm) == 0, "fd -");
            d[pick[p].j] = orig;
            const double fd = (lp - lm) / (2 * FD_H), err = fabs(a - fd);
            st.checked++;
            if (err > FD_REL * fmax(fabs(a), fabs(fd)) + FD_ABS) {
                st.failed++;
                print_error("vocab 300 %s[%zu]: analytic %.12g, central difference %.12g\n",
                            pick[p].t->name, pick[p].j, a, fd);
            }
        }
    }
    CHECK(st.failed == 0, "vocab 300: %d of %d coordinates off", st.failed, st.checked);
    x16[3] = 300;
    CHECK(gptd_forward_tokens(m, x16, y16, B, T, NULL, NULL, &loss) == STRATA_ERR_INVALID_ARG,
          "id 300 with vocab 300 accepted");
    gptd_destroy(m);
}

int main(void)
{
    /* In this order: each check starts from the parameters the setup left,
     * and recomputes the gradients it needs. */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_init_is_double_init_rounded),
        cmocka_unit_test(test_gradcheck),
        cmocka_unit_test(test_f32_vs_double),
        cmocka_unit_test(test_accumulation),
        cmocka_unit_test(test_callbacks),
        cmocka_unit_test(test_tokens),
    };
    return cmocka_run_group_tests_name("gpt_gradcheck", tests, fixture_setup, fixture_teardown)
               ? 1
               : 0;
}

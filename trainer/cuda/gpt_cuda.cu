/* gpt_cuda.cu — the GPU GPT of gpt_cuda.h. The passes follow gpt_impl.inc
 * line by line (same activations, same order of accumulation into the
 * gradients); what differs is said where it happens.
 *
 * Kernels: one warp per row for the row-wise ops (LayerNorm, the two
 * softmaxes, cross-entropy), reducing in double with shuffles; one thread
 * per column for the column sums (bias and LayerNorm parameter gradients,
 * the wpe gradient), which run over the rows in order exactly as the CPU's
 * loops do; the wte gradient is one thread per (token, channel) scanning
 * the batch in order: deterministic, no atomics. Products are cuBLAS SGEMM
 * (row-major through the transposed column-major call); attention runs per
 * sequence as strided batched products over the heads (head h's q, k, v
 * are columns [hH, (h+1)H) of rows with leading dimension 3C: stride H).
 *
 * CUDA and cuBLAS errors are converted at one wrapper (gc_status) that
 * records the call, file and line.
 */
#include "gpt_cuda.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strata/status.h"

#define LN_EPS 1e-5
#define GELU_K 0.79788456080286535588f
#define GELU_A 0.044715f
#define NBLOCK 12
enum { LN1W, LN1B, QKVW, QKVB, ATTPROJW, ATTPROJB, LN2W, LN2B, FCW, FCB, FCPROJW, FCPROJB };

/* ---- errors ------------------------------------------------------------- */

static int gc_cuda(cudaError_t e, const char *expr, const char *file, int line)
{
    if (e == cudaSuccess)
        return 0;
    const strata_status s = e == cudaErrorMemoryAllocation ? STRATA_ERR_NOMEM
                            : e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver
                                ? STRATA_ERR_UNSUPPORTED
                                : STRATA_ERR_INTERNAL;
    return (int)strata_error(s, "%s:%d: %s failed: %s", file, line, expr, cudaGetErrorString(e));
}

static int gc_blas(cublasStatus_t e, const char *expr, const char *file, int line)
{
    if (e == CUBLAS_STATUS_SUCCESS)
        return 0;
    return (int)strata_error(e == CUBLAS_STATUS_ALLOC_FAILED ? STRATA_ERR_NOMEM
                                                             : STRATA_ERR_INTERNAL,
                             "%s:%d: %s failed: %s", file, line, expr, cublasGetStatusString(e));
}

#define CU(expr)                                                                              \
    do {                                                                                      \
        int rc_ = gc_cuda((expr), #expr, __FILE__, __LINE__);                                 \
        if (rc_)                                                                              \
            return rc_;                                                                       \
    } while (0)
#define BL(expr)                                                                              \
    do {                                                                                      \
        int rc_ = gc_blas((expr), #expr, __FILE__, __LINE__);                                 \
        if (rc_)                                                                              \
            return rc_;                                                                       \
    } while (0)
#define LAUNCHED(name) CU(cudaGetLastError())

/* ---- the model ------------------------------------------------------------ */

typedef struct acts {
    float *encoded, *ln1, *ln1_mean, *ln1_rstd, *qkv, *att, *atty, *res2, *ln2, *ln2_mean,
        *ln2_rstd, *fch, *fch_gelu, *res3, *lnf, *lnf_mean, *lnf_rstd, *probs;
    double *losses;
    float *dlogits, *dres, *dln, *datty, *dqkv, *dfch, *datt;
} acts;

struct gpt_cuda {
    gpt_config cfg;
    int n_tensors;
    gpt_tensor *tensors;
    char *names;
    size_t n_params;
    float *params, *grads;        /* managed */
    void *act_mem;                /* device */
    size_t act_cap;               /* bytes */
    uint8_t *tok;                 /* device: inputs then targets */
    size_t tok_cap;
    double *losses_host;          /* pinned, N */
    size_t losses_cap;
    acts a;
    int B, T, fwd_ok, has_targets;
    cudaStream_t stream;
    cublasHandle_t blas;
};

static float *bp(const gpt_cuda *m, int l, int f) { return m->tensors[2 + NBLOCK * l + f].data; }
static float *bg(const gpt_cuda *m, int l, int f) { return m->tensors[2 + NBLOCK * l + f].grad; }

/* Carve the activations for (B, T) over base (NULL: count only); bytes. */
static size_t acts_carve(acts *a, char *base, const gpt_config *c, size_t B, size_t T)
{
    const size_t L = (size_t)c->n_layer, C = (size_t)c->d_model, V = (size_t)c->vocab;
    const size_t NH = (size_t)c->n_head, N = B * T;
    size_t off = 0;
#define TAKE(field, count, type)                                                              \
    do {                                                                                      \
        a->field = base ? (type *)(base + off) : NULL;                                        \
        off += ((size_t)(count) * sizeof(type) + 255) / 256 * 256;                            \
    } while (0)
    TAKE(encoded, N * C, float);
    TAKE(ln1, L * N * C, float);
    TAKE(ln1_mean, L * N, float);
    TAKE(ln1_rstd, L * N, float);
    TAKE(qkv, L * N * 3 * C, float);
    TAKE(att, L * B * NH * T * T, float);
    TAKE(atty, L * N * C, float);
    TAKE(res2, L * N * C, float);
    TAKE(ln2, L * N * C, float);
    TAKE(ln2_mean, L * N, float);
    TAKE(ln2_rstd, L * N, float);
    TAKE(fch, L * N * 4 * C, float);
    TAKE(fch_gelu, L * N * 4 * C, float);
    TAKE(res3, L * N * C, float);
    TAKE(lnf, N * C, float);
    TAKE(lnf_mean, N, float);
    TAKE(lnf_rstd, N, float);
    TAKE(probs, N * V, float);
    TAKE(losses, N, double);
    TAKE(dlogits, N * V, float);
    TAKE(dres, N * C, float);
    TAKE(dln, N * C, float);
    TAKE(datty, N * C, float);
    TAKE(dqkv, N * 3 * C, float);
    TAKE(dfch, N * 4 * C, float);
    TAKE(datt, NH * T * T, float);
#undef TAKE
    return off;
}

/* ---- kernels -------------------------------------------------------------- */

#define THREADS 256
#define FOR_EACH(i, n)                                                                        \
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (long long)(n);  \
         i += (long long)gridDim.x * blockDim.x)

static unsigned grid_for(long long n)
{
    long long b = (n + THREADS - 1) / THREADS;
    return (unsigned)(b < 1 ? 1 : b > 8192 ? 8192 : b);
}

/* Rows handled one warp each: 8 warps per block. */
static unsigned grid_rows(long long rows)
{
    return (unsigned)((rows + 7) / 8);
}

__device__ static double warp_sum(double v)
{
    for (int o = 16; o > 0; o /= 2)
        v += __shfl_down_sync(0xffffffffu, v, o);
    return __shfl_sync(0xffffffffu, v, 0);
}

__device__ static float warp_max(float v)
{
    for (int o = 16; o > 0; o /= 2)
        v = fmaxf(v, __shfl_down_sync(0xffffffffu, v, o));
    return __shfl_sync(0xffffffffu, v, 0);
}

#define WARP_ROW(row, rows)                                                                   \
    const long long row = (long long)blockIdx.x * 8 + threadIdx.x / 32;                      \
    const int lane = threadIdx.x % 32;                                                        \
    if (row >= (rows))                                                                        \
        return;

__global__ void k_encoder_fwd(float *out, const uint8_t *tok, const float *wte, const float *wpe,
                              int T, int C, long long N)
{
    FOR_EACH(e, N * C)
    {
        const long long n = e / C;
        const int i = (int)(e % C), t = (int)(n % T);
        out[e] = wte[(long long)tok[n] * C + i] + wpe[(long long)t * C + i];
    }
}

/* wte.grad[v][i] += d[n][i] for every n with tok[n] = v, n in order. */
__global__ void k_encoder_bwd_wte(float *dwte, const float *d, const uint8_t *tok, int V, int C,
                                  long long N)
{
    FOR_EACH(e, (long long)V * C)
    {
        const int v = (int)(e / C), i = (int)(e % C);
        float g = dwte[e];
        for (long long n = 0; n < N; n++)
            if (tok[n] == v)
                g += d[n * C + i];
        dwte[e] = g;
    }
}

/* wpe.grad[t][i] += d[b T + t][i], b in order. */
__global__ void k_encoder_bwd_wpe(float *dwpe, const float *d, int B, int T, int C)
{
    FOR_EACH(e, (long long)T * C)
    {
        const long long t = e / C, i = e % C;
        float g = dwpe[e];
        for (int b = 0; b < B; b++)
            g += d[((long long)b * T + t) * C + i];
        dwpe[e] = g;
    }
}

__global__ void k_layernorm_fwd(float *out, float *mean, float *rstd, const float *inp,
                                const float *w, const float *b, long long N, int C)
{
    WARP_ROW(n, N)
    const float *x = inp + n * C;
    float *y = out + n * C;
    double s = 0.0;
    for (int i = lane; i < C; i += 32)
        s += x[i];
    const double mu = warp_sum(s) / C;
    double v = 0.0;
    for (int i = lane; i < C; i += 32)
        v += (x[i] - mu) * (x[i] - mu);
    const double rs = 1.0 / sqrt(warp_sum(v) / C + LN_EPS);
    for (int i = lane; i < C; i += 32)
        y[i] = (float)((x[i] - mu) * rs) * w[i] + b[i];
    if (lane == 0) {
        mean[n] = (float)mu;
        rstd[n] = (float)rs;
    }
}

/* dinp += the input gradient, per row. */
__global__ void k_layernorm_bwd_dx(float *dinp, const float *dout, const float *inp,
                                   const float *w, const float *mean, const float *rstd,
                                   long long N, int C)
{
    WARP_ROW(n, N)
    const float *x = inp + n * C, *dy = dout + n * C;
    float *dx = dinp + n * C;
    const float mu = mean[n], rs = rstd[n];
    double sdn = 0.0, sdnn = 0.0;
    for (int i = lane; i < C; i += 32) {
        const float norm = (x[i] - mu) * rs, dn = w[i] * dy[i];
        sdn += dn;
        sdnn += dn * norm;
    }
    const float mean_dn = (float)(warp_sum(sdn) / C), mean_dn_norm = (float)(warp_sum(sdnn) / C);
    for (int i = lane; i < C; i += 32) {
        const float norm = (x[i] - mu) * rs, dn = w[i] * dy[i];
        dx[i] += (dn - mean_dn - norm * mean_dn_norm) * rs;
    }
}

/* dw, db += column sums over the rows in order (gpt_impl.inc's loop order). */
__global__ void k_layernorm_bwd_dwdb(float *dw, float *db, const float *dout, const float *inp,
                                     const float *mean, const float *rstd, long long N, int C)
{
    FOR_EACH(i, C)
    {
        float gw = dw[i], gb = db[i];
        for (long long n = 0; n < N; n++) {
            const float dy = dout[n * C + i];
            const float norm = (inp[n * C + i] - mean[n]) * rstd[n];
            gb += dy;
            gw += norm * dy;
        }
        dw[i] = gw;
        db[i] = gb;
    }
}

__global__ void k_add_bias(float *out, const float *bias, long long N, int OC)
{
    FOR_EACH(e, N * OC)
    out[e] += bias[e % OC];
}

__global__ void k_bias_grad(float *dbias, const float *dout, long long N, int OC)
{
    FOR_EACH(j, OC)
    {
        float g = dbias[j];
        for (long long n = 0; n < N; n++)
            g += dout[n * OC + j];
        dbias[j] = g;
    }
}

__global__ void k_gelu_fwd(float *out, const float *inp, long long n)
{
    FOR_EACH(i, n)
    {
        const float x = inp[i];
        const float u = GELU_K * (x + GELU_A * x * x * x);
        out[i] = 0.5f * x * (1.0f + tanhf(u));
    }
}

__global__ void k_gelu_bwd(float *d, const float *inp, long long n)
{
    FOR_EACH(i, n)
    {
        const float x = inp[i];
        const float u = GELU_K * (x + GELU_A * x * x * x);
        const float th = tanhf(u);
        const float du = GELU_K * (1.0f + 3.0f * GELU_A * x * x);
        d[i] *= 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du;
    }
}

/* Causal softmax of rows (rows = B NH T, each T wide; row r is position
 * r % T): entries s > t become 0. */
__global__ void k_softmax_causal(float *att, long long rows, int T)
{
    WARP_ROW(r, rows)
    float *row = att + r * T;
    const int t = (int)(r % T);
    float mx = -INFINITY;
    for (int s = lane; s <= t; s += 32)
        mx = fmaxf(mx, row[s]);
    mx = warp_max(mx);
    double sum = 0.0;
    for (int s = lane; s <= t; s += 32) {
        const float e = expf(row[s] - mx);
        row[s] = e;
        sum += e;
    }
    const float inv = (float)(1.0 / warp_sum(sum));
    for (int s = lane; s < T; s += 32)
        row[s] = s <= t ? row[s] * inv : 0.0f;
}

/* d att -> d scores, with the 1/sqrt(H) of the scores folded in. */
__global__ void k_softmax_causal_bwd(float *datt, const float *att, float scale, long long rows,
                                     int T)
{
    WARP_ROW(r, rows)
    const float *a = att + r * T;
    float *d = datt + r * T;
    const int t = (int)(r % T);
    double dot = 0.0;
    for (int s = lane; s <= t; s += 32)
        dot += a[s] * d[s];
    const float fdot = (float)warp_sum(dot);
    for (int s = lane; s < T; s += 32)
        d[s] = s <= t ? a[s] * (d[s] - fdot) * scale : 0.0f;
}

/* probs holds logits; softmax in place; losses[n] = -log p[target]
 * (log-sum-exp form) when targets. */
__global__ void k_xent_fwd(float *probs, double *losses, const uint8_t *targets, long long N,
                           int V)
{
    WARP_ROW(n, N)
    float *row = probs + n * V;
    float mx = -INFINITY;
    for (int v = lane; v < V; v += 32)
        mx = fmaxf(mx, row[v]);
    mx = warp_max(mx);
    const float target_logit = targets ? row[targets[n]] : 0.0f;
    __syncwarp();
    double sum = 0.0;
    for (int v = lane; v < V; v += 32) {
        const float e = expf(row[v] - mx);
        row[v] = e;
        sum += e;
    }
    sum = warp_sum(sum);
    const float inv = (float)(1.0 / sum);
    for (int v = lane; v < V; v += 32)
        row[v] *= inv;
    if (targets && lane == 0)
        losses[n] = log(sum) - (double)(target_logit - mx);
}

__global__ void k_dlogits(float *d, const float *p, const uint8_t *targets, long long N, int V,
                          float invN)
{
    FOR_EACH(e, N * V)
    {
        const long long n = e / V;
        const int v = (int)(e % V);
        d[e] = p[e] * invN - (v == targets[n] ? invN : 0.0f);
    }
}

/* ---- products ------------------------------------------------------------- */

/* Row-major C_i (M x N) = alpha op(A_i) op(B_i) + beta C_i, i < batch. */
static int rm_gemm(gpt_cuda *m, int ta, int tb, int M, int N, int K, float alpha, const float *A,
                   int lda, long long sA, const float *B, int ldb, long long sB, float beta,
                   float *C, int ldc, long long sC, int batch)
{
    const cublasOperation_t oa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (batch == 1)
        BL(cublasSgemm(m->blas, ob, oa, N, M, K, &alpha, B, ldb, A, lda, &beta, C, ldc));
    else
        BL(cublasSgemmStridedBatched(m->blas, ob, oa, N, M, K, &alpha, B, ldb, sB, A, lda, sA,
                                     &beta, C, ldc, sC, batch));
    return 0;
}

static int matmul_forward(gpt_cuda *m, float *out, const float *inp, const float *w,
                          const float *bias, const float *resid, int N, int C, int OC)
{
    float beta = 0.0f;
    if (resid) {
        CU(cudaMemcpyAsync(out, resid, (size_t)N * OC * sizeof(float), cudaMemcpyDeviceToDevice,
                           m->stream));
        beta = 1.0f;
    }
    int rc = rm_gemm(m, 0, 0, N, OC, C, 1.0f, inp, C, 0, w, OC, 0, beta, out, OC, 0, 1);
    if (rc)
        return rc;
    k_add_bias<<<grid_for((long long)N * OC), THREADS, 0, m->stream>>>(out, bias, N, OC);
    LAUNCHED("k_add_bias");
    return 0;
}

static int matmul_backward(gpt_cuda *m, float *dinp, float *dw, float *dbias, const float *dout,
                           const float *inp, const float *w, int N, int C, int OC)
{
    int rc = rm_gemm(m, 0, 1, N, C, OC, 1.0f, dout, OC, 0, w, OC, 0, 0.0f, dinp, C, 0, 1);
    if (!rc)
        rc = rm_gemm(m, 1, 0, C, OC, N, 1.0f, inp, C, 0, dout, OC, 0, 1.0f, dw, OC, 0, 1);
    if (rc)
        return rc;
    k_bias_grad<<<grid_for(OC), THREADS, 0, m->stream>>>(dbias, dout, N, OC);
    LAUNCHED("k_bias_grad");
    return 0;
}

static int layernorm_forward(gpt_cuda *m, float *out, float *mean, float *rstd, const float *inp,
                             const float *w, const float *b, int N, int C)
{
    k_layernorm_fwd<<<grid_rows(N), THREADS, 0, m->stream>>>(out, mean, rstd, inp, w, b, N, C);
    LAUNCHED("k_layernorm_fwd");
    return 0;
}

static int layernorm_backward(gpt_cuda *m, float *dinp, float *dw, float *db, const float *dout,
                              const float *inp, const float *w, const float *mean,
                              const float *rstd, int N, int C)
{
    k_layernorm_bwd_dx<<<grid_rows(N), THREADS, 0, m->stream>>>(dinp, dout, inp, w, mean, rstd,
                                                                 N, C);
    LAUNCHED("k_layernorm_bwd_dx");
    k_layernorm_bwd_dwdb<<<grid_for(C), THREADS, 0, m->stream>>>(dw, db, dout, inp, mean, rstd, N,
                                                                 C);
    LAUNCHED("k_layernorm_bwd_dwdb");
    return 0;
}

/* Per sequence b: scores of all heads in one strided batched product, the
 * causal softmax, then att @ v into head h's columns of out. */
static int attention_forward(gpt_cuda *m, float *out, float *att, const float *qkv, int B, int T,
                             int C, int NH)
{
    const int H = C / NH, C3 = 3 * C;
    const float scale = (float)(1.0 / sqrt((double)H));
    const long long TT = (long long)T * T;
    for (int b = 0; b < B; b++) {
        const float *q = qkv + (long long)b * T * C3, *k = q + C;
        float *a = att + (long long)b * NH * TT;
        int rc = rm_gemm(m, 0, 1, T, T, H, scale, q, C3, H, k, C3, H, 0.0f, a, T, TT, NH);
        if (rc)
            return rc;
    }
    k_softmax_causal<<<grid_rows((long long)B * NH * T), THREADS, 0, m->stream>>>(
        att, (long long)B * NH * T, T);
    LAUNCHED("k_softmax_causal");
    for (int b = 0; b < B; b++) {
        const float *v = qkv + (long long)b * T * C3 + 2 * C;
        const float *a = att + (long long)b * NH * TT;
        int rc = rm_gemm(m, 0, 0, T, H, T, 1.0f, a, T, TT, v, C3, H, 0.0f,
                         out + (long long)b * T * C, C, H, NH);
        if (rc)
            return rc;
    }
    return 0;
}

static int attention_backward(gpt_cuda *m, float *dqkv, float *datt, const float *dout,
                              const float *qkv, const float *att, int B, int T, int C, int NH)
{
    const int H = C / NH, C3 = 3 * C;
    const float scale = (float)(1.0 / sqrt((double)H));
    const long long TT = (long long)T * T;
    for (int b = 0; b < B; b++) {
        const long long off = (long long)b * T * C3;
        const float *q = qkv + off, *k = q + C, *v = q + 2 * C;
        float *dq = dqkv + off, *dk = dq + C, *dv = dq + 2 * C;
        const float *a = att + (long long)b * NH * TT;
        const float *dy = dout + (long long)b * T * C;
        int rc = rm_gemm(m, 0, 1, T, T, H, 1.0f, dy, C, H, v, C3, H, 0.0f, datt, T, TT, NH);
        if (!rc)
            rc = rm_gemm(m, 1, 0, T, H, T, 1.0f, a, T, TT, dy, C, H, 0.0f, dv, C3, H, NH);
        if (rc)
            return rc;
        k_softmax_causal_bwd<<<grid_rows((long long)NH * T), THREADS, 0, m->stream>>>(
            datt, a, scale, (long long)NH * T, T);
        LAUNCHED("k_softmax_causal_bwd");
        rc = rm_gemm(m, 0, 0, T, H, T, 1.0f, datt, T, TT, k, C3, H, 0.0f, dq, C3, H, NH);
        if (!rc)
            rc = rm_gemm(m, 1, 0, T, H, T, 1.0f, datt, T, TT, q, C3, H, 0.0f, dk, C3, H, NH);
        if (rc)
            return rc;
    }
    return 0;
}

/* ---- lifecycle ------------------------------------------------------------ */

extern "C" int gpt_cuda_create(const gpt_config *cfg, uint64_t seed, gpt_cuda **out)
{
    if (!out)
        return (int)strata_error(STRATA_ERR_INVALID_ARG, "gpt_cuda_create: out is NULL");
    *out = NULL;
    int count = 0;
    const cudaError_t ce = cudaGetDeviceCount(&count);
    if (ce != cudaSuccess || count == 0) {
        (void)cudaGetLastError();
        return (int)strata_error(STRATA_ERR_UNSUPPORTED,
                                 "gpt --device cuda: no CUDA device found (%s); use --device cpu",
                                 ce != cudaSuccess ? cudaGetErrorString(ce) : "0 devices");
    }
    /* The CPU model with the same seed: its table and initial values. */
    gpt_model *ref = NULL;
    int rc = gpt_create(cfg, seed, &ref);
    if (rc)
        return rc;
    gpt_cuda *m = (gpt_cuda *)calloc(1, sizeof *m);
    if (!m) {
        gpt_destroy(ref);
        return (int)strata_error(STRATA_ERR_NOMEM, "gpt_cuda_create: out of memory");
    }
    m->cfg = *cfg;
    m->n_tensors = gpt_num_tensors(ref);
    m->n_params = gpt_num_params(ref);
    m->tensors = (gpt_tensor *)calloc((size_t)m->n_tensors, sizeof *m->tensors);
    m->names = (char *)calloc((size_t)m->n_tensors, 64);
    if (!m->tensors || !m->names) {
        rc = (int)strata_error(STRATA_ERR_NOMEM, "gpt_cuda_create: out of memory");
        goto out_fail;
    }
    {
        const size_t bytes = m->n_params * sizeof(float);
        int dev = 0;
        rc = gc_cuda(cudaGetDevice(&dev), "cudaGetDevice", __FILE__, __LINE__);
        if (!rc)
            rc = gc_cuda(cudaMallocManaged((void **)&m->params, bytes, cudaMemAttachGlobal),
                         "cudaMallocManaged(params)", __FILE__, __LINE__);
        if (!rc)
            rc = gc_cuda(cudaMallocManaged((void **)&m->grads, bytes, cudaMemAttachGlobal),
                         "cudaMallocManaged(grads)", __FILE__, __LINE__);
        struct cudaMemLocation gpu = {cudaMemLocationTypeDevice, dev};
        /* The device preference needs concurrent managed access (review
         * C12): without it (some VMs, vGPU) the advice fails; skip it. */
        int concurrent = 0;
        if (!rc)
            rc = gc_cuda(cudaDeviceGetAttribute(&concurrent, cudaDevAttrConcurrentManagedAccess,
                                                dev),
                         "cudaDeviceGetAttribute", __FILE__, __LINE__);
        if (!rc && concurrent)
            rc = gc_cuda(cudaMemAdvise(m->params, bytes, cudaMemAdviseSetPreferredLocation, gpu),
                         "cudaMemAdvise(params)", __FILE__, __LINE__);
        if (!rc && concurrent)
            rc = gc_cuda(cudaMemAdvise(m->grads, bytes, cudaMemAdviseSetPreferredLocation, gpu),
                         "cudaMemAdvise(grads)", __FILE__, __LINE__);
        /* A BLOCKING stream (review C2): it orders after work queued earlier
         * on the legacy default stream, where a GPU optimizer's step runs
         * (strata_step returns with its last kernels still queued), and the
         * legacy stream orders after it; so zero_grad and forward never race
         * the optimizer's last update. */
        /* ... at the device's greatest priority (review C4): the forward and
         * backward kernels go ahead of the shadow stream's (least priority). */
        int prio_least = 0, prio_greatest = 0;
        if (!rc)
            rc = gc_cuda(cudaDeviceGetStreamPriorityRange(&prio_least, &prio_greatest),
                         "cudaDeviceGetStreamPriorityRange", __FILE__, __LINE__);
        if (!rc)
            rc = gc_cuda(cudaStreamCreateWithPriority(&m->stream, cudaStreamDefault,
                                                      prio_greatest),
                         "cudaStreamCreateWithPriority", __FILE__, __LINE__);
        if (!rc)
            rc = gc_blas(cublasCreate(&m->blas), "cublasCreate", __FILE__, __LINE__);
        /* true float32, stated (review C11) */
        if (!rc)
            rc = gc_blas(cublasSetMathMode(m->blas, CUBLAS_DEFAULT_MATH), "cublasSetMathMode",
                         __FILE__, __LINE__);
        if (!rc)
            rc = gc_blas(cublasSetStream(m->blas, m->stream), "cublasSetStream", __FILE__,
                         __LINE__);
        if (rc)
            goto out_fail;
        size_t off = 0;
        for (int i = 0; i < m->n_tensors; i++) {
            const gpt_tensor *t = gpt_tensor_at(ref, i);
            const size_t n = (size_t)(t->shape[0] * t->shape[1]);
            m->tensors[i] = *t;
            snprintf(m->names + 64 * i, 64, "%s", t->name);
            m->tensors[i].name = m->names + 64 * i;
            m->tensors[i].data = m->params + off;
            m->tensors[i].grad = m->grads + off;
            memcpy(m->params + off, t->data, n * sizeof(float));
            off += n;
        }
        memset(m->grads, 0, bytes);
    }
    gpt_destroy(ref);
    *out = m;
    return 0;

out_fail:
    gpt_destroy(ref);
    gpt_cuda_destroy(m);
    return rc;
}

extern "C" void gpt_cuda_destroy(gpt_cuda *m)
{
    if (!m)
        return;
    if (m->stream)
        cudaStreamSynchronize(m->stream);
    if (m->blas)
        cublasDestroy(m->blas);
    if (m->stream)
        cudaStreamDestroy(m->stream);
    cudaFree(m->act_mem);
    cudaFree(m->tok);
    cudaFreeHost(m->losses_host);
    cudaFree(m->grads);
    cudaFree(m->params);
    free(m->names);
    free(m->tensors);
    free(m);
}

extern "C" int gpt_cuda_num_tensors(const gpt_cuda *m) { return m ? m->n_tensors : 0; }

extern "C" const gpt_tensor *gpt_cuda_tensor_at(const gpt_cuda *m, int i)
{
    return m && i >= 0 && i < m->n_tensors ? &m->tensors[i] : NULL;
}

extern "C" size_t gpt_cuda_num_params(const gpt_cuda *m) { return m ? m->n_params : 0; }

extern "C" int gpt_cuda_zero_grad(gpt_cuda *m)
{
    CU(cudaMemsetAsync(m->grads, 0, m->n_params * sizeof(float), m->stream));
    CU(cudaStreamSynchronize(m->stream));
    return 0;
}

extern "C" int gpt_cuda_sync(gpt_cuda *m)
{
    (void)m;
    CU(cudaDeviceSynchronize());
    return 0;
}

static int ensure_acts(gpt_cuda *m, int B, int T)
{
    acts a;
    const size_t need = acts_carve(&a, NULL, &m->cfg, (size_t)B, (size_t)T);
    const size_t N = (size_t)B * T;
    if (need > m->act_cap) {
        CU(cudaFree(m->act_mem));
        m->act_mem = NULL;
        m->act_cap = 0;
        CU(cudaMalloc(&m->act_mem, need));
        m->act_cap = need;
    }
    if (2 * N > m->tok_cap) {
        CU(cudaFree(m->tok));
        m->tok = NULL;
        m->tok_cap = 0;
        CU(cudaMalloc((void **)&m->tok, 2 * N));
        m->tok_cap = 2 * N;
    }
    if (N > m->losses_cap) {
        CU(cudaFreeHost(m->losses_host));
        m->losses_host = NULL;
        m->losses_cap = 0;
        CU(cudaMallocHost((void **)&m->losses_host, N * sizeof(double)));
        m->losses_cap = N;
    }
    acts_carve(&m->a, (char *)m->act_mem, &m->cfg, (size_t)B, (size_t)T);
    return 0;
}

/* ---- forward and backward -------------------------------------------------- */

extern "C" int gpt_cuda_forward(gpt_cuda *m, const uint8_t *inputs, const uint8_t *targets, int B,
                                int T, gpt_layer_cb before_layer, void *ctx, float *loss_out)
{
    if (!m || !inputs)
        return (int)strata_error(STRATA_ERR_INVALID_ARG, "gpt_cuda_forward: NULL argument");
    m->fwd_ok = 0;
    m->has_targets = 0;
    const gpt_config *c = &m->cfg;
    if (B < 1 || T < 1 || T > c->max_seq ||
        (long long)B * T * 4 * c->d_model >= (1ll << 31))
        return (int)strata_error(STRATA_ERR_INVALID_ARG, "gpt_cuda_forward: bad batch B=%d T=%d",
                                 B, T);
    const int L = c->n_layer, C = c->d_model, V = c->vocab, NH = c->n_head, N = B * T;
    for (int i = 0; i < N; i++)
        if (inputs[i] >= V || (targets && targets[i] >= V))
            return (int)strata_error(STRATA_ERR_INVALID_ARG,
                                     "gpt_cuda_forward: a token is >= vocab=%d", V);
    int rc = ensure_acts(m, B, T);
    if (rc)
        return rc;
    const acts *a = &m->a;
    uint8_t *inp = m->tok, *tgt = m->tok + N;
    CU(cudaMemcpyAsync(inp, inputs, (size_t)N, cudaMemcpyHostToDevice, m->stream));
    if (targets)
        CU(cudaMemcpyAsync(tgt, targets, (size_t)N, cudaMemcpyHostToDevice, m->stream));
    const long long NC = (long long)N * C;

    if (before_layer && (rc = before_layer(ctx, 0)))
        return rc;
    k_encoder_fwd<<<grid_for(NC), THREADS, 0, m->stream>>>(a->encoded, inp, m->tensors[0].data,
                                                           m->tensors[1].data, T, C, N);
    LAUNCHED("k_encoder_fwd");

    for (int l = 0; l < L; l++) {
        if (before_layer && (rc = before_layer(ctx, l + 1)))
            return rc;
        const float *res = l == 0 ? a->encoded : a->res3 + (l - 1) * NC;
        float *ln1 = a->ln1 + l * NC, *ln1_mean = a->ln1_mean + (long long)l * N;
        float *ln1_rstd = a->ln1_rstd + (long long)l * N, *qkv = a->qkv + l * 3 * NC;
        float *att = a->att + (long long)l * B * NH * T * T, *atty = a->atty + l * NC;
        float *res2 = a->res2 + l * NC, *ln2 = a->ln2 + l * NC;
        float *ln2_mean = a->ln2_mean + (long long)l * N, *ln2_rstd = a->ln2_rstd + (long long)l * N;
        float *fch = a->fch + l * 4 * NC, *fch_gelu = a->fch_gelu + l * 4 * NC;
        float *res3 = a->res3 + l * NC;

        if ((rc = layernorm_forward(m, ln1, ln1_mean, ln1_rstd, res, bp(m, l, LN1W),
                                    bp(m, l, LN1B), N, C)) ||
            (rc = matmul_forward(m, qkv, ln1, bp(m, l, QKVW), bp(m, l, QKVB), NULL, N, C, 3 * C)) ||
            (rc = attention_forward(m, atty, att, qkv, B, T, C, NH)) ||
            (rc = matmul_forward(m, res2, atty, bp(m, l, ATTPROJW), bp(m, l, ATTPROJB), res, N, C,
                                 C)) ||
            (rc = layernorm_forward(m, ln2, ln2_mean, ln2_rstd, res2, bp(m, l, LN2W),
                                    bp(m, l, LN2B), N, C)) ||
            (rc = matmul_forward(m, fch, ln2, bp(m, l, FCW), bp(m, l, FCB), NULL, N, C, 4 * C)))
            return rc;
        k_gelu_fwd<<<grid_for(4 * NC), THREADS, 0, m->stream>>>(fch_gelu, fch, 4 * NC);
        LAUNCHED("k_gelu_fwd");
        if ((rc = matmul_forward(m, res3, fch_gelu, bp(m, l, FCPROJW), bp(m, l, FCPROJB), res2, N,
                                 4 * C, C)))
            return rc;
    }

    if (before_layer && (rc = before_layer(ctx, L + 1)))
        return rc;
    const gpt_tensor *lnfw = &m->tensors[m->n_tensors - 2], *lnfb = &m->tensors[m->n_tensors - 1];
    if ((rc = layernorm_forward(m, a->lnf, a->lnf_mean, a->lnf_rstd, a->res3 + (L - 1) * NC,
                                lnfw->data, lnfb->data, N, C)) ||
        (rc = rm_gemm(m, 0, 1, N, V, C, 1.0f, a->lnf, C, 0, m->tensors[0].data, C, 0, 0.0f,
                      a->probs, V, 0, 1)))
        return rc;
    k_xent_fwd<<<grid_rows(N), THREADS, 0, m->stream>>>(a->probs, a->losses,
                                                        targets ? tgt : NULL, N, V);
    LAUNCHED("k_xent_fwd");
    if (targets)
        CU(cudaMemcpyAsync(m->losses_host, a->losses, (size_t)N * sizeof(double),
                           cudaMemcpyDeviceToHost, m->stream));
    CU(cudaStreamSynchronize(m->stream));
    if (loss_out) {
        double total = 0.0;
        for (int n = 0; n < N && targets; n++)
            total += m->losses_host[n];
        *loss_out = targets ? (float)(total / N) : NAN;
    }
    m->B = B;
    m->T = T;
    m->fwd_ok = 1;
    m->has_targets = targets != NULL;
    return 0;
}

extern "C" int gpt_cuda_backward(gpt_cuda *m, gpt_layer_cb after_layer, void *ctx)
{
    if (!m)
        return (int)strata_error(STRATA_ERR_INVALID_ARG, "gpt_cuda_backward: model is NULL");
    if (!m->fwd_ok || !m->has_targets)
        return (int)strata_error(STRATA_ERR_STATE, "gpt_cuda_backward: needs a successful "
                                 "gpt_cuda_forward with targets first");
    const gpt_config *c = &m->cfg;
    const int B = m->B, T = m->T, L = c->n_layer, C = c->d_model, V = c->vocab, NH = c->n_head;
    const int N = B * T;
    const long long NC = (long long)N * C;
    const uint8_t *inp = m->tok, *tgt = m->tok + N;
    const acts *a = &m->a;
    int rc;

    const gpt_tensor *wte = &m->tensors[0], *wpe = &m->tensors[1];
    const gpt_tensor *lnfw = &m->tensors[m->n_tensors - 2], *lnfb = &m->tensors[m->n_tensors - 1];
    k_dlogits<<<grid_for((long long)N * V), THREADS, 0, m->stream>>>(a->dlogits, a->probs, tgt, N,
                                                                     V, (float)(1.0 / N));
    LAUNCHED("k_dlogits");
    if ((rc = rm_gemm(m, 0, 0, N, C, V, 1.0f, a->dlogits, V, 0, wte->data, C, 0, 0.0f, a->dln, C,
                      0, 1)) ||
        (rc = rm_gemm(m, 1, 0, V, C, N, 1.0f, a->dlogits, V, 0, a->lnf, C, 0, 1.0f, wte->grad, C,
                      0, 1)))
        return rc;
    CU(cudaMemsetAsync(a->dres, 0, (size_t)NC * sizeof(float), m->stream));
    if ((rc = layernorm_backward(m, a->dres, lnfw->grad, lnfb->grad, a->dln, a->res3 + (L - 1) * NC,
                                 lnfw->data, a->lnf_mean, a->lnf_rstd, N, C)))
        return rc;
    if (after_layer) {
        CU(cudaStreamSynchronize(m->stream));
        if ((rc = after_layer(ctx, L + 1)))
            return rc;
    }

    for (int l = L - 1; l >= 0; l--) {
        const float *res = l == 0 ? a->encoded : a->res3 + (l - 1) * NC;
        const float *ln1 = a->ln1 + l * NC, *ln1_mean = a->ln1_mean + (long long)l * N;
        const float *ln1_rstd = a->ln1_rstd + (long long)l * N, *qkv = a->qkv + l * 3 * NC;
        const float *att = a->att + (long long)l * B * NH * T * T, *atty = a->atty + l * NC;
        const float *res2 = a->res2 + l * NC, *ln2 = a->ln2 + l * NC;
        const float *ln2_mean = a->ln2_mean + (long long)l * N;
        const float *ln2_rstd = a->ln2_rstd + (long long)l * N;
        const float *fch = a->fch + l * 4 * NC, *fch_gelu = a->fch_gelu + l * 4 * NC;

        if ((rc = matmul_backward(m, a->dfch, bg(m, l, FCPROJW), bg(m, l, FCPROJB), a->dres,
                                  fch_gelu, bp(m, l, FCPROJW), N, 4 * C, C)))
            return rc;
        k_gelu_bwd<<<grid_for(4 * NC), THREADS, 0, m->stream>>>(a->dfch, fch, 4 * NC);
        LAUNCHED("k_gelu_bwd");
        if ((rc = matmul_backward(m, a->dln, bg(m, l, FCW), bg(m, l, FCB), a->dfch, ln2,
                                  bp(m, l, FCW), N, C, 4 * C)) ||
            (rc = layernorm_backward(m, a->dres, bg(m, l, LN2W), bg(m, l, LN2B), a->dln, res2,
                                     bp(m, l, LN2W), ln2_mean, ln2_rstd, N, C)) ||
            (rc = matmul_backward(m, a->datty, bg(m, l, ATTPROJW), bg(m, l, ATTPROJB), a->dres,
                                  atty, bp(m, l, ATTPROJW), N, C, C)) ||
            (rc = attention_backward(m, a->dqkv, a->datt, a->datty, qkv, att, B, T, C, NH)) ||
            (rc = matmul_backward(m, a->dln, bg(m, l, QKVW), bg(m, l, QKVB), a->dqkv, ln1,
                                  bp(m, l, QKVW), N, C, 3 * C)) ||
            (rc = layernorm_backward(m, a->dres, bg(m, l, LN1W), bg(m, l, LN1B), a->dln, res,
                                     bp(m, l, LN1W), ln1_mean, ln1_rstd, N, C)))
            return rc;
        if (after_layer) {
            CU(cudaStreamSynchronize(m->stream));
            if ((rc = after_layer(ctx, l + 1)))
                return rc;
        }
    }

    k_encoder_bwd_wte<<<grid_for((long long)V * C), THREADS, 0, m->stream>>>(wte->grad, a->dres,
                                                                              inp, V, C, N);
    LAUNCHED("k_encoder_bwd_wte");
    k_encoder_bwd_wpe<<<grid_for((long long)T * C), THREADS, 0, m->stream>>>(wpe->grad, a->dres, B,
                                                                              T, C);
    LAUNCHED("k_encoder_bwd_wpe");
    CU(cudaStreamSynchronize(m->stream));
    if (after_layer && (rc = after_layer(ctx, 0)))
        return rc;
    return 0;
}

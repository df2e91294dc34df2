/* The CPU backend's bfloat16-input products (backend/gemm_bf16.h):
 * C = alpha op(A) op(B) + beta C where every element of A and B is first
 * rounded to bfloat16 (round to nearest even, as torch's .bfloat16() and
 * Intel's VCVTNE2PS2BF16), the products of the rounded values are summed in
 * float32 and C stays float32. That is the contract of OpenBLAS's
 * cblas_sbgemm (bfloat16 in, float32 accumulate and out), which Debian 12's
 * OpenBLAS 0.3.21 is built without (no sbgemm symbol), so strata has its own.
 *
 * Structure: the Goto/BLIS blocking (K. Goto, R. van de Geijn, "Anatomy of
 * high-performance matrix multiplication", ACM TOMS 34(3), 2008; F. Van Zee,
 * R. van de Geijn, "BLIS", ACM TOMS 41(3), 2015): for each NC-column block
 * of op(B) and KC-deep block of k, op(B) is packed once into NR-column
 * micro-panels; for each MC-row block of op(A), op(A) is packed into
 * MR-row micro-panels; an MR x NR micro-kernel then runs over every pair.
 * Packing converts to bfloat16 and stores k in pairs, (k, k+1) in one 32-bit
 * word (even k in the low half), which is the operand layout of AVX512-BF16's
 * VDPBF16PS (acc_i += a_2i b_2i + a_2i+1 b_2i+1 in float32): the A word is
 * broadcast, the B words of 16 columns are one vector.
 *
 * Two micro-kernels compute the same sums: the AVX512-BF16 one (x86-64 CPUs
 * reporting avx512bf16, chosen once at run time), and a portable C one (any
 * CPU: bfloat16 widened to float32 exactly, two float32 multiply-adds per
 * pair). They may differ in the last bits (VDPBF16PS treats denormal inputs
 * and outputs as zero and rounds its own way), never in what is summed; the
 * float64 reference test (tests/reference/test_gemm_bf16_reference.c) holds
 * both to the same bound.
 *
 * SYRK: only the MR x NR tiles that touch the lower triangle are computed,
 * each only up to the 16-column vector holding its last row's diagonal (a
 * kernel per vector count), and op(A)'s rows, which are op(B)'s columns,
 * are read from the packed op(B) block when that holds all of them (n <= NC)
 * instead of being converted and packed a second time; then the strict
 * lower triangle is mirrored onto the upper one (16 x 16 register
 * transposes), so the full symmetric n x n result is written (as cpu_ssyrk
 * does). Every output element gets the same sums in the same order whatever
 * the tiling, so none of this changes a result bit. */
#include "gemm_bf16.h"

#include "backend_internal.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#define HAVE_X86_BF16 1
#include <immintrin.h>
#endif

#define MR 6
#define NR 64
#ifndef KC
#define KC 768 /* even: k is packed in pairs */
#endif
#ifndef MC
#define MC 192 /* a multiple of MR */
#endif
#ifndef NC
#define NC 768 /* a multiple of NR */
#endif
#define A_ALL_MAX 1536 /* the most rows of op(A) packed whole per k block (1536 x 768: 2.3 MiB) */

/* Round a float32 to bfloat16, nearest even; NaN stays a (quiet) NaN. */
static inline uint16_t to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu))
        return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline float from_bf16(uint32_t h)
{
    uint32_t u = h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

float strata_bf16_round(float x)
{
    return from_bf16(to_bf16(x));
}

/* The operand a panel is packed from: element (r, k) of the logical matrix
 * (r: a row of op(A) or a column of op(B)) is s[r * ld + k] when k_contig,
 * else s[k * ld + r]. */
typedef struct operand {
    const float *s;
    int ld;
    bool k_contig;
} operand;

static inline float elem(const operand *o, int r, int k)
{
    return o->k_contig ? o->s[(size_t)r * o->ld + k] : o->s[(size_t)k * o->ld + r];
}

/* Packed layouts (words of a k pair, even k in the low half; rows >= rn and
 * a missing odd k are zero):
 *   A panel (MR rows of op(A)):    a[r * kp_n + kp]  (each row's pairs in order)
 *   B panel (NR columns of op(B)): b[kp * NR + j]    (16 columns = one vector)
 * The portable packers, any CPU, any operand orientation. */
static inline uint32_t pair_word(const operand *o, int r, int k, bool has_hi)
{
    uint32_t w = to_bf16(elem(o, r, k));
    if (has_hi)
        w |= (uint32_t)to_bf16(elem(o, r, k + 1)) << 16;
    return w;
}

static void pack_a_portable(const operand *o, int r0, int rn, int k0, int kn, uint32_t *out)
{
    const int kp_n = (kn + 1) / 2;
    for (int r = 0; r < MR; r++)
        for (int kp = 0; kp < kp_n; kp++)
            out[(size_t)r * kp_n + kp] =
                r < rn ? pair_word(o, r0 + r, k0 + 2 * kp, 2 * kp + 1 < kn) : 0;
}

static void pack_b_portable(const operand *o, int r0, int rn, int k0, int kn, uint32_t *out)
{
    const int kp_n = (kn + 1) / 2;
    for (int kp = 0; kp < kp_n; kp++)
        for (int j = 0; j < NR; j++)
            out[(size_t)kp * NR + j] =
                j < rn ? pair_word(o, r0 + j, k0 + 2 * kp, 2 * kp + 1 < kn) : 0;
}

/* C tile (rn x cn, rn <= MR, cn <= NR) = alpha acc + beta C; beta 0 ignores C. */
static void store_tile(const float *acc, int rn, int cn, float alpha, float beta, float *c, int ldc)
{
    for (int r = 0; r < rn; r++)
        for (int j = 0; j < cn; j++) {
            float *p = c + (size_t)r * ldc + j;
            const float v = alpha * acc[r * NR + j];
            *p = beta == 0.0f ? v : v + beta * *p;
        }
}

/* The A words of a tile: row r's word of pair kp at a[r * a_rs + kp * a_ks]
 * (a packed A panel: a_rs = kp_n, a_ks = 1; the SYRK's A rows read from
 * the packed B panel of the same rows: a_rs = 1, a_ks = NR). */
static void kernel_portable(int kp_n, const uint32_t *a, int a_rs, int a_ks, const uint32_t *b,
                            int rn, int cn, float alpha, float beta, float *c, int ldc)
{
    float acc[MR * NR];
    memset(acc, 0, sizeof acc);
    for (int kp = 0; kp < kp_n; kp++) {
        const uint32_t *bw = b + (size_t)kp * NR;
        for (int r = 0; r < MR; r++) {
            const uint32_t aw = a[(size_t)r * a_rs + (size_t)kp * a_ks];
            const float a0 = from_bf16(aw & 0xffffu), a1 = from_bf16(aw >> 16);
            float *row = acc + r * NR;
            for (int j = 0; j < NR; j++) {
                row[j] += a0 * from_bf16(bw[j] & 0xffffu);
                row[j] += a1 * from_bf16(bw[j] >> 16);
            }
        }
    }
    store_tile(acc, rn, cn, alpha, beta, c, ldc);
}

#ifdef HAVE_X86_BF16
#define BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512bf16")))

/* 32 floats from src (n of them present, the rest zero) as 16 pair words
 * in order (VCVTNE2PS2BF16 rounds to nearest even). */
BF16_TARGET static inline __m512i cvt32(const float *src, int n)
{
    const __mmask16 m0 = n >= 16 ? 0xffff : n <= 0 ? 0 : (__mmask16)((1u << n) - 1);
    const __mmask16 m1 = n >= 32 ? 0xffff : n <= 16 ? 0 : (__mmask16)((1u << (n - 16)) - 1);
    const __m512 lo = _mm512_maskz_loadu_ps(m0, src);
    const __m512 hi = _mm512_maskz_loadu_ps(m1, src + 16);
    return (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
}

/* In-register transpose of 16 x 16 32-bit words (r[i] row i in, column i
 * out): unpack 32-bit, unpack 64-bit, then two rounds of 128-bit lane
 * shuffles. */
BF16_TARGET static inline void transpose16(__m512i r[16])
{
    __m512i t[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
        r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
        r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
        r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    /* r[4g + c] holds, in each 128-bit lane L, row 4L' .. of group g: column
     * c + 4j of rows 4g..4g+3 sits in lane j. */
    for (int g = 0; g < 2; g++)
        for (int c = 0; c < 4; c++) {
            t[8 * g + c] = _mm512_shuffle_i32x4(r[8 * g + c], r[8 * g + 4 + c], 0x88);
            t[8 * g + 4 + c] = _mm512_shuffle_i32x4(r[8 * g + c], r[8 * g + 4 + c], 0xdd);
        }
    for (int c = 0; c < 8; c++) {
        r[c] = _mm512_shuffle_i32x4(t[c], t[8 + c], 0x88);
        r[8 + c] = _mm512_shuffle_i32x4(t[c], t[8 + c], 0xdd);
    }
}

/* A panel, vectorized when k is contiguous (the row's conversion is its
 * packed row); otherwise the portable packer. */
BF16_TARGET static void pack_a_avx512(const operand *o, int r0, int rn, int k0, int kn,
                                      uint32_t *out)
{
    if (!o->k_contig) {
        pack_a_portable(o, r0, rn, k0, kn, out);
        return;
    }
    const int kp_n = (kn + 1) / 2;
    for (int r = 0; r < MR; r++) {
        uint32_t *dst = out + (size_t)r * kp_n;
        const float *src = o->s + (size_t)(r0 + r) * o->ld + k0;
        for (int kk = 0; kk < kn; kk += 32) {
            const int np = (kn - kk >= 32 ? 32 : kn - kk + 1) / 2;
            const __m512i w = r < rn ? cvt32(src + kk, kn - kk) : _mm512_setzero_si512();
            _mm512_mask_storeu_epi32(dst + kk / 2, (__mmask16)(np >= 16 ? 0xffff : (1u << np) - 1),
                                     w);
        }
    }
}

/* B panel. k strided (op(B) = B): rows k and k+1 of 16 consecutive columns
 * are converted together and interleaved into 16 words. k contiguous
 * (op(B) = B^T, the SYRK's second operand): 16 columns' conversions are 16
 * rows of pair words, transposed in registers into 16 pair rows. */
BF16_TARGET static void pack_b_avx512(const operand *o, int r0, int rn, int k0, int kn,
                                      uint32_t *out)
{
    const int kp_n = (kn + 1) / 2;
    if (o->k_contig) {
        for (int j = 0; j < NR; j += 16)
            for (int kk = 0; kk < kn; kk += 32) {
                __m512i v[16];
                for (int i = 0; i < 16; i++)
                    v[i] = j + i < rn ? cvt32(o->s + (size_t)(r0 + j + i) * o->ld + k0 + kk, kn - kk)
                                      : _mm512_setzero_si512();
                transpose16(v);
                const int np = (kn - kk >= 32 ? 32 : kn - kk + 1) / 2;
                for (int t = 0; t < np; t++)
                    _mm512_storeu_si512(out + (size_t)(kk / 2 + t) * NR + j, v[t]);
            }
        return;
    }
    /* lanes 0..15 of the conversion are row k, 16..31 row k+1: interleave */
    const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24,
                                         8, 23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    for (int kp = 0; kp < kp_n; kp++) {
        const int k = k0 + 2 * kp;
        const bool has_hi = 2 * kp + 1 < kn;
        const float *s0 = o->s + (size_t)k * o->ld + r0;
        const float *s1 = s0 + o->ld;
        for (int j = 0; j < NR; j += 16) {
            const int left = rn - j;
            const __mmask16 m = left >= 16 ? 0xffff : left <= 0 ? 0 : (__mmask16)((1u << left) - 1);
            const __m512 lo = _mm512_maskz_loadu_ps(m, s0 + j);
            const __m512 hi = has_hi ? _mm512_maskz_loadu_ps(m, s1 + j) : _mm512_setzero_ps();
            _mm512_storeu_si512(out + (size_t)kp * NR + j,
                                _mm512_permutexvar_epi16(idx, (__m512i)_mm512_cvtne2ps_pbh(hi, lo)));
        }
    }
}

/* MR x NV*16 (NV = 1..4 vectors of 16 columns; 4: the full 6 x 64 tile):
 * 6 NV float32 accumulators, per pair NV B vectors and 6 broadcast A words.
 * The narrower forms serve tiles whose needed columns end early (the SYRK's
 * diagonal tiles, a ragged last column block): only the vectors that hold a
 * needed column are computed, each with the same sums as in the full tile. */
#define KERNEL_NV(NV)                                                                        \
    BF16_TARGET static void kernel_avx512_##NV(int kp_n, const uint32_t *a, int a_rs,         \
                                               int a_ks, const uint32_t *b, int rn, int cn,   \
                                               float alpha, float beta, float *c, int ldc)    \
    {                                                                                        \
        __m512 acc[MR][NV];                                                                  \
        _Pragma("GCC unroll 8")                                                              \
        for (int r = 0; r < MR; r++)                                                         \
            _Pragma("GCC unroll 8")                                                          \
            for (int v = 0; v < NV; v++)                                                     \
                acc[r][v] = _mm512_setzero_ps();                                             \
        for (int kp = 0; kp < kp_n; kp++) {                                                  \
            __m512bh bv[NV];                                                                 \
            _Pragma("GCC unroll 8")                                                          \
            for (int v = 0; v < NV; v++)                                                     \
                bv[v] = (__m512bh)_mm512_loadu_si512(b + 16 * v);                            \
            _Pragma("GCC unroll 8")                                                          \
            for (int r = 0; r < MR; r++) {                                                   \
                const __m512bh aw = (__m512bh)_mm512_set1_epi32((int)a[r * a_rs]);           \
                _Pragma("GCC unroll 8")                                                      \
                for (int v = 0; v < NV; v++)                                                 \
                    acc[r][v] = _mm512_dpbf16_ps(acc[r][v], aw, bv[v]);                      \
            }                                                                                \
            a += a_ks;                                                                       \
            b += NR;                                                                         \
        }                                                                                    \
        const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);                  \
        for (int r = 0; r < rn; r++) {                                                       \
            float *row = c + (size_t)r * ldc;                                                \
            _Pragma("GCC unroll 8")                                                          \
            for (int v = 0; v < NV; v++) {                                                   \
                const int left = cn - 16 * v;                                                \
                if (left <= 0)                                                               \
                    break;                                                                   \
                const __mmask16 m = left >= 16 ? 0xffff : (__mmask16)((1u << left) - 1);     \
                __m512 out = _mm512_mul_ps(va, acc[r][v]);                                   \
                if (beta != 0.0f)                                                            \
                    out = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m, row + 16 * v), out);  \
                _mm512_mask_storeu_ps(row + 16 * v, m, out);                                 \
            }                                                                                \
        }                                                                                    \
    }
KERNEL_NV(1)
KERNEL_NV(2)
KERNEL_NV(3)
KERNEL_NV(4)
#undef KERNEL_NV

/* The tile's first cn columns (cn <= NR) with the fewest vectors that hold them. */
BF16_TARGET static void kernel_avx512(int kp_n, const uint32_t *a, int a_rs, int a_ks,
                                      const uint32_t *b, int rn, int cn, float alpha, float beta,
                                      float *c, int ldc)
{
    switch ((cn + 15) / 16) {
    case 1: kernel_avx512_1(kp_n, a, a_rs, a_ks, b, rn, cn, alpha, beta, c, ldc); break;
    case 2: kernel_avx512_2(kp_n, a, a_rs, a_ks, b, rn, cn, alpha, beta, c, ldc); break;
    case 3: kernel_avx512_3(kp_n, a, a_rs, a_ks, b, rn, cn, alpha, beta, c, ldc); break;
    default: kernel_avx512_4(kp_n, a, a_rs, a_ks, b, rn, cn, alpha, beta, c, ldc); break;
    }
}

/* The strict upper triangle of the n x n matrix c from its lower one, in
 * 16 x 16 blocks transposed in registers (exact copies: the same values as
 * strata_cpu_mirror_lower, which does the ragged edges and the diagonal
 * blocks' own triangles). */
BF16_TARGET static void mirror_lower_avx512(int n, float *c, int ldc)
{
    const int nb = n / 16;
    for (int bi = 0; bi < nb; bi++)
        for (int bj = bi + 1; bj < nb; bj++) {
            /* rows 16 bj.., columns 16 bi.. (lower) -> rows 16 bi.., columns 16 bj.. */
            __m512i v[16];
            for (int t = 0; t < 16; t++)
                v[t] = _mm512_loadu_si512(c + (size_t)(16 * bj + t) * ldc + 16 * bi);
            transpose16(v);
            for (int t = 0; t < 16; t++)
                _mm512_storeu_si512(c + (size_t)(16 * bi + t) * ldc + 16 * bj, v[t]);
        }
    /* diagonal blocks, and the last ragged rows/columns */
    for (int i = 0; i < n; i++) {
        const int jb = i / 16 < nb ? (i / 16 + 1) * 16 : i + 1; /* first column left to do */
        for (int j = i + 1; j < n && j < jb; j++)
            c[(size_t)i * ldc + j] = c[(size_t)j * ldc + i];
        for (int j = nb * 16 > jb ? nb * 16 : jb; j < n; j++)
            c[(size_t)i * ldc + j] = c[(size_t)j * ldc + i];
    }
}
#endif

typedef void (*pack_fn)(const operand *, int, int, int, int, uint32_t *);
typedef void (*kernel_fn)(int, const uint32_t *, int, int, const uint32_t *, int, int, float,
                          float, float *, int);

static _Atomic int force_portable; /* tests: strata_gemm_bf16_force_portable */

void strata_gemm_bf16_force_portable(bool on)
{
    force_portable = on;
}

static bool use_avx512(void)
{
#ifdef HAVE_X86_BF16
    static _Atomic int have = -1; /* every thread computes the same value */
    if (force_portable)
        return false;
    if (have < 0) {
        __builtin_cpu_init();
        have = __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw");
    }
    return have != 0;
#else
    return false;
#endif
}

const char *strata_gemm_bf16_kernel(void)
{
    return use_avx512() ? "avx512bf16" : "portable";
}

/* An A panel (rows r0 .. r0+rn-1, packed layout, missing rows zero) copied
 * from the packed B block whose column j is op(A)'s row j (the SYRK): word
 * kp of row j is bp[(j / NR) NR kp_n + kp NR + j % NR]. For the tiles that
 * straddle two B panels or are short; the others read B's words in place. */
static void gather_a(const uint32_t *bp, int r0, int rn, int kp_n, uint32_t *out)
{
    for (int r = 0; r < MR; r++) {
        uint32_t *dst = out + (size_t)r * kp_n;
        if (r >= rn) {
            memset(dst, 0, (size_t)kp_n * sizeof *dst);
            continue;
        }
        const int j = r0 + r;
        const uint32_t *src = bp + (size_t)(j / NR) * NR * kp_n + j % NR;
        for (int kp = 0; kp < kp_n; kp++)
            dst[kp] = src[(size_t)kp * NR];
    }
}

/* C(m x n) = alpha A(m x k) B(k x n) + beta C over the operands' views; with
 * lower_only, tiles entirely above the diagonal (column start past the
 * tile's last row) are skipped. */
static strata_status gemm(int m, int n, int k, float alpha, const operand *A, const operand *B,
                          float beta, float *c, int ldc, bool lower_only)
{
    const bool fast = use_avx512();
    pack_fn pack_a = pack_a_portable, pack_b = pack_b_portable;
    kernel_fn kern = kernel_portable;
#ifdef HAVE_X86_BF16
    if (fast) {
        pack_a = pack_a_avx512;
        pack_b = pack_b_avx512;
        kern = kernel_avx512;
    }
#else
    (void)fast;
#endif
    /* SYRK with the whole of op(B) in one column block: op(A)'s rows are
     * op(B)'s columns, already converted and packed, so A is not packed
     * again (the same words: the same sums). */
    const bool a_from_b = lower_only && n <= NC && m == n;
    /* Several column blocks and a modest m (Newton-Schulz's p x p times
     * p x q): all of op(A)'s rows packed once per k block, not once per
     * column block (the kernels see the same words). */
    const bool a_all = !a_from_b && n > NC && m <= A_ALL_MAX;
    const int nc_max = n < NC ? (n + NR - 1) / NR * NR : NC;
    const int mc_max = a_all ? (m + MR - 1) / MR * MR : m < MC ? (m + MR - 1) / MR * MR : MC;
    const size_t bbytes = (size_t)(KC / 2) * nc_max * sizeof(uint32_t);
    const size_t abytes = (size_t)(KC / 2) * mc_max * sizeof(uint32_t);
    uint32_t *bp = aligned_alloc(64, (bbytes + abytes + 63) & ~(size_t)63);
    if (!bp)
        return strata_error(STRATA_ERR_NOMEM, "sgemm_bf16: cannot allocate %zu bytes of packing",
                            bbytes + abytes);
    uint32_t *ap = bp + bbytes / sizeof(uint32_t);
    /* k blocks outermost: every C element still gets its k blocks in order */
    for (int pc = 0; pc < k; pc += KC) {
        const int kn = k - pc < KC ? k - pc : KC, kp_n = (kn + 1) / 2;
        const float beta_eff = pc == 0 ? beta : 1.0f;
        if (a_all)
            for (int ir = 0; ir < m; ir += MR)
                pack_a(A, ir, m - ir < MR ? m - ir : MR, pc, kn, ap + (size_t)ir * kp_n);
        for (int jc = 0; jc < n; jc += NC) {
            const int ncn = n - jc < NC ? n - jc : NC;
            for (int jr = 0; jr < ncn; jr += NR) {
                const int cn = ncn - jr < NR ? ncn - jr : NR;
                pack_b(B, jc + jr, cn, pc, kn, bp + (size_t)jr * kp_n);
            }
            for (int ic = 0; ic < m; ic += MC) {
                const int mcn = m - ic < MC ? m - ic : MC;
                if (lower_only && jc > ic + mcn - 1)
                    continue;
                uint32_t *ab = a_all ? ap + (size_t)ic * kp_n : ap; /* this row block's panels */
                for (int ir = 0; ir < mcn && !a_all; ir += MR) {
                    const int rn = mcn - ir < MR ? mcn - ir : MR;
                    const int r0 = ic + ir;
                    if (!a_from_b)
                        pack_a(A, r0, rn, pc, kn, ab + (size_t)ir * kp_n);
                    else if (rn < MR || r0 / NR != (r0 + MR - 1) / NR)
                        gather_a(bp, r0, rn, kp_n, ab + (size_t)ir * kp_n);
                }
                for (int jr = 0; jr < ncn; jr += NR) {
                    const int cn = ncn - jr < NR ? ncn - jr : NR;
                    for (int ir = 0; ir < mcn; ir += MR) {
                        const int rn = mcn - ir < MR ? mcn - ir : MR;
                        int cw = cn;
                        if (lower_only) {
                            /* the tile's columns up to its last row's diagonal; the
                             * rest lie above the diagonal (mirrored over after) */
                            const int last = ic + ir + rn - 1 - (jc + jr);
                            if (last < 0)
                                continue;
                            if (cw > last + 1)
                                cw = last + 1;
                        }
                        const int r0 = ic + ir;
                        const uint32_t *at = ab + (size_t)ir * kp_n;
                        int a_rs = kp_n, a_ks = 1;
                        if (a_from_b && rn == MR && r0 / NR == (r0 + MR - 1) / NR) {
                            /* the rows' words in their B panel (see gather_a) */
                            at = bp + (size_t)(r0 / NR) * NR * kp_n + r0 % NR;
                            a_rs = 1;
                            a_ks = NR;
                        }
                        kern(kp_n, at, a_rs, a_ks, bp + (size_t)jr * kp_n, rn, cw, alpha,
                             beta_eff, c + (size_t)(ic + ir) * ldc + jc + jr, ldc);
                    }
                }
            }
        }
    }
    free(bp);
    return STRATA_OK;
}

strata_status strata_cpu_sgemm_bf16(int trans_a, int trans_b, int m, int n, int k, float alpha,
                                    const float *a, int lda, const float *b, int ldb, float beta,
                                    float *c, int ldc)
{
    if (m == 0 || n == 0)
        return STRATA_OK;
    if (k == 0) {
        for (int i = 0; i < m; i++)
            for (int j = 0; j < n; j++)
                c[(size_t)i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[(size_t)i * ldc + j];
        return STRATA_OK;
    }
    /* op(A)(i, k): A[i][k] untransposed (k contiguous); op(B)(k, j) as the
     * panel's (j, k): B[j][k] when transposed (k contiguous). */
    const operand A = {a, lda, !trans_a}, B = {b, ldb, trans_b != 0};
    return gemm(m, n, k, alpha, &A, &B, beta, c, ldc, false);
}

strata_status strata_cpu_ssyrk_bf16(int trans, int n, int k, float alpha, const float *a, int lda,
                                    float beta, float *c, int ldc)
{
    if (n == 0)
        return STRATA_OK;
    if (k == 0)
        return strata_cpu_sgemm_bf16(0, 0, n, n, 0, alpha, a, lda, a, lda, beta, c, ldc);
    /* trans = 0: C = A A^T, A n x k; op(A) = A, op(B) = A^T. trans = 1:
     * C = A^T A, A k x n; op(A) = A^T, op(B) = A. */
    const operand A = {a, lda, !trans}, B = {a, lda, !trans};
    strata_status st = gemm(n, n, k, alpha, &A, &B, beta, c, ldc, true);
    if (st != STRATA_OK)
        return st;
#ifdef HAVE_X86_BF16
    if (use_avx512()) {
        mirror_lower_avx512(n, c, ldc);
        return STRATA_OK;
    }
#endif
    strata_cpu_mirror_lower(n, c, ldc);
    return STRATA_OK;
}

#ifdef HAVE_X86_BF16
/* 16 floats at a time: VCVTNEPS2BF16 (nearest even, as to_bf16 for finite
 * values; denormals flush to zero, as the products' inputs do), widened
 * back by a 16-bit shift; the tail masked. */
BF16_TARGET static void round_bf16_avx512(size_t n, float *x)
{
    for (size_t i = 0; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? 0xffff : (__mmask16)((1u << (n - i)) - 1);
        const __m256i h = (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, x + i));
        const __m512i w = _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16);
        _mm512_mask_storeu_ps(x + i, m, _mm512_castsi512_ps(w));
    }
}
#endif

void strata_cpu_round_bf16(size_t n, float *x)
{
#ifdef HAVE_X86_BF16
    if (use_avx512()) {
        round_bf16_avx512(n, x);
        return;
    }
#endif
    for (size_t i = 0; i < n; i++)
        x[i] = strata_bf16_round(x[i]);
}

/* Sum of squares in SUMSQ_LANES interleaved float64 partial sums: element i
 * goes to lane i % SUMSQ_LANES (x_i^2 is exact in float64, so a fused
 * multiply-add rounds as the add alone), then the lanes are added in lane
 * order. The AVX-512 path (4 vectors of 8 lanes, 32 floats a step) and the
 * portable loop do the same adds in the same order: the same bits. */
#define SUMSQ_LANES 32

static double sumsq_lanes_combine(const double *acc)
{
    double s = 0.0;
    for (int l = 0; l < SUMSQ_LANES; l++)
        s += acc[l];
    return s;
}

#ifdef HAVE_X86_BF16
BF16_TARGET static double sumsq_lanes_avx512(size_t n, const float *x)
{
    __m512d a0 = _mm512_setzero_pd(), a1 = a0, a2 = a0, a3 = a0;
    size_t i = 0;
    for (; i + SUMSQ_LANES <= n; i += SUMSQ_LANES) {
        const __m512 v0 = _mm512_loadu_ps(x + i), v1 = _mm512_loadu_ps(x + i + 16);
        const __m512d d0 = _mm512_cvtps_pd(_mm512_castps512_ps256(v0));
        const __m512d d1 = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(
            _mm512_castps_pd(v0), 1)));
        const __m512d d2 = _mm512_cvtps_pd(_mm512_castps512_ps256(v1));
        const __m512d d3 = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(
            _mm512_castps_pd(v1), 1)));
        a0 = _mm512_fmadd_pd(d0, d0, a0);
        a1 = _mm512_fmadd_pd(d1, d1, a1);
        a2 = _mm512_fmadd_pd(d2, d2, a2);
        a3 = _mm512_fmadd_pd(d3, d3, a3);
    }
    double acc[SUMSQ_LANES];
    _mm512_storeu_pd(acc, a0);
    _mm512_storeu_pd(acc + 8, a1);
    _mm512_storeu_pd(acc + 16, a2);
    _mm512_storeu_pd(acc + 24, a3);
    for (size_t l = 0; i < n; i++, l++)
        acc[l] += (double)x[i] * (double)x[i];
    return sumsq_lanes_combine(acc);
}
#endif

double strata_cpu_sumsq_lanes(size_t n, const float *x)
{
#ifdef HAVE_X86_BF16
    if (use_avx512())
        return sumsq_lanes_avx512(n, x);
#endif
    double acc[SUMSQ_LANES] = {0};
    for (size_t i = 0; i < n; i++)
        acc[i % SUMSQ_LANES] += (double)x[i] * (double)x[i];
    return sumsq_lanes_combine(acc);
}

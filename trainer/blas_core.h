/* blas_core.h — which OpenBLAS kernel set ("core") runs the products, and the
 * CLI's start-up fix for OpenBLAS's generic fallback (issue #13 item 4).
 *
 * OpenBLAS built with DYNAMIC_ARCH (Debian's) picks its kernels from the CPU
 * it recognises. Version 0.3.21 falls back to the slowest generic kernels
 * ("Prescott" on x86-64, "armv8" on arm64) on CPUs newer than its tables,
 * about half the GEMM throughput; OPENBLAS_CORETYPE=<core> overrides the
 * choice. */
#ifndef GPT_BLAS_CORE_H
#define GPT_BLAS_CORE_H

#include <stdbool.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The environment variable strata sets, beside OPENBLAS_CORETYPE, when it
 * re-executes itself with a better core: its value is the generic core
 * OpenBLAS had picked. Its presence also stops a second re-execution. */
#define GPT_BLAS_CORE_FROM_ENV "STRATA_BLAS_CORE_FROM"
/* Test knob: treat a set OPENBLAS_CORETYPE as OpenBLAS's own detection (not
 * the user's choice), so that tests can make the generic fallback happen on a
 * CPU that OpenBLAS recognises. */
#define GPT_BLAS_CORE_TEST_ENV "STRATA_TEST_BLAS_CORETYPE_AS_DETECTED"

typedef struct gpt_blas_core {
    const char *core;   /* openblas_get_corename() of this process (a BLIS build:
                           bli_arch_string of the arch BLIS picked, backend/blas.h) */
    const char *source; /* "openblas" (detected), "user" (OPENBLAS_CORETYPE given),
                           "strata" (strata re-executed itself with a better core), or
                           "blis" (a BLIS build: detected by BLIS, never re-executed) */
    const char *from;   /* source "strata": the generic core OpenBLAS had picked; else NULL */
    const char *better; /* core is generic and this CPU supports faster kernels: their
                           OPENBLAS_CORETYPE name ("SkylakeX", "Haswell", ...); else NULL */
    /* After gpt_blas_core_probe_forced found the user's OPENBLAS_CORETYPE weaker
     * than this CPU's kernels (Haswell on AVX-512): the core OpenBLAS picks
     * without it, and each one's SGEMM throughput (GFLOP/s, a 0.1 s probe of
     * 256^3 products at the same thread count); else NULL and 0. */
    const char *detected;
    double gflops_core, gflops_detected;
    /* The user's OPENBLAS_CORETYPE is weaker than the kernels this CPU's
     * features allow: their name (gpt_blas_core_better); else NULL. Set
     * whether or not the probe ran. */
    const char *supports;
} gpt_blas_core;

/* Runs shorter than this many steps are not probed (the probe adds ~0.3 s
 * to start-up); their blas line still names the forced and supported cores. */
#define GPT_BLAS_PROBE_MIN_STEPS 50

/* True for OpenBLAS's generic fallback cores (Prescott, Core2, Katmai, ...,
 * armv8), compared without case. */
bool gpt_blas_core_is_generic(const char *core);

/* The best OPENBLAS_CORETYPE name this CPU's features allow (x86-64:
 * AVX-512F/BW/DQ/VL -> SkylakeX, AVX2+FMA -> Haswell, AVX -> Sandybridge;
 * arm64: SVE -> NeoverseV1, Advanced SIMD -> NeoverseN1), or NULL when
 * there is none better than the generic kernels. */
const char *gpt_blas_core_better(void);

/* What runs now, and why (see the struct). */
void gpt_blas_core_get(gpt_blas_core *out);

/* The CLI's start-up step, before any other work: when OPENBLAS_CORETYPE is
 * unset (never when the user set it, whatever its value), OpenBLAS picked a
 * generic core and the CPU supports a better one, set OPENBLAS_CORETYPE to
 * it and GPT_BLAS_CORE_FROM_ENV to the generic name, and execv
 * /proc/self/exe with argv (argv[argc] == NULL). Returns only when it does
 * not re-execute; if execv fails it prints a warning with the remedy to
 * stderr and the run goes on with the generic core. */
void gpt_blas_core_reexec(char **argv);

/* SGEMM throughput of this process's BLAS in GFLOP/s: 256 x 256 products
 * (float32, 2 n^3 flops each) repeated for `seconds` (at least 2). */
double gpt_blas_gemm_probe(double seconds);

/* When the user's OPENBLAS_CORETYPE names a core weaker than the kernels
 * this CPU supports (gpt_blas_core_better, ranked Sandybridge < Haswell/Zen
 * < SkylakeX < Cooperlake < SapphireRapids; arm64 NeoverseN1 < NeoverseV1):
 * probe this process's GEMM, run /proc/self/exe `argv0 __blas-probe` without
 * OPENBLAS_CORETYPE to learn which core OpenBLAS picks and its throughput
 * (about 0.2 s in all), and keep both for gpt_blas_core_get. The user's
 * choice is kept. Nothing otherwise (and nothing when the child fails). */
void gpt_blas_core_probe_forced(void);

/* The child's side: prints "CORE GFLOPS" to stdout. */
int gpt_blas_core_probe_main(void);

/* For a benchmark's header: "<BLAS> core: X" and, after
 * gpt_blas_core_probe_forced found a forced weaker core, "; forced weaker
 * than this CPU's Y: SGEMM probe 0.1 s each, X a GFLOP/s, Y b GFLOP/s".
 * A program that calls gpt_blas_core_probe_forced must answer argv[1] ==
 * "__blas-probe" with gpt_blas_core_probe_main() (the child runs it). */
void gpt_blas_core_print(FILE *f);

/* Print the warning with the remedy to `f` when the core is generic and the
 * CPU supports a better one (the user chose the core, or the re-execution
 * did not happen); nothing otherwise. */
void gpt_blas_core_warn(const gpt_blas_core *c, FILE *f);

#ifdef __cplusplus
}
#endif
#endif

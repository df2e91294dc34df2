/* blas.h — which BLAS library does the products, and the few calls that are
 * not CBLAS: its name and version, the kernel set ("core" or "arch") it
 * picked for this CPU, and its thread count. One implementation per library,
 * chosen by meson's -Dblas option (blas_openblas.c: OpenBLAS, the default;
 * blas_blis.c: BLIS). Everything else calls CBLAS (<cblas.h>) and LAPACKE,
 * which both libraries' builds provide.
 *
 * The functions are stateless wrappers over the library's own global state
 * (a thread count is process-wide in both libraries), safe to call from any
 * thread; none fails. Not part of the public API. */
#ifndef STRATA_BACKEND_BLAS_H
#define STRATA_BACKEND_BLAS_H

#ifdef __cplusplus
extern "C" {
#endif

/* "OpenBLAS" or "BLIS". */
const char *strata_blas_name(void);

/* The library's own build description: openblas_get_config() ("OpenBLAS
 * 0.3.21 DYNAMIC_ARCH NO_AFFINITY Zen MAX_THREADS=64"), or "BLIS " followed
 * by bli_info_get_version_str() ("BLIS 0.9.0"). Static storage. */
const char *strata_blas_version(void);

/* The kernel set the library picked for this CPU at load time:
 * openblas_get_corename() ("Haswell", "Prescott", ...), or BLIS's
 * bli_arch_string(bli_arch_query_id()) ("zen3", "haswell", "generic", ...).
 * Static storage. */
const char *strata_blas_core(void);

/* The environment variable through which a user picks OpenBLAS's kernel set
 * and strata's CLI may re-execute itself with a better one
 * ("OPENBLAS_CORETYPE"), or NULL where strata does no such thing (BLIS picks
 * its kernels from CPUID; its BLIS_ARCH_TYPE override is left to the user). */
const char *strata_blas_core_env(void);

/* Set the library's process-wide thread count for later calls (n >= 1;
 * n <= 0 leaves it unchanged). OpenBLAS: openblas_set_num_threads; BLIS:
 * bli_thread_set_num_threads. */
void strata_blas_threads_set(int n);

/* The thread count later calls will use (>= 1). OpenBLAS's default is the
 * number of cores; BLIS's is BLIS_NUM_THREADS or OMP_NUM_THREADS when set,
 * else 1. */
int strata_blas_threads(void);

#ifdef __cplusplus
}
#endif
#endif

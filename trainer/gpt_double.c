/* gpt_double.c — the float64 GPT model of gpt_double.h (body in gpt_impl.inc). */
#include "gpt_double.h"

#include <math.h>

#define REAL double
#define GEMM cblas_dgemm
#define GPT_SYM(x) gptd_##x
#define R_EXP exp
#define R_TANH tanh

#include "gpt_impl.inc"

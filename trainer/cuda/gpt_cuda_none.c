/* gpt_cuda.h in a build without CUDA: creation says so (STRATA_ERR_UNSUPPORTED),
 * so `strata train --device cuda` fails cleanly; the other functions are
 * never reached without a model and behave as on a NULL one. */
#include "gpt_cuda.h"

#include "strata/status.h"

int gpt_cuda_create(const gpt_config *cfg, uint64_t seed, gpt_cuda **out)
{
    (void)cfg, (void)seed;
    if (out)
        *out = NULL;
    return (int)strata_error(STRATA_ERR_UNSUPPORTED,
                             "gpt --device cuda: this build has no CUDA support (reconfigure "
                             "with meson -Dcuda=enabled on a machine with the CUDA toolkit); "
                             "use --device cpu");
}

void gpt_cuda_destroy(gpt_cuda *m)
{
    (void)m;
}

int gpt_cuda_num_tensors(const gpt_cuda *m)
{
    (void)m;
    return 0;
}

const gpt_tensor *gpt_cuda_tensor_at(const gpt_cuda *m, int i)
{
    (void)m, (void)i;
    return NULL;
}

size_t gpt_cuda_num_params(const gpt_cuda *m)
{
    (void)m;
    return 0;
}

static int no_model(void)
{
    return (int)strata_error(STRATA_ERR_UNSUPPORTED, "gpt_cuda: built without CUDA");
}

int gpt_cuda_forward(gpt_cuda *m, const uint8_t *inputs, const uint8_t *targets, int B, int T,
                     gpt_layer_cb before_layer, void *ctx, float *loss_out)
{
    (void)m, (void)inputs, (void)targets, (void)B, (void)T, (void)before_layer, (void)ctx;
    (void)loss_out;
    return no_model();
}

int gpt_cuda_backward(gpt_cuda *m, gpt_layer_cb after_layer, void *ctx)
{
    (void)m, (void)after_layer, (void)ctx;
    return no_model();
}

int gpt_cuda_zero_grad(gpt_cuda *m)
{
    (void)m;
    return no_model();
}

int gpt_cuda_sync(gpt_cuda *m)
{
    (void)m;
    return no_model();
}

/* The runtime's state as the checkpoint sees it (runtime/state.h), and the
 * counters a load restores, which strata_stats_get adds
 * (strata_rt_stats_base_add). */
#include "runtime/state.h"

#include "runtime/runtime_internal.h"

#include <string.h>

void strata_rt_view_get(const strata_runtime *rt, strata_rt_view *out)
{
    *out = (strata_rt_view){
        .cfg = &rt->cfg,
        .committed = rt->committed,
        .t = rt->t,
        .lr_scale = rt->lr_scale,
        .rank = rt->rank,
        .world = rt->world,
        .n_params = rt->n_params,
        .managed_layers = rt->managed ? rt->max_layer + 1 : 0,
        .comm = rt->comm,
        .be = rt->be,
        .engine = rt->engine,
    };
}

void strata_rt_param_get(const strata_runtime *rt, int i, strata_rt_param_view *out)
{
    const rt_param *p = &rt->params[i];
    *out = (strata_rt_param_view){
        .name = p->name,
        .ndim = p->ndim,
        .numel = p->view.numel,
        .layer = p->layer,
        .role = p->role,
        .routed = p->routed,
        .tail = p->tail,
        .owner = p->owner,
        .shard_offset = p->shard_offset,
        .tail_offset = p->tail_offset,
        .refresh_offset = p->refresh_offset,
        .managed = p->managed,
        .data = p->data,
        .fam = p->fam,
        .state = p->state,
        .entry = p->entry,
        .hyper_set = p->hyper_set,
        .lr = p->lr,
        .weight_decay = p->weight_decay,
    };
    memcpy(out->shape, p->shape, sizeof out->shape);
}

void strata_rt_restore_step(strata_runtime *rt, int64_t t, float lr_scale)
{
    rt->t = t;
    rt->stats.step = t;
    rt->lr_scale = lr_scale;
    for (int i = 0; i < rt->n_params; i++)
        rt->params[i].materialized_at = t; /* every rank read every weight */
}

int strata_rt_ckpt_io_fault(strata_runtime *rt)
{
    rt->testing_ckpt_calls++;
    return rt->testing_ckpt_fail_at > 0 && rt->testing_ckpt_calls == rt->testing_ckpt_fail_at
               ? rt->testing_ckpt_errno
               : 0;
}

/* ---- the counters a resumed run continues */

#define SF(m, t, k) {#m, offsetof(strata_stats, m), t, k}
static const strata_rt_stat_field stat_fields[] = {
    SF(root_refreshes, 'i', 'c'), SF(root_failures, 'i', 'c'), SF(root_retries, 'i', 'c'),
    SF(nonfinite_rejected, 'i', 'c'), SF(overflow_skipped, 'i', 'c'),
    SF(nonfinite_directions, 'i', 'c'), SF(forward_hooks, 'i', 'c'),
    SF(backward_hooks, 'i', 'c'), SF(missing_backward_hooks, 'i', 'c'),
    SF(coh_installs, 'i', 'c'), SF(coh_waits, 'i', 'c'), SF(coh_dropped, 'i', 'c'),
    SF(coh_failed, 'i', 'c'), SF(coh_bound_exceeded, 'i', 'c'), SF(jobs_submitted, 'i', 'c'),
    SF(jobs_cancelled, 'i', 'c'), SF(io_errors, 'i', 'c'), SF(max_staleness, 'i', 'm'),
    SF(coh_wait_seconds, 'd', 'r'), SF(seconds_steps, 'd', 'r'), SF(seconds_factors, 'd', 'r'),
    SF(seconds_roots, 'd', 'r'), SF(seconds_precondition, 'd', 'r'), SF(seconds_tail, 'd', 'r'),
    SF(bytes_device_to_host, 'u', 'r'), SF(nvme_bytes_written, 'u', 'r'),
    SF(nvme_bytes_read, 'u', 'r'), SF(step_matrix_bytes, 'u', 'r'),
    SF(comm_bytes_intra_node, 'u', 'r'), SF(comm_bytes_inter_node, 'u', 'r'),
    SF(root_newton, 'i', 'c'), SF(root_fallbacks, 'i', 'c'),
    SF(stale_waits_avoided, 'i', 'c'), SF(stale_corrections, 'i', 'c'),
    SF(stale_refused, 'i', 'c'), SF(stale_refreshes_skipped, 'i', 'c'),
    SF(stale_max_corrected, 'i', 'm'),
};
#undef SF
_Static_assert(sizeof stat_fields / sizeof stat_fields[0] == STRATA_RT_N_STATS,
               "STRATA_RT_N_STATS counts the table's rows");

const strata_rt_stat_field *strata_rt_stat_field_at(int k)
{
    return &stat_fields[k];
}

double strata_rt_stat_read(const strata_stats *s, int k)
{
    const strata_rt_stat_field *f = &stat_fields[k];
    const char *p = (const char *)s + f->off;
    int64_t i;
    uint64_t u;
    double d;
    switch (f->type) {
    case 'i': memcpy(&i, p, sizeof i); return (double)i;
    case 'u': memcpy(&u, p, sizeof u); return (double)u;
    default: memcpy(&d, p, sizeof d); return d;
    }
}

/* base = saved - now (integers wrap consistently: adding it back gives
 * saved + what came after); maxima are kept as they are. */
static void stat_set_base(strata_stats *base, const strata_rt_stat_field *f, double saved,
                          double now)
{
    char *p = (char *)base + f->off;
    if (f->type == 'd') {
        const double d = f->kind == 'm' ? saved : saved - now;
        memcpy(p, &d, sizeof d);
    } else if (f->type == 'i') {
        const int64_t i = f->kind == 'm' ? (int64_t)saved : (int64_t)saved - (int64_t)now;
        memcpy(p, &i, sizeof i);
    } else {
        const uint64_t u = (uint64_t)saved - (uint64_t)now;
        memcpy(p, &u, sizeof u);
    }
}

void strata_rt_stats_base_from(strata_stats *base, const double *totals,
                               const strata_stats *now)
{
    memset(base, 0, sizeof *base);
    for (int k = 0; k < STRATA_RT_N_STATS; k++)
        stat_set_base(base, &stat_fields[k], totals[k], strata_rt_stat_read(now, k));
}

void strata_rt_stats_base_add(const strata_runtime *rt, strata_stats *out)
{
    for (int k = 0; k < STRATA_RT_N_STATS; k++) {
        const strata_rt_stat_field *f = &stat_fields[k];
        char *o = (char *)out + f->off;
        const char *b = (const char *)&rt->stats_base + f->off;
        if (f->type == 'd') {
            double x, y;
            memcpy(&x, o, sizeof x);
            memcpy(&y, b, sizeof y);
            x = f->kind == 'm' ? (x > y ? x : y) : x + y;
            memcpy(o, &x, sizeof x);
        } else if (f->type == 'i') {
            int64_t x, y;
            memcpy(&x, o, sizeof x);
            memcpy(&y, b, sizeof y);
            x = f->kind == 'm' ? (x > y ? x : y) : (int64_t)((uint64_t)x + (uint64_t)y);
            memcpy(o, &x, sizeof x);
        } else {
            uint64_t x, y;
            memcpy(&x, o, sizeof x);
            memcpy(&y, b, sizeof y);
            x += y;
            memcpy(o, &x, sizeof x);
        }
    }
}

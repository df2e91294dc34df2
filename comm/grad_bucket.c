/* Gradient buckets (grad_bucket.h): the plan built at create, the staging
 * ring, posting and completion.
 *
 * Invariants: buckets are numbered in post order within a pass (layer by
 * layer as built, registration order inside a layer); the in-flight queue
 * holds bucket numbers in post order and completes from its head, so the
 * ring's live region is the span from the head bucket's offset to the end of
 * the newest one (wrapping at most once), and a new bucket goes right after
 * the newest or, when that would run past the end, at offset 0.
 */
#include "comm/comm.h"

#include "base/clock.h"

#include <stdlib.h>
#include <string.h>

typedef struct gb_bucket {
    int layer;
    int first, count;      /* its members: member[first .. first + count) */
    size_t n;              /* floats */
    int *owners;           /* into owners_pool */
    int n_owners;
    bool receives;
    bool in_flight;        /* posted, not completed */
    size_t off;            /* ring offset (floats) while in flight: [off, off + 2n) */
    strata_comm_request req;
} gb_bucket;

struct strata_grad_buckets {
    strata_gb_config cfg;
    strata_gb_item *member;    /* items grouped by bucket, registration order inside */
    gb_bucket *bucket;
    int n_buckets;
    int n_items;
    int *layer_start;          /* buckets of layer l: [layer_start[l], layer_start[l + 1]) */
    int n_layers;
    int *owners_pool;
    float *ring;
    size_t ring_floats;
    int *member_of;            /* item i (create's order) is member[member_of[i]] */
    int *queue;                /* in-flight bucket numbers, a circular queue */
    int q_head, q_count;
    strata_gb_stats stats;
};

static bool same_owners(const strata_gb_item *a, const strata_gb_item *b)
{
    if (a->n_owners != b->n_owners)
        return false;
    for (int k = 0; k < a->n_owners; k++)
        if (a->owners[k] != b->owners[k])
            return false;
    return true;
}

strata_status strata_gb_create(const strata_gb_config *cfg, const strata_gb_item *items, int n,
                               strata_grad_buckets **out)
{
    if (!cfg || !cfg->comm || !cfg->be || !out || n < 0 || (n > 0 && !items) ||
        cfg->bucket_bytes < sizeof(float))
        return strata_error(STRATA_ERR_INVALID_ARG, "grad buckets: bad arguments");
    *out = NULL;
    int max_layer = -1, total_owners = 0;
    for (int i = 0; i < n; i++) {
        if (items[i].layer < 0 || (!items[i].grad && items[i].receives) || items[i].n == 0 ||
            items[i].n_owners < 1 || !items[i].owners)
            return strata_error(STRATA_ERR_INVALID_ARG, "grad buckets: bad item %d", i);
        max_layer = items[i].layer > max_layer ? items[i].layer : max_layer;
        total_owners += items[i].n_owners;
    }
    strata_status st = STRATA_OK;
    strata_grad_buckets *gb = calloc(1, sizeof *gb);
    int *bucket_of = calloc((size_t)n + 1, sizeof *bucket_of);
    if (!gb || !bucket_of) {
        free(gb);
        free(bucket_of);
        return strata_error(STRATA_ERR_NOMEM, "grad buckets: out of memory");
    }
    gb->cfg = *cfg;
    gb->n_items = n;
    gb->n_layers = max_layer + 1;
    const size_t cap = cfg->bucket_bytes / sizeof(float);
    gb->member = calloc((size_t)n + 1, sizeof *gb->member);
    gb->bucket = calloc((size_t)n + 1, sizeof *gb->bucket);
    gb->layer_start = calloc((size_t)gb->n_layers + 1, sizeof *gb->layer_start);
    gb->owners_pool = calloc((size_t)total_owners + 1, sizeof *gb->owners_pool);
    gb->queue = calloc((size_t)n + 1, sizeof *gb->queue);
    gb->member_of = calloc((size_t)n + 1, sizeof *gb->member_of);
    if (!gb->member || !gb->bucket || !gb->layer_start || !gb->owners_pool || !gb->queue ||
        !gb->member_of) {
        st = strata_error(STRATA_ERR_NOMEM, "grad buckets: out of memory");
        goto out_free;
    }
    /* Buckets layer by layer; inside a layer a tensor joins the newest bucket
     * of its owners while it fits under the cap. */
    int nb = 0, pool = 0;
    size_t largest = 0, total = 0;
    for (int l = 0; l < gb->n_layers; l++) {
        gb->layer_start[l] = nb;
        for (int i = 0; i < n; i++) {
            const strata_gb_item *it = &items[i];
            if (it->layer != l)
                continue;
            int b = -1;
            for (int j = nb - 1; j >= gb->layer_start[l]; j--)
                if (same_owners(&items[gb->bucket[j].first], it)) {
                    b = gb->bucket[j].n + it->n <= cap ? j : -1;
                    break;
                }
            if (b < 0) {
                b = nb++;
                gb_bucket *k = &gb->bucket[b];
                k->layer = l;
                k->first = i; /* its first item, until the members are grouped below */
                k->owners = gb->owners_pool + pool;
                k->n_owners = it->n_owners;
                memcpy(k->owners, it->owners, (size_t)it->n_owners * sizeof *k->owners);
                pool += it->n_owners;
                k->receives = it->receives;
            }
            gb->bucket[b].n += it->n;
            gb->bucket[b].count++;
            bucket_of[i] = b;
            total += it->n;
        }
    }
    gb->layer_start[gb->n_layers] = nb;
    gb->n_buckets = nb;
    /* Members grouped by bucket (stable: registration order inside). */
    int pos = 0;
    for (int b = 0; b < nb; b++) {
        gb->bucket[b].first = pos;
        pos += gb->bucket[b].count;
        largest = gb->bucket[b].n > largest ? gb->bucket[b].n : largest;
    }
    int *fill = bucket_of; /* reused below as a cursor per item's bucket */
    for (int b = 0, at = 0; b < nb; b++)
        for (int i = 0; i < n; i++)
            if (fill[i] == b) {
                gb->member_of[i] = at;
                gb->member[at++] = items[i];
            }
    size_t want = STRATA_GB_IN_FLIGHT * cap;
    want = want < total ? want : total;
    want = want > largest ? want : largest;
    gb->ring_floats = 2 * want;
    if (gb->ring_floats > 0) {
        gb->ring = malloc(gb->ring_floats * sizeof(float));
        if (!gb->ring) {
            st = strata_error(STRATA_ERR_NOMEM, "grad buckets: cannot allocate %zu bytes of "
                              "staging", gb->ring_floats * sizeof(float));
            goto out_free;
        }
    }
    gb->stats.n_buckets = nb;
    gb->stats.staging_bytes = gb->ring_floats * sizeof(float);
    free(bucket_of);
    *out = gb;
    return STRATA_OK;
out_free:
    free(bucket_of);
    strata_gb_destroy(gb);
    return st;
}

/* Complete the oldest bucket in flight: wait, then on an owner copy the sum
 * back into each member's gradient and scale it to the mean. */
static strata_status finish_oldest(strata_grad_buckets *gb)
{
    gb_bucket *b = &gb->bucket[gb->queue[gb->q_head]];
    strata_status st = strata_comm_request_wait(gb->cfg.comm, &b->req);
    if (st != STRATA_OK)
        return st;
    gb->q_head = (gb->q_head + 1) % gb->n_buckets;
    gb->q_count--;
    b->in_flight = false;
    if (!b->receives)
        return STRATA_OK;
    const float *src = gb->ring + b->off;
    for (int m = 0; m < b->count && st == STRATA_OK; m++) {
        const strata_gb_item *it = &gb->member[b->first + m];
        memcpy(it->grad, src, it->n * sizeof(float));
        src += it->n;
        if (it->average)
            st = strata_backend_scale(gb->cfg.be, NULL, it->n, it->grad, gb->cfg.scale);
    }
    return st;
}

/* A free span of `need` floats in the ring, or false (the ring is full). */
static bool ring_alloc(const strata_grad_buckets *gb, size_t need, size_t *off)
{
    if (gb->q_count == 0) {
        *off = 0;
        return need <= gb->ring_floats;
    }
    const gb_bucket *head = &gb->bucket[gb->queue[gb->q_head]];
    const gb_bucket *tail =
        &gb->bucket[gb->queue[(gb->q_head + gb->q_count - 1) % gb->n_buckets]];
    const size_t first = head->off, end = tail->off + 2 * tail->n;
    if (first < end) { /* live [first, end) */
        if (end + need <= gb->ring_floats) {
            *off = end;
            return true;
        }
        if (need <= first) {
            *off = 0;
            return true;
        }
        return false;
    }
    /* wrapped: live [first, ring end) and [0, end) */
    if (end + need <= first) {
        *off = end;
        return true;
    }
    return false;
}

strata_status strata_gb_post_layer(strata_grad_buckets *gb, int layer)
{
    if (!gb || layer < 0)
        return strata_error(STRATA_ERR_INVALID_ARG, "grad buckets: bad arguments");
    if (layer >= gb->n_layers)
        return STRATA_OK;
    strata_status st = STRATA_OK;
    for (int bi = gb->layer_start[layer]; bi < gb->layer_start[layer + 1] && st == STRATA_OK;
         bi++) {
        gb_bucket *b = &gb->bucket[bi];
        /* Posted again before the step (a second backward of this layer):
         * the earlier reduction completes first, as a blocking one would. */
        while (b->in_flight && st == STRATA_OK)
            st = finish_oldest(gb);
        size_t off = 0;
        bool waited = false;
        while (st == STRATA_OK && !ring_alloc(gb, 2 * b->n, &off)) {
            waited = true;
            st = finish_oldest(gb);
        }
        if (st != STRATA_OK)
            break;
        gb->stats.ring_waits += waited;
        b->off = off;
        float *buf = gb->ring + off;
        for (int m = 0; m < b->count; m++)
            if (!gb->member[b->first + m].grad) {
                st = strata_error(STRATA_ERR_STATE, "grad buckets: layer %d posted with a "
                                  "gradient not lent (strata_gb_set_grad)", layer);
                break;
            }
        if (st != STRATA_OK)
            break;
        for (int m = 0; m < b->count; m++) {
            const strata_gb_item *it = &gb->member[b->first + m];
            memcpy(buf, it->grad, it->n * sizeof(float));
            buf += it->n;
        }
        b->req = (strata_comm_request){.buf = gb->ring + off, .scratch = gb->ring + off + b->n,
                                       .n = b->n, .owners = b->owners,
                                       .n_owners = b->n_owners};
        gb->queue[(gb->q_head + gb->q_count) % gb->n_buckets] = bi;
        gb->q_count++;
        b->in_flight = true;
        st = strata_comm_ireduce_start(gb->cfg.comm, &b->req);
        if (st != STRATA_OK) { /* never started: nothing to wait for */
            gb->q_count--;
            b->in_flight = false;
            break;
        }
        gb->stats.posted++;
        gb->stats.posted_bytes += b->n * sizeof(float);
    }
    if (st == STRATA_OK)
        st = strata_comm_progress(gb->cfg.comm);
    return st;
}

strata_status strata_gb_finish_all(strata_grad_buckets *gb, double *waited_s)
{
    if (!gb)
        return strata_error(STRATA_ERR_INVALID_ARG, "grad buckets: NULL");
    const double t0 = strata_now_seconds();
    strata_status st = STRATA_OK;
    while (gb->q_count > 0 && st == STRATA_OK)
        st = finish_oldest(gb);
    if (waited_s)
        *waited_s = strata_now_seconds() - t0;
    return st;
}

strata_status strata_gb_set_grad(strata_grad_buckets *gb, int item, float *grad)
{
    if (!gb || item < 0 || item >= gb->n_items)
        return strata_error(STRATA_ERR_INVALID_ARG, "grad buckets: bad item %d", item);
    strata_gb_item *it = &gb->member[gb->member_of[item]];
    if (it->receives)
        return strata_error(STRATA_ERR_INVALID_ARG, "grad buckets: item %d receives its sum: "
                            "its gradient stays where create put it", item);
    it->grad = grad;
    return STRATA_OK;
}

int strata_gb_in_flight(const strata_grad_buckets *gb)
{
    return gb ? gb->q_count : 0;
}

void strata_gb_stats_get(const strata_grad_buckets *gb, strata_gb_stats *out)
{
    if (gb && out)
        *out = gb->stats;
}

void strata_gb_destroy(strata_grad_buckets *gb)
{
    if (!gb)
        return;
    for (int k = 0; k < gb->q_count; k++)
        strata_comm_request_abandon(gb->cfg.comm,
                                    &gb->bucket[gb->queue[(gb->q_head + k) % gb->n_buckets]].req);
    free(gb->ring);
    free(gb->queue);
    free(gb->member_of);
    free(gb->owners_pool);
    free(gb->layer_start);
    free(gb->bucket);
    free(gb->member);
    free(gb);
}

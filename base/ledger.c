/* base/ledger.c — the memory ledger's counters (base/ledger.h). */
#include "base/ledger.h"

#include <string.h>

void strata_ledger_init(strata_ledger *l)
{
    if (!l)
        return;
    for (int t = 0; t < STRATA_LEDGER_TIERS; t++) {
        for (int k = 0; k < STRATA_LEDGER_KINDS; k++) {
            atomic_init(&l->now[t][k], 0);
            atomic_init(&l->peak[t][k], 0);
        }
        atomic_init(&l->tier_now[t], 0);
        atomic_init(&l->tier_peak[t], 0);
    }
    atomic_init(&l->total_now, 0);
    atomic_init(&l->total_peak, 0);
}

static void raise_peak(_Atomic int64_t *peak, int64_t now)
{
    int64_t p = atomic_load_explicit(peak, memory_order_relaxed);
    while (now > p &&
           !atomic_compare_exchange_weak_explicit(peak, &p, now, memory_order_relaxed,
                                                  memory_order_relaxed))
        ;
}

void strata_ledger_add(strata_ledger *l, int tier, int kind, int64_t delta)
{
    if (!l || tier < 0 || tier >= STRATA_LEDGER_TIERS || kind < 0 ||
        kind >= STRATA_LEDGER_KINDS || delta == 0)
        return;
    int64_t c = atomic_fetch_add_explicit(&l->now[tier][kind], delta, memory_order_relaxed) + delta;
    int64_t t = atomic_fetch_add_explicit(&l->tier_now[tier], delta, memory_order_relaxed) + delta;
    int64_t a = atomic_fetch_add_explicit(&l->total_now, delta, memory_order_relaxed) + delta;
    if (delta > 0) {
        raise_peak(&l->peak[tier][kind], c);
        raise_peak(&l->tier_peak[tier], t);
        raise_peak(&l->total_peak, a);
    }
}

static uint64_t nonneg(const _Atomic int64_t *v)
{
    int64_t x = atomic_load_explicit(v, memory_order_relaxed);
    return x > 0 ? (uint64_t)x : 0;
}

void strata_ledger_read(const strata_ledger *l, strata_memory_ledger *out)
{
    if (!out)
        return;
    memset(out, 0, sizeof *out);
    if (!l)
        return;
    for (int t = 0; t < STRATA_LEDGER_TIERS; t++) {
        for (int k = 0; k < STRATA_LEDGER_KINDS; k++) {
            out->bytes[t][k] = nonneg(&l->now[t][k]);
            out->peak[t][k] = nonneg(&l->peak[t][k]);
        }
        out->tier_bytes[t] = nonneg(&l->tier_now[t]);
        out->tier_peak[t] = nonneg(&l->tier_peak[t]);
    }
    out->total_bytes = nonneg(&l->total_now);
    out->total_peak = nonneg(&l->total_peak);
}

void strata_ledger_hold_add(strata_ledger_hold *h, strata_ledger *l, int tier, int kind,
                            size_t bytes)
{
    if (!h || !l || bytes == 0 || tier < 0 || tier >= STRATA_LEDGER_TIERS || kind < 0 ||
        kind >= STRATA_LEDGER_KINDS)
        return;
    if (h->l && h->l != l)
        return; /* a hold charges one ledger */
    int i = 0;
    while (i < h->n && (h->e[i].tier != tier || h->e[i].kind != kind))
        i++;
    if (i == h->n) {
        if (h->n == STRATA_LEDGER_HOLD_MAX)
            return;
        h->e[i].tier = (unsigned char)tier;
        h->e[i].kind = (unsigned char)kind;
        h->e[i].bytes = 0;
        h->n++;
    }
    h->l = l;
    h->e[i].bytes += bytes;
    strata_ledger_add(l, tier, kind, (int64_t)bytes);
}

void strata_ledger_hold_release(strata_ledger_hold *h)
{
    if (!h)
        return;
    for (int i = 0; i < h->n; i++)
        strata_ledger_add(h->l, h->e[i].tier, h->e[i].kind, -(int64_t)h->e[i].bytes);
    h->n = 0;
    h->l = NULL;
}

const char *strata_ledger_tier_name(int tier)
{
    static const char *const names[STRATA_LEDGER_TIERS] = {"device", "host-pinned", "host",
                                                           "managed", "nvme"};
    return tier >= 0 && tier < STRATA_LEDGER_TIERS ? names[tier] : "?";
}

const char *strata_ledger_kind_name(int kind)
{
    static const char *const names[STRATA_LEDGER_KINDS] = {
        "weights", "master_weights", "gradients", "grad_buckets", "factors",   "roots",
        "moments", "grafting",       "staging",   "comm",         "workspace", "activations"};
    return kind >= 0 && kind < STRATA_LEDGER_KINDS ? names[kind] : "?";
}

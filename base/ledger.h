/* base/ledger.h — the memory ledger's counters (internal).
 *
 * One strata_ledger per runtime counts the bytes its components hold, by
 * tier and kind (strata/types.h), now and at their peaks. Every allocation
 * site that keeps memory past one call charges it here with its tier and
 * kind and releases it when it frees, so the ledger is the real allocations
 * (sizes as allocated: rounding included), not an estimate.
 *
 * Counters are C11 atomics (relaxed: they order nothing); peaks are raised
 * by compare-exchange, so charges from several threads (the training
 * thread, refresh workers) are safe. A NULL ledger is a no-op everywhere, so
 * a component used without a runtime (the one-tensor API, tests) needs no
 * ledger. No global state: two runtimes in one process keep two ledgers.
 */
#ifndef STRATA_BASE_LEDGER_H
#define STRATA_BASE_LEDGER_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "strata/types.h"

typedef struct strata_ledger {
    _Atomic int64_t now[STRATA_LEDGER_TIERS][STRATA_LEDGER_KINDS];
    _Atomic int64_t peak[STRATA_LEDGER_TIERS][STRATA_LEDGER_KINDS];
    _Atomic int64_t tier_now[STRATA_LEDGER_TIERS], tier_peak[STRATA_LEDGER_TIERS];
    _Atomic int64_t total_now, total_peak;
} strata_ledger;

/* Zero every counter. */
void strata_ledger_init(strata_ledger *l);

/* Add `delta` bytes (negative: a release) to cell (tier, kind), its tier and
 * the total, raising the peaks. l NULL, or tier/kind out of range: no-op. */
void strata_ledger_add(strata_ledger *l, int tier, int kind, int64_t delta);

/* A snapshot of every counter (negative values, which a mismatched release
 * would make, read as 0). */
void strata_ledger_read(const strata_ledger *l, strata_memory_ledger *out);

/* What one object charged, released together when it is destroyed: the
 * object embeds a hold (zeroed with the object), charges through it, and
 * calls strata_ledger_hold_release in its destroy. Entries of the same
 * tier and kind merge; at most STRATA_LEDGER_HOLD_MAX distinct cells. */
#define STRATA_LEDGER_HOLD_MAX 12
typedef struct strata_ledger_hold {
    strata_ledger *l;
    int n;
    struct {
        unsigned char tier, kind;
        size_t bytes;
    } e[STRATA_LEDGER_HOLD_MAX];
} strata_ledger_hold;

/* Charge `bytes` to (tier, kind) of `l` and remember it in `h` (h's ledger
 * becomes l; a hold charges one ledger). h NULL or l NULL or bytes 0: no-op. */
void strata_ledger_hold_add(strata_ledger_hold *h, strata_ledger *l, int tier, int kind,
                            size_t bytes);

/* Release everything `h` charged and empty it (NULL: no-op). */
void strata_ledger_hold_release(strata_ledger_hold *h);

#endif

/* tiers/tiers.h — memory tiers: bytes with a budget (DESIGN.md "Backends and tiers").
 *
 * device  the backend's memory (strata/backend.h counts it);
 * host    page-aligned host memory: pinned (the backend's HOST_PINNED kind,
 *         cudaHostAlloc on the CUDA backend) when made with
 *         strata_tier_host_create_pinned, plain page-aligned memory else;
 * nvme    extents of one file in a directory, O_DIRECT, driven by io_uring
 *         (liburing) with queue depth >= 8: reads into page-aligned host
 *         memory go straight there, everything else through registered
 *         staging buffers.
 *
 * Every tier counts bytes in use and the peak, and refuses an allocation
 * past its budget with STRATA_ERR_NOMEM (so the caller can fall back to the
 * next tier). The nvme tier's reads and writes are asynchronous: a
 * caller-visible strata_io request is submitted, the transfer proceeds on
 * the tier's completion thread (the CPU backend's "shadow stream"), and
 * strata_tier_io_wait() returns its status. An I/O error (-errno from a
 * completion, a short transfer, a full disk) surfaces as STRATA_ERR_IO with
 * the errno text; the destination of a failed read is unspecified, the
 * source of a failed write unchanged.
 */
#ifndef STRATA_TIERS_H
#define STRATA_TIERS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/log.h"
#include "strata/backend.h"
#include "strata/types.h"

#ifdef __cplusplus
extern "C" {
#endif


typedef struct strata_tier strata_tier;

/* Host tier with a byte budget (0 = unlimited). Errors: STRATA_ERR_NOMEM. */
strata_status strata_tier_host_create(size_t budget, strata_tier **out);

/* Host tier whose memory is `be`'s STRATA_MEM_HOST_PINNED kind (review C3:
 * the engine's slots, staging and scratch on the CUDA backend, so snapshots
 * and stages are true asynchronous copies), page-rounded and charged to
 * `budget` as the plain host tier (the backend's pinned accounting sees one
 * page more per block: the tier aligns inside it). `be` must outlive
 * the tier. Errors: STRATA_ERR_INVALID_ARG (be or out NULL), STRATA_ERR_NOMEM
 * (also at allocation: the budget, or the backend's pinned memory). */
strata_status strata_tier_host_create_pinned(size_t budget, strata_backend *be,
                                             strata_tier **out);

typedef struct strata_nvme_config {
    const char *dir;       /* directory for the tier's file (created with its parents
                              if missing) */
    size_t budget;         /* bytes of file space; 0 = unlimited */
    int queue_depth;       /* chunks in flight, staging buffers; >= 8, default 16 */
                           /* the staging (queue_depth * chunk_bytes) is registered with
                              io_uring when RLIMIT_MEMLOCK allows, else used unregistered
                              (one warning names the limit and the bytes needed) */
    size_t chunk_bytes;    /* largest single transfer (chunk), multiple of 4096; default 1 MiB */
    bool direct;           /* O_DIRECT; default true (falls back with a warning if refused) */
    const strata_logger *log; /* where warnings go (must outlive the tier); NULL = stderr */
} strata_nvme_config;

void strata_nvme_config_default(strata_nvme_config *c);

/* Create the nvme tier: a file in c->dir that has no name (O_TMPFILE; where
 * the filesystem lacks it, a file unlinked right after its creation), so it
 * disappears with its last descriptor however the process ends, an io_uring of queue_depth entries, queue_depth registered
 * staging buffers, and the completion thread. Errors: STRATA_ERR_IO (the
 * directory is missing/read-only, or io_uring is unavailable: the message
 * says which), STRATA_ERR_INVALID_ARG, STRATA_ERR_NOMEM. */
strata_status strata_tier_nvme_create(const strata_nvme_config *c, strata_tier **out);

/* Destroy a tier (NULL is a no-op). Waits for in-flight nvme requests. */
void strata_tier_destroy(strata_tier *t);

strata_tier_kind strata_tier_kind_of(const strata_tier *t);

/* The memory ledger's tier (strata/types.h) of this tier's bytes:
 * STRATA_LEDGER_NVME, STRATA_LEDGER_HOST_PINNED (strata_tier_host_create_pinned)
 * or STRATA_LEDGER_HOST. NULL: STRATA_LEDGER_HOST. */
int strata_tier_ledger_tier(const strata_tier *t);

/* Bytes in use now and peak since creation. Thread-safe. */
void strata_tier_bytes(const strata_tier *t, size_t *in_use, size_t *peak);

/* Host tier: allocate `bytes` (> 0) page-aligned, zeroed. nvme tier: reserve
 * `bytes` (rounded up to 4096) of file space (preallocated on disk with
 * fallocate when the file grows, so later writes never extend it) and return
 * its offset cast to a handle: `*out` is an opaque token for
 * strata_tier_read/write, not memory. Errors: STRATA_ERR_NOMEM (budget,
 * allocation, or the disk is full: the message has the errno text),
 * STRATA_ERR_IO (fallocate failed otherwise), STRATA_ERR_INVALID_ARG. */
strata_status strata_tier_alloc(strata_tier *t, size_t bytes, void **out);

/* Bytes that strata_tier_alloc(t, bytes) charges against t's budget, for
 * planning placement against a budget: the host tier allocates whole pages of
 * the system's page size (sysconf(_SC_PAGESIZE): 4 KiB on x86-64; 4, 16 or
 * 64 KiB on arm64, 64 KiB on many Grace kernels), the nvme tier 4096-byte
 * blocks. t NULL or bytes 0: 0. Thread-safe. */
size_t strata_tier_charge_size(const strata_tier *t, size_t bytes);

/* Release what strata_tier_alloc returned (same `bytes`). NULL is a no-op. */
void strata_tier_free(strata_tier *t, void *p, size_t bytes);

/* An asynchronous nvme transfer; the caller owns the struct until wait returns. */
typedef struct strata_io {
    /* private */
    _Atomic int pending_;   /* chunks not yet completed */
    _Atomic int error_;     /* first -errno or short-transfer marker, 0 = none */
    int op_;
    uint8_t *host_;
    uint64_t offset_;
    size_t bytes_;
    size_t next_;           /* bytes submitted so far */
    struct strata_io *link_; /* next request queued for the completion thread */
} strata_io;

/* Start writing `bytes` from host memory `src` to nvme handle `h` at byte
 * `offset` (a multiple of 4096) within it, or reading into `dst`.
 * write_async (and read_async into unaligned memory) returns once every
 * chunk is submitted, blocking while queue_depth chunks are in flight;
 * write_async has then copied `src` into staging, so the caller may change
 * or free it at once. read_async into 4 KiB-aligned memory queues the
 * request for the completion thread and returns at once; the kernel writes
 * straight into `dst`. Either way `dst` must stay valid and untouched until
 * strata_tier_io_wait returns. Thread-safe.
 * Errors: STRATA_ERR_INVALID_ARG (not an nvme tier; `h` not a live extent of
 * this tier; [offset, offset + bytes) not inside the `bytes` that
 * strata_tier_alloc reserved for `h`; offset not a multiple of 4096),
 * STRATA_ERR_IO (submission failed: then nothing is in flight for this
 * request; for a queued read a later failure to submit surfaces from
 * strata_tier_io_wait instead). */
strata_status strata_tier_write_async(strata_tier *t, void *h, size_t offset,
                                                 const void *src, size_t bytes, strata_io *io);
strata_status strata_tier_read_async(strata_tier *t, void *h, size_t offset, void *dst,
                                                size_t bytes, strata_io *io);

/* Wait for a request (bounded by timeout_s, seconds). Errors: STRATA_ERR_IO
 * (with the errno text), STRATA_ERR_TIMEOUT. After a TIMEOUT the request is
 * still in flight: `io` (and a read's `dst`) stay in use by the tier until a
 * later strata_tier_io_wait returns STRATA_OK or STRATA_ERR_IO; do not reuse
 * or free them before. */
strata_status strata_tier_io_wait(strata_tier *t, strata_io *io, double timeout_s);

/* Synchronous helpers: submit and wait until the request has landed (a wait
 * past 600 s prints a warning and goes on: the kernel's block layer fails an
 * I/O it cannot finish, and returning earlier would leave the kernel writing
 * into the caller's memory). Reads into 4 KiB-aligned `dst` skip the staging
 * copy (the fast path for large reads: pass page-aligned memory). */
strata_status strata_tier_write(strata_tier *t, void *h, size_t offset, const void *src,
                                           size_t bytes);
strata_status strata_tier_read(strata_tier *t, void *h, size_t offset, void *dst,
                                          size_t bytes);

typedef struct strata_tier_io_stats {
    uint64_t bytes_written, bytes_read;
    uint64_t requests, errors;
} strata_tier_io_stats;
void strata_tier_io_stats_get(const strata_tier *t, strata_tier_io_stats *out);

/* Testing: make the next `n` nvme chunk completions fail with -errno_value
 * (as a disk would), to exercise the error paths. */
void strata_tier_inject_io_errors(strata_tier *t, int n, int errno_value);

#ifdef __cplusplus
}
#endif
#endif /* STRATA_TIERS_H */

/* NVMe tier: one O_DIRECT file, io_uring with registered staging buffers.
 *
 * Objects: the file (unnamed from its creation, O_TMPFILE, so that no exit,
 * not even SIGKILL, leaves it behind; grown with fallocate at alloc so no
 * transfer extends it), an extent allocator over it (first-fit free list in
 * 4 KiB units), `qd` slots, each a staging buffer registered with the ring
 * plus one chunk descriptor, a queue of requests, and the completion thread
 * ("shadow stream").
 *
 * A request is cut into chunks of at most chunk_bytes; each chunk holds a
 * slot while in flight, so at most qd chunks are. A read chunk whose caller
 * memory is 4 KiB-aligned and a whole number of 4 KiB blocks is borrowed: a
 * plain READ straight into the caller's memory. Other chunks are staged:
 * WRITE_FIXED after copying the data in (zero-padded to 4 KiB), or READ_FIXED
 * with the data copied out on completion. Writes are always staged:
 * write_async promises that its source was copied by the time it returns,
 * and borrowed writes (tried) measured ~20% slower than staged ones on the
 * virtio disk this was tuned on, where fio's registered buffers also win.
 * Where RLIMIT_MEMLOCK cannot hold the staging buffers (an unprivileged user
 * at the usual 8 MiB), they stay unregistered and chunks go as plain
 * READ/WRITE from the same buffers; one warning names the limit and the
 * bytes needed.
 *
 * Who submits: a read into aligned memory is appended to the queue and the
 * completion thread drives it: it starts chunks in every free slot with one
 * io_uring_enter, waits for CQEs, and being the submitter it runs the
 * kernel's completion work itself (one wake-up per batch, as fio's single
 * thread). The caller kicks the thread with a NOP only when it may be asleep
 * with nothing in flight. Any other request is cut, copied and submitted by
 * the caller, one io_uring_enter per chunk, blocking while no slot is free.
 *
 * The completion thread reaps all CQEs present, settles them (injected
 * errors, the first error, copy-out, statistics), then under one buf_mu
 * returns their slots and decrements each request's pending count; a
 * request is not touched after its count reaches 0 and buf_mu is dropped.
 * If io_uring_enter fails (other than EINTR/EAGAIN/EBUSY, retried), the
 * chunks it did not take fail with its errno and their SQEs become NOPs; a
 * caller-submitted request then waits for its chunks in flight, so nothing
 * of it is in flight when submit returns; the thread fails what is left of
 * its queue. Destroy waits until the queue is empty and every slot is back,
 * then stops the thread with a NOP.
 *
 * Lock order: submit_mu -> buf_mu. submit_mu serializes SQ access (the SQ is
 * single-producer; every holder flushes what it queued before letting go)
 * and is never held while waiting for a slot, because the completion thread
 * takes it to drive the queue. buf_mu guards the free-slot stack, the request
 * queue, the idle flag, requests' pending counts going to 0, and both
 * condition variables. The CQ has a single consumer (the completion thread)
 * and needs no lock. ext_mu (extents, file growth) is taken alone.
 */
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "tier_internal.h"
#include "base/clock.h"

#define NVME_ALIGN 4096u
#define OP_READ 0
#define OP_WRITE 1

typedef struct extent {
    uint64_t off, len;
} extent;

typedef struct chunk {
    strata_io *io;
    uint8_t *host; /* this chunk's caller memory */
    size_t copy;   /* caller bytes in the chunk (the rest of len is padding) */
    unsigned len;  /* bytes transferred (padded to 4 KiB) */
    bool staged;   /* through the slot's staging buffer, else borrowed */
    int res;       /* CQE result, set by the completion thread */
} chunk;

typedef struct nvme {
    const strata_logger *log; /* the embedder's sink (NULL: stderr) */
    int fd;
    char path[4096];
    struct io_uring ring;
    bool ring_ok;
    bool registered; /* the staging buffers are registered (else plain READ/WRITE) */
    int qd;
    size_t chunk_bytes;
    uint8_t *staging; /* qd * chunk_bytes */
    chunk *chunks;
    int *free_bufs, n_free;  /* free slots (buf_mu) */
    int *queued, n_queued;   /* slots whose SQE is not yet submitted (submit_mu) */
    int *reaped;             /* completion thread's scratch, qd entries */
    strata_io *rq_head, *rq_tail; /* requests the completion thread drives (buf_mu) */
    bool idle;               /* the thread may sleep with nothing to do: kick it (buf_mu) */
    bool thread_dead;        /* the thread left on a broken ring (buf_mu) */
    pthread_mutex_t submit_mu, buf_mu, ext_mu;
    pthread_cond_t buf_cv, done_cv;
    pthread_t thread;
    bool thread_ok;
    extent *free_ext;
    int n_free_ext, cap_free_ext;
    extent *live;            /* allocated extents by offset; len = the bytes asked for (ext_mu) */
    int n_live, cap_live;
    uint64_t file_end;
    _Atomic int inject_n;
    _Atomic int inject_errno;
    _Atomic uint64_t bytes_written, bytes_read, requests, errors;
} nvme;

void strata_nvme_config_default(strata_nvme_config *c)
{
    memset(c, 0, sizeof *c);
    c->dir = ".";
    c->queue_depth = 16;
    c->chunk_bytes = 1u << 20;
    c->direct = true;
}

static uint64_t round_up(uint64_t x)
{
    return (x + NVME_ALIGN - 1) / NVME_ALIGN * NVME_ALIGN;
}

/* ---- extents */

/* Index of the live extent at file offset `off`, or where it would go. */
static int live_find(const nvme *n, uint64_t off)
{
    int lo = 0, hi = n->n_live;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (n->live[mid].off < off)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Record the live extent (off, bytes). Caller holds ext_mu. Returns 0 or -1 (no memory). */
static int live_add(nvme *n, uint64_t off, uint64_t bytes)
{
    if (n->n_live == n->cap_live) {
        int cap = n->cap_live ? 2 * n->cap_live : 64;
        extent *nl = realloc(n->live, (size_t)cap * sizeof *nl);
        if (!nl)
            return -1;
        n->live = nl;
        n->cap_live = cap;
    }
    int i = live_find(n, off);
    memmove(n->live + i + 1, n->live + i, (size_t)(n->n_live - i) * sizeof *n->live);
    n->live[i] = (extent){off, bytes};
    n->n_live++;
    return 0;
}

/* Check that [offset, offset + bytes) lies inside handle h's extent. */
static strata_status live_check(nvme *n, void *h, size_t offset, size_t bytes)
{
    const uint64_t off = (uint64_t)(uintptr_t)h - NVME_ALIGN;
    pthread_mutex_lock(&n->ext_mu);
    int i = live_find(n, off);
    const bool found = i < n->n_live && n->live[i].off == off;
    const uint64_t len = found ? n->live[i].len : 0;
    pthread_mutex_unlock(&n->ext_mu);
    if (!found)
        return strata_error(STRATA_ERR_INVALID_ARG,
                            "tier io: %p is not an extent of this nvme tier (freed, or never "
                            "allocated)", h);
    if (offset > len || bytes > len - offset)
        return strata_error(STRATA_ERR_INVALID_ARG,
                            "tier io: %zu bytes at offset %zu pass the end of the extent "
                            "(%llu bytes)", bytes, offset, (unsigned long long)len);
    return STRATA_OK;
}

static void nvme_free(strata_tier *t, void *h, size_t bytes);

static strata_status nvme_alloc(strata_tier *t, size_t bytes, void **out)
{
    nvme *n = t->impl;
    uint64_t len = round_up(bytes);
    strata_status st = strata_tier_charge(t, len);
    if (st != STRATA_OK)
        return st;
    pthread_mutex_lock(&n->ext_mu);
    uint64_t off = UINT64_MAX;
    for (int i = 0; i < n->n_free_ext; i++)
        if (n->free_ext[i].len >= len) {
            off = n->free_ext[i].off;
            n->free_ext[i].off += len;
            n->free_ext[i].len -= len;
            if (n->free_ext[i].len == 0)
                n->free_ext[i] = n->free_ext[--n->n_free_ext];
            break;
        }
    if (off == UINT64_MAX) {
        /* Grow the file now, outside any transfer: an O_DIRECT write past
         * EOF takes the inode lock exclusively and cannot be issued without
         * blocking, so io_uring hands it to a worker thread and such writes
         * run one at a time. (fio lays its file out the same way before it
         * starts its clock.) Filesystems without fallocate skip this. */
        int rc = fallocate(n->fd, 0, (off_t)n->file_end, (off_t)len);
        if (rc != 0 && errno != EOPNOTSUPP) {
            int err = errno;
            pthread_mutex_unlock(&n->ext_mu);
            strata_tier_uncharge(t, len);
            return strata_error(err == ENOSPC ? STRATA_ERR_NOMEM : STRATA_ERR_IO,
                                "nvme tier: cannot reserve %llu bytes in %s: %s",
                                (unsigned long long)len, n->path, strerror(err));
        }
        off = n->file_end;
        n->file_end += len;
    }
    if (live_add(n, off, bytes) != 0) {
        /* Give the space back: free-list it (the file keeps its size). */
        pthread_mutex_unlock(&n->ext_mu);
        nvme_free(t, (void *)(uintptr_t)(off + NVME_ALIGN), bytes);
        return strata_error(STRATA_ERR_NOMEM, "nvme tier: out of memory");
    }
    pthread_mutex_unlock(&n->ext_mu);
    *out = (void *)(uintptr_t)(off + NVME_ALIGN); /* never NULL */
    return STRATA_OK;
}

static void nvme_free(strata_tier *t, void *h, size_t bytes)
{
    nvme *n = t->impl;
    uint64_t len = round_up(bytes), off = (uint64_t)(uintptr_t)h - NVME_ALIGN;
    pthread_mutex_lock(&n->ext_mu);
    int i = live_find(n, off);
    if (i < n->n_live && n->live[i].off == off) { /* absent only when live_add failed */
        memmove(n->live + i, n->live + i + 1, (size_t)(n->n_live - i - 1) * sizeof *n->live);
        n->n_live--;
    }
    if (n->n_free_ext == n->cap_free_ext) {
        int cap = n->cap_free_ext ? 2 * n->cap_free_ext : 64;
        extent *ne = realloc(n->free_ext, (size_t)cap * sizeof *ne);
        if (!ne) { /* keep the space leaked rather than corrupt the list */
            pthread_mutex_unlock(&n->ext_mu);
            strata_tier_uncharge(t, len);
            return;
        }
        n->free_ext = ne;
        n->cap_free_ext = cap;
    }
    n->free_ext[n->n_free_ext++] = (extent){off, len};
    pthread_mutex_unlock(&n->ext_mu);
    strata_tier_uncharge(t, len);
}

/* ---- chunks */

static const char kick_marker; /* user_data of the NOP that wakes the thread */

/* Hand the queued SQEs to the kernel. EINTR, EAGAIN and EBUSY are transient
 * (the CQ has room for every slot and both NOPs), so retry them for a while;
 * anything else is returned as -errno. Caller holds submit_mu. */
static int flush(nvme *n)
{
    int retries = 0;
    while (io_uring_sq_ready(&n->ring) > 0) {
        int rc = io_uring_submit(&n->ring);
        if (rc > 0) { /* the kernel consumes SQEs in order */
            int used = rc < n->n_queued ? rc : n->n_queued;
            n->n_queued -= used;
            memmove(n->queued, n->queued + used, (size_t)n->n_queued * sizeof *n->queued);
            retries = 0;
            continue;
        }
        if ((rc == 0 || rc == -EINTR || rc == -EAGAIN || rc == -EBUSY) && retries++ < 1000) {
            nanosleep(&(struct timespec){0, 100000}, NULL);
            continue;
        }
        return rc < 0 ? rc : -EIO;
    }
    return 0;
}

/* Describe slot `buf` as `len` bytes of `io` at byte `at`, copying a staged
 * write in. The slot is the caller's: no lock needed. */
static void chunk_fill(nvme *n, int buf, strata_io *io, size_t at, size_t len)
{
    chunk *c = &n->chunks[buf];
    c->io = io;
    c->host = io->host_ + at;
    c->copy = len;
    c->len = (unsigned)round_up(len);
    c->staged = !(io->op_ == OP_READ && (uintptr_t)c->host % NVME_ALIGN == 0 &&
                  len % NVME_ALIGN == 0);
    if (c->staged && io->op_ == OP_WRITE) {
        uint8_t *stage = n->staging + (size_t)buf * n->chunk_bytes;
        memcpy(stage, c->host, len);
        if (c->len > len)
            memset(stage + len, 0, c->len - len);
    }
}

/* Queue the SQE of filled slot `buf`. Caller holds submit_mu. */
static void chunk_queue(nvme *n, int buf)
{
    chunk *c = &n->chunks[buf];
    uint8_t *stage = n->staging + (size_t)buf * n->chunk_bytes;
    uint64_t off = c->io->offset_ + (uint64_t)(c->host - c->io->host_);
    /* Cannot fail: the SQ has an entry for every slot plus both NOPs, and
     * every holder of submit_mu flushes before it lets go. */
    struct io_uring_sqe *sqe = io_uring_get_sqe(&n->ring);
    if (!c->staged)
        io_uring_prep_read(sqe, n->fd, c->host, c->len, off);
    else if (!n->registered && c->io->op_ == OP_WRITE) /* RLIMIT_MEMLOCK too small */
        io_uring_prep_write(sqe, n->fd, stage, c->len, off);
    else if (!n->registered)
        io_uring_prep_read(sqe, n->fd, stage, c->len, off);
    else if (c->io->op_ == OP_WRITE)
        io_uring_prep_write_fixed(sqe, n->fd, stage, c->len, off, buf);
    else
        io_uring_prep_read_fixed(sqe, n->fd, stage, c->len, off, buf);
    io_uring_sqe_set_data(sqe, c);
    TIER_HANDOFF_RELEASE(c);
    n->queued[n->n_queued++] = buf;
}

/* The queued chunks did not reach the kernel (flush failed with `err`):
 * fail them and give their slots back. Their SQEs stay published in the SQ,
 * so turn them into NOPs the reaper ignores, in case a later io_uring_enter
 * does take them. Caller holds submit_mu. */
static void chunks_unqueue(nvme *n, int err)
{
    struct io_uring_sq *sq = &n->ring.sq;
    for (unsigned i = io_uring_smp_load_acquire(sq->khead); i != sq->sqe_tail; i++) {
        /* liburing fills sq->array with the identity (or has none at all
         * with IORING_SETUP_NO_SQARRAY): SQE i sits at sqes[i & mask]. */
        struct io_uring_sqe *sqe = &sq->sqes[i & sq->ring_mask];
        io_uring_prep_nop(sqe);
        io_uring_sqe_set_data(sqe, (void *)&kick_marker);
    }
    pthread_mutex_lock(&n->buf_mu);
    for (int i = 0; i < n->n_queued; i++) {
        chunk *c = &n->chunks[n->queued[i]];
        int zero = 0;
        atomic_compare_exchange_strong(&c->io->error_, &zero, err);
        atomic_fetch_add(&n->errors, 1);
        if (atomic_fetch_sub(&c->io->pending_, 1) == 1)
            pthread_cond_broadcast(&n->done_cv);
        c->io = NULL;
        n->free_bufs[n->n_free++] = n->queued[i];
    }
    n->n_queued = 0;
    pthread_cond_broadcast(&n->buf_cv);
    pthread_mutex_unlock(&n->buf_mu);
}

/* ---- completion thread */

/* Settle one reaped chunk: injected errors, the first error, read data out of
 * staging, statistics. The chunk's slot is returned by the caller. */
static void chunk_finish(nvme *n, chunk *c, int res)
{
    int inj = atomic_load(&n->inject_n);
    while (inj > 0 && !atomic_compare_exchange_weak(&n->inject_n, &inj, inj - 1))
        ;
    if (inj > 0)
        res = -atomic_load(&n->inject_errno);
    strata_io *io = c->io;
    if (res < 0 || (unsigned)res != c->len) {
        int err = res < 0 ? -res : EIO; /* a short transfer is an I/O error here */
        int zero = 0;
        atomic_compare_exchange_strong(&io->error_, &zero, err);
        atomic_fetch_add(&n->errors, 1);
    } else if (io->op_ == OP_READ) {
        if (c->staged)
            memcpy(c->host, n->staging + (size_t)(c - n->chunks) * n->chunk_bytes, c->copy);
        atomic_fetch_add(&n->bytes_read, c->copy);
    } else {
        atomic_fetch_add(&n->bytes_written, c->len);
    }
}

/* io_uring_enter failed with `err`: fail the chunks of queued requests that
 * have not started, rather than leave them to wait for a ring that may never
 * take them. */
static void requests_fail(nvme *n, int err)
{
    pthread_mutex_lock(&n->buf_mu);
    for (strata_io *io = n->rq_head, *next; io; io = next) {
        next = io->link_; /* io may be released once its count reaches 0 */
        int left = (int)((io->bytes_ - io->next_ + n->chunk_bytes - 1) / n->chunk_bytes);
        int zero = 0;
        atomic_compare_exchange_strong(&io->error_, &zero, err);
        atomic_fetch_add(&n->errors, 1);
        if (atomic_fetch_sub(&io->pending_, left) == left)
            pthread_cond_broadcast(&n->done_cv);
    }
    n->rq_head = n->rq_tail = NULL;
    pthread_cond_broadcast(&n->buf_cv);
    pthread_mutex_unlock(&n->buf_mu);
}

/* Start chunks of the queued requests in the free slots, one io_uring_enter
 * for all of them. The thread is then their submitter, so the kernel's
 * completion work runs in the thread that is waiting for it. */
static void drive(nvme *n)
{
    pthread_mutex_lock(&n->submit_mu);
    for (;;) {
        pthread_mutex_lock(&n->buf_mu);
        strata_io *io = n->rq_head;
        n->idle = !io && n->n_free == n->qd;
        if (!io || n->n_free == 0) {
            pthread_mutex_unlock(&n->buf_mu);
            break;
        }
        int buf = n->free_bufs[--n->n_free];
        size_t at = io->next_;
        size_t len = io->bytes_ - at < n->chunk_bytes ? io->bytes_ - at : n->chunk_bytes;
        io->next_ += len;
        if (io->next_ == io->bytes_) { /* fully started: off the queue */
            n->rq_head = io->link_;
            if (!n->rq_head)
                n->rq_tail = NULL;
        }
        pthread_mutex_unlock(&n->buf_mu);
        chunk_fill(n, buf, io, at, len);
        chunk_queue(n, buf);
    }
    int rc = flush(n);
    if (rc < 0) {
        chunks_unqueue(n, -rc);
        requests_fail(n, -rc);
        pthread_mutex_lock(&n->buf_mu); /* nothing of ours reached the kernel */
        n->idle = !n->rq_head && n->n_free == n->qd;
        pthread_mutex_unlock(&n->buf_mu);
    }
    pthread_mutex_unlock(&n->submit_mu);
}

static void *completion_main(void *arg)
{
    nvme *n = arg;
    bool stop = false;
    while (!stop) {
        drive(n);
        struct io_uring_cqe *cqe;
        /* Bounded: if a failed io_uring_enter ever lost a wake-up, the next
         * drive() still starts the queued requests within 100 ms. */
        struct __kernel_timespec tick = {.tv_sec = 0, .tv_nsec = 100000000};
        int rc = io_uring_wait_cqe_timeout(&n->ring, &cqe, &tick);
        if (rc == -EINTR || rc == -ETIME)
            continue;
        if (rc < 0) { /* ring broken: fail what waits; destroy still joins us */
            requests_fail(n, -rc);
            pthread_mutex_lock(&n->buf_mu);
            n->thread_dead = true;
            pthread_cond_broadcast(&n->buf_cv);
            pthread_mutex_unlock(&n->buf_mu);
            break;
        }
        /* Reap every CQE that is there, then return their slots under one
         * lock and one wake-up. At most qd chunks and two NOPs are in flight. */
        unsigned head, seen = 0;
        int nr = 0;
        io_uring_for_each_cqe(&n->ring, head, cqe)
        {
            void *data = io_uring_cqe_get_data(cqe);
            seen++;
            if (!data) { /* shutdown NOP: submitted after every slot came back */
                stop = true;
                continue;
            }
            if (data == &kick_marker)
                continue;
            chunk *c = data;
            TIER_HANDOFF_ACQUIRE(c);
            c->res = cqe->res;
            n->reaped[nr++] = (int)(c - n->chunks);
        }
        io_uring_cq_advance(&n->ring, seen);
        for (int i = 0; i < nr; i++)
            chunk_finish(n, &n->chunks[n->reaped[i]], n->chunks[n->reaped[i]].res);
        pthread_mutex_lock(&n->buf_mu);
        bool finished = false;
        for (int i = 0; i < nr; i++) {
            chunk *c = &n->chunks[n->reaped[i]];
            n->free_bufs[n->n_free++] = n->reaped[i];
            /* The request may be released as soon as buf_mu is dropped. */
            if (atomic_fetch_sub(&c->io->pending_, 1) == 1)
                finished = true;
            c->io = NULL;
        }
        if (finished)
            pthread_cond_broadcast(&n->done_cv);
        if (nr > 0)
            pthread_cond_broadcast(&n->buf_cv);
        pthread_mutex_unlock(&n->buf_mu);
    }
    return NULL;
}

/* ---- requests */

/* Take `io` off the queue if no chunk of it has started. */
static bool request_unqueue(nvme *n, strata_io *io)
{
    pthread_mutex_lock(&n->buf_mu);
    bool found = false;
    strata_io *prev = NULL;
    for (strata_io *q = n->rq_head; q; prev = q, q = q->link_)
        if (q == io && q->next_ == 0) {
            if (prev)
                prev->link_ = q->link_;
            else
                n->rq_head = q->link_;
            if (n->rq_tail == q)
                n->rq_tail = prev;
            found = true;
            break;
        }
    pthread_mutex_unlock(&n->buf_mu);
    return found;
}

/* A read into aligned memory is queued for the completion thread to drive;
 * any other request is cut, copied and submitted here. */
static strata_status submit(strata_tier *t, void *h, size_t offset, uint8_t *host, size_t bytes,
                            int op, strata_io *io)
{
    if (!t || t->kind != STRATA_TIER_NVME || !h || !host || !io || bytes == 0)
        return strata_error(STRATA_ERR_INVALID_ARG, "tier io: not an nvme tier or NULL argument");
    if (offset % NVME_ALIGN)
        return strata_error(STRATA_ERR_INVALID_ARG, "tier io: offset %zu not a multiple of 4096",
                            offset);
    nvme *n = t->impl;
    strata_status st = live_check(n, h, offset, bytes);
    if (st != STRATA_OK)
        return st;
    const int nchunks = (int)((bytes + n->chunk_bytes - 1) / n->chunk_bytes);
    atomic_store(&io->pending_, nchunks);
    atomic_store(&io->error_, 0);
    io->op_ = op;
    io->host_ = host;
    io->offset_ = (uint64_t)(uintptr_t)h - NVME_ALIGN + offset;
    io->bytes_ = bytes;
    io->next_ = 0;
    io->link_ = NULL;
    atomic_fetch_add(&n->requests, 1);

    if (op == OP_READ && (uintptr_t)host % NVME_ALIGN == 0) {
        pthread_mutex_lock(&n->buf_mu);
        if (n->rq_tail)
            n->rq_tail->link_ = io;
        else
            n->rq_head = io;
        n->rq_tail = io;
        bool kick = n->idle; /* else a completion will come and wake it */
        n->idle = false;
        pthread_mutex_unlock(&n->buf_mu);
        if (kick) {
            pthread_mutex_lock(&n->submit_mu);
            struct io_uring_sqe *sqe = io_uring_get_sqe(&n->ring);
            io_uring_prep_nop(sqe);
            io_uring_sqe_set_data(sqe, (void *)&kick_marker);
            int rc = flush(n);
            pthread_mutex_unlock(&n->submit_mu);
            if (rc < 0 && request_unqueue(n, io)) /* else the thread has started it */
                return strata_error(STRATA_ERR_IO, "nvme tier: io_uring_submit: %s",
                                    strerror(-rc));
        }
        return STRATA_OK;
    }

    for (int k = 0; k < nchunks; k++) {
        /* Take the slot before submit_mu: the completion thread needs
         * submit_mu to drive its queue and must never wait behind us. */
        pthread_mutex_lock(&n->buf_mu);
        while (n->n_free == 0)
            pthread_cond_wait(&n->buf_cv, &n->buf_mu);
        int buf = n->free_bufs[--n->n_free];
        pthread_mutex_unlock(&n->buf_mu);
        size_t at = (size_t)k * n->chunk_bytes;
        size_t len = bytes - at < n->chunk_bytes ? bytes - at : n->chunk_bytes;
        chunk_fill(n, buf, io, at, len); /* the copy, outside submit_mu */
        pthread_mutex_lock(&n->submit_mu);
        chunk_queue(n, buf);
        int rc = flush(n);
        if (rc < 0) {
            /* This chunk and the rest never reach the kernel: account them,
             * then let the ones in flight land so that nothing of this
             * request is in flight when we return. */
            chunks_unqueue(n, -rc);
            pthread_mutex_unlock(&n->submit_mu);
            int left = nchunks - k - 1;
            pthread_mutex_lock(&n->buf_mu);
            if (left > 0 && atomic_fetch_sub(&io->pending_, left) == left)
                pthread_cond_broadcast(&n->done_cv);
            while (atomic_load(&io->pending_) > 0)
                pthread_cond_wait(&n->done_cv, &n->buf_mu);
            pthread_mutex_unlock(&n->buf_mu);
            atomic_fetch_add(&n->errors, 1);
            return strata_error(STRATA_ERR_IO, "nvme tier: io_uring_submit: %s", strerror(-rc));
        }
        pthread_mutex_unlock(&n->submit_mu);
    }
    return STRATA_OK;
}

strata_status strata_tier_write_async(strata_tier *t, void *h, size_t offset, const void *src,
                                      size_t bytes, strata_io *io)
{
    return submit(t, h, offset, (uint8_t *)src, bytes, OP_WRITE, io);
}

strata_status strata_tier_read_async(strata_tier *t, void *h, size_t offset, void *dst,
                                     size_t bytes, strata_io *io)
{
    return submit(t, h, offset, dst, bytes, OP_READ, io);
}

strata_status strata_tier_io_wait(strata_tier *t, strata_io *io, double timeout_s)
{
    if (!t || t->kind != STRATA_TIER_NVME || !io)
        return strata_error(STRATA_ERR_INVALID_ARG, "tier_io_wait: not an nvme tier");
    nvme *n = t->impl;
    struct timespec dl = strata_deadline_after(timeout_s);
    pthread_mutex_lock(&n->buf_mu);
    int rc = 0;
    while (atomic_load(&io->pending_) > 0 && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&n->done_cv, &n->buf_mu, &dl);
    int pending = atomic_load(&io->pending_);
    pthread_mutex_unlock(&n->buf_mu);
    if (pending > 0)
        return strata_error(STRATA_ERR_TIMEOUT, "nvme tier: request still in flight after %.1f s",
                            timeout_s);
    int err = atomic_load(&io->error_);
    if (err)
        return strata_error(STRATA_ERR_IO, "nvme tier: %s of %zu bytes at offset %llu in %s: %s",
                            io->op_ == OP_READ ? "read" : "write", io->bytes_,
                            (unsigned long long)io->offset_, n->path, strerror(err));
    return STRATA_OK;
}

/* Wait until `io` has landed: `io` lives on the caller's stack, so a
 * timeout must not end the wait while the kernel may still write to it. The
 * block layer fails an I/O it cannot finish, so this ends. */
static strata_status io_wait_landed(strata_tier *t, strata_io *io)
{
    strata_status st;
    while ((st = strata_tier_io_wait(t, io, 600.0)) == STRATA_ERR_TIMEOUT)
        strata_logf(((nvme *)t->impl)->log, STRATA_LOG_WARN, "tiers", "%s; still waiting",
                    strata_last_error());
    return st;
}

strata_status strata_tier_write(strata_tier *t, void *h, size_t offset, const void *src,
                                size_t bytes)
{
    strata_io io;
    strata_status st = strata_tier_write_async(t, h, offset, src, bytes, &io);
    return st != STRATA_OK ? st : io_wait_landed(t, &io);
}

strata_status strata_tier_read(strata_tier *t, void *h, size_t offset, void *dst, size_t bytes)
{
    strata_io io;
    strata_status st = strata_tier_read_async(t, h, offset, dst, bytes, &io);
    return st != STRATA_OK ? st : io_wait_landed(t, &io);
}

void strata_tier_io_stats_get(const strata_tier *t, strata_tier_io_stats *out)
{
    memset(out, 0, sizeof *out);
    if (!t || t->kind != STRATA_TIER_NVME)
        return;
    nvme *n = t->impl;
    out->bytes_written = atomic_load(&n->bytes_written);
    out->bytes_read = atomic_load(&n->bytes_read);
    out->requests = atomic_load(&n->requests);
    out->errors = atomic_load(&n->errors);
}

void strata_tier_inject_io_errors(strata_tier *t, int count, int errno_value)
{
    if (!t || t->kind != STRATA_TIER_NVME)
        return;
    nvme *n = t->impl;
    atomic_store(&n->inject_errno, errno_value);
    atomic_store(&n->inject_n, count);
}

/* ---- life */

static void nvme_destroy(strata_tier *t)
{
    nvme *n = t->impl;
    if (!n)
        return;
    if (n->thread_ok) {
        /* Let every transfer in flight land first: completions arrive in any
         * order, so the shutdown NOP must be the last one. */
        pthread_mutex_lock(&n->buf_mu);
        while ((n->n_free < n->qd || n->rq_head) && !n->thread_dead)
            pthread_cond_wait(&n->buf_cv, &n->buf_mu);
        pthread_mutex_unlock(&n->buf_mu);
        pthread_mutex_lock(&n->submit_mu);
        struct io_uring_sqe *sqe = io_uring_get_sqe(&n->ring);
        if (sqe) {
            io_uring_prep_nop(sqe);
            io_uring_sqe_set_data(sqe, NULL);
            io_uring_submit(&n->ring);
        }
        pthread_mutex_unlock(&n->submit_mu);
        pthread_join(n->thread, NULL);
    }
    if (n->ring_ok) {
        if (n->registered)
            io_uring_unregister_buffers(&n->ring);
        io_uring_queue_exit(&n->ring);
    }
    if (n->fd >= 0)
        close(n->fd); /* the file has no name: closing it frees its blocks */
    free(n->staging);
    free(n->chunks);
    free(n->free_bufs);
    free(n->queued);
    free(n->reaped);
    free(n->free_ext);
    free(n->live);
    pthread_cond_destroy(&n->done_cv);
    pthread_cond_destroy(&n->buf_cv);
    pthread_mutex_destroy(&n->ext_mu);
    pthread_mutex_destroy(&n->buf_mu);
    pthread_mutex_destroy(&n->submit_mu);
    free(n);
    t->impl = NULL;
}

static size_t nvme_charge_size(size_t bytes)
{
    return (size_t)round_up(bytes);
}

static const tier_ops nvme_ops = {nvme_alloc, nvme_free, nvme_destroy, nvme_charge_size};

/* mkdir -p: create `dir` and its missing parents. Returns 0 or -1 with errno. */
static int mkdir_parents(const char *dir)
{
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s", dir) >= sizeof path) {
        errno = ENAMETOOLONG;
        return -1;
    }
    for (char *p = path + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        int rc = mkdir(path, 0755);
        *p = '/';
        if (rc != 0 && errno != EEXIST)
            return -1;
    }
    return mkdir(path, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

/* Open the tier's file in `dir` so that it has no name from the start
 * (O_TMPFILE): nothing is left behind whatever ends the process, SIGKILL
 * included. Where the filesystem has no O_TMPFILE, a uniquely named file is
 * unlinked right after it is created. With *direct, O_DIRECT is asked for;
 * *direct becomes false when the filesystem refuses it. `what` receives a
 * description of the file for messages. Returns the fd, or -1 with errno. */
static int tier_file_open(const char *dir, bool *direct, char *what, size_t what_len)
{
    const int flags = O_RDWR | O_CLOEXEC;
    snprintf(what, what_len, "the nvme tier's unnamed file in %s", dir);
    int fd = open(dir, flags | O_TMPFILE | (*direct ? O_DIRECT : 0), 0600);
    if (fd < 0 && *direct && errno == EINVAL) {
        fd = open(dir, flags | O_TMPFILE, 0600);
        if (fd >= 0)
            *direct = false;
    }
    if (fd >= 0 || (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL))
        return fd;
    char tmpl[4096];
    if ((size_t)snprintf(tmpl, sizeof tmpl, "%s/.strata-tier-XXXXXX", dir) >= sizeof tmpl) {
        errno = ENAMETOOLONG;
        return -1;
    }
    fd = mkostemp(tmpl, O_CLOEXEC);
    if (fd < 0)
        return -1;
    unlink(tmpl);
    if (*direct && fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_DIRECT) != 0)
        *direct = false;
    return fd;
}

strata_status strata_tier_nvme_create(const strata_nvme_config *c, strata_tier **out)
{
    if (!c || !out || !c->dir)
        return strata_error(STRATA_ERR_INVALID_ARG, "tier_nvme_create: NULL argument");
    *out = NULL;
    if (c->queue_depth < 8 || c->queue_depth > 4096 || c->chunk_bytes == 0 ||
        c->chunk_bytes % NVME_ALIGN || c->chunk_bytes > (1u << 30))
        return strata_error(STRATA_ERR_INVALID_ARG,
                            "nvme tier: queue_depth %d must be in 8..4096 and chunk_bytes %zu a "
                            "multiple of 4096",
                            c->queue_depth, c->chunk_bytes);
    if (mkdir_parents(c->dir) != 0)
        return strata_error(STRATA_ERR_IO, "nvme tier: cannot create directory '%s': %s", c->dir,
                            strerror(errno));
    strata_tier *t = calloc(1, sizeof *t);
    nvme *n = calloc(1, sizeof *n);
    if (n)
        n->log = c->log;
    if (!t || !n) {
        free(t);
        free(n);
        return strata_error(STRATA_ERR_NOMEM, "nvme tier: out of memory");
    }
    t->kind = STRATA_TIER_NVME;
    t->ops = &nvme_ops;
    t->budget = c->budget;
    t->impl = n;
    n->fd = -1;
    n->qd = c->queue_depth;
    n->chunk_bytes = c->chunk_bytes;
    pthread_mutex_init(&n->submit_mu, NULL);
    pthread_mutex_init(&n->buf_mu, NULL);
    pthread_mutex_init(&n->ext_mu, NULL);
    pthread_cond_init(&n->buf_cv, NULL);
    pthread_cond_init(&n->done_cv, NULL);
    strata_status st;

    bool direct = c->direct;
    n->fd = tier_file_open(c->dir, &direct, n->path, sizeof n->path);
    if (n->fd < 0) {
        st = strata_error(STRATA_ERR_IO, "nvme tier: cannot create a file in '%s': %s", c->dir,
                          strerror(errno));
        goto fail;
    }
    if (c->direct && !direct) /* tmpfs and friends refuse O_DIRECT */
        strata_logf(c->log, STRATA_LOG_WARN, "tiers",
                    "%s refuses O_DIRECT; the nvme tier goes through the page cache", c->dir);
    n->staging = aligned_alloc(NVME_ALIGN, (size_t)n->qd * n->chunk_bytes);
    n->chunks = calloc((size_t)n->qd, sizeof *n->chunks);
    n->free_bufs = malloc((size_t)n->qd * sizeof *n->free_bufs);
    n->queued = malloc((size_t)n->qd * sizeof *n->queued);
    n->reaped = malloc((size_t)n->qd * sizeof *n->reaped);
    if (!n->staging || !n->chunks || !n->free_bufs || !n->queued || !n->reaped) {
        st = strata_error(STRATA_ERR_NOMEM, "nvme tier: cannot allocate %d staging buffers of %zu bytes",
                          n->qd, n->chunk_bytes);
        goto fail;
    }
    for (int i = 0; i < n->qd; i++)
        n->free_bufs[n->n_free++] = n->qd - 1 - i;
    /* One SQE per slot plus the kick and shutdown NOPs. */
    int rc = io_uring_queue_init((unsigned)n->qd + 2, &n->ring, 0);
    if (rc < 0) {
        st = strata_error(STRATA_ERR_IO, "nvme tier: io_uring unavailable: %s", strerror(-rc));
        goto fail;
    }
    n->ring_ok = true;
    struct iovec *iov = calloc((size_t)n->qd, sizeof *iov);
    if (!iov) {
        st = strata_error(STRATA_ERR_NOMEM, "nvme tier: out of memory");
        goto fail;
    }
    for (int i = 0; i < n->qd; i++) {
        iov[i].iov_base = n->staging + (size_t)i * n->chunk_bytes;
        iov[i].iov_len = n->chunk_bytes;
    }
    rc = io_uring_register_buffers(&n->ring, iov, (unsigned)n->qd);
    free(iov);
    if (rc == -ENOMEM || rc == -EPERM) {
        /* Registered buffers are pinned and count against RLIMIT_MEMLOCK
         * (8 MiB by default for a user without CAP_IPC_LOCK): go on with
         * plain transfers from the same staging buffers, and say so. */
        struct rlimit lim;
        char have[48] = "unknown";
        if (getrlimit(RLIMIT_MEMLOCK, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY)
            snprintf(have, sizeof have, "%.1f MiB", (double)lim.rlim_cur / 1048576.0);
        const size_t need = (size_t)n->qd * n->chunk_bytes;
        strata_logf(c->log, STRATA_LOG_WARN, "tiers",
                    "nvme tier: RLIMIT_MEMLOCK is %s but registering %d staging buffers of "
                    "%.1f MiB needs %.1f MiB (%s): using unregistered staging buffers; "
                    "`ulimit -l %zu` or a smaller queue depth or chunk restores them",
                    have, n->qd, (double)n->chunk_bytes / 1048576.0, (double)need / 1048576.0,
                    strerror(-rc), (need >> 10) + 1024);
    } else if (rc < 0) {
        st = strata_error(STRATA_ERR_IO, "nvme tier: io_uring_register_buffers: %s", strerror(-rc));
        goto fail;
    } else {
        n->registered = true;
    }
    rc = pthread_create(&n->thread, NULL, completion_main, n);
    if (rc != 0) {
        st = strata_error(STRATA_ERR_INTERNAL, "nvme tier: pthread_create: %s", strerror(rc));
        goto fail;
    }
    n->thread_ok = true;
    *out = t;
    return STRATA_OK;

fail:
    nvme_destroy(t);
    free(t);
    return st;
}

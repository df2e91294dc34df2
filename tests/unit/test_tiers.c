/* Tiers: host budget accounting; nvme round trips bit-exact (partial chunks,
 * many chunks, many requests in flight, borrowed aligned memory and staged
 * unaligned memory, several threads at once, destroy with requests in
 * flight), injected I/O errors surface as STRATA_ERR_IO, an unusable
 * directory fails cleanly, the tier's file never has a name (nothing left
 * behind by a killed process). Skips (77) if io_uring is not available on this
 * kernel. */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/capability.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "tiers/tiers.h"

static char tmpdir[256];

/* The host tier charges whole pages of the system's page size (4 KiB on
 * x86-64, 64 KiB on many arm64/Grace kernels: scripts/arm64-test.sh runs this
 * under qemu with QEMU_PAGESIZE=65536), page-aligned, and says so through
 * strata_tier_charge_size. */
static void test_host_budget(void **state)
{
    (void)state;
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    strata_tier *t;
    assert_int_equal(strata_tier_host_create(3 * page, &t), STRATA_OK);
    assert_int_equal(strata_tier_kind_of(t), STRATA_TIER_HOST);
    assert_int_equal(strata_tier_charge_size(t, page + 1), 2 * page);
    assert_int_equal(strata_tier_charge_size(t, 1), page);
    assert_int_equal(strata_tier_charge_size(t, 0), 0);
    void *a, *b, *c;
    assert_int_equal(strata_tier_alloc(t, page + 1, &a), STRATA_OK); /* 2 pages */
    assert_int_equal((uintptr_t)a % page, 0);
    assert_int_equal(strata_tier_alloc(t, page, &b), STRATA_OK);
    assert_int_equal((uintptr_t)b % page, 0);
    assert_int_equal(strata_tier_alloc(t, 1, &c), STRATA_ERR_NOMEM);
    size_t use, peak;
    strata_tier_bytes(t, &use, &peak);
    assert_int_equal(use, 3 * page);
    strata_tier_free(t, a, page + 1);
    strata_tier_bytes(t, &use, &peak);
    assert_int_equal(use, page);
    assert_int_equal(peak, 3 * page);
    strata_tier_free(t, b, page);
    strata_tier_destroy(t);
}

static strata_tier *make_nvme(size_t chunk, size_t budget)
{
    strata_nvme_config c;
    strata_nvme_config_default(&c);
    c.dir = tmpdir;
    c.queue_depth = 8;
    c.chunk_bytes = chunk;
    c.budget = budget;
    strata_tier *t = NULL;
    strata_status st = strata_tier_nvme_create(&c, &t);
    if (st != STRATA_OK)
        fail_msg("nvme create: %s: %s", strata_status_str(st), strata_last_error());
    return t;
}

/* Entries of `dir` other than "." and "..". */
static int dir_entries(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    closedir(d);
    return n;
}

/* The tier's file never has a name: a process killed with the tier open
 * (SIGKILL: no destroy runs) leaves nothing in the directory. */
static void test_nvme_file_unnamed(void **state)
{
    (void)state;
    char dir[300];
    snprintf(dir, sizeof dir, "%s/unnamed", tmpdir);
    assert_int_equal(mkdir(dir, 0755), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        strata_nvme_config c;
        strata_nvme_config_default(&c);
        c.dir = dir;
        c.queue_depth = 8;
        c.chunk_bytes = 16384;
        strata_tier *t;
        void *h;
        static uint8_t buf[65536];
        if (strata_tier_nvme_create(&c, &t) != STRATA_OK ||
            strata_tier_alloc(t, sizeof buf, &h) != STRATA_OK ||
            strata_tier_write(t, h, 0, buf, sizeof buf) != STRATA_OK)
            _exit(3);
        _exit(dir_entries(dir) == 0 ? 0 : 4); /* no name while open, and no destroy */
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    assert_int_equal(dir_entries(dir), 0);
    assert_int_equal(rmdir(dir), 0);
}

static void fill(uint8_t *p, size_t n, uint32_t seed);

/* What the tier logged, for the memlock test. */
static char logged[2048];

static void log_capture(void *user, strata_log_level level, const char *subsystem,
                        const char *msg)
{
    (void)user;
    (void)level;
    (void)subsystem;
    size_t used = strlen(logged);
    snprintf(logged + used, sizeof logged - used, "%s\n", msg);
}

/* As an unprivileged user would be: without CAP_IPC_LOCK (root ignores
 * RLIMIT_MEMLOCK for registered buffers), with RLIMIT_MEMLOCK at `bytes`. */
static int become_unprivileged(rlim_t bytes)
{
    struct __user_cap_header_struct hdr = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
    struct __user_cap_data_struct data[2];
    if (syscall(SYS_capget, &hdr, data) != 0)
        return -1;
    data[CAP_IPC_LOCK / 32].effective &= ~(1u << (CAP_IPC_LOCK % 32));
    data[CAP_IPC_LOCK / 32].permitted &= ~(1u << (CAP_IPC_LOCK % 32));
    if (syscall(SYS_capset, &hdr, data) != 0)
        return -1;
    struct rlimit lim = {bytes, bytes};
    return setrlimit(RLIMIT_MEMLOCK, &lim);
}

/* Child of test_nvme_memlock: create a tier of depth qd with 1 MiB chunks
 * at an 8 MiB RLIMIT_MEMLOCK and move 5 MiB through it. Exit 0 when that
 * works and the log says `want` (NULL: says nothing). */
static int memlock_child(const char *dir, int qd, const char *want)
{
    if (become_unprivileged(8u << 20) != 0)
        return 2;
    strata_logger lg = {.level = STRATA_LOG_INFO, .fn = log_capture, .user = NULL};
    strata_nvme_config c;
    strata_nvme_config_default(&c);
    c.dir = dir;
    c.queue_depth = qd;
    c.log = &lg;
    strata_tier *t;
    if (strata_tier_nvme_create(&c, &t) != STRATA_OK) {
        fprintf(stderr, "create qd %d: %s\n", qd, strata_last_error());
        return 3;
    }
    const size_t n = (5u << 20) + 100;
    uint8_t *src = malloc(n), *dst = malloc(n);
    void *h;
    int rc = 0;
    fill(src, n, 11);
    if (!src || !dst || strata_tier_alloc(t, n, &h) != STRATA_OK ||
        strata_tier_write(t, h, 0, src, n) != STRATA_OK ||
        strata_tier_read(t, h, 0, dst + 0, n) != STRATA_OK || memcmp(src, dst, n) != 0)
        rc = 4;
    strata_tier_destroy(t);
    free(src);
    free(dst);
    if (rc)
        return rc;
    if (want ? !strstr(logged, want) : logged[0] != '\0') {
        fprintf(stderr, "qd %d logged: '%s', want '%s'\n", qd, logged, want ? want : "");
        return 5;
    }
    return 0;
}

/* An unprivileged user at the default RLIMIT_MEMLOCK (8 MiB) can use the
 * tier: the default 16 x 1 MiB staging and depth 8 (8 MiB) do not fit, so
 * they run unregistered, and one line names the limit and the bytes. */
static void test_nvme_memlock(void **state)
{
    (void)state;
    static const struct {
        int qd;
        const char *want;
    } cases[] = {
        {16, "RLIMIT_MEMLOCK is 8.0 MiB but registering 16 staging buffers of 1.0 MiB needs "
             "16.0 MiB"},
        {8, "needs 8.0 MiB"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0)
            _exit(memlock_child(tmpdir, cases[i].qd, cases[i].want));
        int status;
        assert_int_equal(waitpid(pid, &status, 0), pid);
        assert_true(WIFEXITED(status));
        assert_int_equal(WEXITSTATUS(status), 0);
    }
}

/* Reads and writes are checked against the extent's length: a range that
 * passes its end (or a freed or made-up handle) is refused with
 * STRATA_ERR_INVALID_ARG before any byte moves, so a neighbouring extent is
 * never overwritten. */
static void test_nvme_extent_range(void **state)
{
    (void)state;
    strata_tier *t = make_nvme(16384, 0);
    void *a, *b, *c;
    assert_int_equal(strata_tier_alloc(t, 10000, &a), STRATA_OK);
    assert_int_equal(strata_tier_alloc(t, 8192, &b), STRATA_OK);
    static uint8_t src[16384], keep[8192], dst[16384];
    fill(src, sizeof src, 3);
    fill(keep, sizeof keep, 4);
    assert_int_equal(strata_tier_write(t, b, 0, keep, sizeof keep), STRATA_OK);
    static const struct {
        size_t offset, bytes;
        strata_status want;
    } cases[] = {
        {0, 10000, STRATA_OK},
        {8192, 1808, STRATA_OK},
        {0, 10001, STRATA_ERR_INVALID_ARG},
        {8192, 4096, STRATA_ERR_INVALID_ARG}, /* the rounded-up tail is not the caller's */
        {12288, 1, STRATA_ERR_INVALID_ARG},
        {4096, 16384, STRATA_ERR_INVALID_ARG},
        {SIZE_MAX - 4095, 8192, STRATA_ERR_INVALID_ARG}, /* offset + bytes wraps around */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        strata_io io;
        assert_int_equal(strata_tier_write(t, a, cases[i].offset, src, cases[i].bytes),
                         cases[i].want);
        assert_int_equal(strata_tier_read(t, a, cases[i].offset, dst, cases[i].bytes),
                         cases[i].want);
        assert_int_equal(strata_tier_write_async(t, a, cases[i].offset, src, cases[i].bytes, &io),
                         cases[i].want);
        if (cases[i].want == STRATA_OK)
            assert_int_equal(strata_tier_io_wait(t, &io, 60.0), STRATA_OK);
        assert_int_equal(strata_tier_read_async(t, a, cases[i].offset, dst, cases[i].bytes, &io),
                         cases[i].want);
        if (cases[i].want == STRATA_OK)
            assert_int_equal(strata_tier_io_wait(t, &io, 60.0), STRATA_OK);
        if (cases[i].want != STRATA_OK)
            assert_non_null(strstr(strata_last_error(), "extent"));
    }
    /* b is untouched by every refused write into a. */
    assert_int_equal(strata_tier_read(t, b, 0, dst, sizeof keep), STRATA_OK);
    assert_memory_equal(dst, keep, sizeof keep);
    /* Handles that are not live extents. */
    assert_int_equal(strata_tier_read(t, (uint8_t *)b + 65536, 0, dst, 4096),
                     STRATA_ERR_INVALID_ARG);
    strata_tier_free(t, a, 10000);
    assert_int_equal(strata_tier_write(t, a, 0, src, 4096), STRATA_ERR_INVALID_ARG);
    /* A new extent that reuses a's space has its own length. */
    assert_int_equal(strata_tier_alloc(t, 4096, &c), STRATA_OK);
    assert_int_equal(strata_tier_write(t, c, 0, src, 4096), STRATA_OK);
    assert_int_equal(strata_tier_write(t, c, 0, src, 8192), STRATA_ERR_INVALID_ARG);
    strata_tier_free(t, c, 4096);
    strata_tier_free(t, b, 8192);
    strata_tier_destroy(t);
}

static void fill(uint8_t *p, size_t n, uint32_t seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        p[i] = (uint8_t)(seed >> 24);
    }
}

static void test_nvme_roundtrip(void **state)
{
    (void)state;
    strata_tier *t = make_nvme(16384, 0);
    const size_t sizes[] = {1, 4095, 4096, 16384, 16385, 100000, 1 << 20};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t n = sizes[k];
        uint8_t *src = malloc(n), *dst = malloc(n);
        fill(src, n, (uint32_t)k + 1);
        memset(dst, 0xAB, n);
        void *h;
        assert_int_equal(strata_tier_alloc(t, n, &h), STRATA_OK);
        assert_int_equal(strata_tier_write(t, h, 0, src, n), STRATA_OK);
        assert_int_equal(strata_tier_read(t, h, 0, dst, n), STRATA_OK);
        assert_memory_equal(src, dst, n);
        strata_tier_free(t, h, n);
        free(src);
        free(dst);
    }
    /* 24 requests in flight at once over 8 staging buffers. */
    enum { N = 24, SZ = 50000 };
    uint8_t *bufs = malloc((size_t)N * SZ), *back = malloc((size_t)N * SZ);
    void *hs[N];
    strata_io ios[N];
    for (int i = 0; i < N; i++) {
        fill(bufs + (size_t)i * SZ, SZ, 1000u + (uint32_t)i);
        assert_int_equal(strata_tier_alloc(t, SZ, &hs[i]), STRATA_OK);
        assert_int_equal(strata_tier_write_async(t, hs[i], 0, bufs + (size_t)i * SZ, SZ, &ios[i]),
                         STRATA_OK);
    }
    for (int i = 0; i < N; i++)
        assert_int_equal(strata_tier_io_wait(t, &ios[i], 10.0), STRATA_OK);
    for (int i = 0; i < N; i++)
        assert_int_equal(strata_tier_read_async(t, hs[i], 0, back + (size_t)i * SZ, SZ, &ios[i]),
                         STRATA_OK);
    for (int i = 0; i < N; i++)
        assert_int_equal(strata_tier_io_wait(t, &ios[i], 10.0), STRATA_OK);
    assert_memory_equal(bufs, back, (size_t)N * SZ);
    strata_tier_io_stats s;
    strata_tier_io_stats_get(t, &s);
    assert_true(s.bytes_read >= (uint64_t)N * SZ);
    assert_int_equal(s.errors, 0);
    for (int i = 0; i < N; i++)
        strata_tier_free(t, hs[i], SZ);
    size_t use;
    strata_tier_bytes(t, &use, NULL);
    assert_int_equal(use, 0);
    free(bufs);
    free(back);
    strata_tier_destroy(t);
}

/* Reads into page-aligned memory skip the staging copy and are driven by the
 * completion thread; anything else is staged and submitted by the caller.
 * Both must be bit-exact, mixed within one request (aligned whole chunks, a
 * staged partial tail) and with an unaligned start, and write_async must
 * have copied its source by the time it returns. */
static void test_nvme_borrowed(void **state)
{
    (void)state;
    strata_tier *t = make_nvme(16384, 0);
    enum { CAP = 6 * 16384 + 4096 };
    uint8_t *src = aligned_alloc(4096, CAP + 4096), *dst = aligned_alloc(4096, CAP + 4096);
    assert_non_null(src);
    assert_non_null(dst);
    const size_t sizes[] = {4096, 16384, 3 * 16384, 3 * 16384 + 4096, 3 * 16384 + 100, 5000, CAP};
    const size_t shifts[] = {0, 1, 64, 4096}; /* host misalignment (4096: aligned again) */
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++)
        for (size_t w = 0; w < sizeof shifts / sizeof shifts[0]; w++)
            for (size_t r = 0; r < sizeof shifts / sizeof shifts[0]; r++) {
                size_t n = sizes[k];
                uint8_t *s = src + shifts[w], *d = dst + shifts[r];
                fill(s, n, (uint32_t)(k * 16 + w * 4 + r));
                memset(d, 0xCD, n);
                void *h;
                assert_int_equal(strata_tier_alloc(t, n, &h), STRATA_OK);
                assert_int_equal(strata_tier_write(t, h, 0, s, n), STRATA_OK);
                assert_int_equal(strata_tier_read(t, h, 0, d, n), STRATA_OK);
                assert_memory_equal(s, d, n);
                strata_tier_free(t, h, n);
            }

    /* write_async copies: the source may change right after it returns. */
    void *h;
    assert_int_equal(strata_tier_alloc(t, CAP, &h), STRATA_OK);
    uint8_t *keep = malloc(CAP);
    fill(src, CAP, 99);
    memcpy(keep, src, CAP);
    strata_io io;
    assert_int_equal(strata_tier_write_async(t, h, 0, src, CAP, &io), STRATA_OK);
    memset(src, 0, CAP);
    assert_int_equal(strata_tier_io_wait(t, &io, 10.0), STRATA_OK);
    assert_int_equal(strata_tier_read_async(t, h, 0, dst, CAP, &io), STRATA_OK);
    assert_int_equal(strata_tier_io_wait(t, &io, 10.0), STRATA_OK);
    assert_memory_equal(keep, dst, CAP);

    /* An error on a borrowed chunk surfaces like a staged one, and the
     * request after it is whole again. */
    strata_tier_inject_io_errors(t, 1, EIO);
    assert_int_equal(strata_tier_read(t, h, 0, dst, CAP), STRATA_ERR_IO);
    strata_tier_inject_io_errors(t, 1, ENOSPC);
    assert_int_equal(strata_tier_write(t, h, 0, keep, CAP), STRATA_ERR_IO);
    assert_non_null(strstr(strata_last_error(), "No space left"));
    memcpy(src, keep, CAP);
    assert_int_equal(strata_tier_write(t, h, 0, src, CAP), STRATA_OK);
    memset(dst, 0, CAP);
    assert_int_equal(strata_tier_read(t, h, 0, dst, CAP), STRATA_OK);
    assert_memory_equal(keep, dst, CAP);

    /* Many borrowed reads in flight at once over 8 slots. */
    enum { N = 12 };
    uint8_t *back = aligned_alloc(4096, (size_t)N * CAP);
    strata_io ios[N];
    for (int i = 0; i < N; i++)
        assert_int_equal(strata_tier_read_async(t, h, 0, back + (size_t)i * CAP, CAP, &ios[i]),
                         STRATA_OK);
    for (int i = 0; i < N; i++) {
        assert_int_equal(strata_tier_io_wait(t, &ios[i], 10.0), STRATA_OK);
        assert_memory_equal(keep, back + (size_t)i * CAP, CAP);
    }
    strata_tier_io_stats st;
    strata_tier_io_stats_get(t, &st);
    assert_int_equal(st.errors, 2);
    strata_tier_free(t, h, CAP);
    free(back);
    free(keep);
    free(src);
    free(dst);
    strata_tier_destroy(t);
}

/* Several threads at once, each mixing requests the completion thread drives
 * (aligned reads) with ones the caller submits (writes, unaligned reads);
 * then destroy with requests still in flight. */
enum { CT_THREADS = 4, CT_ROUNDS = 12, CT_BYTES = 5 * 16384 + 8192 };

typedef struct ct_arg {
    strata_tier *t;
    int id, failures;
} ct_arg;

static void *ct_main(void *p)
{
    ct_arg *a = p;
    uint8_t *src = aligned_alloc(4096, CT_BYTES + 4096), *dst = aligned_alloc(4096, CT_BYTES + 4096);
    void *h;
    if (!src || !dst || strata_tier_alloc(a->t, CT_BYTES, &h) != STRATA_OK) {
        a->failures++;
        goto out;
    }
    for (int r = 0; r < CT_ROUNDS; r++) {
        static const size_t shift[3] = {0, 1, 2048}; /* reads: 0 borrowed, else staged */
        size_t ws = shift[(r + a->id) % 3], rs = shift[(r / 2 + a->id) % 3];
        uint8_t *s = src + ws, *d = dst + rs;
        fill(s, CT_BYTES, (uint32_t)(a->id * 100 + r));
        memset(d, 0x5A, CT_BYTES);
        strata_io io;
        strata_status st = r % 2 ? strata_tier_write(a->t, h, 0, s, CT_BYTES)
                                 : strata_tier_write_async(a->t, h, 0, s, CT_BYTES, &io);
        if (st == STRATA_OK && r % 2 == 0)
            st = strata_tier_io_wait(a->t, &io, 30.0);
        if (st == STRATA_OK)
            st = strata_tier_read_async(a->t, h, 0, d, CT_BYTES, &io);
        if (st == STRATA_OK)
            st = strata_tier_io_wait(a->t, &io, 30.0);
        if (st != STRATA_OK || memcmp(s, d, CT_BYTES) != 0)
            a->failures++;
    }
    strata_tier_free(a->t, h, CT_BYTES);
out:
    free(src);
    free(dst);
    return NULL;
}

static void test_nvme_concurrent(void **state)
{
    (void)state;
    strata_tier *t = make_nvme(16384, 0);
    pthread_t th[CT_THREADS];
    ct_arg args[CT_THREADS];
    for (int i = 0; i < CT_THREADS; i++) {
        args[i] = (ct_arg){t, i, 0};
        assert_int_equal(pthread_create(&th[i], NULL, ct_main, &args[i]), 0);
    }
    for (int i = 0; i < CT_THREADS; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(args[i].failures, 0);
    }

    /* Destroy with reads queued for the completion thread and staged ones in
     * flight: it waits for all of them, and the data is whole. */
    enum { N = 10 };
    uint8_t *src = aligned_alloc(4096, CT_BYTES), *back = aligned_alloc(4096, (size_t)N * (CT_BYTES + 4096));
    void *h;
    assert_int_equal(strata_tier_alloc(t, CT_BYTES, &h), STRATA_OK);
    fill(src, CT_BYTES, 4242);
    assert_int_equal(strata_tier_write(t, h, 0, src, CT_BYTES), STRATA_OK);
    strata_io ios[N];
    for (int i = 0; i < N; i++) /* odd i: shifted by 1 byte, staged */
        assert_int_equal(strata_tier_read_async(t, h, 0, back + (size_t)i * (CT_BYTES + 4096) + (i % 2),
                                                CT_BYTES, &ios[i]),
                         STRATA_OK);
    strata_tier_destroy(t);
    for (int i = 0; i < N; i++)
        assert_memory_equal(src, back + (size_t)i * (CT_BYTES + 4096) + (i % 2), CT_BYTES);
    free(src);
    free(back);
}

static void test_nvme_errors(void **state)
{
    (void)state;
    strata_tier *t = make_nvme(4096, 3 * 4096);
    void *h, *h2;
    assert_int_equal(strata_tier_alloc(t, 8192, &h), STRATA_OK);
    assert_int_equal(strata_tier_alloc(t, 8192, &h2), STRATA_ERR_NOMEM); /* budget */
    uint8_t src[8192], dst[8192];
    fill(src, sizeof src, 7);
    assert_int_equal(strata_tier_write(t, h, 0, src, sizeof src), STRATA_OK);
    strata_tier_inject_io_errors(t, 1, ENOSPC);
    assert_int_equal(strata_tier_write(t, h, 0, src, sizeof src), STRATA_ERR_IO);
    assert_non_null(strstr(strata_last_error(), "No space left"));
    strata_tier_inject_io_errors(t, 1, EIO);
    assert_int_equal(strata_tier_read(t, h, 0, dst, sizeof dst), STRATA_ERR_IO);
    assert_non_null(strstr(strata_last_error(), "read"));
    /* After the errors the tier still works. */
    assert_int_equal(strata_tier_read(t, h, 0, dst, sizeof dst), STRATA_OK);
    assert_memory_equal(src, dst, sizeof src);
    assert_int_equal(strata_tier_read(t, h, 100, dst, 10), STRATA_ERR_INVALID_ARG);
    strata_tier_free(t, h, 8192);
    strata_tier_destroy(t);

    strata_nvme_config c;
    strata_nvme_config_default(&c);
    c.dir = "/proc/strata-no-such-dir";
    assert_int_equal(strata_tier_nvme_create(&c, &t), STRATA_ERR_IO);
    c.dir = tmpdir;
    c.queue_depth = 4;
    assert_int_equal(strata_tier_nvme_create(&c, &t), STRATA_ERR_INVALID_ARG);
    if (geteuid() != 0) { /* root ignores directory permissions */
        char ro[300];
        snprintf(ro, sizeof ro, "%s/ro", tmpdir);
        mkdir(ro, 0500);
        c.dir = ro;
        c.queue_depth = 8;
        assert_int_equal(strata_tier_nvme_create(&c, &t), STRATA_ERR_IO);
        rmdir(ro);
    }
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "%s/strata-test-tiers-XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    strata_nvme_config c;
    strata_nvme_config_default(&c);
    c.dir = tmpdir;
    const struct CMUnitTest host_tests[] = {
        cmocka_unit_test(test_host_budget),
    };
    strata_tier *probe;
    if (strata_tier_nvme_create(&c, &probe) != STRATA_OK &&
        strstr(strata_last_error(), "io_uring")) {
        /* No io_uring (qemu-user, a seccomp profile, io_uring_disabled): the
         * host tier is still checked; a pass reports the skip (77). */
        char why[512];
        snprintf(why, sizeof why, "%s", strata_last_error());
        int rc = cmocka_run_group_tests_name("host", host_tests, NULL, NULL);
        printf("SKIP: the nvme cases: %s\n", why);
        rmdir(tmpdir);
        return rc ? 1 : 77;
    }
    strata_tier_destroy(probe);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_host_budget),
        cmocka_unit_test(test_nvme_roundtrip),
        cmocka_unit_test(test_nvme_borrowed),
        cmocka_unit_test(test_nvme_concurrent),
        cmocka_unit_test(test_nvme_errors),
        cmocka_unit_test(test_nvme_file_unnamed),
        cmocka_unit_test(test_nvme_memlock),
        cmocka_unit_test(test_nvme_extent_range),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    rmdir(tmpdir);
    return rc;
}

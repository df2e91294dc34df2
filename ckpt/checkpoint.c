/* Checkpoints: strata_save, strata_load, strata_ckpt_verify (strata.h; the
 * layout in ckpt/ckpt.h).
 *
 * Save, per rank: drain the refresh engine (strata_refresh_drain), bring
 * every rank the current weights (strata_sync_weights), then write into a
 * temporary sibling directory created by rank 0: rank-R.safetensors and
 * rank-R.json by every rank, model.safetensors by rank 0 while managed
 * weights stream past layer by layer (each rank holds its shard plus one
 * layer, never the whole model); each file is
 * hashed (SHA-256, OpenSSL's libcrypto) while it is written (a large
 * file's buffers on a second thread, beside their writes), into blocks
 * allocated before the writes (fallocate); a rank's files are fsynced
 * together once the last of them is written (fsync_set).
 * The sizes and digests reach rank 0 through one allreduce; rank 0 writes
 * manifest.json, fsyncs the directory, renames it into place and fsyncs the
 * parent. A killed save leaves only a "*.tmp-*" directory.
 *
 * Load: read the manifest, map the rank files this rank needs whole
 * (read-only, hashed in the same pass: no copy into fresh memory), and of
 * model.safetensors keep only this rank's weights (streamed through one
 * buffer to check the digest), check sizes and digests, parse, match everything against the runtime (names, shapes,
 * dtypes, routing, phases, engine configuration) — only then change state:
 * engine blocks first (the registry's slots and a replay of the installed
 * result's install), then the family tensors (overwriting what the replayed
 * install touched, e.g. SOAP's permuted moments), then the weights and the
 * step counter.
 *
 * State paging (strata_config.page_state): a paged parameter's state is
 * in the nvme tier between its steps, so the save pins each one in turn
 * before its tensors are written (page_walk) and the load restores each
 * one's blocks and tensors while it is pinned (paged_apply), then writes
 * it back: at most two states resident, as in the step; the files are a
 * resident run's.
 *
 * Device memory is never dereferenced: tensors move through
 * strata_backend_copy into a host staging buffer. The runtime is read and
 * restored through runtime/state.h only.
 */
#include "ckpt/ckpt.h"

#include "base/clock.h"
#include "runtime/config_schema.h"
#include "runtime/state.h"
#include "workers/workers.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define MODEL_FILE "model.safetensors"

_Static_assert(sizeof(bool) == 1, "STRATA_BOOL tensors are C bools of one byte");

static const strata_st_dtype dtype_of[] = {
    [STRATA_F32] = STRATA_ST_F32, [STRATA_F64] = STRATA_ST_F64, [STRATA_I32] = STRATA_ST_I32,
    [STRATA_I64] = STRATA_ST_I64, [STRATA_BOOL] = STRATA_ST_BOOL, [STRATA_BF16] = STRATA_ST_BF16,
};

/* ---- the configuration in the manifest: the schema's CKPT rows
 * (runtime/config_schema.h), each under its field name ("shampoo.beta2") */

STRATA_CFG_TABLE(cfg_fields);

static json_object *config_json(const strata_config *c)
{
    json_object *o = json_object_new_object();
    for (size_t i = 0; o && i < STRATA_CFG_ROWS; i++) {
        const strata_cfg_field *f = &cfg_fields[i];
        if (!f->ckpt)
            continue;
        const char *p = (const char *)c + f->off;
        json_object *v = NULL;
        switch (f->kind) {
        case STRATA_CFG_FLOAT: {
            float x;
            memcpy(&x, p, sizeof x);
            v = json_object_new_double((double)x);
            break;
        }
        case STRATA_CFG_DOUBLE: {
            double x;
            memcpy(&x, p, sizeof x);
            v = json_object_new_double(x);
            break;
        }
        case STRATA_CFG_BOOL: {
            bool x;
            memcpy(&x, p, sizeof x);
            v = json_object_new_boolean(x);
            break;
        }
        case STRATA_CFG_INT:
        case STRATA_CFG_ENUM: {
            int x;
            memcpy(&x, p, sizeof x);
            v = json_object_new_int(x);
            break;
        }
        case STRATA_CFG_SIZE:
        case STRATA_CFG_U64: {
            uint64_t x = 0;
            memcpy(&x, p, f->size < sizeof x ? f->size : sizeof x);
            v = json_object_new_int64((int64_t)x);
            break;
        }
        default: continue; /* strings and pointers are never CKPT rows */
        }
        json_object_object_add(o, f->name, v);
    }
    return o;
}

/* One recorded config value as the warning prints it: a float field (stored
 * as the double of a float32) in %g of its float32, an enum by the name its
 * schema row spells it with (the CLI flag's spelling, "warm-qr"), an integer
 * as is. */
static void config_value_str(const strata_cfg_field *f, json_object *v, char *buf, size_t n)
{
    const char *name = f->kind == STRATA_CFG_ENUM && json_object_is_type(v, json_type_int)
                           ? strata_cfg_value_name(f, json_object_get_int(v))
                           : NULL;
    if (name)
        snprintf(buf, n, "%s", name);
    else if (json_object_is_type(v, json_type_double))
        snprintf(buf, n, "%g", (double)(float)json_object_get_double(v));
    else
        snprintf(buf, n, "%s", json_object_to_json_string(v));
}

/* The resumed run may change hyperparameters (a lower lr, ...): say which. */
static void config_compare(const strata_runtime *rt, const strata_config *cfg,
                           json_object *saved, const char *what)
{
    json_object *now = config_json(cfg);
    if (!now)
        return;
    for (size_t i = 0; i < STRATA_CFG_ROWS; i++) {
        const strata_cfg_field *f = &cfg_fields[i];
        json_object *old = NULL, *val = NULL;
        if (!f->ckpt || !json_object_object_get_ex(now, f->name, &val))
            continue;
        if (!json_object_object_get_ex(saved, f->name, &old)) {
            strata_log(rt, STRATA_LOG_WARN, "ckpt", "%s: config field '%s' not recorded", what,
                       f->name);
            continue;
        }
        const bool same = json_object_is_type(val, json_type_double)
                              ? (float)json_object_get_double(old) ==
                                    (float)json_object_get_double(val)
                              : json_object_get_int64(old) == json_object_get_int64(val) &&
                                    json_object_get_type(old) == json_object_get_type(val);
        if (!same) {
            char was[64], is[64];
            config_value_str(f, old, was, sizeof was);
            config_value_str(f, val, is, sizeof is);
            strata_log(rt, STRATA_LOG_WARN, "ckpt",
                       "%s: config '%s' was %s at save, is %s now (the run continues with the "
                       "new value)", what, f->name, was, is);
        }
    }
    json_object_put(now);
}

/* ---- the statistics counters a resumed run continues (strata_stats)
 *
 * Every rank's counters at the save go into the manifest ("rank_stats", by
 * runtime/state.h's table of them). A load hands the runtime the totals to
 * continue from (strata_rt_stats_resume), so that strata_stats_get reads the
 * saved totals right after strata_load and adds what happens from there
 * (whatever the load itself did, e.g. replayed installs, is not counted). At
 * the same world size each rank continues its own counters. At another world
 * size, by kind: 'c' event counts go, summed over the old ranks, to rank 0
 * (the totals continue), 'm' maxima become the old ranks' maximum on every
 * rank, 'r' per-rank resources (bytes moved, seconds) the old ranks' mean on
 * every rank (per-step means stay per-rank figures). */
static strata_status stats_restore(strata_runtime *rt, const strata_rt_view *v,
                                   const strata_ckpt_manifest *m)
{
    if (!m->rank_stats)
        return STRATA_OK; /* an older checkpoint: counters start from zero */
    json_object *arr = m->rank_stats;
    const bool same = m->world_size == v->world;
    double totals[STRATA_RT_N_STATS];
    for (int k = 0; k < STRATA_RT_N_STATS; k++) {
        const strata_rt_stat_field *f = strata_rt_stat_field_at(k);
        double x = 0.0;
        for (int r = 0; r < m->world_size; r++) {
            if (same && r != v->rank)
                continue;
            json_object *o = NULL;
            json_object_object_get_ex(json_object_array_get_idx(arr, (size_t)r), f->name, &o);
            const double y = !o ? 0.0 : f->type == 'd' ? json_object_get_double(o)
                                                       : (double)json_object_get_int64(o);
            x = f->kind == 'm' ? (y > x ? y : x) : x + y;
        }
        if (!same && f->kind == 'c' && v->rank != 0)
            x = 0.0;
        if (!same && f->kind == 'r')
            x /= m->world_size;
        if (f->type == 'i' || f->type == 'u')
            x = (double)(int64_t)x; /* a mean of integers: truncated */
        totals[k] = x;
    }
    return strata_rt_stats_resume(rt, totals);
}

/* ---- files: write with a digest, read whole */

/* Test fault injection (runtime/testing.h): counts one file-system call of a
 * save; true (errno set) when it is the call armed to fail. */
static bool io_fault(strata_runtime *rt)
{
    const int e = rt ? strata_rt_ckpt_io_fault(rt) : 0;
    if (e)
        errno = e;
    return e != 0;
}

typedef struct wfile {
    strata_runtime *rt; /* fault injection */
    int fd;
    const char *path;
    EVP_MD_CTX *md;
    uint64_t bytes;
} wfile;

static strata_status wfile_open(strata_runtime *rt, wfile *w, const char *path)
{
    memset(w, 0, sizeof *w);
    w->rt = rt;
    w->path = path;
    w->fd = io_fault(rt) ? -1 : open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (w->fd < 0)
        return strata_error(STRATA_ERR_IO, "checkpoint: cannot create %s: %s", path,
                            strerror(errno));
    w->md = EVP_MD_CTX_new();
    if (!w->md || EVP_DigestInit_ex(w->md, EVP_sha256(), NULL) != 1) {
        EVP_MD_CTX_free(w->md);
        close(w->fd);
        return strata_error(STRATA_ERR_NOMEM, "checkpoint: SHA-256 context: out of memory");
    }
    return STRATA_OK;
}

/* write() all of buf: 0, or the errno of the failure (-1: a short write). */
static int write_all(wfile *w, const void *buf, size_t n)
{
    const char *p = buf;
    while (n > 0) {
        ssize_t k = io_fault(w->rt) ? -1 : write(w->fd, p, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return k < 0 ? errno : -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

static strata_status write_status(const wfile *w, int err)
{
    return err == 0 ? STRATA_OK
                    : strata_error(STRATA_ERR_IO, "checkpoint: writing %s: %s", w->path,
                                   err > 0 ? strerror(err) : "short write");
}

static strata_status wfile_write(wfile *w, const void *buf, size_t n)
{
    EVP_DigestUpdate(w->md, buf, n);
    w->bytes += n;
    return write_status(w, write_all(w, buf, n));
}

/* A large buffer's SHA-256 and its write() at once, on the two threads of
 * a team: the hash and the kernel's copy into the page cache are each
 * about half of a save's CPU time (perf, on the development VM), and
 * neither needs the other. Item 0 hashes, item 1 writes (whichever thread
 * runs it: it records its errno; the message is made on the caller's
 * thread, whose last error it is). */
#define PAIR_MIN ((size_t)1 << 20) /* bytes from which a buffer is hashed beside its write */

typedef struct pair_job {
    wfile *w;
    const void *buf;
    size_t n;
    int err;
} pair_job;

static void pair_item(void *user, int i)
{
    pair_job *j = user;
    if (i == 0)
        EVP_DigestUpdate(j->w->md, j->buf, j->n);
    else
        j->err = write_all(j->w, j->buf, j->n);
}

static strata_status wfile_write_pair(wfile *w, strata_worker_team *team, const void *buf,
                                      size_t n)
{
    if (!team || n < PAIR_MIN)
        return wfile_write(w, buf, n);
    pair_job j = {.w = w, .buf = buf, .n = n};
    strata_worker_team_run(team, 2, pair_item, &j);
    w->bytes += n;
    return write_status(w, j.err);
}

/* Allocate the file's blocks for the `n` bytes it will hold, before they
 * are written (as fio does by default): the file system places them at
 * once rather than at the write-back, and the fsync then flushes data into
 * blocks that exist. Advisory (KEEP_SIZE: the file's size grows with what
 * is written, as without it): a file system that cannot preallocate just
 * writes, and a disk that is full fails the writes. */
static void wfile_reserve(wfile *w, uint64_t n)
{
    if (n > 0)
        (void)fallocate(w->fd, FALLOC_FL_KEEP_SIZE, 0, (off_t)n);
}

/* fsync and close one file (its path for the messages). */
static strata_status fd_sync_close(strata_runtime *rt, int fd, const char *path, strata_status st)
{
    if (st == STRATA_OK && (io_fault(rt) || fsync(fd) != 0))
        st = strata_error(STRATA_ERR_IO, "checkpoint: fsync %s: %s", path, strerror(errno));
    /* The descriptor is released even when the injected close "fails". */
    const bool fail_close = st == STRATA_OK && io_fault(rt);
    const int e = errno;
    if ((close(fd) != 0 || fail_close) && st == STRATA_OK)
        st = strata_error(STRATA_ERR_IO, "checkpoint: close %s: %s", path,
                          strerror(fail_close ? e : errno));
    return st;
}

/* A rank's files, written whole, whose fsyncs wait until the last of them
 * is written (fsync_set_flush): the save stops for the disk once rather
 * than at each file's end, and the first fsync's journal commit carries
 * the others' metadata (on ext4: the later ones find little left). Every
 * file is still fsynced before the rows reach rank 0 and the manifest
 * names it (the same fsyncs and closes, fault-injected as before). */
#define FSYNC_SET_MAX 4
typedef struct fsync_set {
    int n;
    int fd[FSYNC_SET_MAX];
    char *path[FSYNC_SET_MAX];
} fsync_set;

/* fsync and close every file of the set (st != OK: only close), in the
 * order they were written; the first error is returned. */
static strata_status fsync_set_flush(strata_runtime *rt, fsync_set *set, strata_status st)
{
    for (int i = 0; i < set->n; i++) {
        if (st == STRATA_OK)
            st = fd_sync_close(rt, set->fd[i], set->path[i], st);
        else
            close(set->fd[i]);
        free(set->path[i]);
    }
    set->n = 0;
    return st;
}

/* Digest; then fsync and close, or, with a set (that has room), leave both
 * to fsync_set_flush. On st != OK only releases. */
static strata_status wfile_close(wfile *w, strata_status st, uint8_t digest[32], fsync_set *set)
{
    unsigned len = 0;
    if (st == STRATA_OK && digest)
        EVP_DigestFinal_ex(w->md, digest, &len);
    EVP_MD_CTX_free(w->md);
    char *path = st == STRATA_OK && set && set->n < FSYNC_SET_MAX ? strdup(w->path) : NULL;
    if (!path)
        return fd_sync_close(w->rt, w->fd, w->path, st);
    set->fd[set->n] = w->fd;
    set->path[set->n++] = path;
    return STRATA_OK;
}

static void sha256(const void *buf, size_t n, uint8_t out[32])
{
    unsigned len = 0;
    EVP_Digest(buf, n, out, &len, EVP_sha256(), NULL);
}

static void hex32(const uint8_t d[32], char out[65])
{
    for (int i = 0; i < 32; i++)
        snprintf(out + 2 * i, 3, "%02x", d[i]);
}

static strata_status fsync_dir(strata_runtime *rt, const char *path)
{
    int fd = io_fault(rt) ? -1 : open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return strata_error(STRATA_ERR_IO, "checkpoint: open directory %s: %s", path,
                            strerror(errno));
    int rc = io_fault(rt) ? -1 : fsync(fd);
    int e = errno;
    close(fd);
    return rc == 0 ? STRATA_OK
                   : strata_error(STRATA_ERR_IO, "checkpoint: fsync %s: %s", path, strerror(e));
}

/* Open a regular checkpoint file for reading and give its size (at most
 * `cap` bytes). STRATA_ERR_IO when it is missing, unreadable or not a regular
 * file, STRATA_ERR_DATA when it is larger than cap; *fd is open only on OK. */
static strata_status open_checked(const char *path, uint64_t cap, int *fd_out, size_t *n_out)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return strata_error(STRATA_ERR_IO, "checkpoint: %s: %s", path,
                            errno == ENOENT ? "missing file" : strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return strata_error(STRATA_ERR_IO, "checkpoint: %s is not a regular file", path);
    }
    if ((uint64_t)sb.st_size > cap) {
        close(fd);
        return strata_error(STRATA_ERR_DATA, "checkpoint: %s has %lld bytes, more than expected "
                            "(%llu)", path, (long long)sb.st_size, (unsigned long long)cap);
    }
    *fd_out = fd;
    *n_out = (size_t)sb.st_size;
    return STRATA_OK;
}

/* Read a regular file whole (at most `cap` bytes). STRATA_ERR_IO when it is
 * missing or unreadable, STRATA_ERR_DATA when it is larger than cap. */
static strata_status read_file(const char *path, uint64_t cap, uint8_t **out, size_t *len)
{
    *out = NULL;
    *len = 0;
    int fd;
    size_t n;
    strata_status ost = open_checked(path, cap, &fd, &n);
    if (ost != STRATA_OK)
        return ost;
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf) {
        close(fd);
        return strata_error(STRATA_ERR_NOMEM, "checkpoint: %s: out of memory (%zu bytes)", path,
                            n);
    }
    size_t got = 0;
    while (got < n) {
        ssize_t k = read(fd, buf + got, n - got);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break;
        got += (size_t)k;
    }
    close(fd);
    if (got != n) {
        free(buf);
        return strata_error(STRATA_ERR_IO, "checkpoint: reading %s: %s", path,
                            "short read");
    }
    *out = buf;
    *len = n;
    return STRATA_OK;
}

/* A checkpoint file mapped read-only (map_file), or an empty one. */
static const uint8_t empty_file[1];

#define MAP_AHEAD ((size_t)32 << 20) /* bytes of a mapped file asked for ahead of the hash */
#define MAP_STEP ((size_t)4 << 20)   /* bytes hashed between read-ahead requests */

/* Map a regular file whole, read-only (at most `cap` bytes; same errors as
 * read_file), and SHA-256 it in the same pass: the file's pages are used
 * where they lie in the page cache, with no copy into fresh memory (which
 * the kernel must zero first: on the development VM that cost as much as
 * the read itself). The hash asks the kernel for the next MAP_AHEAD bytes
 * (POSIX_FADV_WILLNEED) as it goes, so that a cold file's reads overlap
 * the hashing. A published checkpoint's files are never written again (a
 * save writes a new directory, O_EXCL, and renames it; --keep unlinks,
 * which leaves a mapping intact): a file truncated by another program while
 * it is mapped would end the process with SIGBUS. Unmap with unmap_file. */
static strata_status map_file(const char *path, uint64_t cap, const uint8_t **out, size_t *len,
                              uint8_t digest[32])
{
    *out = NULL;
    *len = 0;
    int fd;
    size_t n;
    strata_status ost = open_checked(path, cap, &fd, &n);
    if (ost != STRATA_OK)
        return ost;
    const uint8_t *buf = empty_file;
    if (n > 0) {
        void *m = mmap(NULL, n, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            const int e = errno;
            close(fd);
            return strata_error(e == ENOMEM ? STRATA_ERR_NOMEM : STRATA_ERR_IO,
                                "checkpoint: cannot map %s (%zu bytes): %s", path, n,
                                strerror(e));
        }
        buf = m;
        (void)madvise(m, n, MADV_SEQUENTIAL);
    }
    EVP_MD_CTX *md = digest ? EVP_MD_CTX_new() : NULL;
    if (digest && (!md || EVP_DigestInit_ex(md, EVP_sha256(), NULL) != 1)) {
        EVP_MD_CTX_free(md);
        if (n > 0)
            munmap((void *)buf, n);
        close(fd);
        return strata_error(STRATA_ERR_NOMEM, "checkpoint: SHA-256 context: out of memory");
    }
    if (md) {
        (void)posix_fadvise(fd, 0, (off_t)(n < MAP_AHEAD ? n : MAP_AHEAD), POSIX_FADV_WILLNEED);
        for (size_t off = 0; off < n; off += MAP_STEP) {
            const size_t k = n - off < MAP_STEP ? n - off : MAP_STEP;
            if (off + MAP_AHEAD < n)
                (void)posix_fadvise(fd, (off_t)(off + MAP_AHEAD), (off_t)MAP_STEP,
                                    POSIX_FADV_WILLNEED);
            EVP_DigestUpdate(md, buf + off, k);
        }
        unsigned dl = 0;
        EVP_DigestFinal_ex(md, digest, &dl);
        EVP_MD_CTX_free(md);
    }
    close(fd); /* the mapping stays */
    *out = buf;
    *len = n;
    return STRATA_OK;
}

static void unmap_file(const uint8_t *buf, size_t len)
{
    if (buf && buf != empty_file && len > 0)
        munmap((void *)buf, len);
}

/* Remove a checkpoint directory (its plain files, then itself). */
static void remove_dir(const char *path)
{
    DIR *d = opendir(path);
    if (d) {
        struct dirent *de;
        char p[4096];
        while ((de = readdir(d)))
            if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) {
                snprintf(p, sizeof p, "%s/%s", path, de->d_name);
                unlink(p);
            }
        closedir(d);
    }
    rmdir(path);
}

/* ---- safetensors writer */

typedef enum item_src { SRC_BACKEND, SRC_HOST, SRC_SLOT } item_src;

typedef struct st_item {
    char *name;
    strata_st_dtype dtype;
    int ndim;
    int64_t shape[4];
    size_t bytes;
    item_src src;
    const void *ptr; /* backend or host memory */
    int blk, slot;   /* SRC_SLOT */
    int page;        /* 1 + the engine entry whose paged state holds it (0: none) */
} st_item;

typedef struct item_list {
    st_item *v;
    int n, cap;
} item_list;

static strata_status items_add(item_list *l, st_item it)
{
    if (!it.name)
        return strata_error(STRATA_ERR_NOMEM, "checkpoint: out of memory");
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 64;
        st_item *nv = realloc(l->v, (size_t)cap * sizeof *nv);
        if (!nv) {
            free(it.name);
            return strata_error(STRATA_ERR_NOMEM, "checkpoint: out of memory");
        }
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = it;
    return STRATA_OK;
}

static void items_free(item_list *l)
{
    for (int i = 0; i < l->n; i++)
        free(l->v[i].name);
    free(l->v);
    memset(l, 0, sizeof *l);
}

static char *joinf(const char *a, const char *b)
{
    size_t n = strlen(a) + strlen(b) + 2;
    char *s = malloc(n);
    if (s)
        snprintf(s, n, "%s/%s", a, b);
    return s;
}

/* Called before item i's bytes are written (or, after a failure, where they
 * would have been, with ptr NULL): may make them available and return where
 * they are. */
typedef strata_status (*item_walk_fn)(void *ctx, int i, const void **ptr);

static strata_status st_write_walk(strata_runtime *rt, const char *path, const item_list *l,
                                   item_walk_fn walk, void *ctx, uint64_t *bytes,
                                   uint8_t digest[32], fsync_set *set);

static strata_status st_write(strata_runtime *rt, const char *path, const item_list *l,
                              uint64_t *bytes, uint8_t digest[32], fsync_set *set)
{
    return st_write_walk(rt, path, l, NULL, NULL, bytes, digest, set);
}

/* Write items `l` as a safetensors file; `walk` (may be NULL) runs before
 * every item, also after a failure (it may be a collective every rank
 * walks), and gives the item's bytes. With `set`, the file's fsync is left
 * to fsync_set_flush (wfile_close). */
static strata_status st_write_walk(strata_runtime *rt, const char *path, const item_list *l,
                                   item_walk_fn walk, void *ctx, uint64_t *bytes,
                                   uint8_t digest[32], fsync_set *set)
{
    strata_rt_view v;
    strata_rt_view_get(rt, &v);
    json_object *h = json_object_new_object(), *meta = json_object_new_object();
    if (!h || !meta) {
        json_object_put(h);
        json_object_put(meta);
        return strata_error(STRATA_ERR_NOMEM, "checkpoint: out of memory");
    }
    json_object_object_add(meta, "format", json_object_new_string("pt"));
    json_object_object_add(meta, "writer", json_object_new_string("strata " STRATA_VERSION_STRING));
    json_object_object_add(h, "__metadata__", meta);
    uint64_t at = 0;
    size_t max_bytes = 1;
    for (int i = 0; i < l->n; i++) {
        const st_item *it = &l->v[i];
        json_object *t = json_object_new_object(), *sh = json_object_new_array(),
                    *off = json_object_new_array();
        json_object_object_add(t, "dtype", json_object_new_string(strata_st_dtype_name(it->dtype)));
        for (int d = 0; d < it->ndim; d++)
            json_object_array_add(sh, json_object_new_int64(it->shape[d]));
        json_object_object_add(t, "shape", sh);
        json_object_array_add(off, json_object_new_int64((int64_t)at));
        json_object_array_add(off, json_object_new_int64((int64_t)(at + it->bytes)));
        json_object_object_add(t, "data_offsets", off);
        json_object_object_add(h, it->name, t);
        at += it->bytes;
        max_bytes = it->bytes > max_bytes ? it->bytes : max_bytes;
    }
    const char *txt = json_object_to_json_string_ext(h, JSON_C_TO_STRING_PLAIN);
    size_t hl = strlen(txt), padded = (hl + 7) / 8 * 8;
    char *hdr = malloc(8 + padded);
    void *stage = malloc(max_bytes);
    strata_status st = hdr && stage ? STRATA_OK
                                    : strata_error(STRATA_ERR_NOMEM, "checkpoint: out of memory");
    wfile w = {.fd = -1};
    strata_worker_team *team = NULL;
    if (st == STRATA_OK) {
        for (int i = 0; i < 8; i++)
            hdr[i] = (char)((uint64_t)padded >> (8 * i) & 0xff);
        memcpy(hdr + 8, txt, hl);
        memset(hdr + 8 + hl, ' ', padded - hl);
        st = wfile_open(rt, &w, path);
        /* a second thread for the hash, when there is enough to hash (none
         * to be had: the caller hashes and writes in turn) */
        if (st == STRATA_OK && at >= 4 * PAIR_MIN &&
            strata_worker_team_create(2, &team) != STRATA_OK)
            team = NULL;
        if (st == STRATA_OK) {
            wfile_reserve(&w, 8 + padded + at);
            st = wfile_write(&w, hdr, 8 + padded);
            for (int i = 0; i < l->n; i++) {
                const st_item *it = &l->v[i];
                const void *src = it->ptr;
                if (walk) {
                    strata_status sw = walk(ctx, i, st == STRATA_OK ? &src : NULL);
                    if (st == STRATA_OK)
                        st = sw;
                }
                if (st != STRATA_OK) {
                    if (walk)
                        continue; /* the walk goes on: the other ranks walk with it */
                    break;
                }
                if (it->bytes == 0)
                    continue;
                /* host memory is written from where it is; the rest
                 * through the staging buffer */
                const void *from = it->src == SRC_HOST ? src : stage;
                if (it->src == SRC_BACKEND)
                    st = strata_backend_copy(v.be, stage, src, it->bytes);
                else if (it->src == SRC_SLOT)
                    st = strata_refresh_slot_read(v.engine, it->blk, it->slot, stage);
                if (st == STRATA_OK)
                    st = wfile_write_pair(&w, team, from, it->bytes);
            }
            uint64_t n = w.bytes;
            st = wfile_close(&w, st, digest, set);
            *bytes = n;
        }
    }
    /* a failure before the items: the walk still runs (collective) */
    if (walk && w.fd < 0)
        for (int i = 0; i < l->n; i++)
            (void)walk(ctx, i, NULL);
    strata_worker_team_destroy(team);
    free(stage);
    free(hdr);
    json_object_put(h);
    return st;
}

static strata_status json_write(strata_runtime *rt, const char *path, json_object *o,
                                uint64_t *bytes, uint8_t digest[32], fsync_set *set)
{
    const char *txt = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY |
                                                            JSON_C_TO_STRING_NOSLASHESCAPE);
    if (!txt)
        return strata_error(STRATA_ERR_NOMEM, "checkpoint: out of memory");
    wfile w;
    strata_status st = wfile_open(rt, &w, path);
    if (st != STRATA_OK)
        return st;
    st = wfile_write(&w, txt, strlen(txt));
    if (st == STRATA_OK)
        st = wfile_write(&w, "\n", 1);
    const uint64_t n = w.bytes;
    st = wfile_close(&w, st, digest, set);
    if (bytes)
        *bytes = n;
    return st;
}


/* ---- what a rank saves */

static const char *const slot_state_names[] = {"free", "pending", "computing", "ready",
                                               "installed", "failed"};

static bool owns(const strata_rt_param_view *p)
{
    return p->state != NULL;
}

/* The family tensors of an owned parameter, with a count check. */
static strata_status family_tensors(const strata_rt_param_view *p, strata_tensor_info **out,
                                    int *n)
{
    *out = NULL;
    *n = p->fam->tensors(p->state, NULL, 0);
    if (*n <= 0)
        return STRATA_OK;
    *out = calloc((size_t)*n, sizeof **out);
    if (!*out)
        return strata_error(STRATA_ERR_NOMEM, "checkpoint: out of memory");
    if (p->fam->tensors(p->state, *out, *n) != *n) {
        free(*out);
        *out = NULL;
        return strata_error(STRATA_ERR_INTERNAL, "checkpoint: '%s' state enumeration changed",
                            p->name);
    }
    return STRATA_OK;
}

static size_t info_bytes(const strata_tensor_info *ti)
{
    size_t n = strata_st_dtype_size(dtype_of[ti->dtype]);
    for (int d = 0; d < ti->ndim; d++)
        n *= (size_t)ti->shape[d];
    return n;
}

/* The owned parameter whose engine handle is `entry` (its view in `out`),
 * or -1. */
static int param_of_entry(const strata_runtime *rt, const strata_rt_view *v, int entry,
                          strata_rt_param_view *out)
{
    for (int i = 0; i < v->n_params; i++) {
        strata_rt_param_view p;
        strata_rt_param_get(rt, i, &p);
        if (p.state && p.entry == entry) {
            *out = p;
            return i;
        }
    }
    return -1;
}

/* One row of rank-R.json's table of the tensors in rank-R.safetensors. */
static void tensor_row(json_object *tensors, const char *name, const char *param,
                       const char *tier, int64_t step)
{
    json_object *e = json_object_new_object();
    json_object_object_add(e, "name", json_object_new_string(name ? name : ""));
    json_object_object_add(e, "param", json_object_new_string(param));
    json_object_object_add(e, "tier", json_object_new_string(tier));
    json_object_object_add(e, "step", json_object_new_int64(step));
    json_object_array_add(tensors, e);
}

/* The family tensors of every parameter owned here: items of
 * rank-R.safetensors, rows of the tensor table. */
static strata_status state_items(strata_runtime *rt, const strata_rt_view *v, item_list *l,
                                 json_object *tensors)
{
    strata_status st = STRATA_OK;
    for (int i = 0; i < v->n_params && st == STRATA_OK; i++) {
        strata_rt_param_view p;
        strata_rt_param_get(rt, i, &p);
        if (!owns(&p))
            continue;
        strata_tensor_info *ti = NULL;
        int n = 0;
        st = family_tensors(&p, &ti, &n);
        for (int k = 0; k < n && st == STRATA_OK; k++) {
            if ((int)ti[k].dtype < 0 || ti[k].dtype > STRATA_BF16 || ti[k].ndim < 0 ||
                ti[k].ndim > 2) {
                st = strata_error(STRATA_ERR_INTERNAL, "checkpoint: '%s' tensor '%s' has dtype %d "
                                  "ndim %d", p.name, ti[k].name, (int)ti[k].dtype, ti[k].ndim);
                break;
            }
            const bool dev = ti[k].where == STRATA_TIER_DEVICE;
            st_item it = {.dtype = dtype_of[ti[k].dtype], .ndim = ti[k].ndim,
                          .shape = {ti[k].shape[0], ti[k].shape[1]}, .bytes = info_bytes(&ti[k]),
                          .src = dev ? SRC_BACKEND : SRC_HOST, .ptr = ti[k].data,
                          .page = strata_refresh_paged(v->engine, p.entry) ? p.entry + 1 : 0};
            it.name = joinf(p.name, ti[k].name);
            tensor_row(tensors, it.name, p.name, dev ? "device" : "host", v->t);
            st = items_add(l, it);
        }
        free(ti);
    }
    return st;
}

/* Engine block i's description and slots: a row of the block table, and
 * for each ready or installed slot an item (its bytes, U8) and a tensor
 * row. */
static strata_status block_items(strata_runtime *rt, const strata_rt_view *v, int i,
                                 item_list *l, json_object *tensors, json_object *blocks)
{
    strata_refresh_block_desc d;
    strata_rt_param_view p;
    strata_status st = strata_refresh_block_describe(v->engine, i, &d);
    if (st != STRATA_OK)
        return st;
    if (param_of_entry(rt, v, d.entry, &p) < 0)
        return strata_error(STRATA_ERR_INTERNAL, "checkpoint: engine entry %d has no parameter",
                            d.entry);
    json_object *b = json_object_new_object(), *slots = json_object_new_array();
    json_object_object_add(b, "param", json_object_new_string(p.name));
    json_object_object_add(b, "block", json_object_new_int(d.block));
    json_object_object_add(b, "slot_bytes", json_object_new_int64((int64_t)d.slot_bytes));
    json_object_object_add(b, "on_nvme", json_object_new_boolean(d.on_nvme));
    json_object_object_add(b, "inline", json_object_new_boolean(d.inline_));
    json_object_object_add(b, "frequency", json_object_new_int(d.frequency));
    json_object_object_add(b, "start", json_object_new_int64(d.start));
    json_object_object_add(b, "lag", json_object_new_int(d.lag));
    json_object_object_add(b, "offset", json_object_new_int(d.offset));
    json_object_object_add(b, "staleness", json_object_new_int(d.staleness));
    json_object_object_add(b, "mode", json_object_new_int((int)d.mode));
    json_object_object_add(b, "have", json_object_new_int((int)d.have));
    for (int k = 0; k < d.n_slots && st == STRATA_OK; k++) {
        strata_coh_slot_state s;
        int64_t ver;
        unsigned failed;
        st = strata_refresh_slot_get(v->engine, i, k, &s, &ver, &failed);
        if (st == STRATA_OK && (s == STRATA_SLOT_PENDING || s == STRATA_SLOT_COMPUTING))
            st = strata_error(STRATA_ERR_INTERNAL, "checkpoint: '%s' block %d slot %d still "
                              "in flight after the drain", p.name, d.block, k);
        if (st != STRATA_OK)
            break;
        json_object *js = json_object_new_object();
        json_object_object_add(js, "state", json_object_new_string(slot_state_names[s]));
        json_object_object_add(js, "version", json_object_new_int64(ver));
        json_object_object_add(js, "failed", json_object_new_int((int)failed));
        json_object_array_add(slots, js);
        if (s != STRATA_SLOT_READY && s != STRATA_SLOT_INSTALLED)
            continue;
        char nm[64];
        snprintf(nm, sizeof nm, "engine.%d.%d", d.block, k);
        st_item it = {.dtype = STRATA_ST_U8, .ndim = 1, .shape = {(int64_t)d.slot_bytes},
                      .bytes = d.slot_bytes, .src = SRC_SLOT, .blk = i, .slot = k};
        it.name = joinf(p.name, nm);
        tensor_row(tensors, it.name, p.name, d.on_nvme ? "nvme" : "host", ver);
        st = items_add(l, it);
    }
    json_object_object_add(b, "slots", slots);
    json_object_array_add(blocks, b);
    return st;
}

/* rank-R.safetensors's items and rank-R.json's tables: the family tensors,
 * then the engine's blocks. */
static strata_status rank_items(strata_runtime *rt, const strata_rt_view *v, item_list *l,
                                json_object *tensors, json_object *blocks)
{
    strata_status st = state_items(rt, v, l, tensors);
    const int nb = strata_refresh_block_count(v->engine);
    for (int i = 0; i < nb && st == STRATA_OK; i++)
        st = block_items(rt, v, i, l, tensors, blocks);
    return st;
}

/* Rows of one allreduce: [ok, bytes st, bytes json, digest st (32), digest json (32), jobs,
 * the statistics counters (STRATA_RT_N_STATS)] */
enum { ROW_OK, ROW_BYTES_ST, ROW_BYTES_JSON, ROW_DIG_ST, ROW_DIG_JSON = ROW_DIG_ST + 32,
       ROW_JOBS = ROW_DIG_JSON + 32, ROW_STATS, ROW_N = ROW_STATS + STRATA_RT_N_STATS };

static void rank_file(char *buf, size_t n, int rank, const char *ext)
{
    snprintf(buf, n, "rank-%05d.%s", rank, ext);
}

/* ---- save */

/* One save on this rank: what its phases hand on. */
typedef struct saver {
    strata_runtime *rt;
    strata_rt_view v;
    const char *dir, *user_json;
    double t0, t_drain;      /* start, and the drain's seconds */
    int64_t jobs, all_jobs;  /* refresh jobs drained here, and over the ranks */
    char *tmp;               /* the temporary directory's path (every rank) */
    bool tmp_made;           /* rank 0 created it */
    double *rows;            /* world x ROW_N: what each rank wrote (one allreduce) */
    uint64_t bytes;          /* bytes this rank wrote */
    uint64_t model_bytes;    /* rank 0: model.safetensors */
    uint8_t model_digest[32];
    int walk_layer;          /* the managed layer materialized for the model file, or -1 */
    fsync_set files;         /* this rank's files, written, to fsync before the gather */
} saver;

/* The manifest's parameter table: every parameter's name, shape, routing,
 * owner layout and refresh phase, and its own lr and weight decay where
 * strata_param_set_hyper gave them. */
static json_object *manifest_params(strata_runtime *rt, const strata_rt_view *v)
{
    json_object *params = json_object_new_array();
    for (int i = 0; i < v->n_params; i++) {
        strata_rt_param_view p;
        strata_rt_param_get(rt, i, &p);
        json_object *e = json_object_new_object(), *sh = json_object_new_array();
        json_object_object_add(e, "name", json_object_new_string(p.name));
        for (int d = 0; d < p.ndim; d++)
            json_object_array_add(sh, json_object_new_int64(p.shape[d]));
        json_object_object_add(e, "shape", sh);
        json_object_object_add(e, "layer", json_object_new_int(p.layer));
        json_object_object_add(e, "optimizer", json_object_new_string(strata_optimizer_name(p.routed)));
        json_object_object_add(e, "tail", json_object_new_boolean(p.tail));
        json_object_object_add(e, "owner", json_object_new_int(p.owner));
        json_object_object_add(e, "shard_offset", json_object_new_int64((int64_t)p.shard_offset));
        json_object_object_add(e, "tail_offset",
                               json_object_new_int64(p.tail ? (int64_t)p.tail_offset : -1));
        json_object_object_add(e, "refresh_offset", json_object_new_int(p.refresh_offset));
        if (p.hyper_set) { /* strata_param_set_hyper's values (absent: the configured) */
            json_object_object_add(e, "lr", json_object_new_double((double)p.lr));
            json_object_object_add(e, "weight_decay",
                                   json_object_new_double((double)p.weight_decay));
        }
        json_object_array_add(params, e);
    }
    return params;
}

static json_object *file_entry(const char *name, uint64_t bytes, const uint8_t digest[32])
{
    char hex[65];
    hex32(digest, hex);
    json_object *f = json_object_new_object();
    json_object_object_add(f, "name", json_object_new_string(name));
    json_object_object_add(f, "bytes", json_object_new_int64((int64_t)bytes));
    json_object_object_add(f, "sha256", json_object_new_string(hex));
    return f;
}

/* The manifest's file table: the model file, then each rank's state and
 * table, with sizes and digests. */
static json_object *manifest_files(const saver *s)
{
    json_object *files = json_object_new_array();
    json_object_array_add(files, file_entry(MODEL_FILE, s->model_bytes, s->model_digest));
    for (int r = 0; r < s->v.world; r++) {
        const double *row = s->rows + (size_t)r * ROW_N;
        for (int which = 0; which < 2; which++) {
            char name[64];
            uint8_t dig[32];
            for (int k = 0; k < 32; k++)
                dig[k] = (uint8_t)row[(which ? ROW_DIG_JSON : ROW_DIG_ST) + k];
            rank_file(name, sizeof name, r, which ? "json" : "safetensors");
            json_object_array_add(files, file_entry(name, (uint64_t)(int64_t)
                                                    row[which ? ROW_BYTES_JSON : ROW_BYTES_ST],
                                                    dig));
        }
    }
    return files;
}

/* Every rank's statistics counters at the save, by name. */
static json_object *manifest_rank_stats(const saver *s)
{
    json_object *rank_stats = json_object_new_array();
    for (int r = 0; r < s->v.world; r++) {
        const double *row = s->rows + (size_t)r * ROW_N;
        json_object *o = json_object_new_object();
        for (int k = 0; k < STRATA_RT_N_STATS; k++) {
            const strata_rt_stat_field *f = strata_rt_stat_field_at(k);
            json_object_object_add(o, f->name,
                                   f->type == 'd'
                                       ? json_object_new_double(row[ROW_STATS + k])
                                       : json_object_new_int64((int64_t)row[ROW_STATS + k]));
        }
        json_object_array_add(rank_stats, o);
    }
    return rank_stats;
}

/* The caller's user JSON: one object and nothing after it but white space
 * (json_tokener_parse alone would drop trailing content silently). NULL
 * when it is anything else. */
static json_object *user_json_parse(const char *text)
{
    json_tokener *tok = json_tokener_new();
    if (!tok)
        return NULL;
    const size_t n = strlen(text);
    json_object *u = json_tokener_parse_ex(tok, text, (int)(n < INT32_MAX ? n : INT32_MAX));
    size_t end = json_tokener_get_error(tok) == json_tokener_success
                     ? json_tokener_get_parse_end(tok) : 0;
    json_tokener_free(tok);
    while (end < n && (text[end] == ' ' || text[end] == '\t' || text[end] == '\n' ||
                       text[end] == '\r'))
        end++;
    if (!u || n >= INT32_MAX || end != n || !json_object_is_type(u, json_type_object)) {
        json_object_put(u);
        return NULL;
    }
    return u;
}

/* Rank 0: manifest.json into the temporary directory (its size in
 * `bytes`, also on a failed write). */
static strata_status write_manifest(const saver *s, uint64_t *bytes)
{
    json_object *m = json_object_new_object();
    if (!m)
        return strata_error(STRATA_ERR_NOMEM, "checkpoint: out of memory");
    json_object_object_add(m, "format", json_object_new_string(STRATA_CKPT_FORMAT));
    json_object_object_add(m, "format_version", json_object_new_int(STRATA_CKPT_FORMAT_VERSION));
    json_object_object_add(m, "strata_version", json_object_new_string(STRATA_VERSION_STRING));
    json_object_object_add(m, "step", json_object_new_int64(s->v.t));
    json_object_object_add(m, "lr_scale", json_object_new_double((double)s->v.lr_scale));
    json_object_object_add(m, "world_size", json_object_new_int(s->v.world));
    json_object_object_add(m, "drained", json_object_new_boolean(true));
    json_object_object_add(m, "drained_jobs", json_object_new_int64(s->all_jobs));
    json_object_object_add(m, "config", config_json(s->v.cfg));
    json_object_object_add(m, "params", manifest_params(s->rt, &s->v));
    json_object_object_add(m, "files", manifest_files(s));
    json_object_object_add(m, "rank_stats", manifest_rank_stats(s));
    json_object *user = NULL;
    if (s->user_json) {
        user = user_json_parse(s->user_json);
        if (!user) {
            json_object_put(user);
            json_object_put(m);
            return strata_error(STRATA_ERR_INVALID_ARG, "strata_save: user_json is not a JSON "
                                "object");
        }
    }
    json_object_object_add(m, "user", user ? user : json_object_new_object());
    char *path = joinf(s->tmp, "manifest.json");
    strata_status st = path ? json_write(s->rt, path, m, bytes, NULL, NULL)
                            : strata_error(STRATA_ERR_NOMEM, "checkpoint: out of memory");
    free(path);
    json_object_put(m);
    return st;
}

/* Move `tmp` to `dir` (exchanging with an existing one), fsync the parent.
 * On failure `dir` is as it was (absent, or the previous checkpoint) and
 * `tmp` holds the new files for the caller to remove: a rename whose parent
 * fsync failed is undone, since an error must not leave a checkpoint the
 * caller believes unsaved under the final name. */
static strata_status publish(strata_runtime *rt, const char *tmp, const char *dir)
{
    bool exchanged = false;
    if (io_fault(rt) || rename(tmp, dir) != 0) {
        if (errno != ENOTEMPTY && errno != EEXIST && errno != EISDIR)
            return strata_error(STRATA_ERR_IO, "checkpoint: rename %s -> %s: %s", tmp, dir,
                                strerror(errno));
        if (io_fault(rt) || renameat2(AT_FDCWD, tmp, AT_FDCWD, dir, RENAME_EXCHANGE) != 0)
            return strata_error(STRATA_ERR_IO, "checkpoint: exchange %s <-> %s: %s", tmp, dir,
                                strerror(errno));
        exchanged = true; /* tmp is now the old checkpoint */
    }
    char *parent = strdup(dir);
    strata_status st = parent ? STRATA_OK
                              : strata_error(STRATA_ERR_NOMEM, "checkpoint: out of memory");
    if (st == STRATA_OK) {
        char *slash = strrchr(parent, '/');
        const char *pd = slash ? (slash == parent ? "/" : (*slash = '\0', parent)) : ".";
        st = fsync_dir(rt, pd);
    }
    free(parent);
    if (st == STRATA_OK) {
        if (exchanged)
            remove_dir(tmp);
        return STRATA_OK;
    }
    const int undo = exchanged ? renameat2(AT_FDCWD, tmp, AT_FDCWD, dir, RENAME_EXCHANGE)
                               : rename(dir, tmp);
    if (undo != 0) {
        /* Double fault: the new checkpoint, complete and fsynced, stays; the
         * old one (tmp after an exchange) goes as on success. */
        strata_log(rt, STRATA_LOG_ERROR, "ckpt", "%s: could not undo the rename after a failed "
                   "fsync of its parent (%s); its files are complete and fsynced", dir,
                   strerror(errno));
        if (exchanged)
            remove_dir(tmp);
    }
    return st;
}


/* True when directory `dir` has no entries (or cannot be read). */
static bool dir_empty(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return true;
    bool empty = true;
    struct dirent *de;
    while (empty && (de = readdir(d)))
        empty = strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0;
    closedir(d);
    return empty;
}

/* Arguments and state a save needs before it touches anything. */
static strata_status save_check(const strata_runtime *rt, const char *dir, const char *user_json)
{
    if (!rt || !dir || !dir[0])
        return strata_error(STRATA_ERR_INVALID_ARG, "strata_save: NULL runtime or directory");
    strata_rt_view v;
    strata_rt_view_get(rt, &v);
    if (!v.committed)
        return strata_error(STRATA_ERR_STATE, "strata_save: call strata_commit first");
    if (user_json) {
        json_object *u = user_json_parse(user_json);
        const bool ok = u != NULL;
        json_object_put(u);
        if (!ok)
            return strata_error(STRATA_ERR_INVALID_ARG, "strata_save: user_json is not one JSON "
                                "object (nothing may follow it)");
    }
    /* A checkpoint replaces only a checkpoint: an existing file, or a
     * directory with entries but no strata manifest, is the user's. */
    struct stat sb;
    if (stat(dir, &sb) == 0) {
        if (!S_ISDIR(sb.st_mode))
            return strata_error(STRATA_ERR_INVALID_ARG, "strata_save: %s exists and is not a "
                                "directory; refusing to replace it", dir);
        char *mpath = joinf(dir, "manifest.json");
        if (!mpath)
            return strata_error(STRATA_ERR_NOMEM, "checkpoint: out of memory");
        json_object *m = json_object_from_file(mpath), *f;
        free(mpath);
        const bool ckpt = m && json_object_object_get_ex(m, "format", &f) &&
                          json_object_is_type(f, json_type_string) &&
                          strcmp(json_object_get_string(f), STRATA_CKPT_FORMAT) == 0;
        json_object_put(m);
        if (!ckpt && !dir_empty(dir))
            return strata_error(STRATA_ERR_INVALID_ARG, "strata_save: %s is a directory that is "
                                "not a strata checkpoint (no manifest.json of format '%s'); "
                                "refusing to replace its files", dir, STRATA_CKPT_FORMAT);
    }
    return STRATA_OK;
}

static void release_layers(strata_runtime *rt, const strata_rt_view *v)
{
    for (int l = 0; l < v->managed_layers; l++)
        strata_rt_layer_release(rt, l);
}

/* Drain the refresh engine and bring every rank the current weights
 * (managed weights stay with their owners: save_model streams them).
 * Collective. */
static strata_status save_drain(saver *s)
{
    strata_status st = strata_refresh_drain(s->v.engine, &s->jobs);
    s->t_drain = strata_now_seconds() - s->t0;
    strata_status sw = strata_sync_weights(s->rt);
    return st == STRATA_OK ? sw : st;
}

/* Rank 0 creates the temporary directory; its 6-letter suffix reaches the
 * others as numbers. Then the table of rows. Collective (`st`: the status
 * so far). */
static strata_status save_prepare(saver *s, strata_status st)
{
    const size_t dl = strlen(s->dir);
    char *tmp = s->tmp = malloc(dl + 16);
    double name[7] = {0};
    if (!tmp && st == STRATA_OK)
        st = strata_error(STRATA_ERR_NOMEM, "checkpoint: out of memory");
    if (s->v.rank == 0 && st == STRATA_OK) {
        snprintf(tmp, dl + 16, "%s.tmp-XXXXXX", s->dir);
        if (io_fault(s->rt) || !mkdtemp(tmp))
            st = strata_error(STRATA_ERR_IO, "strata_save: cannot create %s: %s", tmp,
                              strerror(errno));
        else
            for (int i = 0; i < 6; i++)
                name[i] = (double)(unsigned char)tmp[dl + 5 + i];
    }
    if (s->v.rank == 0)
        name[6] = st == STRATA_OK ? 1.0 : 0.0;
    if (s->v.world > 1) {
        strata_status sc = strata_comm_allreduce_f64(s->v.comm, name, 7, STRATA_REDUCE_SUM);
        if (st == STRATA_OK)
            st = sc;
    }
    s->tmp_made = name[6] == 1.0;
    if (st == STRATA_OK && !s->tmp_made)
        st = strata_error(STRATA_ERR_IO, "strata_save: rank 0 could not create the temporary "
                          "directory");
    if (st == STRATA_OK && s->v.rank != 0) {
        snprintf(tmp, dl + 16, "%s.tmp-", s->dir);
        for (int i = 0; i < 6; i++)
            tmp[dl + 5 + i] = (char)name[i];
        tmp[dl + 11] = '\0';
    }
    s->rows = calloc((size_t)s->v.world * ROW_N, sizeof *s->rows);
    if (!s->rows && st == STRATA_OK)
        st = strata_error(STRATA_ERR_NOMEM, "checkpoint: out of memory");
    return st;
}

/* State paging (strata_config.page_state): a paged parameter's state is
 * in the nvme tier between its steps. Before the first of its items is
 * written, it is pinned (read back into its own memory, the next paged
 * parameter's read started ahead) and the one before let go again, as the
 * step does: at most two states are resident while the file is written. A
 * state that cannot be read fails the save (STRATA_ERR_IO: the temporary
 * directory is removed, the previous checkpoint stays). */
typedef struct page_walker {
    strata_refresh *engine;
    const item_list *l;
    int cur; /* the entry pinned (-1: none) */
} page_walker;

static strata_status page_walk(void *ctx, int i, const void **ptr)
{
    page_walker *pw = ctx;
    if (!ptr)
        return STRATA_OK; /* after a failure: nothing more to read */
    const st_item *it = &pw->l->v[i];
    *ptr = it->ptr;
    if (!it->page || it->page - 1 == pw->cur)
        return STRATA_OK;
    int ahead = -1;
    for (int j = i + 1; j < pw->l->n && ahead < 0; j++)
        if (pw->l->v[j].page && pw->l->v[j].page != it->page)
            ahead = pw->l->v[j].page - 1;
    pw->cur = it->page - 1;
    strata_status st = strata_refresh_page_pin(pw->engine, pw->cur, ahead);
    if (st != STRATA_OK) {
        char why[300];
        snprintf(why, sizeof why, "%s", strata_last_error());
        st = strata_error(st, "strata_save: %s; nothing was published", why);
    }
    return st;
}

/* strata_refresh_page_release, keeping the message of a failure so far
 * (`st`): a read ahead that failed too would say its own. */
static void page_release_keep(strata_refresh *engine, strata_status st)
{
    char why[600];
    snprintf(why, sizeof why, "%s", st != STRATA_OK ? strata_last_error() : "");
    strata_refresh_page_release(engine);
    if (st != STRATA_OK)
        (void)strata_error(st, "%s", why);
    else
        strata_error_clear();
}

static bool items_paged(const item_list *l)
{
    for (int i = 0; i < l->n; i++)
        if (l->v[i].page)
            return true;
    return false;
}

/* One of this rank's files into the temporary directory: the items
 * (rank-R.safetensors) or the table (rank-R.json); its size and digest go
 * into the rank's row. */
static strata_status save_rank_file(saver *s, const item_list *items, json_object *table)
{
    char fname[64];
    rank_file(fname, sizeof fname, s->v.rank, items ? "safetensors" : "json");
    char *path = joinf(s->tmp, fname);
    uint8_t dig[32];
    uint64_t nb = 0;
    page_walker pw = {.engine = s->v.engine, .l = items, .cur = -1};
    const bool paged = items && items_paged(items);
    strata_status st =
        !path    ? strata_error(STRATA_ERR_NOMEM, "checkpoint: out of memory")
        : paged  ? st_write_walk(s->rt, path, items, page_walk, &pw, &nb, dig, &s->files)
        : items  ? st_write(s->rt, path, items, &nb, dig, &s->files)
                 : json_write(s->rt, path, table, &nb, dig, &s->files);
    if (paged) /* the states back to nvme only (nothing changed them) */
        page_release_keep(s->v.engine, st);
    free(path);
    if (st == STRATA_OK) {
        double *row = s->rows + (size_t)s->v.rank * ROW_N;
        row[items ? ROW_BYTES_ST : ROW_BYTES_JSON] = (double)nb;
        for (int k = 0; k < 32; k++)
            row[(items ? ROW_DIG_ST : ROW_DIG_JSON) + k] = dig[k];
        s->bytes += nb;
    }
    return st;
}

/* This rank's optimizer and engine state (rank-R.safetensors) and its
 * table (rank-R.json). */
static strata_status save_rank_files(saver *s)
{
    item_list items = {0};
    json_object *rj = json_object_new_object(), *tensors = json_object_new_array(),
                *blocks = json_object_new_array();
    strata_status st = rj && tensors && blocks
                           ? STRATA_OK
                           : strata_error(STRATA_ERR_NOMEM, "checkpoint: out of memory");
    if (st == STRATA_OK)
        st = rank_items(s->rt, &s->v, &items, tensors, blocks);
    if (st == STRATA_OK)
        st = save_rank_file(s, &items, NULL);
    if (st == STRATA_OK) {
        json_object_object_add(rj, "rank", json_object_new_int(s->v.rank));
        json_object_object_add(rj, "step", json_object_new_int64(s->v.t));
        json_object_object_add(rj, "blocks", blocks);
        json_object_object_add(rj, "tensors", tensors);
        blocks = tensors = NULL;
        st = save_rank_file(s, NULL, rj);
    }
    json_object_put(rj);
    json_object_put(tensors);
    json_object_put(blocks);
    items_free(&items);
    return st;
}

/* Before parameter i's weights are written: its managed layer materialized
 * (a broadcast from its owner in the shard group) and the one before it
 * released, so that a rank holds its shard plus one layer at a time. Every
 * rank walks the parameters in the same order. */
static strata_status model_walk(void *ctx, int i, const void **ptr)
{
    saver *s = ctx;
    strata_rt_param_view p;
    strata_rt_param_get(s->rt, i, &p);
    strata_status st = STRATA_OK;
    if (p.managed && p.layer != s->walk_layer) {
        if (s->walk_layer >= 0)
            strata_rt_layer_release(s->rt, s->walk_layer);
        s->walk_layer = p.layer;
        st = strata_rt_layer_materialize(s->rt, p.layer);
        strata_rt_param_get(s->rt, i, &p); /* its buffer now */
    }
    if (ptr)
        *ptr = p.data;
    return st;
}

/* The weights, whole, under their registered names and shapes
 * (model.safetensors), written by rank 0 while the managed layers stream
 * past one at a time (model_walk): no rank holds the whole model (issue #21
 * item 4). The other ranks take part in each layer's broadcast. Collective
 * with managed weights. */
static strata_status save_model(saver *s)
{
    item_list items = {0};
    strata_status st = STRATA_OK;
    s->walk_layer = -1;
    if (s->v.rank != 0) {
        for (int i = 0; i < s->v.n_params; i++) {
            const void *ptr;
            strata_status sw = model_walk(s, i, &ptr);
            if (st == STRATA_OK)
                st = sw;
        }
        if (s->walk_layer >= 0)
            strata_rt_layer_release(s->rt, s->walk_layer);
        return st;
    }
    for (int i = 0; i < s->v.n_params && st == STRATA_OK; i++) {
        strata_rt_param_view p;
        strata_rt_param_get(s->rt, i, &p);
        st_item it = {.name = strdup(p.name), .dtype = STRATA_ST_F32, .ndim = p.ndim,
                      .bytes = p.numel * sizeof(float), .src = SRC_BACKEND, .ptr = p.data};
        for (int d = 0; d < p.ndim; d++)
            it.shape[d] = p.shape[d];
        st = items_add(&items, it);
    }
    char *path = joinf(s->tmp, MODEL_FILE);
    if (st == STRATA_OK && !path)
        st = strata_error(STRATA_ERR_NOMEM, "checkpoint: out of memory");
    if (st == STRATA_OK) {
        st = st_write_walk(s->rt, path, &items, model_walk, s, &s->model_bytes,
                           s->model_digest, &s->files);
    } else {
        /* the walk still runs: the other ranks broadcast every layer */
        for (int i = 0; i < s->v.n_params; i++) {
            const void *ptr;
            (void)model_walk(s, i, &ptr);
        }
    }
    if (s->walk_layer >= 0)
        strata_rt_layer_release(s->rt, s->walk_layer);
    free(path);
    items_free(&items);
    s->bytes += s->model_bytes;
    return st;
}

/* Every rank's row (its outcome, files, drained jobs and counters) to every
 * rank, in one allreduce. Collective (`st`: the status so far). */
static strata_status save_gather(saver *s, strata_status st)
{
    if (s->rows) {
        double *row = s->rows + (size_t)s->v.rank * ROW_N;
        row[ROW_OK] = st == STRATA_OK ? 1.0 : 0.0;
        row[ROW_JOBS] = (double)s->jobs;
        strata_stats now;
        if (strata_stats_get(s->rt, &now) == STRATA_OK)
            for (int k = 0; k < STRATA_RT_N_STATS; k++)
                row[ROW_STATS + k] = strata_rt_stat_read(&now, k);
        if (s->v.world > 1) {
            strata_status sc = strata_comm_allreduce_f64(s->v.comm, s->rows, s->v.world * ROW_N,
                                                         STRATA_REDUCE_SUM);
            if (st == STRATA_OK)
                st = sc;
        }
    }
    for (int r = 0; s->rows && r < s->v.world; r++) {
        if (s->rows[(size_t)r * ROW_N + ROW_OK] != 1.0 && st == STRATA_OK)
            st = strata_error(STRATA_ERR_IO, "strata_save: rank %d failed to write its shard", r);
        s->all_jobs += (int64_t)s->rows[(size_t)r * ROW_N + ROW_JOBS];
    }
    return st;
}

/* Rank 0: the manifest, the directory fsynced, renamed into place. */
static strata_status save_commit(saver *s)
{
    uint64_t mb = 0;
    strata_status st = write_manifest(s, &mb);
    s->bytes += mb;
    if (st == STRATA_OK)
        st = fsync_dir(s->rt, s->tmp);
    if (st == STRATA_OK)
        st = publish(s->rt, s->tmp, s->dir);
    return st;
}

/* Rank 0 removes what a failed save left; every rank learns rank 0's
 * outcome. Collective. */
static strata_status save_agree(saver *s, strata_status st)
{
    if (s->v.rank == 0 && st != STRATA_OK && s->tmp && s->tmp_made)
        remove_dir(s->tmp);
    if (s->v.world > 1) {
        double bad = st == STRATA_OK ? 0.0 : 1.0;
        strata_status sc = strata_comm_allreduce_f64(s->v.comm, &bad, 1, STRATA_REDUCE_MAX);
        if (st == STRATA_OK && (sc != STRATA_OK || bad != 0.0))
            st = sc != STRATA_OK ? sc
                                 : strata_error(STRATA_ERR_IO, "strata_save: another rank failed");
    }
    return st;
}

static void save_report(saver *s, strata_status st, strata_save_info *info)
{
    free(s->rows);
    free(s->tmp);
    if (info)
        *info = (strata_save_info){.seconds = strata_now_seconds() - s->t0,
                                   .drain_seconds = s->t_drain,
                                   .bytes = s->bytes,
                                   .drained_jobs = s->all_jobs};
    if (st == STRATA_OK)
        strata_log(s->rt, STRATA_LOG_INFO, "ckpt", "saved step %lld to %s: %.1f MiB in %.3f s "
                   "(%lld refresh jobs drained in %.3f s)", (long long)s->v.t, s->dir,
                   s->bytes / 1048576.0, strata_now_seconds() - s->t0, (long long)s->all_jobs,
                   s->t_drain);
}

static strata_status save_unguarded(strata_runtime *rt, const char *dir, const char *user_json,
                                    strata_save_info *info)
{
    strata_status st = save_check(rt, dir, user_json);
    if (st != STRATA_OK)
        return st;
    saver s = {.rt = rt, .dir = dir, .user_json = user_json, .t0 = strata_now_seconds()};
    strata_rt_view_get(rt, &s.v);
    /* Collective from here: every rank joins each exchange even after a
     * local failure (a zero "ok" says so). */
    st = save_drain(&s);
    st = save_prepare(&s, st);
    if (st == STRATA_OK)
        st = save_rank_files(&s);
    /* every rank agrees whether the model is written: its walk is collective */
    if (s.v.world > 1 && s.v.managed_layers > 0) {
        double bad = st == STRATA_OK ? 0.0 : 1.0;
        strata_status sc = strata_comm_allreduce_f64(s.v.comm, &bad, 1, STRATA_REDUCE_MAX);
        if (st == STRATA_OK && (sc != STRATA_OK || bad != 0.0))
            st = sc != STRATA_OK ? sc
                                 : strata_error(STRATA_ERR_IO, "strata_save: another rank failed");
    }
    if (st == STRATA_OK)
        st = save_model(&s);
    release_layers(rt, &s.v);
    st = fsync_set_flush(rt, &s.files, st); /* durable before the gather reports them */
    st = save_gather(&s, st);
    if (st == STRATA_OK && s.v.rank == 0)
        st = save_commit(&s);
    st = save_agree(&s, st);
    save_report(&s, st, info);
    return st;
}

strata_status strata_save(strata_runtime *rt, const char *dir, const char *user_json,
                          strata_save_info *info)
{
    if (!rt)
        return strata_error(STRATA_ERR_INVALID_ARG, "strata_save: NULL runtime");
    if (!dir || !dir[0])
        return strata_error(STRATA_ERR_INVALID_ARG, "strata_save: NULL runtime or directory");
    /* "ckpt/" names ckpt: the temporary directory goes beside it, not in it. */
    char *d = strdup(dir);
    if (!d)
        return strata_error(STRATA_ERR_NOMEM, "checkpoint: out of memory");
    for (size_t n = strlen(d); n > 1 && d[n - 1] == '/'; n--)
        d[n - 1] = '\0';
    strata_status st = strata_rt_busy_enter(rt, "strata_save");
    if (st == STRATA_OK) {
        st = save_unguarded(rt, d, user_json, info);
        strata_rt_busy_leave(rt);
    }
    free(d);
    return st;
}

/* ---- load */

typedef struct loaded_file {
    const strata_ckpt_file *meta;
    const uint8_t *buf; /* mapped (map_file): free with loaded_file_free */
    size_t len;
} loaded_file;

static void loaded_file_free(loaded_file *f)
{
    unmap_file(f->buf, f->len);
    f->buf = NULL;
    f->len = 0;
}

/* Map one listed file whole and check its size and digest. */
static strata_status load_file(const char *dir, const strata_ckpt_manifest *m, const char *name,
                               loaded_file *out)
{
    memset(out, 0, sizeof *out);
    for (int i = 0; i < m->n_files; i++)
        if (strcmp(m->files[i].name, name) == 0)
            out->meta = &m->files[i];
    if (!out->meta)
        return strata_error(STRATA_ERR_DATA, "checkpoint %s: the manifest lists no %s", dir,
                            name);
    char *path = joinf(dir, name);
    if (!path)
        return strata_error(STRATA_ERR_NOMEM, "checkpoint: out of memory");
    uint8_t d[32];
    strata_status st = map_file(path, out->meta->bytes, &out->buf, &out->len, d);
    if (st == STRATA_OK && out->len != out->meta->bytes)
        st = strata_error(STRATA_ERR_DATA, "checkpoint: %s is truncated: %zu bytes, the manifest "
                          "says %llu", path, out->len, (unsigned long long)out->meta->bytes);
    if (st == STRATA_OK && memcmp(d, out->meta->sha256, 32) != 0)
        st = strata_error(STRATA_ERR_DATA, "checkpoint: %s is corrupt: its SHA-256 does not "
                          "match the manifest", path);
    free(path);
    if (st != STRATA_OK)
        loaded_file_free(out);
    return st;
}

static strata_status read_manifest(const char *dir, strata_ckpt_manifest **m)
{
    char *path = joinf(dir, "manifest.json");
    if (!path)
        return strata_error(STRATA_ERR_NOMEM, "checkpoint: out of memory");
    uint8_t *buf = NULL;
    size_t len = 0;
    strata_status st = read_file(path, STRATA_CKPT_MAX_JSON, &buf, &len);
    if (st == STRATA_OK)
        st = strata_ckpt_manifest_parse(path, (const char *)buf, len, m);
    free(buf);
    free(path);
    return st;
}

/* The tensor `name` of file `what` must exist with this dtype and shape. */
static strata_status expect(const char *what, const strata_st_header *h, const char *name,
                            strata_st_dtype dt, int ndim, const int64_t *shape,
                            const strata_st_tensor **out)
{
    const strata_st_tensor *t = strata_st_find(h, name);
    if (!t)
        return strata_error(STRATA_ERR_INVALID_ARG, "checkpoint %s has no tensor '%s' (saved "
                            "with another model or configuration?)", what, name);
    bool same = t->dtype == dt && t->ndim == ndim;
    for (int d = 0; same && d < ndim; d++)
        same = t->shape[d] == shape[d];
    if (!same) {
        char a[96] = "", b[96] = "";
        for (int d = 0; d < t->ndim && d < 4; d++)
            snprintf(a + strlen(a), sizeof a - strlen(a), "%s%lld", d ? "," : "",
                     (long long)t->shape[d]);
        for (int d = 0; d < ndim; d++)
            snprintf(b + strlen(b), sizeof b - strlen(b), "%s%lld", d ? "," : "",
                     (long long)shape[d]);
        return strata_error(STRATA_ERR_INVALID_ARG, "checkpoint %s: tensor '%s' is %s [%s], this "
                            "runtime needs %s [%s]", what, name, strata_st_dtype_name(t->dtype), a,
                            strata_st_dtype_name(dt), b);
    }
    *out = t;
    return STRATA_OK;
}

/* A family tensor saved under a name whose meaning has changed since
 * (strata_precond_family.retired_tensors) is refused with the reason. */
static strata_status check_retired(const char *what, const strata_st_header *h,
                                   const strata_rt_param_view *p)
{
    const char *const *r =
        p->fam->retired_tensors && p->state ? p->fam->retired_tensors(p->state) : NULL;
    for (; r && r[0]; r += 2) {
        char *nm = joinf(p->name, r[0]);
        if (!nm)
            return strata_error(STRATA_ERR_NOMEM, "checkpoint: out of memory");
        const bool found = strata_st_find(h, nm) != NULL;
        free(nm);
        if (found)
            return strata_error(STRATA_ERR_INVALID_ARG, "checkpoint %s: tensor '%s/%s' of the "
                                "%s state cannot be loaded: %s", what, p->name, r[0],
                                p->fam->name, r[1]);
    }
    return STRATA_OK;
}

typedef struct pending_copy {
    void *dst;
    const void *src;
    size_t bytes;
    bool backend;
    int page; /* 1 + the engine entry whose paged state dst lies in (0: none) */
} pending_copy;

/* One old rank's files (its table and its state), read when a parameter this
 * runtime owns was owned there. */
typedef struct old_rank {
    bool loaded;
    loaded_file fj, fs;
    strata_ckpt_rank *rk;
    strata_st_header hs;
    char what[4200];
} old_rank;

static strata_status old_rank_load(const char *dir, const strata_ckpt_manifest *m, int r,
                                   old_rank *o)
{
    if (o->loaded)
        return STRATA_OK;
    char fname[64];
    rank_file(fname, sizeof fname, r, "json");
    strata_status st = load_file(dir, m, fname, &o->fj);
    snprintf(o->what, sizeof o->what, "%s/%s", dir, fname);
    if (st == STRATA_OK)
        st = strata_ckpt_rank_parse(o->what, (const char *)o->fj.buf, o->fj.len, &o->rk);
    if (st == STRATA_OK && (o->rk->rank != r || o->rk->step != m->step))
        st = strata_error(STRATA_ERR_DATA, "checkpoint %s: rank %d step %lld, expected rank %d "
                          "step %lld", o->what, o->rk->rank, (long long)o->rk->step, r,
                          (long long)m->step);
    if (st == STRATA_OK) {
        rank_file(fname, sizeof fname, r, "safetensors");
        st = load_file(dir, m, fname, &o->fs);
        snprintf(o->what, sizeof o->what, "%s/%s", dir, fname);
    }
    if (st == STRATA_OK)
        st = strata_st_header_parse(o->what, o->fs.buf, o->fs.len, o->fs.len, &o->hs);
    o->loaded = st == STRATA_OK;
    return st;
}

static void old_rank_free(old_rank *o)
{
    strata_st_header_free(&o->hs);
    loaded_file_free(&o->fs);
    loaded_file_free(&o->fj);
    strata_ckpt_rank_free(o->rk);
}


/* One load on this rank: what its phases hand on. Nothing of the runtime
 * changes before load_apply. */
typedef struct loader {
    strata_runtime *rt;
    strata_rt_view v;
    const char *dir;
    strata_ckpt_manifest *m;
    bool same_layout;        /* the same ranks, every parameter with the same owner */
    loaded_file fm;          /* model.safetensors */
    strata_st_header hm;
    char what_m[4200];
    old_rank *old;           /* per rank at save: its files, read when needed */
    pending_copy *copies;    /* weights and family tensors, applied last */
    int n_copies;
    int nb;                  /* this runtime's engine blocks */
    strata_refresh_slot_image *images; /* nb x STRATA_CKPT_MAX_SLOTS */
    int *block_src;          /* per engine block: index into its old rank's block table */
    int *block_rank;         /* per engine block: that old rank */
    int *block_nslots;       /* per engine block: slots of its image table (the engine's) */
    int n_retuned, n_dropped; /* blocks saved under other refresh settings; results dropped */
} loader;

/* The manifest's parameter table against this runtime's: count, names,
 * shapes, routing, owners, refresh phases. */
static strata_status load_check_params(loader *c)
{
    const strata_ckpt_manifest *m = c->m;
    const char *dir = c->dir;
    if (m->world_size < 1 || m->world_size > (1 << 20))
        return strata_error(STRATA_ERR_DATA, "checkpoint %s: world size %d", dir, m->world_size);
    if (m->n_params != c->v.n_params)
        return strata_error(STRATA_ERR_INVALID_ARG, "checkpoint %s has %d parameters, this "
                            "runtime %d", dir, m->n_params, c->v.n_params);
    /* Resharding: a parameter this runtime owns is read from whichever rank
     * owned it at save (the same one when the layout did not change). The
     * same layout: the same ranks and every parameter with the same owner (a
     * change of shard group size or sharding, or another plan, moves
     * parameters between the rank files). */
    c->same_layout = m->world_size == c->v.world;
    for (int i = 0; i < c->v.n_params; i++) {
        strata_rt_param_view p;
        strata_rt_param_get(c->rt, i, &p);
        const strata_ckpt_param *q = &m->params[i];
        c->same_layout = c->same_layout && q->owner == p.owner;
        bool same = strcmp(p.name, q->name) == 0 && p.ndim == q->ndim;
        for (int d = 0; same && d < p.ndim; d++)
            same = p.shape[d] == q->shape[d];
        if (!same)
            return strata_error(STRATA_ERR_INVALID_ARG, "checkpoint %s: parameter %d is '%s' of "
                                "another shape or name than this runtime's '%s'", dir, i,
                                q->name, p.name);
        if (strcmp(strata_optimizer_name(p.routed), q->optimizer) != 0)
            return strata_error(STRATA_ERR_INVALID_ARG, "checkpoint %s: parameter '%s' was routed "
                                "to %s, this runtime routes it to %s", dir, p.name, q->optimizer,
                                strata_optimizer_name(p.routed));
        if (q->owner >= m->world_size)
            return strata_error(STRATA_ERR_DATA, "checkpoint %s: parameter '%s' owned by rank %d "
                                "of %d", dir, p.name, q->owner, m->world_size);
        if (p.refresh_offset != q->refresh_offset)
            return strata_error(STRATA_ERR_INVALID_ARG, "checkpoint %s: parameter '%s' has "
                                "refresh phase %d, this runtime %d (stagger_refresh or "
                                "refresh_offset changed)", dir, p.name, q->refresh_offset,
                                p.refresh_offset);
        if (q->hyper_set && !p.fam->set_hyper)
            return strata_error(STRATA_ERR_UNSUPPORTED, "checkpoint %s: parameter '%s' has its "
                                "own lr and weight decay, which the %s family does not take",
                                dir, p.name, p.fam->name);
    }
    return STRATA_OK;
}

/* A byte range [begin, end) of a file. */
typedef struct byte_range {
    uint64_t begin, end;
} byte_range;

static int cmp_range(const void *a, const void *b)
{
    const byte_range *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin;
}

#define MODEL_CHUNK ((size_t)4 << 20) /* bytes of model.safetensors read at a time */

static strata_status read_at(int fd, const char *path, void *buf, size_t n, uint64_t off)
{
    size_t got = 0;
    while (got < n) {
        ssize_t k = pread(fd, (char *)buf + got, n - got, (off_t)(off + got));
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return strata_error(STRATA_ERR_DATA, "checkpoint: %s is truncated or unreadable at "
                                "byte %llu: %s", path, (unsigned long long)(off + got),
                                k < 0 ? strerror(errno) : "end of file");
        got += (size_t)k;
    }
    return STRATA_OK;
}

/* The model file, checked and parsed, holding only the weights this rank
 * keeps (issue #21 item 4: no rank holds the whole model at a load).
 * The header is read and parsed first; then the file streams through one
 * MODEL_CHUNK buffer, hashed whole against the manifest's SHA-256, and only
 * the byte ranges of the parameters this rank keeps (unmanaged ones, and
 * managed ones it owns) are copied out. They land at their file offsets in
 * an anonymous mapping of the file's size (MAP_NORESERVE): pages never
 * written are never backed, so the resident cost is those tensors plus one
 * chunk, and c->fm.buf + offset addresses a tensor as before. Room for the
 * old ranks too. */
static strata_status load_read_model(loader *c)
{
    c->old = calloc((size_t)c->m->world_size, sizeof *c->old);
    if (!c->old)
        return strata_error(STRATA_ERR_NOMEM, "checkpoint: out of memory");
    loaded_file *f = &c->fm;
    memset(f, 0, sizeof *f);
    for (int i = 0; i < c->m->n_files; i++)
        if (strcmp(c->m->files[i].name, MODEL_FILE) == 0)
            f->meta = &c->m->files[i];
    if (!f->meta)
        return strata_error(STRATA_ERR_DATA, "checkpoint %s: the manifest lists no %s", c->dir,
                            MODEL_FILE);
    const char *path = c->what_m;
    const uint64_t size = f->meta->bytes;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return strata_error(STRATA_ERR_IO, "checkpoint: %s: %s", path,
                            errno == ENOENT ? "missing file" : strerror(errno));
    struct stat sb;
    strata_status st = STRATA_OK;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode))
        st = strata_error(STRATA_ERR_IO, "checkpoint: %s is not a regular file", path);
    else if ((uint64_t)sb.st_size != size)
        st = strata_error(STRATA_ERR_DATA, "checkpoint: %s is %s: %lld bytes, the manifest "
                          "says %llu", path, (uint64_t)sb.st_size < size ? "truncated" : "too long",
                          (long long)sb.st_size, (unsigned long long)size);
    uint8_t *head = NULL, *chunk = NULL, *model_map = NULL;
    byte_range *keep = NULL;
    int n_keep = 0;
    EVP_MD_CTX *md = NULL;
    /* the header: its length, then the JSON */
    uint8_t len8[8] = {0};
    uint64_t hl = 0;
    if (st == STRATA_OK && size >= 8 && (st = read_at(fd, path, len8, 8, 0)) == STRATA_OK)
        for (int i = 0; i < 8; i++)
            hl |= (uint64_t)len8[i] << (8 * i);
    if (st == STRATA_OK) {
        const uint64_t hn = size < 8 ? size : 8 + (hl < STRATA_CKPT_MAX_HEADER && hl <= size - 8
                                                   ? hl : 0);
        head = malloc(hn ? hn : 1);
        if (!head)
            st = strata_error(STRATA_ERR_NOMEM, "checkpoint: out of memory");
        else if ((st = read_at(fd, path, head, hn, 0)) == STRATA_OK)
            st = strata_st_header_parse(c->what_m, head, hn, size, &c->hm);
    }
    /* the ranges this rank keeps, in file order */
    if (st == STRATA_OK && !(keep = calloc((size_t)c->v.n_params + 1, sizeof *keep)))
        st = strata_error(STRATA_ERR_NOMEM, "checkpoint: out of memory");
    for (int i = 0; st == STRATA_OK && i < c->v.n_params; i++) {
        strata_rt_param_view p;
        strata_rt_param_get(c->rt, i, &p);
        const strata_st_tensor *t = strata_st_find(&c->hm, p.name);
        if (t && (!p.managed || p.owner == c->v.rank)) /* a missing one: load_match_tensors */
            keep[n_keep++] = (byte_range){c->hm.data_start + t->begin, c->hm.data_start + t->end};
    }
    if (n_keep)
        qsort(keep, (size_t)n_keep, sizeof *keep, cmp_range);
    if (st == STRATA_OK) {
        f->len = (size_t)size;
        void *map = mmap(NULL, f->len ? f->len : 1, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        chunk = malloc(MODEL_CHUNK);
        md = EVP_MD_CTX_new();
        if (map == MAP_FAILED)
            st = strata_error(STRATA_ERR_NOMEM, "checkpoint: cannot map %llu bytes for %s: %s",
                              (unsigned long long)size, path, strerror(errno));
        else
            f->buf = model_map = map;
        if (st == STRATA_OK &&
            (!chunk || !md || EVP_DigestInit_ex(md, EVP_sha256(), NULL) != 1))
            st = strata_error(STRATA_ERR_NOMEM, "checkpoint: out of memory");
    }
    /* stream: hash everything, keep this rank's ranges */
    int k = 0;
    for (uint64_t off = 0; st == STRATA_OK && off < size;) {
        const size_t n = size - off < MODEL_CHUNK ? (size_t)(size - off) : MODEL_CHUNK;
        if ((st = read_at(fd, path, chunk, n, off)) != STRATA_OK)
            break;
        EVP_DigestUpdate(md, chunk, n);
        const uint64_t end = off + n;
        while (k < n_keep && keep[k].end <= off)
            k++;
        for (int j = k; j < n_keep && keep[j].begin < end; j++) {
            const uint64_t a = keep[j].begin > off ? keep[j].begin : off;
            const uint64_t b = keep[j].end < end ? keep[j].end : end;
            if (a < b)
                memcpy(model_map + a, chunk + (a - off), (size_t)(b - a));
        }
        off = end;
    }
    if (st == STRATA_OK) {
        uint8_t d[32];
        unsigned dl = 0;
        EVP_DigestFinal_ex(md, d, &dl);
        if (memcmp(d, f->meta->sha256, 32) != 0)
            st = strata_error(STRATA_ERR_DATA, "checkpoint: %s is corrupt: its SHA-256 does not "
                              "match the manifest", path);
    }
    EVP_MD_CTX_free(md);
    free(chunk);
    free(keep);
    free(head);
    close(fd);
    return st;
}

static void model_file_free(loaded_file *f)
{
    if (f->buf)
        munmap((void *)f->buf, f->len ? f->len : 1);
    f->buf = NULL;
}

/* Owned parameter i's family tensors, from the rank that owned it at save:
 * each must exist with its dtype and shape; queued as copies. */
static strata_status match_state(loader *c, int i, const strata_rt_param_view *p)
{
    const int src = c->m->params[i].owner < 0 ? 0 : c->m->params[i].owner;
    strata_status st = old_rank_load(c->dir, c->m, src, &c->old[src]);
    if (st != STRATA_OK)
        return st;
    const old_rank *o = &c->old[src];
    if ((st = check_retired(o->what, &o->hs, p)) != STRATA_OK)
        return st;
    strata_tensor_info *ti = NULL;
    int n = 0;
    if ((st = family_tensors(p, &ti, &n)) != STRATA_OK)
        return st;
    const int page = strata_refresh_paged(c->v.engine, p->entry) ? p->entry + 1 : 0;
    /* Optional tensors are a replica's own (strata_tensor_info.optional):
     * at the same world size a rank whose file holds this parameter's copy
     * (an HSDP replica: its owner is another rank) reads its own, else the
     * owner's. */
    const old_rank *own = o;
    if (c->m->world_size == c->v.world && c->v.rank != src) {
        for (int k = 0; k < n && own == o; k++)
            if (ti[k].optional) {
                st = old_rank_load(c->dir, c->m, c->v.rank, &c->old[c->v.rank]);
                if (st != STRATA_OK) {
                    free(ti);
                    return st;
                }
                own = &c->old[c->v.rank];
            }
    }
    for (int k = 0; k < n && st == STRATA_OK; k++) {
        char *nm = joinf(p->name, ti[k].name);
        const int64_t shape[2] = {ti[k].shape[0], ti[k].shape[1]};
        const strata_st_tensor *t = NULL;
        const old_rank *f = nm && ti[k].optional && strata_st_find(&own->hs, nm) ? own : o;
        if (nm && ti[k].optional && ti[k].where == STRATA_TIER_HOST &&
            !strata_st_find(&f->hs, nm)) {
            /* absent: zeros, the family's "none yet" (strata_tensor_info.optional) */
            free(nm);
            c->copies[c->n_copies++] =
                (pending_copy){ti[k].data, NULL, info_bytes(&ti[k]), false, page};
            continue;
        }
        st = nm ? expect(f->what, &f->hs, nm, dtype_of[ti[k].dtype], ti[k].ndim, shape, &t)
                : strata_error(STRATA_ERR_NOMEM, "checkpoint: out of memory");
        free(nm);
        if (st == STRATA_OK)
            c->copies[c->n_copies++] =
                (pending_copy){ti[k].data, f->fs.buf + f->hs.data_start + t->begin,
                               t->end - t->begin, ti[k].where == STRATA_TIER_DEVICE, page};
    }
    free(ti);
    return st;
}

/* Every parameter's weights (this rank's copy: a managed parameter owned
 * elsewhere is materialized from its owner) and the owned ones' family
 * tensors, matched and queued. */
static strata_status load_match_tensors(loader *c)
{
    int cap = c->v.n_params;
    for (int i = 0; i < c->v.n_params; i++) {
        strata_rt_param_view p;
        strata_rt_param_get(c->rt, i, &p);
        if (owns(&p))
            cap += p.fam->tensors(p.state, NULL, 0);
    }
    c->copies = calloc((size_t)cap + 1, sizeof *c->copies);
    if (!c->copies)
        return strata_error(STRATA_ERR_NOMEM, "checkpoint: out of memory");
    for (int i = 0; i < c->v.n_params; i++) {
        strata_rt_param_view p;
        strata_rt_param_get(c->rt, i, &p);
        const strata_st_tensor *t = NULL;
        strata_status st = expect(c->what_m, &c->hm, p.name, STRATA_ST_F32, p.ndim, p.shape, &t);
        if (st != STRATA_OK)
            return st;
        if (!p.managed || p.owner == c->v.rank)
            c->copies[c->n_copies++] = (pending_copy){
                p.data, c->fm.buf + c->hm.data_start + t->begin, t->end - t->begin, true, 0};
        if (owns(&p) && (st = match_state(c, i, &p)) != STRATA_OK)
            return st;
    }
    return STRATA_OK;
}

/* The first of a saved block's fields that fix its state's layout or its
 * refresh points and differ from the engine's, with both values in
 * buf[n]; NULL when they all match. These cannot change on resume: they
 * come from the optimizer's config (its block size, frequency, start,
 * phase), which the saved state was computed under. */
static const char *block_fixed_differs(const strata_ckpt_block *b,
                                       const strata_refresh_block_desc *d, char *buf, size_t n)
{
    const char *f = NULL;
    long long was = 0, now = 0;
    /* an older layout without the slot's optional tail (precond.h tail_bytes) loads */
    if (b->slot_bytes != d->slot_bytes &&
        !(d->tail_bytes && b->slot_bytes == d->slot_bytes - d->tail_bytes))
        f = "result bytes (the block's layout: another optimizer or block size)",
        was = (long long)b->slot_bytes, now = (long long)d->slot_bytes;
    else if (b->frequency != d->frequency)
        f = "precondition frequency", was = b->frequency, now = d->frequency;
    else if (b->start != d->start)
        f = "first refresh step (start_preconditioning_step)", was = b->start, now = d->start;
    else if (b->lag != d->lag)
        f = "refresh lag", was = b->lag, now = d->lag;
    else if (b->offset != d->offset)
        f = "refresh phase (stagger_refresh or refresh_offset)", was = b->offset, now = d->offset;
    if (f)
        snprintf(buf, n, "%s: saved %lld, now %lld", f, was, now);
    return f;
}

/* The runtime's settings of a block (not its state): staleness, install
 * mode, async or inline, and with them the slot count. A resume may change
 * them; true (and what changed in buf[n]) when one did. */
static bool block_runtime_differs(const strata_ckpt_block *b, const strata_refresh_block_desc *d,
                                  char *buf, size_t n)
{
    static const char *const mode_name[] = {"fixed", "eager"};
    const char *ms = b->mode >= 0 && b->mode <= 1 ? mode_name[b->mode] : "?";
    const char *md = (int)d->mode >= 0 && (int)d->mode <= 1 ? mode_name[d->mode] : "?";
    if (b->n_slots == d->n_slots && b->inline_ == d->inline_ && b->staleness == d->staleness &&
        b->mode == (int)d->mode)
        return false;
    snprintf(buf, n, "%s S=%d %s -> %s S=%d %s", b->inline_ ? "inline" : "async", b->staleness,
             ms, d->inline_ ? "inline" : "async", d->staleness, md);
    return true;
}

/* A block saved under other runtime settings (block_runtime_differs): its
 * installed result stays installed (the optimizer's state, e.g. SOAP's
 * moments in that basis, belongs to it) and finished results newer than
 * it are kept, newest first, as long as the new slot table keeps one slot
 * free for the next refresh; the others are dropped (they were finished,
 * never in flight: a save drains first). A dropped result's refresh point
 * is then skipped: the block keeps its installed version until the next
 * refresh point's result is due (its staleness may exceed the new bound
 * once, counted in bound_exceeded). Returns how many were dropped. */
static int remap_slots(const strata_ckpt_block *b, int n_new, strata_refresh_slot_image *saved,
                       strata_refresh_slot_image *out)
{
    int inst = -1, dropped = 0;
    for (int k = 0; k < b->n_slots; k++)
        if (saved[k].state == STRATA_SLOT_INSTALLED)
            inst = k;
    int used = 0;
    if (inst >= 0)
        out[used++] = saved[inst];
    bool taken[STRATA_CKPT_MAX_SLOTS] = {false};
    for (;;) { /* the newest READY not yet taken */
        int best = -1;
        for (int k = 0; k < b->n_slots; k++)
            if (!taken[k] && saved[k].state == STRATA_SLOT_READY &&
                (best < 0 || saved[k].version > saved[best].version))
                best = k;
        if (best < 0)
            break;
        taken[best] = true;
        if (used < n_new - 1 && (inst < 0 || saved[best].version > saved[inst].version))
            out[used++] = saved[best];
        else
            dropped++;
    }
    for (int k = 0; k < b->n_slots; k++)
        dropped += saved[k].state == STRATA_SLOT_FAILED;
    for (int k = used; k < n_new; k++)
        out[k] = (strata_refresh_slot_image){.state = STRATA_SLOT_FREE};
    /* the registry wants the kept READY results in any order; oldest first
     * reads better in a dump */
    for (int i = 1 + (inst >= 0); i < used; i++)
        for (int j = i; j > (inst >= 0) && out[j - 1].version > out[j].version; j--) {
            strata_refresh_slot_image t = out[j];
            out[j] = out[j - 1];
            out[j - 1] = t;
        }
    return dropped;
}

/* Engine block i: found in the table of the rank that owned its parameter,
 * its schedule equal to the engine's, its slots' images (the results'
 * bytes in that rank's state file). */
static strata_status match_block(loader *c, int i)
{
    strata_refresh_block_desc d;
    strata_status st = strata_refresh_block_describe(c->v.engine, i, &d);
    if (st != STRATA_OK)
        return st;
    strata_rt_param_view p = {0};
    const int pi = param_of_entry(c->rt, &c->v, d.entry, &p);
    const int src = pi < 0 || c->m->params[pi].owner < 0 ? 0 : c->m->params[pi].owner;
    if ((st = old_rank_load(c->dir, c->m, src, &c->old[src])) != STRATA_OK)
        return st;
    const old_rank *o = &c->old[src];
    int j = -1;
    for (int k = 0; k < o->rk->n_blocks && j < 0; k++)
        if (pi >= 0 && strcmp(o->rk->blocks[k].param, p.name) == 0 &&
            o->rk->blocks[k].block == d.block)
            j = k;
    if (j < 0)
        return strata_error(STRATA_ERR_INVALID_ARG, "checkpoint %s has no refresh block %d of "
                            "'%s' (another optimizer or block size?)", o->what, d.block,
                            pi >= 0 ? p.name : "?");
    c->block_src[i] = j;
    c->block_rank[i] = src;
    const strata_ckpt_block *b = &o->rk->blocks[j];
    char why[200];
    if (block_fixed_differs(b, &d, why, sizeof why))
        return strata_error(STRATA_ERR_INVALID_ARG, "checkpoint %s: refresh block %d ('%s' "
                            "block %d) cannot continue under this optimizer config: %s",
                            o->what, i, b->param, b->block, why);
    if (d.n_slots > STRATA_CKPT_MAX_SLOTS || b->n_slots > STRATA_CKPT_MAX_SLOTS)
        return strata_error(STRATA_ERR_INVALID_ARG, "checkpoint %s: refresh block %d has %d "
                            "slots now (saved %d; at most %d)", o->what, i, d.n_slots,
                            b->n_slots, STRATA_CKPT_MAX_SLOTS);
    strata_refresh_slot_image saved[STRATA_CKPT_MAX_SLOTS];
    for (int k = 0; k < b->n_slots; k++) {
        strata_refresh_slot_image *im = &saved[k];
        im->state = (strata_coh_slot_state)b->slots[k].state;
        im->version = b->slots[k].version;
        im->failed = b->slots[k].failed;
        im->data = NULL;
        im->bytes = b->slot_bytes; /* slot_bytes, or without the tail (block_fixed_differs) */
        if (im->state != STRATA_SLOT_READY && im->state != STRATA_SLOT_INSTALLED)
            continue;
        char nm[64];
        snprintf(nm, sizeof nm, "engine.%d.%d", d.block, k);
        char *full = joinf(p.name, nm);
        const int64_t shape[1] = {(int64_t)b->slot_bytes};
        const strata_st_tensor *t = NULL;
        st = full ? expect(o->what, &o->hs, full, STRATA_ST_U8, 1, shape, &t)
                  : strata_error(STRATA_ERR_NOMEM, "checkpoint: out of memory");
        free(full);
        if (st != STRATA_OK)
            return st;
        im->data = o->fs.buf + o->hs.data_start + t->begin;
    }
    strata_refresh_slot_image *out = &c->images[(size_t)i * STRATA_CKPT_MAX_SLOTS];
    if (block_runtime_differs(b, &d, why, sizeof why)) {
        const int dropped = remap_slots(b, d.n_slots, saved, out);
        c->n_retuned++;
        c->n_dropped += dropped;
        if (c->n_retuned == 1)
            strata_log(c->rt, STRATA_LOG_WARN, "ckpt",
                       "%s: refresh settings changed (%s): installed results kept, the run "
                       "continues with the new settings", o->what, why);
    } else {
        memcpy(out, saved, (size_t)b->n_slots * sizeof *out);
    }
    c->block_nslots[i] = d.n_slots;
    return STRATA_OK;
}

static strata_status load_match_blocks(loader *c)
{
    c->nb = strata_refresh_block_count(c->v.engine);
    const size_t nb = (size_t)(c->nb > 0 ? c->nb : 1);
    c->images = calloc(nb * STRATA_CKPT_MAX_SLOTS, sizeof *c->images);
    c->block_src = calloc(nb, sizeof *c->block_src);
    c->block_rank = calloc(nb, sizeof *c->block_rank);
    c->block_nslots = calloc(nb, sizeof *c->block_nslots);
    if (!c->images || !c->block_src || !c->block_rank || !c->block_nslots)
        return strata_error(STRATA_ERR_NOMEM, "checkpoint: out of memory");
    strata_status st = STRATA_OK;
    for (int i = 0; i < c->nb && st == STRATA_OK; i++)
        st = match_block(c, i);
    return st;
}

/* Same layout: this rank's file must hold exactly what it uses (a file with
 * extra tensors is not this runtime's). */
static strata_status load_check_count(const loader *c)
{
    if (!c->same_layout || !c->old[c->v.rank].loaded)
        return STRATA_OK;
    const old_rank *mine = &c->old[c->v.rank];
    int used = 0;
    for (int i = 0; i < c->v.n_params; i++) {
        strata_rt_param_view p;
        strata_rt_param_get(c->rt, i, &p);
        if (!owns(&p))
            continue;
        strata_tensor_info *ti = NULL;
        int n = 0;
        strata_status st = family_tensors(&p, &ti, &n);
        if (st != STRATA_OK)
            return st;
        for (int k = 0; k < n; k++) {
            /* an optional tensor counts where the file holds it */
            char *nm = ti[k].optional ? joinf(p.name, ti[k].name) : NULL;
            if (ti[k].optional && !nm) {
                free(ti);
                return strata_error(STRATA_ERR_NOMEM, "checkpoint: out of memory");
            }
            used += !ti[k].optional || strata_st_find(&mine->hs, nm) != NULL;
            free(nm);
        }
        free(ti);
    }
    for (int i = 0; i < c->nb; i++) {
        const strata_ckpt_block *b = &c->old[c->block_rank[i]].rk->blocks[c->block_src[i]];
        for (int k = 0; k < b->n_slots; k++)
            used += b->slots[k].state == STRATA_SLOT_READY ||
                    b->slots[k].state == STRATA_SLOT_INSTALLED;
    }
    if (mine->hs.n != used)
        return strata_error(STRATA_ERR_INVALID_ARG, "checkpoint %s holds %d tensors, this "
                            "runtime expects %d", mine->what, mine->hs.n, used);
    return STRATA_OK;
}

static strata_status copy_apply(const loader *c, const pending_copy *k)
{
    if (k->backend)
        return strata_backend_copy(c->v.be, k->dst, k->src, k->bytes);
    if (k->src)
        memcpy(k->dst, k->src, k->bytes);
    else /* an optional host tensor the checkpoint lacks (match_state) */
        memset(k->dst, 0, k->bytes);
    return STRATA_OK;
}

/* Engine block i's entry when its state pages (-1: not paged). */
static int block_page(const loader *c, int i)
{
    strata_refresh_block_desc d;
    if (strata_refresh_block_describe(c->v.engine, i, &d) != STRATA_OK)
        return -1;
    return strata_refresh_paged(c->v.engine, d.entry) ? d.entry : -1;
}

static strata_status block_apply(const loader *c, int i)
{
    const strata_ckpt_block *b = &c->old[c->block_rank[i]].rk->blocks[c->block_src[i]];
    return strata_refresh_block_restore(c->v.engine, i,
                                        &c->images[(size_t)i * STRATA_CKPT_MAX_SLOTS],
                                        c->block_nslots[i], b->have);
}

/* State paging: the paged entries in the order their copies come, then
 * any whose blocks only are restored (each once; *n of them). */
static int *paged_order(const loader *c, int *n)
{
    int *v = malloc(((size_t)c->n_copies + (size_t)c->nb + 1) * sizeof *v);
    *n = 0;
    for (int i = 0; v && i < c->n_copies + c->nb; i++) {
        const int id = i < c->n_copies ? c->copies[i].page - 1 : block_page(c, i - c->n_copies);
        bool seen = id < 0;
        for (int j = 0; j < *n && !seen; j++)
            seen = v[j] == id;
        if (!seen)
            v[(*n)++] = id;
    }
    return v;
}

/* One paged entry's part of the load: pinned (read back, the next one's
 * read started ahead), its blocks restored (the install's replay touches
 * its state), its family tensors copied over, its write-back started (the
 * next pin lands it and drops its pages). */
static strata_status paged_apply(const loader *c, int id, int ahead)
{
    strata_status st = strata_refresh_page_pin(c->v.engine, id, ahead);
    for (int i = 0; i < c->nb && st == STRATA_OK; i++)
        if (block_page(c, i) == id)
            st = block_apply(c, i);
    for (int i = 0; i < c->n_copies && st == STRATA_OK; i++)
        if (c->copies[i].page - 1 == id)
            st = copy_apply(c, &c->copies[i]);
    strata_refresh_page_changed(c->v.engine, id); /* what was written, even on a failure */
    return st;
}

/* Change state: engine blocks (registry, slots, replayed install), then the
 * family tensors and the weights over them. Materialized managed layers
 * are stale from here on. A paged run (strata_config.page_state) does the
 * same one paged parameter at a time (paged_apply: at most two states
 * resident); each parameter's install and copies touch only its own state,
 * so the order across parameters does not change the result. */
static strata_status load_apply(loader *c)
{
    release_layers(c->rt, &c->v);
    strata_status st = strata_refresh_drain(c->v.engine, NULL);
    const bool paging = c->v.cfg->page_state;
    for (int i = 0; i < c->nb && st == STRATA_OK; i++)
        if (!paging || block_page(c, i) < 0)
            st = block_apply(c, i);
    if (st == STRATA_OK && paging) {
        int n = 0;
        int *order = paged_order(c, &n);
        if (!order)
            st = strata_error(STRATA_ERR_NOMEM, "checkpoint: out of memory");
        for (int j = 0; j < n && st == STRATA_OK; j++) {
            st = paged_apply(c, order[j], j + 1 < n ? order[j + 1] : -1);
            if (st != STRATA_OK) {
                char why[300];
                snprintf(why, sizeof why, "%s", strata_last_error());
                st = strata_error(st, "strata_load: %s; the runtime is partly loaded (the "
                                  "parameters before it): load again or start over", why);
            }
        }
        page_release_keep(c->v.engine, st);
        free(order);
    }
    for (int i = 0; i < c->n_copies && st == STRATA_OK; i++)
        if (!c->copies[i].page)
            st = copy_apply(c, &c->copies[i]);
    return st;
}

/* The step counter, the statistics counters, the caller's JSON. */
static strata_status load_restore(loader *c, char **user_json, strata_load_info *info,
                                  double t0)
{
    const strata_ckpt_manifest *m = c->m;
    strata_rt_restore_step(c->rt, m->step, (float)m->lr_scale);
    strata_status st = STRATA_OK;
    for (int i = 0; i < m->n_params && st == STRATA_OK; i++) /* checked: load_check_params */
        st = strata_rt_param_hyper(c->rt, i, m->params[i].hyper_set, (float)m->params[i].lr,
                                   (float)m->params[i].weight_decay);
    if (st == STRATA_OK)
        st = stats_restore(c->rt, &c->v, m);
    if (user_json && !(*user_json = strdup(m->user_json)))
        st = strata_error(STRATA_ERR_NOMEM, "checkpoint: out of memory");
    size_t bytes = c->fm.len;
    for (int r = 0; r < m->world_size; r++)
        bytes += c->old[r].loaded ? c->old[r].fs.len + c->old[r].fj.len : 0;
    if (info)
        *info = (strata_load_info){.step = m->step,
                                   .seconds = strata_now_seconds() - t0,
                                   .bytes = bytes};
    if (st == STRATA_OK && c->n_retuned)
        strata_log(c->rt, STRATA_LOG_INFO, "ckpt", "%d refresh blocks continue under new "
                   "refresh settings; %d finished results that did not fit were dropped (their "
                   "refresh points are skipped)", c->n_retuned, c->n_dropped);
    if (st == STRATA_OK)
        strata_log(c->rt, STRATA_LOG_INFO, "ckpt", "loaded step %lld from %s (%d ranks at save, "
                   "%d now; %d refresh jobs were drained at save)", (long long)m->step, c->dir,
                   m->world_size, c->v.world, (int)m->drained_jobs);
    return st;
}

static void load_free(loader *c)
{
    free(c->images);
    free(c->copies);
    free(c->block_src);
    free(c->block_rank);
    free(c->block_nslots);
    strata_st_header_free(&c->hm);
    model_file_free(&c->fm);
    if (c->old)
        for (int r = 0; r < c->m->world_size; r++)
            old_rank_free(&c->old[r]);
    free(c->old);
    strata_ckpt_manifest_free(c->m);
}

static strata_status load_unguarded(strata_runtime *rt, const char *dir, char **user_json,
                                    strata_load_info *info)
{
    if (!rt || !dir)
        return strata_error(STRATA_ERR_INVALID_ARG, "strata_load: NULL runtime or directory");
    if (user_json)
        *user_json = NULL;
    loader c = {.rt = rt, .dir = dir};
    strata_rt_view_get(rt, &c.v);
    if (!c.v.committed)
        return strata_error(STRATA_ERR_STATE, "strata_load: call strata_commit first");
    const double t0 = strata_now_seconds();
    snprintf(c.what_m, sizeof c.what_m, "%s/%s", dir, MODEL_FILE);
    /* Read and match everything before changing anything. */
    strata_status st = read_manifest(dir, &c.m);
    if (st == STRATA_OK)
        st = load_check_params(&c);
    if (st == STRATA_OK)
        st = load_read_model(&c);
    if (st == STRATA_OK)
        st = load_match_tensors(&c);
    if (st == STRATA_OK)
        st = load_match_blocks(&c);
    if (st == STRATA_OK)
        st = load_check_count(&c);
    if (st == STRATA_OK) /* only for a load that goes ahead: warnings, what continues changed */
        config_compare(rt, c.v.cfg, c.m->config, dir);
    if (st == STRATA_OK)
        st = load_apply(&c);
    if (st == STRATA_OK)
        st = load_restore(&c, user_json, info, t0);
    load_free(&c);
    return st;
}

strata_status strata_load(strata_runtime *rt, const char *dir, char **user_json,
                          strata_load_info *info)
{
    if (!rt)
        return strata_error(STRATA_ERR_INVALID_ARG, "strata_load: NULL runtime");
    strata_status st = strata_rt_busy_enter(rt, "strata_load");
    if (st != STRATA_OK)
        return st;
    st = load_unguarded(rt, dir, user_json, info);
    strata_rt_busy_leave(rt);
    return st;
}

/* ---- verify */

static strata_status first_err(strata_status a, strata_status b)
{
    return a != STRATA_OK ? a : b;
}

/* Whether the manifest lists a file named `name`. */
static bool manifest_lists(const strata_ckpt_manifest *m, const char *name)
{
    for (int i = 0; i < m->n_files; i++)
        if (strcmp(m->files[i].name, name) == 0)
            return true;
    return false;
}

strata_status strata_ckpt_verify(const char *dir, strata_ckpt_visit_fn fn, void *user)
{
    if (!dir)
        return strata_error(STRATA_ERR_INVALID_ARG, "ckpt_verify: NULL directory");
    strata_ckpt_manifest *m = NULL;
    strata_status st = read_manifest(dir, &m);
    if (st != STRATA_OK) {
        if (fn) {
            strata_ckpt_entry e = {.file = "manifest.json", .tensor = "", .dtype = "",
                                   .owner = -1, .tier = "", .step = -1, .status = st,
                                   .message = strata_last_error(), .sha256 = "", .shape = ""};
            fn(user, &e);
        }
        return st;
    }
    strata_status result = STRATA_OK;
    char first_msg[1024] = "";
    for (int fi = 0; fi < m->n_files; fi++) {
        const char *name = m->files[fi].name;
        const size_t nl = strlen(name);
        const bool is_st = nl > 12 && strcmp(name + nl - 12, ".safetensors") == 0;
        loaded_file f;
        strata_status fst = load_file(dir, m, name, &f);
        char msg[1024] = "";
        if (fst != STRATA_OK)
            snprintf(msg, sizeof msg, "%s", strata_last_error());
        strata_st_header h = {0};
        if (fst == STRATA_OK && is_st) {
            char what[4200];
            snprintf(what, sizeof what, "%s/%s", dir, name);
            fst = strata_st_header_parse(what, f.buf, f.len, f.len, &h);
            if (fst != STRATA_OK)
                snprintf(msg, sizeof msg, "%s", strata_last_error());
        }
        /* The rank table of a rank's state file (for owner, tier and step). */
        strata_ckpt_rank *rk = NULL;
        int rank = -1;
        const char *bad_file = name; /* the file an error entry names */
        bool reported = false;       /* its error is another entry's to report */
        char jn[64] = "";
        if (is_st && sscanf(name, "rank-%d.safetensors", &rank) == 1) {
            rank_file(jn, sizeof jn, rank, "json");
            loaded_file fj;
            strata_status jst = load_file(dir, m, jn, &fj);
            /* A listed table that cannot be read is reported by its own entry
             * (once); a table that does not parse, or is not listed, here. */
            if (jst != STRATA_OK && fst == STRATA_OK && manifest_lists(m, jn))
                reported = true;
            if (jst == STRATA_OK) {
                char what[4200];
                snprintf(what, sizeof what, "%s/%s", dir, jn);
                jst = strata_ckpt_rank_parse(what, (const char *)fj.buf, fj.len, &rk);
                loaded_file_free(&fj);
            }
            if (jst != STRATA_OK && fst == STRATA_OK) {
                fst = jst;
                bad_file = jn; /* the rank's table, not its state file, is at fault */
                snprintf(msg, sizeof msg, "%s", strata_last_error());
            }
        }
        if (fst != STRATA_OK && !first_msg[0])
            snprintf(first_msg, sizeof first_msg, "%s", msg);
        result = first_err(result, fst);
        if (!is_st || h.n == 0 || fst != STRATA_OK) {
            if (fn && (fst != STRATA_OK || !is_st) && !reported) {
                strata_ckpt_entry e = {.file = bad_file, .tensor = "", .dtype = "", .owner = rank,
                                       .tier = "", .step = m->step, .bytes = m->files[fi].bytes,
                                       .status = fst, .message = msg, .sha256 = "", .shape = ""};
                fn(user, &e);
            }
        }
        for (int i = 0; fst == STRATA_OK && i < h.n; i++) {
            uint8_t dig[32];
            char hex[65], shape[160] = "[";
            sha256(f.buf + h.data_start + h.t[i].begin, h.t[i].end - h.t[i].begin, dig);
            hex32(dig, hex);
            for (int d = 0; d < h.t[i].ndim; d++)
                snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "%s%lld",
                         d ? "," : "", (long long)h.t[i].shape[d]);
            snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "]");
            strata_ckpt_entry e = {.file = name, .tensor = h.t[i].name,
                                   .dtype = strata_st_dtype_name(h.t[i].dtype), .owner = rank,
                                   .tier = "device", .step = m->step,
                                   .bytes = h.t[i].end - h.t[i].begin, .status = STRATA_OK,
                                   .message = "", .sha256 = hex, .shape = shape};
            if (rank < 0) {
                for (int k = 0; k < m->n_params; k++)
                    if (strcmp(m->params[k].name, h.t[i].name) == 0)
                        e.owner = m->params[k].owner;
            } else {
                bool listed = false;
                for (int k = 0; rk && k < rk->n_tensors; k++)
                    if (strcmp(rk->tensors[k].name, h.t[i].name) == 0) {
                        e.tier = rk->tensors[k].tier;
                        e.step = rk->tensors[k].step;
                        listed = true;
                    }
                if (!listed) {
                    e.status = STRATA_ERR_DATA;
                    e.message = "not in the rank's table";
                    result = first_err(result, STRATA_ERR_DATA);
                    if (!first_msg[0])
                        snprintf(first_msg, sizeof first_msg, "%s/%s: tensor '%s' is not in the "
                                 "rank's table", dir, name, h.t[i].name);
                }
            }
            if (fn)
                fn(user, &e);
        }
        /* Tensors the table lists but the file lacks. */
        for (int k = 0; fst == STRATA_OK && rk && k < rk->n_tensors; k++)
            if (!strata_st_find(&h, rk->tensors[k].name)) {
                result = first_err(result, STRATA_ERR_DATA);
                if (!first_msg[0])
                    snprintf(first_msg, sizeof first_msg, "%s/%s: tensor '%s' is missing", dir,
                             name, rk->tensors[k].name);
                if (fn) {
                    strata_ckpt_entry e = {.file = name, .tensor = rk->tensors[k].name,
                                           .dtype = "", .owner = rank, .tier = rk->tensors[k].tier,
                                           .step = rk->tensors[k].step,
                                           .status = STRATA_ERR_DATA, .message = "missing",
                                           .sha256 = "", .shape = ""};
                    fn(user, &e);
                }
            }
        strata_ckpt_rank_free(rk);
        strata_st_header_free(&h);
        loaded_file_free(&f);
    }
    bool have_model = false;
    for (int fi = 0; fi < m->n_files; fi++)
        have_model |= strcmp(m->files[fi].name, MODEL_FILE) == 0;
    if (!have_model && result == STRATA_OK) {
        result = STRATA_ERR_DATA;
        snprintf(first_msg, sizeof first_msg, "%s: the manifest lists no %s", dir, MODEL_FILE);
    }
    strata_ckpt_manifest_free(m);
    if (result != STRATA_OK)
        return strata_error(result, "%s", first_msg);
    return STRATA_OK;
}

/* data.c — byte corpus loader, train/val split and batch windows (data.h).
 *
 * The corpus is read whole into memory (fortunes: 2.8 MB), then copied
 * once into its final layout: train chunks first, val chunks after, in one
 * allocation that gpt_data.train owns. Token files (train.bin, val.bin) are
 * mapped instead, read-only, and read in place.
 */
#include "data.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gpt_rng.h"
#include "strata/status.h"

#define CHUNK_MAX 4096
#define CHUNK_MIN 256
#define VAL_CHUNKS_WANTED 8

/* A growing byte buffer. */
typedef struct bytes {
    uint8_t *p;
    size_t n, cap;
} bytes;

static int bytes_reserve(bytes *b, size_t extra)
{
    if (b->cap - b->n >= extra)
        return 0;
    size_t cap = b->cap ? b->cap : 1 << 16;
    while (cap - b->n < extra) {
        if (cap > SIZE_MAX / 2)
            return strata_error(STRATA_ERR_NOMEM, "gpt_data_load: corpus too large");
        cap *= 2;
    }
    uint8_t *p = realloc(b->p, cap);
    if (!p)
        return strata_error(STRATA_ERR_NOMEM, "gpt_data_load: cannot allocate %zu bytes", cap);
    b->p = p;
    b->cap = cap;
    return 0;
}

static int too_large(const char *what, size_t max_bytes)
{
    return strata_error(STRATA_ERR_NOMEM,
                        "gpt_data_load: the corpus passes %zu bytes at %s, the most the memory "
                        "limit leaves for it (the loader holds it twice while splitting); use a "
                        "smaller corpus or a larger memory limit", max_bytes, what);
}

/* Append everything readable from fd (a regular file, until EOF) to b, at
 * most max_bytes in all (0 = no limit). `what` names the file in messages. */
static int read_all(int fd, const char *what, size_t max_bytes, bytes *b)
{
    struct stat st;
    if (fstat(fd, &st) == 0 && st.st_size > 0) {
        if (max_bytes && (uint64_t)st.st_size > max_bytes - b->n)
            return too_large(what, max_bytes);
        int rc = bytes_reserve(b, (size_t)st.st_size + 1);
        if (rc)
            return rc;
    }
    for (;;) {
        if (max_bytes && b->n > max_bytes) /* the file grew while we read it */
            return too_large(what, max_bytes);
        int rc = bytes_reserve(b, 1 << 16);
        if (rc)
            return rc;
        ssize_t r = read(fd, b->p + b->n, b->cap - b->n);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return strata_error(STRATA_ERR_IO, "gpt_data_load: cannot read %s: %s",
                                what, strerror(errno));
        }
        if (r == 0)
            return 0;
        b->n += (size_t)r;
    }
}

static int name_skipped(const char *name)
{
    size_t len = strlen(name);
    return name[0] == '.' || (len >= 4 && strcmp(name + len - 4, ".dat") == 0);
}

/* Open `name` (relative to dfd) for reading without blocking on a FIFO and
 * confirm it is a regular file. Returns the fd, -1 with errno, or -2 when it
 * is not a regular file (*mode says what it is). */
static int open_regular(int dfd, const char *name, int nofollow, mode_t *mode)
{
    int fd = openat(dfd, name, O_RDONLY | O_CLOEXEC | O_NONBLOCK | (nofollow ? O_NOFOLLOW : 0));
    if (fd < 0)
        return -1;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int err = errno;
        close(fd);
        errno = err;
        return -1;
    }
    *mode = st.st_mode;
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return -2;
    }
    return fd;
}

static const char *mode_name(mode_t m)
{
    return S_ISFIFO(m)   ? "a FIFO"
           : S_ISCHR(m)  ? "a character device"
           : S_ISBLK(m)  ? "a block device"
           : S_ISSOCK(m) ? "a socket"
                         : "not a regular file";
}

/* One file found under a corpus directory: its path relative to the
 * directory, the file it resolves to, and whether a symlink named it. */
typedef struct dir_entry {
    char *rel;
    dev_t dev;
    ino_t ino;
    int via_link;
} dir_entry;

typedef struct dir_list {
    dir_entry *e;
    size_t n, cap;
    /* the directories being walked, outermost first: a symlinked directory
     * that leads back into one of them is a loop and is not entered */
    dev_t anc_dev[GPT_DATA_MAX_DEPTH + 1];
    ino_t anc_ino[GPT_DATA_MAX_DEPTH + 1];
    int depth;
} dir_list;

static int cmp_entries(const void *a, const void *b)
{
    return strcmp(((const dir_entry *)a)->rel, ((const dir_entry *)b)->rel);
}

static int list_push(dir_list *l, const char *root, const char *rel, const struct stat *st,
                     int via_link)
{
    if (l->n == l->cap) {
        size_t ncap = l->cap ? 2 * l->cap : 64;
        dir_entry *ne = realloc(l->e, ncap * sizeof *ne);
        if (!ne)
            return strata_error(STRATA_ERR_NOMEM, "gpt_data_load: out of memory listing %s",
                                root);
        l->e = ne;
        l->cap = ncap;
    }
    if (!(l->e[l->n].rel = strdup(rel)))
        return strata_error(STRATA_ERR_NOMEM, "gpt_data_load: out of memory listing %s", root);
    l->e[l->n].dev = st->st_dev;
    l->e[l->n].ino = st->st_ino;
    l->e[l->n].via_link = via_link;
    l->n++;
    return 0;
}

/* List the regular files of root/rel (rel "" is root itself); with
 * `recursive`, descend into subdirectories (symlinked ones too, loops
 * excepted) up to GPT_DATA_MAX_DEPTH levels. Symlinks to regular files are
 * listed with via_link set. */
static int list_dir(const char *root, const char *rel, int recursive, dir_list *l)
{
    char dpath[4096];
    if ((size_t)snprintf(dpath, sizeof dpath, "%s%s%s", root, *rel ? "/" : "", rel) >=
        sizeof dpath)
        return strata_error(STRATA_ERR_IO, "gpt_data_load: path too long under %s", root);
    DIR *dir = opendir(dpath);
    if (!dir)
        return strata_error(STRATA_ERR_IO, "gpt_data_load: cannot open directory %s: %s",
                            dpath, strerror(errno));
    const int dfd = dirfd(dir);
    int rc = 0;
    for (;;) {
        errno = 0;
        struct dirent *e = readdir(dir);
        if (!e) {
            if (errno)
                rc = strata_error(STRATA_ERR_IO, "gpt_data_load: cannot list %s: %s", dpath,
                                  strerror(errno));
            break;
        }
        if (name_skipped(e->d_name))
            continue;
        struct stat lst, st;
        if (fstatat(dfd, e->d_name, &lst, AT_SYMLINK_NOFOLLOW) != 0)
            continue; /* vanished */
        const int link = S_ISLNK(lst.st_mode);
        if (link && fstatat(dfd, e->d_name, &st, 0) != 0)
            continue; /* a dangling symlink */
        if (!link)
            st = lst;
        char sub[4096];
        if ((size_t)snprintf(sub, sizeof sub, "%s%s%s", rel, *rel ? "/" : "", e->d_name) >=
            sizeof sub) {
            rc = strata_error(STRATA_ERR_IO, "gpt_data_load: path too long under %s", root);
            break;
        }
        if (S_ISREG(st.st_mode)) {
            if ((rc = list_push(l, root, sub, &st, link)))
                break;
        } else if (S_ISDIR(st.st_mode) && recursive) {
            int loop = 0;
            for (int i = 0; i <= l->depth; i++)
                loop |= l->anc_dev[i] == st.st_dev && l->anc_ino[i] == st.st_ino;
            if (loop)
                continue;
            if (l->depth == GPT_DATA_MAX_DEPTH) {
                rc = strata_error(STRATA_ERR_DATA, "gpt_data_load: %s/%s is more than %d "
                                  "directories deep", root, sub, GPT_DATA_MAX_DEPTH);
                break;
            }
            l->depth++;
            l->anc_dev[l->depth] = st.st_dev;
            l->anc_ino[l->depth] = st.st_ino;
            rc = list_dir(root, sub, recursive, l);
            l->depth--;
            if (rc)
                break;
        }
    }
    closedir(dir);
    return rc;
}

/* Concatenate the regular files under directory `path` in sorted order of
 * their relative paths. A file reached through a symlink is read only when
 * no other entry is the same file (fortune's "*.u8" links name files of the
 * same folder; a Hugging Face cache's snapshots are links into blobs/). */
static int read_dir(const char *path, int recursive, size_t max_bytes, bytes *b,
                    size_t *n_files)
{
    dir_list l = { 0 };
    struct stat rst;
    if (stat(path, &rst) != 0)
        return strata_error(STRATA_ERR_IO, "gpt_data_load: cannot access %s: %s", path,
                            strerror(errno));
    l.anc_dev[0] = rst.st_dev;
    l.anc_ino[0] = rst.st_ino;
    int rc = list_dir(path, "", recursive, &l);
    if (rc)
        goto out;
    if (l.n)
        qsort(l.e, l.n, sizeof *l.e, cmp_entries);

    for (size_t i = 0; i < l.n; i++) {
        int dup = 0;
        /* a file named directly wins over a link to it; of several links to one
         * file, the first in order is read (quadratic in the links only) */
        for (size_t j = 0; l.e[i].via_link && j < l.n && !dup; j++)
            dup = j != i && l.e[j].dev == l.e[i].dev && l.e[j].ino == l.e[i].ino &&
                  (!l.e[j].via_link || j < i);
        if (dup)
            continue;
        char what[8192];
        snprintf(what, sizeof what, "%s/%s", path, l.e[i].rel);
        mode_t mode;
        int fd = open_regular(AT_FDCWD, what, 0, &mode);
        if (fd == -2)
            continue; /* replaced by something else since it was listed */
        if (fd < 0) {
            rc = strata_error(STRATA_ERR_IO, "gpt_data_load: cannot open %s: %s", what,
                              strerror(errno));
            goto out;
        }
        rc = read_all(fd, what, max_bytes, b);
        close(fd);
        if (rc)
            goto out;
        (*n_files)++;
    }
out:
    for (size_t i = 0; i < l.n; i++)
        free(l.e[i].rel);
    free(l.e);
    return rc;
}

static int read_path(const char *path, int recursive, size_t max_bytes, bytes *b,
                     size_t *n_files)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return strata_error(STRATA_ERR_IO, "gpt_data_load: cannot access %s: %s",
                            path, strerror(errno));
    if (S_ISDIR(st.st_mode))
        return read_dir(path, recursive, max_bytes, b, n_files);
    mode_t mode = st.st_mode;
    int fd = open_regular(AT_FDCWD, path, 0, &mode);
    if (fd == -2)
        return strata_error(STRATA_ERR_DATA, "gpt_data_load: %s is %s; the corpus must be a "
                            "regular file or a directory of them", path, mode_name(mode));
    if (fd < 0)
        return strata_error(STRATA_ERR_IO, "gpt_data_load: cannot open %s: %s",
                            path, strerror(errno));
    int rc = read_all(fd, path, max_bytes, b);
    close(fd);
    if (rc == 0)
        *n_files = 1;
    return rc;
}

static int chunk_is_val(size_t i, double f)
{
    return floor((double)(i + 1) * f) > floor((double)i * f);
}

static size_t chunk_size(size_t n, double f, size_t min_len)
{
    const size_t smallest = min_len > CHUNK_MIN ? min_len : CHUNK_MIN;
    size_t chunk = CHUNK_MAX;
    if (f <= 0.0)
        return chunk;
    while (chunk / 2 >= smallest && (double)(n / chunk) * f < VAL_CHUNKS_WANTED)
        chunk /= 2;
    return chunk;
}

/* Bytes of p[0..n) that are text: printable ASCII, whitespace (\t \n \v \f
 * \r), or part of a well-formed UTF-8 sequence of 2 to 4 bytes. */
static size_t text_bytes(const uint8_t *p, size_t n)
{
    size_t text = 0;
    for (size_t i = 0; i < n;) {
        const uint8_t c = p[i];
        if ((c >= 0x20 && c < 0x7f) || (c >= '\t' && c <= '\r')) {
            text++;
            i++;
            continue;
        }
        const size_t len = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3
                           : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
        size_t k = 1;
        while (len && k < len && i + k < n && (p[i + k] & 0xc0) == 0x80)
            k++;
        if (len && k == len) {
            text += len;
            i += len;
        } else {
            i++;
        }
    }
    return text;
}

int gpt_data_load(const char *path, double val_fraction, int min_len, gpt_data *out)
{
    return gpt_data_load_limit(path, val_fraction, min_len, 0, out);
}

int gpt_data_load_limit(const char *path, double val_fraction, int min_len, size_t max_bytes,
                        gpt_data *out)
{
    return gpt_data_load_flags(path, val_fraction, min_len, max_bytes, 0, out);
}

int gpt_data_load_flags(const char *path, double val_fraction, int min_len, size_t max_bytes,
                        unsigned flags, gpt_data *out)
{
    if (out)
        memset(out, 0, sizeof *out);
    if (!path || !out)
        return strata_error(STRATA_ERR_INVALID_ARG, "gpt_data_load: %s is NULL",
                            path ? "out" : "path");
    if (!(val_fraction >= 0.0 && val_fraction < 1.0))
        return strata_error(STRATA_ERR_INVALID_ARG,
                            "gpt_data_load: val_fraction=%g, need 0 <= val_fraction < 1",
                            val_fraction);
    if (min_len < 2)
        return strata_error(STRATA_ERR_INVALID_ARG, "gpt_data_load: min_len=%d, need >= 2",
                            min_len);

    bytes all = { 0 };
    size_t n_files = 0;
    int rc = read_path(path, (flags & GPT_DATA_RECURSIVE) != 0, max_bytes, &all, &n_files);
    if (rc)
        goto out_free_all;
    if (all.n == 0) {
        rc = strata_error(STRATA_ERR_DATA, "gpt_data_load: no data in %s: 0 bytes in %zu "
                          "file(s) (hidden files, *.dat%s are skipped)", path, n_files,
                          (flags & GPT_DATA_RECURSIVE) ? "" : " and subdirectories (read "
                          "them with --data-recursive)");
        goto out_free_all;
    }
    if (all.n < (size_t)min_len) {
        rc = strata_error(STRATA_ERR_DATA, "gpt_data_load: %s has %zu bytes, needs at least "
                          "%d (context + 1)", path, all.n, min_len);
        goto out_free_all;
    }

    /* Split into train chunks then val chunks, in corpus order. */
    const size_t n = all.n, chunk = chunk_size(n, val_fraction, (size_t)min_len);
    size_t n_val = 0;
    for (size_t i = 0; i * chunk < n; i++) {
        size_t len = n - i * chunk < chunk ? n - i * chunk : chunk;
        if (chunk_is_val(i, val_fraction))
            n_val += len;
    }
    const size_t n_train = n - n_val;
    if (n_train < (size_t)min_len || (val_fraction > 0.0 && n_val < (size_t)min_len)) {
        rc = strata_error(STRATA_ERR_DATA, "gpt_data_load: %s has %zu bytes; split with "
                          "val_fraction=%g gives train %zu and val %zu bytes, each needs at "
                          "least %d (context + 1)", path, n, val_fraction, n_train, n_val,
                          min_len);
        goto out_free_all;
    }
    uint8_t *split = malloc(n);
    if (!split) {
        rc = strata_error(STRATA_ERR_NOMEM, "gpt_data_load: cannot allocate %zu bytes", n);
        goto out_free_all;
    }
    size_t t_off = 0, v_off = n_train;
    for (size_t i = 0; i * chunk < n; i++) {
        size_t len = n - i * chunk < chunk ? n - i * chunk : chunk;
        size_t *dst = chunk_is_val(i, val_fraction) ? &v_off : &t_off;
        memcpy(split + *dst, all.p + i * chunk, len);
        *dst += len;
    }
    out->train = split;
    out->n_train = n_train;
    out->val = n_val ? split + n_train : NULL;
    out->n_val = n_val;
    out->n_files = n_files;
    out->text_fraction = (double)text_bytes(all.p, n) / (double)n;
    out->format = GPT_DATA_BYTES;
    out->vocab = 256;

out_free_all:
    free(all.p);
    return rc;
}

void gpt_data_free(gpt_data *d)
{
    if (!d)
        return;
    if (d->format == GPT_DATA_TOKENS) {
        if (d->train)
            munmap(d->train, 2 * d->n_train);
        if (d->val)
            munmap(d->val, 2 * d->n_val);
    } else {
        free(d->train);
    }
    memset(d, 0, sizeof *d);
}

/* ---- token files */

/* Map dir/name (2 bytes per id) read-only into *p, *n ids, and check every
 * id < vocab. */
static int map_tokens(const char *dir, const char *name, int vocab, int min_len, uint8_t **p,
                      size_t *n)
{
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, name) >= sizeof path)
        return strata_error(STRATA_ERR_IO, "gpt_data_load_tokens: path too long: %s", dir);
    mode_t mode = 0;
    int fd = open_regular(AT_FDCWD, path, 0, &mode);
    if (fd == -2)
        return strata_error(STRATA_ERR_DATA, "gpt_data_load_tokens: %s is %s; token files "
                            "must be regular files", path, mode_name(mode));
    if (fd < 0)
        return strata_error(STRATA_ERR_IO, "gpt_data_load_tokens: cannot open %s: %s%s", path,
                            strerror(errno), errno == ENOENT ? " (a token directory holds "
                            "train.bin and val.bin: examples/torch/make_tokens.py)" : "");
    struct stat st;
    int rc = 0;
    if (fstat(fd, &st) != 0) {
        rc = strata_error(STRATA_ERR_IO, "gpt_data_load_tokens: cannot stat %s: %s", path,
                          strerror(errno));
    } else if (st.st_size == 0) {
        rc = strata_error(STRATA_ERR_DATA, "gpt_data_load_tokens: %s is empty", path);
    } else if (st.st_size % 2) {
        rc = strata_error(STRATA_ERR_DATA, "gpt_data_load_tokens: %s has %lld bytes, an odd "
                          "number: not little-endian uint16 token ids", path,
                          (long long)st.st_size);
    } else if ((uint64_t)st.st_size / 2 < (uint64_t)min_len) {
        rc = strata_error(STRATA_ERR_DATA, "gpt_data_load_tokens: %s has %lld tokens, needs "
                          "at least %d (context + 1)", path, (long long)st.st_size / 2,
                          min_len);
    } else if ((uint64_t)st.st_size > SIZE_MAX) {
        rc = strata_error(STRATA_ERR_DATA, "gpt_data_load_tokens: %s is too large to map",
                          path);
    }
    if (rc) {
        close(fd);
        return rc;
    }
    const size_t len = (size_t)st.st_size;
    void *m = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
    const int err = errno;
    close(fd);
    if (m == MAP_FAILED)
        return strata_error(STRATA_ERR_IO, "gpt_data_load_tokens: cannot map %s (%zu bytes): "
                            "%s", path, len, strerror(err));
    madvise(m, len, MADV_SEQUENTIAL); /* the scan below reads it once, in order */
    const uint8_t *b = m;
    const size_t ids = len / 2;
    for (size_t i = 0; i < ids; i++) {
        const unsigned id = (unsigned)b[2 * i] | (unsigned)b[2 * i + 1] << 8;
        if (id >= (unsigned)vocab) {
            munmap(m, len);
            return strata_error(STRATA_ERR_DATA, "gpt_data_load_tokens: %s holds id %u at "
                                "byte offset %zu (token %zu), >= the vocabulary size %d "
                                "(--vocab-size, or meta.json's vocab_size)", path, id, 2 * i,
                                i, vocab);
        }
    }
    madvise(m, len, MADV_RANDOM); /* training reads random windows */
    *p = (uint8_t *)m;
    *n = ids;
    return 0;
}

int gpt_data_load_tokens(const char *dir, int vocab, int min_len, gpt_data *out)
{
    if (out)
        memset(out, 0, sizeof *out);
    if (!dir || !out)
        return strata_error(STRATA_ERR_INVALID_ARG, "gpt_data_load_tokens: %s is NULL",
                            dir ? "out" : "dir");
    if (vocab < 2 || vocab > 65536)
        return strata_error(STRATA_ERR_INVALID_ARG, "gpt_data_load_tokens: vocabulary size %d "
                            "for %s, need 2 <= V <= 65536 (ids are uint16)", vocab, dir);
    if (min_len < 2)
        return strata_error(STRATA_ERR_INVALID_ARG, "gpt_data_load_tokens: min_len=%d, need "
                            ">= 2", min_len);
    struct stat st;
    if (stat(dir, &st) != 0)
        return strata_error(STRATA_ERR_IO, "gpt_data_load_tokens: cannot access %s: %s", dir,
                            strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return strata_error(STRATA_ERR_DATA, "gpt_data_load_tokens: %s is not a directory "
                            "(token files: a directory with train.bin and val.bin)", dir);
    gpt_data d = {0};
    d.format = GPT_DATA_TOKENS;
    d.vocab = vocab;
    int rc = map_tokens(dir, "train.bin", vocab, min_len, &d.train, &d.n_train);
    if (!rc)
        rc = map_tokens(dir, "val.bin", vocab, min_len, &d.val, &d.n_val);
    if (rc) {
        gpt_data_free(&d);
        return rc;
    }
    d.n_files = 2;
    d.text_fraction = 1.0;
    *out = d;
    return 0;
}

int gpt_data_is_token_dir(const char *path)
{
    struct stat st;
    char tb[4096];
    if (!path || stat(path, &st) != 0 || !S_ISDIR(st.st_mode) ||
        (size_t)snprintf(tb, sizeof tb, "%s/train.bin", path) >= sizeof tb)
        return 0;
    return stat(tb, &st) == 0 && S_ISREG(st.st_mode);
}

/* Copy the window of T + 1 ids at `start` of split `p` into x and y (row b):
 * 1-byte ids into x8/y8, or any format's ids into x16/y16. */
static void copy_window(const gpt_data *d, int split, size_t start, int T, size_t row,
                        uint8_t *x8, uint8_t *y8, uint16_t *x16, uint16_t *y16)
{
    const uint8_t *p = split == 0 ? d->train : d->val;
    if (x8) {
        memcpy(x8 + row, p + start, (size_t)T);
        memcpy(y8 + row, p + start + 1, (size_t)T);
        return;
    }
    for (int t = 0; t < T; t++) {
        x16[row + (size_t)t] = (uint16_t)gpt_data_id(d, split, start + (size_t)t);
        y16[row + (size_t)t] = (uint16_t)gpt_data_id(d, split, start + (size_t)t + 1);
    }
}

static const uint8_t *split_of(const gpt_data *d, int split, size_t *n)
{
    *n = split == 0 ? d->n_train : d->n_val;
    return split == 0 ? d->train : d->val;
}

/* gpt_data_batch (x8, y8; bytes only) or gpt_data_batch_ids (x16, y16). */
static void batch(const gpt_data *d, int split, int B, int T, uint64_t *rng_state,
                  uint8_t *x8, uint8_t *y8, uint16_t *x16, uint16_t *y16)
{
    const size_t BT = (size_t)B * (size_t)T, w = x8 ? 1 : sizeof *x16;
    void *x = x8 ? (void *)x8 : (void *)x16, *y = y8 ? (void *)y8 : (void *)y16;
    size_t n = 0;
    const uint8_t *p = d ? split_of(d, split, &n) : NULL;
    if (!p || !rng_state || n < (size_t)T + 1 || (x8 && d->format == GPT_DATA_TOKENS)) {
        memset(x, 0, BT * w);
        memset(y, 0, BT * w);
        return;
    }
    const uint64_t starts = n - (size_t)T;   /* windows [s, s + T] with s < starts */
    for (int b = 0; b < B; b++) {
        size_t s = (size_t)(gpt_splitmix64(rng_state) % starts);
        copy_window(d, split, s, T, (size_t)b * T, x8, y8, x16, y16);
    }
}

void gpt_data_batch(const gpt_data *d, int split, int B, int T, uint64_t *rng_state,
                    uint8_t *x, uint8_t *y)
{
    if (x && y && B >= 1 && T >= 1)
        batch(d, split, B, T, rng_state, x, y, NULL, NULL);
}

void gpt_data_batch_ids(const gpt_data *d, int split, int B, int T, uint64_t *rng_state,
                        uint16_t *x, uint16_t *y)
{
    if (x && y && B >= 1 && T >= 1)
        batch(d, split, B, T, rng_state, NULL, NULL, x, y);
}

size_t gpt_data_eval_windows(const gpt_data *d, int T)
{
    if (!d || !d->val || T < 1 || d->n_val < (size_t)T + 1)
        return 0;
    return (d->n_val - 1) / (size_t)T;
}

static uint64_t gcd_u64(uint64_t a, uint64_t b)
{
    while (b) {
        uint64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* (a * b) mod m without overflow, for a, b < m. */
static uint64_t mulmod(uint64_t a, uint64_t b, uint64_t m)
{
    if (a == 0 || b <= UINT64_MAX / a)
        return a * b % m;
    uint64_t r = 0;
    while (b) {
        if (b & 1)
            r = r >= m - a ? r - (m - a) : r + a;
        a = a >= m - a ? a - (m - a) : a + a;
        b >>= 1;
    }
    return r;
}

static void eval_batch(const gpt_data *d, int k, int B, int T, uint8_t *x8, uint8_t *y8,
                       uint16_t *x16, uint16_t *y16)
{
    const size_t BT = (size_t)B * (size_t)T, w = x8 ? 1 : sizeof *x16;
    void *x = x8 ? (void *)x8 : (void *)x16, *y = y8 ? (void *)y8 : (void *)y16;
    const uint64_t W = gpt_data_eval_windows(d, T);
    if (W == 0 || k < 0 || (x8 && d->format == GPT_DATA_TOKENS)) {
        memset(x, 0, BT * w);
        memset(y, 0, BT * w);
        return;
    }
    uint64_t P = (uint64_t)((double)W * 0.6180339887498949);
    if (P == 0)
        P = 1;
    while (gcd_u64(P % W, W) != 1)
        P++;
    P %= W;
    const uint64_t first = mulmod((uint64_t)k % W, (uint64_t)B % W, W);
    for (int b = 0; b < B; b++) {
        uint64_t j = (first + (uint64_t)b) % W;
        uint64_t start = mulmod(j, P, W) * (uint64_t)T;
        copy_window(d, 1, (size_t)start, T, (size_t)b * T, x8, y8, x16, y16);
    }
}

void gpt_data_eval_batch(const gpt_data *d, int k, int B, int T, uint8_t *x, uint8_t *y)
{
    if (x && y && B >= 1 && T >= 1)
        eval_batch(d, k, B, T, x, y, NULL, NULL);
}

void gpt_data_eval_batch_ids(const gpt_data *d, int k, int B, int T, uint16_t *x, uint16_t *y)
{
    if (x && y && B >= 1 && T >= 1)
        eval_batch(d, k, B, T, NULL, NULL, x, y);
}

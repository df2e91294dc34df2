/* test_data.c — the GPT example's byte corpus loader (trainer/data.h).
 *
 * Bad input gives the documented status and a message, never a crash:
 * missing path, empty file, empty directory, a directory of skipped files
 * only, a corpus shorter than the context. Bytes are preserved exactly
 * (all 256 values). The train/val split follows the rule in data.h
 * (re-derived here from its text), is deterministic and holds the asked
 * fraction. Batch windows are real substrings with y = x shifted by one;
 * evaluation batches visit each window once.
 *
 *   test_gpt_data               the unit tests (cmocka)
 *   test_gpt_data --fortunes    load /usr/share/games/fortunes; exit 77 when
 *                               it is not installed
 */
#include <errno.h>
#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "data.h"
#include "strata/status.h"

#define FORTUNES "/usr/share/games/fortunes"

/* ---- fixtures ---------------------------------------------------------- */

typedef struct fixture {
    char dir[256];      /* fresh empty directory */
    char other[256];    /* a second one, for symlink targets */
} fixture;

static int make_dirs(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    if (!f)
        return -1;
    const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(f->dir, sizeof f->dir, "%s/gptdata-XXXXXX", tmp);
    snprintf(f->other, sizeof f->other, "%s/gptdata-XXXXXX", tmp);
    if (!mkdtemp(f->dir) || !mkdtemp(f->other)) {
        free(f);
        return -1;
    }
    *state = f;
    return 0;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static int remove_dirs(void **state)
{
    fixture *f = *state;
    nftw(f->dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    nftw(f->other, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    free(f);
    return 0;
}

static void path_in(char *out, size_t cap, const char *dir, const char *name)
{
    int n = snprintf(out, cap, "%s/%s", dir, name);
    assert_true(n > 0 && (size_t)n < cap); /* a truncated path would test the wrong file */
}

static void write_file(const char *dir, const char *name, const void *p, size_t n)
{
    char path[512];
    path_in(path, sizeof path, dir, name);
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    if (n)
        assert_int_equal(fwrite(p, 1, n, fp), n);
    assert_int_equal(fclose(fp), 0);
}

static uint8_t *random_bytes(size_t n, uint64_t seed)
{
    uint8_t *p = malloc(n);
    assert_non_null(p);
    for (size_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        p[i] = (uint8_t)(seed >> 56);
    }
    return p;
}

static int contains(const char *haystack, const char *needle)
{
    return strstr(haystack, needle) != NULL;
}

/* ---- the split rule of data.h, written again from its text ------------- */

static size_t rule_chunk(size_t n, double f, size_t min_len)
{
    size_t smallest = min_len > 256 ? min_len : 256, chunk = 4096;
    if (f <= 0.0)
        return chunk;
    while (chunk / 2 >= smallest && (double)(n / chunk) * f < 8)
        chunk /= 2;
    return chunk;
}

/* Expected train then val bytes, concatenated, into out (n bytes). */
static size_t rule_split(const uint8_t *src, size_t n, double f, size_t min_len, uint8_t *out)
{
    const size_t chunk = rule_chunk(n, f, min_len);
    size_t n_val = 0;
    for (size_t i = 0; i * chunk < n; i++)
        if (floor((double)(i + 1) * f) > floor((double)i * f))
            n_val += n - i * chunk < chunk ? n - i * chunk : chunk;
    size_t t = 0, v = n - n_val;
    for (size_t i = 0; i * chunk < n; i++) {
        size_t len = n - i * chunk < chunk ? n - i * chunk : chunk;
        size_t *dst = floor((double)(i + 1) * f) > floor((double)i * f) ? &v : &t;
        memcpy(out + *dst, src + i * chunk, len);
        *dst += len;
    }
    return n_val;
}

/* ---- errors ------------------------------------------------------------- */

static void test_missing_path(void **state)
{
    (void)state;
    gpt_data d;
    memset(&d, 0xAB, sizeof d);
    int rc = gpt_data_load("/nonexistent/strata-gpt-corpus", 0.1, 129, &d);
    assert_int_equal(rc, STRATA_ERR_IO);
    assert_null(d.train);
    assert_int_equal(d.n_train, 0);
    assert_true(contains(strata_last_error(), "/nonexistent/strata-gpt-corpus"));
    gpt_data_free(&d);   /* zeroed: no-op */
    gpt_data_free(NULL);
}

static void test_invalid_args(void **state)
{
    fixture *f = *state;
    gpt_data d;
    write_file(f->dir, "x", "hello world, hello world", 24);
    assert_int_equal(gpt_data_load(NULL, 0.1, 2, &d), STRATA_ERR_INVALID_ARG);
    assert_int_equal(gpt_data_load(f->dir, 0.1, 2, NULL), STRATA_ERR_INVALID_ARG);
    assert_int_equal(gpt_data_load(f->dir, -0.1, 2, &d), STRATA_ERR_INVALID_ARG);
    assert_int_equal(gpt_data_load(f->dir, 1.0, 2, &d), STRATA_ERR_INVALID_ARG);
    assert_int_equal(gpt_data_load(f->dir, NAN, 2, &d), STRATA_ERR_INVALID_ARG);
    assert_int_equal(gpt_data_load(f->dir, 0.0, 1, &d), STRATA_ERR_INVALID_ARG);
    assert_int_equal(gpt_data_load(f->dir, 0.0, 2, &d), 0);
    gpt_data_free(&d);
}

static void test_empty_file(void **state)
{
    fixture *f = *state;
    char path[512];
    gpt_data d;
    write_file(f->dir, "empty.txt", "", 0);
    path_in(path, sizeof path, f->dir, "empty.txt");
    assert_int_equal(gpt_data_load(path, 0.1, 129, &d), STRATA_ERR_DATA);
    assert_true(contains(strata_last_error(), "0 bytes"));
    assert_null(d.train);
}

static void test_empty_dir(void **state)
{
    fixture *f = *state;
    gpt_data d;
    assert_int_equal(gpt_data_load(f->dir, 0.1, 129, &d), STRATA_ERR_DATA);
    assert_true(contains(strata_last_error(), "0 bytes in 0 file"));
}

/* .dat indexes, hidden files, dangling symlinks and subdirectories are all
 * skipped. */
static void test_only_skipped_files(void **state)
{
    fixture *f = *state;
    char path[512], link[512], sub[512];
    gpt_data d;
    const char text[] = "A fortune a day keeps the doctor away.\n%\n";
    write_file(f->dir, "fortunes.dat", text, sizeof text - 1);
    write_file(f->dir, ".hidden", text, sizeof text - 1);
    path_in(path, sizeof path, f->other, "gone");
    path_in(link, sizeof link, f->dir, "fortunes.u8");
    assert_int_equal(symlink(path, link), 0);
    path_in(sub, sizeof sub, f->dir, "sub");
    assert_int_equal(mkdir(sub, 0700), 0);
    write_file(sub, "inner", text, sizeof text - 1);
    assert_int_equal(gpt_data_load(f->dir, 0.1, 2, &d), STRATA_ERR_DATA);
    assert_true(contains(strata_last_error(), "0 bytes"));
    assert_true(contains(strata_last_error(), "--data-recursive"));
}

static void link_in(const char *target_dir, const char *target, const char *dir,
                    const char *name)
{
    char path[512], link[512];
    path_in(path, sizeof path, target_dir, target);
    path_in(link, sizeof link, dir, name);
    assert_int_equal(symlink(path, link), 0);
}

/* Symlinks to regular files are read (a file reached twice, once), and
 * GPT_DATA_RECURSIVE reads subdirectories in path order, hidden ones and
 * symlink loops skipped: the layout of a Hugging Face cache (snapshot files
 * are links into blobs/) and of Debian's fortunes (name.u8 -> name). */
static void test_symlinks_and_recursive(void **state)
{
    fixture *f = *state;
    char sub[512], snap[512], blobs[512], git[512];
    gpt_data d;
    char a[300], e[300], h[300], in[300];
    memset(a, 'A', sizeof a);
    memset(e, 'E', sizeof e);
    memset(h, 'H', sizeof h);
    memset(in, 'I', sizeof in);
    write_file(f->dir, "a", a, sizeof a);
    link_in(f->dir, "a", f->dir, "a.u8");             /* the same file: read once */
    write_file(f->other, "target", e, sizeof e);
    link_in(f->other, "target", f->dir, "ext");       /* only a link reaches it: read */
    link_in(f->dir, ".", f->dir, "loop");             /* a directory loop */
    path_in(blobs, sizeof blobs, f->other, "blobs");
    assert_int_equal(mkdir(blobs, 0700), 0);
    write_file(blobs, "h1", h, sizeof h);
    path_in(snap, sizeof snap, f->dir, "snap");
    assert_int_equal(mkdir(snap, 0700), 0);
    link_in(blobs, "h1", snap, "file.txt");
    link_in(blobs, "h1", snap, "copy.txt");           /* two links, one blob: read once */
    path_in(sub, sizeof sub, f->dir, "sub");
    assert_int_equal(mkdir(sub, 0700), 0);
    write_file(sub, "inner", in, sizeof in);
    path_in(git, sizeof git, sub, ".git");
    assert_int_equal(mkdir(git, 0700), 0);
    write_file(git, "HEAD", "zzzz", 4);

    assert_int_equal(gpt_data_load(f->dir, 0.0, 2, &d), 0);
    assert_int_equal(d.n_files, 2);
    assert_int_equal(d.n_train, 600);
    assert_memory_equal(d.train, a, 300);
    assert_memory_equal(d.train + 300, e, 300);
    gpt_data_free(&d);

    assert_int_equal(gpt_data_load_flags(f->dir, 0.0, 2, 0, GPT_DATA_RECURSIVE, &d), 0);
    assert_int_equal(d.n_files, 4);
    assert_int_equal(d.n_train, 1200);
    assert_memory_equal(d.train, a, 300);
    assert_memory_equal(d.train + 300, e, 300);
    assert_memory_equal(d.train + 600, h, 300);
    assert_memory_equal(d.train + 900, in, 300);
    gpt_data_free(&d);

    /* the data root itself may be a symlink to a directory */
    link_in(f->dir, "sub", f->other, "root-link");
    char root[512];
    path_in(root, sizeof root, f->other, "root-link");
    assert_int_equal(gpt_data_load(root, 0.0, 2, &d), 0);
    assert_int_equal(d.n_train, 300);
    assert_memory_equal(d.train, in, 300);
    gpt_data_free(&d);
}

static void test_shorter_than_context(void **state)
{
    fixture *f = *state;
    char path[512];
    gpt_data d;
    uint8_t *bytes = random_bytes(200, 1);
    write_file(f->dir, "short", bytes, 100);
    path_in(path, sizeof path, f->dir, "short");
    assert_int_equal(gpt_data_load(path, 0.1, 129, &d), STRATA_ERR_DATA);
    assert_true(contains(strata_last_error(), "100 bytes"));
    assert_true(contains(strata_last_error(), "129"));

    /* long enough in total, but the val split would be too short */
    write_file(f->dir, "short", bytes, 200);
    assert_int_equal(gpt_data_load(path, 0.1, 129, &d), STRATA_ERR_DATA);
    assert_true(contains(strata_last_error(), "val 0 bytes"));
    assert_true(contains(strata_last_error(), "129"));
    /* without a val split it loads */
    assert_int_equal(gpt_data_load(path, 0.0, 129, &d), 0);
    assert_int_equal(d.n_train, 200);
    assert_int_equal(d.n_val, 0);
    assert_null(d.val);
    assert_memory_equal(d.train, bytes, 200);
    gpt_data_free(&d);
    free(bytes);
}

/* ---- content ------------------------------------------------------------ */

static void test_binary_bytes(void **state)
{
    fixture *f = *state;
    char path[512];
    gpt_data d;
    enum { N = 256 * 64 };
    uint8_t *bytes = malloc(N), *want = malloc(N);
    assert_non_null(bytes);
    assert_non_null(want);
    for (int i = 0; i < N; i++)
        bytes[i] = (uint8_t)(i * 167 + i / 256);   /* every value, 0x00 and 0xff included */
    write_file(f->dir, "blob.bin", bytes, N);
    path_in(path, sizeof path, f->dir, "blob.bin");

    assert_int_equal(gpt_data_load(path, 0.0, 129, &d), 0);
    assert_int_equal(d.n_files, 1);
    assert_int_equal(d.n_train, N);
    assert_memory_equal(d.train, bytes, N);
    gpt_data_free(&d);
    assert_null(d.train);

    assert_int_equal(gpt_data_load(path, 0.1, 129, &d), 0);
    size_t n_val = rule_split(bytes, N, 0.1, 129, want);
    assert_int_equal(d.n_val, n_val);
    assert_int_equal(d.n_train + d.n_val, N);
    assert_true(n_val >= 129);
    assert_memory_equal(d.train, want, d.n_train);
    assert_memory_equal(d.val, want + d.n_train, d.n_val);
    gpt_data_free(&d);
    free(bytes);
    free(want);
}

static void test_directory_order(void **state)
{
    fixture *f = *state;
    char path[512], link[512], sub[512];
    gpt_data d;
    char a[300], b[300], c[300];
    memset(a, 'A', sizeof a);
    memset(b, 'B', sizeof b);
    memset(c, 'C', sizeof c);
    b[0] = (char)0xff;   /* not UTF-8 */
    write_file(f->dir, "b", b, sizeof b);
    write_file(f->dir, "c", c, sizeof c);
    write_file(f->dir, "a", a, sizeof a);
    write_file(f->dir, "a.dat", "xxxx", 4);
    write_file(f->dir, ".a", "yyyy", 4);
    path_in(path, sizeof path, f->dir, "a");
    path_in(link, sizeof link, f->dir, "a.u8");
    assert_int_equal(symlink(path, link), 0);
    path_in(sub, sizeof sub, f->dir, "d");
    assert_int_equal(mkdir(sub, 0700), 0);
    write_file(sub, "z", "zzzz", 4);

    assert_int_equal(gpt_data_load(f->dir, 0.0, 2, &d), 0);
    assert_int_equal(d.n_files, 3);
    assert_int_equal(d.n_train, 900);
    assert_memory_equal(d.train, a, 300);
    assert_memory_equal(d.train + 300, b, 300);
    assert_memory_equal(d.train + 600, c, 300);
    gpt_data_free(&d);

    /* a file given directly is read even when its name would be skipped */
    path_in(path, sizeof path, f->dir, "a.dat");
    assert_int_equal(gpt_data_load(path, 0.0, 2, &d), 0);
    assert_int_equal(d.n_train, 4);
    gpt_data_free(&d);
}

/* The split is the documented rule, deterministic, with the asked fraction,
 * and spread over the corpus. */
static void test_split(void **state)
{
    fixture *f = *state;
    enum { N = 1 << 20 };
    uint8_t *bytes = random_bytes(N, 7), *want = malloc(N);
    assert_non_null(want);
    write_file(f->dir, "part1", bytes, N / 3);
    write_file(f->dir, "part2", bytes + N / 3, N - N / 3);
    const double fractions[] = { 0.1, 0.05, 0.25, 0.5, 0.01 };
    for (size_t k = 0; k < sizeof fractions / sizeof fractions[0]; k++) {
        const double fr = fractions[k];
        gpt_data d, d2;
        assert_int_equal(gpt_data_load(f->dir, fr, 129, &d), 0);
        assert_int_equal(d.n_files, 2);
        size_t n_val = rule_split(bytes, N, fr, 129, want);
        assert_int_equal(d.n_val, n_val);
        assert_memory_equal(d.train, want, d.n_train);
        assert_memory_equal(d.val, want + d.n_train, d.n_val);
        assert_true(fabs((double)d.n_val / N - fr) <= 4096.0 / N);
        /* spread: val has a chunk from the first and from the last fifth */
        assert_true(memmem(bytes, N / 5, d.val, 64) != NULL);
        assert_true(memmem(bytes + N - N / 5, N / 5, d.val + d.n_val - 64, 64) != NULL);
        /* deterministic */
        assert_int_equal(gpt_data_load(f->dir, fr, 129, &d2), 0);
        assert_int_equal(d2.n_val, d.n_val);
        assert_memory_equal(d2.train, d.train, N);   /* val follows train */
        gpt_data_free(&d);
        gpt_data_free(&d2);
    }
    free(bytes);
    free(want);
}

/* A corpus of a few KB still gets a spread val split (smaller chunks). */
static void test_small_corpus(void **state)
{
    fixture *f = *state;
    char path[512];
    gpt_data d;
    uint8_t *bytes = random_bytes(10240, 3), *want = malloc(10240);
    assert_non_null(want);
    write_file(f->dir, "small", bytes, 10240);
    path_in(path, sizeof path, f->dir, "small");
    assert_int_equal(gpt_data_load(path, 0.1, 129, &d), 0);
    assert_int_equal(rule_chunk(10240, 0.1, 129), 256);
    assert_int_equal(d.n_val, 1024);     /* chunks 9, 19, 29, 39 of 256 bytes */
    assert_int_equal(rule_split(bytes, 10240, 0.1, 129, want), 1024);
    assert_memory_equal(d.val, want + d.n_train, 1024);
    gpt_data_free(&d);
    free(bytes);
    free(want);
}

/* ---- batches ------------------------------------------------------------ */

static void check_windows(const uint8_t *split, size_t n, const uint8_t *x, const uint8_t *y,
                          int B, int T)
{
    uint8_t *w = malloc((size_t)T + 1);
    assert_non_null(w);
    for (int b = 0; b < B; b++) {
        const uint8_t *xb = x + (size_t)b * T, *yb = y + (size_t)b * T;
        assert_memory_equal(xb + 1, yb, (size_t)T - 1);
        memcpy(w, xb, (size_t)T);
        w[T] = yb[T - 1];
        assert_true(memmem(split, n, w, (size_t)T + 1) != NULL);
    }
    free(w);
}

static void test_batch_windows(void **state)
{
    fixture *f = *state;
    char path[512];
    gpt_data d;
    enum { N = 1 << 18, B = 8, T = 64 };
    uint8_t *bytes = random_bytes(N, 11);
    write_file(f->dir, "corpus", bytes, N);
    path_in(path, sizeof path, f->dir, "corpus");
    assert_int_equal(gpt_data_load(path, 0.1, T + 1, &d), 0);

    uint8_t x[B * T], y[B * T], x2[B * T], y2[B * T];
    for (int split = 0; split < 2; split++) {
        uint64_t s1 = 123, s2 = 123;
        gpt_data_batch(&d, split, B, T, &s1, x, y);
        check_windows(split ? d.val : d.train, split ? d.n_val : d.n_train, x, y, B, T);
        gpt_data_batch(&d, split, B, T, &s2, x2, y2);
        assert_memory_equal(x, x2, sizeof x);       /* same seed, same batch */
        assert_memory_equal(y, y2, sizeof y);
        assert_int_equal(s1, s2);
        gpt_data_batch(&d, split, B, T, &s1, x2, y2);
        assert_memory_not_equal(x, x2, sizeof x);   /* state advanced */
        check_windows(split ? d.val : d.train, split ? d.n_val : d.n_train, x2, y2, B, T);
    }

    /* a window exactly as long as the split: the only start is 0 */
    gpt_data tiny = { .train = bytes, .n_train = T + 1 };
    uint64_t s = 5;
    gpt_data_batch(&tiny, 0, B, T, &s, x, y);
    for (int b = 0; b < B; b++) {
        assert_memory_equal(x + b * T, bytes, T);
        assert_memory_equal(y + b * T, bytes + 1, T);
    }
    /* too short, or empty val: zero-filled, no crash */
    tiny.n_train = T;
    memset(x, 1, sizeof x);
    gpt_data_batch(&tiny, 0, B, T, &s, x, y);
    gpt_data_batch(&tiny, 1, B, T, &s, x2, y2);
    for (size_t i = 0; i < sizeof x; i++)
        assert_true(x[i] == 0 && y[i] == 0 && x2[i] == 0 && y2[i] == 0);
    gpt_data_free(&d);
    free(bytes);
}

static void test_eval_batches(void **state)
{
    (void)state;
    enum { W = 200, T = 4, B = 16 };
    /* window j starts with byte j; the other bytes are 255 */
    uint8_t val[W * T + 1];
    memset(val, 255, sizeof val);
    for (int j = 0; j < W; j++)
        val[j * T] = (uint8_t)j;
    gpt_data d = { .val = val, .n_val = sizeof val };
    assert_int_equal(gpt_data_eval_windows(&d, T), W);
    assert_int_equal(gpt_data_eval_windows(&d, W * T + 1), 0);

    int seen[W] = { 0 };
    uint8_t x[B * T], y[B * T], x2[B * T], y2[B * T];
    const int batches = (W + B - 1) / B;
    for (int k = 0; k < batches; k++) {
        gpt_data_eval_batch(&d, k, B, T, x, y);
        gpt_data_eval_batch(&d, k, B, T, x2, y2);
        assert_memory_equal(x, x2, sizeof x);
        assert_memory_equal(y, y2, sizeof y);
        int lo = W, hi = -1;
        for (int b = 0; b < B; b++) {
            const int j = x[b * T];
            assert_true(j < W);
            assert_memory_equal(x + b * T, val + j * T, T);
            assert_memory_equal(y + b * T, val + j * T + 1, T);
            if (k * B + b < W)
                seen[j]++;
            lo = j < lo ? j : lo;
            hi = j > hi ? j : hi;
        }
        if (k == 0)
            assert_true(hi - lo > W / 2);   /* the first batch spans the split */
    }
    for (int j = 0; j < W; j++)
        assert_int_equal(seen[j], 1);

    /* no val: zero-filled */
    gpt_data none = { 0 };
    memset(x, 7, sizeof x);
    gpt_data_eval_batch(&none, 0, B, T, x, y);
    for (size_t i = 0; i < sizeof x; i++)
        assert_true(x[i] == 0 && y[i] == 0);
    assert_int_equal(gpt_data_eval_windows(&none, T), 0);
}

/* ---- the fortune corpus ------------------------------------------------- */

static void test_fortunes(void **state)
{
    (void)state;
    /* the expected bytes, counted independently of the loader */
    DIR *dir = opendir(FORTUNES);
    assert_non_null(dir);
    size_t total = 0, files = 0;
    struct dirent *e;
    while ((e = readdir(dir))) {
        const size_t len = strlen(e->d_name);
        if (e->d_name[0] == '.' || (len >= 4 && !strcmp(e->d_name + len - 4, ".dat")))
            continue;
        char path[1024];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", FORTUNES, e->d_name);
        if (lstat(path, &st) == 0 && S_ISREG(st.st_mode)) {
            total += (size_t)st.st_size;
            files++;
        }
    }
    closedir(dir);

    gpt_data d;
    int rc = gpt_data_load(FORTUNES, 0.1, 129, &d);
    if (rc)
        fail_msg("%s: %s", strata_status_str(rc), strata_last_error());
    print_message("fortunes: %zu files, %zu bytes: train %zu, val %zu\n", d.n_files,
                  d.n_train + d.n_val, d.n_train, d.n_val);
    assert_int_equal(d.n_files, files);
    assert_int_equal(d.n_train + d.n_val, total);
    assert_true(fabs((double)d.n_val / total - 0.1) < 0.01);

    enum { B = 16, T = 128 };
    uint8_t x[B * T], y[B * T];
    uint64_t s = 1;
    gpt_data_batch(&d, 0, B, T, &s, x, y);
    check_windows(d.train, d.n_train, x, y, B, T);
    gpt_data_eval_batch(&d, 3, B, T, x, y);
    check_windows(d.val, d.n_val, x, y, B, T);
    gpt_data_free(&d);
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "--fortunes")) {
        struct stat st;
        if (stat(FORTUNES, &st) != 0 || !S_ISDIR(st.st_mode)) {
            printf("skip: %s not installed\n", FORTUNES);
            return 77;
        }
        const struct CMUnitTest fortunes[] = { cmocka_unit_test(test_fortunes) };
        return cmocka_run_group_tests_name("gpt_data_fortunes", fortunes, NULL, NULL) ? 1 : 0;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_missing_path),
        cmocka_unit_test_setup_teardown(test_invalid_args, make_dirs, remove_dirs),
        cmocka_unit_test_setup_teardown(test_empty_file, make_dirs, remove_dirs),
        cmocka_unit_test_setup_teardown(test_empty_dir, make_dirs, remove_dirs),
        cmocka_unit_test_setup_teardown(test_only_skipped_files, make_dirs, remove_dirs),
        cmocka_unit_test_setup_teardown(test_shorter_than_context, make_dirs, remove_dirs),
        cmocka_unit_test_setup_teardown(test_binary_bytes, make_dirs, remove_dirs),
        cmocka_unit_test_setup_teardown(test_directory_order, make_dirs, remove_dirs),
        cmocka_unit_test_setup_teardown(test_symlinks_and_recursive, make_dirs, remove_dirs),
        cmocka_unit_test_setup_teardown(test_split, make_dirs, remove_dirs),
        cmocka_unit_test_setup_teardown(test_small_corpus, make_dirs, remove_dirs),
        cmocka_unit_test_setup_teardown(test_batch_windows, make_dirs, remove_dirs),
        cmocka_unit_test(test_eval_batches),
    };
    return cmocka_run_group_tests_name("gpt_data", tests, NULL, NULL) ? 1 : 0;
}

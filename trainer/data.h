/* data.h — byte corpus for the GPT example: load a file or a directory,
 * split it into train and validation, and cut (x, y) windows for training
 * and evaluation.
 *
 * Bytes are tokens: any content (UTF-8 or not) is used as is.
 *
 * Split. The corpus is cut into consecutive chunks; chunk i goes to
 * validation when floor((i + 1) f) > floor(i f), f = val_fraction, so every
 * (1/f)-th chunk is a validation chunk and the fraction holds to within one
 * chunk, spread over the whole corpus rather than its last file. Chunks are
 * 4096 bytes, halved (never below max(256, min_len)) while the corpus would
 * give fewer than 8 validation chunks, so small corpora still get a spread
 * validation set. The split depends only on the bytes, f and min_len.
 */
#ifndef STRATA_EXAMPLES_GPT_DATA_H
#define STRATA_EXAMPLES_GPT_DATA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What a gpt_data holds: bytes (gpt_data_load*) or the ids of token files
 * (gpt_data_load_tokens). */
#define GPT_DATA_BYTES 0
#define GPT_DATA_TOKENS 1

typedef struct gpt_data {
    uint8_t *train;     /* bytes: n_train bytes (one allocation with val; owned);
                           tokens: train.bin mapped read-only, 2 * n_train bytes */
    size_t n_train;     /* tokens of the train split (a byte is a token) */
    uint8_t *val;       /* bytes: n_val bytes, NULL when n_val == 0; tokens: val.bin mapped */
    size_t n_val;
    size_t n_files;     /* files read (a single file counts 1; token files: 2) */
    double text_fraction; /* share of the corpus's bytes that are text: printable ASCII,
                             whitespace, or well-formed UTF-8 sequences (in [0, 1]);
                             1 for token files (not measured) */
    int format;         /* GPT_DATA_BYTES or GPT_DATA_TOKENS */
    int vocab;          /* ids lie in [0, vocab): 256 for bytes, V for token files */
} gpt_data;

/* Load `path` into *out and split it.
 * path: a regular file (read whole; a symlink to one is followed; a FIFO,
 *   device or socket is refused without reading or blocking), or a
 *   directory: its regular files, not descending into subdirectories, in
 *   byte-wise sorted name order, concatenated with nothing in between.
 *   Skipped: names starting with '.', names ending in ".dat" (fortune
 *   indexes), subdirectories (see gpt_data_load_flags), anything that is
 *   not a regular file. Symlinks to regular files are followed, and a file
 *   reached twice (by its name and by a link, as fortune's ".u8" links and
 *   a Hugging Face cache's snapshot links are) is read once: under its own
 *   name, or under the first link in order when only links reach it.
 * val_fraction: in [0, 1); 0 means no validation split (val NULL, n_val 0).
 * min_len: the fewest bytes each split must hold, normally T + 1 (>= 2).
 * On success *out owns the bytes (free with gpt_data_free); on failure *out
 * is zeroed and nothing is held.
 * Errors (message via strata_last_error()):
 *   STRATA_ERR_INVALID_ARG  NULL argument, val_fraction outside [0, 1),
 *                           min_len < 2
 *   STRATA_ERR_IO           path missing or unreadable, a file unreadable
 *   STRATA_ERR_DATA         path is neither a regular file nor a directory
 *                           (the message says what it is), no bytes at all
 *                           (empty file, empty directory,
 *                           only skipped files), or the train split (or the
 *                           val split when val_fraction > 0) has fewer than
 *                           min_len bytes; the message gives both numbers
 *   STRATA_ERR_NOMEM */
int gpt_data_load(const char *path, double val_fraction, int min_len, gpt_data *out);

/* gpt_data_load reading at most `max_bytes` of corpus (0 = no limit): a
 * corpus larger than that (its files' sizes, or what a growing file yields)
 * fails with STRATA_ERR_NOMEM before more is read. The loader holds the
 * corpus twice while it splits it, so a caller with M bytes to spare passes
 * M / 2. */
int gpt_data_load_limit(const char *path, double val_fraction, int min_len, size_t max_bytes,
                        gpt_data *out);

/* Deepest subdirectory level GPT_DATA_RECURSIVE descends to (deeper:
 * STRATA_ERR_DATA). */
#define GPT_DATA_MAX_DEPTH 32
/* gpt_data_load_flags flag: read the regular files of every subdirectory
 * too (symlinked ones included, loops skipped), in sorted order of their
 * paths relative to `path`; hidden names are skipped at every level. The
 * CLI's --data-recursive. */
#define GPT_DATA_RECURSIVE 1u

/* gpt_data_load_limit with flags (GPT_DATA_RECURSIVE or 0). Same errors,
 * plus STRATA_ERR_DATA for a tree deeper than GPT_DATA_MAX_DEPTH. */
int gpt_data_load_flags(const char *path, double val_fraction, int min_len, size_t max_bytes,
                        unsigned flags, gpt_data *out);

/* Token files (nanoGPT's layout; examples/torch/make_tokens.py writes them):
 * directory `dir` holds train.bin and val.bin, each a sequence of
 * little-endian uint16 token ids and nothing else. Both are mapped read-only
 * (mmap: a multi-GB file is paged in as batches read it, never copied) and
 * scanned once for ids >= vocab. train.bin is the train split, val.bin the
 * validation split (no split of our own). `vocab` in [2, 65536] (the caller
 * reads it from meta.json or --vocab-size); `min_len` as for gpt_data_load
 * (>= 2, T + 1): each file must hold at least min_len tokens.
 * On success *out owns the mappings (gpt_data_free), format
 * GPT_DATA_TOKENS, vocab = `vocab`, n_files 2, text_fraction 1; on failure
 * *out is zeroed and nothing is held.
 * Errors (the message names the file):
 *   STRATA_ERR_INVALID_ARG  NULL argument, vocab outside [2, 65536], min_len < 2
 *   STRATA_ERR_IO           dir, train.bin or val.bin missing or unreadable, mmap failed
 *   STRATA_ERR_DATA         a file that is not a regular file, empty, of odd length
 *                           (not uint16 ids), shorter than min_len tokens, or holding
 *                           an id >= vocab (the message gives the id, its byte offset
 *                           and its token index) */
int gpt_data_load_tokens(const char *dir, int vocab, int min_len, gpt_data *out);

/* 1 when `path` is a directory holding a train.bin (token files, the CLI's
 * --data-format auto), else 0. */
int gpt_data_is_token_dir(const char *path);

/* gpt_data_batch and gpt_data_eval_batch for either format, the ids as
 * uint16: the same windows (the same draws from *rng_state, the same
 * starts) as the byte functions, so a byte corpus gives the same ids
 * widened. x, y: B*T ids each. */
void gpt_data_batch_ids(const gpt_data *d, int split, int B, int T, uint64_t *rng_state,
                        uint16_t *x, uint16_t *y);
void gpt_data_eval_batch_ids(const gpt_data *d, int k, int B, int T, uint16_t *x, uint16_t *y);

/* Token i of split (0 train, 1 val), i < n_train or n_val: a byte or a
 * token file's id. */
static inline unsigned gpt_data_id(const gpt_data *d, int split, size_t i)
{
    const uint8_t *p = split == 0 ? d->train : d->val;
    if (d->format != GPT_DATA_TOKENS)
        return p[i];
    return (unsigned)p[2 * i] | (unsigned)p[2 * i + 1] << 8; /* little-endian */
}

/* Free the bytes (or unmap the token files) and zero *d. NULL or a zeroed
 * struct is a no-op. */
void gpt_data_free(gpt_data *d);

/* Sample B windows of T + 1 consecutive bytes from split (0 train, 1 val),
 * each start uniform over the split, drawn with splitmix64 from
 * *rng_state (advanced; any seed value works).
 * x, y: B*T bytes each, row b = window b: x = window[0..T), y = window[1..T+1).
 * Precondition: the split holds at least T + 1 bytes (gpt_data_load with
 * min_len >= T + 1 guarantees it); if it does not, x and y are zero-filled. */
void gpt_data_batch(const gpt_data *d, int split, int B, int T, uint64_t *rng_state,
                    uint8_t *x, uint8_t *y);

/* Number of evaluation windows of the val split for context T: windows
 * start at multiples of T and hold T + 1 bytes, so every val byte after the
 * first is a target of exactly one window. 0 if val has fewer than T + 1. */
size_t gpt_data_eval_windows(const gpt_data *d, int T);

/* The k-th deterministic evaluation batch (k >= 0): windows
 * (k*B + b) * P mod W for b = 0..B-1, W = gpt_data_eval_windows(d, T),
 * P a fixed stride near 0.618 W coprime with W. So the first batches
 * already sample the whole val split, and batches 0..ceil(W/B)-1 together
 * visit every window once (the last batch wraps around).
 * x, y as in gpt_data_batch; zero-filled when W == 0. */
void gpt_data_eval_batch(const gpt_data *d, int k, int B, int T, uint8_t *x, uint8_t *y);

#ifdef __cplusplus
}
#endif
#endif /* STRATA_EXAMPLES_GPT_DATA_H */

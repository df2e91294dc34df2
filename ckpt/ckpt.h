/* ckpt/ckpt.h — the checkpoint's parsers and layout (internal).
 *
 * strata_save / strata_load (strata.h) write and read a directory:
 *
 *   manifest.json          rank 0: format, versions, step, config, the
 *                          parameter table (shape, routing, owner layout,
 *                          refresh phase), the drain record, every other
 *                          file's size and SHA-256, the caller's JSON
 *   model.safetensors      rank 0: every parameter's float32 weights under
 *                          its registered name and shape
 *   rank-NNNNN.json        rank N: its refresh engine blocks (slot states,
 *                          versions, failed bits, installed slot, have
 *                          bits) and the table of its state tensors (owner,
 *                          tier at save time, step of the snapshot)
 *   rank-NNNNN.safetensors rank N: its owned parameters' optimizer state
 *                          ("<param>/<tensor>", the family's enumeration)
 *                          and its engine's results ("<param>/engine.<block>.
 *                          <slot>", U8, the slot's bytes)
 *
 * The safetensors layout: 8-byte little-endian header length N, N bytes of
 * JSON {name: {"dtype", "shape", "data_offsets": [begin, end]}} (padded
 * with spaces to a multiple of 8), then the raw little-endian data; offsets
 * are relative to the data's start, contiguous, in order.
 *
 * Every parser here treats its input as hostile: lengths are checked
 * against the buffer and the file before use, integers against ranges,
 * sizes against shapes (overflow-checked), names against a charset; any
 * violation is STRATA_ERR_DATA with the file (`what`) and the tensor named.
 * They allocate what they return (freed by the matching _free, NULL-safe)
 * and never abort; tests/fuzz/fuzz_ckpt.c runs them under libFuzzer.
 *
 * checkpoint.c sees the runtime only through runtime/state.h (a view of its
 * scalars, handles and parameters; the managed-weights calls; the setters a
 * load restores through), never its struct; the runtime calls nothing here.
 */
#ifndef STRATA_CKPT_CKPT_H
#define STRATA_CKPT_CKPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "strata/status.h"
#include "strata/types.h"

#define STRATA_CKPT_FORMAT "strata-checkpoint"
#define STRATA_CKPT_FORMAT_VERSION 1
#define STRATA_CKPT_MAX_DIMS 8
#define STRATA_CKPT_MAX_HEADER (64u << 20) /* bytes of a safetensors JSON header */
#define STRATA_CKPT_MAX_JSON (256u << 20)  /* bytes of a manifest or rank table */
#define STRATA_CKPT_MAX_SLOTS 16

/* safetensors dtypes strata writes and reads. */
typedef enum strata_st_dtype {
    STRATA_ST_F32 = 0, STRATA_ST_F64, STRATA_ST_I32, STRATA_ST_I64, STRATA_ST_BOOL, STRATA_ST_U8,
    STRATA_ST_BF16, STRATA_ST_N
} strata_st_dtype;

const char *strata_st_dtype_name(strata_st_dtype d);
size_t strata_st_dtype_size(strata_st_dtype d);

typedef struct strata_st_tensor {
    char *name;
    strata_st_dtype dtype;
    int ndim;
    int64_t shape[STRATA_CKPT_MAX_DIMS];
    uint64_t begin, end; /* byte range in the data section */
} strata_st_tensor;

typedef struct strata_st_header {
    int n;
    strata_st_tensor *t;   /* sorted by begin */
    uint64_t data_start;   /* 8 + header length: the file offset of the data section */
    uint64_t data_bytes;   /* file size - data_start */
} strata_st_header;

/* Parse a safetensors file's header from its first `len` bytes (`buf`,
 * at least 8 + the header length) of a file of `file_size` bytes. Checks:
 * header length <= STRATA_CKPT_MAX_HEADER and inside the buffer and file;
 * a JSON object of tensors (plus an optional "__metadata__" object of
 * strings); each dtype known, shape of <= 8 non-negative dims, offsets
 * [begin, end] with end - begin = numel * dtype size, ranges contiguous from
 * 0 and ending at the file's end; names unique and non-empty.
 * Errors: STRATA_ERR_DATA (with `what` and the tensor), STRATA_ERR_NOMEM. */
strata_status strata_st_header_parse(const char *what, const uint8_t *buf, size_t len,
                                     uint64_t file_size, strata_st_header *out);
void strata_st_header_free(strata_st_header *h);
/* The tensor named `name`, or NULL. */
const strata_st_tensor *strata_st_find(const strata_st_header *h, const char *name);

/* ---- the manifest and the rank tables, parsed and validated */

typedef struct strata_ckpt_file {
    const char *name;   /* a plain file name: [A-Za-z0-9._-], no leading '.' */
    uint64_t bytes;
    uint8_t sha256[32];
} strata_ckpt_file;

typedef struct strata_ckpt_param {
    const char *name;
    int ndim;
    int64_t shape[4];
    const char *optimizer; /* routed optimizer's name */
    bool tail;
    int owner;             /* -1: every rank (gather sharding) */
    int refresh_offset;
    int layer;
    bool hyper_set;        /* "lr" and "weight_decay" present (strata_param_set_hyper);
                              absent: the family's configured values */
    double lr, weight_decay;
} strata_ckpt_param;

typedef struct strata_ckpt_manifest {
    void *root;            /* the json-c tree the strings point into */
    int format_version;
    const char *strata_version;
    int64_t step;
    double lr_scale;
    int world_size;
    int64_t drained_jobs;  /* refresh jobs that were in flight and drained */
    int n_params;
    strata_ckpt_param *params;
    int n_files;
    strata_ckpt_file *files;
    const char *user_json; /* the caller's object, re-serialized (owned by root) */
    void *config;          /* the "config" object (json_object *) */
    void *rank_stats;      /* "rank_stats": NULL, or an array of world_size objects of
                              finite numbers >= 0 (json_object *): each rank's
                              strata_stats counters at the save, by field name */
} strata_ckpt_manifest;

typedef struct strata_ckpt_slot {
    int state;             /* strata_coh_slot_state: FREE, READY, INSTALLED or FAILED */
    int64_t version;
    unsigned failed;
} strata_ckpt_slot;

typedef struct strata_ckpt_block {
    const char *param;
    int block;
    uint64_t slot_bytes;
    bool on_nvme;
    bool inline_;
    int frequency, lag, offset, staleness, mode;
    int64_t start;
    unsigned have;
    int n_slots;
    strata_ckpt_slot slots[STRATA_CKPT_MAX_SLOTS];
} strata_ckpt_block;

typedef struct strata_ckpt_tensor {
    const char *name;      /* in the rank's safetensors file */
    const char *param;
    const char *tier;      /* "device", "host" or "nvme" at save time */
    int64_t step;          /* step of the snapshot it came from (engine), else the save's */
} strata_ckpt_tensor;

typedef struct strata_ckpt_rank {
    void *root;
    int rank;
    int64_t step;
    int n_blocks;
    strata_ckpt_block *blocks;
    int n_tensors;
    strata_ckpt_tensor *tensors;
} strata_ckpt_rank;

/* Parse and validate manifest.json's text (len bytes, no NUL needed).
 * Errors: STRATA_ERR_DATA (naming `what` and the field), STRATA_ERR_NOMEM. */
strata_status strata_ckpt_manifest_parse(const char *what, const char *text, size_t len,
                                         strata_ckpt_manifest **out);
void strata_ckpt_manifest_free(strata_ckpt_manifest *m);

/* Parse and validate a rank-NNNNN.json. Errors: as the manifest's. */
strata_status strata_ckpt_rank_parse(const char *what, const char *text, size_t len,
                                     strata_ckpt_rank **out);
void strata_ckpt_rank_free(strata_ckpt_rank *r);

#endif

/* libFuzzer target for the checkpoint parsers (ckpt/ckpt.h): the
 * first byte picks the parser, the rest is its input —
 *   0: a safetensors file (header length, JSON header, data),
 *   1: manifest.json, 2: rank-NNNNN.json.
 * Any input must give STRATA_OK or STRATA_ERR_DATA/NOMEM, never a crash, a
 * leak or an out-of-bounds read (built with -fsanitize=fuzzer,address,
 * undefined by tests/fuzz/run.sh). A successful parse is checked against
 * the input: every tensor's range lies inside the file. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "ckpt/ckpt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const int which = data[0] % 3;
    data++;
    size--;
    strata_status st;
    if (which == 0) {
        strata_st_header h;
        st = strata_st_header_parse("fuzz.safetensors", data, size, size, &h);
        if (st == STRATA_OK) {
            for (int i = 0; i < h.n; i++)
                if (h.data_start + h.t[i].end > size || h.t[i].begin > h.t[i].end)
                    abort();
            strata_st_header_free(&h);
        }
    } else if (which == 1) {
        strata_ckpt_manifest *m = NULL;
        st = strata_ckpt_manifest_parse("fuzz/manifest.json", (const char *)data, size, &m);
        if (st == STRATA_OK && (!m || m->n_files < 0 || m->n_params < 0))
            abort();
        strata_ckpt_manifest_free(m);
    } else {
        strata_ckpt_rank *r = NULL;
        st = strata_ckpt_rank_parse("fuzz/rank-00000.json", (const char *)data, size, &r);
        if (st == STRATA_OK)
            for (int i = 0; i < r->n_blocks; i++)
                if (r->blocks[i].n_slots > STRATA_CKPT_MAX_SLOTS)
                    abort();
        strata_ckpt_rank_free(r);
    }
    if (st != STRATA_OK && st != STRATA_ERR_DATA && st != STRATA_ERR_NOMEM)
        abort();
    return 0;
}

/* The NCCL communicator (comm/comm_nccl.h) on however many ranks mpirun
 * starts (one GPU per rank; meson runs it as one rank): every collective
 * against values each rank can compute on its own, in deterministic and
 * NCCL-ordered mode; the deterministic sums are checked bit for bit against
 * the rank-order sum, the NCCL sums within float rounding. Exit 77 without
 * a CUDA device. Run on a multi-GPU machine as
 * `mpirun -np <gpus> build/tests/cuda/test_comm_nccl`. */
#include <math.h>
#include <stdint.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_nccl.h"
#include "comm/comm.h"

static int failures;

#define CHECK(cond, ...)                                                                      \
    do {                                                                                      \
        if (!(cond)) {                                                                        \
            failures++;                                                                       \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                              \
            fprintf(stderr, __VA_ARGS__);                                                     \
            fputc('\n', stderr);                                                              \
        }                                                                                     \
    } while (0)

/* Rank r's value i: distinct, not exactly representable sums. */
static float val(int r, size_t i)
{
    return (float)(0.1 * (double)(r + 1) + 1e-3 * (double)i);
}

static void run(strata_comm *c, bool det)
{
    const int rank = strata_comm_rank(c), size = strata_comm_size(c);
    const size_t n = 1000;
    float *buf = malloc(n * sizeof *buf), *want = malloc(n * sizeof *want);
    /* reduce to owner */
    for (int owner = 0; owner < size; owner++) {
        for (size_t i = 0; i < n; i++) {
            buf[i] = val(rank, i);
            float acc = val(0, i);
            for (int r = 1; r < size; r++)
                acc += val(r, i);
            want[i] = acc;
        }
        CHECK(strata_comm_reduce_to_owner(c, buf, n, owner) == STRATA_OK, "%s",
              strata_last_error());
        if (rank == owner)
            for (size_t i = 0; i < n; i++)
                CHECK(det ? buf[i] == want[i] : fabsf(buf[i] - want[i]) <= 1e-5f * fabsf(want[i]),
                      "reduce_to_owner[%zu] %g vs %g", i, (double)buf[i], (double)want[i]);
    }
    /* broadcast: exact */
    for (size_t i = 0; i < n; i++)
        buf[i] = rank == size - 1 ? val(7, i) : -1.0f;
    CHECK(strata_comm_broadcast_from_owner(c, buf, n, size - 1) == STRATA_OK, "%s",
          strata_last_error());
    for (size_t i = 0; i < n; i++)
        CHECK(buf[i] == val(7, i), "broadcast[%zu]", i);
    /* allreduce f64: sum and max */
    double v[3] = {rank + 0.1, -rank * 0.3, (double)rank};
    CHECK(strata_comm_allreduce_f64(c, v, 3, STRATA_REDUCE_SUM) == STRATA_OK, "%s",
          strata_last_error());
    double s0 = 0.1, s1 = 0;
    for (int r = 1; r < size; r++)
        s0 += r + 0.1, s1 += -r * 0.3;
    CHECK(det ? v[0] == s0 : fabs(v[0] - s0) <= 1e-12 * fabs(s0), "allreduce sum");
    double mx = rank;
    CHECK(strata_comm_allreduce_f64(c, &mx, 1, STRATA_REDUCE_MAX) == STRATA_OK, "%s",
          strata_last_error());
    CHECK(mx == size - 1, "allreduce max");
    /* allgatherv / reduce_scatter with uneven counts (rank r: r + 3) */
    size_t counts[64], displs[64], total = 0;
    for (int r = 0; r < size && r < 64; r++) {
        counts[r] = (size_t)r + 3;
        displs[r] = total;
        total += counts[r];
    }
    float *all = malloc(total * sizeof *all), *mine = malloc(counts[rank] * sizeof *mine);
    for (size_t i = 0; i < counts[rank]; i++)
        mine[i] = val(rank, i);
    CHECK(strata_comm_allgatherv_f32(c, mine, all, counts, displs) == STRATA_OK, "%s",
          strata_last_error());
    for (int r = 0; r < size; r++)
        for (size_t i = 0; i < counts[r]; i++)
            CHECK(all[displs[r] + i] == val(r, i), "allgatherv");
    for (size_t i = 0; i < total; i++)
        all[i] = val(rank, i);
    CHECK(strata_comm_reduce_scatter_f32(c, all, mine, counts, displs) == STRATA_OK, "%s",
          strata_last_error());
    for (size_t i = 0; i < counts[rank]; i++) {
        float acc = val(0, displs[rank] + i);
        for (int r = 1; r < size; r++)
            acc += val(r, displs[rank] + i);
        CHECK(det ? mine[i] == acc : fabsf(mine[i] - acc) <= 1e-5f * fabsf(acc),
              "reduce_scatter[%zu]", i);
    }
    /* reduce_to_owners (owners 0 and size-1): the rank-order sum from +0 on
     * both; hierarchical when STRATA_RANKS_PER_NODE makes nodes */
    const int owners[2] = {0, size - 1};
    for (size_t i = 0; i < n; i++) {
        buf[i] = val(rank, i);
        float acc = 0.0f;
        for (int r = 0; r < size; r++)
            acc += val(r, i);
        want[i] = acc;
    }
    uint64_t intra0, inter0, intra1, inter1;
    strata_comm_bytes(c, &intra0, &inter0);
    CHECK(strata_comm_reduce_to_owners(c, buf, n, owners, 2) == STRATA_OK, "%s",
          strata_last_error());
    strata_comm_bytes(c, &intra1, &inter1);
    if (rank == owners[0] || rank == owners[1])
        for (size_t i = 0; i < n; i++)
            CHECK(det ? buf[i] == want[i] : fabsf(buf[i] - want[i]) <= 1e-5f * fabsf(want[i]),
                  "reduce_to_owners[%zu] %g vs %g", i, (double)buf[i], (double)want[i]);
    CHECK(size == 1 || intra1 + inter1 > intra0 + inter0, "reduce_to_owners counted no bytes");
    /* split by parity: a communicator of its own that reduces too */
    strata_comm *half = NULL;
    CHECK(strata_comm_split(c, rank % 2, rank, &half) == STRATA_OK, "%s", strata_last_error());
    if (half) {
        const int hs = strata_comm_size(half), hr = strata_comm_rank(half);
        CHECK(hs == (size + 1 - rank % 2) / 2 && hr == rank / 2, "split: rank %d of %d", hr, hs);
        for (size_t i = 0; i < n; i++)
            buf[i] = val(rank, i);
        const int o = 0;
        CHECK(strata_comm_reduce_to_owners(half, buf, n, &o, 1) == STRATA_OK, "%s",
              strata_last_error());
        if (hr == 0)
            for (size_t i = 0; i < n; i++) {
                float acc = 0.0f;
                for (int r = rank % 2; r < size; r += 2)
                    acc += val(r, i);
                CHECK(det ? buf[i] == acc : fabsf(buf[i] - acc) <= 1e-5f * fabsf(acc),
                      "split reduce[%zu]", i);
            }
        strata_comm_destroy(half);
    }
    CHECK(strata_comm_barrier(c) == STRATA_OK, "%s", strata_last_error());
    free(all), free(mine), free(buf), free(want);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm world = MPI_COMM_WORLD;
    int rc = 0;
    for (int det = 1; det >= 0; det--) {
        strata_comm *c = NULL;
        strata_status st = strata_comm_nccl_create(&world, det != 0, &c);
        if (st == STRATA_ERR_UNSUPPORTED) {
            if (rank == 0)
                printf("skipped: %s\n", strata_last_error());
            rc = 77;
            break;
        }
        if (st != STRATA_OK) {
            fprintf(stderr, "comm_nccl_create: %s\n", strata_last_error());
            rc = 1;
            break;
        }
        CHECK(strcmp(strata_comm_name(c), "nccl") == 0, "name");
        run(c, det != 0);
        strata_comm_destroy(c);
    }
    int any = failures, total = 0;
    MPI_Allreduce(&any, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Finalize();
    if (rc)
        return rc;
    if (rank == 0)
        printf("%s: %d failures\n", total ? "FAIL" : "PASS", total);
    return total ? 1 : 0;
}

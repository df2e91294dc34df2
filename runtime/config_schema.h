/* runtime/config_schema.h — the schema of strata_config: one row per field.
 *
 * Every field of strata_config (strata.h), each nested optimizer
 * configuration's fields one by one (strata/optim.h), in struct order, as an
 * X-macro: STRATA_CONFIG_SCHEMA(X) expands X once per row with
 *
 *   X(id, path, kind, ckpt, cli, jsonl, unit, doc)
 *
 *   id     a C identifier for the row (the path with '.' and '[]' removed)
 *   path   the member designator inside strata_config (offsetof(strata_config,
 *          path); #path is the field's name, "shampoo.beta2")
 *   kind   the C type: BOOL, INT, ENUM (int-sized), FLOAT, DOUBLE, SIZE, U64,
 *          STRING (const char *), PTR (not a setting: a pointer or handle)
 *   ckpt   CKPT: recorded in a checkpoint's manifest under #path and compared
 *          at resume (ckpt/checkpoint.c), NOCKPT: not recorded
 *   cli    the `strata train` flag that sets it (without "--"), or NULL
 *   jsonl  the key of the trainer's JSONL config record, or NULL
 *   unit   "" when the kind says it all
 *   doc    one line
 *
 * Derived from it: the checkpoint's config fields (ckpt/checkpoint.c), the
 * names, offsets and types of the `strata train` flags that set strata_config
 * fields (cli/main.c), and the JSONL config keys that record them
 * (trainer/report.c). Each consumer names the rows it presents by id
 * (STRATA_CFG_ID(id)); tests/unit/test_config_schema.c checks that the rows
 * tile strata_config (a field added without a row fails), and
 * tests/layout/check_schema.py that every row's flag is presented by the CLI
 * and listed in README.md and every row's key is written by the report.
 * Defaults are strata_config_default's (and the trainer's
 * gpt_train_options_default); ranges are each struct's check
 * (strata_create, strata_<optimizer>_config_check), the CLI's own ranges in
 * its rows.
 *
 * Header only: the library and the trainer (which links the public
 * libstrata) expand it alike.
 */
#ifndef STRATA_RUNTIME_CONFIG_SCHEMA_H
#define STRATA_RUNTIME_CONFIG_SCHEMA_H

#include <stdbool.h>
#include <stddef.h>

#include "strata/strata.h"

#define STRATA_CONFIG_SCHEMA(X) \
    X(version, version, INT, NOCKPT, NULL, NULL, "", "STRATA_CONFIG_VERSION") \
    X(matrix_optimizer, matrix_optimizer, ENUM, CKPT, "optimizer", "optimizer", "", "for 2-D matrices: shampoo (default), muon, soap,") \
    X(adamw_lr, adamw.lr, FLOAT, CKPT, "adamw-lr", "adamw_lr", "", "learning rate") \
    X(adamw_beta1, adamw.beta1, FLOAT, CKPT, NULL, NULL, "", "first-moment EMA; default 0.9") \
    X(adamw_beta2, adamw.beta2, FLOAT, CKPT, NULL, NULL, "", "second-moment EMA; default 0.999") \
    X(adamw_eps, adamw.eps, FLOAT, CKPT, NULL, NULL, "", "added to sqrt(v_hat)") \
    X(adamw_weight_decay, adamw.weight_decay, FLOAT, CKPT, NULL, NULL, "", "decoupled") \
    X(shampoo_lr, shampoo.lr, FLOAT, CKPT, NULL, NULL, "", "default 1e-2 (Distributed Shampoo)") \
    X(shampoo_beta1, shampoo.beta1, FLOAT, CKPT, NULL, NULL, "", "gradient filtering EMA; default 0.9") \
    X(shampoo_beta2, shampoo.beta2, FLOAT, CKPT, "beta2", "beta2", "", "factor EMA; default 1.0 = plain sum") \
    X(shampoo_epsilon, shampoo.epsilon, FLOAT, CKPT, "epsilon", "epsilon", "", "added to factor eigenvalues") \
    X(shampoo_momentum, shampoo.momentum, FLOAT, CKPT, "momentum", "momentum", "", "heavy-ball momentum mu") \
    X(shampoo_nesterov, shampoo.nesterov, BOOL, CKPT, NULL, NULL, "", "default false") \
    X(shampoo_weight_decay, shampoo.weight_decay, FLOAT, CKPT, NULL, NULL, "", "decoupled") \
    X(shampoo_precondition_frequency, shampoo.precondition_frequency, INT, CKPT, NULL, NULL, "steps", "the runtime's copy of precondition_frequency (the one-tensor API's own F)") \
    X(shampoo_start_preconditioning_step, shampoo.start_preconditioning_step, INT, CKPT, "start-preconditioning-step", "start_preconditioning_step", "step", "first refresh step") \
    X(shampoo_refresh_offset, shampoo.refresh_offset, INT, CKPT, NULL, NULL, "steps", "phase o in [0, F): refreshes at s + o + kF; default 0.") \
    X(shampoo_max_preconditioner_dim, shampoo.max_preconditioner_dim, INT, CKPT, "max-preconditioner-dim", "max_preconditioner_dim", "rows", "block size") \
    X(shampoo_grafting, shampoo.grafting, ENUM, CKPT, "grafting", "grafting", "", "default STRATA_GRAFT_ADAM") \
    X(shampoo_grafting_beta2, shampoo.grafting_beta2, FLOAT, CKPT, NULL, NULL, "", "Adam grafting EMA; default 0.999") \
    X(shampoo_grafting_epsilon, shampoo.grafting_epsilon, FLOAT, CKPT, NULL, NULL, "", "default 1e-8") \
    X(shampoo_epsilon_rel, shampoo.epsilon_rel, FLOAT, CKPT, "epsilon-rel", "epsilon_rel", "", "relative (scale-aware) regularizer: eps_eff =") \
    X(shampoo_use_pseudo_inverse, shampoo.use_pseudo_inverse, BOOL, CKPT, NULL, NULL, "", "eigenvalues <= cutoff get root 0 instead of eps") \
    X(shampoo_pseudo_inverse_rtol, shampoo.pseudo_inverse_rtol, FLOAT, NOCKPT, NULL, NULL, "", "cutoff relative to lambda_max") \
    X(shampoo_pseudo_inverse_atol, shampoo.pseudo_inverse_atol, FLOAT, NOCKPT, NULL, NULL, "", "absolute cutoff") \
    X(shampoo_inverse_exponent_override0, shampoo.inverse_exponent_override[0], FLOAT, NOCKPT, NULL, NULL, "", "root exponent e of L ([0]) and R ([1]):") \
    X(shampoo_inverse_exponent_override1, shampoo.inverse_exponent_override[1], FLOAT, NOCKPT, NULL, NULL, "", "root exponent e of L ([0]) and R ([1]):") \
    X(shampoo_root_method, shampoo.root_method, ENUM, CKPT, "root-method", "root_method", "", "eigh (default), newton (eigh-free coupled Newton, eigh fallback), auto, warm-qr (one QR step from the last eigenbasis, eigh fallback) or newton-f32 (the coupled Newton iteration in float32 on the backend, the GPU with --device cuda; eigh fallback)") \
    X(shampoo_factor_dtype, shampoo.factor_dtype, ENUM, CKPT, NULL, NULL, "", "storage of L and R: f32 (default) or bf16") \
    X(shampoo_root_dtype, shampoo.root_dtype, ENUM, CKPT, NULL, NULL, "", "storage of the inverse roots: f32 (default) or bf16") \
    X(shampoo_warm_qr_tolerance, shampoo.warm_qr_tolerance, FLOAT, NOCKPT, "warm-qr-tolerance", NULL, "", "root_method warm-qr: relative off-diagonal tolerance of the warm basis; default 0.12") \
    X(muon_lr, muon.lr, FLOAT, CKPT, NULL, NULL, "", "default 0.02") \
    X(muon_momentum, muon.momentum, FLOAT, CKPT, "muon-momentum", "muon_momentum", "", "mu in [0, 1)") \
    X(muon_nesterov, muon.nesterov, BOOL, CKPT, NULL, NULL, "", "default true") \
    X(muon_ns_steps, muon.ns_steps, INT, CKPT, "ns-steps", "ns_steps", "iterations", "Newton-Schulz iterations") \
    X(muon_weight_decay, muon.weight_decay, FLOAT, CKPT, NULL, NULL, "", "decoupled, times the unadjusted lr") \
    X(muon_scale, muon.scale, ENUM, CKPT, "muon-scale", "muon_scale", "", "default STRATA_MUON_SCALE_SHAPE") \
    X(muon_momentum_form, muon.momentum_form, ENUM, CKPT, "muon-momentum-form", "muon_momentum_form", "", "default STRATA_MUON_MOMENTUM_SUM") \
    X(muon_ns_schedule, muon.ns_schedule, ENUM, NOCKPT, "ns-schedule", "ns_schedule", "", "default STRATA_NS_QUINTIC") \
    X(muon_ns_method, muon.ns_method, ENUM, CKPT, "ns-method", "ns_method", "", "default STRATA_NS_STANDARD") \
    X(muon_ns_gram_min_aspect, muon.ns_gram_min_aspect, FLOAT, NOCKPT, NULL, NULL, "", "default STRATA_NS_GRAM_MIN_ASPECT_DEFAULT") \
    X(muon_ns_gram_restarts, muon.ns_gram_restarts, INT, NOCKPT, NULL, NULL, "", "default 1") \
    X(muon_ns_gram_restart_mask, muon.ns_gram_restart_mask, U64, NOCKPT, NULL, NULL, "", "default 0 (automatic placement)") \
    X(muon_ns_batch_threads, muon.ns_batch_threads, INT, NOCKPT, NULL, NULL, "", "default 1; see strata_ns_run") \
    X(muon_ns_dtype, muon.ns_dtype, ENUM, NOCKPT, "ns-dtype", "ns_dtype", "", "Newton-Schulz products: f32 (default) or bf16 operands, float32 sums") \
    X(soap_lr, soap.lr, FLOAT, CKPT, NULL, NULL, "", "default 3e-3") \
    X(soap_beta1, soap.beta1, FLOAT, CKPT, NULL, NULL, "", "first-moment EMA; default 0.95") \
    X(soap_beta2, soap.beta2, FLOAT, CKPT, NULL, NULL, "", "second-moment EMA; default 0.95") \
    X(soap_shampoo_beta, soap.shampoo_beta, FLOAT, CKPT, NULL, NULL, "", "factor EMA; < 0: use beta2 (default -1)") \
    X(soap_eps, soap.eps, FLOAT, CKPT, NULL, NULL, "", "added to sqrt(V)") \
    X(soap_weight_decay, soap.weight_decay, FLOAT, CKPT, NULL, NULL, "", "decoupled, applied after the step") \
    X(soap_precondition_frequency, soap.precondition_frequency, INT, CKPT, NULL, NULL, "steps", "the runtime's copy of precondition_frequency") \
    X(soap_refresh_offset, soap.refresh_offset, INT, CKPT, NULL, NULL, "steps", "phase o in [0, F): refreshes after Adam steps F + o,") \
    X(soap_max_precond_dim, soap.max_precond_dim, INT, CKPT, NULL, NULL, "rows", "sides above it are not rotated") \
    X(soap_precondition_1d, soap.precondition_1d, BOOL, CKPT, NULL, NULL, "", "rotate 1-D tensors (create_vector)") \
    X(soap_normalize_grads, soap.normalize_grads, BOOL, CKPT, NULL, NULL, "", "RMS-normalize N; default false") \
    X(soap_correct_bias, soap.correct_bias, BOOL, CKPT, NULL, NULL, "", "Adam bias correction") \
    X(soap_factor_dtype, soap.factor_dtype, ENUM, CKPT, NULL, NULL, "", "storage of the factors: f32 (default) or bf16") \
    X(kl_shampoo_form, kl_shampoo.form, ENUM, CKPT, "kl-form", "kl_form", "", "default STRATA_KL_EIGENBASIS") \
    X(kl_shampoo_lr, kl_shampoo.lr, FLOAT, CKPT, NULL, NULL, "", "default 1e-4") \
    X(kl_shampoo_beta1, kl_shampoo.beta1, FLOAT, CKPT, NULL, NULL, "", "momentum EMA; default 0.9") \
    X(kl_shampoo_beta2, kl_shampoo.beta2, FLOAT, CKPT, NULL, NULL, "", "default 0.98 (the factor EMA when shampoo_beta < 0)") \
    X(kl_shampoo_shampoo_beta, kl_shampoo.shampoo_beta, FLOAT, CKPT, "kl-beta", "kl_beta", "", "factor EMA b") \
    X(kl_shampoo_eps, kl_shampoo.eps, FLOAT, CKPT, NULL, NULL, "", "damping in X / (1 + eps X)") \
    X(kl_shampoo_weight_decay, kl_shampoo.weight_decay, FLOAT, CKPT, NULL, NULL, "", "decoupled, applied after the step") \
    X(kl_shampoo_precondition_frequency, kl_shampoo.precondition_frequency, INT, CKPT, NULL, NULL, "steps", "the runtime's copy of precondition_frequency") \
    X(kl_shampoo_refresh_offset, kl_shampoo.refresh_offset, INT, CKPT, NULL, NULL, "steps", "phase o in [0, F): refreshes at k = F + o, 2F + o, ...") \
    X(kl_shampoo_init_factor, kl_shampoo.init_factor, FLOAT, CKPT, "kl-init-factor", "kl_init_factor", "", "initial eigenvalue estimate") \
    X(kl_shampoo_max_clamp_value, kl_shampoo.max_clamp_value, INT, CKPT, NULL, NULL, "", "clamp of s: max(10, min(dim, this))") \
    X(kl_shampoo_normalize_grads, kl_shampoo.normalize_grads, BOOL, CKPT, NULL, NULL, "", "RMS-normalize P; default false") \
    X(kl_shampoo_bias_correction, kl_shampoo.bias_correction, BOOL, CKPT, "kl-bias-correction", "kl_bias_correction", "", "bias-corrected eigenvalue estimates (eigenbasis form)") \
    X(normuon_lr, normuon.lr, FLOAT, CKPT, NULL, NULL, "", "default 0.02") \
    X(normuon_momentum, normuon.momentum, FLOAT, CKPT, NULL, NULL, "", "mu in [0, 1); default 0.95") \
    X(normuon_beta2, normuon.beta2, FLOAT, CKPT, NULL, NULL, "", "row second-moment EMA; default 0.95") \
    X(normuon_weight_decay, normuon.weight_decay, FLOAT, CKPT, NULL, NULL, "", "decoupled, times the unadjusted lr") \
    X(normuon_nesterov, normuon.nesterov, BOOL, CKPT, NULL, NULL, "", "default true") \
    X(normuon_ns_steps, normuon.ns_steps, INT, CKPT, NULL, "normuon_ns_steps", "iterations", "Newton-Schulz iterations; default 5") \
    X(normuon_update_scale, normuon.update_scale, ENUM, CKPT, NULL, NULL, "", "default STRATA_NORMUON_PRESERVE_NORM") \
    X(normuon_use_adjusted_lr, normuon.use_adjusted_lr, BOOL, CKPT, NULL, NULL, "", "PRESERVE_NORM's lr ratio 0.2 sqrt(max(m, n))") \
    X(normuon_eps, normuon.eps, FLOAT, CKPT, NULL, NULL, "", "in sqrt(v) + eps and ||X||_F + eps; default 1e-10") \
    X(normuon_ns_schedule, normuon.ns_schedule, ENUM, NOCKPT, NULL, "normuon_ns_schedule", "", "default STRATA_NS_QUINTIC") \
    X(normuon_ns_method, normuon.ns_method, ENUM, CKPT, NULL, "normuon_ns_method", "", "default STRATA_NS_STANDARD") \
    X(normuon_ns_gram_min_aspect, normuon.ns_gram_min_aspect, FLOAT, NOCKPT, NULL, NULL, "", "default STRATA_NS_GRAM_MIN_ASPECT_DEFAULT") \
    X(normuon_ns_gram_restarts, normuon.ns_gram_restarts, INT, NOCKPT, NULL, NULL, "", "default 1") \
    X(normuon_ns_gram_restart_mask, normuon.ns_gram_restart_mask, U64, NOCKPT, NULL, NULL, "", "default 0 (automatic placement)") \
    X(normuon_ns_batch_threads, normuon.ns_batch_threads, INT, NOCKPT, NULL, NULL, "", "default 1; see strata_ns_run") \
    X(normuon_ns_dtype, normuon.ns_dtype, ENUM, NOCKPT, NULL, "normuon_ns_dtype", "", "Newton-Schulz products: f32 (default) or bf16 operands, float32 sums") \
    X(dion2_lr, dion2.lr, FLOAT, CKPT, NULL, NULL, "", "default 0.01") \
    X(dion2_fraction, dion2.fraction, FLOAT, CKPT, "dion2-fraction", "dion2_fraction", "", "share of the slices orthonormalized, in (0, 1]; default 0.25") \
    X(dion2_ef_decay, dion2.ef_decay, FLOAT, CKPT, "dion2-ef-decay", "dion2_ef_decay", "", "error-feedback decay of the selected slices, in [0, 1]; default 0.95") \
    X(dion2_weight_decay, dion2.weight_decay, FLOAT, CKPT, NULL, NULL, "", "decoupled, times the unadjusted lr; default 0.01") \
    X(dion2_adjust_lr, dion2.adjust_lr, ENUM, CKPT, "dion2-adjust-lr", "dion2_adjust_lr", "", "default STRATA_DION2_ADJUST_SPECTRAL_NORM") \
    X(dion2_ns_steps, dion2.ns_steps, INT, CKPT, NULL, "dion2_ns_steps", "iterations", "Newton-Schulz iterations; default 5") \
    X(dion2_ns_schedule, dion2.ns_schedule, ENUM, NOCKPT, NULL, "dion2_ns_schedule", "", "default STRATA_NS_POLAR_EXPRESS") \
    X(dion2_ns_method, dion2.ns_method, ENUM, CKPT, NULL, "dion2_ns_method", "", "default STRATA_NS_STANDARD") \
    X(dion2_ns_gram_min_aspect, dion2.ns_gram_min_aspect, FLOAT, NOCKPT, NULL, NULL, "", "default STRATA_NS_GRAM_MIN_ASPECT_DEFAULT") \
    X(dion2_ns_gram_restarts, dion2.ns_gram_restarts, INT, NOCKPT, NULL, NULL, "", "default 1") \
    X(dion2_ns_gram_restart_mask, dion2.ns_gram_restart_mask, U64, NOCKPT, NULL, NULL, "", "default 0 (automatic placement)") \
    X(dion2_ns_batch_threads, dion2.ns_batch_threads, INT, NOCKPT, NULL, NULL, "", "default 1; see strata_ns_run") \
    X(dion2_ns_dtype, dion2.ns_dtype, ENUM, NOCKPT, NULL, "dion2_ns_dtype", "", "Newton-Schulz products: f32 (default) or bf16 operands, float32 sums") \
    X(precondition_frequency, precondition_frequency, INT, NOCKPT, "precondition-frequency", "precondition_frequency", "steps", "F, the refresh period of every family (Shampoo roots, SOAP and KL-Shampoo eigenbases); 0 = each family's default") \
    X(max_grad_norm, max_grad_norm, FLOAT, CKPT, "max-grad-norm", "max_grad_norm", "", "clip the global gradient L2 norm to this") \
    X(route_degenerate_to_adamw, route_degenerate_to_adamw, BOOL, CKPT, NULL, NULL, "", "1 x N and N x 1 matrices to AdamW; default true") \
    X(stagger_refresh, stagger_refresh, BOOL, CKPT, "stagger-refresh", "stagger_refresh", "", "Shampoo, SOAP, KL-Shampoo: give each matrix parameter a") \
    X(backend, backend, ENUM, NOCKPT, "device", NULL, "", "where optimizer state lives and runs: STRATA_BACKEND_CPU") \
    X(blas_threads, blas_threads, INT, NOCKPT, "threads", "blas_threads", "threads", "BLAS threads for the step") \
    X(step_threads, step_threads, INT, NOCKPT, "step-threads", "step_threads", "threads", "threads (the training thread included) that run the step's") \
    X(async, async, BOOL, CKPT, "async", "async", "", "inverse roots on worker threads") \
    X(staleness, staleness, INT, CKPT, "staleness", "staleness", "steps", "S, steps a root may be used past its refresh point's") \
    X(install_mode, install_mode, ENUM, CKPT, "install-mode", "install_mode", "", "STRATA_COH_FIXED (default, reproducible) or EAGER") \
    X(workers, workers, INT, NOCKPT, "workers", "workers", "threads", "worker threads") \
    X(pin_workers, pin_workers, BOOL, NOCKPT, "pin-workers", NULL, "", "hwloc-pin workers to the last cores") \
    X(wait_timeout_s, wait_timeout_s, DOUBLE, NOCKPT, NULL, NULL, "s", "bound of every staleness wait, seconds") \
    X(roots_tier, roots_tier, ENUM, NOCKPT, "tiers", "roots_tier", "", "where inverse roots live: STRATA_TIER_HOST (default) or") \
    X(host_budget, host_budget, SIZE, NOCKPT, "host-budget-mib", "host_budget_bytes", "bytes", "host tier bytes") \
    X(nvme_dir, nvme_dir, STRING, NOCKPT, "nvme-dir", "nvme_dir", "", "nvme tier directory (copied)") \
    X(nvme_budget, nvme_budget, SIZE, NOCKPT, NULL, NULL, "bytes", "nvme tier bytes") \
    X(nvme_queue_depth, nvme_queue_depth, INT, NOCKPT, "nvme-queue-depth", NULL, "chunks", "io_uring depth (chunks in flight, one staging buffer each),") \
    X(nvme_chunk_bytes, nvme_chunk_bytes, SIZE, NOCKPT, "nvme-staging-kib", NULL, "bytes", "nvme staging chunk: the largest single transfer and the size") \
    X(comm, comm, PTR, NOCKPT, NULL, NULL, "", "ranks and collectives (strata/comm.h)") \
    X(sharding, sharding, ENUM, CKPT, "sharding", "sharding", "", "how matrices and their state are spread over the ranks:") \
    X(shard_group_size, shard_group_size, INT, CKPT, "shard-group-size", "shard_group_size", "ranks", "K (hierarchical sync, HSDP): matrices are owner-sharded") \
    X(average_gradients, average_gradients, BOOL, CKPT, NULL, NULL, "", "the reduced gradient is the mean over the ranks (true,") \
    X(grad_bucket_bytes, grad_bucket_bytes, SIZE, NOCKPT, "grad-bucket-kib", NULL, "bytes", "cap of one gradient bucket, bytes: after a layer's") \
    X(log_level, log_level, ENUM, NOCKPT, NULL, NULL, "", "default STRATA_LOG_WARN") \
    X(log_fn, log_fn, PTR, NOCKPT, NULL, NULL, "", "NULL = stderr") \
    X(log_user, log_user, PTR, NOCKPT, NULL, NULL, "", "") \
    X(stale_correction, stale_correction, ENUM, NOCKPT, "stale-correction", "stale_correction", "", "the safety valve (async): off (default, wait) or newton") \
    X(state_dtype_factors, state_dtype_factors, ENUM, CKPT, "state-dtype-factors", "state_dtype_factors", "", "storage of the factors: f32 (default) or bf16") \
    X(state_dtype_roots, state_dtype_roots, ENUM, CKPT, "state-dtype-roots", "state_dtype_roots", "", "storage of the inverse roots / eigenbases: f32 (default) or bf16") \
    X(state_dtype_moments, state_dtype_moments, ENUM, CKPT, "state-dtype-moments", "state_dtype_moments", "", "storage of the moments: f32 (default) or bf16") \
    X(shard_gradients, shard_gradients, BOOL, NOCKPT, "shard-gradients", "shard_gradients", "", "sharded gradients (ZeRO-2): full-size gradient buffers only for owned parameters") \
    X(page_state, page_state, BOOL, NOCKPT, "page-state", "page_state", "", "state paging: every matrix's second-order state on nvme between its steps") \
    X(staleness_warmup, staleness_warmup, INT, NOCKPT, "staleness-warmup", "staleness_warmup", "steps", "steps t <= N run at staleness 0 (a synchronous warm start; async)")


typedef enum strata_cfg_kind {
    STRATA_CFG_BOOL,
    STRATA_CFG_INT,
    STRATA_CFG_ENUM,
    STRATA_CFG_FLOAT,
    STRATA_CFG_DOUBLE,
    STRATA_CFG_SIZE,
    STRATA_CFG_U64,
    STRATA_CFG_STRING,
    STRATA_CFG_PTR,
} strata_cfg_kind;

/* One row, as the consumers see it. */
typedef struct strata_cfg_field {
    const char *name;  /* #path: "max_grad_norm", "shampoo.beta2" */
    size_t off;        /* offsetof(strata_config, path) */
    size_t size;       /* sizeof the member */
    strata_cfg_kind kind;
    bool ckpt;         /* recorded in checkpoints */
    const char *cli;   /* `strata train` flag, or NULL */
    const char *jsonl; /* JSONL config key, or NULL */
    const char *unit;
    const char *doc;
} strata_cfg_field;

#define STRATA_CFG_CKPT true
#define STRATA_CFG_NOCKPT false

/* The rows' ids: STRATA_CFG_ID(shampoo_beta2) indexes STRATA_CFG_TABLE. */
#define STRATA_CFG_ID(id) STRATA_CFG_ID_##id
#define STRATA_CFG_ENUM_ROW_(id, path, kind, ckpt, cli, jsonl, unit, doc) STRATA_CFG_ID(id),
enum { STRATA_CONFIG_SCHEMA(STRATA_CFG_ENUM_ROW_) STRATA_CFG_ROWS };

#define STRATA_CFG_ROW_(id, path, kind, ckpt, cli, jsonl, unit, doc)                          \
    [STRATA_CFG_ID(id)] = {#path, offsetof(strata_config, path),                              \
                           sizeof(((strata_config *)0)->path), STRATA_CFG_##kind,              \
                           STRATA_CFG_##ckpt, cli, jsonl, unit, doc},

/* Defines `static const strata_cfg_field name[STRATA_CFG_ROWS]` in the
 * including file (each consumer its own copy of the constant table). */
#define STRATA_CFG_TABLE(name)                                                                 \
    static const strata_cfg_field name[STRATA_CFG_ROWS] = {STRATA_CONFIG_SCHEMA(STRATA_CFG_ROW_)}

#endif

/* runtime/config_schema.h — the schema of strata_config: one row per field.
 *
 * Every field of strata_config (strata.h), each nested optimizer
 * configuration's fields one by one (strata/optim.h), in struct order, as an
 * X-macro: STRATA_CONFIG_SCHEMA(X) expands X once per row with
 *
 *   X(id, path, kind, ckpt, cli, jsonl, unit, doc, names)
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
 *   names  an ENUM's spellings, the table strata_cfg_names_<names> below (the
 *          names the CLI flag parses and --help lists, the JSONL record and a
 *          resume's config-change warning print); optimizer: the family
 *          table's (strata_optimizer_name / strata_optimizer_parse); none: a
 *          row that is not an ENUM, or one without spellings (backend,
 *          roots_tier, log_level), whose value is printed as a number
 *
 * Derived from it: the checkpoint's config fields (ckpt/checkpoint.c), the
 * enum spellings of the CLI, the JSONL record and the checkpoint's warnings,
 * the names, offsets and types of the `strata train` flags that set strata_config
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
#include <string.h>

#include "strata/strata.h"

#define STRATA_CONFIG_SCHEMA(X) \
    X(version, version, INT, NOCKPT, NULL, NULL, "", "STRATA_CONFIG_VERSION", none) \
    X(matrix_optimizer, matrix_optimizer, ENUM, CKPT, "optimizer", "optimizer", "", "for 2-D matrices: shampoo (default), muon, soap,", optimizer) \
    X(adamw_lr, adamw.lr, FLOAT, CKPT, "adamw-lr", "adamw_lr", "", "learning rate", none) \
    X(adamw_beta1, adamw.beta1, FLOAT, CKPT, NULL, NULL, "", "first-moment EMA; default 0.9", none) \
    X(adamw_beta2, adamw.beta2, FLOAT, CKPT, NULL, NULL, "", "second-moment EMA; default 0.999", none) \
    X(adamw_eps, adamw.eps, FLOAT, CKPT, NULL, NULL, "", "added to sqrt(v_hat)", none) \
    X(adamw_weight_decay, adamw.weight_decay, FLOAT, CKPT, NULL, NULL, "", "decoupled", none) \
    X(shampoo_lr, shampoo.lr, FLOAT, CKPT, NULL, NULL, "", "default 1e-2 (Distributed Shampoo)", none) \
    X(shampoo_beta1, shampoo.beta1, FLOAT, CKPT, NULL, NULL, "", "gradient filtering EMA; default 0.9", none) \
    X(shampoo_beta2, shampoo.beta2, FLOAT, CKPT, "beta2", "beta2", "", "factor EMA; default 1.0 = plain sum", none) \
    X(shampoo_epsilon, shampoo.epsilon, FLOAT, CKPT, "epsilon", "epsilon", "", "added to factor eigenvalues", none) \
    X(shampoo_momentum, shampoo.momentum, FLOAT, CKPT, "momentum", "momentum", "", "heavy-ball momentum mu", none) \
    X(shampoo_nesterov, shampoo.nesterov, BOOL, CKPT, NULL, NULL, "", "default false", none) \
    X(shampoo_weight_decay, shampoo.weight_decay, FLOAT, CKPT, NULL, NULL, "", "decoupled", none) \
    X(shampoo_precondition_frequency, shampoo.precondition_frequency, INT, CKPT, NULL, NULL, "steps", "the runtime's copy of precondition_frequency (the one-tensor API's own F)", none) \
    X(shampoo_start_preconditioning_step, shampoo.start_preconditioning_step, INT, CKPT, "start-preconditioning-step", "start_preconditioning_step", "step", "first refresh step", none) \
    X(shampoo_refresh_offset, shampoo.refresh_offset, INT, CKPT, NULL, NULL, "steps", "phase o in [0, F): refreshes at s + o + kF; default 0.", none) \
    X(shampoo_max_preconditioner_dim, shampoo.max_preconditioner_dim, INT, CKPT, "max-preconditioner-dim", "max_preconditioner_dim", "rows", "block size", none) \
    X(shampoo_grafting, shampoo.grafting, ENUM, CKPT, "grafting", "grafting", "", "default STRATA_GRAFT_ADAM", grafting) \
    X(shampoo_grafting_beta2, shampoo.grafting_beta2, FLOAT, CKPT, NULL, NULL, "", "Adam grafting EMA; default 0.999", none) \
    X(shampoo_grafting_epsilon, shampoo.grafting_epsilon, FLOAT, CKPT, NULL, NULL, "", "default 1e-8", none) \
    X(shampoo_epsilon_rel, shampoo.epsilon_rel, FLOAT, CKPT, "epsilon-rel", "epsilon_rel", "", "relative (scale-aware) regularizer: eps_eff =", none) \
    X(shampoo_use_pseudo_inverse, shampoo.use_pseudo_inverse, BOOL, CKPT, NULL, NULL, "", "eigenvalues <= cutoff get root 0 instead of eps", none) \
    X(shampoo_pseudo_inverse_rtol, shampoo.pseudo_inverse_rtol, FLOAT, NOCKPT, NULL, NULL, "", "cutoff relative to lambda_max", none) \
    X(shampoo_pseudo_inverse_atol, shampoo.pseudo_inverse_atol, FLOAT, NOCKPT, NULL, NULL, "", "absolute cutoff", none) \
    X(shampoo_inverse_exponent_override0, shampoo.inverse_exponent_override[0], FLOAT, NOCKPT, NULL, NULL, "", "root exponent e of L ([0]) and R ([1]):", none) \
    X(shampoo_inverse_exponent_override1, shampoo.inverse_exponent_override[1], FLOAT, NOCKPT, NULL, NULL, "", "root exponent e of L ([0]) and R ([1]):", none) \
    X(shampoo_root_method, shampoo.root_method, ENUM, CKPT, "root-method", "root_method", "", "eigh (default), newton (eigh-free coupled Newton, eigh fallback), auto, warm-qr (one QR step from the last eigenbasis, eigh fallback), newton-f32 (the coupled Newton iteration in float32 on the backend, the GPU with --device cuda; eigh fallback) or warm-qr-f32 (warm-qr in float32, ssyevd fallback)", root_method) \
    X(shampoo_factor_dtype, shampoo.factor_dtype, ENUM, CKPT, NULL, NULL, "", "storage of L and R: f32 (default) or bf16", state_dtype) \
    X(shampoo_root_dtype, shampoo.root_dtype, ENUM, CKPT, NULL, NULL, "", "storage of the inverse roots: f32 (default) or bf16", state_dtype) \
    X(shampoo_warm_qr_tolerance, shampoo.warm_qr_tolerance, FLOAT, NOCKPT, "warm-qr-tolerance", NULL, "", "root_method warm-qr: relative off-diagonal tolerance of the warm basis; default 0.12", none) \
    X(muon_lr, muon.lr, FLOAT, CKPT, NULL, NULL, "", "default 0.02", none) \
    X(muon_momentum, muon.momentum, FLOAT, CKPT, "muon-momentum", "muon_momentum", "", "mu in [0, 1)", none) \
    X(muon_nesterov, muon.nesterov, BOOL, CKPT, NULL, NULL, "", "default true", none) \
    X(muon_ns_steps, muon.ns_steps, INT, CKPT, "ns-steps", "ns_steps", "iterations", "Newton-Schulz iterations", none) \
    X(muon_weight_decay, muon.weight_decay, FLOAT, CKPT, NULL, NULL, "", "decoupled, times the unadjusted lr", none) \
    X(muon_scale, muon.scale, ENUM, CKPT, "muon-scale", "muon_scale", "", "default STRATA_MUON_SCALE_SHAPE", muon_scale) \
    X(muon_momentum_form, muon.momentum_form, ENUM, CKPT, "muon-momentum-form", "muon_momentum_form", "", "default STRATA_MUON_MOMENTUM_SUM", muon_momentum_form) \
    X(muon_ns_schedule, muon.ns_schedule, ENUM, NOCKPT, "ns-schedule", "ns_schedule", "", "default STRATA_NS_QUINTIC", ns_schedule) \
    X(muon_ns_method, muon.ns_method, ENUM, CKPT, "ns-method", "ns_method", "", "default STRATA_NS_STANDARD", ns_method) \
    X(muon_ns_gram_min_aspect, muon.ns_gram_min_aspect, FLOAT, NOCKPT, NULL, NULL, "", "default STRATA_NS_GRAM_MIN_ASPECT_DEFAULT", none) \
    X(muon_ns_gram_restarts, muon.ns_gram_restarts, INT, NOCKPT, NULL, NULL, "", "default 1", none) \
    X(muon_ns_gram_restart_mask, muon.ns_gram_restart_mask, U64, NOCKPT, NULL, NULL, "", "default 0 (automatic placement)", none) \
    X(muon_ns_batch_threads, muon.ns_batch_threads, INT, NOCKPT, NULL, NULL, "", "default 1; see strata_ns_run", none) \
    X(muon_ns_dtype, muon.ns_dtype, ENUM, NOCKPT, "ns-dtype", "ns_dtype", "", "Newton-Schulz products: f32 (default) or bf16 operands, float32 sums", state_dtype) \
    X(soap_lr, soap.lr, FLOAT, CKPT, NULL, NULL, "", "default 3e-3", none) \
    X(soap_beta1, soap.beta1, FLOAT, CKPT, NULL, NULL, "", "first-moment EMA; default 0.95", none) \
    X(soap_beta2, soap.beta2, FLOAT, CKPT, NULL, NULL, "", "second-moment EMA; default 0.95", none) \
    X(soap_shampoo_beta, soap.shampoo_beta, FLOAT, CKPT, NULL, NULL, "", "factor EMA; < 0: use beta2 (default -1)", none) \
    X(soap_eps, soap.eps, FLOAT, CKPT, NULL, NULL, "", "added to sqrt(V)", none) \
    X(soap_weight_decay, soap.weight_decay, FLOAT, CKPT, NULL, NULL, "", "decoupled, applied after the step", none) \
    X(soap_precondition_frequency, soap.precondition_frequency, INT, CKPT, NULL, NULL, "steps", "the runtime's copy of precondition_frequency", none) \
    X(soap_refresh_offset, soap.refresh_offset, INT, CKPT, NULL, NULL, "steps", "phase o in [0, F): refreshes after Adam steps F + o,", none) \
    X(soap_max_precond_dim, soap.max_precond_dim, INT, CKPT, NULL, NULL, "rows", "sides above it are not rotated", none) \
    X(soap_precondition_1d, soap.precondition_1d, BOOL, CKPT, NULL, NULL, "", "rotate 1-D tensors (create_vector)", none) \
    X(soap_normalize_grads, soap.normalize_grads, BOOL, CKPT, NULL, NULL, "", "RMS-normalize N; default false", none) \
    X(soap_correct_bias, soap.correct_bias, BOOL, CKPT, NULL, NULL, "", "Adam bias correction", none) \
    X(soap_factor_dtype, soap.factor_dtype, ENUM, CKPT, NULL, NULL, "", "storage of the factors: f32 (default) or bf16", state_dtype) \
    X(kl_shampoo_form, kl_shampoo.form, ENUM, CKPT, "kl-form", "kl_form", "", "default STRATA_KL_EIGENBASIS", kl_form) \
    X(kl_shampoo_lr, kl_shampoo.lr, FLOAT, CKPT, NULL, NULL, "", "default 1e-4", none) \
    X(kl_shampoo_beta1, kl_shampoo.beta1, FLOAT, CKPT, NULL, NULL, "", "momentum EMA; default 0.9", none) \
    X(kl_shampoo_beta2, kl_shampoo.beta2, FLOAT, CKPT, NULL, NULL, "", "default 0.98 (the factor EMA when shampoo_beta < 0)", none) \
    X(kl_shampoo_shampoo_beta, kl_shampoo.shampoo_beta, FLOAT, CKPT, "kl-beta", "kl_beta", "", "factor EMA b", none) \
    X(kl_shampoo_eps, kl_shampoo.eps, FLOAT, CKPT, NULL, NULL, "", "damping in X / (1 + eps X)", none) \
    X(kl_shampoo_weight_decay, kl_shampoo.weight_decay, FLOAT, CKPT, NULL, NULL, "", "decoupled, applied after the step", none) \
    X(kl_shampoo_precondition_frequency, kl_shampoo.precondition_frequency, INT, CKPT, NULL, NULL, "steps", "the runtime's copy of precondition_frequency", none) \
    X(kl_shampoo_refresh_offset, kl_shampoo.refresh_offset, INT, CKPT, NULL, NULL, "steps", "phase o in [0, F): refreshes at k = F + o, 2F + o, ...", none) \
    X(kl_shampoo_init_factor, kl_shampoo.init_factor, FLOAT, CKPT, "kl-init-factor", "kl_init_factor", "", "initial eigenvalue estimate", none) \
    X(kl_shampoo_max_clamp_value, kl_shampoo.max_clamp_value, INT, CKPT, NULL, NULL, "", "clamp of s: max(10, min(dim, this))", none) \
    X(kl_shampoo_normalize_grads, kl_shampoo.normalize_grads, BOOL, CKPT, NULL, NULL, "", "RMS-normalize P; default false", none) \
    X(kl_shampoo_bias_correction, kl_shampoo.bias_correction, BOOL, CKPT, "kl-bias-correction", "kl_bias_correction", "", "bias-corrected eigenvalue estimates (eigenbasis form)", none) \
    X(normuon_lr, normuon.lr, FLOAT, CKPT, NULL, NULL, "", "default 0.02", none) \
    X(normuon_momentum, normuon.momentum, FLOAT, CKPT, NULL, NULL, "", "mu in [0, 1); default 0.95", none) \
    X(normuon_beta2, normuon.beta2, FLOAT, CKPT, NULL, NULL, "", "row second-moment EMA; default 0.95", none) \
    X(normuon_weight_decay, normuon.weight_decay, FLOAT, CKPT, NULL, NULL, "", "decoupled, times the unadjusted lr", none) \
    X(normuon_nesterov, normuon.nesterov, BOOL, CKPT, NULL, NULL, "", "default true", none) \
    X(normuon_ns_steps, normuon.ns_steps, INT, CKPT, NULL, "normuon_ns_steps", "iterations", "Newton-Schulz iterations; default 5", none) \
    X(normuon_update_scale, normuon.update_scale, ENUM, CKPT, NULL, NULL, "", "default STRATA_NORMUON_PRESERVE_NORM", normuon_update_scale) \
    X(normuon_use_adjusted_lr, normuon.use_adjusted_lr, BOOL, CKPT, NULL, NULL, "", "PRESERVE_NORM's lr ratio 0.2 sqrt(max(m, n))", none) \
    X(normuon_eps, normuon.eps, FLOAT, CKPT, NULL, NULL, "", "in sqrt(v) + eps and ||X||_F + eps; default 1e-10", none) \
    X(normuon_ns_schedule, normuon.ns_schedule, ENUM, NOCKPT, NULL, "normuon_ns_schedule", "", "default STRATA_NS_QUINTIC", ns_schedule) \
    X(normuon_ns_method, normuon.ns_method, ENUM, CKPT, NULL, "normuon_ns_method", "", "default STRATA_NS_STANDARD", ns_method) \
    X(normuon_ns_gram_min_aspect, normuon.ns_gram_min_aspect, FLOAT, NOCKPT, NULL, NULL, "", "default STRATA_NS_GRAM_MIN_ASPECT_DEFAULT", none) \
    X(normuon_ns_gram_restarts, normuon.ns_gram_restarts, INT, NOCKPT, NULL, NULL, "", "default 1", none) \
    X(normuon_ns_gram_restart_mask, normuon.ns_gram_restart_mask, U64, NOCKPT, NULL, NULL, "", "default 0 (automatic placement)", none) \
    X(normuon_ns_batch_threads, normuon.ns_batch_threads, INT, NOCKPT, NULL, NULL, "", "default 1; see strata_ns_run", none) \
    X(normuon_ns_dtype, normuon.ns_dtype, ENUM, NOCKPT, NULL, "normuon_ns_dtype", "", "Newton-Schulz products: f32 (default) or bf16 operands, float32 sums", state_dtype) \
    X(dion2_lr, dion2.lr, FLOAT, CKPT, NULL, NULL, "", "default 0.01", none) \
    X(dion2_fraction, dion2.fraction, FLOAT, CKPT, "dion2-fraction", "dion2_fraction", "", "share of the slices orthonormalized, in (0, 1]; default 0.25", none) \
    X(dion2_ef_decay, dion2.ef_decay, FLOAT, CKPT, "dion2-ef-decay", "dion2_ef_decay", "", "error-feedback decay of the selected slices, in [0, 1]; default 0.95", none) \
    X(dion2_weight_decay, dion2.weight_decay, FLOAT, CKPT, NULL, NULL, "", "decoupled, times the unadjusted lr; default 0.01", none) \
    X(dion2_adjust_lr, dion2.adjust_lr, ENUM, CKPT, "dion2-adjust-lr", "dion2_adjust_lr", "", "default STRATA_DION2_ADJUST_SPECTRAL_NORM", dion2_adjust_lr) \
    X(dion2_ns_steps, dion2.ns_steps, INT, CKPT, NULL, "dion2_ns_steps", "iterations", "Newton-Schulz iterations; default 5", none) \
    X(dion2_ns_schedule, dion2.ns_schedule, ENUM, NOCKPT, NULL, "dion2_ns_schedule", "", "default STRATA_NS_POLAR_EXPRESS", ns_schedule) \
    X(dion2_ns_method, dion2.ns_method, ENUM, CKPT, NULL, "dion2_ns_method", "", "default STRATA_NS_STANDARD", ns_method) \
    X(dion2_ns_gram_min_aspect, dion2.ns_gram_min_aspect, FLOAT, NOCKPT, NULL, NULL, "", "default STRATA_NS_GRAM_MIN_ASPECT_DEFAULT", none) \
    X(dion2_ns_gram_restarts, dion2.ns_gram_restarts, INT, NOCKPT, NULL, NULL, "", "default 1", none) \
    X(dion2_ns_gram_restart_mask, dion2.ns_gram_restart_mask, U64, NOCKPT, NULL, NULL, "", "default 0 (automatic placement)", none) \
    X(dion2_ns_batch_threads, dion2.ns_batch_threads, INT, NOCKPT, NULL, NULL, "", "default 1; see strata_ns_run", none) \
    X(dion2_ns_dtype, dion2.ns_dtype, ENUM, NOCKPT, NULL, "dion2_ns_dtype", "", "Newton-Schulz products: f32 (default) or bf16 operands, float32 sums", state_dtype) \
    X(precondition_frequency, precondition_frequency, INT, NOCKPT, "precondition-frequency", "precondition_frequency", "steps", "F, the refresh period of every family (Shampoo roots, SOAP and KL-Shampoo eigenbases); 0 = each family's default", none) \
    X(max_grad_norm, max_grad_norm, FLOAT, CKPT, "max-grad-norm", "max_grad_norm", "", "clip the global gradient L2 norm to this", none) \
    X(route_degenerate_to_adamw, route_degenerate_to_adamw, BOOL, CKPT, NULL, NULL, "", "1 x N and N x 1 matrices to AdamW; default true", none) \
    X(stagger_refresh, stagger_refresh, BOOL, CKPT, "stagger-refresh", "stagger_refresh", "", "Shampoo, SOAP, KL-Shampoo: give each matrix parameter a", none) \
    X(backend, backend, ENUM, NOCKPT, "device", NULL, "", "where optimizer state lives and runs: STRATA_BACKEND_CPU", none) \
    X(blas_threads, blas_threads, INT, NOCKPT, "threads", "blas_threads", "threads", "BLAS threads for the step", none) \
    X(step_threads, step_threads, INT, NOCKPT, "step-threads", "step_threads", "threads", "threads (the training thread included) that run the step's", none) \
    X(async, async, BOOL, CKPT, "async", "async", "", "inverse roots on worker threads", none) \
    X(staleness, staleness, INT, CKPT, "staleness", "staleness", "steps", "S, steps a root may be used past its refresh point's", none) \
    X(install_mode, install_mode, ENUM, CKPT, "install-mode", "install_mode", "", "STRATA_COH_FIXED (default, reproducible) or EAGER", install_mode) \
    X(workers, workers, INT, NOCKPT, "workers", "workers", "threads", "worker threads", none) \
    X(pin_workers, pin_workers, BOOL, NOCKPT, "pin-workers", NULL, "", "hwloc-pin workers to the last cores", none) \
    X(wait_timeout_s, wait_timeout_s, DOUBLE, NOCKPT, NULL, NULL, "s", "bound of every staleness wait, seconds", none) \
    X(roots_tier, roots_tier, ENUM, NOCKPT, "tiers", "roots_tier", "", "where inverse roots live: STRATA_TIER_HOST (default) or", none) \
    X(host_budget, host_budget, SIZE, NOCKPT, "host-budget-mib", "host_budget_bytes", "bytes", "host tier bytes", none) \
    X(nvme_dir, nvme_dir, STRING, NOCKPT, "nvme-dir", "nvme_dir", "", "nvme tier directory (copied)", none) \
    X(nvme_budget, nvme_budget, SIZE, NOCKPT, NULL, NULL, "bytes", "nvme tier bytes", none) \
    X(nvme_queue_depth, nvme_queue_depth, INT, NOCKPT, "nvme-queue-depth", NULL, "chunks", "io_uring depth (chunks in flight, one staging buffer each),", none) \
    X(nvme_chunk_bytes, nvme_chunk_bytes, SIZE, NOCKPT, "nvme-staging-kib", NULL, "bytes", "nvme staging chunk: the largest single transfer and the size", none) \
    X(comm, comm, PTR, NOCKPT, NULL, NULL, "", "ranks and collectives (strata/comm.h)", none) \
    X(sharding, sharding, ENUM, CKPT, "sharding", "sharding", "", "how matrices and their state are spread over the ranks:", sharding) \
    X(shard_group_size, shard_group_size, INT, CKPT, "shard-group-size", "shard_group_size", "ranks", "K (hierarchical sync, HSDP): matrices are owner-sharded", none) \
    X(average_gradients, average_gradients, BOOL, CKPT, NULL, NULL, "", "the reduced gradient is the mean over the ranks (true,", none) \
    X(grad_bucket_bytes, grad_bucket_bytes, SIZE, NOCKPT, "grad-bucket-kib", NULL, "bytes", "cap of one gradient bucket, bytes: after a layer's", none) \
    X(log_level, log_level, ENUM, NOCKPT, NULL, NULL, "", "default STRATA_LOG_WARN", none) \
    X(log_fn, log_fn, PTR, NOCKPT, NULL, NULL, "", "NULL = stderr", none) \
    X(log_user, log_user, PTR, NOCKPT, NULL, NULL, "", "", none) \
    X(stale_correction, stale_correction, ENUM, NOCKPT, "stale-correction", "stale_correction", "", "the safety valve (async): off (default, wait) or newton", stale_correction) \
    X(state_dtype_factors, state_dtype_factors, ENUM, CKPT, "state-dtype-factors", "state_dtype_factors", "", "storage of the factors: f32 (default) or bf16", state_dtype) \
    X(state_dtype_roots, state_dtype_roots, ENUM, CKPT, "state-dtype-roots", "state_dtype_roots", "", "storage of the inverse roots / eigenbases: f32 (default) or bf16", state_dtype) \
    X(state_dtype_moments, state_dtype_moments, ENUM, CKPT, "state-dtype-moments", "state_dtype_moments", "", "storage of the moments: f32 (default) or bf16", state_dtype) \
    X(shard_gradients, shard_gradients, BOOL, NOCKPT, "shard-gradients", "shard_gradients", "", "sharded gradients (ZeRO-2): full-size gradient buffers only for owned parameters", none) \
    X(page_state, page_state, BOOL, NOCKPT, "page-state", "page_state", "", "state paging: every matrix's second-order state on nvme between its steps", none) \
    X(staleness_warmup, staleness_warmup, INT, NOCKPT, "staleness-warmup", "staleness_warmup", "steps", "steps t <= N run at staleness 0 (a synchronous warm start; async)", none)


/* ---- the spellings of the enumerated fields (the names column): one table
 * per enum type, ending with {NULL, 0}, in the order the CLI lists them. */
typedef struct strata_cfg_name {
    const char *name;
    int value; /* the enum constant, as int (every ENUM row is int-sized) */
} strata_cfg_name;

static const strata_cfg_name strata_cfg_names_grafting[] = {
    {"adam", STRATA_GRAFT_ADAM}, {"adagrad", STRATA_GRAFT_ADAGRAD}, {"none", STRATA_GRAFT_NONE},
    {NULL, 0},
};
static const strata_cfg_name strata_cfg_names_root_method[] = {
    {"eigh", STRATA_ROOT_EIGH}, {"newton", STRATA_ROOT_NEWTON}, {"auto", STRATA_ROOT_AUTO},
    {"warm-qr", STRATA_ROOT_WARM_QR}, {"newton-f32", STRATA_ROOT_NEWTON_F32},
    {"warm-qr-f32", STRATA_ROOT_WARM_QR_F32}, {NULL, 0},
};
static const strata_cfg_name strata_cfg_names_muon_scale[] = {
    {"shape", STRATA_MUON_SCALE_SHAPE}, {"adamw", STRATA_MUON_SCALE_ADAMW_RMS},
    {"spectral", STRATA_MUON_SCALE_SPECTRAL}, {"none", STRATA_MUON_SCALE_NONE}, {NULL, 0},
};
static const strata_cfg_name strata_cfg_names_muon_momentum_form[] = {
    {"sum", STRATA_MUON_MOMENTUM_SUM}, {"ema", STRATA_MUON_MOMENTUM_EMA}, {NULL, 0},
};
static const strata_cfg_name strata_cfg_names_ns_schedule[] = {
    {"quintic", STRATA_NS_QUINTIC}, {"polar-express", STRATA_NS_POLAR_EXPRESS}, {NULL, 0},
};
static const strata_cfg_name strata_cfg_names_ns_method[] = {
    {"auto", STRATA_NS_AUTO}, {"standard", STRATA_NS_STANDARD}, {"gram", STRATA_NS_GRAM},
    {NULL, 0},
};
static const strata_cfg_name strata_cfg_names_normuon_update_scale[] = {
    {"preserve-norm", STRATA_NORMUON_PRESERVE_NORM}, {"match-rms", STRATA_NORMUON_MATCH_RMS},
    {NULL, 0},
};
static const strata_cfg_name strata_cfg_names_dion2_adjust_lr[] = {
    {"spectral-norm", STRATA_DION2_ADJUST_SPECTRAL_NORM}, {"rms-norm", STRATA_DION2_ADJUST_RMS_NORM},
    {"none", STRATA_DION2_ADJUST_NONE}, {NULL, 0},
};
static const strata_cfg_name strata_cfg_names_kl_form[] = {
    {"eigenbasis", STRATA_KL_EIGENBASIS}, {"exact", STRATA_KL_EXACT}, {NULL, 0},
};
static const strata_cfg_name strata_cfg_names_install_mode[] = {
    {"fixed", STRATA_COH_FIXED}, {"eager", STRATA_COH_EAGER}, {NULL, 0},
};
static const strata_cfg_name strata_cfg_names_stale_correction[] = {
    {"off", STRATA_STALE_CORRECTION_OFF}, {"newton", STRATA_STALE_CORRECTION_NEWTON}, {NULL, 0},
};
static const strata_cfg_name strata_cfg_names_sharding[] = {
    {"owner", STRATA_SHARD_OWNER}, {"gather", STRATA_SHARD_GATHER}, {"zero1", STRATA_SHARD_ZERO1},
    {NULL, 0},
};
static const strata_cfg_name strata_cfg_names_state_dtype[] = {
    {"f32", STRATA_STATE_F32}, {"bf16", STRATA_STATE_BF16}, {NULL, 0},
};
/* The matrix optimizer: named by the family table (families registered at
 * run time included), not by a table here; this empty one marks the row. */
static const strata_cfg_name strata_cfg_names_optimizer[] = {{NULL, 0}};
#define strata_cfg_names_none NULL

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
    const strata_cfg_name *names; /* ENUM: its spellings (the names column); NULL: none */
} strata_cfg_field;

#define STRATA_CFG_CKPT true
#define STRATA_CFG_NOCKPT false

/* The rows' ids: STRATA_CFG_ID(shampoo_beta2) indexes STRATA_CFG_TABLE. */
#define STRATA_CFG_ID(id) STRATA_CFG_ID_##id
#define STRATA_CFG_ENUM_ROW_(id, path, kind, ckpt, cli, jsonl, unit, doc, names) STRATA_CFG_ID(id),
enum { STRATA_CONFIG_SCHEMA(STRATA_CFG_ENUM_ROW_) STRATA_CFG_ROWS };

#define STRATA_CFG_ROW_(id, path, kind, ckpt, cli, jsonl, unit, doc, names)                   \
    [STRATA_CFG_ID(id)] = {#path, offsetof(strata_config, path),                              \
                           sizeof(((strata_config *)0)->path), STRATA_CFG_##kind,              \
                           STRATA_CFG_##ckpt, cli, jsonl, unit, doc, strata_cfg_names_##names},

/* Defines `static const strata_cfg_field name[STRATA_CFG_ROWS]` in the
 * including file (each consumer its own copy of the constant table). */
#define STRATA_CFG_TABLE(name)                                                                 \
    static const strata_cfg_field name[STRATA_CFG_ROWS] = {STRATA_CONFIG_SCHEMA(STRATA_CFG_ROW_)}

/* The spelling of value v of enum row f: its names table's, the family
 * table's for the optimizer row; NULL when the row has no spellings or none
 * is v's (callers print the number then). */
static inline const char *strata_cfg_value_name(const strata_cfg_field *f, int v)
{
    if (!f->names)
        return NULL;
    if (f->names == strata_cfg_names_optimizer) {
        const char *s = strata_optimizer_name((strata_optimizer)v);
        return s && strcmp(s, "unknown") != 0 ? s : NULL;
    }
    for (const strata_cfg_name *e = f->names; e->name; e++)
        if (e->value == v)
            return e->name;
    return NULL;
}

#endif

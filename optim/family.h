/* optim/family.h — the table of optimizer families (internal): kind ->
 * family, and where the family's configuration lives.
 *
 * Every question the layers above ask about an optimizer kind goes through
 * this table and the family's slots (optim/precond.h): its name, its
 * configuration's defaults and check, its learning rate and weight decay,
 * its schedule, its step cost, its failure hint, its state-bytes estimate.
 * Nothing outside optim/ switches on a kind or tests for one; the routing
 * rule's tail asks strata_family_tail_kind().
 *
 * Two kinds of rows:
 *  - built-in rows (STRATA_FAMILY_BUILTINS below): kinds 0..6, whose
 *    configuration is a member of strata_config. optim/ cannot see
 *    strata_config (it is the runtime's), so the list names the member and
 *    the runtime expands it with offsetof where strata_config is visible
 *    (runtime/runtime.c: family_for). Adding a built-in family: its file
 *    in optim/ (and meson.build), a row here, its enum value in
 *    strata/optim.h, its configuration member in strata/strata.h.
 *  - registered rows (strata_family_register): kinds 7.. given out at run
 *    time to a family whose configuration lives outside strata_config (the
 *    registrant's, e.g. tests/unit/test_toy_family.c's). They route like any
 *    kind (strata_config.matrix_optimizer, strata_param_desc.optimizer);
 *    they have no CLI flags, config record or checkpoint config fields
 *    (those tables describe strata_config). strata_create checks their
 *    configuration (config_check) as it checks the built-ins'.
 *
 * Threading: lookups are lock-free and may run on any thread; registration
 * is serialized by a mutex and publishes each row before its kind becomes
 * valid. Rows are never removed (the table lives as long as the process).
 */
#ifndef STRATA_OPTIM_FAMILY_H
#define STRATA_OPTIM_FAMILY_H

#include "precond.h"

/* The built-in families: X(kind, family table, strata_config member), in
 * kind order (the runtime fills and checks the configurations in this
 * order). */
#define STRATA_FAMILY_BUILTINS(X)                                                              \
    X(STRATA_OPTIM_ADAMW, strata_family_adamw, adamw)                                          \
    X(STRATA_OPTIM_SHAMPOO, strata_family_shampoo, shampoo)                                    \
    X(STRATA_OPTIM_MUON, strata_family_muon, muon)                                             \
    X(STRATA_OPTIM_SOAP, strata_family_soap, soap)                                             \
    X(STRATA_OPTIM_KL_SHAMPOO, strata_family_kl_shampoo, kl_shampoo)                          \
    X(STRATA_OPTIM_NORMUON, strata_family_normuon, normuon)                                    \
    X(STRATA_OPTIM_DION2, strata_family_dion2, dion2)

/* Registered rows beyond the built-in ones. */
#define STRATA_FAMILY_REGISTERED_MAX 8

typedef struct strata_family_row {
    strata_optimizer kind;
    const strata_precond_family *fam;
    int builtin;        /* index into STRATA_FAMILY_BUILTINS; -1 for a registered row */
    const void *config; /* a registered row's configuration (the registrant's); NULL for
                           a built-in row (its configuration is in strata_config) */
} strata_family_row;

/* Kinds are 0 .. strata_family_count() - 1 (built-in first). */
int strata_family_count(void);

/* The row of `kind`, or NULL for an unknown kind (STRATA_OPTIM_DEFAULT
 * included). */
const strata_family_row *strata_family_row_of(strata_optimizer kind);

/* The family of the tail: what the routing rule sends 1-D tensors,
 * embeddings and the head to whatever the matrix optimizer is (AdamW). */
strata_optimizer strata_family_tail_kind(void);

/* Add a family at run time; *kind receives its new kind. `fam` and `cfg`
 * (its configuration, fam->cfg_size bytes) must stay valid while the
 * process uses the kind; fam must fill at least name, has_refresh,
 * async_capable, cfg_size, create, destroy, bytes, n_blocks, apply and
 * tensors (and, when it refreshes, what precond.h asks of a refreshing
 * family). Errors: STRATA_ERR_INVALID_ARG (NULL, a missing slot, cfg_size 0,
 * a name already taken), STRATA_ERR_NOMEM
 * (STRATA_FAMILY_REGISTERED_MAX rows registered already). */
strata_status strata_family_register(const strata_precond_family *fam, const void *cfg,
                                     strata_optimizer *kind);

#endif /* STRATA_OPTIM_FAMILY_H */

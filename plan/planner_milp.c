/* The exact owner assignment as a MILP, solved by GLPK (planner.h). */
#include "plan/plan.h"

#include <stdlib.h>

#include <glpk.h>

static int glpk_quiet(void *info, const char *s)
{
    (void)info;
    (void)s;
    return 1; /* no terminal output */
}

/* The MILP of strata_plan_owners; *assign is written only when a feasible
 * integer solution was found. Returns 1 (found, optimal), 2 (found), 0. */
int strata_plan_milp(const double *cost, const double *bytes, int n, int bins, double cap,
                double time_limit_s, int *assign)
{
    glp_term_hook(glpk_quiet, NULL);
    glp_prob *lp = glp_create_prob();
    glp_set_obj_dir(lp, GLP_MIN);
    const int nx = n * bins, z = nx + 1;
    glp_add_cols(lp, nx + 1);
    for (int j = 1; j <= nx; j++)
        glp_set_col_kind(lp, j, GLP_BV);
    glp_set_col_bnds(lp, z, GLP_LO, 0.0, 0.0);
    glp_set_obj_coef(lp, z, 1.0);
    const int rows = n + bins + (cap > 0 ? bins : 0);
    glp_add_rows(lp, rows);
    int *ind = malloc(((size_t)(n > bins ? n : bins) + 2) * sizeof *ind);
    double *val = malloc(((size_t)(n > bins ? n : bins) + 2) * sizeof *val);
    int found = 0;
    if (!ind || !val)
        goto out;
    for (int i = 0; i < n; i++) { /* every item in exactly one bin */
        for (int b = 0; b < bins; b++) {
            ind[b + 1] = i * bins + b + 1;
            val[b + 1] = 1.0;
        }
        glp_set_row_bnds(lp, i + 1, GLP_FX, 1.0, 1.0);
        glp_set_mat_row(lp, i + 1, bins, ind, val);
    }
    for (int b = 0; b < bins; b++) { /* load_b - z <= 0 */
        for (int i = 0; i < n; i++) {
            ind[i + 1] = i * bins + b + 1;
            val[i + 1] = cost[i];
        }
        ind[n + 1] = z;
        val[n + 1] = -1.0;
        glp_set_row_bnds(lp, n + b + 1, GLP_UP, 0.0, 0.0);
        glp_set_mat_row(lp, n + b + 1, n + 1, ind, val);
        if (cap > 0) {
            for (int i = 0; i < n; i++)
                val[i + 1] = bytes[i];
            glp_set_row_bnds(lp, n + bins + b + 1, GLP_UP, 0.0, cap);
            glp_set_mat_row(lp, n + bins + b + 1, n, ind, val);
        }
    }
    glp_iocp parm;
    glp_init_iocp(&parm);
    parm.presolve = GLP_ON;
    parm.msg_lev = GLP_MSG_OFF;
    parm.tm_lim = (int)(time_limit_s * 1000.0);
    const int rc = glp_intopt(lp, &parm);
    const int status = glp_mip_status(lp);
    if ((rc == 0 || rc == GLP_ETMLIM) && (status == GLP_OPT || status == GLP_FEAS)) {
        for (int i = 0; i < n; i++)
            for (int b = 0; b < bins; b++)
                if (glp_mip_col_val(lp, i * bins + b + 1) > 0.5)
                    assign[i] = b;
        found = status == GLP_OPT && rc == 0 ? 1 : 2;
    }
out:
    free(ind);
    free(val);
    glp_delete_prob(lp);
    glp_free_env();
    return found;
}

bool strata_plan_has_milp(void)
{
    return true;
}

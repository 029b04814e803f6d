/* ref_problem.h — a whole multi-rank MoE problem in host memory (every rank's inputs, weights and
 * output gradient, drawn from one seed), for tests, the GPU tests and the CLI. */
#ifndef MOK_REF_PROBLEM_H
#define MOK_REF_PROBLEM_H

#include "mok_reference.h"
#include "reference/ref_inputs.h"

typedef struct {
  mok_ref_config cfg;
  mok_ref_rank *ranks;  /* [ep] views into the buffers below         */
  float **dy;           /* [ep] output gradients [T, H]                */
  float **y;            /* [ep] forward outputs [T, H]                 */
  mok_ref_grads *grads; /* [ep] gradient buffers                       */
  void **owned;         /* everything allocated, for problem_free      */
  int n_owned;
} ref_problem;

/* Allocates and fills a problem: bf16-valued random x (scale 1), weights (scale 1/sqrt(fan-in)),
 * router weights, dy, and the routing `kind`. Returns MOK_SUCCESS or the routing's status. */
mok_status problem_make(ref_problem *p, const mok_shape *shape, int ep, mok_route_kind kind,
                        uint64_t seed);
void problem_free(ref_problem *p);

/* ||a - b|| / ||b|| over n entries (NaN in a gives NaN). */
double rel_error(const float *a, const float *b, int64_t n);

#endif

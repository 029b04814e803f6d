/* ref_problem.h — what the reference's tests share besides the public problem generator
 * (mok_reference.h: mok_ref_problem_make). */
#ifndef MOK_REF_PROBLEM_H
#define MOK_REF_PROBLEM_H

#include "mok_reference.h"
#include "reference/ref_inputs.h"

/* ||a - b|| / ||b|| over n entries (NaN in a gives NaN). */
double rel_error(const float *a, const float *b, int64_t n);

#endif

/* ref_internal.h — the reference's double-precision entry points, for the finite-difference checks
 * (they need the loss without the float rounding of y). Not part of the public API. */
#ifndef MOK_REF_INTERNAL_H
#define MOK_REF_INTERNAL_H

#include "mok_reference.h"

/* As mok_ref_forward, with y[s] [T, H] in double. */
mok_status mok_ref_forward_f64(const mok_ref_config *cfg, const mok_ref_rank *ranks, double *const *y);

#endif

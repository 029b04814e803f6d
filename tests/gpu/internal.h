/* internal.h — the one header through which the GPU tests reach below the public API (mok.h,
 * mok_reference.h). They link the library's objects (build/libmok.a), so these declarations are
 * available to them and to nothing else:
 *   - schedule/pipeline.h: the token ring's plan, to size a ring of n regions for a case;
 *   - schedule/schedule.h, schedule/schedule_device.h: the host and device schedule builds,
 *     compared table for table;
 *   - kernels/move/move.h, kernels/pointwise/ headers: single kernels compared with the reference or
 *     with each other bit for bit (the FP8 SwiGLU backward, the quantizers, the tail rows);
 *   - kernels/gemm/gemm.h, gemm_fused.h, gemm_plan.h: the grouped GEMMs alone, every launch choice
 *     against the reference (test_grouped_gemm.cu);
 *   - api/gpu_internal.h: the workspace's and schedule's insides, for the tests that run one
 *     stage's kernel in a layer's context (its schedule, symmetric buffer and barriers);
 *   - reference/ref_inputs.h: the seedable generator of the test inputs. */
#ifndef MOK_TESTS_GPU_INTERNAL_H
#define MOK_TESTS_GPU_INTERNAL_H

#include "api/gpu_internal.h"
#include "kernels/gemm/gemm.h"
#include "kernels/gemm/gemm_fused.h"
#include "kernels/gemm/gemm_plan.h"
#include "kernels/move/move.h"
#include "kernels/pointwise/fp8_quant.h"
#include "kernels/pointwise/swiglu.h"
#include "kernels/pointwise/tail_rows.h"
#include "reference/ref_inputs.h"
#include "schedule/pipeline.h"
#include "schedule/schedule.h"
#include "schedule/schedule_device.h"

#endif /* MOK_TESTS_GPU_INTERNAL_H */

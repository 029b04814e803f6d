/* tests.h — every CPU test case, registered in test_main.c. */
#ifndef MOK_TESTS_H
#define MOK_TESTS_H
#include <string.h>

void test_bf16_rounding(void);
void test_bf16_clamp_round(void);
void test_fp8_e4m3(void);
void test_fp8_block_quantization(void);
void test_fp8_reference_forward(void);
void test_fp8_reference_backward(void);
void test_fp8_quantize_columns(void);
void test_fp8_reference_wgrad(void);
void test_reference_hand_single(void);
void test_reference_hand_topk_shared(void);
void test_reference_hand_clamp(void);
void test_reference_fd_exhaustive(void);
void test_reference_fd_clamp(void);
void test_reference_fd_routings(void);
void test_reference_rounding_close(void);
void test_reference_bad_input(void);
void test_reference_token(void);
void test_schedule_invariants_random(void);
void test_schedule_adversarial(void);
void test_schedule_chunking_equal(void);
void test_schedule_errors(void);
void test_schedule_capacity(void);
void test_tile_scheduler(void);
void test_routing_generators(void);
void test_pipeline_params(void);
void test_pipeline_macrobatches(void);
void test_pipeline_walk(void);
void test_api_status_strings(void);
void test_api_config(void);
void test_api_bad_arguments(void);
void test_cli(void);
void test_python_capi(void);
#endif

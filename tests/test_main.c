/* test_main.c — the CPU test suite: reference, schedule, API host side. Runs on any machine. */
#include "tests/test_runner.h"
#include "tests/tests.h"

static const test_case cases[] = {
    {"build_wgmma_pipelined", test_build_wgmma_pipelined},
    {"build_headers_without_cuda", test_build_headers_without_cuda},
    {"build_install_and_pkg_config", test_build_install_and_pkg_config},
    {"bf16_rounding", test_bf16_rounding},
    {"bf16_clamp_round", test_bf16_clamp_round},
    {"fp8_e4m3", test_fp8_e4m3},
    {"fp8_block_quantization", test_fp8_block_quantization},
    {"fp8_reference_forward", test_fp8_reference_forward},
    {"fp8_reference_backward", test_fp8_reference_backward},
    {"fp8_reference_shared", test_fp8_reference_shared},
    {"fp8_quantize_columns", test_fp8_quantize_columns},
    {"fp8_reference_wgrad", test_fp8_reference_wgrad},
    {"fp8_reference_fused_drw", test_fp8_reference_fused_drw},
    {"reference_hand_single", test_reference_hand_single},
    {"reference_hand_topk_shared", test_reference_hand_topk_shared},
    {"reference_hand_clamp", test_reference_hand_clamp},
    {"reference_fd_exhaustive", test_reference_fd_exhaustive},
    {"reference_fd_clamp", test_reference_fd_clamp},
    {"reference_fd_routings", test_reference_fd_routings},
    {"reference_rounding_close", test_reference_rounding_close},
    {"reference_bad_input", test_reference_bad_input},
    {"reference_token", test_reference_token},
    {"schedule_invariants_random", test_schedule_invariants_random},
    {"schedule_adversarial", test_schedule_adversarial},
    {"schedule_chunking_equal", test_schedule_chunking_equal},
    {"schedule_errors", test_schedule_errors},
    {"schedule_capacity", test_schedule_capacity},
    {"schedule_token_counts", test_schedule_token_counts},
    {"tile_scheduler", test_tile_scheduler},
    {"routing_generators", test_routing_generators},
    {"pipeline_params", test_pipeline_params},
    {"pipeline_macrobatches", test_pipeline_macrobatches},
    {"pipeline_walk", test_pipeline_walk},
    {"plan_defaults", test_plan_defaults},
    {"plan_requests", test_plan_requests},
    {"plan_text", test_plan_text},
    {"plan_random", test_plan_random},
    {"api_status_strings", test_api_status_strings},
    {"api_last_error", test_api_last_error},
    {"api_config", test_api_config},
    {"api_bad_arguments", test_api_bad_arguments},
    {"cli", test_cli},
    {"python_capi", test_python_capi},
};

int main(int argc, char **argv) {
  return test_run_all(cases, (int)(sizeof cases / sizeof cases[0]), argc, argv);
}

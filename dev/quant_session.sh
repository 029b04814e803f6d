#!/usr/bin/env bash
# quant_session.sh — one call: build, the FP8 GPU tests (the suite's fp8 cases, the PyTorch FP8
# tests; FILTER= and PYK= for all of them), then dev/quant_timing.py on DeepSeek-V3 and Qwen3-30B at T 7168 against an earlier
# tree's library (OLD_LIB, default .oldlib/libmok.so: build it from that tree and carry it).
# Logs under $OUT; a short table last.
set -u
OUT=${OUT:-/tmp/mok_out}
mkdir -p "$OUT"
BUILD=build
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
. bench/device_env.sh
OLD_LIB=${OLD_LIB:-$PWD/.oldlib/libmok.so}
t0=$(date +%s)
make -j16 build/libmok.so build/mok build/mok_gpu_tests >"$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
CUDA_VISIBLE_DEVICES=0 MOK_TEST_SEED=${SEED:-29} MOK_TEST_TIMEOUT=300 timeout 300 \
  tests/gpu/launch.sh build/mok_gpu_tests ${FILTER-fp8} >"$OUT/gpu.log" 2>&1
echo "suite: $(tail -1 "$OUT/gpu.log")"; grep -E "^(FAIL|\[r0\] +CHECK)|one pass" "$OUT/gpu.log" | head -8
TR="timeout 240 python3 -m torch.distributed.run --standalone --nproc_per_node=1"
PYK=${PYK-fp8}
$TR -m pytest -q -s -p no:cacheprovider tests/python/test_moe_gpu.py ${PYK:+-k "$PYK"} >"$OUT/py.log" 2>&1
echo "py: $(grep -E '[0-9]+ (passed|failed)' "$OUT/py.log" | tail -1)"; grep -E "one_pass|FAILED" "$OUT/py.log" | head -4
for s in ${SHAPES:-deepseek-v3 qwen3-30b}; do
  $TR dev/quant_timing.py --shape $s --tokens 7168 --iters 7 --rounds 3 --old-lib "$OLD_LIB" \
    >"$OUT/quant_$s.txt" 2>&1
  grep -vE "^\[|Warning|warn" "$OUT/quant_$s.txt" | tail -14
done
echo "all $(( $(date +%s) - t0 )) s"

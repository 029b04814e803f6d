#!/bin/bash
# run_gg_device.sh — one batch on a GPU machine for the grouped GEMM: (build if needed), SASS
# summary, GPU tests, benchmark, torch baselines; logs under $OUT (or ./gg_out), short table last.
#   usage: [BUILD=dir] bench/run_gg_device.sh [iters]
set -u
OUT=${OUT:-gg_out}
B=${BUILD:-build}
mkdir -p "$OUT"
ITERS=${1:-20}
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv \
  > "$OUT/gpu.txt" 2>&1
cat "$OUT/gpu.txt"
if ! $B/gg_test gg_bad_args > /dev/null 2>&1 || [ ! -f $B/libmok_gg.so ]; then
  echo "prebuilt binaries do not run here: building"
  if which make > /dev/null; then make -j4 BUILD=$B $B/gg_test $B/gg_bench $B/libmok_gg.so > "$OUT/build.log" 2>&1
  else
    mkdir -p $B/tests
    N="nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -Iinclude -I."
    GG="kernels/gemm/*.cu kernels/pointwise/fp8_*.cu kernels/pointwise/mxfp8.cu kernels/common/*.cu"
    (gcc -std=c11 -O2 -Iinclude -I. -c tests/test_runner.c -o $B/tests/test_runner.o &&
     $N -o $B/gg_test tests/gpu/test_grouped_gemm.cu $GG $B/tests/test_runner.o &&
     $N -o $B/gg_bench bench/bench_grouped_gemm.cu $GG &&
     $N -Xcompiler -fPIC -shared -o $B/libmok_gg.so $GG) > "$OUT/build.log" 2>&1
  fi
  tail -5 "$OUT/build.log"
fi
# HGMMA count per kernel and local-memory use, from the disassembly.
if which cuobjdump > /dev/null; then
  cuobjdump --dump-sass $B/gg_bench > /tmp/gg.sass 2>&1
  awk '/Function :/ {f=$3} /[HQ]GMMA/ {h[f]++} /LDL|STL/ {l[f]++}
       END {for (f in h) printf "%s GMMA=%d LDL/STL=%d\n", f, h[f], l[f]+0}' /tmp/gg.sass \
       > "$OUT/sass_summary.txt"
  cat "$OUT/sass_summary.txt"
fi
set -o pipefail
# Smoke test first: a failure or a hang there stops the batch (the full tests would hang too).
if ! timeout 30 $B/gg_test gg_fwd_small > "$OUT/smoke.log" 2>&1; then
  echo "smoke test failed or hung:"; tail -5 "$OUT/smoke.log"
  exit 1
fi
timeout 100 $B/gg_test 2>&1 | tee "$OUT/test.log" | grep -E "PASS|FAIL|passed|rel err|error|CHECK"
TRC=$?
echo "test rc=$TRC"
if [ $TRC -eq 124 ]; then echo "tests timed out: skipping the benchmark"; exit 1; fi
timeout 180 $B/gg_bench "$OUT/gg_counts.txt" "$ITERS" > "$OUT/bench.log" 2>&1
echo "bench rc=$?"
PYTHONUNBUFFERED=1 timeout 240 python3 bench/grouped_gemm_baseline.py $B/libmok_gg.so 3 10 \
  > "$OUT/baseline.log" 2>&1
echo "baseline rc=$?"
echo "=== mok grouped GEMM (bench.log) ==="
cat "$OUT/bench.log"
echo "=== mok vs torch, interleaved in one process (baseline.log) ==="
cat "$OUT/baseline.log"

#!/usr/bin/env bash
# ep1_session.sh — a tree against a base tree (BASE, default build/ab/base: `git archive <ref> |
# tar -x -C build/ab/base`) on one GPU, in two calls:
#   PART=tests  both built in parallel; this tree's GPU suite at EP=1 and its PyTorch GPU tests;
#   PART=bench  from-idle passes and the host's prelude of each tree alternated process by
#               process (dev/host_overhead.py, Qwen3-30B BF16), `mok run` of each tree alternated
#               (dev/trees_ab.sh's cases), this tree's harness row for Qwen3-30B, and the row
#               kernels against a fill (dev/pull_bench.cu).
# Logs under $LOG; short tables on stdout.
set -u
LOG=${LOG:-/tmp/mok_log}
mkdir -p "$LOG"
BASE=${BASE:-build/ab/base}
BUILD=build
. bench/device_env.sh
t0=$(date +%s)
if [ "${PART:-tests}" = tests ]; then
  ( make -j10 build/libmok.so build/mok build/mok_gpu_tests > "$LOG/build_new.log" 2>&1 ) &
  ( cd "$BASE" && make -j6 build/libmok.so build/mok build/mok_gpu_tests > "$LOG/build_base.log" 2>&1 ) &
  nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -Iinclude -I. -o build/pull_bench \
    dev/pull_bench.cu kernels/move/move.cu > "$LOG/build_pull.log" 2>&1
  wait
  for f in build/mok build/mok_gpu_tests build/pull_bench "$BASE/build/mok"; do
    [ -x "$f" ] || { echo "missing $f"; tail -20 "$LOG"/build_*.log; exit 1; }
  done
  echo "build $(( $(date +%s) - t0 )) s"
  CUDA_VISIBLE_DEVICES=0 MOK_TEST_SEED=${SEED:-71} MOK_TEST_TIMEOUT=280 timeout 300 \
    tests/gpu/launch.sh build/mok_gpu_tests > "$LOG/suite.log" 2>&1
  echo "gpu suite: $(tail -1 "$LOG/suite.log") at $(( $(date +%s) - t0 )) s"
  grep -E "^FAIL|CHECK|failed:" "$LOG/suite.log" | head -8
  MOK_TEST_TIMEOUT=240 timeout 260 bash tests/python/run_gpu_tests.sh > "$LOG/py.log" 2>&1
  echo "python gpu tests rc=$? at $(( $(date +%s) - t0 )) s"; tail -8 "$LOG/py.log"
  exit 0
fi
# PART=bench
RES=$LOG/host_ab.txt; : > "$RES"
for round in 1 2; do
  for t in base new; do
    dir=.; [ $t = base ] && dir=$BASE
    MOK_LIBRARY=$PWD/$dir/build/libmok.so PYTHONPATH=$PWD/$dir/python timeout 120 \
      torchrun --standalone --nproc_per_node=1 dev/host_overhead.py --shape qwen3-30b --tokens 7168 \
      --bf16 --calls 100 > "$LOG/host_${t}_$round.log" 2>&1
    echo "== $t round $round" >> "$RES"; tail -14 "$LOG/host_${t}_$round.log" >> "$RES"
  done
done
echo "host A/B done at $(( $(date +%s) - t0 )) s"
grep -E "^==|Python before|whole (forward|backward) call|GPU ms" "$RES"
OUT=$LOG TREES="base=$BASE new=." ROUNDS=${ROUNDS:-2} DEADLINE=${DEADLINE:-200} \
  CASES=${CASES:-"qwen3-30b:128:uniform deepseek-v3:256:uniform qwen3-30b:128:uniform:fp8"} \
  bash dev/trees_ab.sh 2>&1 | tail -12
timeout 150 torchrun --standalone --nproc_per_node=1 bench/harness.py --tokens 7168 --shapes qwen3-30b \
  --routing uniform --iters 40 --warmup 5 --seed 5 --out "$LOG/harness" > "$LOG/harness.log" 2>&1
echo "harness rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "^qwen3" "$LOG/harness.log" | tail -4
build/pull_bench 2048 128 2>&1 | tail -12

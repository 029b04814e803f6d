#!/usr/bin/env bash
# move_session.sh — one call on why the row kernels write below a fill's speed: dev/pull_bench.cu
# (the library's pull and reverse combine against memset, a copy and two candidate pulls) at
# Qwen3-30B's and DeepSeek-V3's EP=1 sizes, then the layer's pull and reverse combine under Nsight
# Compute (dev/move_ncu.sh). Logs under $LOG, tables on stdout.
set -u
LOG=${LOG:-/tmp/mok_log}
mkdir -p "$LOG"
BUILD=build
. bench/device_env.sh
( make -j16 build/libmok.so build/mok > "$LOG/build.log" 2>&1 ) &
nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -Iinclude -I. -o build/pull_bench \
  dev/pull_bench.cu kernels/move/move.cu > "$LOG/build_pull.log" 2>&1
wait
[ -x build/pull_bench ] && [ -x build/mok ] || { tail -20 "$LOG"/build*.log; exit 1; }
build/pull_bench 2048 128
build/pull_bench 7168 256
LOG=$LOG bash dev/move_ncu.sh

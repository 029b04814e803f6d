#!/bin/bash
# ncu_gg.sh — one grouped GEMM launch under Nsight Compute: the full section set (pipe use, shared
# memory and L2 traffic, warp stalls) and the SASS lines with the most stall samples.
#   usage: [BUILD=dir] [SHAPES=substring] [KERNEL=regex] bench/ncu_gg.sh
# The first launch matching KERNEL (default: the FP8 256-column kernel) in the benchmark's shapes
# whose names contain SHAPES (default: all, so the DeepSeek-V3 EP8 gate+up shape first) is
# profiled; to profile a launch option, pick its kernel by KERNEL (e.g. gg_fp8_kernel for the
# 128-column kernel of the dsv2lite_dact shape).
set -u
OUT=${OUT:-gg_out}
B=${BUILD:-build}
mkdir -p "$OUT"
if [ -n "${SHAPES:-}" ]; then export MOK_GG_BENCH_SHAPES=$SHAPES; fi
K=${KERNEL:-gg_fp8_wide}
ncu --clock-control none -k "regex:$K" -c 1 --set full --import-source no -o "$OUT/prof" -f \
  $B/gg_bench "$OUT/ncu_counts.txt" 2 > "$OUT/ncu_run.log" 2>&1
echo "ncu rc=$?"
ncu -i "$OUT/prof.ncu-rep" --page details > "$OUT/ncu_details.txt" 2>&1
ncu -i "$OUT/prof.ncu-rep" --page source --print-source sass --csv > "$OUT/ncu_sass.csv" 2>&1
grep -E "Duration|SM Frequency|Compute \(SM\) Throughput|L2 Cache Throughput|Shared|Tensor|Issue Slots|Stall|Warp Cycles|No Eligible|Active Warps" \
  "$OUT/ncu_details.txt" | head -60

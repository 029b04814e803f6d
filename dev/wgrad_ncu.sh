#!/usr/bin/env bash
# wgrad_ncu.sh — one launch of the BF16 weight gradient (bf16 out) under Nsight Compute: shared
# memory, L2 and DRAM throughput, the tensor pipe, the warps' stall reasons; to tell which of
# them holds the kernel (docs/PERF.md "Open gaps": the shared-memory estimate of its tile).
# SHAPES picks dev/wgrad_ab.py's shapes (default dsv3_ep1_down). Report and text under $OUT.
set -u
OUT=${OUT:-/tmp/mok_out}
mkdir -p "$OUT" build
nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -Xcompiler -fPIC -Iinclude -I. -shared \
  -o build/wg.so kernels/gemm/bf16_wgrad.cu kernels/gemm/tmap.cu kernels/common/launch_error.cu \
  > "$OUT/wgrad_ncu_build.log" 2>&1 || { tail -20 "$OUT/wgrad_ncu_build.log"; exit 1; }
SHAPES=${SHAPES:-dsv3_ep1_down} ncu --clock-control none -k "regex:gg_bf16_wgrad_kernel" -c 1 \
  --set full --import-source no -o "$OUT/wgrad" -f python3 dev/wgrad_ab.py base=build/wg.so \
  > "$OUT/wgrad_ncu_run.log" 2>&1
rc=$?
echo "ncu rc=$rc"
[ -f "$OUT/wgrad.ncu-rep" ] || { tail -15 "$OUT/wgrad_ncu_run.log"; exit 1; }
ncu -i "$OUT/wgrad.ncu-rep" --page details > "$OUT/wgrad_ncu.txt" 2>&1
grep -E "Duration|SM Frequency|Throughput|Shared|Tensor|Pipe|Stall|Warp Cycles|Eligible|Bank" \
  "$OUT/wgrad_ncu.txt" | head -60
# the warps' stall reasons: each reason's share of the warps' cycles (per-warp average, percent)
ncu -i "$OUT/wgrad.ncu-rep" --page raw > "$OUT/wgrad_ncu_raw.txt" 2>&1
grep -E "smsp__average_warps_issue_stalled_[a-z_]+_per_issue_active\.ratio|smsp__warps_issue_stalled_[a-z_]+_per_warp_active\.pct" \
  "$OUT/wgrad_ncu_raw.txt" | awk '{print $NF, $1}' | sort -g -r | head -24

#!/usr/bin/env bash
# gg_ncu.sh — one BF16 grouped-GEMM launch of an A/B script (SCRIPT, default dev/gg_ab.py; or
# dev/wgrad_ab.py) under Nsight Compute, this tree's kernels built into one library: throughputs,
# the tensor pipe, the warps' stall reasons and the SASS lines with the most stall samples.
# GG_SHAPES / GG_OPS (dev/gg_ab.py) or SHAPES (dev/wgrad_ab.py) pick the problem, KERNEL the
# launch (a regex; default the tokens-N gate+up, sw_kernel). Report under $LOG, the summary on
# stdout.
set -u
LOG=${LOG:-/tmp/mok_log}
mkdir -p "$LOG" build
nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -Xcompiler -fPIC -Iinclude -I. -shared \
  -o build/gg.so kernels/gemm/bf16*.cu kernels/gemm/tmap.cu kernels/common/launch_error.cu \
  > "$LOG/gg_ncu_build.log" 2>&1 || { tail -20 "$LOG/gg_ncu_build.log"; exit 1; }
K=${KERNEL:-sw_kernel}
GG_SHAPES=${GG_SHAPES:-qwen3} GG_OPS=${GG_OPS:-gate_up} ncu --clock-control none -k "regex:$K" -c 1 \
  --set full --import-source no -o "$LOG/gg" -f python3 ${SCRIPT:-dev/gg_ab.py} base=build/gg.so \
  > "$LOG/gg_ncu_run.log" 2>&1
echo "ncu rc=$?"
[ -f "$LOG/gg.ncu-rep" ] || { tail -15 "$LOG/gg_ncu_run.log"; exit 1; }
ncu -i "$LOG/gg.ncu-rep" --page details > "$LOG/gg_ncu.txt" 2>&1
grep -E "Duration|SM Frequency|DRAM Throughput|L2 Cache Throughput|Compute \(SM\)|Shared|Bank|Eligible|Issued Warp|No Eligible|Registers Per|Grid Size|Cluster Size" \
  "$LOG/gg_ncu.txt" | head -30
ncu -i "$LOG/gg.ncu-rep" --page raw > "$LOG/gg_ncu_raw.txt" 2>&1
grep -E "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active|sm__inst_executed_pipe_tensor|l1tex__data_pipe_lsu_wavefronts_mem_shared.sum.pct|smsp__average_warps_issue_stalled_[a-z_]+_per_issue_active\.ratio" \
  "$LOG/gg_ncu_raw.txt" | awk '{print $NF, $1}' | sort -g -r | head -14
ncu -i "$LOG/gg.ncu-rep" --page source --print-source sass --csv > "$LOG/gg_sass.csv" 2>&1
python3 - "$LOG/gg_sass.csv" <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
if len(rows) > 1:
    h = rows[0]
    ci = next((i for i, n in enumerate(h) if n.startswith("Warp Stall Sampling (All")), None)
    si = next((i for i, n in enumerate(h) if n == "Source"), None)
    if ci is not None and si is not None:
        body = [r for r in rows[1:] if len(r) > max(ci, si)]
        tot = sum(float(r[ci] or 0) for r in body) or 1.0
        for r in sorted(body, key=lambda r: -float(r[ci] or 0))[:14]:
            print(f"{100 * float(r[ci] or 0) / tot:5.1f}%  {r[si][:90]}")
PY

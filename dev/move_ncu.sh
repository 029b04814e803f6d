#!/usr/bin/env bash
# move_ncu.sh — the layer's row kernels (KERNEL regex, default the dispatch pull and the reverse
# combine) under Nsight Compute in one `mok run` of SHAPE (default qwen3-30b, T 7168, BF16):
# duration, DRAM / L2 throughput, occupancy, the warps' stall reasons. Reports under $LOG.
set -u
LOG=${LOG:-/tmp/mok_log}
mkdir -p "$LOG"
K=${KERNEL:-dispatch_pull_kernel|weight_rows_kernel}
ncu --clock-control none -k "regex:$K" -c ${COUNT:-2} --set full -o "$LOG/move" -f \
  build/mok run --shape ${SHAPE:-qwen3-30b} --tokens 7168 --iters 1 --warmup 0 > "$LOG/move_run.log" 2>&1
echo "ncu rc=$?"
[ -f "$LOG/move.ncu-rep" ] || { tail -15 "$LOG/move_run.log"; exit 1; }
ncu -i "$LOG/move.ncu-rep" --page details > "$LOG/move.txt" 2>&1
grep -E "^  [a-z_]+kernel|Duration|DRAM Throughput|L2 Cache Throughput|Memory Throughput|Achieved Occupancy|Theoretical Occupancy|Eligible Warps|Registers Per|Block Size|Grid Size|L1/TEX Hit|L2 Hit" "$LOG/move.txt" | head -40
ncu -i "$LOG/move.ncu-rep" --page raw > "$LOG/move_raw.txt" 2>&1
grep -E "^  [a-z_]+kernel|smsp__average_warps_issue_stalled_(long_scoreboard|lg_throttle|drain|barrier|membar|wait|short_scoreboard|mio_throttle|no_instruction)_per_issue_active\.ratio|dram__bytes_(read|write)\.sum " "$LOG/move_raw.txt" | head -30

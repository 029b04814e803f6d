#!/usr/bin/env bash
# wgrad_host_session.sh — one call: this tree and an earlier one (BASE, default build/ab/base: a
# `git archive` copy, carried) built; the write-bandwidth floor (dev/write_bw.cu); this tree's GPU
# suite; the BF16 weight gradient alone, base / this / base again (dev/wgrad_trees.sh); the layer
# alternated (dev/trees_ab.sh); the Python GPU tests; the host's time per call
# (dev/host_overhead.py). BW=0, PY=0, HOST=0 leave a step out; FILTER picks suite cases. Logs
# under $OUT, short tables last.
set -u
OUT=${OUT:-/tmp/mok_out}
mkdir -p "$OUT"
BASE=${BASE:-build/ab/base}
BUILD=build
. bench/device_env.sh
t0=$(date +%s)
left() { echo $(( ${DEADLINE:-560} - ($(date +%s) - t0) )); }
( make -j16 build/libmok.so build/mok build/mok_gpu_tests > "$OUT/build_new.log" 2>&1 ) &
( cd "$BASE" && make -j16 build/libmok.so build/mok > "$OUT/build_base.log" 2>&1 ) &
nvcc -O3 -gencode arch=compute_90a,code=sm_90a -I. -o build/write_bw dev/write_bw.cu > "$OUT/build_bw.log" 2>&1
wait
[ -x build/mok ] && [ -x "$BASE/build/mok" ] || { tail -20 "$OUT"/build_*.log; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
[ "${BW:-1}" = 1 ] && { build/write_bw > "$OUT/write_bw.txt" 2>&1; cat "$OUT/write_bw.txt"; }
CUDA_VISIBLE_DEVICES=0 MOK_TEST_SEED=${SEED:-67} MOK_TEST_TIMEOUT=240 timeout 250 \
  tests/gpu/launch.sh build/mok_gpu_tests ${FILTER:-} > "$OUT/gpu.log" 2>&1
echo "suite: $(tail -1 "$OUT/gpu.log")"; grep -E "^FAIL|CHECK" "$OUT/gpu.log" | head -6
echo "at $(( $(date +%s) - t0 )) s"
[ "$(left)" -gt 120 ] && OUT=$OUT TREES="base=$BASE new=. base2=$BASE" SHAPES=${WSHAPES:-} \
  bash dev/wgrad_trees.sh
echo "at $(( $(date +%s) - t0 )) s"
l=$(left); [ $l -gt 90 ] && OUT=$OUT DEADLINE=$(( l - 60 )) TREES="base=$BASE new=." \
  CASES=${CASES:-"qwen3-30b:128:uniform deepseek-v3:256:uniform"} ROUNDS=${ROUNDS:-2} bash dev/trees_ab.sh | tail -8
echo "at $(( $(date +%s) - t0 )) s"
TR="timeout 150 python3 -m torch.distributed.run --standalone --nproc_per_node=1"
[ "${PY:-1}" = 1 ] && [ "$(left)" -gt 60 ] && { $TR -m pytest -q -s -p no:cacheprovider tests/python/test_moe_gpu.py ${PYK:+-k "$PYK"} \
  > "$OUT/py.log" 2>&1; echo "py: $(grep -E '[0-9]+ (passed|failed)' "$OUT/py.log" | tail -1)"; grep FAILED "$OUT/py.log" | head -4; }
[ "${HOST:-1}" = 1 ] && [ "$(left)" -gt 30 ] && { $TR dev/host_overhead.py --shape qwen3-30b --bf16 --calls 100 > "$OUT/host.txt" 2>&1
  grep -vE "^\[|Warning|warn" "$OUT/host.txt" | tail -16; }
echo "all $(( $(date +%s) - t0 )) s"

#!/usr/bin/env bash
# mx_session.sh — build; the MXFP8 GPU tests (C and the PyTorch module's); the native per-32
# promotion probe (dev/mx_native_probe.sh); `mok run --breakdown` on DSv3 BF16, uniform and Zipf;
# the harness's DSv3 row with --fp8 --mxfp8. Short table last.
set -u
OUT=${OUT:-/tmp/mok_out}
mkdir -p "$OUT" /tmp/mok_json
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 XDG_CACHE_HOME=/tmp/mok_cache
t0=$(date +%s)
make -j16 build/libmok.so build/mok build/mok_gpu_tests > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
export MOK_LIBRARY=$PWD/build/libmok.so PYTHONPATH=$PWD/python
bash dev/mx_native_probe.sh > "$OUT/probe_table.txt" 2>&1 &
probe=$!
CUDA_VISIBLE_DEVICES=0 MOK_TEST_SEED=${SEED:-43} timeout 240 tests/gpu/launch.sh build/mok_gpu_tests mxfp8 > "$OUT/gpu_mxfp8.log" 2>&1
echo "gpu mxfp8: $(tail -1 "$OUT/gpu_mxfp8.log")"; grep -E "FAIL|CHECK|MXFP8 of|one-pass" "$OUT/gpu_mxfp8.log" | head -6
timeout 200 python3 -m pytest -q -s -p no:cacheprovider tests/python/test_moe_gpu.py -k "mxfp8 or fp8_weight_cache" > "$OUT/py.log" 2>&1
echo "pytest: $(tail -1 "$OUT/py.log")"; grep -o "MOK-RESULT mxfp8.*" "$OUT/py.log" | cut -c1-400
wait $probe   # the probe's builds ran beside the tests; its GPU runs after them
echo "probe done at $(( $(date +%s) - t0 )) s"
for r in uniform zipf; do
  echo "== deepseek-v3 bf16 $r"
  timeout 120 ./build/mok run --shape deepseek-v3 --tokens 7168 --iters 20 --routing $r --breakdown 2>&1 | grep -vE "^mok run: (GPU|CPU)" | tail -22
done > "$OUT/breakdown.txt"
echo "breakdown done at $(( $(date +%s) - t0 )) s"
left=$(( ${DEADLINE:-560} - ($(date +%s) - t0) ))
timeout $left torchrun --standalone --nproc_per_node=1 bench/harness.py --tokens 7168 \
  --shapes deepseek-v3 --routing uniform --fp8 --mxfp8 --iters 50 --warmup 5 --seed 23 \
  --out /tmp/mok_json/deepseek-v3_mx2 > /tmp/mok_json/deepseek-v3_mx2.log 2>&1
echo "harness exit $? at $(( $(date +%s) - t0 )) s"
grep -E "MXFP8|per update|FP8 " /tmp/mok_json/deepseek-v3_mx2.log | grep -v "^row" | tail -5
tar -C /tmp/mok_json -cf "$OUT/json.tar" .
cat "$OUT/breakdown.txt"
cat "$OUT/probe_table.txt" | tail -8

#!/usr/bin/env bash
# mx_device.sh — build; the MXFP8 and FP8 GPU tests (C, the grouped GEMM's MX conversion, the
# PyTorch module's); then the harness with --fp8 --mxfp8 on CASES ("shape:tokens:div", uniform)
# while DEADLINE seconds last. Short table last.
set -u
OUT=${OUT:-/tmp/mok_out}
mkdir -p "$OUT" /tmp/mok_json
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 XDG_CACHE_HOME=/tmp/mok_cache
t0=$(date +%s)
make -j16 build/libmok.so build/mok build/mok_gpu_tests build/gg_test > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
export MOK_LIBRARY=$PWD/build/libmok.so PYTHONPATH=$PWD/python
for f in mxfp8 layer_fp8_uniform_shared layer_fp8_zipf_clamp; do
  CUDA_VISIBLE_DEVICES=0 MOK_TEST_SEED=${SEED:-41} timeout 240 tests/gpu/launch.sh build/mok_gpu_tests $f > "$OUT/gpu_$f.log" 2>&1
  echo "gpu $f: $(tail -1 "$OUT/gpu_$f.log")"; grep -E "FAIL|CHECK|MXFP8 of|differs" "$OUT/gpu_$f.log" | head -6
done
timeout 120 build/gg_test gg_mxfp8 > "$OUT/gg.log" 2>&1; echo "gg_mxfp8: $(tail -1 "$OUT/gg.log")"
timeout 300 python3 -m pytest -q -s -p no:cacheprovider tests/python/test_moe_gpu.py -k "fp8" > "$OUT/py.log" 2>&1
echo "pytest fp8: $(tail -1 "$OUT/py.log")"; grep -E "^MOK-RESULT|Error|assert" "$OUT/py.log" | head -12
echo "tests done at $(( $(date +%s) - t0 )) s"
for c in ${CASES:-}; do
  IFS=: read -r shape tok div <<< "$c"
  left=$(( ${DEADLINE:-560} - ($(date +%s) - t0) ))
  [ $left -lt 60 ] && { echo "skip $c: $left s left"; continue; }
  log=/tmp/mok_json/${shape}_t${tok}_d${div}_mx
  timeout $left torchrun --standalone --nproc_per_node=1 bench/harness.py --tokens $tok \
    --shapes $shape --routing ${ROUTING:-uniform} --fp8 --mxfp8 --experts-div $div \
    --iters ${ITERS:-50} --warmup 5 --seed ${SEED:-23} --out $log > $log.log 2>&1
  echo "== $c exit $? at $(( $(date +%s) - t0 )) s"
  grep "^row " $log.log >> "$OUT/rows.log"
  grep -E "^(no PyTorch|skip|Traceback|.*Error)" $log.log | head -5
  grep -E " (fwd|bwd) |MXFP8|per update" $log.log | grep -v "^row" | tail -12
done
tar -C /tmp/mok_json -cf "$OUT/json.tar" .

#!/usr/bin/env bash
# bf16_probe.sh — build, the GPU suite (one seed), `mok run --breakdown` on the BF16 shapes.
set -u
OUT=${OUT:-/tmp/mok_out}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 XDG_CACHE_HOME=/tmp/mok_cache
t0=$(date +%s)
make -j16 build/libmok.so build/mok build/mok_gpu_tests > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
for a in "deepseek-v3" "deepseek-v3 --experts 128" "qwen3-30b"; do
  echo "== $a"; timeout 120 ./build/mok run --shape $a --tokens 7168 --iters 20 --breakdown 2>&1 | grep -vE "^mok run: (GPU|CPU)" | tail -${TAILN:-24}
done > "$OUT/breakdown.txt"
cat "$OUT/breakdown.txt"
CUDA_VISIBLE_DEVICES=0 MOK_TEST_SEED=${SEED:-31} MOK_TEST_TIMEOUT=300 timeout 300 tests/gpu/launch.sh build/mok_gpu_tests >"$OUT/gpu.log" 2>&1
echo "suite: $(tail -1 "$OUT/gpu.log")"; grep -E "^(FAIL|\[r0\] +CHECK)" "$OUT/gpu.log" | head -8
echo "all $(( $(date +%s) - t0 )) s"

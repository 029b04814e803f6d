#!/usr/bin/env bash
# session_final.sh — one call: build, the GPU suite (one seed), the PyTorch FP8 tests, the weight
# quantizer's timing (dev/quant_timing.py), `mok tune` of DSv3 and Qwen3-30B in BF16 and `mok run`
# after it (the tuned plan). Logs under $OUT.
set -u
OUT=${OUT:-/tmp/mok_out}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export XDG_CACHE_HOME=/tmp/mok_cache
t0=$(date +%s)
make -j16 build/libmok.so build/mok build/mok_gpu_tests >"$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
TR="timeout 150 python3 -m torch.distributed.run --standalone --nproc_per_node=1"
$TR dev/quant_timing.py --shape deepseek-v3 --tokens 7168 2>&1 | grep -E "round|GB" > "$OUT/quant.txt"; cat "$OUT/quant.txt"
for s in qwen3-30b deepseek-v3; do
  timeout 120 ./build/mok tune --shape $s --tokens 7168 > "$OUT/tune_$s.txt" 2>&1; echo "tune $s rc=$?"; grep -v "^mok tune:" "$OUT/tune_$s.txt" | tail -16
  timeout 100 ./build/mok run --shape $s --tokens 7168 --iters 10 --build-in-forward 1 2>&1 | grep -E "plan|build \+ forward|backward|check"
done
CUDA_VISIBLE_DEVICES=0 MOK_TEST_SEED=17 MOK_TEST_TIMEOUT=400 timeout 400 tests/gpu/launch.sh build/mok_gpu_tests >"$OUT/gpu.log" 2>&1
echo "suite: $(tail -1 "$OUT/gpu.log")"; grep -E "^(FAIL|\[r0\] +CHECK)" "$OUT/gpu.log" | head -8
grep -E "tuned plan cache" "$OUT/gpu.log" | head -4
$TR -m pytest -q -s -p no:cacheprovider tests/python/test_moe_gpu.py -k "fp8" >"$OUT/py.log" 2>&1
echo "py: $(grep -E '[0-9]+ (passed|failed)' "$OUT/py.log" | tail -1)"
echo "all $(( $(date +%s) - t0 )) s"

#!/usr/bin/env bash
# probe.sh — one call: build, the GPU suite over $SEEDS side by side, then where the BF16 step's
# time goes (bench/profile_layer.py kernel tables, `mok run --breakdown`) and the FP8 module path's
# weight costs (dev/quant_timing.py). Logs under $OUT; a short table last.
set -u
OUT=${OUT:-/tmp/mok_out}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
t0=$(date +%s)
make -j16 build/libmok.so build/mok build/mok_gpu_tests >"$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
for seed in ${SEEDS:-11 12}; do
  CUDA_VISIBLE_DEVICES=0 MOK_TEST_SEED=$seed MOK_TEST_TIMEOUT=400 timeout 420 \
    tests/gpu/launch.sh build/mok_gpu_tests >"$OUT/gpu_$seed.log" 2>&1 &
done
wait
for seed in ${SEEDS:-11 12}; do echo "seed $seed: $(tail -1 "$OUT/gpu_$seed.log")"; grep -E "^(FAIL|\[r0\] +CHECK)" "$OUT/gpu_$seed.log" | head -6; done
echo "suite done $(( $(date +%s) - t0 )) s"
TR="timeout 120 python3 -m torch.distributed.run --standalone --nproc_per_node=1"
for s in ${PROFILES:-deepseek-v3 qwen3-30b}; do
  $TR bench/profile_layer.py --shape $s --tokens 7168 --steps 3 --backward-only 2>&1 | grep -v Warning | tail -28 >"$OUT/prof_bwd_$s.txt"
  $TR bench/profile_layer.py --shape $s --tokens 7168 --steps 3 --forward-only 2>&1 | grep -v Warning | tail -22 >"$OUT/prof_fwd_$s.txt"
done
for s in ${PROFILES:-deepseek-v3 qwen3-30b}; do
  timeout 100 ./build/mok run --shape $s --tokens 7168 --breakdown --iters 10 >"$OUT/bd_$s.txt" 2>&1
done
$TR dev/quant_timing.py --shape deepseek-v3 --tokens 7168 2>&1 | grep -v Warning | tail -12 >"$OUT/quant.txt"
echo "all $(( $(date +%s) - t0 )) s"

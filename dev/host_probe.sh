#!/usr/bin/env bash
# host_probe.sh — where a small shape's eager pass loses time against `mok run`: build, then
# `mok run`, the host's microseconds per call part by part (dev/host_overhead.py) and the timelines
# from idle, eager and from a CUDA graph (bench/profile_layer.py), for SHAPE (default qwen3-30b,
# BF16, T 7168). Logs under $OUT.
set -u
OUT=${OUT:-/tmp/mok_out}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
SHAPE=${SHAPE:-qwen3-30b}
t0=$(date +%s)
make -j16 build/libmok.so build/mok > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
export MOK_LIBRARY=$PWD/build/libmok.so PYTHONPATH=$PWD/python
./build/mok run --shape $SHAPE --tokens 7168 --iters 30 --warmup 3 --seed 7 --build-in-forward 1 \
  > "$OUT/run.log" 2>&1; grep -E "forward|backward" "$OUT/run.log" | head -6
torchrun --standalone --nproc_per_node=1 dev/host_overhead.py --shape $SHAPE --tokens 7168 --bf16 \
  > "$OUT/host.log" 2>&1; tail -14 "$OUT/host.log"
for pass in forward backward; do
  torchrun --standalone --nproc_per_node=1 bench/profile_layer.py --shape $SHAPE --tokens 7168 \
    --steps 3 --timeline --graph --$pass-only > "$OUT/tl_$pass.log" 2>&1
  echo "== $pass timeline rc=$? at $(( $(date +%s) - t0 )) s"
done

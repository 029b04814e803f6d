#!/usr/bin/env bash
# harness_table.sh — build, then the layer harness at EP=1, T 7168 on SHAPES (default DSv3 and
# Qwen3-30B), uniform and Zipf, BF16 and FP8 (with PyTorch's FP8 path), DIV=2 for EP=2's routed
# work per GPU; the JSON and the table under $OUT.
set -u
OUT=${OUT:-/tmp/mok_out}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 XDG_CACHE_HOME=/tmp/mok_cache
t0=$(date +%s)
make -j16 build/libmok.so build/mok > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
export MOK_LIBRARY=$PWD/build/libmok.so PYTHONPATH=$PWD/python
for div in ${DIVS:-1}; do
  timeout ${LIMIT:-500} torchrun --standalone --nproc_per_node=1 bench/harness.py --tokens 7168 \
    --shapes ${SHAPES:-deepseek-v3,qwen3-30b} --routing ${ROUTING:-uniform,zipf} --fp8 \
    --experts-div $div --iters ${ITERS:-50} --warmup 5 --seed ${SEED:-23} --out "$OUT/harness_d$div" \
    > "$OUT/harness_d$div.log" 2>&1
  echo "harness div $div exit $? after $(( $(date +%s) - t0 )) s"
  grep -v "^row " "$OUT/harness_d$div.log" | tail -${TAILN:-24}
done

#!/usr/bin/env bash
# claim_ab.sh — one call deciding a gate+up change: this tree against BASE (a source copy).
# Builds both; this tree's bitwise and gate+up GPU tests first; the layer (`mok run`, BF16) of
# both alternated for ROUNDS on CASES (shape:experts:routing); the kernels alone (dev/gg_ab.py,
# bitwise equal outputs first; GG_SHAPES, GG_OPS); then this tree's whole GPU suite while
# DEADLINE lasts. Tables last.
set -u
OUT=${OUT:-/tmp/mok_out}
BASE=${BASE:-build/ab/main}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
t0=$(date +%s)
left() { echo $(( ${DEADLINE:-540} - ($(date +%s) - t0) )); }
GG="nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -Xcompiler -fPIC -Iinclude -I. -shared"
SRC="kernels/gemm/bf16*.cu kernels/gemm/tmap.cu kernels/common/launch_error.cu"
# GG_S=0: no kernels-alone A/B (and no build of its libraries)
GGB=$GG; [ "${GG_S:-120}" = 0 ] && GGB=true
( make -j16 build/libmok.so build/mok build/mok_gpu_tests >"$OUT/build.log" 2>&1 && $GGB -o build/gg_new.so $SRC ) &
( cd "$BASE" && make -j16 build/libmok.so build/mok >"$OUT/build_base.log" 2>&1 && $GGB -o build/gg_old.so $SRC ) &
wait
[ -x build/mok ] && [ -x "$BASE/build/mok" ] || { tail -20 "$OUT/build.log" "$OUT/build_base.log"; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
for f in ${FIRST_TESTS:-gg_bf16_clusters_bitwise gg_swiglu}; do
  CUDA_VISIBLE_DEVICES=0 MOK_TEST_SEED=${SEED:-71} MOK_TEST_TIMEOUT=90 timeout 100 \
    tests/gpu/launch.sh build/mok_gpu_tests $f >"$OUT/t_$f.log" 2>&1
  echo "$f: $(tail -1 "$OUT/t_$f.log")"; grep -E "differing|counters|FAIL|CHECK" "$OUT/t_$f.log" | head -12
done
RES=$OUT/layer_ab.txt; : >"$RES"
for round in $(seq ${ROUNDS:-2}); do
  for c in ${CASES:-deepseek-v3:256:zipf qwen3-30b:128:zipf deepseek-v3:256:uniform}; do
    IFS=: read -r s e r <<<"$c"
    for v in old new; do
      [ "$(left)" -lt 30 ] && continue
      bin=./build/mok; [ $v = old ] && bin=$BASE/build/mok
      line=$(timeout 60 $bin run --shape $s --experts $e --routing $r --tokens 7168 --iters 20 --warmup 3 \
        --seed 7 --build-in-forward 1 2>&1 | awk '/build \+ forward/{f=$4} /^  backward/{b=$2} /check/{c=$NF} END{print f, b, c}')
      echo "$round $s/E$e/$r $v $line" >>"$RES"
    done
  done
done
echo "layer A/B done at $(( $(date +%s) - t0 )) s"
l=$(left); g=$(( l - 40 < ${GG_S:-120} ? l - 40 : ${GG_S:-120} ))
[ $g -gt 20 ] && timeout $g python3 dev/gg_ab.py old="$BASE/build/gg_old.so" new=build/gg_new.so >"$OUT/gg_ab.txt" 2>&1
echo "gg_ab done at $(( $(date +%s) - t0 )) s"
l=$(left)
if [ $l -gt 40 ]; then
  CUDA_VISIBLE_DEVICES=0 MOK_TEST_SEED=${SEED:-71} MOK_TEST_TIMEOUT=$(( l - 15 )) timeout $(( l - 10 )) \
    tests/gpu/launch.sh build/mok_gpu_tests >"$OUT/gpu.log" 2>&1
  echo "gpu suite (cut at $l s): $(tail -1 "$OUT/gpu.log")"; grep -E "^FAIL|CHECK" "$OUT/gpu.log" | head -6
fi
[ -f "$OUT/gg_ab.txt" ] && tail -30 "$OUT/gg_ab.txt"
python3 dev/ab_table.py "$RES"

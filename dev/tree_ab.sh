#!/usr/bin/env bash
# tree_ab.sh — A/B of the BF16 row-grouped kernel and the layer: this tree against the tree in
# BASE (a source copy, e.g. `git archive <commit> | tar -x -C build/ab/base`). Builds both; this
# tree's GPU tests named in FIRST_TESTS (each a name filter); the kernels alone (dev/gg_ab.py,
# bitwise equal outputs first, at most GG_S seconds; GG_S=0: none); `mok run` BF16 of both trees
# alternated for ROUNDS on CASES (shape:experts:routing[:plan pins, this tree only]); with WGRAD
# set, the weight gradient alone (dev/wgrad_ab.py) after the kernels; the harness
# on BASE for HARNESS; then the GPU suite of this tree while DEADLINE lasts. Tables last.
set -u
OUT=${OUT:-/tmp/mok_out}
BASE=${BASE:-build/ab/base}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
t0=$(date +%s)
GG="nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -Xcompiler -fPIC -Iinclude -I. -shared"
[ "${GG_S:-150}" = 0 ] && GG=true # no kernels-alone A/B: its libraries not built
( make -j16 build/libmok.so build/mok build/mok_gpu_tests >"$OUT/build.log" 2>&1 &&
  $GG -o build/gg_new.so kernels/gemm/bf16*.cu kernels/gemm/tmap.cu kernels/common/launch_error.cu ) &
( cd "$BASE" && make -j16 build/libmok.so build/mok >"$OUT/build_base.log" 2>&1 &&
  $GG -o build/gg_old.so kernels/gemm/bf16*.cu kernels/gemm/tmap.cu kernels/common/launch_error.cu ) &
wait
[ -x build/mok ] && [ -x "$BASE/build/mok" ] || { tail -20 "$OUT/build.log" "$OUT/build_base.log"; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
for f in ${FIRST_TESTS:-}; do
  CUDA_VISIBLE_DEVICES=0 MOK_TEST_SEED=${SEED:-53} MOK_TEST_TIMEOUT=90 timeout 100 \
    tests/gpu/launch.sh build/mok_gpu_tests $f > "$OUT/t_$f.log" 2>&1
  echo "$f: $(tail -1 "$OUT/t_$f.log")"; grep -E "differing|counters|^FAIL|CHECK" "$OUT/t_$f.log" | head -12
done
if [ "${GG_S:-150}" != 0 ]; then
  timeout ${GG_S:-150} python3 dev/gg_ab.py old="$BASE/build/gg_old.so" new=build/gg_new.so > "$OUT/gg_ab.txt" 2>&1
  echo "gg_ab done at $(( $(date +%s) - t0 )) s"
fi
# WGRAD=1: the weight gradient alone too (dev/wgrad_ab.py, bitwise first)
if [ -n "${WGRAD:-}" ]; then
  WG="kernels/gemm/bf16_wgrad.cu kernels/gemm/tmap.cu kernels/common/launch_error.cu"
  $GG -o build/wg_new.so $WG & ( cd "$BASE" && $GG -o build/wg_old.so $WG ) & wait
  python3 dev/wgrad_ab.py old="$BASE/build/wg_old.so" new=build/wg_new.so > "$OUT/wgrad_ab.txt" 2>&1
  echo "wgrad_ab done at $(( $(date +%s) - t0 )) s"
fi
RES=$OUT/layer_ab.txt; : > $RES
for round in $(seq ${ROUNDS:-2}); do
  for c in ${CASES:-deepseek-v3:256:zipf deepseek-v3:256:uniform qwen3-30b:128:zipf}; do
    IFS=: read -r s e r pin <<< "$c"
    for v in old new; do
      [ $(( ${DEADLINE:-400} - ($(date +%s) - t0) )) -lt 30 ] && continue
      bin=./build/mok; [ $v = old ] && bin=$BASE/build/mok
      plan=""; [ -n "$pin" ] && { [ $v = old ] && continue; plan="--plan $pin"; v="new+$pin"; }
      line=$(timeout 60 $bin run --shape $s --experts $e --routing $r --tokens 7168 --iters 20 --warmup 3 \
        --seed 7 --build-in-forward 1 $plan 2>&1 | awk '/build \+ forward/{f=$4} /^  backward/{b=$2} /check/{c=$NF} END{print f, b, c}')
      echo "$round $s/E$e/$r $v $line" >> $RES
    done
  done
done
echo "layer A/B done at $(( $(date +%s) - t0 )) s"
# HARNESS: "shape:tokens:div" words, the layer harness on the BASE tree (dev/harness_rows.sh)
[ -n "${HARNESS:-}" ] && bash dev/harness_rows.sh "$BASE" $(( ${DEADLINE:-400} - ($(date +%s) - t0) )) "$HARNESS"
left=$(( ${DEADLINE:-400} - ($(date +%s) - t0) ))
if [ $left -gt 60 ]; then
  CUDA_VISIBLE_DEVICES=0 MOK_TEST_SEED=${SEED:-53} MOK_TEST_TIMEOUT=$(( left - 20 )) timeout $(( left - 10 )) \
    tests/gpu/launch.sh build/mok_gpu_tests > "$OUT/gpu.log" 2>&1
  echo "gpu suite: $(tail -1 "$OUT/gpu.log")"; grep -E "^FAIL|CHECK" "$OUT/gpu.log" | head -6
fi
[ -f "$OUT/gg_ab.txt" ] && tail -40 "$OUT/gg_ab.txt"
[ -f "$OUT/wgrad_ab.txt" ] && tail -20 "$OUT/wgrad_ab.txt"
python3 dev/ab_table.py $RES

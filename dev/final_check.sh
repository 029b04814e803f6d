#!/usr/bin/env bash
# final_check.sh — build; the whole GPU suite (one seed, SUITE_S seconds at most) and the PyTorch
# GPU tests (PY_S); then, while DEADLINE seconds last, `mok run` (BF16) of the default plan against
# routed_cluster=1, alternated for ROUNDS, on DSv3 uniform and Zipf and Kimi-K2 with 192 experts
# (299 rows per expert: three row tiles, so the cluster pairs leave one tile empty); the layer
# harness for HARNESS (dev/harness_rows.sh) while DEADLINE lasts. Table last.
set -u
OUT=${OUT:-/tmp/mok_out}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
t0=$(date +%s)
make -j16 build/libmok.so build/mok build/mok_gpu_tests >"$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
left=$(( ${DEADLINE:-440} - ($(date +%s) - t0) ))
CUDA_VISIBLE_DEVICES=0 MOK_TEST_SEED=${SEED:-47} MOK_TEST_TIMEOUT=${SUITE_S:-170} timeout ${SUITE_S:-170} tests/gpu/launch.sh build/mok_gpu_tests > /tmp/gpu.log 2>&1
echo "gpu suite: $(tail -1 /tmp/gpu.log) at $(( $(date +%s) - t0 )) s"; grep -E "^FAIL|CHECK" /tmp/gpu.log | head -6
left=$(( ${DEADLINE:-440} - ($(date +%s) - t0) ))
[ $left -gt 30 ] && { MOK_LIBRARY=$PWD/build/libmok.so PYTHONPATH=$PWD/python timeout $(( left < ${PY_S:-100} ? left : ${PY_S:-100} )) python3 -m pytest -q -s -p no:cacheprovider tests/python/test_moe_gpu.py > /tmp/py.log 2>&1;
  echo "pytest gpu: $(tail -1 /tmp/py.log) at $(( $(date +%s) - t0 )) s"; grep -E "^FAILED|^E " /tmp/py.log | head -6; }
RES=/tmp/ab.txt; : > $RES
for round in $(seq ${ROUNDS:-1}); do
  for c in "deepseek-v3:256:uniform" "deepseek-v3:256:zipf" "kimi-k2:192:uniform"; do
    IFS=: read -r s e r <<< "$c"
    for v in A B; do
      pin=""; [ $v = B ] && pin="--plan routed_cluster=1"
      [ $(( ${DEADLINE:-440} - ($(date +%s) - t0) )) -lt 25 ] && continue
      line=$(timeout 60 ./build/mok run --shape $s --experts $e --routing $r --tokens 7168 --iters 20 --warmup 3 \
        --seed 7 --build-in-forward 1 $pin 2>&1 | awk '/build \+ forward/{f=$4} /^  backward/{b=$2} /check/{c=$NF} END{print f, b, c}')
      name=default; [ $v = B ] && name=routed_cluster=1
      echo "$round $s/E$e/$r $name $line" >> $RES
    done
  done
done
echo "A/B done at $(( $(date +%s) - t0 )) s"
# HARNESS: "shape:tokens:div" words, the layer harness on this tree (dev/harness_rows.sh)
[ -n "${HARNESS:-}" ] && bash dev/harness_rows.sh . $(( ${DEADLINE:-440} - ($(date +%s) - t0) )) "$HARNESS"
[ -s $RES ] && python3 dev/ab_table.py $RES

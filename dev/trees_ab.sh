#!/usr/bin/env bash
# trees_ab.sh — the layer (`mok run`, BF16) of several source trees alternated in one call.
# TREES: words name=dir[:plan], each dir a source copy (e.g. `git archive <ref> | tar -x -C
# build/ab/<ref>`), plan an optional `--plan` pin for that entry (entries may share a dir). All
# built in parallel; then ROUNDS x CASES (shape:experts:routing[:dtype], BF16 unless fp8) x TREES
# while DEADLINE lasts;
# then the GPU suite of each tree named in SUITE while it lasts. Table last. TARGETS: what each
# tree builds (default the library, the CLI and the GPU suite).
set -u
OUT=${OUT:-/tmp/mok_out}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
t0=$(date +%s)
left() { echo $(( ${DEADLINE:-500} - ($(date +%s) - t0) )); }
declare -A built
for w in ${TREES:?TREES=name=dir[:plan] ...}; do
  spec=${w#*=}; dir=${spec%%:*}
  [ -n "${built[$dir]:-}" ] && continue # one build per tree
  built[$dir]=1
  ( cd "$dir" && make -j16 ${TARGETS:-build/libmok.so build/mok build/mok_gpu_tests} ) \
    > "$OUT/build_${w%%=*}.log" 2>&1 &
done
wait
for w in $TREES; do spec=${w#*=}; dir=${spec%%:*}
  [ -x "$dir/build/mok" ] || { echo "no build in $dir"; tail -20 "$OUT/build_${w%%=*}.log"; exit 1; }
done
echo "build $(( $(date +%s) - t0 )) s"
RES=$OUT/layer_ab.txt; : > "$RES"
for round in $(seq ${ROUNDS:-2}); do
  for c in ${CASES:-deepseek-v3:256:uniform deepseek-v3:256:zipf qwen3-30b:128:uniform}; do
    IFS=: read -r s e r d <<< "$c"
    for w in $TREES; do
      [ "$(left)" -lt 30 ] && continue
      name=${w%%=*}; spec=${w#*=}; dir=${spec%%:*}; plan=""
      [ "$spec" != "$dir" ] && plan="--plan ${spec#*:}"
      line=$(timeout 60 "$dir/build/mok" run --shape $s --experts $e --routing $r --tokens 7168 \
        --iters 20 --warmup 3 --seed 7 --build-in-forward 1 --dtype ${d:-bf16} $plan 2>&1 |
        awk '/build \+ forward/{f=$4} /^  backward/{b=$2} /check/{c=$NF} END{print f, b, c}')
      echo "$round $s/E$e/$r${d:+/$d} $name $line" >> "$RES"
    done
  done
done
echo "layer A/B done at $(( $(date +%s) - t0 )) s"
for name in ${SUITE:-}; do
  for w in $TREES; do
    [ "${w%%=*}" = "$name" ] || continue
    spec=${w#*=}; dir=${spec%%:*}; l=$(left)
    [ $l -lt 60 ] && { echo "suite $name: skipped, $l s left"; continue; }
    ( cd "$dir" && CUDA_VISIBLE_DEVICES=0 MOK_TEST_SEED=${SEED:-61} MOK_TEST_TIMEOUT=$(( l - 20 )) \
      timeout $(( l - 10 )) tests/gpu/launch.sh build/mok_gpu_tests ) > "$OUT/gpu_$name.log" 2>&1
    echo "gpu suite $name: $(tail -1 "$OUT/gpu_$name.log")"; grep -E "^FAIL|CHECK" "$OUT/gpu_$name.log" | head -6
  done
done
python3 dev/ab_table.py "$RES"

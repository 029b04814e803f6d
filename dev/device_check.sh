#!/usr/bin/env bash
# device_check.sh — one call on a GPU machine for a change that must not change results or speed:
#   STEP=suites  build, the CPU tests, the GPU suite at EP=1, the grouped GEMM tests, a short table
#                last
#   STEP=python  build, the PyTorch GPU tests (tests/python/run_gpu_tests.sh), then STEP=ab
#   STEP=ab      `mok run` of this tree and of the tree in $OLD_TAR (a `git archive` of the
#                baseline), built side by side, alternated case by case for $ROUNDS rounds:
#                DeepSeek-V3 and Qwen3-30B-A3B (qwen3-30b) at T 7168, BF16 and FP8; medians per build last
#   STEP=harness the layer harness at EP=1 (DeepSeek-V3, T 7168, uniform and Zipf, BF16 and FP8)
#   STEP=final   both trees' digests of a step's outputs and gradients (dev/digest.py: bit for bit
#                the same or not), the tiny language model's test on fixed seeds ($LM_SEEDS), the
#                harness
# Logs under $OUT. Every process keeps NVLink multicast off.
set -u
OUT=${OUT:-/tmp/mok_out}
STEP=${STEP:-suites}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
nccl=$(python3 -c "import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])" 2>/dev/null)
export LD_LIBRARY_PATH="$nccl/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
build() { # dir: make there against the wheel's NCCL
  (cd "$1" && make -j16 NCCL_HOME="$nccl" >"$OUT/build-$(basename "$1").log" 2>&1) ||
    { tail -30 "$OUT/build-$(basename "$1").log"; exit 1; }
}
t0=$(date +%s)
case $STEP in
suites)
  build .
  make -j16 NCCL_HOME="$nccl" build/gg_test >>"$OUT/build-main.log" 2>&1 || { tail -30 "$OUT/build-main.log"; exit 1; }
  echo "build $(( $(date +%s) - t0 )) s"
  ./build/mok_tests >"$OUT/cpu.log" 2>&1; cpu=$(tail -1 "$OUT/cpu.log")
  CUDA_VISIBLE_DEVICES=0 MOK_TEST_TIMEOUT=300 timeout 320 tests/gpu/launch.sh build/mok_gpu_tests >"$OUT/gpu.log" 2>&1
  gpu=$(tail -1 "$OUT/gpu.log")
  timeout 150 ./build/gg_test >"$OUT/gg.log" 2>&1; gg=$(tail -1 "$OUT/gg.log")
  grep -E "FAIL|DIFFER" "$OUT/gpu.log" "$OUT/gg.log" | head -20
  printf "%-8s %s\n" cpu "$cpu" gpu "$gpu" gg "$gg" seconds "$(( $(date +%s) - t0 ))"
  ;;
python | ab)
  if [ "$STEP" = python ]; then
    build .
    MOK_TEST_TIMEOUT=120 timeout 200 tests/python/run_gpu_tests.sh >"$OUT/py.log" 2>&1
    grep -A8 "==== summary" "$OUT/py.log"
    grep -E "FAILED|Error|error" "$OUT/py.log" | head -10
    t0=$(date +%s)
  fi
  mkdir -p /tmp/old && tar -xf "${OLD_TAR:-.ab/old.tar}" -C /tmp/old
  build . & build /tmp/old & wait
  echo "builds $(( $(date +%s) - t0 )) s"
  cases=("deepseek-v3|--dtype bf16" "deepseek-v3|--dtype fp8" "qwen3-30b|--dtype bf16" "qwen3-30b|--dtype fp8")
  for round in $(seq 1 "${ROUNDS:-2}"); do
    for c in "${cases[@]}"; do
      for tree in new old; do
        bin=./build/mok; [ $tree = old ] && bin=/tmp/old/build/mok
        log="$OUT/ab_${tree}_$(echo "${c%%|*}${c#*|}" | tr -c 'a-z0-9' _)_$round.log"
        timeout 120 $bin run --shape "${c%%|*}" ${c#*|} --tokens 7168 --iters ${ITERS:-20} --warmup 3 --seed 7 --build-in-forward 1 >"$log" 2>&1
        printf "%-4s %-26s r%d %s\n" $tree "$c" "$round" "$(grep -E '^ *(build \+ forward|backward) ' "$log" | awk '{print $(NF-1)}' | paste -sd ' ' -) $(grep -o 'PASS\|FAIL' "$log" | head -1)"
      done
    done
  done | tee "$OUT/ab.txt"
  echo "== medians (ms: build + forward, backward)"
  python3 - "$OUT/ab.txt" <<'PY'
import sys, statistics, collections
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    p = line.split()
    if len(p) >= 7 and p[0] in ("new", "old"):
        try: rows[(" ".join(p[1:3]), p[0])].append((float(p[-3]), float(p[-2])))
        except ValueError: pass
for case in sorted({k[0] for k in rows}):
    cells = []
    for tree in ("old", "new"):
        v = rows.get((case, tree), [])
        cells.append(f"{tree} {statistics.median(a for a, _ in v):7.3f} {statistics.median(b for _, b in v):7.3f}" if v else f"{tree} -")
    o, n = rows.get((case, "old")), rows.get((case, "new"))
    d = f"{100 * (statistics.median(a for a, _ in n) / statistics.median(a for a, _ in o) - 1):+5.1f}% {100 * (statistics.median(b for _, b in n) / statistics.median(b for _, b in o) - 1):+5.1f}%" if o and n else ""
    print(f"{case:28s} {'  '.join(cells)}  {d}")
PY
  ;;
final)
  mkdir -p /tmp/old && tar -xf "${OLD_TAR:-.ab/old.tar}" -C /tmp/old
  build . & build /tmp/old & wait
  echo "builds $(( $(date +%s) - t0 )) s"
  for c in "deepseek-v3 128" "qwen3-30b 0"; do
    for tree in "$PWD" /tmp/old; do
      MOK_TREE=$tree timeout 120 torchrun --standalone --nproc_per_node=1 dev/digest.py $c 2>&1 |
        grep "^digest" | sed "s|^|$(basename "$tree") |"
    done
  done
  for seed in ${LM_SEEDS:-1 2}; do
    MOK_TEST_SEED=$seed MOK_LIBRARY=$PWD/build/libmok.so PYTHONPATH=$PWD/python timeout 150 \
      torchrun --standalone --nproc_per_node=1 -m pytest -q -s -p no:cacheprovider \
      tests/python/test_moe_gpu.py -k tiny_lm >"$OUT/lm_$seed.log" 2>&1
    echo "tiny_lm seed $seed: $(grep -E '^(=+ )?[0-9]+ (passed|failed)' "$OUT/lm_$seed.log" | tail -1)"
    grep "MOK-RESULT" "$OUT/lm_$seed.log" | head -2
  done
  ;&
harness)
  build .
  timeout ${HARNESS_LIMIT:-540} torchrun --standalone --nproc_per_node=1 bench/harness.py --tokens 7168 \
    --shapes "${SHAPES:-deepseek-v3}" --routing uniform,zipf --iters 40 --warmup 5 --fp8 --graph \
    --seed "${SEED:-23}" --out "$OUT/harness" >"$OUT/harness.log" 2>&1
  echo "harness exit $? after $(( $(date +%s) - t0 )) s"
  grep -v "^row " "$OUT/harness.log" | tail -16
  ;;
esac

#!/usr/bin/env bash
# path_ab.sh — `mok run` with plans alternated case by case on one machine (default: the fused and
# the grouped path, BF16, T 7168, on three shapes), $ROUNDS rounds, medians last.
#   env: SHAPES ("deepseek-v3 qwen3-30b qwen3-235b"), PLANS ("path=fused path=grouped"), ROUNDS (2),
#        EXTRA (more `mok run` options), OUT
set -u
OUT=${OUT:-/tmp/mok_out}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nccl=$(python3 -c "import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])" 2>/dev/null)
export LD_LIBRARY_PATH="$nccl/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
make -j16 NCCL_HOME="$nccl" >"$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
for round in $(seq 1 "${ROUNDS:-2}"); do
  for s in ${SHAPES:-deepseek-v3 qwen3-30b qwen3-235b}; do
    for p in ${PLANS:-path=fused path=grouped}; do
      log="$OUT/${s}_$(echo "$p" | tr -c 'a-z0-9' _)_$round.log"
      timeout 120 ./build/mok run --shape "$s" --tokens 7168 --iters ${ITERS:-20} --warmup 3 --seed 7 \
        --build-in-forward 1 --plan "$p" ${EXTRA:-} >"$log" 2>&1
      printf "%-12s %-28s r%d %s %s\n" "$s" "$p" "$round" \
        "$(grep -E '^ *(build \+ forward|backward) ' "$log" | awk '{print $(NF-1)}' | paste -sd ' ' -)" \
        "$(grep -o 'PASS\|FAIL' "$log" | head -1)"
    done
  done
done | tee "$OUT/path_ab.txt"
python3 - "$OUT/path_ab.txt" <<'PY'
import sys, statistics, collections
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    p = line.split()
    if len(p) >= 6:
        try: rows[(p[0], p[1])].append((float(p[3]), float(p[4])))
        except ValueError: pass
print("== medians (ms: build + forward, backward)")
for (s, p), v in sorted(rows.items()):
    print(f"{s:12s} {p:28s} {statistics.median(a for a, _ in v):8.3f} {statistics.median(b for _, b in v):8.3f}")
PY

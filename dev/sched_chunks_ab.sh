#!/usr/bin/env bash
# sched_chunks_ab.sh — the schedule build's chunk count (api/config.c mok_sched_chunk_geometry:
# chunks per rank sqrt(8 T k / E)) times each factor in FACTORS (default "0.25 1 2"; clamped to
# what the single-block scan holds), each a copy of this tree under build/chunks, built in parallel,
# then ROUNDS x CASES (shape:experts) x factors of `mok run` (BF16, build in the forward)
# alternated while DEADLINE lasts. Table last (dev/ab_table.py): build + forward and backward ms.
set -u
OUT=${OUT:-/tmp/mok_out}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0
t0=$(date +%s)
left() { echo $(( ${DEADLINE:-400} - ($(date +%s) - t0) )); }
FACTORS=${FACTORS:-0.25 1 2}
root=build/chunks
rm -rf "$root"
for f in $FACTORS; do
  mkdir -p "$root/x$f"
  tar -cf - --exclude=./build --exclude=./.git --exclude=./.venv . | tar -xf - -C "$root/x$f"
  python3 - "$root/x$f/api/config.c" "$f" <<'PY'
import sys
p, f = sys.argv[1], sys.argv[2]
s = open(p).read()
old = "/ (double)E));\n"
assert s.count(old) == 1, "the chunk formula is gone from api/config.c"
s = s.replace(old, old + f"  pref = (int64_t)llround(pref * {f});\n  if (pref > MOK_SCHED_MAX_SCAN_ENTRIES / E) pref = MOK_SCHED_MAX_SCAN_ENTRIES / E;\n")
open(p, "w").write(s)
PY
  ( cd "$root/x$f" && make -j8 build/libmok.so build/mok ) > "$OUT/build_x$f.log" 2>&1 &
done
wait
echo "build $(( $(date +%s) - t0 )) s"
RES=$OUT/chunks_ab.txt; : > "$RES"
for round in $(seq ${ROUNDS:-2}); do
  for c in ${CASES:-qwen3-30b:128 olmoe:64 deepseek-v3:256}; do
    IFS=: read -r s e <<< "$c"
    for f in $FACTORS; do
      [ "$(left)" -lt 20 ] && continue
      line=$(timeout 60 "$root/x$f/build/mok" run --shape $s --experts $e --tokens 7168 \
        --iters 20 --warmup 3 --seed 7 --build-in-forward 1 2>&1 |
        awk '/build \+ forward/{f=$4} /^  backward/{k=$2} /check/{c=$NF} END{print f, k, c}')
      echo "$round $s/E$e x$f $line" >> "$RES"
    done
  done
done
python3 dev/ab_table.py "$RES"

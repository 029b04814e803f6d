#!/usr/bin/env bash
# harness_rows.sh TREE SECONDS "shape:tokens:div ..." — the layer harness (bench/harness.py:
# uniform and Zipf routing, BF16 and FP8, 50 iterations after 5) on the built tree TREE for each
# word, while SECONDS last; the rows in $OUT/harness_rows.log, the JSONs in $OUT/harness.tar.
set -u
tree=$1; budget=$2; t0=$(date +%s)
mkdir -p /tmp/mok_json
for c in $3; do
  IFS=: read -r shape tok div <<< "$c"
  left=$(( budget - ($(date +%s) - t0) ))
  [ $left -lt 90 ] && { echo "skip harness $c: $left s left"; continue; }
  log=/tmp/mok_json/${shape}_t${tok}_d${div}
  ( cd "$tree" && MOK_LIBRARY=$PWD/build/libmok.so PYTHONPATH=$PWD/python timeout $left \
    torchrun --standalone --nproc_per_node=1 bench/harness.py --tokens $tok --shapes $shape \
      --routing uniform,zipf --fp8 --experts-div $div --iters 50 --warmup 5 --seed 23 \
      --out $log ) > $log.log 2>&1
  grep "^row " $log.log >> "$OUT/harness_rows.log"
  echo "== harness $c at $(( $(date +%s) - t0 )) s"
  grep -E "^(Traceback|.*Error)" $log.log | head -5
  grep -E " (fwd|bwd) " $log.log | grep -v "^row" | tail -8
done
tar -C /tmp/mok_json -cf "$OUT/harness.tar" .

#!/usr/bin/env bash
# item7_table.sh — build, PyTorch's FP8 self-check, then the layer harness one shape at a time
# (env CASES: "shape:tokens:div" words; ROUTING; ITERS) while DEADLINE seconds last; every row
# line in $OUT/rows.log, the JSONs in $OUT/json.tar.
set -u
OUT=${OUT:-/tmp/mok_out}
mkdir -p "$OUT" /tmp/mok_json
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 XDG_CACHE_HOME=/tmp/mok_cache
t0=$(date +%s)
make -j16 build/libmok.so build/mok > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
export MOK_LIBRARY=$PWD/build/libmok.so PYTHONPATH=$PWD/python
python3 -c "
import sys; sys.path.insert(0, 'bench')
import torch, baseline_torch as b
print('torch', torch.__version__, 'fp8 check:', repr(b.scaled_grouped_mm_works()))" 2>&1 | tail -3
for c in ${CASES}; do
  IFS=: read -r shape tok div <<< "$c"
  left=$(( ${DEADLINE:-560} - ($(date +%s) - t0) ))
  [ $left -lt 60 ] && { echo "skip $c: $left s left"; continue; }
  timeout $left torchrun --standalone --nproc_per_node=1 bench/harness.py --tokens $tok \
    --shapes $shape --routing ${ROUTING:-uniform,zipf} --fp8 --experts-div $div \
    --iters ${ITERS:-50} --warmup 5 --seed ${SEED:-23} --out /tmp/mok_json/${shape}_t${tok}_d${div} \
    > /tmp/mok_json/${shape}_t${tok}_d${div}.log 2>&1
  rc=$?
  grep "^row " /tmp/mok_json/${shape}_t${tok}_d${div}.log >> "$OUT/rows.log"
  echo "== $c exit $rc at $(( $(date +%s) - t0 )) s"
  grep -E "^(no PyTorch|skip|Traceback|.*Error)" /tmp/mok_json/${shape}_t${tok}_d${div}.log | head -5
  grep -E " (fwd|bwd) " /tmp/mok_json/${shape}_t${tok}_d${div}.log | grep -v "^row" | tail -12
done
tar -C /tmp/mok_json -cf "$OUT/json.tar" .

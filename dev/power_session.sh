#!/usr/bin/env bash
# power_session.sh — one call: is the BF16 weight gradient held by the card's power cap or by its
# own latency? The kernel (and PROBES, copies of the tree with a part taken out, made by
# dev/wgrad_probes.sh), a dense GEMM and three streaming kernels, each sustained while the clock
# and the board power are sampled, and the power fitted over them (dev/wgrad_power.py); then the
# layer's clock and power over `mok run` per case of LAYER_CASES (shape:routing:dtype); VARIANTS
# (name=dir words) times other trees' weight gradients alone (dev/wgrad_trees.sh); NCU=1 adds
# Nsight Compute's stall reasons (dev/wgrad_ncu.sh). Logs under $LOG, tables under $OUT.
set -u
OUT=${OUT:-/tmp/mok_out}
LOG=${LOG:-/tmp/mok_log}
mkdir -p "$OUT" "$LOG"
BUILD=build
. bench/device_env.sh
t0=$(date +%s)
GG="nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -Xcompiler -fPIC -Iinclude -I. -shared"
( make -j16 build/libmok.so build/mok > "$LOG/build.log" 2>&1 ) &
$GG -o build/wg.so kernels/gemm/bf16_wgrad.cu kernels/gemm/tmap.cu kernels/common/launch_error.cu \
  > "$LOG/build_wg.log" 2>&1
plibs=""
for w in ${PROBES:-}; do
  ( cd "${w#*=}" && mkdir -p build && $GG -o build/wg.so kernels/gemm/bf16_wgrad.cu \
      kernels/gemm/tmap.cu kernels/common/launch_error.cu ) > "$LOG/build_${w%%=*}.log" 2>&1 &
  plibs="$plibs ${w%%=*}=${w#*=}/build/wg.so"
done
wait
[ -x build/mok ] && [ -f build/wg.so ] || { tail -20 "$LOG"/build*.log; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
OUT=$LOG python3 dev/wgrad_power.py base=build/wg.so $plibs ${SECONDS_PER:-3} > "$OUT/power.txt" 2>&1
tail -14 "$OUT/power.txt"
for c in ${LAYER_CASES-deepseek-v3:uniform:bf16 deepseek-v3:zipf:bf16 qwen3-30b:uniform:bf16 deepseek-v3:uniform:fp8}; do
  IFS=: read -r s r d <<< "$c"
  nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw --format=csv,noheader,nounits -lms 50 \
    -f "$LOG/smi_${s}_${r}_${d}.csv" & smi=$!
  sleep 0.3
  build/mok run --shape "$s" --routing "$r" --dtype "$d" --tokens 7168 --iters ${LAYER_ITERS:-100} \
    --warmup 5 --seed 7 > "$LOG/layer_${s}_${r}_$d.txt" 2>&1
  kill $smi; wait $smi 2>/dev/null
  python3 - "$LOG/smi_${s}_${r}_${d}.csv" "$c" "$LOG/layer_${s}_${r}_$d.txt" <<'PY' >> "$OUT/layer_power.txt"
import statistics, sys
rows = [l.split(",") for l in open(sys.argv[1]) if l.count(",") >= 2]
busy = [(float(w), float(m)) for _, m, w in rows if float(w) > 200]
ws = sorted(w for w, _ in busy)
times = [f[-2] for f in map(str.split, open(sys.argv[3]))
         if len(f) == 3 and f[0] in ("forward", "backward")]
print(f"{sys.argv[2]}: fwd / bwd {' / '.join(times)} ms; {len(busy)} samples over 200 W: median "
      f"{statistics.median(ws):.0f} W at {statistics.median(m for _, m in busy):.0f} MHz, 10th / 25th "
      f"percentile {ws[len(ws) // 10]:.0f} / {ws[len(ws) // 4]:.0f} W")
PY
done
[ -f "$OUT/layer_power.txt" ] && cat "$OUT/layer_power.txt"
echo "at $(( $(date +%s) - t0 )) s"
[ -n "${VARIANTS:-}" ] && OUT=$LOG TREES="base=. $VARIANTS base2=." \
  SHAPES=${WSHAPES:-dsv3_ep1_down,dsv3_ep1_gate,qwen3,hzipf} bash dev/wgrad_trees.sh | tee "$OUT/trees.txt"
[ "${NCU:-0}" = 1 ] && OUT=$LOG timeout 200 bash dev/wgrad_ncu.sh | tee "$OUT/ncu.txt"
echo "all $(( $(date +%s) - t0 )) s"

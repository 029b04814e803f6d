#!/usr/bin/env bash
# tune_rows.sh — one call: build, then `mok tune` (nothing stored) on the harness's shapes at
# T 7168 that fit the card, BF16 and FP8, uniform and Zipf, each candidate's time against the
# default's: the check that no default is slower than a candidate by more than 3%. The tune
# tables go to $OUT/tune_all.txt; one line per case last (the best candidate's margin over the
# default).
set -u
OUT=${OUT:-/tmp/mok_out}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
t0=$(date +%s)
make -j16 build/libmok.so build/mok >"$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
CASES=${CASES:-"qwen3-30b:0:bf16:uniform qwen3-235b:0:bf16:uniform glm-4.5:0:bf16:uniform
  olmoe:0:bf16:uniform deepseek-v3:128:bf16:uniform kimi-k2:192:bf16:uniform
  qwen3-30b:0:fp8:uniform qwen3-235b:0:fp8:uniform glm-4.5:0:fp8:uniform deepseek-v3:128:fp8:uniform
  qwen3-30b:0:bf16:zipf deepseek-v3:128:bf16:zipf deepseek-v3:0:bf16:uniform deepseek-v3:0:fp8:uniform"}
summary=()
LOGS=$(mktemp -d)
for c in $CASES; do
  IFS=: read -r shape experts dtype routing <<<"$c"
  ex=(); [ "$experts" != 0 ] && ex=(--experts "$experts")
  log="$LOGS/tune_${shape}_${experts}_${dtype}_${routing}.txt"
  timeout 120 ./build/mok tune --shape "$shape" "${ex[@]}" --tokens 7168 --dtype "$dtype" \
    --routing "$routing" --iters 9 --warmup 3 --save 0 >"$log" 2>&1
  rc=$?
  best=$(awk '$1 ~ /^[0-9]+$/ && $3 ~ /%$/ {v = $3 + 0; if (n == 0 || v < b) {b = v; p = $4} n++}
              END {if (n) printf "%+.1f%% %s (%d candidates)", b, p, n}' "$log")
  summary+=("$(printf '%-34s rc=%-3s best vs default: %s' "$c" "$rc" "$best")")
  echo "${summary[-1]}  ($(( $(date +%s) - t0 )) s)"
  { echo "=== $c"; cat "$log"; } >>"$OUT/tune_all.txt"
done
echo "=== all $(( $(date +%s) - t0 )) s"
printf '%s\n' "${summary[@]}"

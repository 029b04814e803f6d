#!/usr/bin/env bash
# plan_ab.sh — one call: build, then `mok run` of the default plan against pinned plan fields,
# alternated case by case for $ROUNDS rounds (the method of docs/PERF.md: --iters 20 --warmup 3
# --seed 7 --build-in-forward 1), medians per variant last; then the checks in $CHECKS
# ("gg": the grouped GEMM tests; "suite": the GPU suite, one seed; "py": the PyTorch GPU tests
# matching $PY_FILTER). Logs under $OUT.
#   env: SHAPES (default "deepseek-v3 qwen3-30b"), DTYPE (bf16), PIN (the B variant's plan
#   fields), ROUNDS (2), EXTRA (more mok run flags), CHECKS, PY_FILTER
set -u
OUT=${OUT:-/tmp/mok_out}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
t0=$(date +%s)
make -j16 build/libmok.so build/mok build/mok_gpu_tests build/gg_test >"$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
has() { case " ${CHECKS:-} " in *" $1 "*) return 0 ;; esac; return 1; }
if has gg; then
  timeout 240 ./build/gg_test >"$OUT/gg.log" 2>&1; echo "gg_test rc=$? $(tail -1 "$OUT/gg.log")"
  grep -E "FAIL|DIFFER" "$OUT/gg.log" | head -8
fi
RES="$OUT/ab.txt"; : >"$RES"
for round in $(seq 1 "${ROUNDS:-2}"); do
  for s in ${SHAPES:-deepseek-v3 qwen3-30b}; do
    for v in A B; do
      pin=""; [ $v = B ] && pin="--plan $PIN"
      line=$(timeout 120 ./build/mok run --shape "$s" --tokens 7168 --dtype "${DTYPE:-bf16}" --iters 20 --warmup 3 \
        --seed 7 --build-in-forward 1 ${EXTRA:-} $pin 2>&1 | awk '/build \+ forward/{f=$4} /^  backward/{b=$2} /check/{c=$NF} END{print f, b, c}')
      echo "$round $s $v $line" | tee -a "$RES"
    done
  done
done
python3 - "$RES" <<'PY'
import sys, statistics, collections
d = collections.defaultdict(list)
for line in open(sys.argv[1]):
    p = line.split()
    if len(p) >= 5:
        try: d[(p[1], p[2])].append((float(p[3]), float(p[4])))
        except ValueError: pass
print(f"{'shape':14s} {'variant':8s} {'fwd ms':>9s} {'bwd ms':>9s}")
for (s, v), xs in sorted(d.items()):
    print(f"{s:14s} {v:8s} {statistics.median(x[0] for x in xs):9.3f} {statistics.median(x[1] for x in xs):9.3f}")
PY
if has suite; then
  CUDA_VISIBLE_DEVICES=0 MOK_TEST_SEED=${SEED:-13} MOK_TEST_TIMEOUT=400 timeout 420 tests/gpu/launch.sh build/mok_gpu_tests >"$OUT/gpu.log" 2>&1
  echo "suite: $(tail -1 "$OUT/gpu.log")"; grep -E "^(FAIL|\[r0\] +CHECK)" "$OUT/gpu.log" | head -6
fi
if has py; then
  timeout 300 python3 -m torch.distributed.run --standalone --nproc_per_node=1 -m pytest -q -s -p no:cacheprovider \
    tests/python/test_moe_gpu.py -k "${PY_FILTER:-fp8}" >"$OUT/py.log" 2>&1
  echo "py: $(grep -E '[0-9]+ (passed|failed)' "$OUT/py.log" | tail -1)"; grep -E "MOK-RESULT|^(FAILED|ERROR)" "$OUT/py.log" | head -12
fi
echo "all $(( $(date +%s) - t0 )) s"

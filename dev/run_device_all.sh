#!/usr/bin/env bash
# run_device_all.sh — one call on a 2-GPU machine for the integration work: build against the
# PyTorch wheel's NCCL, `mok run --breakdown` at EP=2, the PyTorch layer's GPU tests, and (STEP=bench)
# the benchmark harness. Logs go to $OUT; a short summary is printed last.
set -u
OUT=${OUT:-/tmp/mok_out}
BUILD=${BUILD:-.devbuild}
mkdir -p "$OUT"
. "$(dirname "$0")/device_env.sh"
t0=$(date +%s)
timeout 170 make -j32 BUILD="$BUILD" "$BUILD/libmok.so" "$BUILD/mok" >"$OUT/build.log" 2>&1 ||
  { tail -30 "$OUT/build.log"; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
if [ "${STEP:-tests}" = tests ]; then
  timeout 60 "$BUILD/mok" run --breakdown --iters 20 --warmup 3 >"$OUT/run.log" 2>&1
  echo "mok run exit $?"
  MOK_TEST_TIMEOUT=150 timeout 330 tests/python/run_gpu_tests.sh >"$OUT/pytests.log" 2>&1
  echo "python tests exit $?"
  tail -45 "$OUT/pytests.log"
  cat "$OUT/run.log"
else
  timeout ${BENCH_LIMIT:-380} torchrun --standalone --nproc_per_node=${NGPU:-2} bench/harness.py \
    --tokens ${TOKENS:-4096} --out "$OUT/bench-ep${NGPU:-2}" ${BENCH_ARGS:-} >"$OUT/bench.log" 2>&1
  echo "harness exit $?"
  grep -v "^row " "$OUT/bench.log" | tail -40
fi

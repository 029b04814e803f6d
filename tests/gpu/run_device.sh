#!/usr/bin/env bash
# run_device.sh — everything one call on a 2-GPU machine does: (re)build if needed against the
# NCCL 2.28.9 of the PyTorch wheel, the GPU tests at EP=1 and EP=2, `mok run` on the default shape,
# and a short table last. Logs go to $OUT (default /tmp/mok_out).
#   env: BUILD (default build), CLEAN=1 (build from scratch), SKIP_TESTS=1, SKIP_RUN=1,
#        RUN_ARGS (extra `mok run` options),
#        RUN2_ARGS (a second `mok run` with these options), RUN_ZIPF=1 (a third, Zipf routing),
#        SANITIZE=1 (memcheck one case at EP=1), TEST_FILTER (a test-name filter),
#        EP2_AGAIN_ENV (e.g. "MOK_TEST_PATH=grouped;MOK_TEST_PLAN=schedule=serial": the EP=2 suite
#        once more for each ';'-separated set of variables)
set -u
OUT=${OUT:-/tmp/mok_out}
BUILD=${BUILD:-build}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nccl=$(python3 -c "import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])" 2>/dev/null)
if [ -n "$nccl" ] && [ -e "$nccl/lib/libnccl.so.2" ]; then
  export LD_LIBRARY_PATH="$nccl/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  mk_nccl="NCCL_HOME=$nccl"
else
  mk_nccl=""
fi
{ nvidia-smi -L; nvidia-smi topo -m; } >"$OUT/machine.log" 2>&1
t0=$(date +%s)
[ "${CLEAN:-0}" = 1 ] && rm -rf "$BUILD"  # objects from an older tree may lack header dependencies
if ! ldd "$BUILD/mok_gpu_tests" 2>/dev/null | grep -q "libnccl.so.2 => /" || [ "${REBUILD:-0}" = 1 ]; then
  make -j16 BUILD="$BUILD" $mk_nccl >"$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
fi
echo "nccl: $(ldd "$BUILD/mok_gpu_tests" | grep nccl)"
t1=$(date +%s)
ep1="skipped"; ep2="skipped"; run="skipped"
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  CUDA_VISIBLE_DEVICES=0 NCCL_DEBUG=WARN MOK_DEBUG=1 MOK_TEST_TIMEOUT=280 tests/gpu/launch.sh "$BUILD/mok_gpu_tests" ${TEST_FILTER:-} >"$OUT/ep1.log" 2>&1
  ep1=$(tail -1 "$OUT/ep1.log")
  t2=$(date +%s)
  MOK_TEST_TIMEOUT=280 tests/gpu/launch.sh "$BUILD/mok_gpu_tests" ${TEST_FILTER:-} >"$OUT/ep2.log" 2>&1
  ep2=$(tail -1 "$OUT/ep2.log")
  i=0
  IFS=';' read -ra again <<<"${EP2_AGAIN_ENV:-}"
  for vars in "${again[@]}"; do  # the EP=2 suite once more under each set of variables
    [ -z "$vars" ] && continue
    i=$((i + 1))
    env $vars MOK_TEST_TIMEOUT=280 tests/gpu/launch.sh "$BUILD/mok_gpu_tests" ${TEST_FILTER:-} >"$OUT/ep2-$i.log" 2>&1
    ep2="$ep2; with $vars: $(tail -1 "$OUT/ep2-$i.log")"
  done
fi
if [ "${SANITIZE:-0}" = 1 ]; then
  CUDA_VISIBLE_DEVICES=0 MOK_NRANKS=1 timeout 150 compute-sanitizer --tool memcheck --print-limit 20 \
    "$BUILD/mok_gpu_tests" layer_uniform_shared >"$OUT/sanitize.log" 2>&1
  echo "sanitizer: exit $? $(grep -c 'Invalid' "$OUT/sanitize.log") invalid accesses; $(tail -1 "$OUT/sanitize.log")"
fi
t3=$(date +%s)
if [ "${SKIP_RUN:-0}" != 1 ]; then
  timeout 200 "$BUILD/mok" run --iters 10 --warmup 2 ${RUN_ARGS:-} >"$OUT/run.log" 2>&1
  run="exit $?"
  if [ -n "${RUN2_ARGS:-}" ]; then
    timeout 200 "$BUILD/mok" run --iters 10 --warmup 2 $RUN2_ARGS >>"$OUT/run.log" 2>&1
    run="$run, second exit $?"
  fi
  if [ "${RUN_ZIPF:-0}" = 1 ]; then
    timeout 200 "$BUILD/mok" run --iters 10 --warmup 2 --routing zipf ${RUN_ARGS:-} >>"$OUT/run.log" 2>&1
    run="$run, zipf exit $?"
  fi
fi
t4=$(date +%s)
echo "==== failures / timings ===="
grep -h "FAIL\|CHECK\|relative error\|device status\|did not finish\|rank .*:" "$OUT"/ep1.log "$OUT"/ep2*.log 2>/dev/null | head -40
grep -h "NCCL WARN\|mok:" "$OUT"/ep1.log 2>/dev/null | head -10
cat "$OUT/run.log" 2>/dev/null | tail -36
echo "==== summary ===="
printf "%-22s %s\n" "build" "$((t1 - t0)) s" "tests EP=1" "$ep1" "tests EP=2" "$ep2 ($((t3 - t1)) s both)" "mok run" "$run ($((t4 - t3)) s)"

#!/usr/bin/env bash
# run_device_all.sh — one call on a 2-GPU machine for the integration work: build against the
# PyTorch wheel's NCCL, `mok run --breakdown` at EP=2, the PyTorch layer's GPU tests, and (STEP=bench)
# the benchmark harness. Logs go to $OUT; a short summary is printed last.
set -u
OUT=${OUT:-/tmp/mok_out}
BUILD=${BUILD:-.devbuild}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
nccl=$(python3 -c "import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])")
export LD_LIBRARY_PATH="$nccl/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export MOK_LIBRARY="$PWD/$BUILD/libmok.so" PYTHONPATH="$PWD/python"
t0=$(date +%s)
timeout 170 make -j32 BUILD="$BUILD" NCCL_HOME="$nccl" "$BUILD/libmok.so" "$BUILD/mok" >"$OUT/build.log" 2>&1 ||
  { tail -30 "$OUT/build.log"; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
if [ "${STEP:-tests}" = fix ]; then
  # why a mok group fails inside a torch process at EP=2, then the same with cuMem forced on
  CUDA_VISIBLE_DEVICES=0,1 MOK_DEBUG=1 NCCL_DEBUG=WARN timeout 60 torchrun --standalone --nproc_per_node=2 \
    examples/train_tiny_moe_lm.py --backend mok --steps 2 --log-every 1 >"$OUT/diag.log" 2>&1
  echo "diag exit $?"; grep -E "mok:|NCCL WARN|CUMEM|MokError" "$OUT/diag.log" | sort | uniq -c | head -12
  export NCCL_CUMEM_ENABLE=1
  CUDA_VISIBLE_DEVICES=0,1 timeout 150 torchrun --standalone --nproc_per_node=2 -m pytest -q -s -p no:cacheprovider \
    tests/python/test_moe_gpu.py >"$OUT/pyep2.log" 2>&1
  echo "pytest ep2 (cuMem on) exit $?"; grep -E "^MOK-RESULT|passed|failed|Error" "$OUT/pyep2.log" | head -30
  CUDA_VISIBLE_DEVICES=0,1 timeout 60 torchrun --standalone --nproc_per_node=2 \
    examples/train_tiny_moe_lm.py --backend mok --steps 50 --log-every 10 >"$OUT/lm.log" 2>&1
  echo "lm-mok (cuMem on) exit $?"; grep -E "loss" "$OUT/lm.log" | tail -7
  timeout ${BENCH_LIMIT:-150} torchrun --standalone --nproc_per_node=2 bench/harness.py \
    --tokens 4096 --routing uniform --out "$OUT/bench-ep2" >"$OUT/bench.log" 2>&1
  echo "harness exit $?"; grep -v "^row " "$OUT/bench.log" | grep -v W1130 | tail -20; grep "^row " "$OUT/bench.log" | cut -c1-400
elif [ "${STEP:-tests}" = tests ]; then
  timeout 60 "$BUILD/mok" run --breakdown --iters 20 --warmup 3 >"$OUT/run.log" 2>&1
  echo "mok run exit $?"
  MOK_TEST_TIMEOUT=150 timeout 330 tests/python/run_gpu_tests.sh >"$OUT/pytests.log" 2>&1
  echo "python tests exit $?"
  tail -45 "$OUT/pytests.log"
  cat "$OUT/run.log"
else
  timeout ${BENCH_LIMIT:-380} torchrun --standalone --nproc_per_node=${NGPU:-2} bench/harness.py \
    --tokens ${TOKENS:-4096} --out "$OUT/bench-ep${NGPU:-2}" >"$OUT/bench.log" 2>&1
  echo "harness exit $?"
  grep -v "^row " "$OUT/bench.log" | tail -40
fi

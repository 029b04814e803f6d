#!/usr/bin/env bash
# gpu_verify.sh — one call on a GPU machine that checks a tree end to end, as a user would meet it:
#   1. `make` (the Makefile picks torch's NCCL wheel itself) and the grouped GEMM tests;
#   2. the GPU suite at EP=1 for each seed in $SEEDS (default 5 seeds), each with its own verdict;
#   3. `pip install .` into a folder on the path of the machine's python (no network:
#      --no-build-isolation --no-deps), then, from a folder without the source's python/, the
#      installed package's GPU tests, examples/hf_swap.py and examples/torchtitan_moe.py with
#      --backend mok (each where its framework is installed), and the tiny language model;
#   4. a short table last. Logs under $OUT. NVLink multicast is off in every process.
#   env: SEEDS, STEPS (default "build suite install"; "python": tests/python/run_gpu_tests.sh
#   on the source tree), SUITE_FILTER (a test name filter). Wheels in build/wheels are installed
#   beside the package (frameworks the machine lacks).
set -u
OUT=${OUT:-/tmp/mok_out}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
STEPS=${STEPS:-build suite install}
ROOT=$PWD
ROWS=()
t_all=$(date +%s)
row() { ROWS+=("$(printf '%-22s %-8s %s' "$1" "$2" "$3")"); }
has() { case " $STEPS " in *" $1 "*) return 0 ;; esac; return 1; }

t0=$(date +%s)
if ! make -j16 build/libmok.so build/mok build/mok_gpu_tests build/gg_test >"$OUT/build.log" 2>&1; then
  tail -30 "$OUT/build.log"
  exit 1
fi
row build ok "$(( $(date +%s) - t0 )) s; $(cat build/libmok.nccl | tr '\n' ' ')"

if has build; then
  t0=$(date +%s)
  timeout 200 ./build/gg_test >"$OUT/gg.log" 2>&1
  rc=$?
  row gg_test "rc=$rc" "$(tail -1 "$OUT/gg.log"); $(( $(date +%s) - t0 )) s"
fi

if has suite; then  # the seeds' runs side by side (the suite is mostly the CPU reference's time)
  t0=$(date +%s)
  for seed in ${SEEDS:-11 12 13 14 15}; do
    CUDA_VISIBLE_DEVICES=0 MOK_TEST_SEED=$seed MOK_TEST_TIMEOUT=400 timeout 420 \
      tests/gpu/launch.sh build/mok_gpu_tests ${SUITE_FILTER:-} >"$OUT/gpu_$seed.log" 2>&1 &
  done
  wait
  for seed in ${SEEDS:-11 12 13 14 15}; do
    row "gpu suite seed $seed" "" "$(tail -1 "$OUT/gpu_$seed.log"); $(( $(date +%s) - t0 )) s for all"
    grep -E "^(FAIL|\[r0\] +CHECK)" "$OUT/gpu_$seed.log" | head -6
  done
fi

if has install; then
  t0=$(date +%s)
  rm -rf /tmp/mok_venv /tmp/mok_user /tmp/mok_site
  # into a folder on the path, with the interpreter that has torch (the machine's own
  # environment stays as it is); setup.py's make sees that interpreter's NCCL wheel
  PY=python3
  export PYTHONPATH=/tmp/mok_site
  python3 -m pip install --no-build-isolation --no-deps --target /tmp/mok_site "$ROOT" >"$OUT/install.log" 2>&1
  rc=$?
  # frameworks the machine lacks, as wheels beside the build (no network there)
  ls build/wheels/*.whl >/dev/null 2>&1 &&
    python3 -m pip install --no-deps --no-index --target /tmp/mok_site build/wheels/*.whl >>"$OUT/install.log" 2>&1
  tail -3 "$OUT/install.log"
  mkdir -p /tmp/mok_user && cp -r tests examples /tmp/mok_user/   # no python/: the installed mok
  where=$(cd /tmp/mok_user && $PY -W error::UserWarning -c \
    "import torch, mok, mok._capi; print(mok.__file__, mok._library.find_library())" 2>&1 | tail -1)
  row "pip install" "rc=$rc" "$(( $(date +%s) - t0 )) s; $where"
  cd /tmp/mok_user
  t0=$(date +%s)
  CUDA_VISIBLE_DEVICES=0 timeout 300 $PY -m torch.distributed.run --standalone --nproc_per_node=1 \
    -m pytest -q -s -p no:cacheprovider tests/python/test_moe_gpu.py >"$OUT/py_gpu.log" 2>&1
  rc=$?
  row "installed: gpu tests" "rc=$rc" "$(grep -E '[0-9]+ (passed|failed)' "$OUT/py_gpu.log" | tail -1); $(( $(date +%s) - t0 )) s"
  grep -E "^(FAILED|ERROR) " "$OUT/py_gpu.log" | head -5
  t0=$(date +%s)
  timeout 200 $PY -m pytest -q -p no:cacheprovider tests/python --ignore=tests/python/test_moe_gpu.py >"$OUT/py_cpu.log" 2>&1
  rc=$?
  row "installed: cpu pytest" "rc=$rc" "$(grep -E '[0-9]+ (passed|failed)' "$OUT/py_cpu.log" | tail -1); $(( $(date +%s) - t0 )) s"
  grep -E "^(FAILED|ERROR) " "$OUT/py_cpu.log" | head -5
  for ex in "hf_swap.py --backend mok --steps 10" "hf_swap.py --backend mok --style deepseek_v3 --steps 10" \
            "torchtitan_moe.py --backend mok"; do
    t0=$(date +%s)
    name=$(echo "$ex" | tr -c 'a-z0-9' _)
    CUDA_VISIBLE_DEVICES=0 timeout 120 $PY examples/$ex >"$OUT/ex_$name.log" 2>&1
    rc=$?
    row "ex $(echo "$ex" | cut -d" " -f1,5)" "rc=$rc" "$(tail -1 "$OUT/ex_$name.log" | cut -c1-90); $(( $(date +%s) - t0 )) s"
  done
  cd "$ROOT"
  unset PYTHONPATH
fi

if has python; then
  t0=$(date +%s)
  MOK_TEST_TIMEOUT=200 timeout 420 tests/python/run_gpu_tests.sh >"$OUT/py_suites.log" 2>&1
  rc=$?
  row "run_gpu_tests.sh" "rc=$rc" "$(( $(date +%s) - t0 )) s"
  sed -n '/==== summary/,$p' "$OUT/py_suites.log" | head -8
fi

echo
echo "==== gpu_verify ($(( $(date +%s) - t_all )) s)"
printf '%s\n' "${ROWS[@]}"

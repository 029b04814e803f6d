#!/usr/bin/env bash
# refs_session.sh — git refs of this repository measured against each other on one GPU, in two
# calls on one warm machine. Before the calls, here (no GPU needed):
#   for ref in $REFS; do mkdir -p build/ab/$ref && git archive $ref | tar -x -C build/ab/$ref; done
# and carry build/ab. Each tree is build/ab/<ref>. Candidates kept as patches in dev/candidates
# get their trees from dev/candidate_trees.sh instead (a NAMES word a+b stacks patch b on a).
#   PART=tests  every tree built in parallel; the grouped GEMM tests (GG=0: none) and the GPU
#               suite at EP=1 of each tree named in TEST_REF (default: the last of REFS), and the
#               PyTorch GPU tests of the first of them (PY=0: none).
#   PART=bench  `mok run` of TREES (dev/trees_ab.sh's words: name=build/ab/<ref>[:plan]) alternated
#               over CASES; the from-idle passes and the host's prelude (dev/host_overhead.py,
#               Qwen3-30B BF16) of each tree in HOST_REFS, process by process, twice; the row
#               kernels of each tree in PULL_REFS (dev/pull_bench.cu at Qwen3-30B's and DSv3's
#               EP=1 sizes), alternated, twice.
# Logs under $LOG; short tables on stdout.
set -u
LOG=${LOG:-/tmp/mok_log}
mkdir -p "$LOG"
REFS=${REFS:?REFS="ref ..."}
BUILD=build
. bench/device_env.sh
t0=$(date +%s)
if [ "${PART:-tests}" = tests ]; then
  test_refs=${TEST_REF:-${REFS##* }}
  n=$(echo $REFS | wc -w)
  for ref in $REFS; do
    targets="build/libmok.so build/mok"
    [[ " $test_refs " == *" $ref "* ]] && targets="$targets build/mok_gpu_tests build/gg_test"
    ( cd build/ab/$ref && make -j$(( 16 / n + 1 )) $targets > "$LOG/build_$ref.log" 2>&1 ) &
  done
  wait
  for ref in $REFS; do
    [ -x build/ab/$ref/build/mok ] || { echo "no build of $ref"; tail -20 "$LOG/build_$ref.log"; exit 1; }
  done
  echo "build $(( $(date +%s) - t0 )) s"
  top=$PWD
  for test_ref in $test_refs; do # GG=0: no grouped GEMM tests; the Python tests: the first only
    cd "$top/build/ab/$test_ref"
    if [ "${GG:-1}" = 1 ]; then
      timeout 200 ./build/gg_test > "$LOG/gg_$test_ref.log" 2>&1
      echo "$test_ref gg_test rc=$?: $(tail -1 "$LOG/gg_$test_ref.log") at $(( $(date +%s) - t0 )) s"
      grep -E "^FAIL|against single CTAs" "$LOG/gg_$test_ref.log" | head -16
    fi
    CUDA_VISIBLE_DEVICES=0 MOK_TEST_SEED=${SEED:-71} MOK_TEST_TIMEOUT=240 timeout 260 \
      tests/gpu/launch.sh build/mok_gpu_tests > "$LOG/suite_$test_ref.log" 2>&1
    echo "$test_ref gpu suite: $(tail -1 "$LOG/suite_$test_ref.log") at $(( $(date +%s) - t0 )) s"
    grep -E "^FAIL" "$LOG/suite_$test_ref.log" | head -8
    [ "$test_ref" = "${test_refs%% *}" ] && [ "${PY:-1}" = 1 ] || continue
    MOK_LIBRARY=$PWD/build/libmok.so PYTHONPATH=$PWD/python MOK_TEST_TIMEOUT=200 timeout 220 \
      bash tests/python/run_gpu_tests.sh > "$LOG/py.log" 2>&1
    echo "python gpu tests rc=$? at $(( $(date +%s) - t0 )) s"; tail -6 "$LOG/py.log"
  done
  exit 0
fi
# PART=bench
if [ -n "${TREES:-}" ]; then
  OUT=$LOG ROUNDS=${ROUNDS:-2} DEADLINE=${DEADLINE:-330} TARGETS="build/libmok.so build/mok" \
    CASES=${CASES:-"qwen3-30b:128:uniform deepseek-v3:256:zipf deepseek-v3:256:uniform"} \
    bash dev/trees_ab.sh 2>&1 | tail -20
fi
for ref in ${PULL_REFS:-}; do
  ( cd build/ab/$ref && nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -Iinclude -I. \
    -o build/pull_bench dev/pull_bench.cu kernels/move/move.cu ) > "$LOG/pull_build_$ref.log" 2>&1 &
done
wait
for round in 1 2; do
  for ref in ${PULL_REFS:-}; do
    for he in "2048 128" "7168 256"; do
      echo "== pull $ref round $round H E $he"
      timeout 60 build/ab/$ref/build/pull_bench $he 2>&1 | tail -12
    done
  done
done
RES=$LOG/host_ab.txt; : > "$RES"
for round in 1 2; do
  for ref in ${HOST_REFS:-}; do
    dir=$PWD/build/ab/$ref # its own script: it puts its tree's python first on the path
    MOK_LIBRARY=$dir/build/libmok.so PYTHONPATH=$dir/python timeout 100 \
      torchrun --standalone --nproc_per_node=1 $dir/dev/host_overhead.py --shape qwen3-30b --tokens 7168 \
      --bf16 --calls 100 > "$LOG/host_${ref}_$round.log" 2>&1
    echo "== $ref round $round" >> "$RES"; tail -14 "$LOG/host_${ref}_$round.log" >> "$RES"
  done
done
[ -n "${HOST_REFS:-}" ] && grep -E "^==|Python before|whole (forward|backward) call|GPU ms" "$RES"
echo "done at $(( $(date +%s) - t0 )) s"

#!/usr/bin/env bash
# ep2_targets.sh — the EP=2 measurements (the layer's targets at two GPUs), on a 2-GPU machine, with a build
# made beforehand ($BUILD: libmok.so, mok, mok_gpu_tests). One step per call, each within ~10 min:
#   STEP=harness  the layer harness at EP=2 (DeepSeek-V3 + shared expert, T 7168, uniform and Zipf,
#                 BF16 and FP8, eager and from a CUDA graph, PyTorch+NCCL in the same run)
#   STEP=ab       `mok run` at EP=2, FP8, alternating A/B pairs of plans ($AB_PLANS, default
#                 "auto wgrad_cluster_down=1,wgrad_cluster_gate_up=1": the weight gradient in
#                 cluster pairs against single CTAs)
#   STEP=suite    the GPU test suite at EP=2, then the Python GPU tests
# Logs go to $OUT; the step's table is printed last.
set -u
OUT=${OUT:-/tmp/mok_out}
BUILD=${BUILD:-build}
STEP=${STEP:-harness}
SEED=${SEED:-$(( $(date +%s) % 1000 ))}
mkdir -p "$OUT"
. "$(dirname "$0")/device_env.sh"
t0=$(date +%s)
case "$STEP" in
harness)
  timeout 540 torchrun --standalone --nproc_per_node=2 bench/harness.py --tokens 7168 \
    --shapes deepseek-v3 --routing uniform,zipf --iters 50 --warmup 5 --fp8 --graph \
    --seed "$SEED" --mok "$BUILD/mok" --out "$OUT/bench-ep2" >"$OUT/harness.log" 2>&1
  echo "harness exit $? after $(( $(date +%s) - t0 )) s, seed $SEED"
  grep -v "^row " "$OUT/harness.log" | tail -14
  ;;
ab)
  for round in 1 2; do
    i=0
    for p in ${AB_PLANS:-auto wgrad_cluster_down=1,wgrad_cluster_gate_up=1}; do
      i=$((i + 1))
      # mok run starts a process per visible GPU itself: EP=2 on this machine
      timeout 120 "$BUILD/mok" run --shape deepseek-v3 --tokens 7168 --iters 30 --warmup 3 \
        --seed 7 --dtype fp8 --build-in-forward 1 --plan "$p" >"$OUT/ab_${i}_$round.log" 2>&1
      echo "plan $p round $round exit $?: $(grep -E '^ *(build \+ forward|backward) ' \
        "$OUT/ab_${i}_$round.log" | tr -s ' ' | tr '\n' '|')"
    done
  done
  ;;
suite)
  MOK_TEST_TIMEOUT=300 timeout 330 tests/gpu/launch.sh "$BUILD/mok_gpu_tests" >"$OUT/suite.log" 2>&1
  echo "GPU suite exit $?: $(tail -1 "$OUT/suite.log")"
  MOK_TEST_TIMEOUT=150 timeout 200 tests/python/run_gpu_tests.sh >"$OUT/pytests.log" 2>&1
  echo "Python GPU tests exit $?: $(tail -1 "$OUT/pytests.log")"
  ;;
*)
  echo "ep2_targets.sh: STEP is harness, ab or suite" >&2
  exit 2
  ;;
esac

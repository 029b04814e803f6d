#!/usr/bin/env bash
# ep1_ab.sh — a change's checks and A/B on a one-GPU machine, at EP=1 with 128 experts (the routed
# work per GPU of DeepSeek-V3 at EP=2, no NVLink), one step per call, each within ~10 min:
#   STEP=ab     build this tree ($BUILD) and, with VARIANT_DEFS, a variant of it ($BUILD-variant:
#               the same sources with those nvcc defines); the GPU suite and gg_test ($GG_FILTER)
#               on the default build; `mok run` (FP8, passes chained) alternating the arms
#               ($ARMS: "build:flags ...", build main or variant); bench/flags_ab.py on the main
#               build ($FLAGS_AB: the harness's timing, eager and from a graph) and on the
#               variant's (its outputs' digest against the main build's)
#   STEP=wgrad  the FP8 weight gradient alone (gg_bench, gate+up and down of DSv3 EP=2), builds
#               of $GG_VARIANTS ("name=nvcc defines;..."; default: this tree, its tiles staged but
#               never stored, and every tile stored over one tile's rows so that the writes stay
#               in L2), each variant's gg_test ($GG_FILTER, default fp8_wgrad), then the builds
#               timed in turn for $ROUNDS rounds; then the timing probe (bench/probe_wgrad.sh),
#               and with PROBE_DEFS the probe of a variant built with those defines
# Logs go to $OUT; the step's table is printed last. Seen: STEP=ab ~8 min with flags_ab.py where a
# `mok run` takes ~15 s (~3 min of it flags_ab.py's first run on a fresh machine); on a machine
# where a `mok run` took ~50 s, over 7 min without flags_ab.py (FLAGS_AB=); STEP=wgrad ~1 min with
# three variants, ~2.5 min with four and a variant's probe.
set -u
OUT=${OUT:-/tmp/mok_out}
BUILD=${BUILD:-build}
STEP=${STEP:-ab}
ROUNDS=${ROUNDS:-2}
mkdir -p "$OUT"
. "$(dirname "$0")/device_env.sh"
NVCC=${NVCC:-nvcc}
t0=$(date +%s)
say() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
run_args="--shape deepseek-v3 --experts 128 --tokens 7168 --iters 30 --warmup 3 --seed 7 --dtype fp8 --build-in-forward 1"
case "$STEP" in
ab)
  make -j16 BUILD="$BUILD" all "$BUILD/gg_test" >"$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
  say "built $BUILD"
  if [ -n "${VARIANT_DEFS:-}" ]; then
    make -j16 BUILD="$BUILD-variant" NVCC="$NVCC $VARIANT_DEFS" "$BUILD-variant/libmok.so" \
      "$BUILD-variant/mok" >"$OUT/build-variant.log" 2>&1 || { tail -30 "$OUT/build-variant.log"; exit 1; }
    say "built $BUILD-variant ($VARIANT_DEFS)"
  fi
  suite="skipped"; gg="skipped"
  if [ "${SKIP_TESTS:-0}" != 1 ]; then
    MOK_TEST_TIMEOUT=240 timeout 260 tests/gpu/launch.sh "$BUILD/mok_gpu_tests" >"$OUT/suite.log" 2>&1
    suite="exit $?: $(tail -1 "$OUT/suite.log")"
    say "GPU suite $suite"
    timeout 120 "$BUILD/gg_test" ${GG_FILTER:-} >"$OUT/gg_test.log" 2>&1
    gg="exit $?: $(tail -1 "$OUT/gg_test.log")"
    say "gg_test $gg"
  fi
  for round in $(seq "$ROUNDS"); do
    for arm in ${ARMS:-main:0 variant:0}; do
      b=$BUILD; [ "${arm%%:*}" = variant ] && b="$BUILD-variant"
      f=${arm#*:}
      timeout 120 "$b/mok" run $run_args --gg-flags "$f" >"$OUT/ab_${arm/:/_}_$round.log" 2>&1
      echo "$arm round $round exit $?: $(grep -E '^ *(build \+ forward|backward) ' \
        "$OUT/ab_${arm/:/_}_$round.log" | tr -s ' ' | tr '\n' '|')" | tee -a "$OUT/ab.txt"
    done
  done
  if [ -n "${FLAGS_AB-0}" ]; then
    timeout 260 torchrun --standalone --nproc_per_node=1 bench/flags_ab.py --experts 128 \
      --flags "${FLAGS_AB-0}" --rounds "${ROUNDS_AB:-3}" >"$OUT/flags_ab.log" 2>&1
    say "flags_ab exit $?"
    if [ -n "${VARIANT_DEFS:-}" ]; then
      MOK_LIBRARY="$PWD/$BUILD-variant/libmok.so" timeout 120 torchrun --standalone \
        --nproc_per_node=1 bench/flags_ab.py --experts 128 --flags 0 --rounds 1 \
        >"$OUT/flags_ab_variant.log" 2>&1
      say "flags_ab (variant) exit $?"
    fi
  fi
  echo "== GPU suite $suite; gg_test $gg"
  echo "== mok run $run_args (build + forward | backward, ms, TFLOP/s)"
  cat "$OUT/ab.txt"
  [ -f "$OUT/flags_ab.log" ] && { echo "== flags_ab.py"; tail -12 "$OUT/flags_ab.log"; }
  [ -f "$OUT/flags_ab_variant.log" ] && { echo "== flags_ab.py, variant"; tail -3 "$OUT/flags_ab_variant.log"; }
  ;;
wgrad)
  IFS=';' read -ra vars <<<"${GG_VARIANTS:-default=;nostore=-DF8G_PROBE_NOSTORE=1;l2only=-DF8G_PROBE_NOSTORE=2}"
  for v in "${vars[@]}"; do  # each variant the Makefile's gg_bench in a folder of its own
    name=${v%%=*}
    make -j2 BUILD="$BUILD-gg-$name" NVCC="$NVCC ${v#*=}" "$BUILD-gg-$name/gg_bench" \
      "$BUILD-gg-$name/gg_test" >"$OUT/build_$name.log" 2>&1 &
  done
  ONLY_BUILD=1 BUILD="$BUILD" bench/probe_wgrad.sh >"$OUT/build_probe.log" 2>&1 &
  wait
  say "built"
  for v in "${vars[@]}"; do  # a variant's timing counts only where its results pass the tests
    name=${v%%=*}
    timeout 120 "$BUILD-gg-$name/gg_test" ${GG_FILTER:-fp8_wgrad} >"$OUT/gg_test_$name.log" 2>&1
    echo "$name gg_test ${GG_FILTER:-fp8_wgrad} exit $?: $(tail -1 "$OUT/gg_test_$name.log")" |
      tee -a "$OUT/gg_tests.txt"
  done
  for round in $(seq "$ROUNDS"); do
    for v in "${vars[@]}"; do
      name=${v%%=*}
      MOK_GG_BENCH_SHAPES=dsv3_ep2 timeout 100 "$BUILD-gg-$name/gg_bench" "$OUT/counts.txt" 20 \
        >"$OUT/gg_${name}_$round.log" 2>&1
      echo "$name round $round exit $?: $(grep -E 'fp8_wgrad(h|1) ' "$OUT/gg_${name}_$round.log" |
        tr -s ' ' | tr '\n' '|')" | tee -a "$OUT/wgrad.txt"
    done
  done
  BUILD="$BUILD" timeout 120 bench/probe_wgrad.sh >"$OUT/probe.txt" 2>&1
  say "probe exit $?"
  if [ -n "${PROBE_DEFS:-}" ]; then  # the probe of a variant too
    BUILD="$BUILD" DEFS="$PROBE_DEFS" TAG=_variant timeout 200 bench/probe_wgrad.sh \
      >"$OUT/probe_variant.txt" 2>&1
    say "probe ($PROBE_DEFS) exit $?"
  fi
  echo "== gg_bench dsv3_ep2, weight gradient rows, per build: ${GG_VARIANTS:-default, nostore (dW never stored), l2only (dW stored over one tile)}"
  cat "$OUT/gg_tests.txt" "$OUT/wgrad.txt"
  echo "== probe"
  tail -2 "$OUT/probe.txt"
  [ -f "$OUT/probe_variant.txt" ] && { echo "== probe, $PROBE_DEFS"; tail -2 "$OUT/probe_variant.txt"; }
  ;;
*)
  echo "ep1_ab.sh: STEP is ab or wgrad" >&2
  exit 2
  ;;
esac

#!/usr/bin/env bash
# run_gpu_tests.sh — the PyTorch layer's tests on a GPU machine: the CPU suite (needs torch, no
# GPU), tests/python/test_moe_gpu.py under torchrun at EP=1 (GPU 0) and, with two GPUs or more, at
# EP=2 (GPUs 0 and 1), then the example language model with each backend (on two GPUs, or one
# where the machine has one). Assumes `make` already built
# build/libmok.so. Prints every MOK-RESULT line and a summary table last; exits non-zero if any
# suite failed or timed out.
set -u
cd "$(dirname "$0")/../.."
ROOT=$PWD
export MOK_LIBRARY="${MOK_LIBRARY:-$ROOT/build/libmok.so}"
export PYTHONPATH="$ROOT/python${PYTHONPATH:+:$PYTHONPATH}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1
LIMIT="${MOK_TEST_TIMEOUT:-900}"   # seconds per suite
if [ ! -f "$MOK_LIBRARY" ]; then
  echo "no $MOK_LIBRARY: build it with make first (or set MOK_LIBRARY)"
  exit 2
fi
LOGS=$(mktemp -d)
NAMES=()
RCS=()
PYTEST=(-m pytest -q -s -p no:cacheprovider)

run() {  # name, command...
  local name=$1
  shift
  echo "=== $name: $*"
  timeout -k 30 "$LIMIT" "$@" 2>&1 | tee "$LOGS/$name.log"
  local rc=${PIPESTATUS[0]}
  NAMES+=("$name")
  RCS+=("$rc")
}

run cpu python3 "${PYTEST[@]}" tests/python/test_moe_cpu.py tests/python/test_hf.py
run ep1 env CUDA_VISIBLE_DEVICES=0 torchrun --standalone --nproc_per_node=1 "${PYTEST[@]}" \
  tests/python/test_moe_gpu.py
NGPU=$(nvidia-smi -L 2>/dev/null | wc -l)
if [ "$NGPU" -ge 2 ]; then
  run ep2 env CUDA_VISIBLE_DEVICES=0,1 torchrun --standalone --nproc_per_node=2 "${PYTEST[@]}" \
    tests/python/test_moe_gpu.py
  LM_GPUS=0,1 LM_N=2
else
  echo "=== ep2: skipped (one GPU)"
  LM_GPUS=0 LM_N=1
fi
for backend in mok torch; do   # the example itself, as a user runs it
  run "lm-$backend" env CUDA_VISIBLE_DEVICES=$LM_GPUS torchrun --standalone --nproc_per_node=$LM_N \
    examples/train_tiny_moe_lm.py --backend "$backend" --steps 50 --log-every 10
done

echo
echo "==== results (worst relative error per check; tiny_lm: loss curves)"
for name in "${NAMES[@]}"; do
  grep -hE "^MOK-RESULT|^(FAILED|ERROR) " "$LOGS/$name.log" | sed "s/^MOK-RESULT /$name  /; s/^FAILED /$name  FAILED /; s/^ERROR /$name  ERROR /"
done
echo
echo "==== summary"
printf "%-8s %-8s %s\n" suite status "pytest (one line per rank) / example's final loss"
fail=0
for i in "${!NAMES[@]}"; do
  rc=${RCS[$i]}
  case $rc in
    0) status=ok ;;
    124 | 137) status=TIMEOUT ;;
    *) status="rc=$rc" ;;
  esac
  [ "$rc" -ne 0 ] && fail=1
  lines=$(grep -hE "^(=+ )?[0-9]+ (passed|failed|skipped|error)|^(=+ )?no tests ran" "$LOGS/${NAMES[$i]}.log" |
    sed 's/=//g; s/^ *//; s/ *$//' | paste -sd ';' -)
  [ -z "$lines" ] && lines=$(grep -h "^final loss" "$LOGS/${NAMES[$i]}.log" | tail -n 1)
  printf "%-8s %-8s %s\n" "${NAMES[$i]}" "$status" "${lines:-(no summary line)}"
done
echo "logs: $LOGS"
exit $fail

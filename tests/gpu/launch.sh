#!/usr/bin/env bash
# launch.sh — runs a GPU test binary as one process per visible GPU (ranks 0..N-1 of one group),
# with NVLink multicast disabled everywhere. Rank 0 writes the group's unique id to a file in a
# fresh temporary directory; the others read it. Each rank logs to its own file; the logs are
# printed with a rank prefix, then a combined verdict per test (a test passes only if it passed on
# every rank), and last the line 'N passed, N failed'.
#   usage: tests/gpu/launch.sh BINARY [TEST_NAME_FILTER]
#   env:   MOK_NRANKS (default: the visible GPUs), MOK_TEST_SEED (default: fresh),
#          MOK_TEST_TIMEOUT seconds per rank (default 1200)
set -u
bin=${1:?usage: launch.sh BINARY [FILTER]}
shift

export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

if [ -n "${MOK_NRANKS:-}" ]; then
  n=$MOK_NRANKS
elif [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then
  n=$(echo "$CUDA_VISIBLE_DEVICES" | tr ',' '\n' | grep -c .)
else
  n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
fi
if [ "${n:-0}" -lt 1 ]; then
  echo "launch.sh: no GPU visible"
  echo "0 passed, 1 failed"
  exit 1
fi

dir=$(mktemp -d "${TMPDIR:-/tmp}/mok_gpu_test.XXXXXX")
trap 'rm -rf "$dir"' EXIT
export MOK_TEST_SEED=${MOK_TEST_SEED:-$(( (RANDOM << 30) ^ (RANDOM << 15) ^ RANDOM ^ $(date +%s) ))}
echo "launch.sh: $n rank(s), seed $MOK_TEST_SEED"

pids=()
for ((r = 0; r < n; ++r)); do
  MOK_RANK=$r MOK_LOCAL_RANK=$r MOK_NRANKS=$n MOK_ID_FILE="$dir/id" \
    timeout "${MOK_TEST_TIMEOUT:-1200}" "$bin" "$@" >"$dir/rank$r.log" 2>&1 &
  pids[r]=$!
done
codes=()
for ((r = 0; r < n; ++r)); do
  wait "${pids[r]}"
  codes[r]=$?
done

for ((r = 0; r < n; ++r)); do
  sed "s/^/[r$r] /" "$dir/rank$r.log"
done

# Combined verdict: every test named in any log, in rank 0's order first.
names=$(for ((r = 0; r < n; ++r)); do awk '$1 == "PASS" || $1 == "FAIL" {print $2}' "$dir/rank$r.log"; done |
        awk '!seen[$0]++')
passed=0
failed=0
echo "---- combined over $n rank(s) ----"
for name in $names; do
  ok=1
  for ((r = 0; r < n; ++r)); do
    grep -q "^PASS $name " "$dir/rank$r.log" || ok=0
  done
  if [ $ok = 1 ]; then
    passed=$((passed + 1))
    echo "PASS $name"
  else
    failed=$((failed + 1))
    echo "FAIL $name"
  fi
done
for ((r = 0; r < n; ++r)); do
  if ! grep -q '^[0-9]* passed, [0-9]* failed$' "$dir/rank$r.log"; then
    failed=$((failed + 1))
    echo "FAIL rank $r did not finish (exit code ${codes[r]})"
  fi
done
echo "$passed passed, $failed failed"
[ $failed = 0 ] && [ $passed -gt 0 ]

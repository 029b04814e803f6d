#!/usr/bin/env bash
# fused_sweep.sh — `mok run` over the fused path's plan fields (forward comm CTAs x minibatch rows) on
# every visible GPU, with the default and the grouped path measured in the same call; prints one
# table.
#   env: MOK (the binary, default build/mok), TOKENS (default 4096), SHAPE (default deepseek-v3),
#        COMM (default "2 4 8 16"), MB (default "128 256"), ITERS (default 10), ROUTING (uniform),
#        EXTRA (more `mok run` options for every row, e.g. "--plan routed_cluster=1")
set -u
MOK=${MOK:-build/mok}
args="--shape ${SHAPE:-deepseek-v3} --tokens ${TOKENS:-4096} --routing ${ROUTING:-uniform} --iters ${ITERS:-10} --warmup 2 ${EXTRA:-}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
row() { # label, then mok run options
  local label=$1
  shift
  local out
  out=$(timeout 120 "$MOK" run $args "$@" 2>&1)
  local f b c
  f=$(echo "$out" | awk '$1 == "forward" && NF == 3 {print $2, $3}')
  b=$(echo "$out" | awk '$1 == "backward" && NF == 3 {print $2, $3}')
  c=$(echo "$out" | grep -o "PASS\|FAIL" | head -1)
  printf "%-28s %-16s %-16s %s\n" "$label" "${f:-?}" "${b:-?}" "${c:-error}"
}
printf "%-28s %-16s %-16s %s\n" "path / knobs" "fwd ms TF/s" "bwd ms TF/s" "check"
row "default (auto)"
row "grouped (separate kernels)" --path grouped
for mb in ${MB:-128 256}; do
  for c in ${COMM:-2 4 8 16}; do
    row "fused comm $c mb $mb" --plan "path=fused,fwd_comm=$c,minibatch=$mb"
  done
done

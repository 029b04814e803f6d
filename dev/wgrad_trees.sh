#!/usr/bin/env bash
# wgrad_trees.sh — the BF16 weight gradient of several source trees alone, interleaved in one
# process (dev/wgrad_ab.py: every tree's dW bitwise the first's, then the timings). TREES: words
# name=dir[@cluster], each dir a source copy (e.g. `git archive <ref> | tar -x -C build/ab/<ref>`),
# @cluster the launch's cluster size for that entry. Table last.
set -u
OUT=${OUT:-/tmp/mok_out}
mkdir -p "$OUT"
GG="nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -Xcompiler -fPIC -Iinclude -I. -shared"
args=()
declare -A built
for w in ${TREES:?TREES=name=dir[@cluster] ...}; do
  name=${w%%=*}; spec=${w#*=}; dir=${spec%@*}; cl=""; [ "$spec" != "$dir" ] && cl="@${spec#*@}"
  args+=("$name=$dir/build/wg.so$cl")
  [ -n "${built[$dir]:-}" ] && continue # one build per tree
  built[$dir]=1
  ( cd "$dir" || exit 1; mkdir -p build && $GG -o build/wg.so kernels/gemm/bf16_wgrad.cu \
      kernels/gemm/tmap.cu kernels/common/launch_error.cu ) > "$OUT/build_$name.log" 2>&1 &
done
wait
python3 dev/wgrad_ab.py "${args[@]}" > "$OUT/wgrad_trees.txt" 2>&1
tail -14 "$OUT/wgrad_trees.txt"

#!/usr/bin/env bash
# zipf_wgrad.sh — why DeepSeek-V3's BF16 weight gradient at EP=1 loses more of its uniform time
# under the harness's Zipf routing in the layer (bench/profile_layer.py) than alone (docs/PERF.md,
# "Open gaps", BF16 under Zipf routing): the kernel alone in pairs on the harness's uniform and
# Zipf counts (dev/wgrad_ab.py, the gate's and the down projection's shapes), then the layer's
# backward by kernel under both routings with the shared expert beside the routed experts (the
# plan's default) and in line (`--plan shared_bwd=in_line`). With CAND (a source tree, e.g.
# build/ab/wgrad_interleave from dev/candidate_trees.sh; carry build/ab), that tree's weight
# gradient beside this tree's in the same process (outputs bitwise first) and its layer's
# backward by kernel under both routings. One call on any card that holds DSv3's 256 experts at
# EP=1 (no baseline runs here). Tables last.
set -u
OUT=${OUT:-/tmp/mok_out}
CAND=${CAND:-}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
WG="nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -Xcompiler -fPIC -Iinclude -I. -shared
  -o build/wg.so kernels/gemm/bf16_wgrad.cu kernels/gemm/tmap.cu kernels/common/launch_error.cu"
( make -j16 build/libmok.so && $WG ) > "$OUT/build.log" 2>&1 &
[ -n "$CAND" ] && ( cd "$CAND" && make -j16 build/libmok.so && $WG ) > "$OUT/build_cand.log" 2>&1 &
wait
[ -f build/wg.so ] || { tail -20 "$OUT/build.log"; exit 1; }
libs="main=build/wg.so@2"
if [ -n "$CAND" ]; then
  [ -f "$CAND/build/wg.so" ] || { tail -20 "$OUT/build_cand.log"; exit 1; }
  libs="$libs cand=$CAND/build/wg.so@2"
fi
SHAPES=dsv3_ep1_gate_hu,dsv3_ep1_gate_hzipf,dsv3_ep1_down \
  timeout 240 python3 dev/wgrad_ab.py $libs > "$OUT/wgrad.txt" 2>&1
export PYTHONPATH=$PWD/python
profile() { # tree routing plan
  MOK_LIBRARY=$1/build/libmok.so timeout 90 torchrun --standalone --nproc_per_node=1 \
    bench/profile_layer.py --shape deepseek-v3 --tokens 7168 --routing $2 --backward-only \
    --steps 3 ${3:+--plan $3} 2>&1 | grep -E "wgrad|dgrad|weight_rows|swiglu|sum of kernel"
}
for r in uniform zipf; do
  for plan in "" shared_bwd=in_line; do
    echo "== main $r ${plan:-default plan}"
    profile $PWD $r "$plan"
  done
  if [ -n "$CAND" ]; then
    echo "== cand $r default plan"
    profile $(cd "$CAND" && pwd) $r ""
  fi
done | tee "$OUT/profiles.txt"
tail -12 "$OUT/wgrad.txt"

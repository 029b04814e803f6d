#!/bin/bash
# probe_wgrad.sh — the FP8 weight gradient's timing probe (F8G_PROBE_TIMES in
# kernels/grouped_gemm_fp8_wgrad.cu): builds a probe gg_bench and prints, for the layer's default
# weight-gradient row (fp8_wgradh) of one shape, when CTA 0's warpgroups and producer reached each
# step of their first tiles (cycles), then per-tile phase means. Never a result: the probe's
# stores perturb the kernel.
#   usage: [BUILD=dir] [SHAPE=dsv3_ep2_gateup] [REBUILD=1] [DEFS=...] [TAG=name] bench/probe_wgrad.sh
# The probe binary is the Makefile's gg_bench built with -DF8G_PROBE_TIMES=1 in a folder of its
# own ($BUILD-probe$TAG; rebuilt when its sources change, REBUILD=1 always). DEFS adds nvcc
# defines to it, e.g. DEFS=-DF8G_PROBE_NOSTORE=1 TAG=_nostore: the tiles never stored.
# ONLY_BUILD=1 builds it and stops (to build variants beside another run).
set -eu
B=${BUILD:-build}
SHAPE=${SHAPE:-dsv3_ep2_gateup}
NVCC=${NVCC:-nvcc}
TAG=${TAG:-}
bin="$B-probe$TAG/gg_bench"
mkdir -p "$B"
[ "${REBUILD:-0}" = 1 ] && rm -f "$bin"
make BUILD="$B-probe$TAG" NVCC="$NVCC -DF8G_PROBE_TIMES=1 ${DEFS:-}" "$bin" >&2
[ "${ONLY_BUILD:-0}" = 1 ] && exit 0
MOK_GG_BENCH_SHAPES=$SHAPE "$bin" "$B/probe_counts$TAG.txt" 20 | tee "$B/probe$TAG.log" |
  grep -E "fp8_wgradh|^probe"
python3 - "$B/probe$TAG.log" <<'PY'
import sys
rows = {}
for line in open(sys.argv[1]):
    if line.startswith("probe tile"):
        f = line.split()
        rows.setdefault(f[3], []).append([int(x) for x in f[4:]])
wg0 = rows.get("wg0", [])
def mean(xs):
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else float("nan")
# per tile of warpgroup 0: start -> first issue, main loop (first issue -> scaled), epilogue
# (scaled -> stores issued), and the gap to the next tile's start
first = [r[3] - r[0] for r in wg0 if r[0] >= 0 and r[3] >= 0]
loop = [r[13] - r[3] for r in wg0 if r[13] >= 0 and r[3] >= 0]
epi = [r[14] - r[13] for r in wg0 if r[14] >= 0 and r[13] >= 0]
drain = [r[15] - r[13] for r in wg0 if r[15] >= 0 and r[13] >= 0]
tile = [b[0] - a[0] for a, b in zip(wg0, wg0[1:]) if a[0] >= 0 and b[0] >= 0]
print("wg0 cycles per tile: %.0f; start->first issue %.0f, first issue->scaled %.0f, "
      "scaled->stores issued %.0f (of which waiting for the previous tile's stores to leave "
      "the staging %.0f)" % (mean(tile), mean(first), mean(loop), mean(epi), mean(drain)))
PY

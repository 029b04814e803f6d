#!/usr/bin/env bash
# wgrad_probes.sh — where the BF16 weight gradient's time goes: copies of this tree's
# kernels/gemm/bf16_wgrad.cu with one part taken out or done otherwise, timed against the kernel as
# it is in one process (dev/wgrad_trees.sh, which builds each into a library and checks every
# output bitwise against the first's). Probes:
#   nostore  the tiles staged in shared memory, never stored by TMA (outputs wrong: NO);
#   nomma    no tensor work (the loads, waits, staging and stores as before; outputs wrong: NO);
# (Two more were measured once and taken out, docs/PERF.md "Tried and not kept": the bf16 tiles
# stored straight from the accumulators, 1.7-2.3x slower; the tiles neither staged nor stored,
# whose value test changed the code around the wgmmas.)
# Run from the tree's root; copies under build/probes. PROBES picks some (default: all). Table last.
set -eu
root=build/probes
f=kernels/gemm/bf16_wgrad.cu
PROBES=${PROBES:-nostore nomma}
rm -rf "$root"
trees="base=$root/base"
for v in base $PROBES; do
  mkdir -p "$root/$v"
  tar -cf - --exclude=./build --exclude=./.git --exclude=./.venv . | tar -xf - -C "$root/$v"
  [ $v = base ] || trees="$trees $v=$root/$v"
done
python3 - "$root" "$f" $PROBES <<'EOF'
import re, sys
root, f, probes = sys.argv[1], sys.argv[2], sys.argv[3:]

def edit(v, old, new, count=1):
    p = f"{root}/{v}/{f}"
    s = open(p).read()
    if isinstance(old, re.Pattern):
        s, n = old.subn(new, s)
    else:
        n = s.count(old)
        s = s.replace(old, new)
    if n < count:
        sys.exit(f"{v}: the pattern is gone from {f}: {old}")
    open(p, "w").write(s)

for v in probes:
    if v == "nostore":
        edit(v, "pmap = r0 < p.wn ? &tm_dw : NULL;", "pmap = NULL;")
    elif v == "nomma":
        call = re.compile(r"wgmma_m64n256k16_bf16<1, 1>\(acc, (wgmma_desc_add\(da, kk \* 2048\)),"
                          r"\s*(wgmma_desc_add\(db, kk \* 2048\)), 1\);")
        edit(v, call, r'asm volatile("" ::"l"(\1), "l"(\2));')
    else:
        sys.exit("unknown probe " + v)
EOF
TREES="$trees" bash dev/wgrad_trees.sh

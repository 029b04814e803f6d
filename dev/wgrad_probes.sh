#!/usr/bin/env bash
# wgrad_probes.sh — where the BF16 weight gradient's time goes: copies of this tree's
# kernels/gemm/bf16_wgrad.cu with one part taken out, timed against the kernel as it is in one
# process (dev/wgrad_trees.sh, which builds each into a library; the probes' outputs are wrong by
# design, so their "bitwise" column reads NO). Probes:
#   nostore  the tiles staged in shared memory, never stored by TMA;
#   nomma    no tensor work (the loads, waits, staging and stores as before).
# (A probe that leaves the staging out too measures nothing: ptxas drops the products whose
# results go unused.) Run from the tree's root; copies under build/probes. Table last.
set -eu
root=build/probes
f=kernels/gemm/bf16_wgrad.cu
rm -rf "$root"
for v in base nostore nomma; do
  mkdir -p "$root/$v"
  tar -cf - --exclude=./build --exclude=./.git --exclude=./.venv . | tar -xf - -C "$root/$v"
done
sed -i 's/pmap = r0 < p.wn ? &tm_dw : NULL;/pmap = NULL;/' "$root/nostore/$f"
grep -q "pmap = NULL;" "$root/nostore/$f" || { echo "nostore: the pattern is gone from $f"; exit 1; }
python3 - "$root/nomma/$f" <<'EOF'
import re, sys
p = sys.argv[1]
s = open(p).read()
call = re.compile(r"wgmma_m64n256k16_bf16<1, 1>\(acc, (wgmma_desc_add\(da, kk \* 2048\)),\s*"
                  r"(wgmma_desc_add\(db, kk \* 2048\)), 1\);")
s, n = call.subn(r'asm volatile("" ::"l"(\1), "l"(\2));', s)
if n == 0:
    sys.exit("nomma: no product found in " + p)
open(p, "w").write(s)
EOF
TREES="base=$root/base nostore=$root/nostore nomma=$root/nomma" bash dev/wgrad_trees.sh

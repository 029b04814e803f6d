#!/usr/bin/env bash
# wgrad_probes.sh — where the BF16 weight gradient's time goes: copies of this tree's
# kernels/gemm/bf16_wgrad.cu with one part taken out or done otherwise, timed against the kernel as
# it is in one process (dev/wgrad_trees.sh, which builds each into a library and checks every
# output bitwise against the first's). Probes:
#   nostore  the tiles staged in shared memory, never stored by TMA (outputs wrong: NO);
#   nomma    no tensor work (the loads, waits, staging and stores as before; outputs wrong: NO);
#   nostage  bf16 tiles neither staged nor stored, the products kept alive by a test on their
#            values that never passes (outputs wrong: NO); leaving the staging out without it
#            measures nothing, since ptxas drops products whose results go unused;
#   direct   bf16 tiles stored straight from the accumulators (bf16x2 stores, as the fp32 path
#            stores), no staging, no TMA store (outputs bitwise the kernel's: yes).
# Run from the tree's root; copies under build/probes. PROBES picks some (default: all). Table last.
set -eu
root=build/probes
f=kernels/gemm/bf16_wgrad.cu
PROBES=${PROBES:-nostore nomma nostage direct}
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

pack = ("          for (int j = 0; j < 64; ++j) pk[j] = pack_bf16x2(acc[2 * j], acc[2 * j + 1]);\n"
        "          pending = true;\n")
for v in probes:
    if v == "nostore":
        edit(v, "pmap = r0 < p.wn ? &tm_dw : NULL;", "pmap = NULL;")
    elif v == "nomma":
        call = re.compile(r"wgmma_m64n256k16_bf16<1, 1>\(acc, (wgmma_desc_add\(da, kk \* 2048\)),"
                          r"\s*(wgmma_desc_add\(db, kk \* 2048\)), 1\);")
        edit(v, call, r'asm volatile("" ::"l"(\1), "l"(\2));')
    elif v == "nostage":
        edit(v, pack, pack.replace("pending = true;", "pending = acc[0] == 1.0e38f && acc[1] == -1.0e38f;"))
    elif v == "direct":
        edit(v, "#pragma unroll\n" + pack, """          {
            const int rb = r0 + warp * 16 + (lane >> 2);
            uint32_t *out = (uint32_t *)p.dw;
#pragma unroll
            for (int n8 = 0; n8 < 32; ++n8) {
              const int col = t.n_tile * GW_BN + n8 * 8 + (lane & 3) * 2;
#pragma unroll
              for (int h = 0; h < 2; ++h) {
                const int row = rb + 8 * h;
                if (row < p.wn && col < p.wk)
                  out[(((size_t)t.expert * p.wn + row) * p.wk + col) >> 1] =
                      pack_bf16x2(acc[n8 * 4 + 2 * h], acc[n8 * 4 + 2 * h + 1]);
              }
            }
          }
          pending = false;
""")
    else:
        sys.exit("unknown probe " + v)
EOF
TREES="$trees" bash dev/wgrad_trees.sh

"""ab_table.py — the table of an alternated `mok run` A/B (dev/final_check.sh, dev/tree_ab.sh):
argv[1] holds lines "round case variant fwd_ms bwd_ms check"; prints per (case, variant) the
median forward and backward over the rounds and every round's check."""
import collections
import statistics
import sys

d = collections.defaultdict(list)
for line in open(sys.argv[1]):
    p = line.split()
    try:
        d[(p[1], p[2])].append((float(p[3]), float(p[4]), p[5] if len(p) > 5 else "?"))
    except (ValueError, IndexError):
        pass
print(f"{'case':28s} {'variant':24s} {'fwd ms':>8s} {'bwd ms':>8s} check")
for (case, v), xs in sorted(d.items()):
    print(f"{case:28s} {v:24s} {statistics.median(x[0] for x in xs):8.3f} "
          f"{statistics.median(x[1] for x in xs):8.3f} {','.join(x[2] for x in xs)}")

"""table_md.py — a harness JSON file (bench/harness.py --out X writes X.json) as a Markdown table:
one row per case with mok's and the baseline's TFLOP/s per GPU, forward and backward, and the speed
ratio (baseline time / mok time; above 1 mok is faster).

    python3 bench/table_md.py docs/results/layer-ep2.json [more.json ...]"""
import json
import sys


def table(path):
    with open(path) as f:
        run = json.load(f)
    rows = run["rows"]
    out = [f"EP={run['ep']}, seed {run['seed']} ({run.get('note', '')}); TFLOP/s per GPU, "
           "slowest rank's median of 50 iterations", "",
           "| shape | T | routing | mok fwd | base fwd | fwd ratio | mok bwd | base bwd | bwd ratio | "
           "worst rel err |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['shape']} | {r['tokens']} | {r['routing']} | {r['mok_fwd_tflops']:.0f} | "
                   f"{r['base_fwd_tflops']:.0f} | {r['base_fwd_ms'] / r['mok_fwd_ms']:.2f} | "
                   f"{r['mok_bwd_tflops']:.0f} | {r['base_bwd_tflops']:.0f} | "
                   f"{r['base_bwd_ms'] / r['mok_bwd_ms']:.2f} | {max(r['check'].values()):.1e} |")
    return "\n".join(out)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    print("\n\n".join(table(p) for p in sys.argv[1:]))

"""table_md.py — a harness JSON file (bench/harness.py --out X writes X.json) as a Markdown table:
one row per case with mok's and the baseline's TFLOP/s per GPU, forward and backward, and the speed
ratio (baseline time / mok time; above 1 mok is faster); with --fp8 rows also mok's FP8 passes
and their ratio to PyTorch's FP8 path.

    python3 bench/table_md.py docs/results/layer-ep2.json [more.json ...]"""
import json
import sys


def table(path):
    with open(path) as f:
        run = json.load(f)
    rows = run["rows"]
    fp8 = any("fp8_fwd_ms" in r for r in rows)
    head = ("| shape | T | routing | mok fwd | base fwd | fwd ratio | mok bwd | base bwd | bwd ratio | "
            "worst rel err |")
    if fp8:  # mok FP8 (BF16 FLOP count), and PyTorch's FP8 path's time over mok FP8's
        head += " FP8 fwd | x torch FP8 | FP8 bwd | x torch FP8 |"
    out = [f"EP={run['ep']}, seed {run['seed']} ({run.get('note', '')}); TFLOP/s per GPU, "
           "slowest rank's median of the timed iterations; ratio = baseline time / mok time", "",
           head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        err = max(v for k, v in r["check"].items() if not k.startswith(("fp8", "torch_fp8")))
        line = (f"| {r['shape']} | {r['tokens']} | {r['routing']} | {r['mok_fwd_tflops']:.0f} | "
                f"{r['base_fwd_tflops']:.0f} | {r['base_fwd_ms'] / r['mok_fwd_ms']:.2f} | "
                f"{r['mok_bwd_tflops']:.0f} | {r['base_bwd_tflops']:.0f} | "
                f"{r['base_bwd_ms'] / r['mok_bwd_ms']:.2f} | {err:.1e} |")
        if fp8:
            cells = []
            for p in ("fwd", "bwd"):
                if f"fp8_{p}_ms" not in r:
                    cells += ["", ""]
                    continue
                cells.append(f"{r[f'fp8_{p}_tflops']:.0f}")
                t = r.get(f"base_fp8_{p}_ms")
                cells.append(f"{t / r[f'fp8_{p}_ms']:.2f}" if t else "n/a")
            line += " " + " | ".join(cells) + " |"
        out.append(line)
    return "\n".join(out)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    print("\n\n".join(table(p) for p in sys.argv[1:]))

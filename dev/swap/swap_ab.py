"""swap_ab.py — the swapped gate+up (dev/swap/swap_gate_up.cu) against the library's BF16 gate+up
(kernels/gemm/bf16.cu), interleaved in one process. argv: lib=PATH (the library kernel, built as
dev/gg_ab.py's docstring says) swap=PATH (built as swap_gate_up.cu's header says).
On every shape: act and the kept pre-activations of the real rows compared with the library's
(bitwise equal, or the largest difference printed) and with an fp32 product of a few experts;
then rounds x (library, swap in single CTAs, swap in cluster pairs) x iterations, the median per
round, the median of rounds. Prints a table.
"""
import ctypes
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from grouped_gemm_baseline import median_ms  # noqa: E402
import gg_ab  # noqa: E402

# gg_ab.py's shapes after two small ones: experts at 0, 1, 31, 33, 128, 129 and 300 rows, and
# Zipf(1.0) over 8 experts
SHAPES = [
    ("edge", 7, [0, 1, 31, 33, 128, 129, 300], 512, 256, 0),
    ("odd", 8, 77, 512, 256, 1),
] + [s for s in gg_ab.SHAPES if not s[0].endswith("_zipf")]


def main():
    args = dict(a.split("=", 1) for a in sys.argv[1:])
    vp, i, i64, f = ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_float
    lib = ctypes.CDLL(args["lib"])
    lib.mok_gg_bf16_gate_up_swiglu.argtypes = [vp, vp, vp, vp, vp, vp, vp, i, i64, i64, i64, i, f,
                                               vp, vp]
    lib.mok_gg_bf16_gate_up_swiglu.restype = i
    sw = ctypes.CDLL(args["swap"])
    sw.mok_dev_swap_gate_up.argtypes = [vp, vp, vp, vp, vp, vp, vp, i, i64, i64, i64, i, f, i, vp]
    sw.mok_dev_swap_gate_up.restype = i
    st = lambda: torch.cuda.current_stream().cuda_stream  # noqa: E731
    torch.manual_seed(5)
    rows_out = []
    for name, e, rows, H, I, zipf in SHAPES:
        cnt, off, m = gg_ab.layout(e, rows, zipf)
        d = dict(device="cuda", dtype=torch.bfloat16)
        x = torch.randn(m, H, **d)
        wg, wu = torch.randn(e, I, H, **d) * H ** -0.5, torch.randn(e, I, H, **d) * H ** -0.5
        offs = torch.tensor(off, dtype=torch.int32, device="cuda")
        cnts = torch.tensor(cnt, dtype=torch.int32, device="cuda")
        o, c = offs.data_ptr(), cnts.data_ptr()
        outs = {}
        for variant in ("lib", "swap1", "swap2"):
            act, pre = torch.full((m, I), float("nan"), **d), torch.full((m, 2 * I), float("nan"), **d)
            if variant == "lib":
                rc = lib.mok_gg_bf16_gate_up_swiglu(x.data_ptr(), wg.data_ptr(), wu.data_ptr(),
                                                    act.data_ptr(), pre.data_ptr(), o, c, e, m, I, H,
                                                    0, 0.0, None, st())
            else:
                rc = sw.mok_dev_swap_gate_up(x.data_ptr(), wg.data_ptr(), wu.data_ptr(),
                                             act.data_ptr(), pre.data_ptr(), o, c, e, m, I, H, 0,
                                             0.0, 2 if variant == "swap2" else 1, st())
            torch.cuda.synchronize()
            assert rc == 0, (variant, rc)
            outs[variant] = (act, pre)
        real = torch.zeros(m, dtype=torch.bool, device="cuda")
        for l, cn in enumerate(cnt):
            real[off[l]:off[l] + cn] = True
        checks = []
        for variant in ("swap1", "swap2"):
            for a, b in zip(outs["lib"], outs[variant]):
                a, b = a[real], b[real]
                if torch.equal(a.view(torch.int16), b.view(torch.int16)):
                    checks.append("bitwise")
                else:
                    checks.append(f"max|d| {(a.float() - b.float()).abs().max().item():.2e}"
                                  f" nan {int(b.isnan().sum())}")
        # fp32 product of the first, the largest and the last expert with rows
        err = 0.0
        for l in sorted({0, max(range(e), key=lambda j: cnt[j]), e - 1}):
            if cnt[l] == 0:
                continue
            xs = x[off[l]:off[l] + cnt[l]].float()
            g, u = xs @ wg[l].float().T, xs @ wu[l].float().T
            ref = torch.nn.functional.silu(g) * u
            got = outs["swap2"][0][off[l]:off[l] + cnt[l]].float()
            err = max(err, ((got - ref).abs().max() / ref.abs().max()).item())
        flop = 2.0 * sum(cnt) * 2 * I * H
        calls = {
            "lib": lambda: lib.mok_gg_bf16_gate_up_swiglu(
                x.data_ptr(), wg.data_ptr(), wu.data_ptr(), outs["lib"][0].data_ptr(),
                outs["lib"][1].data_ptr(), o, c, e, m, I, H, 0, 0.0, None, st()),
            "swap1": lambda: sw.mok_dev_swap_gate_up(
                x.data_ptr(), wg.data_ptr(), wu.data_ptr(), outs["swap1"][0].data_ptr(),
                outs["swap1"][1].data_ptr(), o, c, e, m, I, H, 0, 0.0, 1, st()),
            "swap2": lambda: sw.mok_dev_swap_gate_up(
                x.data_ptr(), wg.data_ptr(), wu.data_ptr(), outs["swap2"][0].data_ptr(),
                outs["swap2"][1].data_ptr(), o, c, e, m, I, H, 0, 0.0, 2, st()),
        }
        times = {k: [] for k in calls}
        for _ in range(3):
            for k, fn in calls.items():
                times[k].append(median_ms(fn, 10))
        row = [name, " / ".join(checks), f"{err:.1e}"]
        for k in calls:
            t = statistics.median(times[k])
            row.append(f"{t:.3f} ms {flop / t / 1e9:.0f}")
        rows_out.append(row)
        print("row", " | ".join(row), flush=True)
        del x, wg, wu, outs
        torch.cuda.empty_cache()
    print("| shape | swap1 act, pre / swap2 act, pre vs lib | rel err vs fp32 | lib | swap CL1 | swap CL2 |")
    for r in rows_out:
        print("| " + " | ".join(r) + " |")


if __name__ == "__main__":
    main()

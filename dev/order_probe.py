"""order_probe.py — does the order in which the BF16 grouped GEMMs visit their experts matter?
The same per-expert row counts (the harness's Zipf routing, dev/gg_ab.py harness_zipf_counts)
given to the experts in different orders: as drawn (hot experts at random indices), sorted by
rows descending, ascending, and "zipper" (hottest, coldest, second hottest, ...). Permuting the
counts relabels the experts (the weights are random), so every order is the same work. Each op
of a library of the GEMMs (argv[1]; built as dev/gg_ab.py says, with bf16_wgrad.cu) is timed interleaved over the orders: rounds x
orders x iterations, median of round medians. A uniform row count is the reference row.
SHAPES (env): comma list of dsv3_ep1, qwen3 (default both)."""
import ctypes
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
from gg_ab import harness_zipf_counts, layout  # noqa: E402
from grouped_gemm_baseline import median_ms  # noqa: E402

SHAPES = {"dsv3_ep1": (256, 224, 7168, 2048), "qwen3": (128, 448, 2048, 768)}


def orders(cnt):
    e = len(cnt)
    desc = sorted(range(e), key=lambda i: -cnt[i])
    zipper = []
    lo, hi = 0, e - 1
    while lo <= hi:
        zipper.append(desc[lo])
        if lo != hi:
            zipper.append(desc[hi])
        lo, hi = lo + 1, hi - 1
    return {"drawn": list(cnt), "desc": [cnt[i] for i in desc], "asc": [cnt[i] for i in desc[::-1]],
            "zipper": [cnt[i] for i in zipper]}


def main():
    lib = ctypes.CDLL(sys.argv[1])
    vp, i, i64, f = ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_float
    lib.mok_gg_bf16_fwd.argtypes = [vp, vp, vp, vp, vp, i, i64, i64, i64, vp, vp]
    lib.mok_gg_bf16_gate_up_swiglu.argtypes = [vp, vp, vp, vp, vp, vp, vp, i, i64, i64, i64, i, f,
                                               vp, vp]
    lib.mok_gg_bf16_dgrad.argtypes = [vp, vp, vp, vp, vp, i, i64, i64, i64, vp, vp]
    lib.mok_gg_bf16_dgrad_pair.argtypes = [vp, vp, vp, vp, vp, vp, i, i64, i64, i64, vp, vp]
    lib.mok_gg_bf16_wgrad.argtypes = [vp, vp, vp, i, i, vp, vp, i, i64, i64, i64, vp, vp]
    st = lambda: torch.cuda.current_stream().cuda_stream  # noqa: E731
    only = os.environ.get("SHAPES", "dsv3_ep1,qwen3").split(",")
    rows_out = []
    for name in only:
        e, rows, H, I = SHAPES[name]
        zc = harness_zipf_counts(e, rows)
        cases = {"uniform": [rows] * e, **orders(zc)}
        lay = {c: layout(e, v, 0) for c, v in cases.items()}
        m = max(v[2] for v in lay.values())
        d = dict(device="cuda", dtype=torch.bfloat16)
        x = torch.randn(m, H, **d)
        wg, wu = torch.randn(e, I, H, **d) * 0.02, torch.randn(e, I, H, **d) * 0.02
        wd = torch.randn(e, H, I, **d) * 0.02
        act, pre = torch.randn(m, I, **d), torch.empty(m, 2 * I, **d)
        y, dy = torch.empty(m, H, **d), torch.randn(m, H, **d)
        dact, dgu, dx = torch.empty(m, I, **d), torch.randn(m, 2 * I, **d), torch.empty(m, H, **d)
        dw = torch.empty(e, H, I, **d)
        dev = {c: (torch.tensor(off, dtype=torch.int32, device="cuda"),
                   torch.tensor(cnt, dtype=torch.int32, device="cuda"), mt)
               for c, (cnt, off, mt) in lay.items()}

        def ops(c):
            o, n, mt = dev[c][0].data_ptr(), dev[c][1].data_ptr(), dev[c][2]
            return {
                "gate_up": lambda: lib.mok_gg_bf16_gate_up_swiglu(
                    x.data_ptr(), wg.data_ptr(), wu.data_ptr(), act.data_ptr(), pre.data_ptr(), o, n,
                    e, mt, I, H, 0, 0.0, None, st()),
                "down": lambda: lib.mok_gg_bf16_fwd(act.data_ptr(), wd.data_ptr(), y.data_ptr(), o, n,
                                                    e, mt, H, I, None, st()),
                "dgrad_down": lambda: lib.mok_gg_bf16_dgrad(dy.data_ptr(), wd.data_ptr(),
                                                            dact.data_ptr(), o, n, e, mt, H, I,
                                                            None, st()),
                "dgrad_pair": lambda: lib.mok_gg_bf16_dgrad_pair(
                    dgu.data_ptr(), wg.data_ptr(), wu.data_ptr(), dx.data_ptr(), o, n, e, mt, I, H,
                    None, st()),
                "wgrad_down": lambda: lib.mok_gg_bf16_wgrad(dy.data_ptr(), act.data_ptr(),
                                                            dw.data_ptr(), 0, 0, o, n, e, mt, H, I,
                                                            None, st()),
            }
        for op in ops("uniform"):
            calls = {c: ops(c)[op] for c in cases}
            for c, fn in calls.items():
                assert fn() == 0, (name, op, c)
            torch.cuda.synchronize()
            times = {c: [] for c in cases}
            for _ in range(3):
                for c, fn in calls.items():
                    times[c].append(median_ms(fn, 10))
            rows_out.append([name, op] + [f"{statistics.median(times[c]):.3f}" for c in cases])
        hdr = list(cases)
        del x, wg, wu, wd, act, pre, y, dy, dact, dgu, dx, dw
        torch.cuda.empty_cache()
    print("| shape | op | " + " | ".join(hdr) + " |  (ms)")
    for r in rows_out:
        print("| " + " | ".join(r) + " |")


if __name__ == "__main__":
    main()

"""quant_timing.py — the FP8 module path's weight costs on one GPU: quantize_weight of the three
routed weights, transpose_weights_fp8, and a module forward (mok.functional.moe_fp8) against the
layer call on codes made once, interleaved, CUDA events, medians.

    python3 dev/quant_timing.py --shape deepseek-v3 --tokens 7168
"""
import argparse
import os
import statistics
import sys

import torch
import torch.distributed as dist

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, os.path.join(HERE, "..", "bench"))
import mok.functional as mf  # noqa: E402
from harness import add_shape_args, init_ranks, make_inputs, shape_with  # noqa: E402


def timed(fn, iters):
    out = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b))
    return statistics.median(out)


def main():
    ap = argparse.ArgumentParser()
    add_shape_args(ap)
    ap.add_argument("--iters", type=int, default=7)
    args = ap.parse_args()
    rank, ep = init_ranks()
    shape = shape_with(args.shape, args.experts)
    E = shape[2]
    x, topk, rw, w, dy = make_inputs(shape, args.tokens, "uniform", rank, ep, 5)
    wl = [w[n] for n in ("w_gate", "w_up", "w_down", "ws_gate", "ws_up", "ws_down")]
    group = mf.Group()
    q = [mf.quantize_weight(t) for t in wl[:3]]
    flat = [t for p in q for t in p]
    t8 = mf.transpose_weights_fp8(*flat)
    gb = sum(t.numel() * 2 for t in wl[:3]) / 1e9

    def quant():
        for t in wl[:3]:
            mf.quantize_weight(t)

    def transpose():
        mf.transpose_weights_fp8(*flat)

    def layer():
        mf.moe_forward_fp8(x, topk, rw, *flat, *wl[3:], group.id, E)

    wp = [p.detach().requires_grad_(True) for p in wl]
    xx = x.detach().requires_grad_(True)

    def module_fwd():
        with torch.no_grad():
            mf.moe_fp8(xx, topk, rw, *wp, group=group, num_experts=E)

    for f in (quant, transpose, layer, module_fwd):
        f()
    torch.cuda.synchronize()
    rows = []
    for rnd in range(2):
        for name, f in (("quantize x3", quant), ("transpose", transpose), ("layer fwd", layer),
                        ("module fwd", module_fwd)):
            rows.append((rnd, name, timed(f, args.iters)))
    if rank == 0:
        print(f"shape {args.shape} E {E} T {args.tokens}: routed bf16 weights {gb:.2f} GB")
        for rnd, name, ms in rows:
            print(f"  round {rnd} {name:12s} {ms:8.3f} ms")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

"""flags_ab.py — an A/B of grouped-GEMM tuning flags (kernels/grouped_gemm_tmap.h) on the FP8
layer, timed as bench/harness.py times it: each pass from an idle GPU after a barrier, eager and
replayed from a CUDA graph (captured under its own flags), the flag sets alternating in rounds in
one run, one process per GPU. For what the host's order of launches costs (eager against graph)
and for kernel variants that `mok run`'s chained passes would hide behind the host's lead.

    torchrun --standalone --nproc_per_node=1 bench/flags_ab.py --experts 128 --flags 0,65536

Prints the median over iterations of the slowest rank's milliseconds per flag set, pass, mode and
round, then the medians over rounds; last, whether every flag set gave the first one's bits
(y and the backward's dx, d_rw and dW), with a digest of them to compare builds by."""
import argparse
import os
import sys

import torch
import torch.distributed as dist

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, HERE)
import mok.functional as mf  # noqa: E402
from mok._capi import lib  # noqa: E402
from harness import (add_round_args, add_shape_args, fp8_weights, graphed,  # noqa: E402
                     init_ranks, make_inputs, print_rounds, shape_title, shape_with,
                     slowest_median, timed)


def digest(tensors):
    """A checksum of the tensors' bits (position-weighted sum of their 16-bit words), to compare
    two builds' outputs across runs."""
    s = 0
    for t in tensors:
        v = t.reshape(-1).view(torch.int16)
        for i in range(0, v.numel(), 1 << 26):
            c = v[i:i + (1 << 26)].to(torch.int64)
            pos = torch.arange(i, i + c.numel(), device=c.device, dtype=torch.int64) % 65521 + 1
            s = (s + int((c * pos).sum().item())) % (1 << 61)
    return s


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_shape_args(ap)
    ap.add_argument("--flags", default="0,65536", help="comma-separated tuning-flag sets")
    add_round_args(ap)
    args = ap.parse_args()
    flag_sets = [int(f) for f in args.flags.split(",")]
    rank, ep = init_ranks()
    shape = shape_with(args.shape, args.experts)
    E = shape[2]
    x, topk, rw, w, dy = make_inputs(shape, args.tokens, args.routing, rank, ep, args.seed)
    codes, shared = fp8_weights(w)
    t8 = mf.transpose_weights_fp8(*codes)
    del w
    group = mf.Group()

    def fwd():
        return mf.moe_forward_fp8(x, topk, rw, *codes, *shared, group.id, E)

    def bwd():
        return mf.moe_backward_fp8(dy, x, topk, rw, *codes, t8, *shared, group.id, E)

    graphs, bits = {}, {}
    for f in flag_sets:  # each set's graphs captured under it; its outputs kept for the bit check
        lib.gg_set_tuning(0, 0, 0, f)
        y = fwd().clone()
        bits[f] = [y] + [g.clone() for g in bwd()]
        graphs[f] = (graphed(fwd), graphed(bwd))
        fwd()  # the state the backward repeats on
    res = {}
    for _ in range(args.rounds):
        for f in flag_sets:
            lib.gg_set_tuning(0, 0, 0, f)
            gf, gb = graphs[f]
            fwd()
            for name, fn in (("forward eager", fwd), ("forward graph", gf), ("backward eager", bwd),
                             ("backward graph", gb)):
                ms = slowest_median(timed(fn, args.iters, args.warmup))
                res.setdefault((f"flags {f}", name), []).append(ms)
    lib.gg_set_tuning(0, 0, 0, 0)
    same = [all(torch.equal(a, b) for a, b in zip(bits[f], bits[flag_sets[0]]))
            for f in flag_sets]
    if rank == 0:
        print_rounds(shape_title(args, E, ep) + ", FP8", res, 40)
        for f, s in zip(flag_sets, same):
            print(f"flags {f}: outputs and gradients {'bitwise' if s else 'NOT bitwise'} those of "
                  f"flags {flag_sets[0]}; digest {digest(bits[f]):#x}")
    group.destroy()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

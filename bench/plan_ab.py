"""plan_ab.py — an A/B of plans (include/mok.h, mok_plan: pinned fields, the others mok's choice)
on the layer, BF16 or FP8, timed as bench/harness.py times it: each pass from an idle GPU after a
barrier, eager and replayed from a CUDA graph, the plans alternating in rounds in one run, one
process per GPU (a Group, so a workspace, per plan). For the choices the plan makes, measured
side by side on the caller's shape.

    torchrun --standalone --nproc_per_node=1 bench/plan_ab.py --experts 128 --fp8 \
        --plans "auto;shared_fwd=beside;fp8_mlp=two_launches"

Prints the resolved plan of each, the median over iterations of the slowest rank's milliseconds
per plan, pass, mode and round, then the medians over rounds; last, whether every plan gave the
first one's bits (y and the backward's dx, d_rw and dW), with a digest of them to compare builds
by."""
import argparse
import os
import sys

import torch
import torch.distributed as dist

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, HERE)
import mok.functional as mf  # noqa: E402
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
    ap.add_argument("--plans", default="auto;path=grouped",
                    help="';'-separated plans (\"key=value,...\"; auto: every field mok's)")
    ap.add_argument("--fp8", action="store_true", help="the FP8 (block-128) layer, not BF16")
    add_round_args(ap)
    args = ap.parse_args()
    plans = [p.strip() for p in args.plans.split(";") if p.strip()]
    rank, ep = init_ranks()
    shape = shape_with(args.shape, args.experts)
    E = shape[2]
    x, topk, rw, w, dy = make_inputs(shape, args.tokens, args.routing, rank, ep, args.seed)
    wl = [w[n] for n in ("w_gate", "w_up", "w_down", "ws_gate", "ws_up", "ws_down")]
    if args.fp8:
        codes, shared = fp8_weights(w)
        t8 = mf.transpose_weights_fp8(*codes)
        del w, wl

    def passes(group):
        if args.fp8:
            return (lambda: mf.moe_forward_fp8(x, topk, rw, *codes, *shared, group.id, E),
                    lambda: mf.moe_backward_fp8(dy, x, topk, rw, *codes, t8, *shared, group.id, E))
        return (lambda: mf.moe_forward(x, topk, rw, *wl, group.id, E, 0.0),
                lambda: mf.moe_backward(dy, x, topk, rw, *wl, group.id, E, 0.0))

    groups, graphs, bits = {}, {}, {}
    for p in plans:  # each plan's group, graphs and outputs (kept for the bit check)
        groups[p] = mf.Group(plan=None if p == "auto" else p)
        fwd, bwd = passes(groups[p])
        y = fwd().clone()
        bits[p] = [y] + [g.clone() for g in bwd() if g is not None]
        graphs[p] = (fwd, bwd, graphed(fwd), graphed(bwd))
        fwd()  # the state the backward repeats on
    res = {}
    for _ in range(args.rounds):
        for p in plans:
            fwd, bwd, gf, gb = graphs[p]
            fwd()
            for name, fn in (("forward eager", fwd), ("forward graph", gf), ("backward eager", bwd),
                             ("backward graph", gb)):
                ms = slowest_median(timed(fn, args.iters, args.warmup))
                res.setdefault((p, name), []).append(ms)
    same = [all(torch.equal(a, b) for a, b in zip(bits[p], bits[plans[0]])) for p in plans]
    if rank == 0:
        for p in plans:
            print(f"{p}: runs {'; '.join(dict.fromkeys(groups[p].plans()))}")
        print_rounds(shape_title(args, E, ep) + (", FP8" if args.fp8 else ", BF16"), res, 40)
        for p, s in zip(plans, same):
            print(f"{p}: outputs and gradients {'bitwise' if s else 'NOT bitwise'} those of "
                  f"{plans[0]}; digest {digest(bits[p]):#x}")
    for g in groups.values():
        g.destroy()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

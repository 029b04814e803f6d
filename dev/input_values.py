"""input_values.py — whether the values of the inputs change the FP8 layer's GPU time: the forward
and backward on normal inputs (what bench/harness.py makes) against uniform ones (what `mok run`
makes), alternating in one run, one process per GPU. Under the board's power limit the clock
follows the power the tensor cores draw, which depends on the bits they multiply. Three ways of
timing each: eager and from a CUDA graph, each pass from an idle GPU (as the harness times it),
and chained: forward, backward, forward, ... enqueued back to back with an event between the
passes and no idle GPU (as `mok run` times them).

    torchrun --standalone --nproc_per_node=1 dev/input_values.py --experts 128 --tokens 7168

Prints the median over iterations of the slowest rank's milliseconds per variant and round, then
the medians over rounds."""
import argparse
import os
import sys

import torch.distributed as dist

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, HERE)
import mok.functional as mf  # noqa: E402
from harness import (add_round_args, add_shape_args, chained, fp8_weights,  # noqa: E402
                     graphed, init_ranks, make_inputs, print_rounds, shape_title, shape_with,
                     slowest_median, timed)


def fp8_steps(shape, args, rank, ep, group, values, slot):
    """The FP8 forward and backward on inputs of the given values (their own schedule slot)."""
    E = shape[2]
    x, topk, rw, w, dy = make_inputs(shape, args.tokens, args.routing, rank, ep, args.seed, values)
    codes, shared = fp8_weights(w)
    t8 = mf.transpose_weights_fp8(*codes)
    del w  # the bf16 routed weights: the FP8 ops read codes

    def fwd():
        return mf.moe_forward_fp8(x, topk, rw, *codes, *shared, group.id, E, slot=slot)

    def bwd():
        return mf.moe_backward_fp8(dy, x, topk, rw, *codes, t8, *shared, group.id, E, slot=slot)

    fwd()
    return fwd, bwd


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_shape_args(ap)
    add_round_args(ap)
    args = ap.parse_args()
    rank, ep = init_ranks()
    shape = shape_with(args.shape, args.experts)
    group = mf.Group()
    steps = {v: fp8_steps(shape, args, rank, ep, group, v, slot) for slot, v in
             ((1, "normal"), (2, "uniform"))}
    res = {}
    for _ in range(args.rounds):
        for v, (fwd, bwd) in steps.items():
            fwd()  # the backward repeats on what this slot's forward kept
            for name, fn in (("forward", fwd), ("backward", bwd)):
                res.setdefault((v, name, "eager"), []).append(
                    slowest_median(timed(fn, args.iters, args.warmup)))
                res.setdefault((v, name, "graph"), []).append(
                    slowest_median(timed(graphed(fn), args.iters, args.warmup)))
            tf, tb, _ = chained(fwd, bwd, args.iters, args.warmup)
            res.setdefault((v, "forward", "chained"), []).append(slowest_median(tf))
            res.setdefault((v, "backward", "chained"), []).append(slowest_median(tb))
    if rank == 0:
        print(f"{shape_title(args, shape[2], ep)}, {args.routing} routing, FP8 layer")
        print_rounds("values / pass / mode", res, 30)
    group.destroy()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

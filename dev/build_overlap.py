"""build_overlap.py — the FP8 forward with the schedule built apart (mok_schedule_build, then
mok_forward: the shared expert starts once the build is done) against built in the forward's call
(mok_build_and_forward, what mok.functional runs: the shared expert's GEMMs overlap the build),
eager and replayed from a CUDA graph, alternating in one run, one process per GPU.

    torchrun --standalone --nproc_per_node=2 dev/build_overlap.py --tokens 7168 --iters 50

Prints the median over iterations of the slowest rank's milliseconds per variant and round, then
the medians over rounds."""
import argparse
import ctypes
import os
import sys

import torch
import torch.distributed as dist

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, HERE)
import mok.functional as mf  # noqa: E402
from mok import _capi as C  # noqa: E402
from harness import (add_round_args, add_shape_args, fp8_weights, graphed,  # noqa: E402
                     init_ranks, make_inputs, print_rounds, shape_title, shape_with,
                     slowest_median, timed)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_shape_args(ap)
    add_round_args(ap, iters=50, warmup=5)
    args = ap.parse_args()
    rank, ep = init_ranks()
    shape = shape_with(args.shape, args.experts)
    E = shape[2]
    x, topk, rw, w, dy = make_inputs(shape, args.tokens, args.routing, rank, ep, args.seed)
    codes, shared = fp8_weights(w)
    group = mf.Group()

    def joined():
        return mf.moe_forward_fp8(x, topk, rw, *codes, *shared, group.id, E)

    def apart():  # what moe_forward_fp8 ran before: two calls
        knobs = (("dtype", mf.FP8_BLOCK128),)
        _, sched = mf._schedule(group.id, mf._shape(x, topk, E, codes[0], shared[0]), knobs, 0)
        wt = mf._fp8_weights(*codes, *shared)
        y = torch.empty_like(x)
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        C.call("mok_schedule_build", sched, mf._ptr(topk), stream)
        C.call("mok_forward", sched, ctypes.byref(wt), mf._ptr(x), mf._ptr(rw), mf._ptr(y), stream)
        return y

    same = torch.equal(joined(), apart())
    res = {}
    for r in range(args.rounds):
        for name, fn in (("apart", apart), ("joined", joined)):
            res.setdefault((name, "eager"), []).append(
                slowest_median(timed(fn, args.iters, args.warmup)))
            res.setdefault((name, "graph"), []).append(
                slowest_median(timed(graphed(fn), args.iters, args.warmup)))
    if rank == 0:
        print(f"{shape_title(args, E, ep)}, {args.routing}, FP8 forward; y apart == joined: {same}")
        print_rounds("variant", res, 16)
    group.destroy()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

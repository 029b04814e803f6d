"""host_overhead.py — the host's microseconds in one mok.functional forward call (FP8, or BF16
with --bf16), part by part (the argument checks, the workspace lookup, the weights struct, the
output's allocation, the C call, the custom op's dispatch), and in the backward's call; against
the GPU's time for the same calls eager and from a CUDA graph, one process per GPU.

    torchrun --standalone --nproc_per_node=1 dev/host_overhead.py --experts 128 --tokens 7168
    torchrun --standalone --nproc_per_node=1 dev/host_overhead.py --shape qwen3-30b --bf16

Each part is timed alone, calls-many times in a row (the C call with the GPU idle before each, as
the harness times it); rank 0 prints the median per call."""
import argparse
import ctypes
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, os.path.join(HERE, "..", "bench"))
import mok.functional as mf  # noqa: E402
from mok import _capi as C  # noqa: E402
from harness import (add_shape_args, fp8_weights, graphed, init_ranks, make_inputs,  # noqa: E402
                     shape_with, slowest_median, timed)


def host_us(fn, calls, sync=False):
    """Median host microseconds of fn() over calls (sync: the GPU idle before each call)."""
    out = []
    for _ in range(calls):
        if sync:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1e6)
    torch.cuda.synchronize()
    return statistics.median(out)


def prelude_us(fn, calls):
    """Median host microseconds from fn()'s start to its first C call (mok_*: the Python the
    call runs before any of its work is enqueued), the GPU idle before each call."""
    out, orig = [], C.call

    def first(name, *a):
        if not seen:
            seen.append(time.perf_counter())
        return orig(name, *a)
    C.call = first
    try:
        for _ in range(calls):
            seen = []
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            fn()
            out.append((seen[0] - t0) * 1e6)
    finally:
        C.call = orig
    torch.cuda.synchronize()
    return statistics.median(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_shape_args(ap)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--bf16", action="store_true", help="the BF16 layer (default: FP8 block-128)")
    args = ap.parse_args()
    rank, ep = init_ranks()
    shape = shape_with(args.shape, args.experts)
    E = shape[2]
    x, topk, rw, w, dy = make_inputs(shape, args.tokens, "uniform", rank, ep, args.seed)
    group = mf.Group()
    n = args.calls
    if args.bf16:
        wl = [w[k] for k in ("w_gate", "w_up", "w_down", "ws_gate", "ws_up", "ws_down")]
        knobs = ()

        def call():
            return mf.moe_forward(x, topk, rw, *wl, group.id, E, 0.0)

        def bwd():
            return mf.moe_backward(dy, x, topk, rw, *wl, group.id, E, 0.0)

        check = ("argument checks (_check)", lambda: mf._check(x, topk, rw, wl, group.id, E))
        key_of = lambda: mf._shape(x, topk, E, wl[0], wl[3])  # noqa: E731
        weights = lambda: mf._weights(*wl)  # noqa: E731
        # mf.moe_forward / moe_backward run the ops' work directly in plain eager mode: the
        # custom ops' own dispatch, for comparison
        op_fwd = lambda: torch.ops.mok.moe_forward(x, topk, rw, *wl, group.id, E, 0.0)  # noqa: E731
        op_bwd = lambda: torch.ops.mok.moe_backward(dy, x, topk, rw, *wl, group.id, E, 0.0)  # noqa: E731
    else:
        codes, shared = fp8_weights(w)
        knobs = (("dtype", mf.FP8_BLOCK128),)

        def call():
            return mf.moe_forward_fp8(x, topk, rw, *codes, *shared, group.id, E)

        t8 = None

        def bwd():
            return mf.moe_backward_fp8(dy, x, topk, rw, *codes, t8, *shared, group.id, E)

        check = ("argument checks (_check_fp8)",
                 lambda: mf._check_fp8(x, topk, rw, *codes, *shared, group.id, E))
        key_of = lambda: mf._shape(x, topk, E, codes[0], shared[0])  # noqa: E731
        weights = lambda: mf._fp8_weights(*codes, *shared)  # noqa: E731
        op_fwd = op_bwd = None

    call()
    _, sched = mf._schedule(group.id, key_of(), knobs, 0)
    wt = weights()
    y = torch.empty_like(x)
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
    parts = [
        (check[0], host_us(check[1], n)),
        ("shape key + workspace lookup", host_us(lambda: mf._schedule(group.id, key_of(), knobs, 0), n)),
        ("weights struct", host_us(weights, n)),
        ("output (empty_like) + stream", host_us(
            lambda: (torch.empty_like(x), torch.cuda.current_stream(x.device).cuda_stream), n)),
        ("mok_build_and_forward (C)", host_us(
            lambda: C.call("mok_build_and_forward", sched, mf._ptr(topk), ctypes.byref(wt),
                           mf._ptr(x), mf._ptr(rw), mf._ptr(y), stream), n, sync=True)),
        ("whole forward call", host_us(call, n, sync=True)),
        ("forward: Python before its C call", prelude_us(call, n)),
    ]
    if op_fwd:
        parts += [("whole forward, through the custom op", host_us(op_fwd, n, sync=True)),
                  ("  Python before its C call", prelude_us(op_fwd, n))]
    if not args.bf16:
        t8 = mf.transpose_weights_fp8(*codes)
    bwd()
    parts.append(("whole backward call", host_us(bwd, n // 4, sync=True)))
    parts.append(("backward: Python before its C call", prelude_us(bwd, n // 4)))
    if op_bwd:
        parts += [("whole backward, through the custom op", host_us(op_bwd, n // 4, sync=True)),
                  ("  Python before its C call", prelude_us(op_bwd, n // 4))]
    eager = slowest_median(timed(call, 50, 5))
    graph = slowest_median(timed(graphed(call), 50, 5))
    eager_b = slowest_median(timed(bwd, 30, 3))
    graph_b = slowest_median(timed(graphed(bwd), 30, 3))
    if rank == 0:
        print(f"{args.shape}{f' with {E} experts' if args.experts else ''}, T {args.tokens}/rank, "
              f"EP={ep}, {'BF16' if args.bf16 else 'FP8'} forward: host microseconds per call "
              f"(median of {n})")
        for name, us in parts:
            print(f"  {name:40s} {us:8.1f}")
        for name, e, g in (("forward", eager, graph), ("backward", eager_b, graph_b)):
            print(f"  {'GPU ms, ' + name + ': eager / graph / diff':40s} {e:.3f} / {g:.3f} / "
                  f"{e - g:.3f}")
    group.destroy()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

"""python_vs_cli.py — where the FP8 layer's time through PyTorch parts from `mok run`'s: the same
library calls on two input sets (the harness's, uniform values; and `mok run`'s, made by the same
generator, seed and streams, so the tensors hold its very bits; with --mixed also one set's values
with the other's routing) through two call paths (mok.functional's ops; the C calls straight
through ctypes on buffers allocated once, as `mok run` makes them), each timed chained as `mok run`
times it (forward, backward, forward, ... back to back, events between the passes, no idle GPU),
alternating in one run, one process per GPU.

    torchrun --standalone --nproc_per_node=1 bench/python_vs_cli.py --experts 128 --tokens 7168

Prints the median over iterations of the slowest rank's milliseconds per case and round, then the
medians over rounds; run `mok run --dtype fp8 --build-in-forward 1` with the same shape and seed
in the same session to compare."""
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
from harness import (add_shape_args, chained, fp8_weights, init_ranks, make_inputs,  # noqa: E402
                     print_rounds, shape_title, shape_with, slowest_median)

C.lib.v1_fill_random_bf16.restype = ctypes.c_int
C.lib.v1_fill_random_bf16.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_uint64,
                                      ctypes.c_uint64, ctypes.c_float, ctypes.c_void_p]
C.lib.mok_route_fill.restype = ctypes.c_int
C.lib.mok_route_fill.argtypes = [ctypes.c_int, ctypes.c_uint64, ctypes.c_int, ctypes.c_int64,
                                 ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
C.lib.mok_fill_router_weights.restype = None
C.lib.mok_fill_router_weights.argtypes = [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_void_p,
                                          ctypes.c_int64, ctypes.c_int]
TX, TDY, TWG, TWU, TWD, TSG, TSU, TSD = range(8)  # cli/run_gpu.c's tensor streams


def cli_inputs(shape, T, rank, ep, seed):
    """x, top-k, router weights, the weights and dy as `mok run` makes them (cli/run_gpu.c)."""
    H, I, E, k, Is = shape
    el = E // ep
    sw, sd = 3.0 / H ** 0.5, 3.0 / I ** 0.5
    ssd = 3.0 / Is ** 0.5 if Is else 0.0

    def fill(size, tensor, scale):
        t = torch.empty(*size, dtype=torch.bfloat16, device="cuda")
        if C.lib.v1_fill_random_bf16(t.data_ptr(), t.numel(), seed, rank * 16 + tensor, scale, None):
            raise RuntimeError("v1_fill_random_bf16 failed")
        return t

    x, dy = fill((T, H), TX, 1.0), fill((T, H), TDY, 1.0)
    w = dict(w_gate=fill((el, I, H), TWG, sw), w_up=fill((el, I, H), TWU, sw),
             w_down=fill((el, H, I), TWD, sd),
             ws_gate=fill((Is, H), TSG, sw) if Is else None,
             ws_up=fill((Is, H), TSU, sw) if Is else None,
             ws_down=fill((H, Is), TSD, ssd) if Is else None)
    topk = torch.empty(T, k, dtype=torch.int32)
    C.check(C.lib.mok_route_fill(0, seed, rank, T, k, E, ep, topk.data_ptr()), "mok_route_fill")
    rw = torch.empty(T, k, dtype=torch.float32)
    C.lib.mok_fill_router_weights(seed, 100 + rank, rw.data_ptr(), T, k)
    torch.cuda.synchronize()
    return x, topk.cuda(), rw.cuda(), w, dy


def cases(shape, x, topk, rw, w, dy, group, slot):
    """(functional forward, backward) and (C-call forward, backward) on one input set."""
    E = shape[2]
    codes, shared = fp8_weights(w)
    t8 = mf.transpose_weights_fp8(*codes)

    def f_fwd():
        return mf.moe_forward_fp8(x, topk, rw, *codes, *shared, group.id, E, slot=slot)

    def f_bwd():
        return mf.moe_backward_fp8(dy, x, topk, rw, *codes, t8, *shared, group.id, E, slot=slot)

    f_fwd()  # the workspace and the slot's schedule exist from here
    f_fwd.gate_codes = codes[0]
    knobs = (("dtype", mf.FP8_BLOCK128),)
    _, sched = mf._schedule(group.id, mf._shape(x, topk, E, codes[0], shared[0]), knobs, slot)
    wt = mf._fp8_weights(*codes, *shared, t8)
    y = torch.empty_like(x)
    out = [torch.empty_like(x), torch.empty_like(rw)] + \
          [torch.empty(c.shape, dtype=torch.bfloat16, device="cuda") for c in codes[0::2]] + \
          [torch.empty_like(s) for s in shared]
    g = C.Grads()
    g.dx, g.d_router_weights, g.dw_gate, g.dw_up, g.dw_down, g.dws_gate, g.dws_up, g.dws_down = \
        [mf._ptr(t) for t in out]
    g.grad_fp32, g.accumulate = 0, 0
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
    p = {n: mf._ptr(t) for n, t in (("x", x), ("topk", topk), ("rw", rw), ("y", y), ("dy", dy))}

    def c_fwd():
        C.call("mok_build_and_forward", sched, p["topk"], ctypes.byref(wt), p["x"], p["rw"], p["y"],
               stream)

    def c_bwd():
        C.call("mok_backward", sched, ctypes.byref(wt), p["x"], p["rw"], p["dy"], ctypes.byref(g),
               stream)

    # the C calls see raw pointers: their buffers must live as long as the calls do
    c_fwd.buffers = c_bwd.buffers = (x, topk, rw, dy, y, out, codes, shared, t8)

    return {"functional": (f_fwd, f_bwd), "C calls": (c_fwd, c_bwd)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_shape_args(ap)
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seed", type=int, default=7, help="as `mok run --seed`")
    ap.add_argument("--paths", default="functional,C calls",
                    help="which call paths to time: functional, C calls, or both")
    ap.add_argument("--mixed", action="store_true",
                    help="also the two mixed sets: one set's values with the other's routing")
    args = ap.parse_args()
    rank, ep = init_ranks()
    shape = shape_with(args.shape, args.experts)
    group = mf.Group()
    h = make_inputs(shape, args.tokens, "uniform", rank, ep, args.seed, values="uniform")
    c = cli_inputs(shape, args.tokens, rank, ep, args.seed)
    # (x, topk, rw, w, dy): values from one set, the routing (top-k, router weights) from the other
    inputs = {"harness inputs": h, "mok run inputs": c,
              "harness values, mok run routing": (h[0], c[1], c[2], h[3], h[4]),
              "mok run values, harness routing": (c[0], h[1], h[2], c[3], c[4])}
    if not args.mixed:
        del inputs["harness values, mok run routing"], inputs["mok run values, harness routing"]
    del h, c
    runs = {}
    for slot, (name, data) in enumerate(inputs.items(), start=1):
        for path, fns in cases(shape, *data, group, slot).items():
            if path in args.paths.split(","):
                runs[(name, path)] = fns
        del data
    inputs.clear()  # the bf16 routed weights: the cases hold the codes
    res, board = {}, {}
    for _ in range(args.rounds):
        for key, (fwd, bwd) in runs.items():
            tf, tb, b = chained(fwd, bwd, args.iters, args.warmup)
            res.setdefault(key + ("forward",), []).append(slowest_median(tf))
            res.setdefault(key + ("backward",), []).append(slowest_median(tb))
            board.setdefault(key, []).append(b)
    if rank == 0:
        print(f"{shape_title(args, shape[2], ep)}, FP8 layer, chained (no idle GPU), seed {args.seed}")
        print_rounds("inputs / path / pass", res, 58)
        print("SM clock (MHz) and board power (W) under each case, per round:")
        for (name, path), b in board.items():
            print(f"  {name + ' / ' + path:56s} " + "  ".join(f"{c} MHz {w:.0f} W" for c, w in b))
        print("what each set computes (y from its last forward):")
        for (name, path), (fwd, _) in runs.items():
            if path == "functional":
                y = fwd().float()
                nz = torch.count_nonzero(fwd.gate_codes).item() / fwd.gate_codes.numel()
                print(f"  {name:56s} |y| {y.norm().item():.4e}, finite {bool(y.isfinite().all())}, "
                      f"w_gate codes nonzero {nz:.3f}")
    group.destroy()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

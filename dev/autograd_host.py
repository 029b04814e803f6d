"""autograd_host.py — the host's microseconds of mok.functional.moe under autograd, the way a
training step calls it (forward with inputs that need gradients, then backward), through the
custom op with its registered autograd (what torch.compile traces) against the eager
autograd.Function moe() takes, alternated in one process; with each pass's GPU time from idle
(the harness's way), one GPU.

    torchrun --standalone --nproc_per_node=1 dev/autograd_host.py --shape qwen3-30b

Prints per path: the forward call's host time, the backward call's, and the GPU milliseconds of
forward and backward from idle (medians of --calls rounds, the paths interleaved)."""
import argparse
import os
import statistics
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, os.path.join(HERE, "..", "bench"))
import mok.functional as mf  # noqa: E402
from harness import add_shape_args, case_inputs  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_shape_args(ap)
    ap.add_argument("--calls", type=int, default=60)
    ap.add_argument("--profile", type=int, default=0,
                    help="then that many moe() forward + backward rounds under cProfile: the host's "
                         "functions by their own time")
    args = ap.parse_args()
    rank, ep, shape, (x0, topk, rw0, w, dy) = case_inputs(args, 1)
    E = shape[2]
    group = mf.Group()
    leaves = {n: (w[n].detach().requires_grad_() if w[n] is not None else None)
              for n in ("w_gate", "w_up", "w_down", "ws_gate", "ws_up", "ws_down")}
    x, rw = x0.detach().requires_grad_(), rw0.detach().requires_grad_()
    wl = [leaves[n] for n in ("w_gate", "w_up", "w_down", "ws_gate", "ws_up", "ws_down")]

    def via_op():  # the custom op and its registered autograd
        return torch.ops.mok.moe_forward(x, topk, rw, *wl, group.id, E, 0.0, 1)

    def via_moe():  # what moe() runs in eager mode
        return mf.moe(x, topk, rw, *wl, group=group, num_experts=E, slot=1)

    def clear_grads():  # the gradients assigned at the next backward, not accumulated
        for t in [x, rw] + [v for v in wl if v is not None]:
            t.grad = None

    paths = {"custom op + autograd": via_op, "moe() (eager)": via_moe}
    res = {p: ([], [], [], []) for p in paths}
    for _ in range(3):  # warm-up
        for fn in paths.values():
            fn().backward(dy)
    torch.cuda.synchronize()
    for _ in range(args.calls):
        for name, fn in paths.items():
            hf, hb, gf, gb = res[name]
            ev = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
            clear_grads()
            torch.cuda.synchronize()
            ev[0].record()
            t0 = time.perf_counter()
            y = fn()
            t1 = time.perf_counter()
            ev[1].record()
            torch.cuda.synchronize()
            t2 = time.perf_counter()
            y.backward(dy)
            t3 = time.perf_counter()
            ev[2].record()
            torch.cuda.synchronize()
            hf.append((t1 - t0) * 1e6)
            hb.append((t3 - t2) * 1e6)
            gf.append(ev[0].elapsed_time(ev[1]))
            gb.append(ev[1].elapsed_time(ev[2]))
    if rank == 0:
        print(f"{args.shape}, T {args.tokens}, EP={ep}, BF16 under autograd, medians of {args.calls}"
              " interleaved rounds")
        print(f"  {'path':24s} {'fwd host us':>12s} {'bwd host us':>12s} {'fwd ms':>8s} {'bwd ms':>8s}")
        for name, (hf, hb, gf, gb) in res.items():
            print(f"  {name:24s} {statistics.median(hf):12.1f} {statistics.median(hb):12.1f} "
                  f"{statistics.median(gf):8.3f} {statistics.median(gb):8.3f}")
    if args.profile and rank == 0:
        import cProfile
        import pstats
        prof = cProfile.Profile()
        for _ in range(args.profile):
            clear_grads()
            torch.cuda.synchronize()
            prof.enable()
            y = via_moe()
            y.backward(dy)
            prof.disable()
        torch.cuda.synchronize()
        pstats.Stats(prof).sort_stats("tottime").print_stats(22)
    group.destroy()
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()

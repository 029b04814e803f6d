"""profile_layer.py — where a mok layer step spends its GPU time, kernel by kernel: forward and
backward of one shape under torch.profiler (CUPTI kernel records), one process per GPU.

    torchrun --standalone --nproc_per_node=2 bench/profile_layer.py --shape deepseek-v3 --tokens 4096

Rank 0 prints, per kernel name, the calls and the milliseconds per step (forward + backward), the
grouped GEMM's kernels named by their mode (gate+up SwiGLU, fwd, dgrad, wgrad) and cluster size,
and the share of the step. Every rank runs the same steps (the layer is collective)."""
import argparse
import collections
import os
import re
import sys

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, HERE)
import mok.functional as mf  # noqa: E402
from harness import add_shape_args, init_ranks, make_inputs, shape_with  # noqa: E402

GG_MODES = {"0": "grouped GEMM fwd", "1": "grouped GEMM gate+up SwiGLU", "2": "grouped GEMM dgrad"}


def kernel_label(name):
    """A readable label: the grouped GEMMs by mode and cluster, other kernels by their base name."""
    m = re.search(r"gg_bf16_kernel<(\d+), (\d+)>", name)
    if m:
        return f"{GG_MODES.get(m.group(1), 'grouped GEMM ' + m.group(1))} (cluster {m.group(2)})"
    m = re.search(r"\bsw_kernel<(\d+)>", name)
    if m:
        return f"grouped GEMM gate+up SwiGLU, tokens on N (cluster {m.group(1)})"
    m = re.search(r"gg_bf16_wgrad_kernel<([^,]+), (\d+)>", name)
    if m:  # <OUT_F32, CL>: a bool shown as true / false or (bool)1 / (bool)0
        out = "fp32" if m.group(1).strip() in ("true", "(bool)1", "1") else "bf16"
        return f"grouped GEMM wgrad, {out} dW (cluster {m.group(2)})"
    m = re.search(r"gg_fp8(_wide)?_kernel<([^>]*)>", name)
    if m:  # template arguments: the mode first (1: gate+up SwiGLU), then the variant's
        mode = "gate+up SwiGLU" if m.group(2).split(",")[0].strip() == "1" else "fwd"
        return f"FP8 grouped GEMM {mode}{' 256-col' if m.group(1) else ''} <{m.group(2)}>"
    base = re.sub(r"\(.*", "", name)
    base = re.sub(r"^void ", "", base)
    return base[:60]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_shape_args(ap, tokens=4096)
    ap.add_argument("--routing", default="uniform", choices=("uniform", "zipf"))
    ap.add_argument("--path", default="auto", choices=("auto", "fused", "grouped", "oracle"))
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--ring-mb", type=int, default=0, help="token ring per layer, MiB (0: none)")
    ap.add_argument("--macrobatch", type=int, default=0, help="minibatches per macrobatch (0: default)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--fp8", action="store_true", help="the FP8 (block-128) forward and backward")
    ap.add_argument("--fp8-shared", type=int, choices=(0, 1), default=None,
                    help="with --fp8: the shared expert in FP8 (1) or bf16 (0); default: mok's")
    ap.add_argument("--forward-only", action="store_true", help="profile the forward alone")
    ap.add_argument("--backward-only", action="store_true",
                    help="profile the backward alone, on the state the forward before it kept (as "
                         "bench/harness.py times the backward)")
    ap.add_argument("--timeline", action="store_true",
                    help="also one step from an idle GPU after a barrier (as bench/harness.py times "
                         "it): each kernel's start, length and stream, rank 0")
    ap.add_argument("--graph", action="store_true",
                    help="with --timeline: also the same step replayed from a CUDA graph, from idle "
                         "(what the harness's graph rows time), its timeline after the eager one")
    ap.add_argument("--plan", default=None,
                    help="plan fields to pin, \"key=value,...\" (include/mok.h, mok_plan)")
    args = ap.parse_args()
    if args.forward_only and args.backward_only:
        ap.error("--forward-only and --backward-only exclude each other")
    rank, ep = init_ranks()
    shape = shape_with(args.shape, args.experts)
    E = shape[2]
    x, topk, rw, w, dy = make_inputs(shape, args.tokens, args.routing, rank, ep, args.seed)
    wl = [w[n] for n in ("w_gate", "w_up", "w_down", "ws_gate", "ws_up", "ws_down")]
    knobs = {"ring_bytes": args.ring_mb << 20}
    if args.fp8_shared is not None:
        knobs["fp8_shared_expert"] = args.fp8_shared
    if args.macrobatch:
        knobs["macrobatch_minibatches"] = args.macrobatch
    group = mf.Group(path=args.path, plan=args.plan, **knobs)
    if args.fp8:  # FP8 (block-128) routed experts, weights quantized and transposed untimed
        q = [mf.quantize_weight(t) for t in wl[:3]]
        t8 = mf.transpose_weights_fp8(*q[0], *q[1], *q[2])

        def step():
            if not args.backward_only:
                mf.moe_forward_fp8(x, topk, rw, *q[0], *q[1], *q[2], *wl[3:], group.id, E)
            if not args.forward_only:
                mf.moe_backward_fp8(dy, x, topk, rw, *q[0], *q[1], *q[2], t8, *wl[3:], group.id, E)
        if args.backward_only:  # the state the backward repeats on
            mf.moe_forward_fp8(x, topk, rw, *q[0], *q[1], *q[2], *wl[3:], group.id, E)
    else:
        def step():
            if not args.backward_only:
                mf.moe_forward(x, topk, rw, *wl, group.id, E, 0.0)
            if not args.forward_only:
                mf.moe_backward(dy, x, topk, rw, *wl, group.id, E, 0.0)
        if args.backward_only:
            mf.moe_forward(x, topk, rw, *wl, group.id, E, 0.0)

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    dist.barrier()
    act = [torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=act) as prof:
        for _ in range(args.steps):
            step()
        torch.cuda.synchronize()
    per = collections.defaultdict(lambda: [0, 0.0])  # label -> calls, total us
    for e in prof.key_averages():  # kernels: the entries with device time of their own
        us = getattr(e, "self_device_time_total", None)
        if us is None:
            us = getattr(e, "self_cuda_time_total", 0.0)
        if us <= 0 or e.key.startswith("aten::") or e.key.startswith("cuda"):
            continue
        label = kernel_label(e.key)
        per[label][0] += e.count
        per[label][1] += us
    total = sum(v[1] for v in per.values())
    passes = "forward" if args.forward_only else "backward" if args.backward_only else \
        "forward + backward"
    if rank == 0:
        print(f"{args.shape}{f' with {E} experts' if args.experts else ''}, T {args.tokens}/rank, "
              f"EP={ep}, {args.routing}, path {args.path}, "
              f"{'FP8' if args.fp8 else 'BF16'}, "
              f"ring {args.ring_mb} MiB: "
              f"GPU time per step ({passes}), rank 0, {args.steps} steps")
        print(f"{'kernel':62s} {'calls/step':>10s} {'ms/step':>9s} {'share':>7s}")
        for label, (calls, us) in sorted(per.items(), key=lambda kv: -kv[1][1]):
            print(f"{label:62s} {calls / args.steps:10.1f} {us / 1e3 / args.steps:9.3f} "
                  f"{100.0 * us / max(total, 1e-9):6.1f}%")
        print(f"{'sum of kernel time (kernels may overlap)':62s} {'':10s} {total / 1e3 / args.steps:9.3f}")
    if args.timeline and not args.graph:
        timeline(step, rank, "one step from idle")
    if args.timeline and args.graph:  # eager and graph in turn, twice: the order's share apart
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            step()
        torch.cuda.synchronize()
        spans = []
        for rep in range(2):
            for name, fn in (("eager", step), ("graph", g.replay)):
                title = "one step from idle" if name == "eager" else \
                    "the step replayed from a CUDA graph, from idle"
                spans.append((name, rep) + timeline(fn, rank, f"{title} ({rep + 1})", quiet=rep > 0))
        if rank == 0:
            print("\nspans in turn (us): " + ", ".join(
                f"{n} {r + 1}: {s:.1f} (kernel time {k:.1f})" for n, r, s, k in spans))
    group.destroy()
    dist.destroy_process_group()


def timeline(step, rank, title, quiet=False):
    """One step profiled from an idle GPU after a barrier (the second of two): its kernels in
    start order, with the start relative to the first one, the length and the stream, and the
    gaps where no kernel runs; then the host's CUDA API calls inside the step's call (those over
    20 us, and the total by name). quiet: only returned. Returns the span and the kernels' summed
    time (us, rank 0's; zeros elsewhere)."""
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts) as prof:
        for _ in range(2):  # the second is shown: the profiler's own start-up lands in the first
            torch.cuda.synchronize()
            dist.barrier()
            with torch.profiler.record_function("mok_step"):
                step()
            torch.cuda.synchronize()
    if rank != 0:
        return 0.0, 0.0
    evs = list(prof.events())
    gpu = sorted((e for e in evs if e.device_type == torch.autograd.DeviceType.CUDA
                  and e.name != "mok_step"), key=lambda e: e.time_range.start)
    # the second step's kernels: those after the barrier before it, its NCCL kernel or, in a
    # group of one (no NCCL kernel), the fill of its tensor
    cut = [i for i, e in enumerate(gpu) if "nccl" in e.name.lower() or "FillFunctor" in e.name]
    last = max(cut, default=-1)
    kern = gpu[last + 1:]
    cpu = sorted((e for e in evs if e.device_type == torch.autograd.DeviceType.CPU
                  and e.name == "mok_step"), key=lambda e: e.time_range.start)
    if not kern or not cpu:
        return 0.0, 0.0
    t0 = kern[0].time_range.start
    busy_to, idle, busy = t0, 0.0, 0.0
    lines = []
    for e in kern:
        s, t = e.time_range.start, e.time_range.end
        if s > busy_to:
            idle += s - busy_to
        busy_to = max(busy_to, t)
        busy += t - s
        lines.append(f"{'':36s} {s - t0:9.1f} {t - s:8.1f} {getattr(e, 'thread', 0):6d}  "
                     f"{kernel_label(e.name)}")
    if quiet:
        return busy_to - t0, busy
    print(f"\ntimeline of {title}, rank 0 (us from its first kernel): "
          f"{'start':>9s} {'us':>8s} {'stream':>6s}  kernel")
    print("\n".join(lines))
    print(f"{'':36s} span {busy_to - t0:.1f} us, no kernel running {idle:.1f} us")
    # the host side on its own clock (the profiler's host and device clocks are not compared)
    h0, h1 = cpu[-1].time_range.start, cpu[-1].time_range.end
    api = sorted((e for e in evs if e.device_type == torch.autograd.DeviceType.CPU
                  and e.name.startswith("cu") and h0 <= e.time_range.start <= h1),
                 key=lambda e: e.time_range.start)
    total = collections.defaultdict(lambda: [0, 0.0])
    print(f"host CUDA calls over 20 us (us from the step's call): {'start':>9s} {'us':>8s}  call")
    for e in api:
        d = e.time_range.end - e.time_range.start
        total[e.name][0] += 1
        total[e.name][1] += d
        if d > 20:
            print(f"{'':53s} {e.time_range.start - h0:9.1f} {d:8.1f}  {e.name}")
    print(f"host step {h1 - h0:.1f} us; CUDA calls by name (calls, us):")
    for name, (n, d) in sorted(total.items(), key=lambda kv: -kv[1][1])[:10]:
        print(f"{'':27s} {n:5d} {d:9.1f}  {name}")
    return busy_to - t0, busy


if __name__ == "__main__":
    main()

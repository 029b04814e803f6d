"""harness.py — mok against PyTorch+NCCL (and DeepEP where installed) on the model shapes of the
design brief, in one run, one process per GPU:

    torchrun --nproc_per_node=NGPU bench/harness.py [--shapes ...] [--tokens 4096,7168]

For each shape, token count and routing it checks mok's output and gradients against the baseline,
then times forward and backward of each (warm-up, >= 50 iterations with CUDA events, median over
iterations of the slowest rank) and prints TFLOP/s per GPU by the published convention
(6*(T*Is/I + T*k)*H*I per forward, twice that per backward); the ratio column is baseline time over
mok time. --also grouped,oracle,fused adds mok's other paths on the same data; --fp8 mok's FP8 forward and backward
against the same BF16 baseline and against PyTorch's FP8 path (baseline_torch.py, where
torch._scaled_grouped_mm runs); --experts-div 2 gives every shape half its routed experts (one GPU
then carries EP=2's routed work per GPU); --ring-mb mok's token ring. Writes a JSON file and a PNG
chart."""
import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import time

# large expert weights at EP=1: let the caching allocator grow segments rather than fragment
os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, HERE)
import mok.functional as mf  # noqa: E402
from baseline_torch import (fp8_weight_codes, grouped_mm_works, moe_baseline,  # noqa: E402
                            scaled_grouped_mm_works)

# name: (H, I, E, k, Is)
SHAPES = {
    "deepseek-v3": (7168, 2048, 256, 8, 2048),
    "kimi-k2": (7168, 2048, 384, 8, 2048),
    "qwen3-235b": (4096, 1536, 128, 8, 0),
    "qwen3-30b": (2048, 768, 128, 8, 0),
    "glm-4.5": (5120, 1536, 160, 8, 1536),
    "deepseek-v4-pro": (7168, 3072, 384, 6, 0),
    "olmoe": (2048, 1024, 64, 8, 0),  # OLMoE-like: few, fine-grained experts
}


def init_ranks():
    """This process's GPU (torchrun's LOCAL_RANK) and the NCCL process group, NVLink multicast
    off; returns (rank, world size)."""
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    return dist.get_rank(), dist.get_world_size()


def add_shape_args(ap, tokens=7168):
    """The single-question scripts' shape options: --shape, --tokens (per rank), --experts."""
    ap.add_argument("--shape", default="deepseek-v3", choices=sorted(SHAPES))
    ap.add_argument("--tokens", type=int, default=tokens)
    ap.add_argument("--experts", type=int, default=0,
                    help="routed experts (0: the shape's); e.g. half of DeepSeek-V3's 256 on one GPU "
                         "gives it the routed work per GPU of EP=2, with no NVLink traffic")


def add_round_args(ap, iters=30, warmup=3):
    """The A/B scripts' timing options: --routing, --iters and --warmup per timed case, --rounds of
    all cases in turn, --seed of the inputs."""
    ap.add_argument("--routing", default="uniform", choices=("uniform", "zipf"))
    ap.add_argument("--iters", type=int, default=iters)
    ap.add_argument("--warmup", type=int, default=warmup)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)


def shape_title(args, E, ep):
    """'deepseek-v3 with 128 experts, T 7168/rank, EP=1': what a script's table was measured on."""
    return (f"{args.shape}{f' with {E} experts' if args.experts else ''}, T {args.tokens}/rank, "
            f"EP={ep}")


def print_rounds(title, res, width):
    """A table of res (key tuple -> milliseconds per round): each round, then their median."""
    print(f"{title:{width}s} {'rounds (ms)':>30s} {'median':>8s}")
    for key, t in res.items():
        print(f"{' / '.join(key):{width}s} {' '.join(f'{v:8.3f}' for v in t):>30s} "
              f"{statistics.median(t):8.3f}")


def shape_with(name, experts=0):
    """SHAPES[name], with `experts` routed experts instead when nonzero (e.g. half of DeepSeek-V3's
    on one GPU: the routed work per GPU of EP=2, without NVLink)."""
    H, I, E, k, Is = SHAPES[name]
    return (H, I, experts or E, k, Is)


def fp8_weights(w):
    """make_inputs' weights as the FP8 ops take them: the routed experts' codes and scales,
    quantized by mok (quantize_weight; gate, up and down, flat, in the ops' order), and the shared
    expert's bf16 weights."""
    routed = [t for n in ("w_gate", "w_up", "w_down") for t in mf.quantize_weight(w[n])]
    return routed, [w[n] for n in ("ws_gate", "ws_up", "ws_down")]


def case_inputs(args, seed):
    """A single-question script's case once add_shape_args's options are parsed: (rank, group size)
    from init_ranks, the shape (shape_with) and make_inputs' tensors for uniform routing."""
    rank, ep = init_ranks()
    shape = shape_with(args.shape, args.experts)
    return rank, ep, shape, make_inputs(shape, args.tokens, "uniform", rank, ep, seed)


def make_inputs(shape, T, routing, rank, ep, seed, values="normal"):
    """x, top-k, router weights, the weights (a dict) and dy of one rank. values: "normal" (x, dy
    standard normal, weights normal with std fan_in^-0.5) or "uniform" (as `mok run` makes them: x,
    dy uniform in [-1, 1], weights in [-3, 3] fan_in^-0.5)."""
    H, I, E, k, Is = shape
    el = E // ep
    g = torch.Generator(device="cuda").manual_seed(seed * 1000 + rank)
    dev = "cuda"
    if values not in ("normal", "uniform"):
        raise ValueError(f"values must be normal or uniform, got {values!r}")

    def rnd(*size, scale=1.0):
        if values == "uniform":
            half = 3.0 * scale if scale != 1.0 else 1.0  # weights: 3 / sqrt(fan_in); x, dy: 1
            return ((torch.rand(*size, generator=g, device=dev) * 2 - 1) * half).to(torch.bfloat16)
        return (torch.randn(*size, generator=g, device=dev) * scale).to(torch.bfloat16)

    x = rnd(T, H)
    logits = torch.randn(T, E, generator=g, device=dev)
    if routing == "zipf":  # Gumbel top-k over a Zipf prior: skewed, the same hot experts on every rank
        prior = torch.arange(1, E + 1, device=dev, dtype=torch.float32).pow(-1.2)
        perm = torch.randperm(E, generator=torch.Generator(device="cuda").manual_seed(seed), device=dev)
        gumbel = -torch.log(-torch.log(torch.rand(T, E, generator=g, device=dev).clamp_min(1e-20)))
        logits = prior[perm].log() + gumbel
    top_val, topk = logits.topk(k, dim=1)
    rw = torch.softmax(top_val, dim=1).float()
    w = dict(
        w_gate=rnd(el, I, H, scale=H ** -0.5), w_up=rnd(el, I, H, scale=H ** -0.5),
        w_down=rnd(el, H, I, scale=I ** -0.5),
        ws_gate=rnd(Is, H, scale=H ** -0.5) if Is else None,
        ws_up=rnd(Is, H, scale=H ** -0.5) if Is else None,
        ws_down=rnd(H, Is, scale=Is ** -0.5) if Is else None)
    dy = rnd(T, H)
    return x, topk.to(torch.int32).contiguous(), rw.contiguous(), w, dy


def timed(fn, iters, warmup, host=None):
    """Per-iteration milliseconds of fn() on this rank, ranks aligned by a barrier each time; the
    host's milliseconds inside fn() (its enqueueing) appended to the list host when given."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        dist.barrier()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        h0 = time.perf_counter()
        fn()
        h1 = time.perf_counter()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
        if host is not None:
            host.append((h1 - h0) * 1e3)
    return times


def chained(fwd, bwd, iters, warmup):
    """Forward and backward enqueued back to back: per-iteration milliseconds of each pass, and
    the SM clock (MHz) and board power (W) read once all iterations are enqueued."""
    for _ in range(warmup):
        fwd(), bwd()
    torch.cuda.synchronize()
    dist.barrier()
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(3 * iters)]
    for i in range(iters):
        ev[3 * i].record()
        fwd()
        ev[3 * i + 1].record()
        bwd()
        ev[3 * i + 2].record()
    # the board while the queued passes run (the host is far ahead of the GPU here)
    board = (torch.cuda.clock_rate(), torch.cuda.power_draw() / 1000.0)
    torch.cuda.synchronize()
    return ([ev[3 * i].elapsed_time(ev[3 * i + 1]) for i in range(iters)],
            [ev[3 * i + 1].elapsed_time(ev[3 * i + 2]) for i in range(iters)], board)


def graphed(fn):
    """fn captured once in a CUDA graph (after a call outside it, so that its workspace and
    schedule exist), returned as the graph's replay: the time without the host's enqueueing."""
    fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    torch.cuda.synchronize()
    return g.replay


def slowest_median(times):
    """Median over iterations of the slowest rank's time."""
    t = torch.tensor(times, device="cuda")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.median().item()


def rel(a, b):
    """||a - b|| / ||b|| in fp32, a slice at a time so that a 30 GB weight gradient needs no fp32 copy."""
    a, b = a.reshape(-1), b.reshape(-1)
    diff = ref = 0.0
    for i in range(0, a.numel(), 1 << 28):
        sa, sb = a[i:i + (1 << 28)].float(), b[i:i + (1 << 28)].float()
        diff += (sa - sb).square().sum().item()
        ref += sb.square().sum().item()
    return (diff / max(ref, 1e-60)) ** 0.5


def run_case(name, shape, T, routing, group, args):
    rank, ep = dist.get_rank(), dist.get_world_size()
    H, I, E, k, Is = shape
    x, topk, rw, w, dy = make_inputs(shape, T, routing, rank, ep, args.seed)
    wl = [w[n] for n in ("w_gate", "w_up", "w_down", "ws_gate", "ws_up", "ws_down")]

    def mok_fwd():
        return mf.moe_forward(x, topk, rw, *wl, group.id, E, 0.0)

    def mok_bwd():
        return mf.moe_backward(dy, x, topk, rw, *wl, group.id, E, 0.0)

    params = [p for p in wl if p is not None]

    def base_fwd():
        with torch.no_grad():
            return moe_baseline(x, topk, rw, *wl, E)

    def base_fwd_bwd(fp8=False, codes=None):
        leaves = [t.detach().requires_grad_() for t in [x, rw] + params]
        wl2 = leaves[2:5] + (leaves[5:8] if Is else [None, None, None])
        y = moe_baseline(leaves[0], topk, leaves[1], *wl2, E, fp8=fp8, fp8_codes=codes)
        return torch.autograd.grad(y, leaves, dy)

    # correctness first: mok against the baseline on this data
    y_mok, y_base = mok_fwd(), base_fwd()
    g_mok = mok_bwd()
    g_base = base_fwd_bwd()
    check = {"y": rel(y_mok, y_base), "dx": rel(g_mok[0], g_base[0]), "drw": rel(g_mok[1], g_base[1]),
             "dw": max(rel(g_mok[2 + i], g_base[2 + i]) for i in range(3))}
    del y_mok, y_base, g_mok, g_base
    flops = 6.0 * (T * Is / I + T * k) * H * I
    label = name if E == SHAPES[name][2] else f"{name}/E{E}"  # /E128: EP=2's routed work per GPU
    res = {"shape": label, "model": name, "experts": E, "ep": ep, "tokens": T, "routing": routing, "check": check}
    t_mok_f = slowest_median(timed(mok_fwd, args.iters, args.warmup))
    t_mok_b = slowest_median(timed(mok_bwd, args.iters, args.warmup))
    t_base_f = slowest_median(timed(base_fwd, args.iters, args.warmup))
    t_base_fb = slowest_median(timed(base_fwd_bwd, args.iters, args.warmup))
    t_base_b = max(t_base_fb - t_base_f, 1e-6)
    res.update(mok_fwd_ms=t_mok_f, mok_bwd_ms=t_mok_b, base_fwd_ms=t_base_f, base_bwd_ms=t_base_b,
               mok_fwd_tflops=flops / t_mok_f * 1e-9, mok_bwd_tflops=2 * flops / t_mok_b * 1e-9,
               base_fwd_tflops=flops / t_base_f * 1e-9, base_bwd_tflops=2 * flops / t_base_b * 1e-9)
    if args.fp8:  # mok's FP8 (block-128) forward on the same data, weights quantized untimed
        q = [mf.quantize_weight(t) for t in wl[:3]]
        fp8_fwd = lambda: mf.moe_forward_fp8(x, topk, rw, *q[0], *q[1], *q[2], *wl[3:], group.id, E)  # noqa: E731
        t8 = mf.transpose_weights_fp8(*q[0], *q[1], *q[2])
        fp8_bwd = lambda: mf.moe_backward_fp8(dy, x, topk, rw, *q[0], *q[1], *q[2], t8, *wl[3:],  # noqa: E731
                                              group.id, E)
        check["fp8_y"] = rel(fp8_fwd(), base_fwd())  # quantization error, not a fault, at ~1e-2
        g8, g_base = fp8_bwd(), base_fwd_bwd()  # backward on what the forward just kept
        check["fp8_dx"], check["fp8_drw"] = rel(g8[0], g_base[0]), rel(g8[1], g_base[1])
        del g8, g_base
        h_f8, h_b8 = [], []  # the host's time inside each call: what a graph replay saves at most
        t_f8 = slowest_median(timed(fp8_fwd, args.iters, args.warmup, h_f8))
        t_b8 = slowest_median(timed(fp8_bwd, args.iters, args.warmup, h_b8))  # repeats on the kept state
        res.update(fp8_fwd_ms=t_f8, fp8_fwd_tflops=flops / t_f8 * 1e-9, fp8_bwd_ms=t_b8,
                   fp8_bwd_tflops=2 * flops / t_b8 * 1e-9, fp8_fwd_host_ms=slowest_median(h_f8),
                   fp8_bwd_host_ms=slowest_median(h_b8))
        if args.graph:  # the same passes replayed from CUDA graphs (mok enqueues no host sync)
            t_f8g = slowest_median(timed(graphed(fp8_fwd), args.iters, args.warmup))
            t_b8g = slowest_median(timed(graphed(fp8_bwd), args.iters, args.warmup))
            res.update(fp8_graph_fwd_ms=t_f8g, fp8_graph_bwd_ms=t_b8g)
        del q, t8
        # the routed weights' quantization per weight update (codes and the backward's copies)
        quant = lambda: mf.transpose_weights_fp8(*[t for w in wl[:3] for t in mf.quantize_weight(w)])  # noqa: E731
        res["fp8_quant_ms"] = slowest_median(timed(quant, args.iters, args.warmup))
        if args.mxfp8:  # the same layer on MXFP8 weights converted to block-128 (untimed)
            def mx_codes():  # what mok.MoE(expert_precision="mxfp8") makes per update
                return [t for w in wl[:3] for t in mf.quantize_weight_mxfp8_block128(w)]

            def mx_two_pass():  # MXFP8 tensors (a checkpoint's form), then their conversion
                return [t for w in wl[:3] for t in mf.mxfp8_to_block128(*mf.quantize_weight_mxfp8(w))]
            qm = mx_codes()
            check["fp8_mx_one_pass_bitwise"] = float(all(
                torch.equal(a.view(torch.uint8), b.view(torch.uint8)) for a, b in zip(qm, mx_two_pass())))
            tm = mf.transpose_weights_fp8(*qm)
            mx_fwd = lambda: mf.moe_forward_fp8(x, topk, rw, *qm, *wl[3:], group.id, E)  # noqa: E731
            mx_bwd = lambda: mf.moe_backward_fp8(dy, x, topk, rw, *qm, tm, *wl[3:], group.id, E)  # noqa: E731
            check["fp8_mx_y"] = rel(mx_fwd(), base_fwd())
            g8, g_base = mx_bwd(), base_fwd_bwd()
            check["fp8_mx_dx"], check["fp8_mx_drw"] = rel(g8[0], g_base[0]), rel(g8[1], g_base[1])
            del g8, g_base
            t_fm = slowest_median(timed(mx_fwd, args.iters, args.warmup))
            t_bm = slowest_median(timed(mx_bwd, args.iters, args.warmup))
            mx_quant = lambda: mf.transpose_weights_fp8(*mx_codes())  # noqa: E731
            res.update(mx_fwd_ms=t_fm, mx_bwd_ms=t_bm, mx_fwd_tflops=flops / t_fm * 1e-9,
                       mx_bwd_tflops=2 * flops / t_bm * 1e-9,
                       mx_quant_ms=slowest_median(timed(mx_quant, args.iters, args.warmup)),
                       mx_two_pass_ms=slowest_median(timed(mx_two_pass, args.iters, args.warmup)))
            del qm, tm
        if args.torch_fp8:  # PyTorch's FP8 path on the same data, its weights' codes made untimed
            codes8 = [fp8_weight_codes(w) for w in wl[:3]]  # (once per weight update, as mok's)

            def base8_fwd():
                with torch.no_grad():
                    return moe_baseline(x, topk, rw, *wl, E, fp8=True, fp8_codes=codes8)

            base8_fwd_bwd = functools.partial(base_fwd_bwd, fp8=True, codes=codes8)
            check["torch_fp8_y"] = rel(base8_fwd(), base_fwd())
            g8, g_base = base8_fwd_bwd(), base_fwd_bwd()
            check["torch_fp8_dx"] = rel(g8[0], g_base[0])
            del g8, g_base
            t_bf8 = slowest_median(timed(base8_fwd, args.iters, args.warmup))
            t_bfb8 = slowest_median(timed(base8_fwd_bwd, args.iters, args.warmup))
            res.update(base_fp8_fwd_ms=t_bf8, base_fp8_bwd_ms=max(t_bfb8 - t_bf8, 1e-6))
            del codes8
    res["plans"] = group.plans()  # what mok ran: the plan of each workspace the case made
    for path in [a for a in args.also.split(",") if a]:  # other mok paths on the same data
        gp = mf.Group(path=path)
        p_fwd = lambda: mf.moe_forward(x, topk, rw, *wl, gp.id, E, 0.0)  # noqa: E731
        p_bwd = lambda: mf.moe_backward(dy, x, topk, rw, *wl, gp.id, E, 0.0)  # noqa: E731
        y1, g1_out = p_fwd(), p_bwd()
        y_base, g_base = base_fwd(), base_fwd_bwd()
        check[f"{path}_y"], check[f"{path}_dx"] = rel(y1, y_base), rel(g1_out[0], g_base[0])
        del y1, g1_out, y_base, g_base
        t_f = slowest_median(timed(p_fwd, args.iters, args.warmup))
        t_b = slowest_median(timed(p_bwd, args.iters, args.warmup))
        gp.destroy()
        res.update({f"{path}_fwd_ms": t_f, f"{path}_bwd_ms": t_b, f"{path}_fwd_tflops": flops / t_f * 1e-9,
                    f"{path}_bwd_tflops": 2 * flops / t_b * 1e-9})
    return res


def fits(shape, T, ep):
    """Rough device bytes: weights three times (mok's, its gradients, the baseline's gradients) plus
    activations; skip what would not fit in 90% of the card."""
    H, I, E, k, Is = shape
    weights = (3 * (E // ep) * H * I + 3 * Is * H) * 2
    acts = T * k * ep * (H + 4 * I) * 2 * 6
    return 3 * weights + acts < 0.9 * torch.cuda.get_device_properties(0).total_memory


def chart(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    labels = [f"{r['shape']}\nT{r['tokens']} {r['routing']}" for r in rows]
    fig, ax = plt.subplots(figsize=(max(8, len(rows) * 0.9), 5))
    xs = range(len(rows))
    for off, key, lab in ((-0.3, "mok_fwd_tflops", "mok fwd"), (-0.1, "base_fwd_tflops", "PyTorch+NCCL fwd"),
                          (0.1, "mok_bwd_tflops", "mok bwd"), (0.3, "base_bwd_tflops", "PyTorch+NCCL bwd")):
        ax.bar([i + off for i in xs], [r[key] for r in rows], width=0.2, label=lab)
    ax.set_xticks(list(xs))
    ax.set_xticklabels(labels, fontsize=7, rotation=45, ha="right")
    ax.set_ylabel("TFLOP/s per GPU")
    ax.set_title(f"mok vs PyTorch+NCCL, EP={rows[0]['ep']} (H200)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--tokens", default="4096,7168")
    ap.add_argument("--routing", default="uniform,zipf")
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--seed", type=int, default=int(time.time()) % 100000)
    ap.add_argument("--out", default="bench-results")
    ap.add_argument("--breakdown", action="store_true",
                    help="after the table, time each stage alone (schedule build, dispatch, expert GEMMs, "
                         "combine; NVLink GB/s) with `mok run --breakdown` for every case")
    ap.add_argument("--also", default="",
                    help="comma list of other mok paths timed on every case in the same run: grouped "
                         "(separate communication kernels), oracle (mma.sync expert GEMMs), fused (the "
                         "default's path by name)")
    ap.add_argument("--mok", default=os.path.join(HERE, "..", "build", "mok"), help="the mok command")
    ap.add_argument("--fp8", action="store_true",
                    help="also time mok's FP8 (block-128) forward and backward on every case, against "
                         "the same PyTorch+NCCL BF16 passes (printed after the table)")
    ap.add_argument("--experts-div", type=int, default=1,
                    help="every shape with its routed experts divided by this (2: one GPU carries "
                         "EP=2's routed work per GPU, without NVLink)")
    ap.add_argument("--ring-mb", type=int, default=0,
                    help="mok's token ring per layer in MiB (config.ring_bytes; 0: none, the default)")
    ap.add_argument("--mxfp8", action="store_true",
                    help="with --fp8: also time mok's FP8 layer on the routed weights quantized to "
                         "MXFP8 and converted to block-128, and that quantization against block-128's")
    ap.add_argument("--graph", action="store_true",
                    help="with --fp8: also time mok's FP8 passes replayed from CUDA graphs")
    ap.add_argument("--plan", default="",
                    help="plan fields to pin for every case (\"key=value,...\", include/mok.h's mok_plan, "
                         "e.g. routed_cluster=2); the rest mok chooses (default: all of it)")
    ap.add_argument("--fp8-shared", type=int, choices=(0, 1), default=None,
                    help="with --fp8: the shared expert in FP8 (1) or bf16 (0) "
                         "(config.fp8_shared_expert; default: mok's default)")
    args = ap.parse_args()
    if args.iters < 50:
        print("note: fewer than 50 timed iterations: figures are indicative only")
    rank, ep = init_ranks()
    try:
        import deep_ep  # noqa: F401
        deepep_note = "DeepEP is installed but its baseline is not wired in yet"
    except ImportError:
        deepep_note = "DeepEP not installed: PyTorch+NCCL is the only baseline"
    if not grouped_mm_works():
        raise SystemExit("torch._grouped_mm does not run here: the baseline needs it")
    why_no_fp8 = scaled_grouped_mm_works() if args.fp8 else "not asked (--fp8)"
    args.torch_fp8 = not why_no_fp8
    if rank == 0:
        print(f"EP={ep}, seed {args.seed}, mok token ring {args.ring_mb} MiB; {deepep_note}")
        if args.fp8 and why_no_fp8:
            print(f"no PyTorch FP8 baseline: {why_no_fp8}")
    rows = []
    for name in args.shapes.split(","):
        for T in [int(t) for t in args.tokens.split(",")]:
            for routing in args.routing.split(","):
                shape = shape_with(name, SHAPES[name][2] // args.experts_div)
                if not fits(shape, T, ep):
                    if rank == 0:
                        print(f"skip {name} T={T} EP={ep}: does not fit one GPU's memory with the baseline")
                    continue
                # a group per case: its workspaces go when the case ends
                knobs = {"ring_bytes": args.ring_mb << 20}
                if args.fp8_shared is not None:
                    knobs["fp8_shared_expert"] = args.fp8_shared
                group = mf.Group(plan=args.plan or None, **knobs)
                try:
                    r = run_case(name, shape, T, routing, group, args)
                except torch.OutOfMemoryError:  # the same shapes on every rank: all of them land here
                    r = None
                group.destroy()
                if r is None:
                    torch.cuda.empty_cache()
                    if rank == 0:
                        print(f"skip {name} T={T} {routing} EP={ep}: out of device memory with the baseline")
                    continue
                rows.append(r)
                torch.cuda.empty_cache()
                if rank == 0:  # each row as soon as it is measured, so a cut-short run keeps it
                    print(f"row {json.dumps(r)}", flush=True)
    if rank == 0 and rows:
        os.makedirs(os.path.dirname(os.path.abspath(args.out + ".json")), exist_ok=True)
        with open(args.out + ".json", "w") as f:
            json.dump({"ep": ep, "seed": args.seed, "note": deepep_note, "rows": rows}, f, indent=1)
        try:
            chart(rows, args.out + ".png")
        except Exception as e:  # a missing matplotlib must not lose the table
            print(f"no chart: {e}")
        also = [a for a in args.also.split(",") if a]
        extra = " ".join(f"{a + ' ms':>9s} {'TFLOP/s':>8s}" for a in also)
        print(f"\n{'shape':16s} {'EP':>2s} {'T':>5s} {'routing':8s} {'pass':4s} {'mok ms':>8s} {'TFLOP/s':>8s} "
              f"{'base ms':>8s} {'TFLOP/s':>8s} {'ratio':>6s} {'rel err':>8s} {extra}")
        for r in rows:
            err = max(v for key, v in r["check"].items() if not key.startswith(("fp8", "torch_fp8")))
            for p in ("fwd", "bwd"):
                extra = " ".join(f"{r[f'{a}_{p}_ms']:9.3f} {r[f'{a}_{p}_tflops']:8.1f}" for a in also)
                print(f"{r['shape']:16s} {r['ep']:2d} {r['tokens']:5d} {r['routing']:8s} {p:4s} "
                      f"{r[f'mok_{p}_ms']:8.3f} {r[f'mok_{p}_tflops']:8.1f} {r[f'base_{p}_ms']:8.3f} "
                      f"{r[f'base_{p}_tflops']:8.1f} {r[f'base_{p}_ms'] / r[f'mok_{p}_ms']:6.2f} {err:8.1e} {extra}")
        for r in rows:  # the plan each case ran (mok_workspace_kernels)
            for text in dict.fromkeys(r.get("plans", [])):
                print(f"{r['shape']:16s} {r['ep']:2d} {r['tokens']:5d} {r['routing']:8s} plan {text}")
        for r in rows:
            if "fp8_fwd_ms" in r:
                print(f"{r['shape']:16s} {r['ep']:2d} {r['tokens']:5d} {r['routing']:8s} fwd  "
                      f"mok FP8 {r['fp8_fwd_ms']:8.3f} ms {r['fp8_fwd_tflops']:7.1f} TFLOP/s (BF16 count), "
                      f"{r['base_fwd_ms'] / r['fp8_fwd_ms']:5.2f}x PyTorch+NCCL BF16, "
                      f"y vs baseline {r['check']['fp8_y']:.1e}, host {r['fp8_fwd_host_ms']:.3f} ms"
                      f"{torch_fp8(r, 'fwd')}")
                print(f"{r['shape']:16s} {r['ep']:2d} {r['tokens']:5d} {r['routing']:8s} bwd  "
                      f"mok FP8 {r['fp8_bwd_ms']:8.3f} ms {r['fp8_bwd_tflops']:7.1f} TFLOP/s (BF16 count), "
                      f"{r['base_bwd_ms'] / r['fp8_bwd_ms']:5.2f}x PyTorch+NCCL BF16, "
                      f"dx, d_rw vs baseline {r['check']['fp8_dx']:.1e}, {r['check']['fp8_drw']:.1e}, "
                      f"host {r['fp8_bwd_host_ms']:.3f} ms{torch_fp8(r, 'bwd')}")
                print(f"{r['shape']:16s} {r['ep']:2d} {r['tokens']:5d} {r['routing']:8s} "
                      f"weights' FP8 codes per update {r['fp8_quant_ms']:.3f} ms")
                if "mx_fwd_ms" in r:
                    print(f"{r['shape']:16s} {r['ep']:2d} {r['tokens']:5d} {r['routing']:8s} MXFP8 "
                          f"weights: fwd {r['mx_fwd_ms']:8.3f} ms ({r['mx_fwd_ms'] / r['fp8_fwd_ms']:.3f}x "
                          f"block-128), bwd {r['mx_bwd_ms']:8.3f} ms ({r['mx_bwd_ms'] / r['fp8_bwd_ms']:.3f}x); "
                          f"vs baseline y {r['check']['fp8_mx_y']:.2e} (block-128 {r['check']['fp8_y']:.2e}), "
                          f"dx {r['check']['fp8_mx_dx']:.2e} ({r['check']['fp8_dx']:.2e}), d_rw "
                          f"{r['check']['fp8_mx_drw']:.2e} ({r['check']['fp8_drw']:.2e}); codes per update "
                          f"{r['mx_quant_ms']:.3f} ms (MXFP8 then conversion, no transposes: "
                          f"{r['mx_two_pass_ms']:.3f} ms; one pass bitwise: "
                          f"{bool(r['check']['fp8_mx_one_pass_bitwise'])})")
                if "fp8_graph_fwd_ms" in r:
                    for p in ("fwd", "bwd"):
                        t = r[f"fp8_graph_{p}_ms"]
                        print(f"{r['shape']:16s} {r['ep']:2d} {r['tokens']:5d} {r['routing']:8s} {p}  "
                              f"mok FP8, CUDA graph {t:8.3f} ms, {r[f'base_{p}_ms'] / t:5.2f}x PyTorch+NCCL BF16")
    dist.barrier()
    dist.destroy_process_group()
    if args.breakdown and rank == 0 and rows:
        breakdown(rows, args, deepep_note)


def torch_fp8(r, p):
    """', PyTorch FP8 <ms> ms, <ratio>x' for row r's pass p, where the row has that baseline."""
    if f"base_fp8_{p}_ms" not in r:
        return ""
    t = r[f"base_fp8_{p}_ms"]
    return f"; PyTorch FP8 {t:8.3f} ms, {t / r[f'fp8_{p}_ms']:5.2f}x"


def breakdown(rows, args, note):
    """Stage times of every measured case from `mok run --breakdown` (which starts its own process
    per GPU, after this harness has let go of the GPUs' work), printed and added to the JSON."""
    torch.cuda.empty_cache()
    for r in rows:
        cmd = [args.mok, "run", "--breakdown", "--iters", "20", "--warmup", "3", "--shape", r["model"],
               "--experts", str(r["experts"]), "--tokens", str(r["tokens"]), "--routing", r["routing"], "--seed", str(args.seed)]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        lines = done.stdout.splitlines()
        start = next((i for i, line in enumerate(lines) if "breakdown" in line), len(lines))
        r["breakdown"] = lines[start:] if done.returncode == 0 else [f"mok run failed ({done.returncode})"] + \
            done.stderr.splitlines()[-5:]
        print(f"\n{r['shape']} T={r['tokens']} {r['routing']}:")
        print("\n".join(r["breakdown"]))
    with open(args.out + ".json", "w") as f:
        json.dump({"ep": rows[0]["ep"], "seed": args.seed, "note": note, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()

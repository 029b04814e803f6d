"""quant_timing.py — the FP8 module path's weight costs and forward on one GPU, all cases in turn
for --rounds rounds, CUDA events, medians of --iters:

  two passes     quantize_weight of the three routed weights, then transpose_weights_fp8
  one pass       quantize_weights_fp8_transposed (the same bits from one read of the bf16)
  quantize x3    quantize_weight of the three alone
  transpose      transpose_weights_fp8 alone
  layer fwd      moe_forward_fp8 on the module's cached codes (the layer call)
  op fwd         moe_fp8 with the module's warm FP8WeightCache, grad on: a training forward
                 whose weights did not change
  module fwd     the mok.MoE(expert_precision="fp8") forward, its router included, cache warm

  old ...        with --old-lib, a libmok.so of an earlier tree: its two passes and transpose,
                 interleaved with the cases above in one process

The weights are the module's own (one copy on the GPU); the routing is its router's on random x.

    torchrun --standalone --nproc_per_node=1 dev/quant_timing.py --shape deepseek-v3 --tokens 7168 \
        [--old-lib /path/to/old/libmok.so]
"""
import ctypes
import argparse
import os
import statistics
import sys

import torch
import torch.distributed as dist

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, os.path.join(HERE, "..", "bench"))
import mok  # noqa: E402
import mok.functional as mf  # noqa: E402
from harness import add_shape_args, init_ranks, shape_with  # noqa: E402


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
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--old-lib", default="")
    ap.add_argument("--fwd-iters", type=int, default=30)
    args = ap.parse_args()
    rank, ep = init_ranks()
    H, I, E, k, Is = shape_with(args.shape, args.experts)
    torch.manual_seed(11 + rank)
    m = mok.MoE(H, I, num_experts=E, top_k=k, shared_intermediate_size=Is, device="cuda",
                expert_precision="fp8")
    x = torch.randn(args.tokens, H, device="cuda").bfloat16()
    w3 = (m.w_gate, m.w_up, m.w_down)
    shared = (m.shared_gate, m.shared_up, m.shared_down)
    with torch.no_grad():
        topk, rw = m.route(x)
    cache = m._fp8_cache
    codes = cache.codes(*w3, transposed=True)
    gb = sum(t.numel() * 2 for t in w3) / 1e9

    def two_passes():
        q = [t for w in w3 for t in mf.quantize_weight(w.detach())]
        mf.transpose_weights_fp8(*q)

    def one_pass():
        mf.quantize_weights_fp8_transposed(*(w.detach() for w in w3))

    def quant():
        for w in w3:
            mf.quantize_weight(w.detach())

    def transpose():
        mf.transpose_weights_fp8(*codes)

    def layer():
        mf.moe_forward_fp8(x, topk, rw, *codes, *shared, m._group.id, E)

    def op_fwd():  # the module's slot, as its forward passes it
        mf.moe_fp8(x, topk, rw, *w3, *shared, group=m._group, num_experts=E,
                   weight_cache=cache, slot=m._slot)

    def module_fwd():
        m(x)

    old_cases = ()
    if args.old_lib:
        old = ctypes.CDLL(args.old_lib)
        ptr = lambda t: ctypes.c_void_p(t.data_ptr())  # noqa: E731
        i64 = ctypes.c_int64
        stream = lambda: ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)  # noqa: E731

        def old_quantize(w):
            E_, rows, cols = w.shape
            q, sc = mf._codes_buffers(w)
            assert old.mok_quantize_weight(mf.FP8_BLOCK128, ptr(w), i64(E_), i64(rows), i64(cols),
                                           ptr(q), ptr(sc), stream()) == 0
            return q, sc

        def old_transpose(*c):
            E_, inter, hidden = c[0].shape
            gu_t, gu_s, d_t, d_s = mf._transposed_buffers(E_, inter, hidden, c[0].device)
            wt = mf._fp8_weights(*c, None, None, None)
            assert old.mok_fp8_transpose_weights(mf.FP8_BLOCK128, ctypes.byref(wt), i64(E_),
                                                 i64(inter), i64(hidden), ptr(gu_t), ptr(gu_s),
                                                 ptr(d_t), ptr(d_s), stream()) == 0
            return gu_t, gu_s, d_t, d_s

        # the old tree's bits are the new one's: checked once here
        same = all(torch.equal(a, b) for i, w in enumerate(w3)
                   for a, b in zip(old_quantize(w.detach()), codes[2 * i:2 * i + 2]))
        same = same and all(
            torch.equal(a, b) for a, b in zip(old_transpose(*codes), cache.transposed(codes)))
        if rank == 0:
            print(f"old library's codes and transposed copies bitwise this tree's: {same}")

        def old_two_passes():
            old_transpose(*[t for w in w3 for t in old_quantize(w.detach())])

        def old_transpose_only():
            old_transpose(*codes)

        old_cases = (("old two passes", old_two_passes), ("old transpose", old_transpose_only))

    cases = old_cases + (("two passes", two_passes), ("one pass", one_pass), ("quantize x3", quant),
             ("transpose", transpose))
    fwds = (("layer fwd", layer), ("op fwd", op_fwd), ("module fwd", module_fwd))
    for _, f in cases + fwds:
        f()
    torch.cuda.synchronize()
    q0 = cache.quantizations
    rows = {name: [] for name, _ in cases}
    for _ in range(args.rounds):
        for name, f in cases:
            rows[name].append(timed(f, args.iters))
    # the forwards alternate call by call (a warm card's clock moves by more than their gap)
    fwd_ms = {name: [] for name, _ in fwds}
    for _ in range(args.fwd_iters):
        for name, f in fwds:
            fwd_ms[name].append(timed(f, 1))
    if rank == 0:
        print(f"shape {args.shape} E {E} T {args.tokens}: routed bf16 weights {gb:.2f} GB; "
              f"cache quantizations during the timed forwards: {cache.quantizations - q0}")
        for name, ms in rows.items():
            print(f"  {name:12s} " + " ".join(f"{v:8.3f}" for v in ms) + " ms")
        base = statistics.median(fwd_ms["layer fwd"])
        for name, ms in fwd_ms.items():
            med = statistics.median(ms)
            print(f"  {name:12s} {med:8.3f} ms (median of {len(ms)}, alternated), "
                  f"{100 * (med / base - 1):+.1f}% against the layer call")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

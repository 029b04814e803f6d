"""gg_ab.py — A/B of the BF16 row-grouped GEMMs (forward, gate+up with SwiGLU, data gradient, data
gradient of the gate/up pair: kernels/gemm/bf16.cu, and kernels/gemm/bf16_tokens_n.cu with the
tokens on wgmma's N side where a tree has it) built into separate libraries (argv: name=path ...;
name=path@C: that entry's calls with the launch's cluster size C, gemm.h mok_gg_launch, so that
one library runs both ways, bitwise checked against each other), interleaved in one process: on
every problem each entry's real rows must equal the first's bitwise; then rounds x (each entry) x
iterations, the median per round, the median of rounds. Prints a table, a row as each problem
ends. Env GG_SHAPES, GG_OPS: comma lists of the shapes and ops to run (default all). A library
from one tree:
    nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -Xcompiler -fPIC -Iinclude -I. \\
        -shared -o gg.so kernels/gemm/bf16*.cu kernels/gemm/tmap.cu kernels/common/launch_error.cu
"""
import ctypes
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
from grouped_gemm_baseline import counts_for, median_ms  # noqa: E402

SHAPES = [  # name, experts, rows per expert, H, I, zipf (1: Zipf(1.0) by expert, 2: the harness's)
    ("dsv3_ep1", 256, 224, 7168, 2048, 0),
    ("dsv3_ep1_zipf", 256, 224, 7168, 2048, 1),
    ("dsv3_ep1_hzipf", 256, 224, 7168, 2048, 2),
    ("dsv3_ep2", 128, 448, 7168, 2048, 0),
    ("dsv3_ep2_hzipf", 128, 448, 7168, 2048, 2),
    ("qwen3", 128, 448, 2048, 768, 0),
    ("qwen3_hzipf", 128, 448, 2048, 768, 2),
    ("olmoe", 64, 896, 2048, 1024, 0),
    ("olmoe_hzipf", 64, 896, 2048, 1024, 2),
    ("glm_ep2", 80, 716, 5120, 1536, 0),
    ("glm_ep2_hzipf", 80, 716, 5120, 1536, 2),
    ("kimi_ep1_hzipf", 384, 149, 7168, 2048, 2),  # two launches of experts (256 + 128)
]


def harness_uniform_counts(e, rows, k=8, seed=23, round16=False):
    """Rows per expert drawn as the harness's uniform routing draws them (top-k of Gaussian
    logits; the same distribution, not the harness's own draw), T = e * rows / k tokens; round16:
    each count rounded down to a multiple of 16 (no partial 16-row slice)."""
    t = e * rows // k
    g = torch.Generator().manual_seed(seed * 1000)
    topk = torch.randn(t, e, generator=g).topk(k, dim=1).indices
    c = torch.bincount(topk.flatten(), minlength=e).tolist()
    return [x // 16 * 16 for x in c] if round16 else c


def harness_zipf_counts(e, rows, k=8, seed=23):
    """Rows per expert of the harness's Zipf routing (bench/harness.py: Gumbel top-k over a
    Zipf(1.2) prior, the hot experts at random indices), T = e * rows / k tokens."""
    t = e * rows // k
    g = torch.Generator().manual_seed(seed * 1000)
    prior = torch.arange(1, e + 1, dtype=torch.float32).pow(-1.2)
    perm = torch.randperm(e, generator=torch.Generator().manual_seed(seed))
    gumbel = -torch.log(-torch.log(torch.rand(t, e, generator=g).clamp_min(1e-20)))
    topk = (prior[perm].log() + gumbel).topk(k, dim=1).indices
    return torch.bincount(topk.flatten(), minlength=e).tolist()


def layout(e, rows, zipf):
    """A shape's rows per expert (rows: the mean, or the counts as a list) and its offsets: the
    experts start at multiples of 128 rows (gemm.h's layout contract). Returns (counts, offsets,
    m_total)."""
    cnt = (list(rows) if isinstance(rows, list) else
           harness_zipf_counts(e, rows) if zipf == 2 else counts_for(e, rows, zipf))
    off = [0]
    for c in cnt:
        off.append(off[-1] + (c + 127) // 128 * 128)
    return cnt, off, off[-1]


def load(path):
    lib = ctypes.CDLL(path)
    vp, i, i64, f = ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_float
    lib.mok_gg_bf16_fwd.argtypes = [vp, vp, vp, vp, vp, i, i64, i64, i64, vp, vp]
    lib.mok_gg_bf16_gate_up_swiglu.argtypes = [vp, vp, vp, vp, vp, vp, vp, i, i64, i64, i64, i, f,
                                               vp, vp]
    lib.mok_gg_bf16_dgrad.argtypes = [vp, vp, vp, vp, vp, i, i64, i64, i64, vp, vp]
    lib.mok_gg_bf16_dgrad_pair.argtypes = [vp, vp, vp, vp, vp, vp, i, i64, i64, i64, vp, vp]
    for fn in ("mok_gg_bf16_fwd", "mok_gg_bf16_gate_up_swiglu", "mok_gg_bf16_dgrad",
               "mok_gg_bf16_dgrad_pair"):
        getattr(lib, fn).restype = i
    return lib


class Launch(ctypes.Structure):  # gemm.h: mok_gg_launch
    _fields_ = [("cluster", ctypes.c_int), ("warpgroups", ctypes.c_int),
                ("max_ctas", ctypes.c_int), ("tickets", ctypes.c_void_p)]


def main():
    # name=path, or name=path@C: every call with the launch's cluster C (gemm.h, mok_gg_launch)
    libs = []
    for a in sys.argv[1:]:
        name, spec = a.split("=", 1)
        path, _, cl = spec.partition("@")
        launch = ctypes.byref(Launch(int(cl), 0, 0, None)) if cl else None
        libs.append((name, load(path), launch))
    torch.manual_seed(3)
    rounds, iters = 3, 10
    st = lambda: torch.cuda.current_stream().cuda_stream  # noqa: E731
    only = os.environ.get("GG_SHAPES", "").split(",") if os.environ.get("GG_SHAPES") else None
    ops_only = os.environ.get("GG_OPS", "").split(",") if os.environ.get("GG_OPS") else None
    print("| shape | op | bitwise | " + " | ".join(l for l, _, _ in libs) + " |", flush=True)
    for name, e, rows, H, I, zipf in SHAPES:
        if only and name not in only:
            continue
        cnt, off, m = layout(e, rows, zipf)
        d = dict(device="cuda", dtype=torch.bfloat16)
        x = torch.randn(m, H, **d)
        wg, wu = torch.randn(e, I, H, **d) * 0.02, torch.randn(e, I, H, **d) * 0.02
        wd = torch.randn(e, H, I, **d) * 0.02
        act, pre = torch.empty(m, I, **d), torch.empty(m, 2 * I, **d)
        y = torch.empty(m, H, **d)
        dy = torch.randn(m, H, **d)
        dact, dgu, dx = torch.empty(m, I, **d), torch.randn(m, 2 * I, **d), torch.empty(m, H, **d)
        real = torch.zeros(m, dtype=torch.bool, device="cuda")  # padding rows may hold anything
        for l, cn in enumerate(cnt):
            real[off[l]:off[l] + cn] = True
        offs = torch.tensor(off, dtype=torch.int32, device="cuda")
        cnts = torch.tensor(cnt, dtype=torch.int32, device="cuda")
        o, c = offs.data_ptr(), cnts.data_ptr()
        ops = {
            "gate_up": (lambda lib, ln: lib.mok_gg_bf16_gate_up_swiglu(
                x.data_ptr(), wg.data_ptr(), wu.data_ptr(), act.data_ptr(), pre.data_ptr(), o, c, e,
                m, I, H, 0, 0.0, ln, st()), (act, pre), 2.0 * m * 2 * I * H),
            "gate_up_limit": (lambda lib, ln: lib.mok_gg_bf16_gate_up_swiglu(
                x.data_ptr(), wg.data_ptr(), wu.data_ptr(), act.data_ptr(), pre.data_ptr(), o, c, e,
                m, I, H, 1, 1.0, ln, st()), (act, pre), 2.0 * m * 2 * I * H),
            "down": (lambda lib, ln: lib.mok_gg_bf16_fwd(
                act.data_ptr(), wd.data_ptr(), y.data_ptr(), o, c, e, m, H, I, ln, st()), (y,),
                2.0 * m * H * I),
            "dgrad_down": (lambda lib, ln: lib.mok_gg_bf16_dgrad(
                dy.data_ptr(), wd.data_ptr(), dact.data_ptr(), o, c, e, m, H, I, ln, st()), (dact,),
                2.0 * m * H * I),
            "dgrad_pair": (lambda lib, ln: lib.mok_gg_bf16_dgrad_pair(
                dgu.data_ptr(), wg.data_ptr(), wu.data_ptr(), dx.data_ptr(), o, c, e, m, I, H, ln,
                st()), (dx,), 2.0 * m * 2 * I * H),
        }
        for op, (call, outs, flop) in ops.items():
            if ops_only and op not in ops_only:
                continue
            ref = None
            same = True
            for _, lib, ln in libs:
                for t in outs:
                    t.fill_(float("nan"))
                assert call(lib, ln) == 0
                torch.cuda.synchronize()
                got = [t.clone() for t in outs]
                if ref is None:
                    ref = got
                else:
                    same = same and all(torch.equal(a[real].view(torch.int16), b[real].view(torch.int16))
                                        for a, b in zip(ref, got))
            times = {l: [] for l, _, _ in libs}
            for _ in range(rounds):
                for lname, lib, ln in libs:
                    times[lname].append(median_ms(lambda: call(lib, ln), iters))
            row = [name, op, "yes" if same else "NO"]
            for lname, _, _ in libs:
                t = statistics.median(times[lname])
                row.append(f"{t:.3f} ms {flop / t / 1e9:.0f}")
            print("| " + " | ".join(row) + " |", flush=True)  # kept if the call is cut short
        del x, wg, wu, wd, act, pre, y, dy, dact, dgu, dx
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()

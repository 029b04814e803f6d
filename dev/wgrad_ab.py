"""wgrad_ab.py — A/B of BF16 weight-gradient kernels built into separate libraries (argv: name=path
or name=path@cluster, the launch's cluster size, 0 the library's default; a shape whose dW rows do
not pair up runs a cluster-2 entry at the default), interleaved in one process: on each shape every
library's dW (bf16 and fp32 out, and fp32 accumulate) must equal the first's bitwise (the table's
"bitwise" column names those that do not), and the first's be close to torch's fp32 product; then
rounds x (each library) x iterations, the median per round, the median of rounds. Prints a table.
SHAPES (env): a comma-separated list of substrings; only the shapes whose names contain one run.
The layout is the layer's: every expert's rows padded to 128, its tail (the rows past its count up
to the next 16) zero, the rest of the padding NaN (never read into a result).
A library from one tree (the weight gradient and what it links):
    nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -Xcompiler -fPIC -Iinclude -I. \
        -shared -o wgrad.so kernels/gemm/bf16_wgrad.cu kernels/gemm/tmap.cu \
        kernels/common/launch_error.cu
"""
import ctypes
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
from grouped_gemm_baseline import counts_for, median_ms  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gg_ab import harness_uniform_counts, harness_zipf_counts  # noqa: E402

SHAPES = [  # name, experts, rows per expert, dW rows n, dW cols k, ld of dC, zipf (0 exact,
    # 1 Zipf(1.0), 2 the harness's Zipf, 3 the harness's uniform, 4 that rounded down to 16 rows)
    ("dsv3_ep1_down", 256, 224, 7168, 2048, 7168, 0),
    ("dsv3_ep1_gate", 256, 224, 2048, 7168, 4096, 0),
    ("dsv3_ep1_gate_zipf", 256, 224, 2048, 7168, 4096, 1),
    ("dsv3_gate_r320", 256, 320, 2048, 7168, 4096, 0),
    ("dsv3_gate_r384", 256, 384, 2048, 7168, 4096, 0),
    ("dsv3_ep2_down", 128, 448, 7168, 2048, 7168, 0),
    ("dsv3_ep2_gate", 128, 448, 2048, 7168, 4096, 0),
    ("qwen3_down", 128, 448, 2048, 768, 2048, 0),
    ("qwen3_gate", 128, 448, 768, 2048, 1536, 0),
    ("dsv3_ep1_down_hzipf", 256, 224, 7168, 2048, 7168, 2),  # 2: the harness's Zipf routing
    ("dsv3_ep1_gate_hzipf", 256, 224, 2048, 7168, 4096, 2),
    ("qwen3_down_hzipf", 128, 448, 2048, 768, 2048, 2),
    ("odd_rows", 8, 300, 192, 320, 192, 1),
    ("qwen3_gate_hu", 128, 448, 768, 2048, 1536, 3),
    ("qwen3_gate_hu16", 128, 448, 768, 2048, 1536, 4),
    ("dsv3_ep1_gate_hu", 256, 224, 2048, 7168, 4096, 3),
    ("dsv3_ep1_gate_hu16", 256, 224, 2048, 7168, 4096, 4),
]


class Launch(ctypes.Structure):  # kernels/gemm/gemm.h mok_gg_launch
    _fields_ = [("cluster", ctypes.c_int), ("warpgroups", ctypes.c_int), ("max_ctas", ctypes.c_int),
                ("tickets", ctypes.c_void_p)]


def load(path):
    lib = ctypes.CDLL(path)
    vp, i, i64 = ctypes.c_void_p, ctypes.c_int, ctypes.c_int64
    lib.mok_gg_bf16_wgrad_ld.argtypes = [vp, i64, vp, i64, vp, i, i, vp, vp, i, i64, i64, i64, vp, vp]
    lib.mok_gg_bf16_wgrad_ld.restype = i
    return lib


def main():
    libs, clusters = [], {}
    for arg in sys.argv[1:]:
        name, spec = arg.split("=", 1)
        path, _, cl = spec.partition("@")
        libs.append((name, load(path)))
        clusters[name] = int(cl or 0)
    torch.manual_seed(5)
    rounds, iters = 3, 10
    rows_out = []
    pick = [w for w in os.environ.get("SHAPES", "").split(",") if w]
    for name, e, rows, n, k, ld, zipf in SHAPES:
        if pick and not any(w in name for w in pick):
            continue
        if zipf == 2:
            cnt = harness_zipf_counts(e, rows)
        elif zipf >= 3:
            cnt = harness_uniform_counts(e, rows, round16=zipf == 4)
        else:
            cnt = counts_for(e, rows, zipf)
        off = [0]
        for c in cnt:
            off.append(off[-1] + (c + 127) // 128 * 128)
        m = off[-1]
        dc_full = torch.randn(m + 64, ld, device="cuda", dtype=torch.bfloat16)
        a = torch.randn(m + 64, k, device="cuda", dtype=torch.bfloat16)
        for ex in range(e):  # padding NaN but for the tail, zero
            for t in (dc_full, a):
                t[off[ex] + cnt[ex]:off[ex + 1]] = float("nan")
                t[off[ex] + cnt[ex]:off[ex] + (cnt[ex] + 15) // 16 * 16] = 0
        a[m:] = float("nan")  # rows past the last expert's: never read into a result
        dc_full[m:] = float("nan")
        dc = dc_full[:, :n]
        offs = torch.tensor(off, dtype=torch.int32, device="cuda")
        cnts = torch.tensor(cnt, dtype=torch.int32, device="cuda")

        launches = {l: Launch(clusters[l] if n % 256 == 0 else 0, 0, 0) for l, _ in libs}

        def call(lib, dw, fp32, acc, lname):
            st = lib.mok_gg_bf16_wgrad_ld(dc_full.data_ptr(), ld, a.data_ptr(), k, dw.data_ptr(),
                                          fp32, acc, offs.data_ptr(), cnts.data_ptr(), e, m, n, k,
                                          ctypes.byref(launches[lname]),
                                          torch.cuda.current_stream().cuda_stream)
            assert st == 0, st

        def outputs(lib, lname):
            d16 = torch.full((e, n, k), float("nan"), device="cuda", dtype=torch.bfloat16)
            d32 = torch.full((e, n, k), float("nan"), device="cuda", dtype=torch.float32)
            call(lib, d16, 0, 0, lname)
            call(lib, d32, 1, 0, lname)
            acc = torch.ones((e, n, k), device="cuda", dtype=torch.float32)
            call(lib, acc, 1, 1, lname)
            torch.cuda.synchronize()
            return d16, d32, acc

        ref = outputs(libs[0][1], libs[0][0])
        err = 0.0
        for ex in (0, e // 2, e - 1):  # against torch's fp32 product
            s, c = off[ex], cnt[ex]
            r = dc[s:s + c].float().t() @ a[s:s + c].float()
            err = max(err, ((ref[1][ex] - r).abs().max() / (r.abs().max() + 1e-6)).item())
        differ = []  # the libraries whose outputs are not bitwise the first's
        for lname, lib in libs[1:]:
            o = outputs(lib, lname)
            if not (torch.equal(o[0].view(torch.int16), ref[0].view(torch.int16)) and
                    torch.equal(o[1].view(torch.int32), ref[1].view(torch.int32)) and
                    torch.equal(o[2].view(torch.int32), ref[2].view(torch.int32))):
                differ.append(lname)
            del o
        d16 = ref[0]
        del ref
        times = {l: [] for l, _ in libs}
        for _ in range(rounds):
            for lname, lib in libs:
                times[lname].append(median_ms(lambda: call(lib, d16, 0, 0, lname), iters))
        flop = 2.0 * sum(cnt) * n * k
        row = [name, "NO: " + ",".join(differ) if differ else "yes", f"{err:.1e}"]
        for lname, _ in libs:
            t = statistics.median(times[lname])
            row.append(f"{t:.3f} ms {flop / t / 1e9:.0f}")
        rows_out.append(row)
        del d16
        torch.cuda.empty_cache()
    print("| shape | bitwise | rel err | " + " | ".join(l for l, _ in libs) + " |")
    for r in rows_out:
        print("| " + " | ".join(r) + " |")


if __name__ == "__main__":
    main()

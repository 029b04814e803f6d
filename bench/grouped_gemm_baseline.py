"""grouped_gemm_baseline.py — the baselines for bench_grouped_gemm: torch._grouped_mm and a dense
cuBLAS product (torch.matmul, same total rows) on the same shapes and row counts, read from the
counts file that bench_grouped_gemm writes. Random bf16 data, warm-up, CUDA events, median.

usage: python3 bench/grouped_gemm_baseline.py gg_counts.txt [iters]
prints: shape, torch._grouped_mm TFLOP/s, dense TFLOP/s (on real rows)."""
import sys

import torch


def median_ms(fn, warm=3, iters=20):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(iters + 1)]
    ev[0].record()
    for i in range(iters):
        fn()
        ev[i + 1].record()
    torch.cuda.synchronize()
    t = sorted(ev[i].elapsed_time(ev[i + 1]) for i in range(iters))
    return t[iters // 2]


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "gg_counts.txt"
    iters = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}")
    print(f"{'shape':22s} {'gmm_ms':>8s} {'gmm_TF':>8s} {'dense_ms':>8s} {'dense_TF':>8s}")
    dense_done = {}
    for line in open(path):
        f = line.split()
        name, n, k, e = f[0], int(f[1]), int(f[2]), int(f[3])
        counts = [int(x) for x in f[4:4 + e]]
        m = sum(counts)
        flop = 2.0 * m * n * k
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(e, n, k, device="cuda", dtype=torch.bfloat16) * 0.05
        offs = torch.tensor(counts, device="cuda", dtype=torch.int32).cumsum(0).to(torch.int32)
        wt = w.transpose(-2, -1)
        try:
            gmm = median_ms(lambda: torch._grouped_mm(a, wt, offs=offs), iters=iters)
            gmm_tf = flop / gmm * 1e-9
        except Exception as ex:  # report, keep going
            print(f"{name}: torch._grouped_mm failed: {ex}")
            gmm, gmm_tf = float("nan"), float("nan")
        key = (m, n, k)
        if key not in dense_done:
            b = w[0].t()
            dense = median_ms(lambda: torch.matmul(a, b), iters=iters)
            dense_done[key] = dense
        dense = dense_done[key]
        print(f"{name:22s} {gmm:8.3f} {gmm_tf:8.1f} {dense:8.3f} {flop / dense * 1e-9:8.1f}",
              flush=True)
        del a, w, wt, offs
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()

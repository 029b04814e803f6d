"""gemm_tile_overhead.py — where a grouped GEMM's time goes besides its main loop, and at what
clock: two measurements on one GPU, in one process.

1. K sweep. The DeepSeek-V3 EP8 layout (32 experts x 1792 rows, N 4096) at K = 1024 ... 7168,
   mok's FP8 plain product, FP8 gate+up with SwiGLU, BF16 plain, and dense cuBLAS FP8
   (torch._scaled_mm on the same M, N, K) interleaved round by round. A line through time(K)
   splits each kernel's time into a part proportional to K (the main loop) and a part that is
   not (per tile: epilogue, drains, tile changes; per launch: ramp and tail). The intercept is
   printed as 128-K blocks' worth of main loop per tile: the epilogue's cost in the main loop's
   own units.
2. Clocks. Each kernel of the EP8 gate+up shape (K 7168) runs back to back for a few seconds
   while nvidia-smi samples the SM clock and the board power; TFLOP/s, median clock and power,
   and FLOPs per clock and SM, so that a kernel slower at the same clock (work per clock) is told
   apart from one the card clocks down (power). The dense products multiply every row by one
   expert's weights (the same M, N, K; their B stays in L2), as in grouped_gemm_baseline.py.

   --variant LABEL:LIB adds a sustained phase of the FP8 gate+up from another build of the
   library (an experimental change to a kernel, built by `make gg-lib BUILD=dir` in its own
   tree), between the default's phases, so that the two builds share the card's state.

usage: python3 bench/gemm_tile_overhead.py [--lib libmok_gg.so] [--rounds R] [--iters I]
       [--seconds S] [--no-sweep] [--variant LABEL:LIB]..."""
import argparse
import os
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import grouped_gemm_baseline as gb  # noqa: E402

E, ROWS, N = 32, 1792, 4096
KS = (1024, 2048, 4096, 7168)


def load(path):
    return gb.load_lib(path)


def make(lib, k):
    """The kernels of one K, on fresh random data; returns {name: fn}, flop."""
    dev = "cuda"
    m = E * ROWS
    inter = N // 2
    x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
    w = torch.randn(E, N, k, device=dev, dtype=torch.bfloat16) * 0.05
    d_off = torch.arange(0, m + 1, ROWS, device=dev, dtype=torch.int32)[:E + 1]
    d_cnt = torch.full((E,), ROWS, device=dev, dtype=torch.int32)
    out = torch.empty(m, N, device=dev, dtype=torch.bfloat16)
    act = torch.empty(m, inter, device=dev, dtype=torch.bfloat16)
    qa = torch.empty(m, k, device=dev, dtype=torch.uint8)
    sa = torch.empty(k // 128, m, device=dev, dtype=torch.float32)
    qw = torch.empty(E, N, k, device=dev, dtype=torch.uint8)
    sw = torch.empty(E, N // 128, k // 128, device=dev, dtype=torch.float32)
    st = torch.cuda.current_stream().cuda_stream
    assert lib.mok_fp8_quant_act(x.data_ptr(), qa.data_ptr(), sa.data_ptr(), m, k, st) == 0
    assert lib.mok_fp8_quant_weight(w.data_ptr(), qw.data_ptr(), sw.data_ptr(), E, N, k,
                                    st) == 0
    qg, qu = qw[:, :inter].contiguous(), qw[:, inter:].contiguous()
    sg, su = sw[:, :inter // 128].contiguous(), sw[:, inter // 128:].contiguous()
    wg, wu = w[:, :inter].contiguous(), w[:, inter:].contiguous()
    a8 = x.to(torch.float8_e4m3fn)
    b8 = w[0].to(torch.float8_e4m3fn).t()
    one = torch.ones((), device=dev, dtype=torch.float32)
    keep = (x, w, out, act, qa, sa, qw, sw, qg, qu, sg, su, wg, wu, a8, b8, one, d_off, d_cnt)

    def ok(s):
        assert s == 0, s

    fns = {
        "fp8_plain": lambda: ok(lib.mok_gg_fp8_fwd(qa.data_ptr(), sa.data_ptr(), qw.data_ptr(),
                                                   sw.data_ptr(), out.data_ptr(), d_off.data_ptr(),
                                                   d_cnt.data_ptr(), E, m, N, k, None, st)),
        "fp8_swiglu": lambda: ok(lib.mok_gg_fp8_gate_up_swiglu(
            qa.data_ptr(), sa.data_ptr(), qg.data_ptr(), sg.data_ptr(), qu.data_ptr(),
            su.data_ptr(), act.data_ptr(), None, d_off.data_ptr(), d_cnt.data_ptr(), E, m, inter,
            k, 0, 0.0, None, st)),
        "dense_fp8": lambda: torch._scaled_mm(a8, b8, scale_a=one, scale_b=one,
                                              out_dtype=torch.bfloat16),
        "bf16_swiglu": lambda: ok(lib.mok_gg_bf16_gate_up_swiglu(
            x.data_ptr(), wg.data_ptr(), wu.data_ptr(), act.data_ptr(), None, d_off.data_ptr(),
            d_cnt.data_ptr(), E, m, inter, k, 0, 0.0, None, st)),
        "dense_bf16": lambda: torch.matmul(x, w[0].t()),
    }
    return fns, 2.0 * m * N * k, keep


def k_sweep(lib, rounds, iters):
    times = {}
    for k in KS:
        fns, flop, keep = make(lib, k)
        res = {key: [] for key in fns}
        for _ in range(rounds):
            for key, fn in fns.items():
                res[key].append(gb.median_ms(fn, iters))
        for key, v in res.items():
            times.setdefault(key, {})[k] = sorted(v)[len(v) // 2]
        del fns, keep
        torch.cuda.empty_cache()
    tiles = E * (ROWS // 128) * (N // 256)  # 128 x 256 output tiles (mok's FP8 and BF16)
    waves = tiles / torch.cuda.get_device_properties(0).multi_processor_count
    print(f"K sweep: {E} experts x {ROWS} rows, N {N}; {tiles} tiles of 128 x 256 "
          f"({waves:.1f} per SM); ms, TFLOP/s; a line through ms(K): ms per 128 K, the fixed "
          f"ms, and the fixed part in 128-K blocks of main loop per tile")
    print(f"{'kernel':12s} " + " ".join(f"{'K' + str(k):>15s}" for k in KS) +
          f" {'ms/128K':>8s} {'fixed ms':>9s} {'blocks/tile':>11s}")
    for key, tk in times.items():
        xs, ys = list(tk.keys()), list(tk.values())
        n = len(xs)
        mx, my = sum(xs) / n, sum(ys) / n
        slope = sum((a - mx) * (b - my) for a, b in zip(xs, ys)) / sum((a - mx) ** 2 for a in xs)
        fixed = my - slope * mx
        per_block = slope * 128
        cells = " ".join(f"{tk[k]:7.3f} {2.0 * E * ROWS * N * k / tk[k] * 1e-9:7.1f}" for k in KS)
        print(f"{key:12s} {cells} {per_block:8.4f} {fixed:9.4f} {fixed / per_block:11.2f}")


def nvsmi_start(path):
    """nvidia-smi sampling the GPU this process runs on (the first visible one: an index or a
    UUID, both of which -i takes)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip() or "0"
    return subprocess.Popen(
        ["nvidia-smi", "--query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu",
         "--format=csv,noheader,nounits", "-lms", "50", "-i", visible, "-f", path])


def parse_samples(path):
    out = []
    for line in open(path):
        f = [s.strip() for s in line.split(",")]
        if len(f) < 4:
            continue
        try:
            t = time.mktime(time.strptime(f[0].split(".")[0], "%Y/%m/%d %H:%M:%S"))
            t += float("0." + f[0].split(".")[1]) if "." in f[0] else 0.0
            out.append((t, float(f[1]), float(f[2]), float(f[3])))
        except (ValueError, IndexError):
            continue
    return out


def back_to_back(fn, seconds, batch):
    """fn() three times, then in batches of `batch` calls until `seconds` have passed: (calls,
    their GPU milliseconds, and the host's start and end times, to match the clock samples)."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    t0, n = time.time(), 0
    ev0 = torch.cuda.Event(enable_timing=True)
    ev1 = torch.cuda.Event(enable_timing=True)
    ev0.record()
    while time.time() - t0 < seconds:
        for _ in range(batch):
            fn()
        n += batch
        torch.cuda.synchronize()
    ev1.record()
    torch.cuda.synchronize()
    return n, ev0.elapsed_time(ev1), t0, time.time()


def clocks(lib, seconds, variants):
    """Sustained phases: (label, fn) pairs run back to back, the clock sampled meanwhile."""
    fns, flop, keep = make(lib, 7168)
    phases = [(key, fns[key]) for key in
              ("fp8_swiglu", "dense_fp8", "fp8_plain", "bf16_swiglu", "dense_bf16")]
    others = []
    for label, path in variants:
        vfns, _, vkeep = make(load(path), 7168)
        others.append(vkeep)
        phases.append((label, vfns["fp8_swiglu"]))
    phases += [("fp8_swiglu", fns["fp8_swiglu"]), ("dense_fp8", fns["dense_fp8"])]
    path = "/tmp/mok_clock_samples.csv"
    if os.path.exists(path):
        os.remove(path)
    smi = nvsmi_start(path)
    time.sleep(1.0)
    done = []
    for label, fn in phases:
        n, ms, t0, t1 = back_to_back(fn, seconds, 8)
        done.append((label, t0, t1, flop * n / (ms * 1e-3) * 1e-12))
        time.sleep(0.5)
    time.sleep(0.3)
    smi.terminate()
    smi.wait()
    samples = parse_samples(path)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    print(f"clocks: EP8 gate+up shape (K 7168), each kernel back to back for {seconds} s, "
          f"nvidia-smi every 50 ms (the first and last 0.3 s of a phase dropped)")
    print(f"{'kernel':16s} {'TFLOP/s':>8s} {'MHz':>6s} {'W':>6s} {'C':>4s} {'FLOP/clk/SM':>12s} "
          f"{'samples':>7s}")
    for label, t0, t1, tf in done:
        s = [x for x in samples if t0 + 0.3 <= x[0] <= t1 - 0.3]
        if not s:
            print(f"{label:16s} {tf:8.1f}   (no clock samples)")
            continue
        mhz = sorted(x[1] for x in s)[len(s) // 2]
        watts = sorted(x[2] for x in s)[len(s) // 2]
        temp = sorted(x[3] for x in s)[len(s) // 2]
        per_clk = tf * 1e12 / (mhz * 1e6) / sms
        print(f"{label:16s} {tf:8.1f} {mhz:6.0f} {watts:6.0f} {temp:4.0f} {per_clk:12.0f} "
              f"{len(s):7d}")
    del fns, keep, others


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lib", default="build/libmok_gg.so")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--no-sweep", action="store_true")
    ap.add_argument("--variant", action="append", default=[],
                    help="LABEL:LIB, an FP8 gate+up phase from another build of the library")
    a = ap.parse_args()
    variants = []
    for v in a.variant:
        label, sep, path = v.partition(":")
        if not sep or not path:
            ap.error(f"--variant {v}: LABEL:LIB")
        variants.append((label, path))
    lib = load(a.lib)
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}")
    if not a.no_sweep:
        k_sweep(lib, a.rounds, a.iters)
    clocks(lib, a.seconds, variants)


if __name__ == "__main__":
    main()

"""grouped_gemm_baseline.py — mok's grouped GEMMs against torch._grouped_mm and a dense cuBLAS
product (torch.matmul on the same total rows), timed in ONE process, interleaved round by round
(torch, mok, dense, ...), so that clocks and temperature are the same for all of them.

mok's kernels are called through ctypes from the library built by `make gg-lib`
(build/libmok_gg.so), each with its default launch options (a NULL mok_gg_launch). Random bf16 data (never zeros), warm-up, CUDA events, median per round,
then the median over rounds. TFLOP/s = 2 * real_rows * N * K / time.

usage: python3 bench/grouped_gemm_baseline.py [build/libmok_gg.so] [rounds] [iters]"""
import ctypes
import sys

import torch

SHAPES = [
    # name, experts, rows per expert (mean for zipf), zipf, N (gate+up: 2*I), K, gate+up
    ("dsv3_ep8_gateup", 32, 1792, 0, 4096, 7168, 1),
    ("dsv3_ep8_down", 32, 1792, 0, 7168, 2048, 0),
    ("dsv3_ep2_gateup", 128, 448, 0, 4096, 7168, 1),
    ("dsv3_ep2_down", 128, 448, 0, 7168, 2048, 0),
    ("qwen3_gateup", 128, 256, 0, 1536, 2048, 1),
    ("qwen3_down", 128, 256, 0, 2048, 768, 0),
    ("dsv3_ep8_gateup_zipf", 32, 1792, 1, 4096, 7168, 1),
    ("dsv3_ep8_down_zipf", 32, 1792, 1, 7168, 2048, 0),
    ("qwen3_gateup_zipf", 128, 256, 1, 1536, 2048, 1),
    ("qwen3_down_zipf", 128, 256, 1, 2048, 768, 0),
    ("dsv2lite_dact", 64, 384, 0, 1408, 2048, 0),
]


def counts_for(e, rows, zipf):
    """Same rule as bench_grouped_gemm.cu: uniform, or Zipf(1.0) with the same total."""
    if not zipf:
        return [rows] * e
    total = e * rows
    w = sum(1.0 / (i + 1) for i in range(e))
    c = [int(total * (1.0 / (i + 1)) / w) for i in range(e)]
    c[0] += total - sum(c)
    return c


def median_ms(fn, iters, warm=2):
    for _ in range(warm):
        fn()
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(iters + 1)]
    ev[0].record()
    for i in range(iters):
        fn()
        ev[i + 1].record()
    torch.cuda.synchronize()
    t = sorted(ev[i].elapsed_time(ev[i + 1]) for i in range(iters))
    return t[iters // 2]


def load_lib(path):
    """The entry points this file and gemm_tile_overhead.py call; the GEMMs' argument before the
    stream is the launch (a mok_gg_launch pointer: None for the defaults)."""
    lib = ctypes.CDLL(path)
    vp, i32p, i, i64 = ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int64
    lp = ctypes.c_void_p  # const mok_gg_launch *
    lib.mok_gg_bf16_fwd.argtypes = [vp, vp, vp, i32p, i32p, i, i64, i64, i64, lp, vp]
    lib.mok_gg_bf16_gate_up_swiglu.argtypes = [vp, vp, vp, vp, vp, i32p, i32p, i, i64, i64, i64,
                                               i, ctypes.c_float, lp, vp]
    lib.mok_fp8_quant_act.argtypes = [vp, vp, vp, i64, i64, vp]
    lib.mok_fp8_quant_weight.argtypes = [vp, vp, vp, i64, i64, i64, vp]
    lib.mok_gg_fp8_fwd.argtypes = [vp, vp, vp, vp, vp, i32p, i32p, i, i64, i64, i64, lp, vp]
    lib.mok_gg_fp8_gate_up_swiglu.argtypes = [vp, vp, vp, vp, vp, vp, vp, vp, i32p, i32p, i, i64,
                                              i64, i64, i, ctypes.c_float, lp, vp]
    for f in ("mok_gg_bf16_fwd", "mok_gg_bf16_gate_up_swiglu", "mok_fp8_quant_act",
              "mok_fp8_quant_weight", "mok_gg_fp8_fwd", "mok_gg_fp8_gate_up_swiglu"):
        getattr(lib, f).restype = i
    return lib


def main():
    lib_path = sys.argv[1] if len(sys.argv) > 1 else "build/libmok_gg.so"
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    iters = int(sys.argv[3]) if len(sys.argv) > 3 else 10
    lib = load_lib(lib_path)
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}; "
          f"{rounds} interleaved rounds x {iters} iterations, median")
    hdr = (f"{'shape':22s} {'torch_gmm':>10s} {'mok':>10s} {'mok/torch':>9s} {'mok_fwd':>9s} "
           f"{'dense':>8s} {'mok_fp8':>9s} {'dense8':>8s}")
    print(hdr + "   (TFLOP/s on real rows; mok, mok_fp8 = fused SwiGLU for gate+up)")
    for name, e, rows, zipf, n, k, gateup in SHAPES:
        counts = counts_for(e, rows, zipf)
        m = sum(counts)
        offs_pad, o = [], 0
        for c in counts:
            offs_pad.append(o)
            o += (c + 127) // 128 * 128
        offs_pad.append(o)
        m_total = o
        flop = 2.0 * m * n * k
        dev = "cuda"
        x_pad = torch.randn(m_total, k, device=dev, dtype=torch.bfloat16)
        real = torch.cat([torch.arange(offs_pad[i], offs_pad[i] + counts[i], device=dev)
                          for i in range(e)])
        x = x_pad[real].contiguous()
        w = torch.randn(e, n, k, device=dev, dtype=torch.bfloat16) * 0.05
        wt = w.transpose(-2, -1)
        offs = torch.tensor(counts, device=dev, dtype=torch.int32).cumsum(0).to(torch.int32)
        d_off = torch.tensor(offs_pad, device=dev, dtype=torch.int32)
        d_cnt = torch.tensor(counts, device=dev, dtype=torch.int32)
        out = torch.empty(m_total, n, device=dev, dtype=torch.bfloat16)
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        if gateup:
            inter = n // 2
            wg = w[:, :inter].contiguous()
            wu = w[:, inter:].contiguous()
            act = torch.empty(m_total, inter, device=dev, dtype=torch.bfloat16)

            def mok():
                st = lib.mok_gg_bf16_gate_up_swiglu(x_pad.data_ptr(), wg.data_ptr(), wu.data_ptr(),
                                                    act.data_ptr(), None, d_off.data_ptr(),
                                                    d_cnt.data_ptr(), e, m_total, inter, k, 0,
                                                    0.0, None, stream)
                assert st == 0, st
        else:
            mok = None

        def mok_fwd():
            st = lib.mok_gg_bf16_fwd(x_pad.data_ptr(), w.data_ptr(), out.data_ptr(),
                                     d_off.data_ptr(), d_cnt.data_ptr(), e, m_total, n, k, None,
                                     stream)
            assert st == 0, st

        # FP8 block-scaled: quantize once (mok's kernels), then time mok's fp8 GEMM; the dense
        # cuBLAS fp8 product (torch._scaled_mm, per-tensor scales) is the fp8 ceiling.
        f8 = torch.float8_e4m3fn
        qa = torch.empty(m_total, k, device=dev, dtype=torch.uint8)
        sa = torch.empty(k // 128, (m_total + 127) // 128 * 128, device=dev, dtype=torch.float32)
        qw = torch.empty(e, n, k, device=dev, dtype=torch.uint8)
        sw = torch.empty(e, n // 128, k // 128, device=dev, dtype=torch.float32)
        assert lib.mok_fp8_quant_act(x_pad.data_ptr(), qa.data_ptr(), sa.data_ptr(), m_total,
                                     k, stream) == 0
        assert lib.mok_fp8_quant_weight(w.data_ptr(), qw.data_ptr(), sw.data_ptr(), e, n, k,
                                        stream) == 0
        if gateup:
            qg, qu = qw[:, :inter].contiguous(), qw[:, inter:].contiguous()
            sg, su = sw[:, :inter // 128].contiguous(), sw[:, inter // 128:].contiguous()

            def mok8():
                st = lib.mok_gg_fp8_gate_up_swiglu(qa.data_ptr(), sa.data_ptr(), qg.data_ptr(),
                                                   sg.data_ptr(), qu.data_ptr(), su.data_ptr(),
                                                   act.data_ptr(), None, d_off.data_ptr(),
                                                   d_cnt.data_ptr(), e, m_total, inter, k, 0, 0.0,
                                                   None, stream)
                assert st == 0, st
        else:
            def mok8():
                st = lib.mok_gg_fp8_fwd(qa.data_ptr(), sa.data_ptr(), qw.data_ptr(), sw.data_ptr(),
                                        out.data_ptr(), d_off.data_ptr(), d_cnt.data_ptr(), e,
                                        m_total, n, k, None, stream)
                assert st == 0, st
        a8 = x.to(f8)
        b8 = w[0].to(f8).t()
        one = torch.ones((), device=dev, dtype=torch.float32)

        b = w[0].t()
        fns = {
            "mok8": mok8,
            "dense8": lambda: torch._scaled_mm(a8, b8, scale_a=one, scale_b=one,
                                               out_dtype=torch.bfloat16),
            "torch": lambda: torch._grouped_mm(x, wt, offs=offs),
            "mok_fwd": mok_fwd,
            "dense": lambda: torch.matmul(x, b),
        }
        if mok:
            fns["mok"] = mok
        res = {key: [] for key in fns}
        for _ in range(rounds):
            for key, fn in fns.items():
                res[key].append(median_ms(fn, iters))
        tf = {key: flop / sorted(v)[len(v) // 2] * 1e-9 for key, v in res.items()}
        main_tf = tf.get("mok", tf["mok_fwd"])
        print(f"{name:22s} {tf['torch']:10.1f} {main_tf:10.1f} {main_tf / tf['torch']:9.3f} "
              f"{tf['mok_fwd']:9.1f} {tf['dense']:8.1f} {tf['mok8']:9.1f} {tf['dense8']:8.1f}",
              flush=True)
        del x_pad, x, w, wt, out, fns, qa, sa, qw, sw, a8, b8
        if gateup:
            del wg, wu, act, qg, qu, sg, su
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()

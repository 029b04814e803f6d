"""wgrad_power.py — is the BF16 weight gradient held by the card's power cap or by its own
latency? Each phase runs back to back for SECONDS while nvidia-smi samples the SM clock and the
board power (bench/gemm_tile_overhead.py's sampler): the weight gradient of DeepSeek-V3's EP=1
down and gate shapes (dev/wgrad_ab.py's layout, a library built from kernels/gemm/bf16_wgrad.cu),
a dense bf16 torch.mm as the tensor-bound reference, and a 7.5 GB fill, copy and sum as the
memory-bound ones.
Prints per phase: TFLOP/s or TB/s, median MHz, median W, and FLOPs per clock and SM.

Then a least-squares fit of power = P0 + a TFLOP/s + b TB/s (HBM bytes each phase must move, from
its sizes) over the phases: what a TFLOP/s and a TB/s cost the card in watts.

usage: python3 dev/wgrad_power.py NAME=LIB... [SECONDS]   (the first library's shapes: down, gate;
       the others' down only: dev/wgrad_probes.sh's copies with a part taken out)"""
import ctypes
import os
import statistics
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "bench"))
sys.path.insert(0, HERE)
from gemm_tile_overhead import back_to_back, nvsmi_start, parse_samples  # noqa: E402
from wgrad_ab import Launch, load  # noqa: E402


def wgrad_fn(lib, e, rows, n, k, ld):
    m = e * 256  # 224 rows padded to 256 per expert, the tail zero (no tail at 224)
    dc = torch.randn(m, ld, device="cuda", dtype=torch.bfloat16)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    offs = torch.arange(0, m + 1, 256, dtype=torch.int32, device="cuda")
    cnts = torch.full((e,), rows, dtype=torch.int32, device="cuda")
    dw = torch.empty((e, n, k), device="cuda", dtype=torch.bfloat16)
    launch = Launch(0, 0, 0)
    stream = torch.cuda.current_stream().cuda_stream

    def fn():
        st = lib.mok_gg_bf16_wgrad_ld(dc.data_ptr(), ld, a.data_ptr(), k, dw.data_ptr(), 0, 0,
                                      offs.data_ptr(), cnts.data_ptr(), e, m, n, k,
                                      ctypes.byref(launch), stream)
        assert st == 0, st
    hbm = e * n * k * 2 + m * ld * 2 + m * k * 2  # dW written, dC and A read once
    return fn, 2.0 * e * rows * n * k, hbm, (dc, a, dw)


def sustained(fn, seconds, tmp):
    """fn back to back for `seconds`, nvidia-smi sampling meanwhile: (ms per call, median MHz,
    median W over the samples from 0.5 s in)."""
    proc = nvsmi_start(tmp)
    time.sleep(0.3)
    calls, ms, t0, t_end = back_to_back(fn, seconds, 5)
    proc.terminate()
    proc.wait()
    s = [x for x in parse_samples(tmp) if t0 + 0.5 <= x[0] <= t_end]
    mhz = statistics.median(x[1] for x in s) if s else float("nan")
    watts = statistics.median(x[2] for x in s) if s else float("nan")
    return ms / calls, mhz, watts


def main():
    libs = [a.split("=", 1) for a in sys.argv[1:] if "=" in a]
    rest = [a for a in sys.argv[1:] if "=" not in a]
    seconds = float(rest[0]) if rest else 3.0
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    tmp = os.environ.get("OUT", "/tmp") + "/wgrad_power_smi.csv"
    rows = []  # name, ms, TFLOP/s, TB/s, MHz, W

    def phase(name, fn, flop, hbm):
        ms, mhz, w = sustained(fn, seconds, tmp)
        rows.append((name, ms, flop / ms * 1e-9, hbm / ms * 1e-9, mhz, w))

    for i, (lname, path) in enumerate(libs):
        lib = load(path)
        shapes = [("down", (256, 224, 7168, 2048, 7168))]
        if i == 0:
            shapes.append(("gate", (256, 224, 2048, 7168, 4096)))
        for sname, shape in shapes:
            fn, flop, hbm, keep = wgrad_fn(lib, *shape)
            e, _, n, k, _ = shape
            if lname == "nomma":  # the probe without tensor work
                flop = 0.0
            if lname == "nostore":  # the probe whose dW is never written
                hbm -= e * n * k * 2
            phase(f"wgrad {lname} dsv3 ep1 {sname}", fn, flop, hbm)
            del keep, fn
            torch.cuda.empty_cache()
    x = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    y = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    phase("dense torch.mm 8192^3", lambda: torch.mm(x, y), 2.0 * 8192 ** 3, 0.0)
    del x, y
    buf = torch.empty(7168 * 2048 * 256, device="cuda", dtype=torch.bfloat16)
    nb = buf.numel() * 2
    phase("fill 7.5 GB", lambda: buf.fill_(1.0), 0.0, nb)
    half = buf.numel() // 2
    src, dst = buf[:half], buf[half:]
    phase("copy 3.75 GB", lambda: dst.copy_(src), 0.0, nb)
    phase("sum 7.5 GB", lambda: torch.sum(buf, dtype=torch.float32), 0.0, nb)
    del buf, src, dst
    print("| phase | ms per call | TFLOP/s | HBM TB/s | MHz | W | FLOP per clock and SM |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        fpc = r[2] * 1e12 / (r[4] * 1e6) / sms
        print(f"| {r[0]} | {r[1]:.3f} | {r[2]:.0f} | {r[3]:.2f} | {r[4]:.0f} | {r[5]:.0f} | {fpc:.0f} |")
    # power = P0 + a TFLOP/s + b TB/s, least squares over the phases
    A = torch.tensor([[1.0, r[2], r[3]] for r in rows], dtype=torch.float64)
    p = torch.tensor([r[5] for r in rows], dtype=torch.float64)
    coef = torch.linalg.lstsq(A, p.unsqueeze(1)).solution.squeeze(1)
    res = (A @ coef - p).tolist()
    print(f"fit: P0 {coef[0]:.0f} W, {coef[1]:.3f} W per TFLOP/s, {coef[2]:.1f} W per TB/s; "
          f"residuals " + " ".join(f"{x:+.0f}" for x in res))


if __name__ == "__main__":
    main()

"""digest.py — a checksum of one layer step's outputs and gradients on fixed inputs, BF16 and FP8,
to compare two builds bit for bit: MOK_TREE names the checkout whose Python package, benchmark
helpers and library (MOK_LIBRARY, default its build/libmok.so) run.

    MOK_TREE=/path/to/tree torchrun --standalone --nproc_per_node=1 dev/digest.py deepseek-v3 128
"""
import os
import sys

import torch

TREE = os.path.abspath(os.environ.get("MOK_TREE", os.path.join(os.path.dirname(__file__), "..")))
os.environ.setdefault("MOK_LIBRARY", os.path.join(TREE, "build", "libmok.so"))
sys.path.insert(0, os.path.join(TREE, "python"))
sys.path.insert(0, os.path.join(TREE, "bench"))
import mok.functional as mf  # noqa: E402
from harness import fp8_weights, init_ranks, make_inputs, shape_with  # noqa: E402


def digest(tensors):
    """Position-weighted sum of the tensors' 16-bit words (their bits, in order)."""
    s = 0
    for t in tensors:
        v = t.reshape(-1).view(torch.int16)
        for i in range(0, v.numel(), 1 << 26):
            c = v[i:i + (1 << 26)].to(torch.int64)
            pos = torch.arange(i, i + c.numel(), device=c.device, dtype=torch.int64) % 65521 + 1
            s = (s + int((c * pos).sum().item())) % (1 << 61)
    return s


def main():
    name, experts = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 0
    rank, ep = init_ranks()
    shape = shape_with(name, experts)
    E = shape[2]
    x, topk, rw, w, dy = make_inputs(shape, 7168, "uniform", rank, ep, 11)
    wl = [w[n] for n in ("w_gate", "w_up", "w_down", "ws_gate", "ws_up", "ws_down")]
    group = mf.Group()
    y = mf.moe_forward(x, topk, rw, *wl, group.id, E, 0.0)
    g = [t for t in mf.moe_backward(dy, x, topk, rw, *wl, group.id, E, 0.0) if t is not None]
    bf16 = digest([y] + [t.float().to(torch.bfloat16) if t.dtype != torch.bfloat16 else t
                         for t in g])
    codes, shared = fp8_weights(w)
    t8 = mf.transpose_weights_fp8(*codes)
    y8 = mf.moe_forward_fp8(x, topk, rw, *codes, *shared, group.id, E)
    g8 = [t for t in mf.moe_backward_fp8(dy, x, topk, rw, *codes, t8, *shared, group.id, E)
          if t is not None]
    fp8 = digest([y8] + [t.float().to(torch.bfloat16) if t.dtype != torch.bfloat16 else t
                         for t in g8])
    if rank == 0:
        print(f"digest {name} E={E}: bf16 {bf16:#x} fp8 {fp8:#x}", flush=True)
    group.destroy()


if __name__ == "__main__":
    main()

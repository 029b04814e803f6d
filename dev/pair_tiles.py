"""pair_tiles.py — CTA tiles of the BF16 row-grouped kernel in cluster pairs, before and after the
leftover units (tile_scheduler.h gg_decode_pair), per 128-column sweep: real row tiles; pairs that
held an expert's odd last tile beside an empty one (2 ceil(m / 2) per expert); pairs plus leftovers
two to a unit (2 floor(m / 2) per expert + the leftovers rounded up to even). Routing as the
harness draws it (bench/harness.py, on the CPU's generator: uniform top-k of Gaussian logits, or
Gumbel top-k over a Zipf(1.2) prior), seed 23. argv: shape:experts:tokens ... (default the
session's three)."""
import math
import sys

import torch


def counts(t, e, k, zipf, seed=23):
    g = torch.Generator().manual_seed(seed * 1000)
    logits = torch.randn(t, e, generator=g)
    if zipf:
        prior = torch.arange(1, e + 1, dtype=torch.float32).pow(-1.2)
        perm = torch.randperm(e, generator=torch.Generator().manual_seed(seed))
        gumbel = -torch.log(-torch.log(torch.rand(t, e, generator=g).clamp_min(1e-20)))
        logits = prior[perm].log() + gumbel
    return torch.bincount(logits.topk(k, dim=1).indices.flatten(), minlength=e).tolist()


for arg in sys.argv[1:] or ["deepseek-v3:256:7168", "kimi-k2:192:7168", "qwen3-30b:128:7168"]:
    name, e, t = arg.split(":")
    for zipf in (0, 1):
        m = [math.ceil(c / 128) for c in counts(int(t), int(e), 8, zipf)]
        before = sum(2 * math.ceil(x / 2) for x in m)
        left = sum(x % 2 for x in m)
        after = sum(2 * (x // 2) for x in m) + 2 * math.ceil(left / 2)
        print(f"{name}/E{e} {'zipf' if zipf else 'uniform'}: real {sum(m)}, pairs before {before}, "
              f"after {after}, leftover tiles {left} ({left / sum(m):.2f} of the real)")

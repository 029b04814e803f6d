"""wgrad_write_model.py — a CPU model (no GPU) of the BF16 weight gradient's walk under skewed
routing: which orders of its units let the dW stores run beside the tensor work. Not a
measurement: a fluid model with no power cap, whose only use is to choose what to build and
measure (docs/PERF.md holds the measurements).

The launch as kernels/gemm/bf16_wgrad.cu runs it in cluster pairs on 132 CTAs: units from
tile_scheduler.h's rules (an expert of at most 256 rows: chunks of 8 dW row tiles of one column
tile; more: units of 2 tiles, one a CTA), walked statically (unit u on pair u mod 66). Each tile
costs its 16-row slices of tensor work (0.83 us per 64-row block, ~664 TFLOP/s over 132 SMs) and
then writes 64 KB of bf16 dW. A tile's write runs under the next tile's tensor work; a CTA waits
before its next tile's end while its previous write is still out. The card's write bandwidth B
is shared evenly among the CTAs writing. Counts: the harness's Zipf draw (dev/gg_ab.py's) and a
uniform top-8 draw, T 7168.

Orders: desc (the experts by rows, most first: the walk in main), zipper (alternating the heaviest
and the lightest experts), interleaved (the candidate's gg_interleave_unit: the units of experts
over 256 rows merged evenly with the others'). A check against measurement: on DeepSeek-V3's down
projection the model puts zipper 6% ahead of desc where the kernel alone measured it 1% behind on
one H200 (docs/PERF.md, "The weight gradients visit their experts by rows"), and the model's Zipf
loss (1.3-1.5x) is larger than that measured alone (1.10x): it has no power cap, no L2 and no
reads, and its costs per block and per store are estimates. On Qwen3-30B's shapes (its heaviest
unit a third of a CTA's share) interleaving loses in the model: the longest units start late, which
is why the candidate (dev/candidates/wgrad_interleave.patch) interleaves only where no unit exceeds
an eighth of a CTA's share (its gg_interleave_hot).

    .venv/bin/python dev/wgrad_write_model.py

prints the draw's facts and the static walk's balance (no timing), then the model: DSv3's down
and gate, Qwen3-30B's down; B 3.0 and 4.3 TB/s.
"""
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gg_ab import harness_zipf_counts  # noqa: E402

BLOCK_US = 0.83  # one 64-row block of a 128 x 256 tile on one SM
TILE_BYTES = 65536


def uniform_counts(e, k=8, t=7168, seed=1):
    g = torch.Generator().manual_seed(seed)
    topk = torch.randn(t, e, generator=g).topk(k, dim=1).indices
    return torch.bincount(topk.flatten(), minlength=e).tolist()


def units_of(cnt, experts, m_tiles, n_tiles, cl=2, resident=256, chunk=8):
    """(tiles, us per tile) of each unit of `experts`, in order, chunk-major inside an expert."""
    out = []
    for e in experts:
        c = cnt[e]
        ch = chunk if c <= resident else cl
        for c0 in range(math.ceil(m_tiles / ch)):
            tiles = min(ch, m_tiles - c0 * ch)
            out += [(tiles, math.ceil(c / 16) * BLOCK_US / 4)] * n_tiles
    return out


def walk(cnt, m_tiles, n_tiles, order, interleave=False, ctas=132, cl=2):
    """Per CTA, the tensor us of each of its tiles, in its walk."""
    if interleave:
        hot = units_of(cnt, [e for e in order if cnt[e] > 256], m_tiles, n_tiles)
        rest = units_of(cnt, [e for e in order if cnt[e] <= 256], m_tiles, n_tiles)
        total, units = len(hot) + len(rest), []
        for v in range(total):  # gg_interleave_unit
            h0, h1 = v * len(hot) // total, (v + 1) * len(hot) // total
            units.append(hot[h0] if h1 > h0 else rest[v - h0])
    else:
        units = units_of(cnt, order, m_tiles, n_tiles)
    per = [[] for _ in range(ctas)]
    pairs = ctas // cl
    for u, (tiles, us) in enumerate(units):
        for r in range(cl):
            per[(u % pairs) * cl + r] += [us] * math.ceil((tiles - r) / cl)
    return per


def run(per, tbps, dt=0.05):
    """The walk's span in us: tensor work and writes as described above."""
    n, lens = len(per), np.array([len(p) for p in per])
    cost = np.zeros((n, lens.max() + 1))
    for i, p in enumerate(per):
        cost[i, :len(p)] = p
    idx, out = np.zeros(n, int), np.zeros(n)
    comp, done, rows, t = cost[:, 0].copy(), lens == 0, np.arange(n), 0.0
    bw = tbps * 1e6  # bytes per us
    while (~done).any() or (out > 0).any():
        w = out > 0
        if w.any():
            out[w] = np.maximum(0.0, out[w] - bw * dt / w.sum())
        live = ~done
        comp[live & (comp > 0)] -= dt
        fin = live & (comp <= 0) & (out <= 0)
        out[fin] = TILE_BYTES
        idx[fin] += 1
        end = fin & (idx >= lens)
        done |= end
        go = fin & ~end
        comp[go] += cost[rows[go], idx[go]]
        t += dt
    return t


def pair_blocks(cnt, m_tiles, n_tiles, pairs=66, cl=2, resident=256, chunk=8):
    """The 64-row blocks a CTA of each cluster pair reduces in main's walk (most rows first,
    unit u on pair u mod pairs): no timing, only how the static walk shares the work."""
    load = [0] * pairs
    u = 0
    for e in sorted(range(len(cnt)), key=lambda i: (-cnt[i], i)):
        ch = chunk if cnt[e] <= resident else cl
        for c0 in range(math.ceil(m_tiles / ch)):
            tiles = min(ch, m_tiles - c0 * ch)
            for _ in range(n_tiles):
                load[u % pairs] += math.ceil(tiles / cl) * math.ceil(cnt[e] / 64)
                u += 1
    return load


def draw_facts():
    """The harness's Zipf draw at DSv3 EP=1 (dev/gg_ab.py's, seed 23): the experts over 256 rows,
    their share of the rows and the others' share of the dW tiles; then, over seeds 1-8 and both
    of DSv3's grids, the busiest pair's blocks against the mean pair's in main's walk and the
    launch's blocks against uniform's (uniform_counts)."""
    z = harness_zipf_counts(256, 224)
    hot = [c for c in z if c > 256]
    print(f"harness Zipf draw, DSv3 EP=1: {len(hot)} experts over 256 rows hold "
          f"{sum(hot) / sum(z):.1%} of the rows; the other {256 - len(hot)} write "
          f"{(256 - len(hot)) / 256:.1%} of the dW tiles")
    busiest, ratio = [], []
    for m_tiles, n_tiles in ((56, 8), (16, 28)):
        uni = sum(pair_blocks(uniform_counts(256), m_tiles, n_tiles))
        for seed in range(1, 9):
            load = pair_blocks(harness_zipf_counts(256, 224, seed=seed), m_tiles, n_tiles)
            busiest.append(max(load) / (sum(load) / len(load)))
            ratio.append(sum(load) / uni)
    print(f"seeds 1-8, both grids: busiest pair {min(busiest):.3f}-{max(busiest):.3f}x the mean "
          f"pair's blocks; the launch's blocks {min(ratio):.3f}-{max(ratio):.3f}x uniform's")


def main():
    draw_facts()
    for name, e, rows, m_tiles, n_tiles in (("DSv3 EP=1 down", 256, 224, 56, 8),
                                            ("DSv3 EP=1 gate", 256, 224, 16, 28),
                                            ("Qwen3-30B down", 128, 448, 16, 3)):
        uni, zipf = uniform_counts(e), harness_zipf_counts(e, rows)
        desc = sorted(range(e), key=lambda i: (-zipf[i], i))
        zipper = [x for pair in zip(desc[:e // 2], desc[::-1][:e // 2]) for x in pair]
        for tbps in (3.0, 4.3):
            base = run(walk(uni, m_tiles, n_tiles, sorted(range(e), key=lambda i: (-uni[i], i))),
                       tbps)
            cells = []
            for label, order, inter in (("desc", desc, False), ("zipper", zipper, False),
                                        ("interleaved", desc, True)):
                span = run(walk(zipf, m_tiles, n_tiles, order, inter), tbps)
                cells.append(f"{label} {span / base:.2f}x")
            print(f"{name}, B {tbps} TB/s: uniform {base:.0f} us; Zipf " + ", ".join(cells))


if __name__ == "__main__":
    main()

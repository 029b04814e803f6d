"""l2_walk_model.py — arithmetic, not a measurement: the bytes a single-CTA static walk of the BF16
gate+up (tile_scheduler.h: gg_decode_m_grouped, raster groups of 16 row tiles, CTA b taking tiles
b, b + 132, ...) would read from DRAM through an LRU L2, with every CTA at the same K block at
once. Each load is a 16 KB box: the tile's 128 token rows and its two 128-row weight boxes per
64-wide K block. Rows per expert are dev/gg_ab.py's (uniform, or the harness's Zipf draw). Runs on
the CPU:
    .venv/bin/python dev/l2_walk_model.py [shape ...]     (default glm_ep2 olmoe)
"""
import collections
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gg_ab  # noqa: E402  (it puts bench/ on the path for its own imports)


def raster(idx, m_tiles, n_tiles, group_m):
    """tile_scheduler.h gg_raster: (m tile, n tile) of tile idx in one expert's grid."""
    size = group_m * n_tiles
    g, r = divmod(idx, size)
    gm = min(group_m, m_tiles - g * group_m)
    return g * group_m + r % gm, r // gm


def walk_bytes(counts, n_tiles, k_blocks, ctas=132, group_m=16, l2_mb=50):
    """(tiles, GB read from DRAM, GB of loads) of the walk in lockstep through an LRU L2."""
    tiles = []
    for e, c in enumerate(counts):
        mt = (c + 127) // 128
        tiles += [(e,) + raster(i, mt, n_tiles, group_m) for i in range(mt * n_tiles)]
    per_cta = [tiles[b::ctas] for b in range(ctas)]
    cap = l2_mb * 1024 * 1024 // 16384
    lru, miss, loads = collections.OrderedDict(), 0, 0
    for step in range(max(len(p) for p in per_cta) * k_blocks):
        t, kb = divmod(step, k_blocks)
        for mine in per_cta:
            if t >= len(mine):
                continue
            e, m, n = mine[t]
            for key in (("A", e, m, kb), ("B", e, n, kb, 0), ("B", e, n, kb, 1)):
                loads += 1
                if key in lru:
                    lru.move_to_end(key)
                else:
                    miss += 1
                    lru[key] = True
                    if len(lru) > cap:
                        lru.popitem(last=False)
    return len(tiles), miss * 16384 / 1e9, loads * 16384 / 1e9


def main():
    names = sys.argv[1:] or ["glm_ep2", "olmoe"]
    for name, e, rows, H, I, _ in gg_ab.SHAPES:
        if name not in names:
            continue
        for zipf in (0, 2):
            counts = gg_ab.layout(e, rows, zipf)[0]
            tiles, dram, loads = walk_bytes(counts, I // 128, H // 64)
            print(f"{name:10s} {'Zipf' if zipf else 'uniform':8s} tiles {tiles:6d}  "
                  f"DRAM {dram:6.2f} GB  loads {loads:6.2f} GB")


if __name__ == "__main__":
    main()

"""rebuild_ab.py — the functional BF16 backward with and without the schedule's rebuild, timed as
bench/harness.py times it (each call from idle, events around it, median): after a forward on
topk, moe_backward(topk) (the slot was built from this tensor: no rebuild) against
moe_backward(a clone of topk) (another tensor: rebuilt), interleaved, outputs compared bitwise.
Run under torchrun --nproc_per_node=1. SHAPES (env): comma list of harness shapes."""
import os
import statistics
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import mok.functional as mf  # noqa: E402
from harness import SHAPES, make_inputs  # noqa: E402


def main():
    dist.init_process_group("nccl")
    torch.cuda.set_device(0)
    grp = mf.Group()
    for name in os.environ.get("SHAPES", "qwen3-30b,deepseek-v3").split(","):
        shape = SHAPES[name]
        x, topk, rw, w, dy = make_inputs(shape, 7168, "uniform", 0, 1, 23)
        wl = [w[n] for n in ("w_gate", "w_up", "w_down", "ws_gate", "ws_up", "ws_down")]
        E = shape[2]
        mf.moe_forward(x, topk, rw, *wl, grp.id, E, 0.0)
        keep = mf.moe_backward(dy, x, topk, rw, *wl, grp.id, E, 0.0)
        mf.moe_forward(x, topk, rw, *wl, grp.id, E, 0.0)
        again = mf.moe_backward(dy, x, topk.clone(), rw, *wl, grp.id, E, 0.0)
        same = all(torch.equal(a, b) for a, b in zip(keep, again))
        del keep, again
        times = {"kept": [], "rebuilt": []}
        for _ in range(30):
            for case in ("kept", "rebuilt"):
                mf.moe_forward(x, topk, rw, *wl, grp.id, E, 0.0)
                tk = topk if case == "kept" else topk.clone()
                torch.cuda.synchronize()
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                mf.moe_backward(dy, x, tk, rw, *wl, grp.id, E, 0.0)
                b.record()
                b.synchronize()
                times[case].append(a.elapsed_time(b))
        k, r = statistics.median(times["kept"]), statistics.median(times["rebuilt"])
        print(f"rebuild_ab {name}: backward {k:.3f} ms without the rebuild, {r:.3f} with "
              f"({100 * (k - r) / r:+.1f}%), bitwise {'yes' if same else 'NO'}")
        del x, topk, rw, w, dy, wl
        torch.cuda.empty_cache()
    grp.destroy()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

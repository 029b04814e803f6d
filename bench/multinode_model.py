"""multinode_model.py — a cost model of the layer's step on N nodes x G GPUs (docs/MULTINODE.md):
per-GPU compute from a measured one-GPU harness row, NVLink and RDMA from given bandwidths and
latency, and where the time goes; `--check` compares its one-node prediction with measured EP=2
rows. Plain Python, no GPU.

    python3 bench/multinode_model.py --nodes 1,2,4,8 --rdma-gbs 50 [--shape deepseek-v3] [--check]

Model, per GPU and pass (uniform routing, T tokens per GPU, k experts per token over EP = N G ranks):
  compute    the measured one-GPU pass with E / 2 experts (the harness's `--experts-div 2` row: T k
             rows per GPU, as at every EP), minus that run's own copies of the rows within the GPU;
             at larger EP the same rows fall in fewer, longer experts, so this is an upper bound.
  NVLink     rows that leave the GPU inside its node: T k (G - 1) / EP of the pairs whose expert is on
             another GPU of the same node, plus the forwarding of the rows that arrived over the
             network, T k (N - 1) / N; each H bf16 values (FP8: 1 byte + a scale per 128), at nvlink_gbs.
  RDMA       one row per (token, remote node holding one of its experts): T (N - 1) (1 - (1 - 1/N)^k)
             rows, at rdma_gbs, plus rdma_us per macrobatch and peer node (one put with a signal).
  step       serial: compute + NVLink + RDMA; overlapped (the ring's macrobatches): the largest of
             the three plus one macrobatch of the other two (the pipeline's fill).
Backward moves the same rows the other way (dy to the experts, dx back) and computes twice."""
import argparse
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
# name: (H, I, E, k, Is), as bench/harness.py
SHAPES = {"deepseek-v3": (7168, 2048, 256, 8, 2048), "kimi-k2": (7168, 2048, 384, 8, 2048),
          "qwen3-235b": (4096, 1536, 128, 8, 0), "qwen3-30b": (2048, 768, 128, 8, 0),
          "glm-4.5": (5120, 1536, 160, 8, 1536)}
# one H200 (docs/PERF.md, "The machine"): a GPU's local row copy and a peer pull
LOCAL_COPY_GBS, NVLINK_GBS = 1900.0, 330.0


def network_rows(T, k, nodes):
    """Expected rows one GPU puts on the network per pass: (token, remote node) pairs."""
    if nodes <= 1:
        return 0.0
    return T * (nodes - 1) * (1.0 - (1.0 - 1.0 / nodes) ** k)


def predict(compute_ms, shape, T, nodes, gpus, rdma_gbs, rdma_us, macro, fp8=False):
    """{stage: ms} of one forward (or, with compute_ms a backward's, one backward) per GPU."""
    H, I, E, k, Is = shape
    row_bytes = H * (1.0 + 4.0 / 128) if fp8 else H * 2.0
    ep = nodes * gpus
    local_copy = T * k * H * 2.0 / (LOCAL_COPY_GBS * 1e6)  # what the one-GPU run spent moving rows
    compute = max(compute_ms - local_copy, 0.0)
    nv_rows = T * k * (gpus - 1) / ep + T * k * (nodes - 1) / nodes
    nvlink = nv_rows * row_bytes / (NVLINK_GBS * 1e6)
    net_rows = network_rows(T, k, nodes)
    macrobatches = max(1, -(-T // macro))
    rdma = net_rows * row_bytes / (rdma_gbs * 1e6) + (macrobatches * (nodes - 1) * rdma_us / 1e3
                                                      if nodes > 1 else 0.0)
    parts = {"compute": compute, "nvlink": nvlink, "rdma": rdma}
    serial = sum(parts.values())
    big = max(parts, key=parts.get)
    fill = sum(v for n, v in parts.items() if n != big) / macrobatches
    parts.update(serial=serial, overlapped=parts[big] + fill, network_rows=net_rows,
                 bound=big)
    return parts


def measured_row(path, shape, experts):
    with open(path) as f:
        rows = json.load(f)["rows"]
    for r in rows:  # older files name the model in "shape" and ran every expert
        if (r.get("model", r["shape"]) == shape and r.get("experts", experts) == experts
                and r["routing"] == "uniform" and r["tokens"] == 7168):
            return r
    raise SystemExit(f"{path}: no uniform row of {shape} with {experts} experts")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", default="deepseek-v3", choices=sorted(SHAPES))
    ap.add_argument("--tokens", type=int, default=7168)
    ap.add_argument("--nodes", default="1,2,4,8")
    ap.add_argument("--gpus", type=int, default=8, help="GPUs per node (NVLink domain)")
    ap.add_argument("--rdma-gbs", type=float, default=50.0, help="RDMA GB/s per GPU and direction")
    ap.add_argument("--rdma-us", type=float, default=10.0, help="per put-with-signal, microseconds")
    ap.add_argument("--macro", type=int, default=1024, help="tokens per macrobatch")
    ap.add_argument("--measured", default=os.path.join(HERE, "..", "docs", "results",
                                                       "layer-ep1-div2-shapes-bf16-fp8.json"),
                    help="a harness JSON with the shape's one-GPU rows (compute per GPU)")
    ap.add_argument("--fp8", action="store_true", help="FP8 rows and the FP8 row bytes")
    ap.add_argument("--check", action="store_true",
                    help="the one-node, two-GPU prediction against docs/results/layer-ep2.json")
    args = ap.parse_args()
    shape = SHAPES[args.shape]
    H, I, E, k, Is = shape
    flops = 6.0 * (args.tokens * Is / I + args.tokens * k) * H * I
    print(f"{args.shape}, T {args.tokens}/GPU, {args.gpus} GPUs per node, RDMA {args.rdma_gbs} GB/s "
          f"+ {args.rdma_us} us per put, macrobatch {args.macro} tokens{', FP8' if args.fp8 else ''}")
    print(f"{'nodes':>5s} {'EP':>4s} {'pass':4s} {'compute':>8s} {'nvlink':>7s} {'rdma':>7s} "
          f"{'serial':>7s} {'overlap':>8s} {'bound':>8s} {'TFLOP/s':>8s} {'net rows':>9s}")
    for n in [int(v) for v in args.nodes.split(",")]:
        ep = n * args.gpus
        # the one-GPU row with E / 2 experts (EP=2's work per GPU): the same T k rows per GPU as any
        # EP, in fewer, longer experts as EP grows, which the GEMMs run no slower (an upper bound)
        r = measured_row(args.measured, args.shape, E // 2)
        for p, mult in (("fwd", 1), ("bwd", 2)):
            key = f"{'fp8' if args.fp8 else 'mok'}_{p}_ms"
            c = predict(r[key], shape, args.tokens, n, args.gpus, args.rdma_gbs, args.rdma_us,
                        args.macro, args.fp8)
            t = c["overlapped"]
            print(f"{n:5d} {ep:4d} {p:4s} {c['compute']:8.3f} {c['nvlink']:7.3f} {c['rdma']:7.3f} "
                  f"{c['serial']:7.3f} {t:8.3f} {c['bound']:>8s} {mult * flops / t * 1e-9:8.1f} "
                  f"{c['network_rows']:9.0f}")
    if args.check:
        ep2 = measured_row(os.path.join(HERE, "..", "docs", "results", "layer-ep2.json"),
                           args.shape, E)
        r = measured_row(args.measured, args.shape, E // 2)
        print("check, one node of 2 GPUs (EP=2 measured on 2x H200, an older tree):")
        for p in ("fwd", "bwd"):
            c = predict(r[f"mok_{p}_ms"], shape, args.tokens, 1, 2, args.rdma_gbs, args.rdma_us,
                        args.macro)
            got = ep2[f"mok_{p}_ms"]
            print(f"  {p}: predicted {c['serial']:.3f} ms serial, {c['overlapped']:.3f} overlapped; "
                  f"measured {got:.3f} ms ({got / c['serial']:.2f}x the serial prediction)")


if __name__ == "__main__":
    main()

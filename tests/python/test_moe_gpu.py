"""test_moe_gpu.py — mok.MoE on GPUs against the plain-PyTorch reference backend, one process per
GPU under torchrun (EP = number of processes): outputs and all gradients, two layers of one shape in
one graph, determinism, torch.compile(fullgraph=True), CUDA graph capture and replay of forward +
backward, and 50 training steps of the example language model with either backend.

    torchrun --standalone --nproc_per_node=2 -m pytest -q -s -p no:cacheprovider tests/python/test_moe_gpu.py

Every rank runs every test in the same order; pass/fail is agreed over the group before asserting,
so one rank's failure does not leave the others waiting. Fresh random data each run (the seed is
printed). Lines starting with MOK-RESULT summarize each check."""
import datetime
import os
import random
import sys

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)
import torch.distributed as dist  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples"))
import mok  # noqa: E402

TOL = 2e-2          # ||mok - reference|| / ||reference|| for bf16
H, I = 256, 128


@pytest.fixture(scope="session", autouse=True)
def distributed():
    for key, value in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
                       ("NVSHMEM_DISABLE_NVLS", "1")):
        os.environ.setdefault(key, value)
    if "WORLD_SIZE" not in os.environ:          # plain pytest: a group of one
        os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                          MASTER_PORT=str(29500 + os.getpid() % 1000))
    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local),
                            timeout=datetime.timedelta(seconds=300))
    yield
    mok.destroy_groups()
    dist.destroy_process_group()


def shared_seed():
    """A fresh seed (MOK_TEST_SEED repeats one), the same on every rank."""
    env = os.environ.get("MOK_TEST_SEED")
    t = torch.tensor([int(env) if env else random.SystemRandom().randrange(1 << 30)], device="cuda")
    dist.broadcast(t, 0)
    return int(t.item())


def rel(a, b):
    a, b = a.detach().double(), b.detach().double()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def finite(*ts):
    return all(bool(torch.isfinite(t).all()) for t in ts if t is not None)


def agree(ok):
    """True only if ok holds on every rank."""
    t = torch.tensor([1 if ok else 0], device="cuda")
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    return bool(t.item())


def report(name, **vals):
    text = " ".join(f"{k}={v:.2e}" if isinstance(v, float) else f"{k}={v}" for k, v in vals.items())
    print(f"MOK-RESULT {name} ep={dist.get_world_size()} rank={dist.get_rank()} {text}", flush=True)


def check_no_device_fault():
    mok.check_device_errors()


CASES = {
    "qwen3": dict(num_experts=8, top_k=2, scoring="softmax", norm_topk_prob=True),
    "deepseek_v3": dict(num_experts=16, top_k=4, scoring="sigmoid", n_group=4, topk_group=2,
                        score_correction_bias=True, norm_topk_prob=True, routed_scaling_factor=2.5,
                        shared_intermediate_size=128),
    "shared_limit": dict(num_experts=8, top_k=3, scoring="softmax", shared_intermediate_size=256,
                         swiglu_limit=0.5),
    "top1_big_shared": dict(num_experts=4, top_k=1, scoring="softmax", shared_intermediate_size=384),
}


def make_pair(seed, hidden=H, intermediate=I, **kw):
    """A mok module and a torch-backend module with identical weights: replicated weights equal on
    every rank, each rank's experts its own."""
    torch.manual_seed(seed)
    a = mok.MoE(hidden, intermediate, device="cuda", backend="mok", **kw)
    b = mok.MoE(hidden, intermediate, device="cuda", backend="torch", **kw)
    with torch.no_grad():
        if a.e_score_correction_bias is not None:
            a.e_score_correction_bias.normal_(0, 0.05)
        g = torch.Generator(device="cuda").manual_seed(seed + 7919 * (dist.get_rank() + 1))
        for p in a.expert_parameters():
            p.uniform_(-p.shape[-1] ** -0.5, p.shape[-1] ** -0.5, generator=g)
    b.load_state_dict(a.state_dict())
    return a, b


def grads_of(module, x, dy):
    """(y, dx, {name: grad}) through torch.autograd.grad (nothing accumulates into .grad)."""
    x = x.detach().clone().requires_grad_()
    params = dict(getattr(module, "_orig_mod", module).named_parameters())   # unwrap torch.compile
    y = module(x)
    g = torch.autograd.grad(y, [x] + list(params.values()), dy)
    return y.detach(), g[0], dict(zip(params, g[1:]))


def compare(name, got, ref):
    """Relative errors of y, dx and every parameter gradient; asserts on every rank at once."""
    (y, dx, gp), (ry, rdx, rgp) = got, ref
    errs = {"y": rel(y, ry), "dx": rel(dx, rdx)}
    errs.update({n: rel(gp[n], rgp[n]) for n in rgp})
    ok = finite(y, dx, *gp.values()) and max(errs.values()) < TOL
    report(name, worst=max(errs.values()), **{k.replace(".weight", ""): v for k, v in errs.items()})
    assert agree(ok), f"{name}: {errs}"


@pytest.mark.parametrize("case", list(CASES))
def test_matches_reference(case):
    seed = shared_seed()
    a, b = make_pair(seed, **CASES[case])
    g = torch.Generator(device="cuda").manual_seed(seed + dist.get_rank())
    x = torch.randn(3, 67, H, device="cuda", generator=g).bfloat16()    # 201 tokens: not a tile multiple
    dy = torch.randn(3, 67, H, device="cuda", generator=g).bfloat16()
    compare(f"reference/{case} seed={seed}", grads_of(a, x, dy), grads_of(b, x, dy))
    check_no_device_fault()


def test_token_counts_in_any_order():
    """Workspaces of several token counts on one group, used in any order: a larger one made
    first, then a smaller one, then the larger again (the schedule build's shared-memory limit
    belongs to the device, not to a workspace: a smaller workspace made later once lowered it under
    the larger one's build)."""
    seed = shared_seed()
    a, b = make_pair(seed, **CASES["deepseek_v3"])
    g = torch.Generator(device="cuda").manual_seed(seed + dist.get_rank())
    for i, tokens in enumerate((1500, 3, 700, 1500)):
        x = torch.randn(tokens, H, device="cuda", generator=g).bfloat16()
        dy = torch.randn(tokens, H, device="cuda", generator=g).bfloat16()
        compare(f"token_counts/{i}:{tokens} seed={seed}", grads_of(a, x, dy), grads_of(b, x, dy))
    check_no_device_fault()


def test_max_tokens_one_workspace():
    """mok.MoE(max_tokens=1500): steps of 1500, 3, then counts that differ by rank, then 1500 again,
    all on one workspace (mok_schedule_set_tokens), against the torch backend; a step above
    max_tokens is refused before any collective."""
    seed = shared_seed()
    a, b = make_pair(seed, max_tokens=1500, **CASES["deepseek_v3"])
    rank = dist.get_rank()
    g = torch.Generator(device="cuda").manual_seed(seed + rank)
    for i, tokens in enumerate((1500, 3, 700 - 37 * rank, 1 + 100 * rank, 1500)):
        x = torch.randn(tokens, H, device="cuda", generator=g).bfloat16()
        dy = torch.randn(tokens, H, device="cuda", generator=g).bfloat16()
        compare(f"max_tokens/{i}:{tokens} seed={seed}", grads_of(a, x, dy), grads_of(b, x, dy))
    made = [k for k in mok.functional._workspaces if k[0] == a._group.id]
    report("max_tokens", workspaces=len(made))
    assert agree(len(made) == 1), made
    with pytest.raises(ValueError, match="max_tokens"):
        a(torch.randn(1501, H, device="cuda").bfloat16())
    for bad in (0, -5, 2.5, True):                      # checked before any collective
        with pytest.raises(ValueError, match="max_tokens"):
            mok.functional.Group(max_tokens=bad)
    check_no_device_fault()


def test_any_process_group():
    """A group over all ranks made with new_group, and each rank alone (EP=1 per rank)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    everyone = dist.new_group(list(range(world)))
    alone = [dist.new_group([r]) for r in range(world)]     # every rank makes every group, in order
    assert mok.get_group(everyone) is mok.get_group(everyone)
    assert mok.get_group(None) is mok.get_group(dist.group.WORLD)
    for pg, label in ((everyone, "new_group_all"), (alone[rank], "new_group_self")):
        seed = shared_seed()
        a, b = make_pair(seed, process_group=pg, **CASES["qwen3"])
        assert a.ep_size == dist.get_world_size(pg)
        g = torch.Generator(device="cuda").manual_seed(seed + rank)
        x = torch.randn(130, H, device="cuda", generator=g).bfloat16()
        dy = torch.randn(130, H, device="cuda", generator=g).bfloat16()
        compare(f"process_group/{label}", grads_of(a, x, dy), grads_of(b, x, dy))
    check_no_device_fault()


def test_two_layers_of_one_shape():
    """Each layer's backward must use what its own forward kept: two layers that each keep their
    forward's state (two schedules on one workspace) must give exactly what recomputing gives.
    Against the plain-PyTorch pair the bound is loose on purpose: layer 2 routes on layer 1's output,
    and bf16 noise there flips near-tied top-k choices of a few tokens (seen: 5e-2); a backward that
    read the other layer's state would be off by O(1)."""
    seed = shared_seed()
    kw = CASES["qwen3"]
    a1, b1 = make_pair(seed, **kw)
    a2, b2 = make_pair(seed + 1, **kw)
    a3, _ = make_pair(seed + 1, recompute=True, **kw)      # a2's twin, keeping nothing
    g = torch.Generator(device="cuda").manual_seed(seed + dist.get_rank())
    x = torch.randn(256, H, device="cuda", generator=g).bfloat16()
    dy = torch.randn(256, H, device="cuda", generator=g).bfloat16()
    kept = grads_of(torch.nn.Sequential(a1, a2), x, dy)
    recomputed = grads_of(torch.nn.Sequential(a1, a3), x, dy)
    same = torch.equal(kept[0], recomputed[0]) and torch.equal(kept[1], recomputed[1]) and all(
        torch.equal(kept[2][n], recomputed[2][n]) for n in kept[2])
    ref = grads_of(torch.nn.Sequential(b1, b2), x, dy)
    errs = {"y": rel(kept[0], ref[0]), "dx": rel(kept[1], ref[1])}
    errs.update({n: rel(kept[2][n], ref[2][n]) for n in ref[2]})
    report("two_layers/kept_vs_recompute", bitwise=same, worst_vs_reference=max(errs.values()))
    assert agree(same and finite(kept[0], kept[1], *kept[2].values())), "kept state differs from recomputing"
    assert agree(max(errs.values()) < 0.2), f"two layers against the reference: {errs}"
    check_no_device_fault()


def test_deterministic():
    seed = shared_seed()
    a, _ = make_pair(seed, **CASES["deepseek_v3"])
    g = torch.Generator(device="cuda").manual_seed(seed + dist.get_rank())
    x = torch.randn(512, H, device="cuda", generator=g).bfloat16()
    dy = torch.randn(512, H, device="cuda", generator=g).bfloat16()
    r1, r2 = grads_of(a, x, dy), grads_of(a, x, dy)
    same = torch.equal(r1[0], r2[0]) and torch.equal(r1[1], r2[1]) and all(
        torch.equal(r1[2][n], r2[2][n]) for n in r1[2])
    report("deterministic", bitwise=same)
    assert agree(same and finite(r1[0]))


def functional_inputs(seed, T, E, k, ep, hidden, inter):
    """Fresh inputs for the functional ops on this rank: x, dy, top-k experts, router weights and
    the six weights (this rank's routed gate, up, down, then the shared expert's)."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(T, hidden, device="cuda", generator=g).bfloat16()
    dy = torch.randn(T, hidden, device="cuda", generator=g).bfloat16()
    topk = torch.rand(T, E, device="cuda", generator=g).topk(k, dim=1).indices.int()
    rw = torch.softmax(torch.randn(T, k, device="cuda", generator=g), dim=1)
    shapes = ((E // ep, inter, hidden), (E // ep, inter, hidden), (E // ep, hidden, inter),
              (inter, hidden), (inter, hidden), (hidden, inter))
    w = [(torch.randn(*s, device="cuda", generator=g) * s[-1] ** -0.5).bfloat16() for s in shapes]
    return x, dy, topk, rw, w


def test_fused_path_matches_default():
    """The functional ops on the default Group (the fused path: dispatch inside the gate+up
    kernel, pushes from the GEMM epilogues), on Group(path="fused") and on a Group with a
    one-region token ring, or with other plan choices pinned give the grouped path's outputs and
    gradients (separate communication kernels) bit for bit; the oracle agrees within bf16
    noise."""
    import mok.functional as mf
    seed = shared_seed()
    ep, rank = dist.get_world_size(), dist.get_rank()
    E, k, T = 8 * ep, 4, 300
    x, dy, topk, rw, w = functional_inputs(seed + rank, T, E, k, ep, H, I)
    outs = {}
    region = (128 + (ep * T + 127) // 128 * 128) * H * 2  # one 128-row macrobatch + one expert's most
    knobs = {"ring": dict(ring_bytes=region, macrobatch_minibatches=1),
             "pinned": dict(plan={"routed_cluster": 1, "schedule": "serial"})}
    for path in ("auto", "fused", "grouped", "oracle", "ring", "pinned"):
        grp = mf.Group(path=path if path in mf.Group.PATHS else "auto", **knobs.get(path, {}))
        y = mf.moe_forward(x, topk, rw, *w, grp.id, E, 0.0)
        grads = mf.moe_backward(dy, x, topk, rw, *w, grp.id, E, 0.0)
        torch.cuda.synchronize()
        outs[path] = [y] + [t for t in grads if t is not None]
        grp.destroy()
    same = all(torch.equal(a, b) and torch.equal(a, c) and torch.equal(a, d) and torch.equal(a, e)
               for a, b, c, d, e in zip(outs["grouped"], outs["fused"], outs["auto"],
                                        outs["ring"], outs["pinned"]))
    worst_v1 = max(rel(a, b) for a, b in zip(outs["grouped"], outs["oracle"]))
    report("fused_vs_default", ep=ep, rank=rank, bitwise=same, worst_v1_vs_default=f"{worst_v1:.2e}")
    assert agree(same and worst_v1 < TOL and finite(*outs["fused"]))
    check_no_device_fault()


def test_fp8_functional():
    """FP8 (block-128) routed experts from PyTorch: quantize_weight, transpose_weights_fp8 (and
    quantize_weights_fp8_transposed, bitwise the two), moe_forward_fp8 and moe_backward_fp8
    against the BF16 functional path on the weights the FP8 path sees (dequantized), within
    E4M3's precision (the inputs, activations and gradients are quantized too); a second backward
    is bitwise the first."""
    import mok.functional as mf
    seed = shared_seed()
    ep, rank = dist.get_world_size(), dist.get_rank()
    E, k, T, Hf, If = 8 * ep, 4, 300, 256, 256
    x, dy, topk, rw, w = functional_inputs(seed + rank, T, E, k, ep, Hf, If)
    q = [mf.quantize_weight(t) for t in w[:3]]
    t8 = mf.transpose_weights_fp8(*q[0], *q[1], *q[2])
    codes1, t1 = mf.quantize_weights_fp8_transposed(*w[:3])  # the one-pass form: the same bits
    one_pass = all(torch.equal(a, b) for a, b in zip(codes1, (v for p in q for v in p))) and all(
        torch.equal(a, b) for a, b in zip(t1, t8))

    def dequant(codes, scales):
        blocks = scales.repeat_interleave(128, dim=1).repeat_interleave(128, dim=2)
        return (codes.view(torch.float8_e4m3fn).float() * blocks).bfloat16()

    wd = [dequant(*qs) for qs in q] + w[3:]
    grp = mf.Group()
    y8 = mf.moe_forward_fp8(x, topk, rw, *q[0], *q[1], *q[2], *w[3:], grp.id, E)
    g8 = mf.moe_backward_fp8(dy, x, topk, rw, *q[0], *q[1], *q[2], t8, *w[3:], grp.id, E)
    g8b = mf.moe_backward_fp8(dy, x, topk, rw, *q[0], *q[1], *q[2], t8, *w[3:], grp.id, E)
    yb = mf.moe_forward(x, topk, rw, *wd, grp.id, E, 0.0)
    gb = mf.moe_backward(dy, x, topk, rw, *wd, grp.id, E, 0.0)
    torch.cuda.synchronize()
    names = ("dx", "d_rw", "w_gate", "w_up", "w_down", "shared_gate", "shared_up", "shared_down")
    errs = {"y": rel(y8, yb)}
    errs.update({n: rel(a, b) for n, a, b in zip(names, g8, gb)})
    same = all(torch.equal(a, b) for a, b in zip(g8, g8b))
    report("fp8_functional", bitwise_second_backward=same, one_pass_weights_bitwise=one_pass,
           worst=max(errs.values()), **errs)
    assert agree(same and one_pass and finite(y8, *g8) and max(errs.values()) < 0.15), errs
    grp.destroy()
    check_no_device_fault()


def test_fp8_module():
    """mok.MoE(expert_precision="fp8") under autograd (weights quantized at every forward, gradients
    straight through): output and every gradient against the BF16 mok module on the same weights
    within E4M3's precision (tokens, activations, weights and gradients are quantized), the second
    step bitwise the first, and recompute=True (the forward re-run in backward) bitwise the same."""
    seed = shared_seed()
    kw = CASES["deepseek_v3"]
    a, _ = make_pair(seed, **kw)
    f = mok.MoE(H, I, device="cuda", backend="mok", expert_precision="fp8", **kw)
    r = mok.MoE(H, I, device="cuda", backend="mok", expert_precision="fp8", recompute=True, **kw)
    f.load_state_dict(a.state_dict())
    r.load_state_dict(a.state_dict())
    g = torch.Generator(device="cuda").manual_seed(seed + dist.get_rank())
    x = torch.randn(3, 67, H, device="cuda", generator=g).bfloat16()
    dy = torch.randn(3, 67, H, device="cuda", generator=g).bfloat16()
    ref, got, again, rec = grads_of(a, x, dy), grads_of(f, x, dy), grads_of(f, x, dy), grads_of(r, x, dy)

    def same(u, v):
        return torch.equal(u[0], v[0]) and torch.equal(u[1], v[1]) and all(
            torch.equal(u[2][n], v[2][n]) for n in u[2])

    errs = {"y": rel(got[0], ref[0]), "dx": rel(got[1], ref[1])}
    errs.update({n: rel(got[2][n], ref[2][n]) for n in ref[2]})
    report("fp8_module", bitwise_again=same(got, again), bitwise_recompute=same(got, rec),
           worst=max(errs.values()), **{k.replace(".weight", ""): v for k, v in errs.items()})
    assert agree(same(got, again) and same(got, rec) and finite(got[0], got[1], *got[2].values())
                 and max(errs.values()) < 0.15), errs
    check_no_device_fault()


def test_fp8_weight_cache():
    """mok.MoE(expert_precision="fp8") quantizes its routed weights once per weight update: two
    micro-batches of a step make one set of codes and one of transposed copies, their gradients
    bitwise those of the same module quantizing at every call; after each optimizer step (and
    after a write through .data followed by invalidate_fp8_weights) the output is bitwise that of
    a fresh module on the same weights, so no step ever runs on stale codes."""
    seed = shared_seed()
    kw = CASES["deepseek_v3"]
    torch.manual_seed(seed)
    m = mok.MoE(H, I, device="cuda", backend="mok", expert_precision="fp8", **kw)
    u = mok.MoE(H, I, device="cuda", backend="mok", expert_precision="fp8", **kw)
    u.load_state_dict(m.state_dict())
    u._fp8_cache = None  # the same module quantizing at every call
    opt_m = torch.optim.AdamW(m.parameters(), lr=1e-2)
    opt_u = torch.optim.AdamW(u.parameters(), lr=1e-2)
    g = torch.Generator(device="cuda").manual_seed(seed + dist.get_rank())
    xs = [torch.randn(2, 61, H, device="cuda", generator=g).bfloat16() for _ in range(2)]
    cache = m._fp8_cache
    ok, facts = True, {}
    for step in range(3):
        for mod, opt in ((m, opt_m), (u, opt_u)):
            for x in xs:  # two micro-batches, gradients accumulated
                mod(x).float().square().mean().backward()
        ok &= cache.quantizations == step + 1 and cache.transpositions == step + 1
        same_grads = all(torch.equal(a.grad, b.grad) for a, b in zip(m.parameters(), u.parameters()))
        ok &= same_grads
        facts[f"step{step}_grads_bitwise"] = same_grads
        opt_m.step()
        opt_u.step()
        opt_m.zero_grad()
        opt_u.zero_grad()
        fresh = mok.MoE(H, I, device="cuda", backend="mok", expert_precision="fp8", **kw)
        fresh.load_state_dict(m.state_dict())
        with torch.no_grad():
            y, yf = m(xs[0]), fresh(xs[0])
        facts[f"step{step}_after_update_bitwise"] = torch.equal(y, yf)
        ok &= torch.equal(y, yf) and finite(y)
    with torch.no_grad():
        m.w_up.data.mul_(0.5)  # unseen by the cache
        m.invalidate_fp8_weights()
        fresh = mok.MoE(H, I, device="cuda", backend="mok", expert_precision="fp8", **kw)
        fresh.load_state_dict(m.state_dict())
        facts["after_data_write_bitwise"] = torch.equal(m(xs[1]), fresh(xs[1]))
    ok &= facts["after_data_write_bitwise"]
    report("fp8_weight_cache", quantizations=cache.quantizations,
           transpositions=cache.transpositions, **facts)
    assert agree(ok), facts
    check_no_device_fault()


def _mx_values(q, s):
    """MXFP8 codes and E8M0 scales -> their values, exact in float32 (and in bf16)."""
    return q.view(torch.float8_e4m3fn).float() * torch.exp2(
        s.float() - 127.0).repeat_interleave(32, dim=-1)


def test_mxfp8_module():
    """mok.MoE(expert_precision="mxfp8") (routed weights through MXFP8, converted once to block-128):
    output and every gradient against the BF16 mok module on the weights' MX values within E4M3's
    precision, with the same bound as "fp8"; the MX values quantize back to the same codes and
    scales (an MX checkpoint dequantized to bf16 round-trips); the conversion within its bound
    (exact where a value stays in E4M3's normal range at the block's scale, else within half its
    subnormal step) and its one-pass form from bf16 bitwise the two passes; the second step bitwise the first and the weight cache's counters as for
    "fp8"; the error against the original weights reported beside the block-128 module's."""
    import mok.functional as mf
    seed = shared_seed()
    kw = CASES["deepseek_v3"]
    a, _ = make_pair(seed, **kw)
    m = mok.MoE(H, I, device="cuda", backend="mok", expert_precision="mxfp8", **kw)
    f = mok.MoE(H, I, device="cuda", backend="mok", expert_precision="fp8", **kw)
    m.load_state_dict(a.state_dict())
    f.load_state_dict(a.state_dict())
    facts, ok = {}, True
    mx = mok.MoE(H, I, device="cuda", backend="mok", **kw)  # bf16 on the MX values
    mx.load_state_dict(a.state_dict())
    with torch.no_grad():
        for name in ("w_gate", "w_up", "w_down"):
            w = getattr(a, name)
            q, sc = mf.quantize_weight_mxfp8(w.detach().contiguous())
            v = _mx_values(q, sc)
            getattr(mx, name).copy_(v.bfloat16())
            ok &= bool(torch.equal(v.bfloat16().float(), v))  # exact in bf16
            q2, s2 = mf.quantize_weight_mxfp8(v.bfloat16().contiguous())
            facts[f"{name}_round_trip"] = bool(torch.equal(q, q2) and torch.equal(sc, s2))
            cq, cs = mf.mxfp8_to_block128(q, sc)
            fq, fs = mf.quantize_weight_mxfp8_block128(w.detach().contiguous())
            facts[f"{name}_one_pass"] = bool(torch.equal(fq, cq) and torch.equal(
                fs.view(torch.int32), cs.view(torch.int32)))
            ok &= facts[f"{name}_one_pass"]
            S = cs.repeat_interleave(128, dim=1).repeat_interleave(128, dim=2)
            got = cq.view(torch.float8_e4m3fn).float() * S
            normal = (v / S).abs() >= 2.0 ** -6
            exact = bool(torch.equal(got[normal], v[normal]))
            bound = bool(((got - v).abs() <= S * 2.0 ** -10).all())
            facts[f"{name}_conversion"] = exact and bound
            ok &= facts[f"{name}_round_trip"] and exact and bound
    g = torch.Generator(device="cuda").manual_seed(seed + dist.get_rank())
    x = torch.randn(3, 67, H, device="cuda", generator=g).bfloat16()
    dy = torch.randn(3, 67, H, device="cuda", generator=g).bfloat16()
    ref, got, again = grads_of(mx, x, dy), grads_of(m, x, dy), grads_of(m, x, dy)
    orig, blk = grads_of(a, x, dy), grads_of(f, x, dy)
    same = torch.equal(got[0], again[0]) and torch.equal(got[1], again[1]) and all(
        torch.equal(got[2][n], again[2][n]) for n in got[2])
    errs = {"y": rel(got[0], ref[0]), "dx": rel(got[1], ref[1])}
    errs.update({n.replace(".weight", ""): rel(got[2][n], ref[2][n]) for n in ref[2]})
    cache = m._fp8_cache
    counters = cache.quantizations == 1 and cache.transpositions == 1
    report("mxfp8_module", bitwise_again=same, counters=counters, worst=max(errs.values()),
           y_vs_bf16_original=rel(got[0], orig[0]), fp8_y_vs_bf16_original=rel(blk[0], orig[0]),
           dx_vs_bf16_original=rel(got[1], orig[1]), fp8_dx_vs_bf16_original=rel(blk[1], orig[1]),
           **facts, **errs)
    assert agree(ok and same and counters and finite(got[0], got[1], *got[2].values())
                 and max(errs.values()) < 0.15), (facts, errs)
    with pytest.raises(ValueError):
        mf.moe_fp8(x.reshape(-1, H), None, None, a.w_gate, a.w_up, a.w_down, group=m._group,
                   num_experts=16, weight_cache=f._fp8_cache, weight_format="mxfp8")
    check_no_device_fault()


def test_eager_autograd_function_bitwise():
    """moe() in eager mode runs under mok's autograd.Function (_MoE: no custom-op dispatch on the
    host's path), the custom op keeps its registered autograd (what torch.compile traces): on the
    same inputs and the same slot the two give the same bits, forward and every gradient."""
    seed = shared_seed()
    a, _ = make_pair(seed, **CASES["qwen3"])
    g = torch.Generator(device="cuda").manual_seed(seed + dist.get_rank())
    x = torch.randn(301, H, device="cuda", generator=g).bfloat16()
    dy = torch.randn(301, H, device="cuda", generator=g).bfloat16()
    with torch.no_grad():
        topk, rw = a.route(x, torch.nn.functional.linear(x.float(), a.router.weight.float()))
    weights = [a.w_gate, a.w_up, a.w_down]
    runs = []
    for path in ("eager", "op"):
        leaves = [t.detach().clone().requires_grad_() for t in [x, rw.contiguous()] + weights]
        if path == "eager":
            y = mok.functional.moe(leaves[0], topk, leaves[1], *leaves[2:], group=a._group,
                                   num_experts=a.num_experts, slot=None)
        else:
            y = torch.ops.mok.moe_forward(leaves[0], topk, leaves[1], *leaves[2:], None, None, None,
                                          a._group.id, a.num_experts, 0.0, -1)
        runs.append((type(y.grad_fn).__name__, [y.detach()] +
                     list(torch.autograd.grad(y, leaves, dy))))
    (fn_eager, got), (fn_op, ref) = runs
    same = all(torch.equal(u, v) for u, v in zip(got, ref))
    # mf.moe_forward / moe_backward with nothing to record run the ops' work without their
    # dispatch: the same bits as the custom ops (NaN written into memory the allocator is likely
    # to hand out next, so that an output left unwritten would differ)
    args = (x, topk, rw.contiguous(), *[w.detach() for w in weights], None, None, None,
            a._group.id, a.num_experts, 0.0, 0)
    direct = []
    for fwd, bwd in ((mok.functional.moe_forward, mok.functional.moe_backward),
                     (torch.ops.mok.moe_forward, torch.ops.mok.moe_backward)):
        with torch.no_grad():
            torch.empty(1 << 24, device="cuda").fill_(float("nan"))  # the allocator's next blocks
            direct.append([fwd(*args)] + [t for t in bwd(dy, *args) if t.numel() > 0])
    same_direct = all(torch.equal(u, v) for u, v in zip(*direct)) and \
        len(direct[0]) == len(got) and all(torch.equal(u, v) for u, v in zip(direct[0], got))
    report("eager_autograd_function", eager=fn_eager, op=fn_op, same_bits=same,
           direct_ops_same_bits=same_direct)
    assert agree(same and same_direct and fn_eager == "_MoEBackward" and fn_op != fn_eager), \
        (fn_eager, fn_op, same_direct)
    check_no_device_fault()


def test_torch_compile_fullgraph():
    seed = shared_seed()
    a, b = make_pair(seed, **CASES["deepseek_v3"])
    g = torch.Generator(device="cuda").manual_seed(seed + dist.get_rank())
    x = torch.randn(4, 64, H, device="cuda", generator=g).bfloat16()
    dy = torch.randn(4, 64, H, device="cuda", generator=g).bfloat16()
    eager = grads_of(a, x, dy)
    compiled = torch.compile(a, fullgraph=True)
    got = grads_of(compiled, x, dy)
    compare("compile/vs_eager", got, eager)
    compare("compile/vs_reference", got, grads_of(b, x, dy))
    # a second call with new data reuses the compiled graph
    x2 = torch.randn(x.shape, device="cuda", generator=g).bfloat16()
    compare("compile/new_data", grads_of(compiled, x2, dy), grads_of(b, x2, dy))
    check_no_device_fault()


def test_cuda_graph_forward_backward():
    seed = shared_seed()
    a, b = make_pair(seed, **CASES["shared_limit"])
    g = torch.Generator(device="cuda").manual_seed(seed + dist.get_rank())
    T = 320
    static_x = torch.randn(T, H, device="cuda", generator=g).bfloat16().requires_grad_()
    static_dy = torch.randn(T, H, device="cuda", generator=g).bfloat16()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):                    # warm-up: creates mok's workspace and schedule
        for _ in range(2):
            a.zero_grad(set_to_none=True)
            static_x.grad = None
            a(static_x).backward(static_dy)
    torch.cuda.current_stream().wait_stream(side)
    a.zero_grad(set_to_none=True)
    static_x.grad = None
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_y = a(static_x)
        static_y.backward(static_dy)
    params = dict(a.named_parameters())
    for step in range(3):                            # new inputs copied into the static tensors
        x = torch.randn(T, H, device="cuda", generator=g).bfloat16()
        dy = torch.randn(T, H, device="cuda", generator=g).bfloat16()
        with torch.no_grad():
            static_x.copy_(x)
            static_dy.copy_(dy)
        graph.replay()
        torch.cuda.synchronize()
        got = (static_y.detach().clone(), static_x.grad.clone(),
               {n: p.grad.clone() for n, p in params.items()})
        compare(f"cuda_graph/replay{step}/vs_eager", got, grads_of(a, x, dy))
        compare(f"cuda_graph/replay{step}/vs_reference", got, grads_of(b, x, dy))
    check_no_device_fault()


def test_tiny_lm_trains_like_reference():
    import argparse
    import train_tiny_moe_lm as ex
    args = ex.add_model_args(argparse.ArgumentParser()).parse_args(["--steps", "50", "--log-every", "0"])
    args.seed = shared_seed()
    device = torch.device("cuda", torch.cuda.current_device())
    model_mok = ex.build_model(args, "mok", device)
    model_ref = ex.build_model(args, "torch", device)
    model_ref.load_state_dict(model_mok.state_dict())
    # What bf16 noise does to this model: the reference again from weights one bf16 rounding
    # away (each floating parameter times 1 + u, |u| <= 2^-8, then rounded to its dtype), twice
    noisy_models = []
    for j in range(2):
        model_noisy = ex.build_model(args, "torch", device)
        gen = torch.Generator(device=device).manual_seed(args.seed + 17 + j)
        noisy = {}
        for name, t in model_mok.state_dict().items():
            if t.is_floating_point():
                u = (torch.rand(t.shape, device=t.device, generator=gen) * 2 - 1) * 2.0 ** -8
                t = (t.float() * (1 + u)).to(t.dtype)
            noisy[name] = t
        model_noisy.load_state_dict(noisy)
        noisy_models.append((f"noisy{j}", model_noisy))
    curves = {}
    for name, model in [("mok", model_mok), ("torch", model_ref)] + noisy_models:
        try:
            curves[name] = ex.train(model, args, device)
        except FloatingPointError as e:
            curves[name] = [float("nan")] * args.steps
            print(f"{name}: {e}")
    lm, lt, ln = curves["mok"], curves["torch"], curves["noisy0"]

    # Two runs of this model whose weights differ by one bf16 rounding part ways step by step
    # (seen: a loss spike of 1.40 in one run against 1.15 in the other at step 40, the same loss
    # at step 49): a single step measures that chaos, not mok. So the curves are compared as
    # 5-step means (every step must still be finite), against the larger spread of two such
    # perturbed runs.
    def smooth(c):
        return [sum(c[i:i + 5]) / 5 for i in range(len(c) - 4)]

    def apart(a, b):  # worst 5-step mean, and the last ten steps' sums
        return (max(abs(p - q) / q for p, q in zip(smooth(a), smooth(b))),
                abs(sum(a[-10:]) - sum(b[-10:])) / sum(b[-10:]))
    worst, tail = apart(lm, lt)
    spread = [apart(curves[n], lt) for n, _ in noisy_models]
    noise_worst, noise_tail = max(w for w, _ in spread), max(t for _, t in spread)
    # within bf16 noise: mok no further from the reference than 10% / 5%, or than 1.5x what one
    # bf16 rounding of the weights does to the reference itself; and both actually learn
    ok = (all(v == v for v in lm) and worst < max(0.10, 1.5 * noise_worst) and
          tail < max(0.05, 1.5 * noise_tail) and lm[-1] < 0.7 * lm[0] and lt[-1] < 0.7 * lt[0])
    report("tiny_lm", steps=args.steps, mok_first=lm[0], mok_last=lm[-1], torch_first=lt[0],
           torch_last=lt[-1], worst_5step_rel_diff=worst, last10_rel_diff=tail,
           noise_worst_5step_rel_diff=noise_worst, noise_last10_rel_diff=noise_tail)
    if dist.get_rank() == 0:
        print("MOK-RESULT tiny_lm curves (step: mok torch): " +
              ", ".join(f"{i}: {lm[i]:.3f} {lt[i]:.3f}" for i in list(range(0, args.steps, 10)) + [args.steps - 1]) +
              "; reference from weights one bf16 rounding away: " +
              ", ".join(f"{i}: {ln[i]:.3f}" for i in list(range(0, args.steps, 10)) + [args.steps - 1]), flush=True)
    check_no_device_fault()
    assert agree(ok), (lm[-5:], lt[-5:])


def test_refused_step_reaches_every_rank():
    """A step one rank refuses before reaching mok (above max_tokens) ends the peers' matching
    call at once, not after the timeout, with that rank's refusal: every other rank's device error
    names it, their outputs are NaN, not stale; after mok.clear_device_errors() on every rank the
    same module's next step matches the reference again."""
    import time
    from mok._capi import MokError
    seed = shared_seed()
    a, b = make_pair(seed, max_tokens=256, **CASES["qwen3"])
    rank, world = dist.get_rank(), dist.get_world_size()
    g = torch.Generator(device="cuda").manual_seed(seed + rank)
    x = torch.randn(200, H, device="cuda", generator=g).bfloat16()
    dy = torch.randn(200, H, device="cuda", generator=g).bfloat16()
    compare(f"refused/before seed={seed}", grads_of(a, x, dy), grads_of(b, x, dy))
    refuser = world - 1
    torch.cuda.synchronize()
    t0 = time.monotonic()
    if rank == refuser:
        with pytest.raises(ValueError, match="refused on every rank"):
            a(torch.randn(300, H, device="cuda").bfloat16())
    else:
        with torch.no_grad():
            y = a(x)
        assert bool(torch.isnan(y).all())
    if rank != refuser:      # the refusing rank has its ValueError; the others, the fault
        with pytest.raises(MokError, match=f"first raised on rank {refuser}"):
            mok.check_device_errors()
    else:
        mok.check_device_errors()
    elapsed = time.monotonic() - t0
    report("refused_step", refuser=refuser, seconds=elapsed)
    assert agree(elapsed < 5.0), elapsed
    mok.clear_device_errors()
    compare(f"refused/after seed={seed}", grads_of(a, x, dy), grads_of(b, x, dy))
    check_no_device_fault()

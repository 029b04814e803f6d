"""test_moe_cpu.py — the PyTorch layer of mok on CPU, no GPU and no libmok needed: routing against a
per-token loop, the plain-PyTorch reference layer against a per-token loop and against finite
differences, mok.MoE with the torch backend (shapes, gradients, group-limited routing), the
reference at EP=2 over gloo against EP=1, and a few steps of the example language model.
Skipped as a whole when torch is not installed."""
import os
import sys

import pytest

torch = pytest.importorskip("torch")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
import mok  # noqa: E402
from mok.reference import moe_reference, swiglu  # noqa: E402
from mok.routing import route  # noqa: E402


def loop_moe(x, topk, rw, wg, wu, wd, sg=None, su=None, sd=None, limit=0.0):
    """The layer token by token in float64: the definition in docs/DESIGN.md, nothing clever."""
    x, rw = x.double(), rw.double()
    y = torch.zeros_like(x)
    for t in range(x.shape[0]):
        for j in range(topk.shape[1]):
            e = int(topk[t, j])
            h = swiglu(wg[e].double() @ x[t], wu[e].double() @ x[t], limit)
            y[t] += rw[t, j] * (wd[e].double() @ h)
        if sg is not None:
            y[t] += sd.double() @ swiglu(sg.double() @ x[t], su.double() @ x[t], limit)
    return y


def random_layer(T=13, H=16, I=8, E=6, k=3, Is=8, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: (torch.randn(*s, generator=g) * 0.5).to(dtype)  # noqa: E731
    x = r(T, H)
    topk = torch.stack([torch.randperm(E, generator=g)[:k] for _ in range(T)]).to(torch.int32)
    rw = torch.rand(T, k, generator=g, dtype=torch.float64).to(dtype)
    w = [r(E, I, H), r(E, I, H), r(E, H, I)]
    s = [r(Is, H), r(Is, H), r(H, Is)] if Is else [None, None, None]
    return x, topk, rw, w, s


def rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30)).item()


@pytest.mark.parametrize("limit", [0.0, 0.7])
@pytest.mark.parametrize("Is", [0, 8])
def test_reference_matches_loop(limit, Is):
    x, topk, rw, w, s = random_layer(Is=Is)
    y = moe_reference(x, topk, rw, *w, *s, num_experts=6, swiglu_limit=limit, compute_dtype=torch.float64)
    assert rel(y, loop_moe(x, topk, rw, *w, *s, limit=limit)) < 1e-12


def test_reference_gradients_finite_differences():
    x, topk, rw, w, s = random_layer(T=5, H=6, I=4, E=4, k=2, Is=4)
    leaves = [t.clone().requires_grad_() for t in [x, rw] + w + s]

    def f(x, rw, wg, wu, wd, sg, su, sd):
        return moe_reference(x, topk, rw, wg, wu, wd, sg, su, sd, num_experts=4,
                             compute_dtype=torch.float64)

    assert torch.autograd.gradcheck(f, leaves)


def test_reference_empty_experts_and_bf16():
    x, topk, rw, w, s = random_layer(T=9, E=8, k=1, dtype=torch.bfloat16)
    topk.fill_(3)                           # every token to one expert: the others get no rows
    y = moe_reference(x, topk, rw.float(), *w, *s, num_experts=8)
    assert y.dtype == torch.bfloat16 and y.shape == x.shape
    assert rel(y, loop_moe(x, topk, rw, *w, *s)) < 1e-2


def test_route_softmax_topk():
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(20, 8, generator=g)
    topk, w = route(logits, 3, "softmax", norm_topk_prob=False)
    p = logits.softmax(-1)
    ref_idx = p.topk(3, dim=-1).indices
    assert topk.dtype == torch.int32 and torch.equal(topk.long(), ref_idx)
    assert torch.allclose(w, p.gather(1, ref_idx))
    _, wn = route(logits, 3, "softmax", norm_topk_prob=True, routed_scaling_factor=2.0)
    assert torch.allclose(wn.sum(-1), torch.full((20,), 2.0), atol=1e-5)


def test_route_deepseek_v3_group_limited():
    """Against a token-by-token restatement of DeepSeek-V3's noaux_tc routing."""
    g = torch.Generator().manual_seed(2)
    T, E, n_group, topk_group, k = 32, 16, 4, 2, 4
    logits = torch.randn(T, E, generator=g)
    bias = torch.randn(E, generator=g) * 0.1
    topk, w = route(logits, k, "sigmoid", n_group, topk_group, bias, True, 2.5)
    scores = logits.sigmoid()
    for t in range(T):
        choice = scores[t] + bias
        groups = sorted(range(n_group), key=lambda gi: -float(choice[gi * 4:(gi + 1) * 4].topk(2).values.sum()))
        allowed = [e for gi in groups[:topk_group] for e in range(gi * 4, (gi + 1) * 4)]
        best = sorted(allowed, key=lambda e: -float(choice[e]))[:k]
        assert sorted(topk[t].tolist()) == sorted(best)
        sel = scores[t, topk[t].long()]
        assert torch.allclose(w[t], sel / sel.sum() * 2.5, atol=1e-6)


def test_route_gradient_reaches_logits_not_bias():
    logits = torch.randn(10, 8, requires_grad=True)
    bias = torch.zeros(8, requires_grad=True)
    _, w = route(logits, 2, "sigmoid", 2, 1, bias, False, 1.0)
    w.sum().backward()
    assert logits.grad is not None and logits.grad.abs().sum() > 0 and bias.grad is None


def test_route_rejects_bad_config():
    with pytest.raises(ValueError):
        route(torch.randn(4, 8), 9)
    with pytest.raises(ValueError):
        route(torch.randn(4, 8), 2, n_group=3)
    with pytest.raises(ValueError):
        route(torch.randn(4, 8), 5, n_group=4, topk_group=2)
    with pytest.raises(ValueError):
        route(torch.randn(4, 8), 2, scoring="relu")


@pytest.mark.parametrize("style", ["qwen3", "deepseek_v3"])
def test_module_torch_backend(style):
    torch.manual_seed(3)
    kw = dict(scoring="softmax", norm_topk_prob=True) if style == "qwen3" else dict(
        scoring="sigmoid", n_group=4, topk_group=2, score_correction_bias=True, norm_topk_prob=True,
        routed_scaling_factor=2.5, shared_intermediate_size=24)
    m = mok.MoE(32, 16, 8, 2, backend="torch", **kw)
    if m.e_score_correction_bias is not None:
        m.e_score_correction_bias.normal_(0, 0.1)
    x = torch.randn(3, 5, 32, requires_grad=True)
    y = m(x)
    assert y.shape == x.shape and y.dtype == x.dtype and torch.isfinite(y).all()
    # the module is the reference function on its own routing
    tokens = x.detach().reshape(-1, 32)
    topk, rw = m.route(tokens)
    shared = (m.shared_gate, m.shared_up, m.shared_down)
    expect = loop_moe(tokens.bfloat16(), topk, rw, m.w_gate.detach(), m.w_up.detach(), m.w_down.detach(),
                      *[None if t is None else t.detach() for t in shared])
    assert rel(y.detach().reshape(-1, 32), expect) < 1e-2
    y.square().sum().backward()
    for name, p in list(m.named_parameters()) + [("x", x)]:
        assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0, name


def test_module_rejects_bad_shapes():
    with pytest.raises(ValueError):
        mok.MoE(100, 128, 8, 2, backend="mok")            # H not a multiple of 128
    with pytest.raises(ValueError):
        mok.MoE(32, 16, 8, 2, backend="cuda")
    with pytest.raises(ValueError):
        mok.MoE(32, 16, 8, 2, backend="torch", expert_precision="fp8")  # FP8: mok only
    with pytest.raises(ValueError):
        mok.MoE(128, 128, 8, 2, backend="mok", expert_precision="fp4")
    with pytest.raises(ValueError):
        mok.MoE(128, 128, 8, 2, backend="mok", expert_precision="fp8", kernels="oracle")
    m = mok.MoE(32, 16, 8, 2, backend="torch")
    with pytest.raises(ValueError):
        m(torch.randn(4, 31))


def _ep_worker(rank, world, path, result_path):
    import torch.distributed as dist
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")      # loopback only
    dist.init_process_group("gloo", init_method=f"file://{path}", rank=rank, world_size=world)
    torch.manual_seed(7)                                   # the same full layer on every rank
    T, H, I, E, k = 11, 16, 8, 8, 3
    x_all = torch.randn(world, T, H)
    g = torch.Generator().manual_seed(8)
    topk_all = torch.stack([torch.stack([torch.randperm(E, generator=g)[:k] for _ in range(T)])
                            for _ in range(world)]).to(torch.int32)
    rw_all = torch.rand(world, T, k)
    wg, wu, wd = torch.randn(E, I, H), torch.randn(E, I, H), torch.randn(E, H, I)
    el = E // world
    sl = slice(rank * el, (rank + 1) * el)
    leaves = [x_all[rank].clone().requires_grad_(), rw_all[rank].clone().requires_grad_(),
              wg[sl].clone().requires_grad_(), wu[sl].clone().requires_grad_(), wd[sl].clone().requires_grad_()]
    y = moe_reference(leaves[0], topk_all[rank], leaves[1], *leaves[2:], num_experts=E)
    y.sum().backward()
    # EP=1 on the concatenation of every rank's tokens
    full = [x_all.reshape(-1, H).clone().requires_grad_(), rw_all.reshape(-1, k).clone().requires_grad_(),
            wg.clone().requires_grad_(), wu.clone().requires_grad_(), wd.clone().requires_grad_()]
    alone = [dist.new_group([r]) for r in range(world)]   # every rank makes every group, in order
    y1 = moe_reference(full[0], topk_all.reshape(-1, k), full[1], *full[2:], num_experts=E,
                       process_group=alone[rank])
    y1.sum().backward()
    rows = slice(rank * T, (rank + 1) * T)
    errs = [rel(y, y1[rows]), rel(leaves[0].grad, full[0].grad[rows]), rel(leaves[1].grad, full[1].grad[rows])]
    errs += [rel(leaves[2 + i].grad, full[2 + i].grad[sl]) for i in range(3)]
    torch.save(errs, f"{result_path}.{rank}")
    dist.destroy_process_group()


def test_reference_ep2_over_gloo_matches_ep1(tmp_path):
    """Two CPU processes (gloo): outputs and gradients equal the single-process layer."""
    import torch.multiprocessing as mp
    try:
        mp.spawn(_ep_worker, args=(2, str(tmp_path / "store"), str(tmp_path / "errs")), nprocs=2)
    except Exception as e:  # a gloo build without all_to_all
        if "alltoall" in str(e).lower() or "all_to_all" in str(e).lower():
            pytest.skip(f"gloo cannot all_to_all here: {e}")
        raise
    for r in range(2):
        errs = torch.load(str(tmp_path / f"errs.{r}"))
        assert max(errs) < 1e-5, errs


def test_example_trains_on_cpu():
    sys.path.insert(0, os.path.join(HERE, "..", "..", "examples"))
    import argparse
    import train_tiny_moe_lm as ex
    args = ex.add_model_args(argparse.ArgumentParser()).parse_args(
        ["--steps", "30", "--batch", "4", "--seq", "32", "--vocab", "64", "--hidden", "32", "--intermediate", "16",
         "--shared", "16", "--layers", "1", "--log-every", "0", "--lr", "1e-2"])
    model = ex.build_model(args, "torch", torch.device("cpu"))
    losses = ex.train(model, args, torch.device("cpu"))
    assert len(losses) == 30
    assert sum(losses[-5:]) / 5 < losses[0]


def test_functional_checks_before_c():
    """The functional ops' argument checks run before any C call: FP8 codes, scales and the
    transposed weights of the wrong shape, dtype or device raise."""
    from mok import functional as fn
    E, I, H = 2, 128, 256
    q = lambda *s: torch.zeros(*s, dtype=torch.uint8)  # noqa: E731
    sc = lambda *s: torch.zeros(*s, dtype=torch.float32)  # noqa: E731
    good = (q(E, I, H), sc(E, 1, 2), q(E, I, H), sc(E, 1, 2), q(E, H, I), sc(E, 2, 1))
    with pytest.raises(ValueError, match="CUDA device"):
        fn.transpose_weights_fp8(*good)           # CPU tensors
    with pytest.raises(TypeError):
        fn.transpose_weights_fp8(*good[:5], None)
    if torch.cuda.is_available():
        dev = [t.cuda() for t in good]
        with pytest.raises(ValueError, match="scales"):
            fn.transpose_weights_fp8(*dev[:5], sc(E, 1, 1).cuda())
        with pytest.raises(ValueError, match="uint8"):
            fn.transpose_weights_fp8(dev[0].float(), *dev[1:])
        with pytest.raises(ValueError, match="transpose_weights_fp8"):
            fn._check_fp8_transposed((dev[0],) * 4, dev[0])
    x = torch.zeros(4, H, dtype=torch.bfloat16)
    with pytest.raises(TypeError, match="dy"):
        fn._check_dy(torch.zeros(4, H), x)
    with pytest.raises(TypeError, match="dy"):
        fn._check_dy(torch.zeros(3, H, dtype=torch.bfloat16), x)


def test_ops_skip_their_dispatch_only_in_plain_eager():
    """moe_forward / moe_backward run the ops' work directly only where nothing must see the op:
    not under a dispatch mode (flop counters, fake tensors, tracing), a function mode, or with a
    tensor subclass; the forward also not where autograd must record it (a test that the direct
    path is bitwise the op is in the GPU suite)."""
    from torch.utils.flop_counter import FlopCounterMode
    from torch.overrides import TorchFunctionMode
    from mok import functional as fn
    ts = (torch.zeros(2), None)
    assert fn._plain_eager(ts)
    with FlopCounterMode(display=False):
        assert not fn._plain_eager(ts)
    with TorchFunctionMode():
        assert not fn._plain_eager(ts)
    assert not fn._plain_eager((torch.nn.Parameter(torch.zeros(2)),))  # a subclass
    import inspect
    seen = []
    orig = fn._forward_body

    def body(*a):  # the op's work: reached directly, or by the custom op's dispatch
        via_op = any("torch/_library" in f.filename.replace("\\", "/") for f in inspect.stack())
        seen.append("op" if via_op else "direct")
        return a[0].clone()
    fn._forward_body = body
    try:
        x = torch.zeros(2, 2)
        w = torch.zeros(1, 2, 2, requires_grad=True)
        args = (x, x, x, w.detach(), w.detach(), w.detach(), None, None, None, 0, 1, 0.0)
        fn.moe_forward(*args)
        with torch.no_grad():
            fn.moe_forward(*args[:3], w, w, w, *args[6:])
        assert seen == ["direct", "direct"]
        fn.moe_forward(*args[:3], w, w, w, *args[6:])  # a gradient to record: the op
        with FlopCounterMode(display=False):
            fn.moe_forward(*args)
        assert seen == ["direct", "direct", "op", "op"], seen
    finally:
        fn._forward_body = orig


def test_backward_rebuilds_only_a_changed_table():
    """The BF16 backward skips the schedule's rebuild only when the slot's last build was from the
    very topk tensor it gets, unwritten since: a clone, an in-place write, another tensor, a new
    token count or an inference tensor (no version counter) all rebuild."""
    from mok import functional as fn
    key, other = ("test", 0), ("test", 1)
    topk = torch.randint(0, 8, (16, 4), dtype=torch.int32)
    assert not fn._built_from(key, topk)              # nothing built yet
    fn._note_build(key, topk)
    assert fn._built_from(key, topk)
    assert not fn._built_from(other, topk)            # another schedule
    assert not fn._built_from(key, topk.clone())      # equal values, another tensor
    topk[0, 0] = 3                                    # written in place: its version moves
    assert not fn._built_from(key, topk)
    fn._note_build(key, topk)
    assert fn._built_from(key, topk)
    fn._sched_built.pop(key)                          # what _schedule does on a new token count
    assert not fn._built_from(key, topk)
    with torch.inference_mode():
        frozen = torch.zeros(16, 4, dtype=torch.int32)
    fn._note_build(key, frozen)
    assert not fn._built_from(key, frozen)
    fn._sched_built.pop(key)


@pytest.mark.parametrize("precision", ["fp8", "mxfp8"])
def test_fp8_module_first_in_a_process(precision):
    """An FP8 mok.MoE made before anything else in a fresh process gets as far as its group (which
    fails here, with no GPU, by a mok error) instead of failing on the FP8 cache's not yet imported
    module (AttributeError: the cache was made before the group that imports mok.functional)."""
    import subprocess
    code = ("import mok\n"
            "try:\n"
            f"    mok.MoE(128, 128, 8, 2, backend='mok', expert_precision={precision!r})\n"
            "    print('made')\n"
            "except AttributeError as e:\n"
            "    print('AttributeError', e)\n"
            "except Exception as e:\n"
            "    print('refused', type(e).__name__)\n")
    env = dict(os.environ, PYTHONPATH=os.path.join(HERE, "..", "..", "python"))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=120).stdout
    assert ("made" in out or "refused" in out) and "AttributeError" not in out, out

"""test_hf.py — the Hugging Face state_dict mapping of mok.hf on tiny synthetic DeepSeek-V3 and
Qwen3-MoE layers, on CPU: loading stacks each expert into its slot of this rank's slice, export
inverts it, strictness and shape errors, config translation, and the loaded module computes the HF
layer's math (a token-by-token restatement of the HF MoE block). Skipped when torch is missing."""
import os
import sys

import pytest

torch = pytest.importorskip("torch")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import mok  # noqa: E402

H, I, E, IS = 32, 16, 8, 24
PREFIX = "model.layers.3.mlp."


def hf_layer(style, seed=0):
    """A synthetic HF state dict of one MoE layer (bf16 like the released checkpoints) plus a
    neighbouring layer's key that must be left alone."""
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: (torch.randn(*s, generator=g) * 0.2).bfloat16()  # noqa: E731
    sd = {PREFIX + "gate.weight": r(E, H), "model.layers.4.mlp.gate.weight": r(E, H)}
    for j in range(E):
        sd[f"{PREFIX}experts.{j}.gate_proj.weight"] = r(I, H)
        sd[f"{PREFIX}experts.{j}.up_proj.weight"] = r(I, H)
        sd[f"{PREFIX}experts.{j}.down_proj.weight"] = r(H, I)
    if style == "deepseek_v3":
        sd[PREFIX + "gate.e_score_correction_bias"] = torch.randn(E, generator=g) * 0.1
        sd[PREFIX + "shared_experts.gate_proj.weight"] = r(IS, H)
        sd[PREFIX + "shared_experts.up_proj.weight"] = r(IS, H)
        sd[PREFIX + "shared_experts.down_proj.weight"] = r(H, IS)
    return sd


def make_module(style, **kw):
    if style == "deepseek_v3":
        args = dict(shared_intermediate_size=IS, scoring="sigmoid", n_group=4, topk_group=2,
                    score_correction_bias=True, norm_topk_prob=True, routed_scaling_factor=2.5)
    else:
        args = dict(scoring="softmax", norm_topk_prob=True)
    args.update(kw)
    return mok.MoE(H, I, E, 2, backend="torch", **args)


class FakeRank:
    """Pretends the module is rank `rank` of an expert-parallel group of `size` (loading and
    exporting only look at the module's expert range)."""

    def __init__(self, module, rank, size):
        module.ep_rank, module.ep_size, module.num_local_experts = rank, size, E // size
        el = E // size
        module.w_gate = torch.nn.Parameter(module.w_gate.data[:el].clone())
        module.w_up = torch.nn.Parameter(module.w_up.data[:el].clone())
        module.w_down = torch.nn.Parameter(module.w_down.data[:el].clone())


@pytest.mark.parametrize("style", ["deepseek_v3", "qwen3_moe"])
def test_load_stacks_experts(style):
    sd = hf_layer(style)
    m = make_module(style)
    used = mok.load_hf_moe_state_dict(m, sd, PREFIX, style=style)
    assert "model.layers.4.mlp.gate.weight" not in used
    assert torch.equal(m.router.weight, sd[PREFIX + "gate.weight"].float())
    for j in range(E):
        assert torch.equal(m.w_gate[j], sd[f"{PREFIX}experts.{j}.gate_proj.weight"])
        assert torch.equal(m.w_up[j], sd[f"{PREFIX}experts.{j}.up_proj.weight"])
        assert torch.equal(m.w_down[j], sd[f"{PREFIX}experts.{j}.down_proj.weight"])
    if style == "deepseek_v3":
        assert torch.equal(m.e_score_correction_bias, sd[PREFIX + "gate.e_score_correction_bias"])
        assert torch.equal(m.shared_gate, sd[PREFIX + "shared_experts.gate_proj.weight"])
        assert torch.equal(m.shared_down, sd[PREFIX + "shared_experts.down_proj.weight"])


@pytest.mark.parametrize("style", ["deepseek_v3", "qwen3_moe"])
def test_export_inverts_load(style):
    sd = hf_layer(style)
    m = make_module(style)
    mok.load_hf_moe_state_dict(m, sd, PREFIX.rstrip("."), style=style)   # prefix with or without "."
    out = mok.export_hf_moe_state_dict(m, PREFIX, style=style, dtype=torch.bfloat16)
    assert set(out) == {key for key in sd if key.startswith(PREFIX)}
    for key, t in out.items():
        assert torch.equal(t, sd[key].bfloat16()), key
    m2 = make_module(style)
    mok.load_hf_moe_state_dict(m2, mok.export_hf_moe_state_dict(m, PREFIX, style=style), PREFIX, style=style)
    for (n, a), (_, b) in zip(m.state_dict().items(), m2.state_dict().items()):
        assert torch.equal(a, b), n


@pytest.mark.parametrize("rank", [0, 1, 3])
def test_expert_parallel_slice(rank):
    """Rank r of EP=4 holds experts [2r, 2r+2): from the full checkpoint or from its own shard."""
    sd = hf_layer("qwen3_moe")
    m = make_module("qwen3_moe")
    FakeRank(m, rank, 4)
    assert m.expert_range == (2 * rank, 2 * rank + 2)
    mok.load_hf_moe_state_dict(m, sd, PREFIX, style="qwen3_moe")
    for i in range(2):
        assert torch.equal(m.w_up[i], sd[f"{PREFIX}experts.{2 * rank + i}.up_proj.weight"])
    shard = {key: t for key, t in sd.items()
             if ".experts." not in key or int(key.split(".experts.")[1].split(".")[0]) // 2 == rank}
    m2 = make_module("qwen3_moe")
    FakeRank(m2, rank, 4)
    mok.load_hf_moe_state_dict(m2, shard, PREFIX, style="qwen3_moe")
    assert torch.equal(m2.w_down, m.w_down)
    out = mok.export_hf_moe_state_dict(m, PREFIX, style="qwen3_moe")
    assert sorted(k for k in out if ".experts." in k) == sorted(
        f"{PREFIX}experts.{j}.{p}.weight" for j in (2 * rank, 2 * rank + 1)
        for p in ("gate_proj", "up_proj", "down_proj"))


def test_errors_are_clear():
    sd = hf_layer("deepseek_v3")
    m = make_module("deepseek_v3")
    bad = dict(sd)
    del bad[f"{PREFIX}experts.5.up_proj.weight"]
    with pytest.raises(KeyError, match="experts.5.up_proj"):
        mok.load_hf_moe_state_dict(m, bad, PREFIX)
    bad = dict(sd)
    bad[f"{PREFIX}experts.2.down_proj.weight"] = torch.zeros(I, H)
    with pytest.raises(ValueError, match="experts.2.down_proj"):
        mok.load_hf_moe_state_dict(m, bad, PREFIX)
    bad = dict(sd)
    bad[PREFIX + "shared_expert_gate.weight"] = torch.zeros(1, H)
    with pytest.raises(ValueError, match="shared_expert_gate"):
        mok.load_hf_moe_state_dict(m, bad, PREFIX)
    mok.load_hf_moe_state_dict(m, bad, PREFIX, strict=False)
    # a DeepSeek-V3 checkpoint into a module without the shared expert / bias
    with pytest.raises(ValueError):
        mok.load_hf_moe_state_dict(make_module("qwen3_moe"), sd, PREFIX, style="deepseek_v3")
    with pytest.raises(ValueError):
        mok.load_hf_moe_state_dict(m, sd, PREFIX, style="qwen3_moe")
    with pytest.raises(ValueError):
        mok.load_hf_moe_state_dict(m, sd, PREFIX, style="mixtral")


def test_kwargs_from_hf_config():
    ds = {"hidden_size": 7168, "moe_intermediate_size": 2048, "n_routed_experts": 256,
          "num_experts_per_tok": 8, "n_shared_experts": 1, "scoring_func": "sigmoid", "n_group": 8,
          "topk_group": 4, "topk_method": "noaux_tc", "norm_topk_prob": True,
          "routed_scaling_factor": 2.5}
    kw = mok.moe_kwargs_from_hf_config(ds, "deepseek_v3")
    assert kw == dict(hidden_size=7168, intermediate_size=2048, num_experts=256, top_k=8,
                      shared_intermediate_size=2048, scoring="sigmoid", n_group=8, topk_group=4,
                      score_correction_bias=True, norm_topk_prob=True, routed_scaling_factor=2.5)
    qw = {"hidden_size": 2048, "moe_intermediate_size": 768, "num_experts": 128,
          "num_experts_per_tok": 8, "norm_topk_prob": True}
    assert mok.moe_kwargs_from_hf_config(qw, "qwen3_moe") == dict(
        hidden_size=2048, intermediate_size=768, num_experts=128, top_k=8, scoring="softmax",
        norm_topk_prob=True)


def hf_block(sd, x, style, top_k=2):
    """One HF MoE block token by token, straight from the checkpoint's tensors, in float64."""
    p = PREFIX
    f = lambda key: sd[p + key].double()  # noqa: E731
    silu = torch.nn.functional.silu
    logits = x @ f("gate.weight").t()
    y = torch.zeros_like(x)
    for t in range(x.shape[0]):
        if style == "qwen3_moe":
            probs = logits[t].softmax(-1)
            idx = probs.topk(top_k).indices
            w = probs[idx] / probs[idx].sum()
        else:
            s = logits[t].sigmoid()
            choice = s + f("gate.e_score_correction_bias")
            gs = torch.stack([choice[g * 2:(g + 1) * 2].topk(2).values.sum() for g in range(4)])
            groups = gs.topk(2).indices.tolist()
            masked = torch.full_like(choice, float("-inf"))
            for g in groups:
                masked[g * 2:(g + 1) * 2] = choice[g * 2:(g + 1) * 2]
            idx = masked.topk(top_k).indices
            w = s[idx] / s[idx].sum() * 2.5
        for wj, j in zip(w, idx.tolist()):
            e = f"experts.{j}."
            h = silu(f(e + "gate_proj.weight") @ x[t]) * (f(e + "up_proj.weight") @ x[t])
            y[t] += wj * (f(e + "down_proj.weight") @ h)
        if style == "deepseek_v3":
            e = "shared_experts."
            h = silu(f(e + "gate_proj.weight") @ x[t]) * (f(e + "up_proj.weight") @ x[t])
            y[t] += f(e + "down_proj.weight") @ h
    return y


@pytest.mark.parametrize("style", ["deepseek_v3", "qwen3_moe"])
def test_loaded_module_computes_the_hf_layer(style):
    sd = hf_layer(style, seed=5)
    m = make_module(style)
    mok.load_hf_moe_state_dict(m, sd, PREFIX, style=style)
    x = torch.randn(2, 7, H, generator=torch.Generator().manual_seed(6)).bfloat16()
    with torch.no_grad():
        y = m(x).reshape(-1, H)
    ref = hf_block(sd, x.reshape(-1, H).double(), style)
    err = ((y.double() - ref).norm() / ref.norm()).item()
    assert err < 2e-2, err


def fused(sd, style):
    """The same layer in transformers 5's module layout: experts.gate_up_proj [E, 2I, H] (gate rows
    first) and experts.down_proj [E, H, I]."""
    out = {k: v for k, v in sd.items() if ".experts." not in k}
    g = [sd[f"{PREFIX}experts.{j}.gate_proj.weight"] for j in range(E)]
    u = [sd[f"{PREFIX}experts.{j}.up_proj.weight"] for j in range(E)]
    out[PREFIX + "experts.gate_up_proj"] = torch.cat([torch.stack(g), torch.stack(u)], dim=1)
    out[PREFIX + "experts.down_proj"] = torch.stack(
        [sd[f"{PREFIX}experts.{j}.down_proj.weight"] for j in range(E)])
    return out


@pytest.mark.parametrize("style", ["deepseek_v3", "qwen3_moe"])
def test_fused_layout_loads_like_per_expert(style):
    sd = hf_layer(style)
    a, b = make_module(style), make_module(style)
    mok.load_hf_moe_state_dict(a, sd, PREFIX, style=style)
    assert mok.hf.detect_layout(fused(sd, style), PREFIX) == "fused"
    assert mok.hf.detect_layout(sd, PREFIX) == "per_expert"
    mok.load_hf_moe_state_dict(b, fused(sd, style), PREFIX, style=style)
    for (name, p), q in zip(a.named_parameters(), b.parameters()):
        assert torch.equal(p, q), name
    out = mok.export_hf_moe_state_dict(b, PREFIX, style=style, layout="fused")
    want = {k: v for k, v in fused(sd, style).items() if k.startswith(PREFIX)}
    assert sorted(out) == sorted(want)
    for k in want:
        assert torch.equal(out[k].to(want[k].dtype), want[k]), k


def test_fused_layout_expert_parallel_slice_and_errors():
    sd = fused(hf_layer("qwen3_moe"), "qwen3_moe")
    m = make_module("qwen3_moe")
    FakeRank(m, 1, 2)
    mok.load_hf_moe_state_dict(m, sd, PREFIX, style="qwen3_moe")
    assert torch.equal(m.w_gate[0], sd[PREFIX + "experts.gate_up_proj"][E // 2, :I])
    assert torch.equal(m.w_up[-1], sd[PREFIX + "experts.gate_up_proj"][E - 1, I:])
    with pytest.raises(ValueError, match="expert-parallel"):
        mok.export_hf_moe_state_dict(m, PREFIX, style="qwen3_moe", layout="fused")
    both = dict(sd)
    both.update({k: v for k, v in hf_layer("qwen3_moe").items() if ".experts." in k})
    with pytest.raises(ValueError, match="both"):
        mok.load_hf_moe_state_dict(make_module("qwen3_moe"), both, PREFIX, style="qwen3_moe")
    with pytest.raises(KeyError, match="no routed-expert keys"):
        mok.load_hf_moe_state_dict(make_module("qwen3_moe"), {PREFIX + "gate.weight": sd[PREFIX + "gate.weight"]},
                                   PREFIX, style="qwen3_moe")
    bad = dict(sd)
    bad[PREFIX + "experts.down_proj"] = bad[PREFIX + "experts.down_proj"][:, :, :-1]
    with pytest.raises(ValueError, match="shape"):
        mok.load_hf_moe_state_dict(make_module("qwen3_moe"), bad, PREFIX, style="qwen3_moe")


def tiny_hf_model(style):
    """A real transformers model of the style, built from a tiny config (random weights)."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    common = dict(vocab_size=96, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
                  num_hidden_layers=2, num_attention_heads=4, num_experts_per_tok=2)
    if style == "qwen3_moe":
        cfg = transformers.Qwen3MoeConfig(num_key_value_heads=2, head_dim=16, num_experts=8,
                                          norm_topk_prob=True, decoder_sparse_step=1,
                                          mlp_only_layers=[], **common)
        return transformers.Qwen3MoeForCausalLM(cfg)
    cfg = transformers.DeepseekV3Config(num_key_value_heads=4, n_routed_experts=8, n_group=4,
                                        topk_group=2, n_shared_experts=1, first_k_dense_replace=1,
                                        q_lora_rank=None, kv_lora_rank=16, qk_rope_head_dim=8,
                                        qk_nope_head_dim=16, v_head_dim=16,
                                        routed_scaling_factor=2.5, **common)
    return transformers.DeepseekV3ForCausalLM(cfg)


@pytest.mark.parametrize("style", ["deepseek_v3", "qwen3_moe"])
def test_swap_real_transformers_model(style):
    """transformers' own model classes: the same logits before and after swap_hf_moe_blocks (the
    experts run in bf16 after it), then a few training steps through mok.MoE lower the loss."""
    model = tiny_hf_model(style).eval()
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 96, (2, 16), generator=g)
    with torch.no_grad():
        before = model(ids).logits
    names = mok.swap_hf_moe_blocks(model, backend="torch")
    assert names == (["model.layers.1.mlp"] if style == "deepseek_v3"
                     else ["model.layers.0.mlp", "model.layers.1.mlp"])
    assert all(isinstance(model.get_submodule(n), mok.MoE) for n in names)
    with torch.no_grad():
        after = model(ids).logits
    err = ((after - before).abs().max() / before.abs().max()).item()
    assert err < 2e-2, err                 # bf16 experts against the fp32 HF experts
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    data = torch.randint(0, 96, (4, 17), generator=g)
    losses = []
    for _ in range(8):
        out = model(data[:, :-1], labels=data[:, :-1].clone())
        opt.zero_grad()
        out.loss.backward()
        opt.step()
        losses.append(out.loss.item())
    assert losses[-1] < losses[0] - 0.1, losses
    assert model.get_submodule(names[-1]).w_gate.grad is not None


def test_swap_rejects_other_models():
    with pytest.raises(ValueError, match="model_type"):
        mok.swap_hf_moe_blocks(torch.nn.Linear(2, 2), backend="torch")


def _mx_quantize(w):
    """w [..., rows, cols] -> (float8_e4m3fn codes, uint8 E8M0 scales [..., rows, cols/32]) by the
    OCP MX rule (2^(floor(log2 amax) - 8), saturating)."""
    b = w.float().unflatten(-1, (-1, 32))
    amax = b.abs().amax(-1)
    e = torch.where(amax > 0, torch.floor(torch.log2(amax.clamp_min(1e-38))) - 8 + 127,
                    torch.zeros_like(amax)).clamp(0, 254)
    codes = (b / torch.exp2(e - 127)[..., None]).clamp(-448, 448).to(torch.float8_e4m3fn)
    return codes.flatten(-2), e.to(torch.uint8)


def _block_quantize(w):
    """w [..., rows, cols] -> (float8_e4m3fn codes, float32 scale_inv [..., rows/128 up, cols/128
    up]) as DeepSeek-V3's FP8 files store them (value = code * scale_inv)."""
    rows, cols = w.shape[-2:]
    pr, pc = -(-rows // 128) * 128, -(-cols // 128) * 128
    p = torch.zeros(*w.shape[:-2], pr, pc)
    p[..., :rows, :cols] = w.float()
    blocks = p.unflatten(-2, (-1, 128)).unflatten(-1, (-1, 128))
    s = blocks.abs().amax((-3, -1)).clamp_min(1e-12) / 448.0
    full = s.repeat_interleave(128, -2).repeat_interleave(128, -1)
    return (p / full)[..., :rows, :cols].to(torch.float8_e4m3fn), s


def _fp8_checkpoint(sd):
    """sd with every routed gate / up projection in MXFP8 (codes + weight_scale) and every down
    projection in block-128 FP8 (codes + weight_scale_inv), and the values each now stands for."""
    out, values = dict(sd), {}
    for key in sd:
        if ".experts." not in key or not key.endswith("_proj.weight"):
            continue
        if "down_proj" in key:
            q, s = _block_quantize(sd[key])
            out[key], out[key + "_scale_inv"] = q, s
            full = s.repeat_interleave(128, -2).repeat_interleave(128, -1)
            values[key] = q.float() * full[..., :q.shape[-2], :q.shape[-1]]
        else:
            q, s = _mx_quantize(sd[key])
            out[key], out[key + "_scale"] = q, s
            values[key] = q.float() * torch.exp2(s.float() - 127).repeat_interleave(32, -1)
    return out, values


@pytest.mark.parametrize("style", ["deepseek_v3", "qwen3_moe"])
def test_fp8_checkpoint_loads(style):
    """FP8 expert weights with their scales (MXFP8 E8M0 and block-128 scale_inv) load as their
    dequantized values, bf16-rounded; the MX values exactly, in both layouts; another rank's scale
    keys are left alone under strict; a missing, misshapen or NaN scale is a clear error."""
    sd, values = _fp8_checkpoint(hf_layer(style))
    m = make_module(style)
    used = mok.load_hf_moe_state_dict(m, sd, PREFIX, style=style)
    assert f"{PREFIX}experts.3.gate_proj.weight_scale" in used
    assert f"{PREFIX}experts.3.down_proj.weight_scale_inv" in used
    for j in range(E):
        g = values[f"{PREFIX}experts.{j}.gate_proj.weight"]
        assert torch.equal(m.w_gate[j].float(), g)  # MX values are exact in bf16
        assert torch.equal(m.w_up[j], values[f"{PREFIX}experts.{j}.up_proj.weight"].bfloat16())
        assert torch.equal(m.w_down[j], values[f"{PREFIX}experts.{j}.down_proj.weight"].bfloat16())
    half = make_module(style)
    FakeRank(half, 1, 2)
    mok.load_hf_moe_state_dict(half, sd, PREFIX, style=style)  # strict: others' scales ignored
    assert torch.equal(half.w_gate[0], m.w_gate[E // 2])
    # the fused layout (transformers 5): the same values
    fz = {k: v for k, v in sd.items() if ".experts." not in k}
    for proj, mx in (("gate_up_proj", True), ("down_proj", False)):
        if mx:
            ws = torch.stack([torch.cat([values[f"{PREFIX}experts.{j}.gate_proj.weight"],
                                         values[f"{PREFIX}experts.{j}.up_proj.weight"]]) for j in range(E)])
            q, s = _mx_quantize(ws)
            fz[PREFIX + "experts." + proj], fz[PREFIX + "experts." + proj + "_scale"] = q, s
        else:
            ws = torch.stack([sd[f"{PREFIX}experts.{j}.down_proj.weight"] for j in range(E)])
            sc = torch.stack([sd[f"{PREFIX}experts.{j}.down_proj.weight_scale_inv"] for j in range(E)])
            fz[PREFIX + "experts." + proj], fz[PREFIX + "experts." + proj + "_scale_inv"] = ws, sc
    mf_ = make_module(style)
    mok.load_hf_moe_state_dict(mf_, fz, PREFIX, style=style)
    assert torch.equal(mf_.w_gate, m.w_gate) and torch.equal(mf_.w_up, m.w_up)
    assert torch.equal(mf_.w_down, m.w_down)
    # errors
    key = f"{PREFIX}experts.2.gate_proj.weight"
    bad = dict(sd)
    del bad[key + "_scale"]
    with pytest.raises(KeyError, match="FP8 codes"):
        mok.load_hf_moe_state_dict(make_module(style), bad, PREFIX, style=style)
    bad = dict(sd)
    bad[key + "_scale"] = sd[key + "_scale"][:-1]
    with pytest.raises(ValueError, match="neither"):
        mok.load_hf_moe_state_dict(make_module(style), bad, PREFIX, style=style)
    bad = dict(sd)
    bad[key + "_scale"] = sd[key + "_scale"].clone()
    bad[key + "_scale"][0, 0] = 255
    with pytest.raises(ValueError, match="NaN"):
        mok.load_hf_moe_state_dict(make_module(style), bad, PREFIX, style=style)

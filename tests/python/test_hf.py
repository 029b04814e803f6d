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

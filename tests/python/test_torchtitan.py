"""test_torchtitan.py — examples/torchtitan_moe.py's adapter against torchtitan's own MoE layer,
on CPU (backend "torch"): the same output from the same weights, gradients that train, the
token counts and the shared expert bias that torchtitan's load-balancing hook reads and moves, and
the swap over a model's transformer blocks. Skipped without torch or torchtitan."""
import os
import sys

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchtitan")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples"))
import torchtitan_moe as ad  # noqa: E402


def test_same_output_as_torchtitan():
    titan = ad.tiny_titan_moe(dim=64, hidden=32, shared=48)
    ours = ad.from_titan(titan, backend="torch")
    x = torch.randn(2, 24, 64, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        want, got = titan(x), ours(x)
    err = ((got - want).abs().max() / want.abs().max()).item()
    assert err < 2e-2, err          # mok runs the experts on bf16 tokens, as torchtitan's do
    assert ours.expert_bias_E is ours.moe.e_score_correction_bias
    assert torch.equal(ours.expert_bias_E, titan.expert_bias_E)


def test_counts_bias_hook_and_training():
    titan = ad.tiny_titan_moe(dim=64, hidden=32, shared=0)
    ours = ad.from_titan(titan, backend="torch").train()
    x = torch.randn(3, 16, 64, generator=torch.Generator().manual_seed(5))
    target = torch.randn(3, 16, 64, generator=torch.Generator().manual_seed(6))
    opt = torch.optim.AdamW(ours.parameters(), lr=1e-2)
    losses = []
    for _ in range(6):
        loss = (ours(x) - target).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0], losses
    counts = ours.tokens_per_expert_E
    assert counts.sum().item() == 6 * 3 * 16 * 2       # every step's T*k choices
    # what torchtitan's optimizer hook does with them: the bias moves, and routing follows it
    before = ours.moe.e_score_correction_bias.clone()
    delta = ours.load_balance_coeff * torch.sign(counts.mean() - counts)
    ours.expert_bias_E.add_(delta - delta.mean())
    ours.tokens_per_expert_E.zero_()
    assert not torch.equal(ours.moe.e_score_correction_bias, before)


def test_swap_over_blocks():
    class Block(torch.nn.Module):
        def __init__(self, moe_enabled):
            super().__init__()
            self.moe_enabled = moe_enabled
            self.moe = ad.tiny_titan_moe(dim=64, hidden=32, shared=0) if moe_enabled else None

    model = torch.nn.Module()
    model.layers = torch.nn.ModuleDict({"0": Block(False), "1": Block(True), "2": Block(True)})
    assert ad.swap_titan_moe(model, backend="torch") == 2
    assert isinstance(model.layers["1"].moe, ad.MokTitanMoE) and model.layers["0"].moe is None

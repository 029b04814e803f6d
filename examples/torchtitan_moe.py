"""torchtitan_moe.py — mok as torchtitan's MoE layer. torchtitan is chosen because it is plain
PyTorch (pip-installable, no TransformerEngine or Megatron parallel state to set up), its MoE
layer has the same SwiGLU experts stacked as [E, F, D] tensors as mok, and its trainer's
auxiliary-loss-free balancing talks to the layer through three attributes (load_balance_coeff,
tokens_per_expert_E, expert_bias_E) that an adapter can keep.

MokTitanMoE has torchtitan.models.common.moe.MoE's interface: forward(x [B, L, D]) -> [B, L, D],
tokens_per_expert_E counted in training, expert_bias_E the bias that torchtitan's optimizer hook
moves (it is mok.MoE's e_score_correction_bias, the same tensor). from_titan() builds one from a
torchtitan MoE with its weights and routing; swap_titan_moe(model) replaces every transformer
block's moe (blocks with moe_enabled, under model.layers) in one call.

    python3 examples/torchtitan_moe.py --backend torch      # CPU
    python3 examples/torchtitan_moe.py --backend mok        # one GPU"""
import argparse
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import mok  # noqa: E402


class MokTitanMoE(nn.Module):
    """A mok.MoE behind torchtitan's MoE interface."""

    def __init__(self, moe, load_balance_coeff=None):
        super().__init__()
        self.moe = moe
        self.load_balance_coeff = load_balance_coeff
        device = moe.router.weight.device
        self.register_buffer("tokens_per_expert_E",
                             torch.zeros(moe.num_experts, dtype=torch.float32, device=device),
                             persistent=False)

    @property
    def expert_bias_E(self):
        return self.moe.e_score_correction_bias

    def forward(self, x_BLD):
        y = self.moe(x_BLD)
        if self.training:
            with torch.no_grad():
                self.tokens_per_expert_E.add_(self.moe.last_stats.tokens_per_expert.float())
        return y


@torch.no_grad()
def from_titan(titan_moe, backend="mok", **moe_kwargs):
    """A MokTitanMoE with titan_moe's routing (score function, group-limited top-k, norm, scale,
    expert bias) and weights (router gate, w1/w3/w2 of every expert, the shared expert)."""
    router, experts = titan_moe.router, titan_moe.routed_experts.inner_experts
    E, F, D = experts.w1_EFD.shape
    shared = titan_moe.shared_experts
    Fs = shared.w1.weight.shape[0] if shared is not None else 0
    biased = titan_moe.load_balance_coeff is not None
    device = experts.w1_EFD.device
    m = mok.MoE(D, F, E, router.top_k, shared_intermediate_size=Fs, scoring=router.score_func,
                n_group=router.num_expert_groups or 1, topk_group=router.num_limited_groups or 1,
                score_correction_bias=biased, norm_topk_prob=router.route_norm,
                routed_scaling_factor=router.route_scale, backend=backend, device=device,
                **moe_kwargs)
    first, end = m.expert_range
    m.router.weight.copy_(router.gate.weight)
    m.w_gate.copy_(experts.w1_EFD[first:end])
    m.w_up.copy_(experts.w3_EFD[first:end])
    m.w_down.copy_(experts.w2_EDF[first:end])
    if biased:
        m.e_score_correction_bias.copy_(titan_moe.expert_bias_E)
    if shared is not None:
        m.shared_gate.copy_(shared.w1.weight)
        m.shared_up.copy_(shared.w3.weight)
        m.shared_down.copy_(shared.w2.weight)
    return MokTitanMoE(m, titan_moe.load_balance_coeff)


def swap_titan_moe(model, backend="mok", **moe_kwargs):
    """Replaces the moe of every transformer block of a torchtitan model (model.layers, blocks
    with moe_enabled) with a MokTitanMoE; returns how many."""
    count = 0
    for block in model.get_submodule("layers").values():
        if getattr(block, "moe_enabled", False):
            block.moe = from_titan(block.moe, backend, **moe_kwargs)
            count += 1
    return count


def tiny_titan_moe(dim=128, hidden=128, experts=8, top_k=2, shared=128, device=None):
    """A torchtitan MoE (DeepSeek-V3 style routing) built from its own config classes."""
    from torchtitan.models.common.feed_forward import FeedForward
    from torchtitan.models.common.linear import Linear
    from torchtitan.models.common.moe import (MoE, GroupedExperts, RoutedExperts,
                                              TokenChoiceTopKRouter)
    from torchtitan.models.common.token_dispatcher import LocalTokenDispatcher
    lin = lambda i, o: Linear.Config(in_features=i, out_features=o)  # noqa: E731
    cfg = MoE.Config(
        num_experts=experts,
        routed_experts=RoutedExperts.Config(
            inner_experts=GroupedExperts.Config(dim=dim, hidden_dim=hidden, num_experts=experts),
            token_dispatcher=LocalTokenDispatcher.Config(num_experts=experts, top_k=top_k)),
        router=TokenChoiceTopKRouter.Config(
            num_experts=experts, gate=lin(dim, experts), top_k=top_k, num_expert_groups=4,
            num_limited_groups=2, score_func="sigmoid", route_norm=True, route_scale=2.5),
        load_balance_coeff=1e-3,
        shared_experts=FeedForward.Config(w1=lin(dim, shared), w2=lin(shared, dim),
                                          w3=lin(dim, shared)) if shared else None)
    m = cfg.build()
    torch.manual_seed(0)
    with torch.no_grad():
        for p in m.parameters():
            p.normal_(std=dim ** -0.5)
            p.copy_(p.bfloat16().float())   # bf16 values: both layers see the same weights
        m.expert_bias_E.normal_(std=0.01)
    return m.to(device) if device else m


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backend", choices=("mok", "torch"), default="torch")
    args = ap.parse_args()
    device = torch.device("cuda" if args.backend == "mok" else "cpu")
    titan = tiny_titan_moe(device=device)
    ours = from_titan(titan, backend=args.backend)
    x = torch.randn(2, 64, 128, device=device)
    with torch.no_grad():
        want, got = titan(x), ours(x)
    err = ((got.float() - want.float()).abs().max() / want.float().abs().max()).item()
    print(f"torchtitan MoE vs mok ({args.backend}): max relative difference {err:.2e}")
    ours.train()
    ours(x).square().mean().backward()
    print(f"tokens_per_expert_E {ours.tokens_per_expert_E.tolist()}; "
          f"router grad norm {ours.moe.router.weight.grad.norm():.3e}")
    if args.backend == "mok":
        mok.destroy_groups()


if __name__ == "__main__":
    main()

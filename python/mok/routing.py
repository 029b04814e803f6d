"""routing.py — the router's top-k selection, shared by both backends of mok.MoE: softmax or
sigmoid scores, optional DeepSeek-V3 group-limited selection with a score-correction bias,
optional normalization of the top-k weights and a routed scaling factor. Pure PyTorch, no host
synchronization (traceable by torch.compile and capturable in a CUDA graph)."""
import torch

SCORINGS = ("softmax", "sigmoid")


def check_routing(num_experts, top_k, scoring="softmax", n_group=1, topk_group=1):
    """Raises ValueError for an inconsistent routing configuration."""
    if scoring not in SCORINGS:
        raise ValueError(f"scoring must be one of {SCORINGS}, got {scoring!r}")
    if not 1 <= top_k <= num_experts:
        raise ValueError(f"top_k must be in [1, {num_experts}], got {top_k}")
    if n_group < 1 or num_experts % n_group != 0:
        raise ValueError(f"n_group={n_group} must divide num_experts={num_experts}")
    if not 1 <= topk_group <= n_group:
        raise ValueError(f"topk_group must be in [1, n_group={n_group}], got {topk_group}")
    if top_k > topk_group * (num_experts // n_group):
        raise ValueError(f"top_k={top_k} exceeds the experts of topk_group={topk_group} groups")


def route(logits, top_k, scoring="softmax", n_group=1, topk_group=1, score_bias=None,
          norm_topk_prob=False, routed_scaling_factor=1.0):
    """logits [T, E] (fp32) -> (topk_experts [T, k] int32, router_weights [T, k] fp32).

    scores = softmax(logits) or sigmoid(logits). Experts are chosen on scores + score_bias (the
    DeepSeek-V3 e_score_correction_bias; it steers the choice only). With n_group > 1 the choice is
    limited to the topk_group groups whose top-2 scores sum highest (DeepSeek-V3). The weights are
    the chosen experts' scores (without the bias), divided by their sum when norm_topk_prob, times
    routed_scaling_factor; they carry the gradient back to the logits."""
    if logits.dim() != 2:
        raise ValueError(f"route: logits must be [T, E], got {tuple(logits.shape)}")
    T, E = logits.shape
    check_routing(E, top_k, scoring, n_group, topk_group)
    logits = logits.float()
    scores = logits.softmax(dim=-1) if scoring == "softmax" else logits.sigmoid()
    choice = scores.detach()
    if score_bias is not None:
        if score_bias.shape != (E,):
            raise ValueError(f"route: score_bias must be [{E}], got {tuple(score_bias.shape)}")
        choice = choice + score_bias.detach().float()
    if n_group > 1:
        per_group = E // n_group
        grouped = choice.view(T, n_group, per_group)
        group_scores = grouped.topk(min(2, per_group), dim=-1).values.sum(dim=-1)    # [T, n_group]
        best_groups = group_scores.topk(topk_group, dim=-1).indices
        keep = torch.zeros_like(group_scores, dtype=torch.bool).scatter_(1, best_groups, True)
        choice = grouped.masked_fill(~keep.unsqueeze(-1), float("-inf")).view(T, E)
    topk_experts = choice.topk(top_k, dim=-1).indices
    weights = scores.gather(1, topk_experts)
    if norm_topk_prob:
        weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
    if routed_scaling_factor != 1.0:
        weights = weights * routed_scaling_factor
    return topk_experts.to(torch.int32).contiguous(), weights.contiguous()

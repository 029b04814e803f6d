"""reference.py — the MoE layer in plain PyTorch, the same math as mok.functional.moe, for
comparison and as the tests' oracle: tokens sorted by expert, sent to the rank that holds the expert
with torch.distributed.all_to_all_single (split sizes read on the host), a loop over the local
experts with ordinary matmuls in compute_dtype (fp32 by default), sent back, weighted and summed;
backward through autograd. Runs on CPU or GPU, with or without torch.distributed."""
import torch
import torch.distributed as dist
import torch.nn.functional as F


def swiglu(g, u, limit=0.0):
    """silu(g) * u; with limit > 0: silu(min(g, limit)) * clamp(u, -limit, limit)."""
    if limit > 0:
        g = g.clamp(max=limit)
        u = u.clamp(-limit, limit)
    return F.silu(g) * u


def ep_rank_size(process_group=None):
    """(rank, size) of this process in the expert-parallel group; (0, 1) without torch.distributed."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(process_group), dist.get_world_size(process_group)
    return 0, 1


class _AllToAll(torch.autograd.Function):
    """all_to_all_single along dim 0 with given split sizes; its backward is the reverse exchange."""

    @staticmethod
    def forward(ctx, x, out_splits, in_splits, group):
        ctx.splits, ctx.group = (out_splits, in_splits), group
        return _exchange(x, out_splits, in_splits, group)

    @staticmethod
    def backward(ctx, grad):
        out_splits, in_splits = ctx.splits
        return _exchange(grad, in_splits, out_splits, ctx.group), None, None, None


def _exchange(x, out_splits, in_splits, group):
    x = x.contiguous()
    out = x.new_empty((sum(out_splits),) + tuple(x.shape[1:]))
    dist.all_to_all_single(out, x, out_splits, in_splits, group=group)
    return out


def moe_reference(x, topk_experts, router_weights, w_gate, w_up, w_down, ws_gate=None, ws_up=None,
                  ws_down=None, *, num_experts, process_group=None, swiglu_limit=0.0,
                  compute_dtype=torch.float32):
    """y [T, H] in x's dtype: y[t] = shared(x[t]) + sum_j router_weights[t, j] *
    expert_{topk_experts[t, j]}(x[t]), computed in compute_dtype. Arguments as in
    mok.functional.moe; this rank's experts are [rank*E/EP, (rank+1)*E/EP) of process_group."""
    rank, ep = ep_rank_size(process_group)
    T, H = x.shape
    k = topk_experts.shape[1]
    el, I = w_gate.shape[0], w_gate.shape[1]
    if el * ep != num_experts:
        raise ValueError(f"{el} local experts on each of {ep} ranks is not num_experts={num_experts}")
    if topk_experts.shape != (T, k) or router_weights.shape != (T, k):
        raise ValueError("topk_experts and router_weights must be [T, k]")
    if w_up.shape != (el, I, H) or w_down.shape != (el, H, I):
        raise ValueError("w_gate, w_up must be [E/EP, I, H] and w_down [E/EP, H, I]")
    cd = compute_dtype
    flat = topk_experts.reshape(-1).long()
    order = torch.argsort(flat, stable=True)          # (token, j) pairs sorted by global expert
    token = order // k
    send_x = x[token]
    counts = torch.bincount(flat, minlength=num_experts)             # rows this rank sends per expert
    if ep > 1:
        recv_counts = torch.empty_like(counts)                       # [source rank, local expert]
        dist.all_to_all_single(recv_counts, counts, group=process_group)
        send_splits = counts.view(ep, el).sum(1).tolist()
        recv_splits = recv_counts.view(ep, el).sum(1).tolist()
        recv_x = _AllToAll.apply(send_x, recv_splits, send_splits, process_group)
    else:
        recv_counts = counts
        recv_x = send_x
    # received rows are grouped by (source rank, local expert): sort them by local expert
    local_expert = torch.repeat_interleave(
        torch.arange(ep * el, device=x.device) % el, recv_counts.view(-1))
    perm = torch.argsort(local_expert, stable=True)
    rows = recv_x[perm].to(cd)
    sizes = recv_counts.view(ep, el).sum(0).tolist()
    outs = []
    for e, r in enumerate(rows.split(sizes)):
        h = swiglu(r @ w_gate[e].to(cd).t(), r @ w_up[e].to(cd).t(), swiglu_limit)
        outs.append(h @ w_down[e].to(cd).t())
    out_rows = torch.cat(outs) if outs else rows.new_zeros(0, H)
    back = out_rows[torch.argsort(perm)]              # (source rank, local expert) order again
    expert_out = _AllToAll.apply(back, send_splits, recv_splits, process_group) if ep > 1 else back
    weighted = expert_out * router_weights.reshape(-1)[order].unsqueeze(1).to(cd)
    y = torch.zeros(T, H, device=x.device, dtype=cd).index_add(0, token, weighted)
    if ws_gate is not None:
        xs = x.to(cd)
        y = y + swiglu(xs @ ws_gate.to(cd).t(), xs @ ws_up.to(cd).t(), swiglu_limit) @ ws_down.to(cd).t()
    return y.to(x.dtype)

"""baseline_torch.py — the PyTorch+NCCL MoE layer that mok is measured against: what a training
stack runs today. Dispatch with all_to_all_single (split sizes copied to the host), experts with
torch._grouped_mm, SwiGLU, the shared expert as dense matmuls, combine with a second all_to_all and
index_add; backward through autograd."""
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.nn.functional import all_to_all_single as a2a_autograd


def _swiglu(g, u, limit):
    if limit > 0:
        g = g.clamp(max=limit)
        u = u.clamp(-limit, limit)
    return F.silu(g) * u


def _grouped(a, w, offs):
    """a [M, K] rows grouped by expert (ends at offs), w [G, N, K] -> [M, N]."""
    if a.shape[0] == 0:
        return a.new_empty(0, w.shape[1])
    return torch._grouped_mm(a, w.transpose(-2, -1), offs=offs)


def grouped_mm_works():
    """Whether torch._grouped_mm runs here on this layout (it needs sm90+ and a recent torch)."""
    try:
        a = torch.randn(48, 64, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(3, 32, 64, device="cuda", dtype=torch.bfloat16)
        offs = torch.tensor([16, 16, 48], device="cuda", dtype=torch.int32)
        out = _grouped(a, w, offs)
        ref = torch.cat([a[:16] @ w[0].t(), a[16:48] @ w[2].t()])
        return bool(torch.allclose(out.float(), ref.float(), rtol=2e-2, atol=2e-1))
    except RuntimeError:
        return False


def moe_baseline(x, topk, rw, w_gate, w_up, w_down, ws_gate, ws_up, ws_down, num_experts,
                 group=None, limit=0.0):
    """Same math as mok.functional.moe; differentiable through autograd."""
    ep = dist.get_world_size(group) if dist.is_initialized() else 1
    el = num_experts // ep
    T, k = topk.shape
    flat = topk.reshape(-1).long()
    order = torch.argsort(flat, stable=True)            # (token, j) pairs sorted by expert
    send_x = x[order // k]
    per_expert = torch.bincount(flat, minlength=num_experts)
    if ep > 1:
        recv_counts = torch.empty_like(per_expert)
        dist.all_to_all_single(recv_counts, per_expert, group=group)   # [src rank][local expert]
        send_splits = per_expert.view(ep, el).sum(1).tolist()          # host sync: the baseline's way
        recv_splits = recv_counts.view(ep, el).sum(1).tolist()
        recv_x = a2a_autograd(send_x.new_empty(sum(recv_splits), x.shape[1]), send_x, recv_splits,
                              send_splits, group=group)
    else:
        recv_counts = per_expert
        recv_x = send_x
    # rows arrive grouped by (source rank, local expert): regroup by local expert
    src_expert = torch.repeat_interleave(torch.arange(ep * el, device=x.device) % el, recv_counts.view(-1))
    regroup = torch.argsort(src_expert, stable=True)
    rows = recv_x[regroup]
    offs = torch.cumsum(recv_counts.view(ep, el).sum(0), 0).to(torch.int32)
    h = _swiglu(_grouped(rows, w_gate, offs), _grouped(rows, w_up, offs), limit)
    out_rows = _grouped(h, w_down, offs)
    back = out_rows[torch.argsort(regroup)]              # back to (source rank, expert) order
    if ep > 1:
        expert_out = a2a_autograd(back.new_empty(sum(send_splits), back.shape[1]), back, send_splits,
                                  recv_splits, group=group)
    else:
        expert_out = back
    weights = rw.reshape(-1)[order].unsqueeze(1).to(expert_out.dtype)
    y = torch.zeros(T, x.shape[1], device=x.device, dtype=torch.float32)
    y = y.index_add(0, order // k, (expert_out * weights).float())
    if ws_gate is not None:
        y = y + (_swiglu(x @ ws_gate.t(), x @ ws_up.t(), limit) @ ws_down.t()).float()
    return y.to(x.dtype)

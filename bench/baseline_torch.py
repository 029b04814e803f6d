"""baseline_torch.py — the PyTorch+NCCL MoE layer that mok is measured against: what a training
stack runs today. Dispatch with all_to_all_single (split sizes copied to the host), experts with
torch._grouped_mm, SwiGLU, the shared expert as dense matmuls, combine with a second all_to_all and
index_add; backward through autograd. With fp8=True the routed experts run PyTorch's FP8 path:
torch._scaled_grouped_mm on E4M3 operands with rowwise power-of-two scales, the recipe of
torchao's MoE training (forward: tokens per row, weights per output column; data gradient:
weights per column of the reduction; weight gradient: per expert and column over the expert's
tokens), written here in torch ops because torchao is not a dependency; groups padded to 16
rows as that recipe requires; the shared expert stays BF16, as in mok's FP8 layer."""
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


E4M3_MAX = 448.0


def _fp8_scale(amax):
    """The power-of-two scale that maps amax to at most E4M3's largest value."""
    return torch.exp2(torch.floor(torch.log2(E4M3_MAX / amax.float().clamp(min=1e-12))))


def _to_fp8(t, scale):
    return (t.float() * scale).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)


def _fp8_rows(t):
    """E4M3 codes of t with one scale per row (over the last dim) and the scales' inverses."""
    s = _fp8_scale(t.abs().amax(-1, keepdim=True))
    return _to_fp8(t, s), s.reciprocal().squeeze(-1)


def _fp8_group_cols(t, gid, groups):
    """E4M3 codes of t [M, C] with one scale per (group, column) over the group's rows (gid: each
    row's group; rows with gid == groups lie past the last group and take a dummy scale), and the
    inverses [groups, C]."""
    amax = torch.zeros(groups + 1, t.shape[1], device=t.device, dtype=torch.float32)
    amax.scatter_reduce_(0, gid[:, None].expand(t.shape), t.abs().float(), "amax")
    s = _fp8_scale(amax)
    return _to_fp8(t, s[gid]), s[:groups].reciprocal()


def fp8_weight_codes(w):
    """The FP8 codes of a routed weight w [G, N, K] that the experts below use: rowwise along K for
    the forward, and along N (of w transposed) for the data gradient. Made once per weight update
    and passed in, as mok's FP8 layer takes its codes (a training step reuses them over its
    micro-batches); without them the experts make them at every call."""
    return _fp8_rows(w) + _fp8_rows(w.transpose(-2, -1).contiguous())


class _FP8GroupedMM(torch.autograd.Function):
    """a [M, K] x w [G, N, K] -> [M, N] per row group (offs: the groups' ends, multiples of 16;
    gid: each row's group), every product on torch._scaled_grouped_mm in E4M3; codes: w's
    fp8_weight_codes, or None to make them here."""

    @staticmethod
    def forward(ctx, a, w, offs, gid, codes=None):
        qa, sa = _fp8_rows(a)
        qw, sw = _fp8_rows(w) if codes is None else codes[:2]
        ctx.save_for_backward(a, w, offs, gid)
        ctx.codes = codes
        return torch._scaled_grouped_mm(qa, qw.transpose(-2, -1), sa, sw, offs=offs,
                                        out_dtype=torch.bfloat16, use_fast_accum=True)

    @staticmethod
    def backward(ctx, g):
        a, w, offs, gid = ctx.saved_tensors
        g = g.contiguous()
        qg, sg = _fp8_rows(g)
        if ctx.codes is None:
            qwt, swt = _fp8_rows(w.transpose(-2, -1).contiguous())
        else:
            qwt, swt = ctx.codes[2:]
        ctx.codes = None
        da = torch._scaled_grouped_mm(qg, qwt.transpose(-2, -1), sg, swt, offs=offs,
                                      out_dtype=torch.bfloat16, use_fast_accum=True)
        groups = w.shape[0]
        qgc, sgc = _fp8_group_cols(g, gid, groups)
        qac, sac = _fp8_group_cols(a, gid, groups)
        dw = torch._scaled_grouped_mm(qgc.t().contiguous(), qac.t().contiguous().t(),
                                      sgc.reshape(-1), sac.reshape(-1), offs=offs,
                                      out_dtype=torch.bfloat16, use_fast_accum=True)
        return da, dw, None, None, None


def _padded_groups(cnt, m):
    """Row groups of cnt rows each (m in all) padded to multiples of 16 rows, with no host sync
    (the padded buffer has room for the worst case): each row's padded position, the padded
    groups' ends (int32), each padded row's group (groups past the last: len(cnt)) and the padded
    buffer's rows (a multiple of 16, so that its transposes keep 16-byte rows)."""
    el, dev = cnt.numel(), cnt.device
    pad = (cnt + 15) // 16 * 16
    end_p = torch.cumsum(pad, 0)
    start = torch.cumsum(cnt, 0) - cnt
    gid = torch.repeat_interleave(torch.arange(el, device=dev), cnt, output_size=m)
    dest = (end_p - pad)[gid] + torch.arange(m, device=dev) - start[gid]
    mp = (m + 16 * el + 15) // 16 * 16
    gid_p = torch.searchsorted(end_p, torch.arange(mp, device=dev), right=True)
    return dest, end_p.to(torch.int32), gid_p, mp


def _experts_fp8(rows, cnt, w_gate, w_up, w_down, limit, codes=None):
    """The routed experts on rows grouped by expert (cnt rows each) in FP8; codes: None, or the
    three weights' fp8_weight_codes."""
    dest, offs, gid_p, mp = _padded_groups(cnt, rows.shape[0])
    rows_p = rows.new_zeros(mp, rows.shape[1]).index_copy(0, dest, rows)
    cg, cu, cd = codes if codes is not None else (None, None, None)
    h = _swiglu(_FP8GroupedMM.apply(rows_p, w_gate, offs, gid_p, cg),
                _FP8GroupedMM.apply(rows_p, w_up, offs, gid_p, cu), limit)
    return _FP8GroupedMM.apply(h, w_down, offs, gid_p, cd)[dest]


def scaled_grouped_mm_works():
    """Whether the FP8 experts above run here (torch._scaled_grouped_mm needs sm90 and a recent
    torch), checked forward and backward against the bf16 product on a small problem: "" when
    they do, else why not."""
    try:
        torch.manual_seed(0)
        a = torch.randn(40, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        w = torch.randn(3, 32, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        cnt = torch.tensor([16, 0, 24], device="cuda")
        rows_ref = torch.cat([a[:16] @ w[0].t(), a[16:] @ w[2].t()])
        dest, offs, gid_p, mp = _padded_groups(cnt, 40)
        a_p = a.new_zeros(mp, 64).index_copy(0, dest, a)
        out = _FP8GroupedMM.apply(a_p, w, offs, gid_p)[dest]
        with torch.no_grad():  # codes made ahead give the same bits
            again = _FP8GroupedMM.apply(a_p, w, offs, gid_p, fp8_weight_codes(w))[dest]
        if not torch.equal(out, again):
            return "FP8 experts differ with their weight codes made ahead"
        (dw,) = torch.autograd.grad(out.float().square().sum(), [w])
        (dw_ref,) = torch.autograd.grad(rows_ref.float().square().sum(), [w])
        err_y = ((out.float() - rows_ref.float()).norm() / rows_ref.float().norm()).item()
        err_dw = ((dw.float() - dw_ref.float()).norm() / dw_ref.float().norm()).item()
        if err_y > 0.1 or err_dw > 0.1:
            return f"FP8 experts differ from bf16: y {err_y:.2e}, dW {err_dw:.2e} (relative)"
        return ""
    except (RuntimeError, AttributeError, TypeError, ValueError) as e:
        return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"


def moe_baseline(x, topk, rw, w_gate, w_up, w_down, ws_gate, ws_up, ws_down, num_experts,
                 group=None, limit=0.0, fp8=False, fp8_codes=None):
    """Same math as mok.functional.moe; differentiable through autograd. fp8: the routed experts
    on PyTorch's FP8 grouped GEMM (see the top of this file); fp8_codes: the routed weights'
    fp8_weight_codes made once per weight update (None: made at every call)."""
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
    cnt = recv_counts.view(ep, el).sum(0)
    if fp8:
        out_rows = _experts_fp8(rows, cnt, w_gate, w_up, w_down, limit, fp8_codes)
    else:
        offs = torch.cumsum(cnt, 0).to(torch.int32)
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

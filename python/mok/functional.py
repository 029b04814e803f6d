"""functional.py — mok's functional API for PyTorch: expert-parallel groups made from any
torch.distributed ProcessGroup, workspaces cached per (group, shape, knobs), and the layer's forward
and backward as torch.library custom ops (with fake implementations, so torch.compile traces them)
tied together by autograd.

    y = mok.functional.moe(x, topk_experts, router_weights, w_gate, w_up, w_down,
                           ws_gate, ws_up, ws_down, group=grp, num_experts=E)

Each op builds the schedule from topk_experts on the device (no host sync), so forward and backward
are pure functions of their tensors; a workspace is created (collectively, with allocation) the first
time a shape is seen: run one step before capturing a CUDA graph."""
import ctypes
from typing import List, Optional, Tuple

import torch

from . import _capi as C

_groups = []        # group id -> Group
_workspaces = {}    # (group id, shape, knobs) -> (workspace handle, schedule handle)


class Group:
    """An expert-parallel group over the ranks of a torch.distributed ProcessGroup (None: the
    default group, or a single process when torch.distributed is not initialized). Collective."""

    def __init__(self, process_group=None):
        import torch.distributed as dist
        if dist.is_available() and dist.is_initialized():
            self.rank = dist.get_rank(process_group)
            self.size = dist.get_world_size(process_group)
        else:
            self.rank, self.size = 0, 1
        uid = C.UniqueId()
        if self.rank == 0:
            C.call("mok_get_unique_id", ctypes.byref(uid))
        if self.size > 1:
            box = [bytes(uid.internal)] if self.rank == 0 else [None]
            src = dist.get_global_rank(process_group, 0) if process_group is not None else 0
            dist.broadcast_object_list(box, src=src, group=process_group)
            ctypes.memmove(ctypes.addressof(uid), box[0], 128)
        self.handle = ctypes.c_void_p()
        C.call("mok_group_create", ctypes.byref(uid), self.size, self.rank, ctypes.byref(self.handle))
        self.id = len(_groups)
        _groups.append(self)

    def destroy(self):
        """Collective: frees the group's workspaces and the group."""
        for key in [k for k in _workspaces if k[0] == self.id]:
            ws, sched = _workspaces.pop(key)
            C.call("mok_schedule_destroy", sched)
            C.call("mok_workspace_destroy", ws)
        if self.handle:
            C.call("mok_group_destroy", self.handle)
            self.handle = ctypes.c_void_p()


def _workspace(group_id, shape, knobs):
    key = (group_id, shape, knobs)
    if key not in _workspaces:
        group = _groups[group_id]
        cfg = C.default_config(**dict(knobs))
        ws, sched = ctypes.c_void_p(), ctypes.c_void_p()
        C.call("mok_workspace_create", group.handle, ctypes.byref(C.Shape(*shape)), ctypes.byref(cfg),
               ctypes.byref(ws))
        C.call("mok_schedule_create", ws, ctypes.byref(sched))
        _workspaces[key] = (ws, sched)
    return _workspaces[key]


def _ptr(t):
    return ctypes.c_void_p(t.data_ptr()) if t is not None and t.numel() > 0 else None


def _knobs(swiglu_limit):
    if swiglu_limit > 0:
        return (("use_swiglu_limit", 1), ("swiglu_limit", float(swiglu_limit)))
    return ()


def _shape(x, topk, num_experts, w_gate, ws_gate):
    shared = ws_gate.shape[0] if ws_gate is not None and ws_gate.numel() > 0 else 0
    return (x.shape[0], x.shape[1], num_experts, w_gate.shape[1], topk.shape[1], shared)


def _check(x, topk, rw, weights):
    if x.dtype != torch.bfloat16 or topk.dtype != torch.int32 or rw.dtype != torch.float32:
        raise TypeError("mok: x must be bfloat16, topk_experts int32, router_weights float32")
    for w in weights:
        if w is not None and w.numel() > 0 and (w.dtype != torch.bfloat16 or not w.is_contiguous()):
            raise TypeError("mok: weights must be contiguous bfloat16")
    if not (x.is_contiguous() and topk.is_contiguous() and rw.is_contiguous()):
        raise ValueError("mok: x, topk_experts and router_weights must be contiguous")


def _weights(w_gate, w_up, w_down, ws_gate, ws_up, ws_down):
    w = C.Weights()
    w.w_gate, w.w_up, w.w_down = _ptr(w_gate), _ptr(w_up), _ptr(w_down)
    w.ws_gate, w.ws_up, w.ws_down = _ptr(ws_gate), _ptr(ws_up), _ptr(ws_down)
    return w


@torch.library.custom_op("mok::moe_forward", mutates_args=())
def moe_forward(x: torch.Tensor, topk: torch.Tensor, rw: torch.Tensor, w_gate: torch.Tensor,
                w_up: torch.Tensor, w_down: torch.Tensor, ws_gate: Optional[torch.Tensor],
                ws_up: Optional[torch.Tensor], ws_down: Optional[torch.Tensor], group_id: int,
                num_experts: int, swiglu_limit: float) -> torch.Tensor:
    _check(x, topk, rw, (w_gate, w_up, w_down, ws_gate, ws_up, ws_down))
    ws, sched = _workspace(group_id, _shape(x, topk, num_experts, w_gate, ws_gate), _knobs(swiglu_limit))
    y = torch.empty_like(x)
    stream = ctypes.c_void_p(torch.cuda.current_stream(x.device).cuda_stream)
    C.call("mok_schedule_build", sched, _ptr(topk), stream)
    C.call("mok_forward", sched, ctypes.byref(_weights(w_gate, w_up, w_down, ws_gate, ws_up, ws_down)),
           _ptr(x), _ptr(rw), _ptr(y), stream)
    return y


@moe_forward.register_fake
def _(x, topk, rw, w_gate, w_up, w_down, ws_gate, ws_up, ws_down, group_id, num_experts, swiglu_limit):
    return torch.empty_like(x)


@torch.library.custom_op("mok::moe_backward", mutates_args=())
def moe_backward(dy: torch.Tensor, x: torch.Tensor, topk: torch.Tensor, rw: torch.Tensor,
                 w_gate: torch.Tensor, w_up: torch.Tensor, w_down: torch.Tensor,
                 ws_gate: Optional[torch.Tensor], ws_up: Optional[torch.Tensor],
                 ws_down: Optional[torch.Tensor], group_id: int, num_experts: int,
                 swiglu_limit: float) -> List[torch.Tensor]:
    _check(x, topk, rw, (w_gate, w_up, w_down, ws_gate, ws_up, ws_down))
    dy = dy.contiguous()
    ws, sched = _workspace(group_id, _shape(x, topk, num_experts, w_gate, ws_gate), _knobs(swiglu_limit))
    empty = x.new_empty(0)
    out = [torch.empty_like(x), torch.empty_like(rw), torch.empty_like(w_gate), torch.empty_like(w_up),
           torch.empty_like(w_down)]
    out += [torch.empty_like(t) if t is not None and t.numel() > 0 else empty for t in (ws_gate, ws_up, ws_down)]
    g = C.Grads()
    g.dx, g.d_router_weights, g.dw_gate, g.dw_up, g.dw_down, g.dws_gate, g.dws_up, g.dws_down = [_ptr(t) for t in out]
    g.grad_fp32, g.accumulate = 0, 0
    stream = ctypes.c_void_p(torch.cuda.current_stream(x.device).cuda_stream)
    C.call("mok_schedule_build", sched, _ptr(topk), stream)
    C.call("mok_backward", sched, ctypes.byref(_weights(w_gate, w_up, w_down, ws_gate, ws_up, ws_down)),
           _ptr(x), _ptr(rw), _ptr(dy), ctypes.byref(g), stream)
    return out


@moe_backward.register_fake
def _(dy, x, topk, rw, w_gate, w_up, w_down, ws_gate, ws_up, ws_down, group_id, num_experts, swiglu_limit):
    empty = x.new_empty(0)
    out = [torch.empty_like(x), torch.empty_like(rw), torch.empty_like(w_gate), torch.empty_like(w_up),
           torch.empty_like(w_down)]
    return out + [torch.empty_like(t) if t is not None and t.numel() > 0 else empty for t in (ws_gate, ws_up, ws_down)]


def _setup_context(ctx, inputs, output):
    x, topk, rw, w_gate, w_up, w_down, ws_gate, ws_up, ws_down, group_id, num_experts, limit = inputs
    ctx.save_for_backward(x, topk, rw, w_gate, w_up, w_down, ws_gate, ws_up, ws_down)
    ctx.args = (group_id, num_experts, limit)


def _backward(ctx, dy):
    x, topk, rw, w_gate, w_up, w_down, ws_gate, ws_up, ws_down = ctx.saved_tensors
    dx, drw, dwg, dwu, dwd, dsg, dsu, dsd = moe_backward(dy, x, topk, rw, w_gate, w_up, w_down, ws_gate,
                                                         ws_up, ws_down, *ctx.args)
    shared = ws_gate is not None and ws_gate.numel() > 0
    return (dx, None, drw, dwg, dwu, dwd, dsg if shared else None, dsu if shared else None,
            dsd if shared else None, None, None, None)


torch.library.register_autograd("mok::moe_forward", _backward, setup_context=_setup_context)


def moe(x, topk_experts, router_weights, w_gate, w_up, w_down, ws_gate=None, ws_up=None, ws_down=None,
        *, group: Group, num_experts: int, swiglu_limit: float = 0.0) -> torch.Tensor:
    """The MoE layer on this rank's tokens. x [T, H] bf16; topk_experts [T, k] int32; router_weights
    [T, k] fp32; this rank's experts' w_gate, w_up [E/EP, I, H] and w_down [E/EP, H, I] bf16; the
    shared expert's ws_gate, ws_up [Is, H], ws_down [H, Is] (None: no shared expert). Differentiable
    in x, router_weights and all weights. swiglu_limit > 0 turns the SwiGLU clamp on."""
    return moe_forward(x, topk_experts, router_weights, w_gate, w_up, w_down, ws_gate, ws_up, ws_down,
                       group.id, int(num_experts), float(swiglu_limit))

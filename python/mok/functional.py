"""functional.py — mok's functional API for PyTorch: expert-parallel groups made from any
torch.distributed ProcessGroup, workspaces cached per (group, shape, knobs), and the layer's forward
and backward as torch.library custom ops (with fake implementations, so torch.compile traces them)
tied together by autograd; in eager mode moe() runs the same work under a plain
autograd.Function, and moe_forward / moe_backward, where nothing must see the op (no gradient to
record, no tracing or dispatch mode, plain tensors), call its work directly: the same C calls and
bits, with less host time before the GPU has work.

    y = mok.functional.moe(x, topk_experts, router_weights, w_gate, w_up, w_down,
                           ws_gate, ws_up, ws_down, group=grp, num_experts=E)

Each op builds the schedule from topk_experts on the device (no host sync); a workspace is created
(collectively, with allocation) the first time a shape is seen: run one step before capturing a CUDA
graph. A shape's token count is part of it, so steps of varying size make a workspace each, unless
the Group has max_tokens: then one workspace of that many tokens serves every step of up to as many
(each rank's own count, mok_schedule_set_tokens). The backward builds the schedule again only
when the slot's last build was not from the very topk tensor it gets, unwritten since (the build
is a pure function of topk, so the table would be the same).

What forward keeps for backward (pulled tokens, gate / up / SwiGLU rows, expert outputs) lives in a
mok schedule, so each layer that is in flight between its forward and its backward needs its own:
that is the `slot` argument. A slot >= 1 is a dedicated schedule (mok.MoE gives each module its
own): its backward uses what the slot's latest forward kept, so a slot may have one forward with
autograd in flight at a time (activation checkpointing is fine: the recomputation runs just before
the backward). slot None / -1 keeps nothing: the backward re-runs the forward first (always right,
costs one more forward). slot 0, the ops' default, is one schedule shared by all callers that pass
it, for single-layer benchmarks that run forward then backward."""
import ctypes
import weakref
from typing import List, Optional

import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode as _current_dispatch_mode

from . import _capi as C
from .fp8_cache import FP8WeightCache  # noqa: F401  (mok.FP8WeightCache; moe_fp8's weight_cache)

_groups = []        # group id -> Group
_workspaces = {}    # (group id, shape, knobs) -> workspace handle
_schedules = {}     # (group id, shape, knobs, slot) -> schedule handle
_sched_tokens = {}  # the same key -> the token count last set on that schedule
_sched_built = {}   # the same key -> (weakref to the topk tensor, its version) of the last build


class Group:
    """An expert-parallel group over the ranks of a torch.distributed ProcessGroup (None: the
    default group, or a single process when torch.distributed is not initialized). Collective.
    path: "auto" (the default: "fused" in BF16 across GPUs, else "grouped"), "fused" (dispatch pulled by
    comm CTAs inside the gate+up kernel, combine and dx pushed by the GEMM epilogues), "grouped"
    (separate communication kernels, the same grouped GEMMs) or "oracle" (the mma.sync expert
    GEMMs, the GPU oracle), for every workspace of the group. plan: further plan fields to pin
    (a "key=value,..." text or a dict, include/mok.h's mok_plan; the others mok chooses; every
    choice but the oracle gives the same bits). Other keyword arguments set mok_config knobs for
    every workspace of the group, e.g. ring_bytes=1 << 30 (a token ring per layer: memory bounded
    by the knob, backward replays the forward of macrobatches not kept) or
    macrobatch_minibatches=32. max_tokens=N: every workspace holds N tokens per rank and serves any
    call of up to N, so that steps of varying size share it (each rank may pass its own count);
    None: a workspace per token count, every rank calling with the same one. plans() says what
    the group's workspaces resolved."""

    PATHS = ("auto", "fused", "grouped", "oracle")

    def __init__(self, process_group=None, path="auto", max_tokens=None, plan=None, **knobs):
        if path not in self.PATHS:
            raise ValueError(f"mok: path must be one of {self.PATHS}, got {path!r}")
        if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int)
                                       or max_tokens < 1):
            raise ValueError(f"mok: max_tokens must be None or an int >= 1, got {max_tokens!r}")
        self.max_tokens = max_tokens
        text = C.plan_text(plan)
        if path != "auto":
            text = f"path={path}" + ("," + text if text else "")
        C.default_config(plan=text, **knobs)  # bad knobs and plans fail here, before any collective
        self.plan = text
        self.knobs = tuple(sorted(knobs.items()))
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
            box = [ctypes.string_at(ctypes.addressof(uid), 128)] if self.rank == 0 else [None]  # all 128 bytes, NULs too
            src = dist.get_global_rank(process_group, 0) if process_group is not None else 0
            dist.broadcast_object_list(box, src=src, group=process_group)
            ctypes.memmove(ctypes.addressof(uid), box[0], 128)
        self.handle = ctypes.c_void_p()
        self.device = torch.device("cuda", torch.cuda.current_device())  # the group's GPU
        C.call("mok_group_create", ctypes.byref(uid), self.size, self.rank, ctypes.byref(self.handle))
        self.id = len(_groups)
        _groups.append(self)

    def destroy(self):
        """Collective: frees the group's schedules, workspaces and the group."""
        for key in sorted(k for k in _schedules if k[0] == self.id):
            C.call("mok_schedule_destroy", _schedules.pop(key))
            _sched_tokens.pop(key, None)
            _sched_built.pop(key, None)
        for key in sorted(k for k in _workspaces if k[0] == self.id):
            C.call("mok_workspace_destroy", _workspaces.pop(key))
        if self.handle:
            C.call("mok_group_destroy", self.handle)
            self.handle = ctypes.c_void_p()

    def plans(self):
        """The resolved plans of the group's workspaces, as mok_workspace_kernels gives them
        ("key=value,..."), one per workspace in the order they were made; " (tuned)" follows a
        plan that came from the tuned plan cache (`mok tune`)."""
        out = []
        for key, ws in _workspaces.items():
            if key[0] != self.id:
                continue
            tuned = ctypes.c_int(0)
            C.call("mok_workspace_plan_tuned", ws, ctypes.byref(tuned))
            out.append(C.lib.mok_workspace_kernels(ws).decode() + (" (tuned)" if tuned.value else ""))
        return out

    def device_error(self):
        """Reads every workspace's sticky device error word (synchronizes: call it at a step
        boundary, never inside a captured graph) and raises MokError if any is set, naming the
        rank the fault was first raised on (another rank's refused call reaches every rank)."""
        for key in sorted(k for k in _workspaces if k[0] == self.id):
            st, rank = ctypes.c_int(0), ctypes.c_int(-1)
            C.call("mok_workspace_error_rank", _workspaces[key], ctypes.byref(st), ctypes.byref(rank))
            if st.value != C.MOK_SUCCESS:
                raise C.MokError(st.value, f"device fault seen by the workspace for shape {key[1]}",
                                 f"first raised on rank {rank.value}")

    def clear_device_error(self):
        """Clears every workspace's device error word (enqueued on the current stream of the
        group's device): after a fault, every rank clears, and the workspaces are usable again."""
        stream = _stream(self.device)
        for key in sorted(k for k in _workspaces if k[0] == self.id):
            C.call("mok_workspace_clear_error", _workspaces[key], stream)


def _schedule(group_id, shape, knobs, slot):
    """The (workspace, schedule) pair for a group, shape, knobs and slot; created on first use
    (the workspace collectively). With the group's max_tokens, the workspace is that of max_tokens
    tokens and the schedule is set to shape's count."""
    group = _groups[group_id]
    tokens = shape[0]
    if group.max_tokens is not None:
        if tokens > group.max_tokens:
            raise ValueError(f"mok: {tokens} tokens on this rank, above the group's max_tokens="
                             f"{group.max_tokens}")
        shape = (group.max_tokens,) + tuple(shape[1:])
    wkey = (group_id, shape, knobs)
    if wkey not in _workspaces:
        if not group.handle:
            raise RuntimeError("mok: this Group was destroyed")
        cfg = C.default_config(plan=group.plan, **dict(group.knobs + knobs))
        ws = ctypes.c_void_p()
        C.call("mok_workspace_create", group.handle, ctypes.byref(C.Shape(*shape)), ctypes.byref(cfg),
               ctypes.byref(ws))
        _workspaces[wkey] = ws
    ws = _workspaces[wkey]
    skey = wkey + (max(slot, 0),)
    if skey not in _schedules:
        sched = ctypes.c_void_p()
        C.call("mok_schedule_create", ws, ctypes.byref(sched))
        _schedules[skey] = sched
        _sched_tokens[skey] = shape[0]
    if _sched_tokens[skey] != tokens:  # the next build is for this count; until then its
        C.call("mok_schedule_set_tokens", _schedules[skey], tokens)  # passes are refused
        _sched_tokens[skey] = tokens
        _sched_built.pop(skey, None)
    return ws, _schedules[skey]


def _schedule_key(group_id, shape, knobs, slot):
    """_schedule's key of the schedule it returns for these arguments."""
    max_tokens = _groups[group_id].max_tokens
    if max_tokens is not None:
        shape = (max_tokens,) + tuple(shape[1:])
    return (group_id, shape, knobs, max(slot, 0))


def _version(t):
    """t's version counter (bumped by every in-place write), None where it has none (inference
    tensors)."""
    try:
        return t._version
    except RuntimeError:
        return None


def _note_build(skey, topk):
    """Records that the schedule skey was just built from topk as it is now."""
    _sched_built[skey] = (weakref.ref(topk), _version(topk))


def _built_from(skey, topk):
    """Whether the schedule skey's last build was from this very tensor, unwritten since: then a
    build from it again would give the same table (the build is a pure function of topk)."""
    seen = _sched_built.get(skey)
    return (seen is not None and seen[1] is not None and seen[0]() is topk
            and seen[1] == _version(topk))


class _RefuseOnPeers:
    """Wraps an op's Python checks: when they raise on this rank, the peers' matching collective
    call (on the workspace this call would have used, when it exists) is ended at once with this
    rank's refusal (mok_workspace_reject) instead of waiting for its timeout; then the error
    propagates. shape_of() gives the call's shape (it may raise: then nothing can be named)."""

    def __init__(self, group_id, knobs, shape_of, device):
        self.group_id, self.knobs, self.shape_of, self.device = group_id, knobs, shape_of, device

    def __enter__(self):
        return self

    def __exit__(self, kind, err, tb):
        if kind is None or not issubclass(kind, (TypeError, ValueError)):
            return False
        refused = False
        try:
            group = _groups[self.group_id]
            shape = tuple(self.shape_of())
            if group.max_tokens is not None:
                shape = (group.max_tokens,) + shape[1:]
            ws = _workspaces.get((self.group_id, shape, self.knobs))
            if ws is not None and self.device is not None and self.device.type == "cuda":
                cause = C.STATUS_NAMES.index("INVALID_ARGUMENT" if issubclass(kind, TypeError)
                                             else "INVALID_SHAPE")
                stream = _stream(self.device)
                refused = C.lib.mok_workspace_reject(ws, cause, stream) == C.MOK_SUCCESS
        except Exception:  # noqa: BLE001 - nothing could be named: the original error stands
            pass
        if refused:
            raise kind(f"{err} (refused on every rank of the group: the other ranks' error "
                       "words hold it until mok.clear_device_errors() on every rank)") from err
        return False


def _ptr(t):
    return ctypes.c_void_p(t.data_ptr()) if t is not None and t.numel() > 0 else None


_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def _stream(device):
    """The current CUDA stream of device (a torch.device of type cuda), as the C API takes it:
    read as the raw handle, without making a torch.cuda.Stream object per call."""
    if _raw_stream is not None:
        return ctypes.c_void_p(_raw_stream(device.index if device.index is not None
                                           else torch.cuda.current_device()))
    return ctypes.c_void_p(torch.cuda.current_stream(device).cuda_stream)


def _knobs(swiglu_limit):
    if swiglu_limit > 0:
        return (("use_swiglu_limit", 1), ("swiglu_limit", float(swiglu_limit)))
    return ()


def _shape(x, topk, num_experts, w_gate, ws_gate):
    shared = ws_gate.shape[0] if ws_gate is not None and ws_gate.numel() > 0 else 0
    return (x.shape[0], x.shape[1], num_experts, w_gate.shape[1], topk.shape[1], shared)


def _check(x, topk, rw, weights, group_id, num_experts, routed_dtype=torch.bfloat16):
    """Shapes, dtypes, layout and device of the op's tensors: the C API sees only pointers, so a
    wrong shape must be caught here. routed_dtype: the routed weights' (uint8: FP8 codes); the
    shared expert's are bfloat16."""
    if x.dtype != torch.bfloat16 or topk.dtype != torch.int32 or rw.dtype != torch.float32:
        raise TypeError("mok: x must be bfloat16, topk_experts int32, router_weights float32 (got "
                        f"{x.dtype}, {topk.dtype}, {rw.dtype})")
    for i, w in enumerate(weights):
        want = routed_dtype if i < 3 else torch.bfloat16
        if w is not None and w.numel() > 0 and (w.dtype != want or not w.is_contiguous()):
            raise TypeError(f"mok: weights must be contiguous, routed {routed_dtype}, shared bfloat16")
    if not (x.is_contiguous() and topk.is_contiguous() and rw.is_contiguous()):
        raise ValueError("mok: x, topk_experts and router_weights must be contiguous")
    if not 0 <= group_id < len(_groups):
        raise ValueError(f"mok: unknown group id {group_id}")
    if x.dim() != 2 or topk.dim() != 2 or rw.shape != topk.shape or topk.shape[0] != x.shape[0]:
        raise ValueError(f"mok: need x [T, H], topk_experts and router_weights [T, k]; got "
                         f"{tuple(x.shape)}, {tuple(topk.shape)}, {tuple(rw.shape)}")
    w_gate, w_up, w_down, ws_gate, ws_up, ws_down = weights
    H, ep = x.shape[1], _groups[group_id].size
    el, I = (w_gate.shape[0], w_gate.shape[1]) if w_gate.dim() == 3 else (-1, -1)
    if w_gate.shape != (el, I, H) or w_up.shape != (el, I, H) or w_down.shape != (el, H, I):
        raise ValueError(f"mok: need w_gate, w_up [E/EP, I, {H}] and w_down [E/EP, {H}, I]; got "
                         f"{tuple(w_gate.shape)}, {tuple(w_up.shape)}, {tuple(w_down.shape)}")
    if el * ep != num_experts:
        raise ValueError(f"mok: {el} local experts on each of {ep} ranks is not num_experts={num_experts}")
    shared = [w is not None and w.numel() > 0 for w in (ws_gate, ws_up, ws_down)]
    if any(shared) and not all(shared):
        raise ValueError("mok: pass all three shared-expert weights or none")
    if all(shared):
        Is = ws_gate.shape[0]
        if ws_gate.shape != (Is, H) or ws_up.shape != (Is, H) or ws_down.shape != (H, Is):
            raise ValueError(f"mok: need ws_gate, ws_up [Is, {H}] and ws_down [{H}, Is]; got "
                             f"{tuple(ws_gate.shape)}, {tuple(ws_up.shape)}, {tuple(ws_down.shape)}")
    dev = x.get_device()  # -1 off the GPU
    if dev < 0 or any(t is not None and t.numel() > 0 and t.get_device() != dev
                      for t in (topk, rw) + tuple(weights)):
        raise ValueError("mok: all tensors must be on the same CUDA device")
    group_device = _groups[group_id].device
    if x.device != group_device:
        raise ValueError(f"mok: the tensors are on {x.device}, the group was made on {group_device} "
                         f"(torch.cuda.set_device before mok.Group or mok.MoE)")


def _check_dy(dy, x):
    if not isinstance(dy, torch.Tensor) or dy.dtype != torch.bfloat16 or dy.shape != x.shape:
        raise TypeError(f"mok: dy must be bfloat16 of x's shape {tuple(x.shape)}; got "
                        f"{getattr(dy, 'dtype', type(dy).__name__)} {tuple(getattr(dy, 'shape', ()))}")
    if dy.device != x.device:
        raise ValueError(f"mok: dy is on {dy.device}, x on {x.device}")


def _check_fp8_codes(q_gate, s_gate, q_up, s_up, q_down, s_down):
    """quantize_weight's codes and scales of the three routed weights: [E, I, H], [E, I, H],
    [E, H, I] uint8 with [E, rows/128, cols/128] float32 scales, contiguous, on one CUDA device,
    I and H multiples of 128."""
    tensors = (q_gate, s_gate, q_up, s_up, q_down, s_down)
    if not all(isinstance(t, torch.Tensor) for t in tensors):
        raise TypeError("mok: FP8 weights are the tensors quantize_weight returns")
    dev = q_gate.device
    if dev.type != "cuda" or any(t.device != dev for t in tensors):
        raise ValueError("mok: all tensors must be on the same CUDA device")
    if q_gate.dim() != 3:
        raise ValueError(f"mok: FP8 codes are [E, rows, cols]; got {tuple(q_gate.shape)}")
    E, inter, hidden = q_gate.shape
    if inter % 128 or hidden % 128:
        raise ValueError(f"mok: FP8 weights need I and H multiples of 128; got {inter}, {hidden}")
    for q, sc, shape in ((q_gate, s_gate, (E, inter, hidden)), (q_up, s_up, (E, inter, hidden)),
                         (q_down, s_down, (E, hidden, inter))):
        if q.dtype != torch.uint8 or not q.is_contiguous() or tuple(q.shape) != shape:
            raise ValueError(f"mok: FP8 codes must be contiguous uint8 {shape}; got {q.dtype} "
                             f"{tuple(q.shape)}")
        want = (shape[0], shape[1] // 128, shape[2] // 128)
        if sc.dtype != torch.float32 or not sc.is_contiguous() or tuple(sc.shape) != want:
            raise ValueError(f"mok: scales of codes {shape} must be contiguous float32 {want}; got "
                             f"{sc.dtype} {tuple(sc.shape)}")


def _check_fp8_transposed(t, q_gate):
    """transpose_weights_fp8's four tensors for codes q_gate [E, I, H]."""
    E, inter, hidden = q_gate.shape
    want = (((E, hidden, 2 * inter), torch.uint8), ((E, hidden // 128, 2 * inter // 128), torch.float32),
            ((E, inter, hidden), torch.uint8), ((E, inter // 128, hidden // 128), torch.float32))
    if not isinstance(t, (tuple, list)) or len(t) != 4:
        raise TypeError("mok: t must be the four tensors transpose_weights_fp8 returns")
    for v, (shape, dtype) in zip(t, want):
        if not isinstance(v, torch.Tensor) or v.dtype != dtype or tuple(v.shape) != shape or \
                not v.is_contiguous() or v.device != q_gate.device:
            raise ValueError(f"mok: t must be transpose_weights_fp8's tensors: want {dtype} "
                             f"{shape} on {q_gate.device}; got "
                             f"{getattr(v, 'dtype', None)} {tuple(getattr(v, 'shape', ()))}")


def _weights(w_gate, w_up, w_down, ws_gate, ws_up, ws_down):
    w = C.Weights()
    w.w_gate, w.w_up, w.w_down = _ptr(w_gate), _ptr(w_up), _ptr(w_down)
    w.ws_gate, w.ws_up, w.ws_down = _ptr(ws_gate), _ptr(ws_up), _ptr(ws_down)
    return w


def _build_and_forward(sched, topk, x, rw, weights, y, stream):
    """The schedule built from topk, then the forward, in one C call (the shared expert's GEMMs
    overlap the build)."""
    C.call("mok_build_and_forward", sched, _ptr(topk), ctypes.byref(_weights(*weights)), _ptr(x),
           _ptr(rw), _ptr(y), stream)


def _forward_body(x, topk, rw, w_gate, w_up, w_down, ws_gate, ws_up, ws_down, group_id,
                  num_experts, swiglu_limit, slot):
    """The forward op's work (moe_forward; _MoE's forward runs it without the op's dispatch)."""
    weights = (w_gate, w_up, w_down, ws_gate, ws_up, ws_down)
    knobs = _knobs(swiglu_limit)
    shape_of = lambda: _shape(x, topk, num_experts, w_gate, ws_gate)  # noqa: E731
    with _RefuseOnPeers(group_id, knobs, shape_of, x.device):
        _check(x, topk, rw, weights, group_id, num_experts)
        shape = shape_of()
        ws, sched = _schedule(group_id, shape, knobs, slot)
    y = torch.empty_like(x)
    _build_and_forward(sched, topk, x, rw, weights, y, _stream(x.device))
    _note_build(_schedule_key(group_id, shape, knobs, slot), topk)
    return y


@torch.library.custom_op("mok::moe_forward", mutates_args=())
def _moe_forward_op(x: torch.Tensor, topk: torch.Tensor, rw: torch.Tensor, w_gate: torch.Tensor,
                    w_up: torch.Tensor, w_down: torch.Tensor, ws_gate: Optional[torch.Tensor],
                    ws_up: Optional[torch.Tensor], ws_down: Optional[torch.Tensor], group_id: int,
                    num_experts: int, swiglu_limit: float, slot: int = 0) -> torch.Tensor:
    return _forward_body(x, topk, rw, w_gate, w_up, w_down, ws_gate, ws_up, ws_down, group_id,
                         num_experts, swiglu_limit, slot)


def _plain_eager(tensors):
    """Whether a call on these tensors (None allowed) may run an op's work directly, without the
    custom op's dispatch: eager mode, plain tensors, no dispatch or function mode active (those
    must see the op: tracing, fake tensors, flop counters)."""
    if (torch.compiler.is_compiling() or _current_dispatch_mode() is not None
            or torch._C._is_torch_function_mode_enabled()):
        return False
    return all(t is None or type(t) is torch.Tensor for t in tensors)


def moe_forward(x, topk, rw, w_gate, w_up, w_down, ws_gate, ws_up, ws_down, group_id, num_experts,
                swiglu_limit, slot=0):
    """The layer's forward, the custom op torch.ops.mok.moe_forward (differentiable through
    moe_backward, traceable by torch.compile). Where no graph records it (grad mode off, or no
    input that needs a gradient) and nothing traces it (_plain_eager), the op's work runs
    without the op's dispatch: the same C call, the same bits, less host time."""
    tensors = (x, topk, rw, w_gate, w_up, w_down, ws_gate, ws_up, ws_down)
    if _plain_eager(tensors) and not (torch.is_grad_enabled() and any(
            t is not None and t.requires_grad for t in tensors)):
        return _forward_body(x, topk, rw, w_gate, w_up, w_down, ws_gate, ws_up, ws_down,
                             group_id, num_experts, swiglu_limit, slot)
    return torch.ops.mok.moe_forward(x, topk, rw, w_gate, w_up, w_down, ws_gate, ws_up, ws_down,
                                     group_id, num_experts, swiglu_limit, slot)


@_moe_forward_op.register_fake
def _(x, topk, rw, w_gate, w_up, w_down, ws_gate, ws_up, ws_down, group_id, num_experts, swiglu_limit,
      slot=0):
    return torch.empty_like(x)


def _grad_buffers(x, rw, w_gate, w_up, w_down, ws_gate, ws_up, ws_down):
    """dx, d_rw, the three routed and the three shared weight gradients (distinct empty tensors
    for an absent shared expert: a custom op's outputs must not alias each other)."""
    out = [torch.empty_like(x), torch.empty_like(rw), torch.empty_like(w_gate), torch.empty_like(w_up),
           torch.empty_like(w_down)]
    return out + [torch.empty_like(t) if t is not None and t.numel() > 0 else x.new_empty(0)
                  for t in (ws_gate, ws_up, ws_down)]


def _backward_body(dy, x, topk, rw, w_gate, w_up, w_down, ws_gate, ws_up, ws_down, group_id,
                   num_experts, swiglu_limit, slot):
    """The backward op's work (moe_backward; _MoE's backward runs it without the op's dispatch)."""
    weights = (w_gate, w_up, w_down, ws_gate, ws_up, ws_down)
    knobs = _knobs(swiglu_limit)
    shape_of = lambda: _shape(x, topk, num_experts, w_gate, ws_gate)  # noqa: E731
    with _RefuseOnPeers(group_id, knobs, shape_of, x.device):
        _check(x, topk, rw, weights, group_id, num_experts)
        _check_dy(dy, x)
        shape = shape_of()
        ws, sched = _schedule(group_id, shape, knobs, slot)
    dy = dy.contiguous()
    out = _grad_buffers(x, rw, *weights)
    g = C.Grads(*[_ptr(t) for t in out])  # grad_fp32 and accumulate 0
    stream = _stream(x.device)
    skey = _schedule_key(group_id, shape, knobs, slot)
    if slot < 0:  # nothing kept: recompute what forward keeps (its output is not needed)
        _build_and_forward(sched, topk, x, rw, weights, torch.empty_like(x), stream)
        _note_build(skey, topk)
    elif not _built_from(skey, topk):  # else the slot's forward built this table already
        C.call("mok_schedule_build", sched, _ptr(topk), stream)
        _note_build(skey, topk)
    C.call("mok_backward", sched, ctypes.byref(_weights(*weights)), _ptr(x), _ptr(rw), _ptr(dy),
           ctypes.byref(g), stream)
    return out


@torch.library.custom_op("mok::moe_backward", mutates_args=())
def _moe_backward_op(dy: torch.Tensor, x: torch.Tensor, topk: torch.Tensor, rw: torch.Tensor,
                     w_gate: torch.Tensor, w_up: torch.Tensor, w_down: torch.Tensor,
                     ws_gate: Optional[torch.Tensor], ws_up: Optional[torch.Tensor],
                     ws_down: Optional[torch.Tensor], group_id: int, num_experts: int,
                     swiglu_limit: float, slot: int = 0) -> List[torch.Tensor]:
    return _backward_body(dy, x, topk, rw, w_gate, w_up, w_down, ws_gate, ws_up, ws_down,
                          group_id, num_experts, swiglu_limit, slot)


def moe_backward(dy, x, topk, rw, w_gate, w_up, w_down, ws_gate, ws_up, ws_down, group_id,
                 num_experts, swiglu_limit, slot=0):
    """The layer's backward, the custom op torch.ops.mok.moe_backward: dx, d_router_weights and
    the six weight gradients (empty ones for an absent shared expert). Called in plain eager mode
    (_plain_eager), the op's work runs without its dispatch (it records no graph either way)."""
    if _plain_eager((dy, x, topk, rw, w_gate, w_up, w_down, ws_gate, ws_up, ws_down)):
        return _backward_body(dy, x, topk, rw, w_gate, w_up, w_down, ws_gate, ws_up, ws_down,
                              group_id, num_experts, swiglu_limit, slot)
    return torch.ops.mok.moe_backward(dy, x, topk, rw, w_gate, w_up, w_down, ws_gate, ws_up,
                                      ws_down, group_id, num_experts, swiglu_limit, slot)


@_moe_backward_op.register_fake
def _(dy, x, topk, rw, w_gate, w_up, w_down, ws_gate, ws_up, ws_down, group_id, num_experts, swiglu_limit,
      slot=0):
    return _grad_buffers(x, rw, w_gate, w_up, w_down, ws_gate, ws_up, ws_down)


def _setup_context(ctx, inputs, output):
    x, topk, rw, w_gate, w_up, w_down, ws_gate, ws_up, ws_down, group_id, num_experts, limit = inputs[:12]
    slot = inputs[12] if len(inputs) > 12 else 0   # a caller that left the default out
    ctx.save_for_backward(x, topk, rw, w_gate, w_up, w_down, ws_gate, ws_up, ws_down)
    ctx.args = (group_id, num_experts, limit, slot)


def _backward(ctx, dy, body=None):
    """The forward's inputs' gradients from the saved inputs, through the backward op (the custom
    op's registered autograd) or body (_MoE: the op's work without its dispatch); None for the
    topk, the integers and an absent shared expert."""
    x, topk, rw, w_gate, w_up, w_down, ws_gate, ws_up, ws_down = ctx.saved_tensors
    dx, drw, dwg, dwu, dwd, dsg, dsu, dsd = (body or torch.ops.mok.moe_backward)(
        dy, x, topk, rw, w_gate, w_up, w_down, ws_gate, ws_up, ws_down, *ctx.args)
    shared = ws_gate is not None and ws_gate.numel() > 0
    return (dx, None, drw, dwg, dwu, dwd, dsg if shared else None, dsu if shared else None,
            dsd if shared else None, None, None, None, None)


torch.library.register_autograd("mok::moe_forward", _backward, setup_context=_setup_context)


class _MoE(torch.autograd.Function):
    """moe() in eager mode: the custom ops' work under a plain autograd.Function, whose dispatch
    costs the host a fraction of a custom op's with autograd (docs/PERF.md, "Host time"); the
    same calls, so the same bits. torch.compile, and fake or other tensor subclasses, take the
    custom ops (traceable, with their fake implementations)."""

    @staticmethod
    def forward(ctx, *inputs):  # moe_forward's arguments
        y = _forward_body(*inputs)
        _setup_context(ctx, inputs, y)
        return y

    @staticmethod
    def backward(ctx, dy):
        return _backward(ctx, dy, _backward_body)


FP8_BLOCK128, MXFP8 = 1, 2  # mok_dtype MOK_DTYPE_FP8_BLOCK128, MOK_DTYPE_MXFP8
WEIGHT_FORMATS = ("block128", "mxfp8")


def quantize_weight(w):
    """A bf16 [E, rows, cols] weight (rows, cols multiples of 128) as mok's FP8 block-128 format:
    (E4M3 codes, uint8 of w's shape; fp32 scales [E, rows / 128, cols / 128]), quantized on w's
    device and current stream by mok_quantize_weight."""
    if w.dtype != torch.bfloat16 or w.dim() != 3 or not w.is_contiguous() or w.device.type != "cuda":
        raise TypeError("mok: quantize_weight needs a contiguous bfloat16 [E, rows, cols] CUDA tensor")
    E, rows, cols = w.shape
    q, scales = _codes_buffers(w)
    stream = _stream(w.device)
    C.call("mok_quantize_weight", FP8_BLOCK128, _ptr(w), E, rows, cols, _ptr(q), _ptr(scales), stream)
    return q, scales


def _codes_buffers(w):
    """Block-128 codes and scales for a weight [E, rows, cols] on its device, uninitialized."""
    E, rows, cols = w.shape
    return (torch.empty(w.shape, dtype=torch.uint8, device=w.device),
            torch.empty(E, rows // 128, cols // 128, dtype=torch.float32, device=w.device))


def _transposed_buffers(E, inter, hidden, dev):
    """transpose_weights_fp8's four tensors, uninitialized: gate | up [E, H, 2I] codes and scales
    [E, H/128, 2I/128], down [E, I, H] codes and scales [E, I/128, H/128]."""
    u8 = lambda *s: torch.empty(*s, dtype=torch.uint8, device=dev)  # noqa: E731
    f32 = lambda *s: torch.empty(*s, dtype=torch.float32, device=dev)  # noqa: E731
    return (u8(E, hidden, 2 * inter), f32(E, hidden // 128, 2 * inter // 128),
            u8(E, inter, hidden), f32(E, inter // 128, hidden // 128))


def quantize_weight_mxfp8(w):
    """A bf16 [E, rows, cols] weight (cols a multiple of 32) as MXFP8, the OCP MX rules: (E4M3
    codes, uint8 of w's shape; E8M0 scales, uint8 [E, rows, cols / 32], each 2^(floor(log2 amax)
    - 8) over its 32 values along cols, stored as the exponent + 127; 255 for a block holding a
    NaN or an infinity), by mok_quantize_weight on w's device and current stream. This is also the
    layout mxfp8_to_block128 takes MXFP8 weights in (a checkpoint's codes and scales)."""
    if w.dtype != torch.bfloat16 or w.dim() != 3 or not w.is_contiguous() or w.device.type != "cuda":
        raise TypeError("mok: quantize_weight_mxfp8 needs a contiguous bfloat16 [E, rows, cols] CUDA tensor")
    E, rows, cols = w.shape
    if cols % 32:
        raise ValueError(f"mok: MXFP8 needs cols a multiple of 32, got {cols}")
    q = torch.empty(w.shape, dtype=torch.uint8, device=w.device)
    scales = torch.empty(E, rows, cols // 32, dtype=torch.uint8, device=w.device)
    stream = _stream(w.device)
    C.call("mok_quantize_weight", MXFP8, _ptr(w), E, rows, cols, _ptr(q), _ptr(scales), stream)
    return q, scales


def mxfp8_to_block128(q_mx, s_mx):
    """MXFP8 weights (codes uint8 or float8_e4m3fn [E, rows, cols], E8M0 scales uint8 or
    float8_e8m0fnu [E, rows, cols / 32]; rows and cols multiples of 128) converted to the block-128
    format the FP8 layer runs (quantize_weight's), by mok_mxfp8_to_block128: each 128x128 block at
    the largest of its MX scales, every value re-expressed there (exact while it stays in E4M3's
    normal range, else rounded to the nearest 2^-9 of the block scale; exact when a block's MX
    scales are equal; a block with scale 255 becomes NaN)."""
    for t, name in ((q_mx, "q_mx"), (s_mx, "s_mx")):
        if t.device.type != "cuda" or not t.is_contiguous() or t.dim() != 3 or t.element_size() != 1:
            raise TypeError(f"mok: mxfp8_to_block128's {name} must be a contiguous 1-byte [E, rows, "
                            "cols] CUDA tensor")
    E, rows, cols = q_mx.shape
    if tuple(s_mx.shape) != (E, rows, cols // 32) or s_mx.device != q_mx.device or cols % 32:
        raise ValueError(f"mok: MXFP8 scales must be [E, rows, cols / 32] = {(E, rows, cols // 32)} "
                         f"on {q_mx.device}, got {tuple(s_mx.shape)} on {s_mx.device}")
    if rows % 128 or cols % 128:
        raise ValueError(f"mok: mxfp8_to_block128 needs rows and cols multiples of 128, got {rows}, {cols}")
    q = torch.empty(q_mx.shape, dtype=torch.uint8, device=q_mx.device)
    scales = torch.empty(E, rows // 128, cols // 128, dtype=torch.float32, device=q_mx.device)
    stream = _stream(q_mx.device)
    C.call("mok_mxfp8_to_block128", _ptr(q_mx), _ptr(s_mx), E, rows, cols, _ptr(q), _ptr(scales),
           stream)
    return q, scales


def quantize_weight_mxfp8_block128(w):
    """mxfp8_to_block128(*quantize_weight_mxfp8(w)) in one pass, the same bits
    (mok_quantize_weight_mxfp8_block128): a bf16 [E, rows, cols] weight (rows, cols multiples of
    128) -> the block-128 codes and scales of its MXFP8 values."""
    if w.dtype != torch.bfloat16 or w.dim() != 3 or not w.is_contiguous() or w.device.type != "cuda":
        raise TypeError("mok: quantize_weight_mxfp8_block128 needs a contiguous bfloat16 [E, rows, "
                        "cols] CUDA tensor")
    E, rows, cols = w.shape
    if rows % 128 or cols % 128:
        raise ValueError(f"mok: rows and cols must be multiples of 128, got {rows}, {cols}")
    q = torch.empty(w.shape, dtype=torch.uint8, device=w.device)
    scales = torch.empty(E, rows // 128, cols // 128, dtype=torch.float32, device=w.device)
    stream = _stream(w.device)
    C.call("mok_quantize_weight_mxfp8_block128", _ptr(w), E, rows, cols, _ptr(q), _ptr(scales),
           stream)
    return q, scales


def quantize_weight_format(w, weight_format="block128"):
    """quantize_weight(w), or with weight_format "mxfp8" w through MXFP8 first (the values an MX
    recipe trains on) and then to block-128 (quantize_weight_mxfp8_block128): the FP8 layer's
    codes and scales."""
    if weight_format == "block128":
        return quantize_weight(w)
    if weight_format == "mxfp8":
        return quantize_weight_mxfp8_block128(w)
    raise ValueError(f"mok: weight_format must be one of {WEIGHT_FORMATS}, got {weight_format!r}")


def transpose_weights_fp8(q_gate, s_gate, q_up, s_up, q_down, s_down):
    """The FP8 backward's weights from quantize_weight's (mok_fp8_transpose_weights): gate | up
    [E, H, 2I] codes with scales [E, H/128, 2I/128], and down [E, I, H] codes with scales
    [E, I/128, H/128]; codes and scales moved, not quantized again. Make them again whenever the
    weights change."""
    _check_fp8_codes(q_gate, s_gate, q_up, s_up, q_down, s_down)
    E, inter, hidden = q_gate.shape
    dev = q_gate.device
    gu_t, gu_s, d_t, d_s = _transposed_buffers(E, inter, hidden, dev)
    w = _fp8_weights(q_gate, s_gate, q_up, s_up, q_down, s_down, None, None, None)
    stream = _stream(dev)
    C.call("mok_fp8_transpose_weights", FP8_BLOCK128, ctypes.byref(w), E, inter, hidden, _ptr(gu_t),
           _ptr(gu_s), _ptr(d_t), _ptr(d_s), stream)
    return gu_t, gu_s, d_t, d_s


def quantize_weights_fp8_transposed(w_gate, w_up, w_down):
    """quantize_weight of the three routed bf16 weights and transpose_weights_fp8 of their codes,
    bit for bit, from one read of each weight (mok_quantize_weight_transposed): returns (codes,
    t), codes the six tensors (q_gate, s_gate, q_up, s_up, q_down, s_down), t the four of
    transpose_weights_fp8. How a training step makes its FP8 weights when a backward follows."""
    for w in (w_gate, w_up, w_down):
        if (w.dtype != torch.bfloat16 or w.dim() != 3 or not w.is_contiguous()
                or w.device.type != "cuda"):
            raise TypeError("mok: quantize_weights_fp8_transposed needs contiguous bfloat16 "
                            "[E, rows, cols] CUDA tensors")
    E, inter, hidden = w_gate.shape
    if (tuple(w_up.shape) != (E, inter, hidden) or tuple(w_down.shape) != (E, hidden, inter)
            or w_up.device != w_gate.device or w_down.device != w_gate.device):
        raise ValueError("mok: want w_gate, w_up [E, I, H] and w_down [E, H, I] on one device")
    dev = w_gate.device
    gu_t, gu_s, d_t, d_s = _transposed_buffers(E, inter, hidden, dev)
    stream = _stream(dev)
    codes = []
    for w, q_t, s_t, ld, off in ((w_gate, gu_t, gu_s, 2 * inter, 0),
                                 (w_up, gu_t, gu_s, 2 * inter, inter),
                                 (w_down, d_t, d_s, hidden, 0)):
        _, rows, cols = w.shape
        q, sc = _codes_buffers(w)
        C.call("mok_quantize_weight_transposed", FP8_BLOCK128, _ptr(w), E, rows, cols, _ptr(q),
               _ptr(sc), _ptr(q_t), _ptr(s_t), ld, off, stream)
        codes += [q, sc]
    return tuple(codes), (gu_t, gu_s, d_t, d_s)


def _check_fp8(x, topk, rw, q_gate, s_gate, q_up, s_up, q_down, s_down, ws_gate, ws_up, ws_down,
               group_id, num_experts):
    """_check for the FP8 ops, and the routed weights' scales: those quantize_weight makes for
    their codes, on x's device."""
    _check(x, topk, rw, (q_gate, q_up, q_down, ws_gate, ws_up, ws_down), group_id, num_experts,
           routed_dtype=torch.uint8)
    _check_fp8_codes(q_gate, s_gate, q_up, s_up, q_down, s_down)


def _fp8_weights(q_gate, s_gate, q_up, s_up, q_down, s_down, ws_gate, ws_up, ws_down, t=None):
    w = _weights(q_gate, q_up, q_down, ws_gate, ws_up, ws_down)
    w.w_gate_scale, w.w_up_scale, w.w_down_scale = _ptr(s_gate), _ptr(s_up), _ptr(s_down)
    if t is not None:
        w.w_gate_up_t, w.w_gate_up_t_scale, w.w_down_t, w.w_down_t_scale = [_ptr(v) for v in t]
    return w


def moe_backward_fp8(dy, x, topk, rw, q_gate, s_gate, q_up, s_up, q_down, s_down, t, ws_gate,
                     ws_up, ws_down, group_id, num_experts, swiglu_limit=0.0, slot=0):
    """The backward of moe_forward_fp8 with the same arguments and slot (on the schedule its
    forward kept), t the four tensors of transpose_weights_fp8: the data gradients run in FP8 on
    them, the weight gradients in FP8 too (along the expert's tokens: the gradients in 1x128
    blocks, the inputs and activations with one scale per expert and channel; the Group's
    fp8_weight_grads picks another mode, 0: in bf16). Returns dx, d_router_weights and the bf16
    gradients of w_gate, w_up, w_down (the dequantized weights the forward saw) and of the shared
    expert."""
    knobs = _knobs(swiglu_limit) + (("dtype", FP8_BLOCK128),)
    shape_of = lambda: _shape(x, topk, num_experts, q_gate, ws_gate)  # noqa: E731
    with _RefuseOnPeers(group_id, knobs, shape_of, x.device):
        _check_fp8(x, topk, rw, q_gate, s_gate, q_up, s_up, q_down, s_down, ws_gate, ws_up,
                   ws_down, group_id, num_experts)
        _check_dy(dy, x)
        _check_fp8_transposed(t, q_gate)
        ws, sched = _schedule(group_id, shape_of(), knobs, slot)
    dy = dy.contiguous()
    w = _fp8_weights(q_gate, s_gate, q_up, s_up, q_down, s_down, ws_gate, ws_up, ws_down, t)
    bf = lambda q: torch.empty(q.shape, dtype=torch.bfloat16, device=q.device)  # noqa: E731
    out = [torch.empty_like(x), torch.empty_like(rw), bf(q_gate), bf(q_up), bf(q_down)]
    out += [torch.empty_like(v) if v is not None and v.numel() > 0 else x.new_empty(0)
            for v in (ws_gate, ws_up, ws_down)]
    g = C.Grads(*[_ptr(v) for v in out])  # grad_fp32 and accumulate 0
    stream = _stream(x.device)
    C.call("mok_backward", sched, ctypes.byref(w), _ptr(x), _ptr(rw), _ptr(dy), ctypes.byref(g),
           stream)
    return out


def moe_forward_fp8(x, topk, rw, q_gate, s_gate, q_up, s_up, q_down, s_down, ws_gate, ws_up,
                    ws_down, group_id, num_experts, swiglu_limit=0.0, slot=0):
    """The layer's forward with FP8 (block-128) routed experts: q_* and s_* from quantize_weight
    of w_gate, w_up, w_down; the shared expert (ws_*, or None) stays bf16. No autograd: its
    backward is moe_backward_fp8, on the same slot. Uses its own workspace of the group (dtype
    FP8)."""
    knobs = _knobs(swiglu_limit) + (("dtype", FP8_BLOCK128),)
    shape_of = lambda: _shape(x, topk, num_experts, q_gate, ws_gate)  # noqa: E731
    with _RefuseOnPeers(group_id, knobs, shape_of, x.device):
        _check_fp8(x, topk, rw, q_gate, s_gate, q_up, s_up, q_down, s_down, ws_gate, ws_up,
                   ws_down, group_id, num_experts)
        shape = shape_of()
        ws, sched = _schedule(group_id, shape, knobs, slot)
    w = _fp8_weights(q_gate, s_gate, q_up, s_up, q_down, s_down, ws_gate, ws_up, ws_down)
    y = torch.empty_like(x)
    C.call("mok_build_and_forward", sched, _ptr(topk), ctypes.byref(w), _ptr(x), _ptr(rw), _ptr(y),
           _stream(x.device))
    _note_build(_schedule_key(group_id, shape, knobs, slot), topk)
    return y


class _MoEFP8(torch.autograd.Function):
    """The layer with FP8 routed experts under autograd: the bf16 routed weights' codes come from
    an FP8WeightCache (made once per weight update, mok.fp8_cache) or, with no cache, are made at
    this forward (quantize_weight); the backward's transposed copies come from the same place;
    the weights' gradients are those of the dequantized weights the forward saw (straight
    through the quantization, as FP8 training recipes do). slot as for moe(); a negative slot
    re-runs the FP8 forward before the backward."""

    @staticmethod
    def forward(ctx, x, topk, rw, w_gate, w_up, w_down, ws_gate, ws_up, ws_down, group_id,
                num_experts, swiglu_limit, slot, cache, weight_format, backward):
        # backward: one will follow (grad mode on, an input needs a gradient), so its transposed
        # weights come from the same read of the bf16 weights as the codes
        t = None
        if cache is not None:
            codes = cache.codes(w_gate, w_up, w_down, transposed=backward)
        elif backward and weight_format == "block128":
            codes, t = quantize_weights_fp8_transposed(w_gate, w_up, w_down)
        else:
            codes = tuple(v for w in (w_gate, w_up, w_down)
                          for v in quantize_weight_format(w, weight_format))
        y = moe_forward_fp8(x, topk, rw, *codes, ws_gate, ws_up, ws_down, group_id, num_experts,
                            swiglu_limit, max(slot, -1))
        ctx.save_for_backward(x, topk, rw, ws_gate, ws_up, ws_down)
        ctx.codes, ctx.cache, ctx.t = codes, cache, t  # not inputs or outputs: attributes
        ctx.args = (group_id, num_experts, swiglu_limit, max(slot, -1))
        return y

    @staticmethod
    def backward(ctx, dy):
        x, topk, rw, ws_gate, ws_up, ws_down = ctx.saved_tensors
        codes, cache = ctx.codes, ctx.cache
        group_id, num_experts, limit, slot = ctx.args
        if slot < 0:  # nothing kept: the forward again, on the same schedule
            moe_forward_fp8(x, topk, rw, *codes, ws_gate, ws_up, ws_down, group_id, num_experts,
                            limit, slot)
        t = ctx.t
        if t is None:
            t = cache.transposed(codes) if cache is not None else transpose_weights_fp8(*codes)
        dx, drw, dwg, dwu, dwd, dsg, dsu, dsd = moe_backward_fp8(
            dy.contiguous(), x, topk, rw, *codes, t, ws_gate, ws_up, ws_down, group_id,
            num_experts, limit, slot)
        ctx.codes = ctx.cache = ctx.t = None
        shared = ws_gate is not None and ws_gate.numel() > 0
        return (dx, None, drw, dwg, dwu, dwd, dsg if shared else None, dsu if shared else None,
                dsd if shared else None, None, None, None, None, None, None, None)


def moe_fp8(x, topk_experts, router_weights, w_gate, w_up, w_down, ws_gate=None, ws_up=None,
            ws_down=None, *, group: Group, num_experts: int, swiglu_limit: float = 0.0,
            slot: Optional[int] = None, weight_cache=None,
            weight_format: str = "block128") -> torch.Tensor:
    """moe() with the routed experts in FP8 (block-128 E4M3: the tokens and activations 1x128,
    the weights 128x128, quantized by mok; the shared expert stays bf16), differentiable like
    moe() (_MoEFP8). weight_cache: an mok.FP8WeightCache of this layer, which quantizes the routed
    weights once per weight update (gradient accumulation and recomputation reuse its codes);
    None quantizes them at every call. H and I multiples of 128; the group's kernels "auto" or
    "grouped". Not traceable by torch.compile (a plain autograd.Function of ctypes calls: it
    graph-breaks). weight_format "mxfp8": the routed weights go through MXFP8 (1x32 blocks, E8M0
    scales: the values an MX recipe trains on) and are converted to block-128 for the layer
    (quantize_weight_format); weight_cache must then be made with the same format. Where a
    backward will follow (grad mode on and an input that needs a gradient), block-128 codes made
    at this call come with the backward's transposed copies from the same read of the weights
    (quantize_weights_fp8_transposed), which the call keeps until its backward."""
    if slot is not None and slot < 1:
        raise ValueError("mok: slot must be None or >= 1 (slot 0 is the ops' shared default)")
    if weight_format not in WEIGHT_FORMATS:
        raise ValueError(f"mok: weight_format must be one of {WEIGHT_FORMATS}, got {weight_format!r}")
    cache_format = getattr(weight_cache, "weight_format", "block128")
    if weight_cache is not None and cache_format != weight_format:
        raise ValueError(f"mok: weight_cache makes {cache_format!r} codes, the call asks for "
                         f"{weight_format!r}")
    backward = torch.is_grad_enabled() and any(
        t is not None and t.requires_grad
        for t in (x, router_weights, w_gate, w_up, w_down, ws_gate, ws_up, ws_down))
    return _MoEFP8.apply(x, topk_experts, router_weights, w_gate, w_up, w_down, ws_gate, ws_up,
                         ws_down, group.id, int(num_experts), float(swiglu_limit),
                         -1 if slot is None else int(slot), weight_cache, weight_format, backward)


def moe(x, topk_experts, router_weights, w_gate, w_up, w_down, ws_gate=None, ws_up=None, ws_down=None,
        *, group: Group, num_experts: int, swiglu_limit: float = 0.0,
        slot: Optional[int] = None) -> torch.Tensor:
    """The MoE layer on this rank's tokens. x [T, H] bf16; topk_experts [T, k] int32; router_weights
    [T, k] fp32; this rank's experts' w_gate, w_up [E/EP, I, H] and w_down [E/EP, H, I] bf16; the
    shared expert's ws_gate, ws_up [Is, H], ws_down [H, Is] (None: no shared expert). Differentiable
    in x, router_weights and all weights. swiglu_limit > 0 turns the SwiGLU clamp on. slot >= 1: a
    dedicated schedule keeps what forward computed for backward (one forward in flight per slot);
    None: backward recomputes the forward (see the module docstring). Every rank of the group must
    call with the same T, unless the group has max_tokens."""
    if slot is not None and slot < 1:
        raise ValueError("mok: slot must be None or >= 1 (slot 0 is the ops' shared default)")
    args = (x, topk_experts, router_weights, w_gate, w_up, w_down, ws_gate, ws_up, ws_down,
            group.id, int(num_experts), float(swiglu_limit), -1 if slot is None else int(slot))
    if torch.compiler.is_compiling() or type(x) is not torch.Tensor:
        return torch.ops.mok.moe_forward(*args)
    return _MoE.apply(*args)

"""moe.py — mok.MoE, a drop-in PyTorch mixture-of-experts module: a bias-free router (softmax or
sigmoid scores, top-k, optional DeepSeek-V3 group-limited routing), routed SwiGLU experts sharded
over an expert-parallel process group, an optional shared expert. backend="mok" runs the layer
with mok's GPU kernels (mok.functional.moe); backend="torch" runs the same math in plain PyTorch
(mok.reference) for comparison. Also the cache of one mok Group per ProcessGroup."""
import itertools
import math
from typing import NamedTuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from .fp8_cache import FP8WeightCache  # plain Python: importing it loads no library
from .reference import ep_rank_size, moe_reference
from .routing import check_routing, route

BACKENDS = ("mok", "torch")


class RouterStats(NamedTuple):
    """What one forward's router did, for training (MoE.forward(x, return_stats=True), and
    MoE.last_stats after every forward).
      tokens_per_expert [E] int64: how many of this rank's tokens chose each expert (all_reduce
                        over the ranks that share a router for the global load, e.g. DeepSeek-V3's
                        bias update)
      aux_loss          scalar, differentiable: aux_loss_coef * E * sum_e f_e * P_e (the
                        Switch/GShard load-balancing loss: f_e the fraction of the T*k choices that
                        went to e, P_e the mean over tokens of e's normalized score), 0 if coef 0
      z_loss            scalar, differentiable: z_loss_coef * mean(logsumexp(logits)^2), 0 if coef 0
      router_logits     [T, E] fp32, differentiable"""
    tokens_per_expert: torch.Tensor
    aux_loss: torch.Tensor
    z_loss: torch.Tensor
    router_logits: torch.Tensor
_group_cache = {}              # id(ProcessGroup) -> (ProcessGroup, mok.functional.Group); None: default
_slots = itertools.count(1)    # one mok schedule slot per module (see mok.functional)
_functional = None             # mok.functional, imported on first use (it loads libmok)


def get_group(process_group=None, path="auto", ring_bytes=0, max_tokens=None):
    """The mok Group over process_group (None: the default group, or a single process without
    torch.distributed) running the given kernels (path: "auto", "fused", "grouped" or "oracle",
    see mok.functional.Group) with a token ring of ring_bytes per layer (0: none) and workspaces of
    max_tokens tokens per rank (None: one per token count), made on first use
    (collective over the group: its NCCL communicator is created from a unique id broadcast
    through process_group) and cached."""
    import torch.distributed as dist
    global _functional
    from . import functional
    _functional = functional
    if process_group is not None and dist.is_available() and dist.is_initialized() \
            and process_group is dist.group.WORLD:
        process_group = None
    key = (id(process_group), path, ring_bytes, max_tokens)  # ProcessGroups need not be hashable
    if key not in _group_cache:
        _group_cache[key] = (process_group,
                             functional.Group(process_group, path=path, ring_bytes=ring_bytes,
                                              max_tokens=max_tokens))
    return _group_cache[key][1]


def check_device_errors():
    """Raises MokError if any cached group's workspaces saw a device fault (synchronizes: call it
    at a step boundary, never inside a captured CUDA graph)."""
    for _, group in list(_group_cache.values()):
        group.device_error()


def clear_device_errors():
    """Clears the device error words of every cached group's workspaces (enqueued on the current
    stream; every rank calls it): after a fault, the next step runs normally."""
    for _, group in list(_group_cache.values()):
        group.clear_device_error()


def destroy_groups():
    """Collective over every cached group: frees mok's workspaces, schedules and communicators."""
    while _group_cache:
        _, (_, group) = _group_cache.popitem()
        group.destroy()


class MoE(nn.Module):
    """A mixture-of-experts layer on [..., hidden_size] inputs.

    Parameters (this rank's part, E/EP = num_experts / expert-parallel size):
      router.weight [E, H] (router_dtype, fp32 by default; no bias)
      e_score_correction_bias [E] buffer (fp32; only with score_correction_bias=True)
      w_gate, w_up [E/EP, I, H], w_down [E/EP, H, I] (bf16): experts [rank*E/EP, (rank+1)*E/EP)
      shared_gate, shared_up [Is, H], shared_down [H, Is] (bf16; only when shared_intermediate_size > 0)

    Routing: scores = softmax or sigmoid of x @ router.weight^T (fp32); experts chosen on scores +
    e_score_correction_bias, within the topk_group best of n_group groups when n_group > 1; weights
    are the chosen scores, normalized to sum 1 if norm_topk_prob, times routed_scaling_factor.
    DeepSeek-V3: scoring="sigmoid", n_group=8, topk_group=4, score_correction_bias=True,
    norm_topk_prob=True, routed_scaling_factor=2.5. Qwen3-MoE: scoring="softmax", norm_topk_prob=True.

    Every rank of process_group must call forward with the same number of tokens, unless
    max_tokens is set: then each call may have up to max_tokens tokens (a rank's own count), and one
    workspace of that size serves them all (else each new count makes one). With backend
    "mok", H, I and Is must be multiples of 128, and each module keeps what its forward computed
    for its backward (one forward with autograd in flight per module; recompute=True lifts this at
    the cost of one more forward in backward). The Group is made at construction (collective).
    kernels ("auto", "fused", "grouped", "oracle") picks mok's execution path (backend "mok"
    only).
    expert_precision "fp8" runs the routed experts in FP8 (block-128 E4M3, their gradients straight
    through; backend "mok", kernels "auto" or "grouped"; mok.functional.moe_fp8); the parameters
    stay bf16. The module quantizes its routed weights once per weight update (mok.FP8WeightCache:
    micro-batches, recomputation and evaluation reuse the codes; an optimizer step, any in-place
    op on the weights or load_state_dict makes new ones); after writing them through `.data`
    outside an optimizer, call invalidate_fp8_weights(). expert_precision "mxfp8" is the same
    with the routed weights quantized to MXFP8 (1x32 blocks, E8M0 scales: the values an MX recipe
    and MX checkpoints carry) and converted once per update to block-128, which the layer runs
    (docs/DESIGN.md, "MXFP8"); the activations are quantized 1x128 as in "fp8".
    ring_bytes > 0 bounds what mok keeps per layer for backward to a token ring of that size
    (backward then replays the forward of the macrobatches not kept; results unchanged).
    Every forward keeps its RouterStats (tokens per expert, router logits, and with aux_loss_coef
    or z_loss_coef > 0 those losses) in self.last_stats; add the losses to the training loss
    (mok.router_losses(model) sums them over a model's MoE layers). forward(x, return_stats=True)
    returns (y, RouterStats).

    Expert parameters carry mok_expert = True: they are sharded over process_group, so a
    data-parallel wrapper must not average them with the other ranks' (different) experts; see
    mok.sync_gradients and mok.ddp_ignored_names.
    """

    def __init__(self, hidden_size, intermediate_size, num_experts, top_k, *,
                 shared_intermediate_size=0, scoring="softmax", n_group=1, topk_group=1,
                 score_correction_bias=False, norm_topk_prob=False, routed_scaling_factor=1.0,
                 swiglu_limit=0.0, process_group=None, backend="mok", recompute=False,
                 device=None, router_dtype=torch.float32, kernels="auto", ring_bytes=0,
                 expert_precision="bf16", max_tokens=None, aux_loss_coef=0.0, z_loss_coef=0.0):
        super().__init__()
        if aux_loss_coef < 0 or z_loss_coef < 0:
            raise ValueError("aux_loss_coef and z_loss_coef must be >= 0")
        self.aux_loss_coef, self.z_loss_coef = float(aux_loss_coef), float(z_loss_coef)
        self.last_stats = None
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
        if expert_precision not in ("bf16", "fp8", "mxfp8"):
            raise ValueError("expert_precision must be 'bf16', 'fp8' or 'mxfp8', got "
                             f"{expert_precision!r}")
        if expert_precision != "bf16" and (backend != "mok" or kernels not in ("auto", "grouped")):
            raise ValueError(f"expert_precision {expert_precision!r} runs on backend 'mok' with "
                             "kernels 'auto' or 'grouped'")
        self.expert_precision = expert_precision
        check_routing(num_experts, top_k, scoring, n_group, topk_group)
        if swiglu_limit < 0:
            raise ValueError(f"swiglu_limit must be >= 0 (0: off), got {swiglu_limit}")
        rank, ep = ep_rank_size(process_group)
        if num_experts % ep != 0:
            raise ValueError(f"num_experts={num_experts} is not a multiple of the group size {ep}")
        if backend == "mok":
            for name, v in (("hidden_size", hidden_size), ("intermediate_size", intermediate_size),
                            ("shared_intermediate_size", shared_intermediate_size)):
                if v % 128 != 0:
                    raise ValueError(f"backend 'mok' needs {name} a multiple of 128, got {v}")
        self.hidden_size, self.intermediate_size = hidden_size, intermediate_size
        self.num_experts, self.top_k = num_experts, top_k
        self.shared_intermediate_size = shared_intermediate_size
        self.scoring, self.n_group, self.topk_group = scoring, n_group, topk_group
        self.norm_topk_prob, self.routed_scaling_factor = norm_topk_prob, float(routed_scaling_factor)
        self.swiglu_limit = float(swiglu_limit)
        self.process_group, self.backend, self.recompute = process_group, backend, recompute
        self.ep_rank, self.ep_size = rank, ep
        self.num_local_experts = num_experts // ep
        el, H, I, Is = self.num_local_experts, hidden_size, intermediate_size, shared_intermediate_size

        self.router = nn.Linear(H, num_experts, bias=False, device=device, dtype=router_dtype)
        if score_correction_bias:
            self.register_buffer("e_score_correction_bias",
                                 torch.zeros(num_experts, device=device, dtype=torch.float32))
        else:
            self.e_score_correction_bias = None
        bf16 = dict(device=device, dtype=torch.bfloat16)
        self.w_gate = nn.Parameter(torch.empty(el, I, H, **bf16))
        self.w_up = nn.Parameter(torch.empty(el, I, H, **bf16))
        self.w_down = nn.Parameter(torch.empty(el, H, I, **bf16))
        for w in (self.w_gate, self.w_up, self.w_down):
            w.mok_expert = True
        if Is > 0:
            self.shared_gate = nn.Parameter(torch.empty(Is, H, **bf16))
            self.shared_up = nn.Parameter(torch.empty(Is, H, **bf16))
            self.shared_down = nn.Parameter(torch.empty(H, Is, **bf16))
        else:
            self.shared_gate = self.shared_up = self.shared_down = None
        self.reset_parameters()

        self._slot = next(_slots)
        self._group = get_group(process_group, kernels, ring_bytes, max_tokens) if backend == "mok" \
            else None
        self._weight_format = "mxfp8" if expert_precision == "mxfp8" else "block128"
        self._fp8_cache = (FP8WeightCache(weight_format=self._weight_format)
                           if expert_precision != "bf16" else None)

    def reset_parameters(self):
        """Like nn.Linear: uniform in +-1/sqrt(fan_in) for every weight (the router too)."""
        self.router.reset_parameters()
        with torch.no_grad():
            for w in (self.w_gate, self.w_up, self.shared_gate, self.shared_up):
                if w is not None:
                    bound = 1.0 / math.sqrt(self.hidden_size)
                    w.uniform_(-bound, bound)
            for w, fan_in in ((self.w_down, self.intermediate_size),
                              (self.shared_down, self.shared_intermediate_size)):
                if w is not None:
                    bound = 1.0 / math.sqrt(fan_in)
                    w.uniform_(-bound, bound)
            if self.e_score_correction_bias is not None:
                self.e_score_correction_bias.zero_()

    def invalidate_fp8_weights(self):
        """With expert_precision "fp8": the next forward quantizes the routed weights again (after
        writes the module cannot see, such as `w_gate.data.copy_(...)` outside an optimizer)."""
        if self._fp8_cache is not None:
            self._fp8_cache.invalidate()

    @property
    def expert_range(self):
        """(first, end) global ids of the experts this rank holds."""
        return self.ep_rank * self.num_local_experts, (self.ep_rank + 1) * self.num_local_experts

    def expert_parameters(self):
        """The routed experts' parameters (sharded over the group; everything else is replicated)."""
        return [self.w_gate, self.w_up, self.w_down]

    def extra_repr(self):
        return (f"hidden={self.hidden_size}, intermediate={self.intermediate_size}, "
                f"experts={self.num_experts} ({self.num_local_experts} here), top_k={self.top_k}, "
                f"shared={self.shared_intermediate_size}, scoring={self.scoring}, "
                f"groups={self.n_group}/{self.topk_group}, backend={self.backend}, "
                f"experts in {self.expert_precision}")

    def route(self, tokens, logits=None):
        """tokens [T, H] -> (topk_experts [T, k] int32, router_weights [T, k] fp32)."""
        if logits is None:
            logits = F.linear(tokens.float(), self.router.weight.float())
        return route(logits, self.top_k, self.scoring, self.n_group, self.topk_group,
                     self.e_score_correction_bias, self.norm_topk_prob, self.routed_scaling_factor)

    def router_stats(self, logits, topk_experts):
        """RouterStats of one forward from its router logits [T, E] and choices [T, k]."""
        E = self.num_experts
        ids = topk_experts.reshape(-1).long()  # a fixed-size scatter: no host sync, graph-safe
        counts = torch.zeros(E, dtype=torch.int64, device=ids.device).scatter_add_(
            0, ids, torch.ones_like(ids))
        zero = logits.new_zeros(())
        aux = z = zero
        if self.aux_loss_coef > 0 and logits.shape[0] > 0:
            scores = logits.softmax(-1) if self.scoring == "softmax" else logits.sigmoid()
            p = (scores / scores.sum(-1, keepdim=True)).mean(0)
            f = counts.to(p.dtype) / topk_experts.numel()
            aux = self.aux_loss_coef * E * (f * p).sum()
        if self.z_loss_coef > 0 and logits.shape[0] > 0:
            z = self.z_loss_coef * torch.logsumexp(logits, -1).square().mean()
        return RouterStats(counts, aux, z, logits)

    def forward(self, x, return_stats=False):
        if x.shape[-1] != self.hidden_size:
            raise ValueError(f"MoE: last dim of x must be {self.hidden_size}, got {tuple(x.shape)}")
        tokens = x.reshape(-1, self.hidden_size)
        logits = F.linear(tokens.float(), self.router.weight.float())
        topk_experts, router_weights = self.route(tokens, logits)
        stats = self.last_stats = self.router_stats(logits, topk_experts)
        tokens = tokens.to(torch.bfloat16).contiguous()      # the experts run on bf16 tokens
        shared = (self.shared_gate, self.shared_up, self.shared_down)
        if self.backend == "mok":
            kw = dict(group=self._group, num_experts=self.num_experts,
                      swiglu_limit=self.swiglu_limit, slot=None if self.recompute else self._slot)
            if self.expert_precision != "bf16":
                y = _functional.moe_fp8(tokens, topk_experts, router_weights, self.w_gate,
                                        self.w_up, self.w_down, *shared,
                                        weight_cache=self._fp8_cache,
                                        weight_format=self._weight_format, **kw)
            else:
                y = _functional.moe(tokens, topk_experts, router_weights, self.w_gate, self.w_up,
                                    self.w_down, *shared, **kw)
        else:
            y = moe_reference(tokens, topk_experts, router_weights, self.w_gate, self.w_up,
                              self.w_down, *shared, num_experts=self.num_experts,
                              process_group=self.process_group, swiglu_limit=self.swiglu_limit)
        y = y.to(x.dtype).reshape(x.shape)
        return (y, stats) if return_stats else y


def router_losses(model):
    """The sum of aux_loss + z_loss of the latest forward of every mok.MoE in model (a scalar; 0
    when no coefficient is set): add it to the training loss."""
    total = None
    for m in model.modules():
        if isinstance(m, MoE) and m.last_stats is not None:
            part = m.last_stats.aux_loss + m.last_stats.z_loss
            total = part if total is None else total + part
    return total if total is not None else torch.zeros(())


def ddp_ignored_names(model):
    """Names of model's expert parameters (mok_expert), for DistributedDataParallel's ignore list:
    DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(model, names) before
    wrapping, then mok.sync_gradients(model, expert_only=True) after backward."""
    return [name for name, p in model.named_parameters() if getattr(p, "mok_expert", False)]


def sync_gradients(model, data_group=None, expert_replica_group=None, expert_only=False):
    """Data-parallel gradient reduction for a model holding mok.MoE layers, after backward, when
    the loss of each data-parallel rank is its own mean (divide by the data-parallel size):
      replicated parameters: averaged over data_group (None: the default group);
      expert parameters (mok_expert): the layer's backward already summed every expert-parallel
      rank's tokens into the rank that holds the expert; they are summed over
      expert_replica_group (the ranks that hold the same experts; None: no replicas, i.e. expert
      parallelism over the whole data-parallel group) and divided by the data-parallel size.
    expert_only: only the expert parameters (DDP reduced the rest)."""
    import torch.distributed as dist
    if not (dist.is_available() and dist.is_initialized()):
        return
    world = dist.get_world_size(data_group)
    replicas = expert_replica_group is not None and dist.get_world_size(expert_replica_group) > 1
    if world == 1 and not replicas:
        return  # nothing to reduce (and a one-rank group need not serve the gradients' device)
    for p in model.parameters():
        if p.grad is None:
            continue
        if getattr(p, "mok_expert", False):
            if replicas:
                dist.all_reduce(p.grad, group=expert_replica_group)
            p.grad.div_(world)
        elif not expert_only:
            dist.all_reduce(p.grad, group=data_group)
            p.grad.div_(world)

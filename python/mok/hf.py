"""hf.py — Hugging Face checkpoints and models <-> mok.MoE: the state_dict mapping of one MoE layer
of DeepSeek-V3 and Qwen3-MoE, loading into this rank's expert slice, the inverse export, MoE
keyword arguments from an HF config, and swap_hf_moe_blocks (a loaded transformers model's MoE
blocks replaced by mok.MoE in one call).

Two layouts of the routed experts exist, and the loader detects which one a state dict holds
(raising when it holds neither or both, never guessing):
  "per_expert"  transformers 4.x modules and the released checkpoints' files: one key per expert
                and projection (table below).
  "fused"       transformers 5 modules (what model.state_dict() returns there): all experts in one
                tensor per projection, P experts.gate_up_proj [E, 2I, H] (gate rows first, then up)
                and P experts.down_proj [E, H, I].

Mapping, with P the layer's prefix (e.g. "model.layers.3.mlp.") and J a global expert id:

    HF key                                   mok.MoE                          style
    P gate.weight                    [E, H]  router.weight                    both
    P gate.e_score_correction_bias   [E]     e_score_correction_bias          deepseek_v3
    P experts.J.gate_proj.weight     [I, H]  w_gate[J - first]  ([E/EP, I, H]) both
    P experts.J.up_proj.weight       [I, H]  w_up[J - first]    ([E/EP, I, H]) both
    P experts.J.down_proj.weight     [H, I]  w_down[J - first]  ([E/EP, H, I]) both
    P shared_experts.gate_proj.weight [Is, H] shared_gate                     deepseek_v3
    P shared_experts.up_proj.weight  [Is, H] shared_up                        deepseek_v3
    P shared_experts.down_proj.weight [H, Is] shared_down                     deepseek_v3

first = rank * E/EP: each rank loads only its own experts (J in [first, first + E/EP)) and ignores
the others', so a full checkpoint or this rank's shard both work. Exports hold this rank's experts;
the union over ranks is the whole layer (router and shared expert are the same on every rank).

FP8 checkpoints load too: a weight stored as float8_e4m3fn codes (or their uint8 bytes) comes with a
scale under the same key plus "_scale_inv" or "_scale", read by its dtype and shape:
  block-128   fp32 / bf16 [..., ceil(rows/128), ceil(cols/128)], value = code * scale (DeepSeek-V3's
              released FP8 files: weight_scale_inv);
  MXFP8       E8M0 bytes, uint8 or float8_e8m0fnu [..., rows, cols/32], value = code * 2^(s - 127)
              (the layout of mok.functional.quantize_weight_mxfp8); 255 (NaN) is refused.
The values are dequantized into the module's bf16 parameters (exactly for MXFP8); a module with
expert_precision "mxfp8" quantizes them back to the same MX codes and scales."""
import torch

STYLES = ("deepseek_v3", "qwen3_moe")
LAYOUTS = ("per_expert", "fused")
_PROJ = (("w_gate", "gate_proj"), ("w_up", "up_proj"), ("w_down", "down_proj"))
_SHARED = (("shared_gate", "gate_proj"), ("shared_up", "up_proj"), ("shared_down", "down_proj"))


def _prefix(prefix):
    return prefix if prefix == "" or prefix.endswith(".") else prefix + "."


def detect_layout(hf_state_dict, prefix):
    """"fused" or "per_expert": the layout of the routed experts under prefix. Raises KeyError when
    the state dict holds neither (naming what it found there) and ValueError when it holds both."""
    p = _prefix(prefix)
    fused = p + "experts.gate_up_proj" in hf_state_dict or p + "experts.down_proj" in hf_state_dict
    per_expert = any(key.startswith(p + "experts.") and key.endswith("_proj.weight")
                     and key[len(p + "experts."):].split(".")[0].isdigit()
                     for key in hf_state_dict)
    if fused and per_expert:
        raise ValueError(f"the state dict holds both fused (experts.gate_up_proj) and per-expert "
                         f"(experts.J.gate_proj.weight) keys under {p!r}")
    if not fused and not per_expert:
        found = sorted(key for key in hf_state_dict if key.startswith(p))[:8]
        raise KeyError(f"no routed-expert keys under {p!r} (neither experts.gate_up_proj, "
                       f"transformers 5, nor experts.0.gate_proj.weight, transformers 4.x and the "
                       f"checkpoints); keys there: {found}")
    return "fused" if fused else "per_expert"


def hf_key_map(module, prefix, style="deepseek_v3", layout="per_expert"):
    """{mok.MoE name: HF key or [HF keys of this rank's experts, in order]} for one layer. In the
    fused layout w_gate and w_up map to the same key (experts.gate_up_proj) and every expert
    weight to one key holding all E experts."""
    if style not in STYLES:
        raise ValueError(f"style must be one of {STYLES}, got {style!r}")
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    p = _prefix(prefix)
    first, end = module.expert_range
    m = {"router.weight": p + "gate.weight"}
    for name, proj in _PROJ:
        if layout == "fused":
            m[name] = p + ("experts.down_proj" if proj == "down_proj" else "experts.gate_up_proj")
        else:
            m[name] = [f"{p}experts.{j}.{proj}.weight" for j in range(first, end)]
    if style == "deepseek_v3":
        if module.e_score_correction_bias is not None:
            m["e_score_correction_bias"] = p + "gate.e_score_correction_bias"
        if module.shared_gate is not None:
            for name, proj in _SHARED:
                m[name] = f"{p}shared_experts.{proj}.weight"
    else:
        if module.e_score_correction_bias is not None or module.shared_gate is not None:
            raise ValueError("qwen3_moe layers have no score-correction bias and no shared expert")
    return m


def _get(sd, key, shape, used=None, rows=None):
    """sd[key] checked against shape, then sliced along dim 0 by rows when given; FP8 codes with
    their scale key (module docstring) dequantized to float32, the scale key appended to used."""
    if key not in sd:
        raise KeyError(f"missing key in the Hugging Face state dict: {key}")
    t = sd[key]
    if tuple(t.shape) != tuple(shape):
        raise ValueError(f"{key}: shape {tuple(t.shape)}, expected {tuple(shape)}")
    scale_key = next((key + sfx for sfx in _SCALE_SUFFIXES if key + sfx in sd), None)
    if t.dtype != torch.float8_e4m3fn and scale_key is None:
        return t if rows is None else t[rows]
    if scale_key is None:
        raise KeyError(f"{key} holds FP8 codes but the state dict has no {key}_scale_inv or "
                       f"{key}_scale")
    scale = sd[scale_key]
    if rows is not None:
        if scale.dim() != t.dim() or scale.shape[0] != t.shape[0]:
            raise ValueError(f"{scale_key}: shape {tuple(scale.shape)} does not match {key}'s "
                             f"{tuple(t.shape)}")
        t, scale = t[rows], scale[rows]
    if used is not None:
        used.append(scale_key)
    return dequantize_fp8(t, scale, scale_key)


_SCALE_SUFFIXES = ("_scale_inv", "_scale")
_E8M0 = tuple(d for d in (torch.uint8, getattr(torch, "float8_e8m0fnu", None)) if d is not None)


def dequantize_fp8(codes, scale, name="scale"):
    """E4M3 codes (float8_e4m3fn, or their uint8 bytes) [..., rows, cols] with a block-128 scale
    (float [..., ceil(rows/128), ceil(cols/128)]: value = code * scale) or an MXFP8 one (E8M0 bytes
    [..., rows, cols/32]: value = code * 2^(s - 127)) -> float32 values. Raises ValueError for
    any other scale shape or dtype, and for an E8M0 NaN (255)."""
    rows, cols = codes.shape[-2:]
    v = codes.view(torch.float8_e4m3fn).float() if codes.dtype == torch.uint8 else codes.float()
    lead = tuple(codes.shape[:-2])
    if scale.dtype in _E8M0 and tuple(scale.shape) == lead + (rows, cols // 32) and cols % 32 == 0:
        e = scale.view(torch.uint8).int()
        if bool((e == 255).any()):
            raise ValueError(f"{name}: an E8M0 scale is 255 (NaN)")
        return v * torch.exp2(e.float() - 127.0).repeat_interleave(32, dim=-1)
    nb = (lead + (-(-rows // 128), -(-cols // 128)))
    if scale.is_floating_point() and scale.dtype not in _E8M0 and tuple(scale.shape) == nb:
        s = scale.float().repeat_interleave(128, dim=-2).repeat_interleave(128, dim=-1)
        return v * s[..., :rows, :cols]
    raise ValueError(f"{name}: {scale.dtype} {tuple(scale.shape)} is neither a block-128 scale "
                     f"{nb} (float) nor an MXFP8 one {lead + (rows, cols // 32)} (E8M0 bytes)")


@torch.no_grad()
def load_hf_moe_state_dict(module, hf_state_dict, prefix, style="deepseek_v3", strict=True):
    """Copies one HF MoE layer (keys under prefix, either layout: detect_layout) into module (a
    mok.MoE), this rank's experts only, casting to each parameter's dtype and device. strict: every
    key under prefix must be used, except other ranks' experts (and the DeepSeek-V3 bias or shared
    expert must be present exactly when the module has them). Returns the list of HF keys used."""
    p = _prefix(prefix)
    layout = detect_layout(hf_state_dict, p)
    mapping = hf_key_map(module, p, style, layout)
    own = dict(module.named_parameters())
    own.update(module.named_buffers())
    first, end = module.expert_range
    E, I, H = module.num_experts, module.intermediate_size, module.hidden_size
    used = []
    for name, keys in mapping.items():
        target = own[name]
        if isinstance(keys, list):
            parts = [_get(hf_state_dict, key, target.shape[1:], used) for key in keys]
            target.copy_(torch.stack([t.to(target.device, target.dtype) for t in parts]))
        elif name in ("w_gate", "w_up", "w_down") and layout == "fused":
            shape = (E, H, I) if name == "w_down" else (E, 2 * I, H)
            t = _get(hf_state_dict, keys, shape, used, slice(first, end))
            if name == "w_gate":
                t = t[:, :I]
            elif name == "w_up":
                t = t[:, I:]
            target.copy_(t)
            keys = [keys]
        else:
            target.copy_(_get(hf_state_dict, keys, target.shape, used))
            keys = [keys]
        used += keys
    if strict:
        used_set = set(used)
        extra = [key for key in hf_state_dict if key.startswith(p) and key not in used_set
                 and not _is_other_expert(key, p, module)]
        if extra:
            raise ValueError(f"keys under {p!r} this mok.MoE has no place for (style {style}): "
                             f"{sorted(extra)[:8]}{' ...' if len(extra) > 8 else ''}")
    return list(dict.fromkeys(used))


def _is_other_expert(key, p, module):
    """An expert weight of a rank other than this one."""
    rest = key[len(p):].split(".")
    if (len(rest) != 4 or rest[0] != "experts" or not rest[1].isdigit()
            or rest[3] not in ("weight",) + tuple("weight" + sfx for sfx in _SCALE_SUFFIXES)):
        return False
    if rest[2] not in ("gate_proj", "up_proj", "down_proj"):
        return False
    first, end = module.expert_range
    j = int(rest[1])
    return (j < first or j >= end) and j < module.num_experts


@torch.no_grad()
def export_hf_moe_state_dict(module, prefix, style="deepseek_v3", dtype=None, device="cpu",
                             layout="per_expert"):
    """The inverse of load_hf_moe_state_dict: {HF key: tensor} for this rank's experts, the router,
    and (DeepSeek-V3) the bias and shared expert; tensors are copies on device, in dtype (None:
    each tensor's own dtype). layout "fused" (transformers 5 modules) needs the whole layer on this
    rank (expert-parallel size 1): its tensors hold all E experts."""
    own = dict(module.named_parameters())
    own.update(module.named_buffers())
    if layout == "fused" and module.num_local_experts != module.num_experts:
        raise ValueError("the fused layout holds all experts in one tensor: export it from an "
                         "expert-parallel size of 1, or export per_expert keys from every rank")
    out = {}
    for name, keys in hf_key_map(module, prefix, style, layout).items():
        t = own[name].detach()
        if name == "w_up" and layout == "fused":
            continue  # written with w_gate: one experts.gate_up_proj
        if name == "w_gate" and layout == "fused":
            t = torch.cat([t, own["w_up"].detach()], dim=1)
        parts = list(t.unbind(0)) if isinstance(keys, list) else [t]
        for key, part in zip(keys if isinstance(keys, list) else [keys], parts):
            out[key] = part.to(device=device, dtype=dtype or part.dtype).clone()
    return out


def moe_kwargs_from_hf_config(config, style="deepseek_v3"):
    """mok.MoE(**kwargs) for one MoE layer of an HF config (a dict or a config object)."""
    get = config.get if isinstance(config, dict) else (lambda k, d=None: getattr(config, k, d))
    if style == "deepseek_v3":
        I = get("moe_intermediate_size")
        return dict(hidden_size=get("hidden_size"), intermediate_size=I,
                    num_experts=get("n_routed_experts"), top_k=get("num_experts_per_tok"),
                    shared_intermediate_size=I * (get("n_shared_experts", 0) or 0),
                    scoring=get("scoring_func", "sigmoid"), n_group=get("n_group", 1) or 1,
                    topk_group=get("topk_group", 1) or 1,
                    score_correction_bias=get("topk_method", "noaux_tc") == "noaux_tc",
                    norm_topk_prob=bool(get("norm_topk_prob", True)),
                    routed_scaling_factor=float(get("routed_scaling_factor", 1.0)))
    if style == "qwen3_moe":
        return dict(hidden_size=get("hidden_size"), intermediate_size=get("moe_intermediate_size"),
                    num_experts=get("num_experts"), top_k=get("num_experts_per_tok"),
                    scoring="softmax", norm_topk_prob=bool(get("norm_topk_prob", False)))
    raise ValueError(f"style must be one of {STYLES}, got {style!r}")


# the MoE block classes of transformers (4.x and 5 use the same names) that swap_hf_moe_blocks
# replaces, by model type
_BLOCKS = {"deepseek_v3": ("DeepseekV3MoE",), "qwen3_moe": ("Qwen3MoeSparseMoeBlock",)}


@torch.no_grad()
def swap_hf_moe_blocks(model, backend="mok", **moe_kwargs):
    """Replaces every MoE block of a loaded transformers DeepSeek-V3 or Qwen3-MoE model (found by
    class, model.config.model_type naming the style) with a mok.MoE holding the same weights
    (this rank's experts when moe_kwargs has a process_group) and the same routing (from the
    config: moe_kwargs_from_hf_config; moe_kwargs may add or override mok.MoE arguments, e.g.
    expert_precision, max_tokens). The new modules sit on the old ones' device. Returns the names
    of the replaced modules. The model's own router-logit outputs (output_router_logits) no longer
    see these layers: mok.MoE's aux_loss_coef gives the load-balancing loss instead."""
    from .moe import MoE
    config = getattr(model, "config", None)
    style = getattr(config, "model_type", None)
    if style not in _BLOCKS:
        raise ValueError(f"swap_hf_moe_blocks: model_type must be one of {sorted(_BLOCKS)}, "
                         f"got {style!r}")
    kwargs = moe_kwargs_from_hf_config(config, style)
    kwargs.update(moe_kwargs)
    replaced = []
    for name, block in list(model.named_modules()):
        if type(block).__name__ not in _BLOCKS[style]:
            continue
        device = next(block.parameters()).device
        new = MoE(backend=backend, device=device, **kwargs)
        load_hf_moe_state_dict(new, block.state_dict(), "", style=style)
        parent, _, attr = name.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, attr, new)
        replaced.append(name)
    if not replaced:
        raise ValueError(f"swap_hf_moe_blocks: no {_BLOCKS[style]} module in the model")
    return replaced

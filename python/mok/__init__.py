"""mok — a whole mixture-of-experts layer (dispatch, SwiGLU experts, combine), forward and
backward, across the GPUs of an expert-parallel group. This package's public Python API:

    mok.MoE                  the drop-in nn.Module (backend "mok" or the plain-PyTorch "torch")
    mok.Group, mok.get_group an expert-parallel group over a torch.distributed ProcessGroup
    mok.check_device_errors  raise if mok's kernels flagged a fault (at a step boundary)
    mok.clear_device_errors  clear the faults on every rank, for the next step
    mok.RouterStats, mok.router_losses   tokens per expert, load-balancing and z losses
    mok.sync_gradients, mok.ddp_ignored_names   data parallelism with sharded experts
    mok.FP8WeightCache       FP8 codes of a layer's routed weights, made once per weight update
    mok.functional.moe       the functional layer (torch custom ops with autograd, a plain
                             autograd.Function in eager mode; also mok.functional_moe)
    mok.moe_reference        the same math in plain PyTorch (mok.reference), mok.route (routing)
    mok.load_hf_moe_state_dict, mok.export_hf_moe_state_dict, mok.moe_kwargs_from_hf_config
                             Hugging Face DeepSeek-V3 / Qwen3-MoE checkpoints (mok.hf)
    mok.swap_hf_moe_blocks   a transformers model's MoE blocks replaced by mok.MoE

Names load on first use, so `import mok` needs neither torch nor a GPU, and mok._capi (the ctypes
bindings of libmok) needs no torch."""
import importlib
import warnings

from . import _library

__version__ = "0.4.0"


class NcclMismatchWarning(UserWarning):
    """libmok was built against another NCCL than the one torch in this environment loads."""


def _check_nccl():
    try:
        message = _library.mismatch(_library.find_library())
    except OSError:  # no library yet: mok._capi says how to build it when it is needed
        return
    if message:
        warnings.warn(message, NcclMismatchWarning, stacklevel=3)


_check_nccl()

_LAZY = {
    "MoE": ("moe", "MoE"),
    "get_group": ("moe", "get_group"),
    "destroy_groups": ("moe", "destroy_groups"),
    "check_device_errors": ("moe", "check_device_errors"),
    "clear_device_errors": ("moe", "clear_device_errors"),
    "RouterStats": ("moe", "RouterStats"),
    "router_losses": ("moe", "router_losses"),
    "sync_gradients": ("moe", "sync_gradients"),
    "ddp_ignored_names": ("moe", "ddp_ignored_names"),
    "Group": ("functional", "Group"),
    "FP8WeightCache": ("fp8_cache", "FP8WeightCache"),
    "functional_moe": ("functional", "moe"),
    "moe_reference": ("reference", "moe_reference"),
    "route": ("routing", "route"),
    "load_hf_moe_state_dict": ("hf", "load_hf_moe_state_dict"),
    "export_hf_moe_state_dict": ("hf", "export_hf_moe_state_dict"),
    "moe_kwargs_from_hf_config": ("hf", "moe_kwargs_from_hf_config"),
    "hf_key_map": ("hf", "hf_key_map"),
    "swap_hf_moe_blocks": ("hf", "swap_hf_moe_blocks"),
}
_SUBMODULES = ("functional", "reference", "routing", "hf")

__all__ = sorted(_LAZY) + list(_SUBMODULES)


def __getattr__(name):
    if name in _SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    if name in _LAZY:
        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(f".{module}", __name__), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'mok' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + __all__)

"""_capi.py — ctypes bindings of libmok's C API (include/mok.h): the structs, the status codes
and the functions, with every non-success status raised as MokError. Needs no torch."""
import ctypes
import math
import os

from ._library import find_library

MOK_SUCCESS = 0
STATUS_NAMES = [
    "SUCCESS", "INVALID_ARGUMENT", "INVALID_SHAPE", "MISALIGNED", "EXPERT_ID", "DUPLICATE_EXPERT",
    "CAPACITY", "SHAPE_MISMATCH", "NOT_SUPPORTED", "NO_DEVICE", "CUDA", "NCCL", "OUT_OF_MEMORY",
    "TIMEOUT", "INTERNAL", "DESYNC",
]
DTYPE_BF16, DTYPE_FP8_BLOCK128, DTYPE_MXFP8 = 0, 1, 2
PATH_AUTO, PATH_FUSED, PATH_ORACLE, PATH_GROUPED = 0, 1, 2, 3
VERSION_CODE = 400  # MOK_VERSION_CODE of the mok.h these bindings mirror (0.4.0)
CONFIG_MAGIC = 0x6D6F6B43


class MokError(RuntimeError):
    """A mok call returned a status other than success."""

    def __init__(self, status, where, detail=""):
        self.status = status
        self.detail = detail
        name = STATUS_NAMES[status] if 0 <= status < len(STATUS_NAMES) else str(status)
        super().__init__(f"{where}: MOK_ERR_{name}: {_status_string(status)}"
                         + (f" ({detail})" if detail else ""))


class Shape(ctypes.Structure):
    _fields_ = [("tokens", ctypes.c_int64), ("hidden", ctypes.c_int64),
                ("num_experts", ctypes.c_int64), ("intermediate", ctypes.c_int64),
                ("top_k", ctypes.c_int64), ("shared_intermediate", ctypes.c_int64)]


class Plan(ctypes.Structure):
    """mok_plan: every execution choice of a workspace (0 in a request: mok chooses)."""
    _fields_ = [(n, ctypes.c_int) for n in (
        "path", "schedule", "tile_m", "minibatch_rows", "fwd_comm_ctas", "bwd_comm_ctas",
        "shared_fwd", "shared_bwd", "fp8_mlp", "routed_cluster", "shared_cluster",
        "routed_warpgroups", "shared_warpgroups", "wgrad_cluster_down", "wgrad_cluster_gate_up")]


class Config(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("magic", ctypes.c_uint), ("version", ctypes.c_uint),
                ("dtype", ctypes.c_int), ("ring_bytes", ctypes.c_int64),
                ("macrobatch_minibatches", ctypes.c_int), ("schedule_capacity", ctypes.c_int64),
                ("use_swiglu_limit", ctypes.c_int), ("swiglu_limit", ctypes.c_float),
                ("timeout_ms", ctypes.c_int), ("fp8_weight_grads", ctypes.c_int),
                ("fp8_fused_router_grad", ctypes.c_int), ("fp8_shared_expert", ctypes.c_int),
                ("plan", Plan), ("plan_cache", ctypes.c_char_p)]


class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * 128)]


class Weights(ctypes.Structure):
    _fields_ = [(n, ctypes.c_void_p) for n in (
        "w_gate", "w_up", "w_down", "w_gate_scale", "w_up_scale", "w_down_scale",
        "ws_gate", "ws_up", "ws_down", "w_gate_up_t", "w_gate_up_t_scale", "w_down_t",
        "w_down_t_scale")]


class Grads(ctypes.Structure):
    _fields_ = [(n, ctypes.c_void_p) for n in (
        "dx", "d_router_weights", "dw_gate", "dw_up", "dw_down", "dws_gate", "dws_up",
        "dws_down")] + [("grad_fp32", ctypes.c_int), ("accumulate", ctypes.c_int)]


def _load():
    """libmok, refused (ImportError naming the fix) when it was built against another NCCL than
    the one torch here loads: loading it first would make torch's import fail, loading it after
    torch would fail its groups."""
    from ._library import mismatch
    path = find_library()
    message = mismatch(path)
    if message:
        raise ImportError(message)
    return ctypes.CDLL(path)


lib = _load()

_P = ctypes.c_void_p
_PP = ctypes.POINTER(ctypes.c_void_p)
_I64P = ctypes.POINTER(ctypes.c_int64)
_SIGNATURES = {
    "mok_status_string": (ctypes.c_char_p, [ctypes.c_int]),
    "mok_last_error": (ctypes.c_char_p, []),
    "mok_config_init": (ctypes.c_int, [ctypes.POINTER(Config)]),
    "mok_plan_parse": (ctypes.c_int, [ctypes.c_char_p, ctypes.POINTER(Plan)]),
    "mok_plan_format": (ctypes.c_int, [ctypes.POINTER(Plan), ctypes.c_char_p, ctypes.c_size_t]),
    "mok_workspace_plan": (ctypes.c_int, [_P, ctypes.POINTER(Plan)]),
    "mok_workspace_kernels": (ctypes.c_char_p, [_P]),
    "mok_workspace_plan_tuned": (ctypes.c_int, [_P, ctypes.POINTER(ctypes.c_int)]),
    "mok_validate": (ctypes.c_int, [ctypes.POINTER(Shape), ctypes.POINTER(Config), ctypes.c_int]),
    "mok_schedule_worst_case_rows": (ctypes.c_int, [ctypes.POINTER(Shape), ctypes.c_int, ctypes.c_int, _I64P]),
    "mok_get_unique_id": (ctypes.c_int, [ctypes.POINTER(UniqueId)]),
    "mok_group_create": (ctypes.c_int, [ctypes.POINTER(UniqueId), ctypes.c_int, ctypes.c_int, _PP]),
    "mok_group_create_from_nccl": (ctypes.c_int, [_P, _PP]),
    "mok_group_rank": (ctypes.c_int, [_P, ctypes.POINTER(ctypes.c_int)]),
    "mok_group_size": (ctypes.c_int, [_P, ctypes.POINTER(ctypes.c_int)]),
    "mok_group_destroy": (ctypes.c_int, [_P]),
    "mok_workspace_create": (ctypes.c_int, [_P, ctypes.POINTER(Shape), ctypes.POINTER(Config), _PP]),
    "mok_workspace_bytes": (ctypes.c_int, [_P, _I64P]),
    "mok_workspace_error": (ctypes.c_int, [_P, ctypes.POINTER(ctypes.c_int)]),
    "mok_workspace_error_rank": (ctypes.c_int, [_P, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int)]),
    "mok_workspace_reject": (ctypes.c_int, [_P, ctypes.c_int, _P]),
    "mok_workspace_clear_error": (ctypes.c_int, [_P, _P]),
    "mok_workspace_destroy": (ctypes.c_int, [_P]),
    "mok_schedule_create": (ctypes.c_int, [_P, _PP]),
    "mok_schedule_destroy": (ctypes.c_int, [_P]),
    "mok_schedule_set_tokens": (ctypes.c_int, [_P, ctypes.c_int64]),
    "mok_schedule_build": (ctypes.c_int, [_P, _P, _P]),
    "mok_schedule_rows": (ctypes.c_int, [_P, _I64P]),
    "mok_schedule_bytes": (ctypes.c_int, [_P, _I64P]),
    "mok_forward": (ctypes.c_int, [_P, ctypes.POINTER(Weights), _P, _P, _P, _P]),
    "mok_build_and_forward": (ctypes.c_int, [_P, _P, ctypes.POINTER(Weights), _P, _P, _P, _P]),
    "mok_backward": (ctypes.c_int, [_P, ctypes.POINTER(Weights), _P, _P, _P, ctypes.POINTER(Grads), _P]),
    "mok_fp8_scale_count": (ctypes.c_int, [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, _I64P]),
    "mok_quantize_weight": (ctypes.c_int, [ctypes.c_int, _P, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, _P, _P, _P]),
    "mok_mxfp8_to_block128": (ctypes.c_int, [_P, _P, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, _P, _P, _P]),
    "mok_quantize_weight_mxfp8_block128": (ctypes.c_int, [_P, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, _P, _P, _P]),
    "mok_fp8_transpose_weights": (ctypes.c_int, [ctypes.c_int, _P, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, _P, _P, _P, _P, _P]),
    "mok_quantize_weight_transposed": (ctypes.c_int, [ctypes.c_int, _P, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, _P, _P, _P, _P, ctypes.c_int64, ctypes.c_int64, _P]),
}
for _name, (_res, _args) in _SIGNATURES.items():
    _fn = getattr(lib, _name)
    _fn.restype = _res
    _fn.argtypes = _args


def _status_string(status):
    return lib.mok_status_string(status).decode()


def check(status, where):
    """Raises MokError unless status is MOK_SUCCESS."""
    if status != MOK_SUCCESS:
        raise MokError(status, where)


def call(name, *args):
    """Calls the C function `name` and raises MokError on a failed status (with the failed CUDA or
    NCCL call's detail, mok_last_error, for those statuses)."""
    status = getattr(lib, name)(*args)
    if status == MOK_SUCCESS:
        return
    if status in (STATUS_NAMES.index("CUDA"), STATUS_NAMES.index("NCCL")):
        raise MokError(status, name, lib.mok_last_error().decode(errors="replace"))
    check(status, name)


def plan_text(plan):
    """A plan request as mok_plan_parse reads it: None or "" (mok chooses everything), a text
    "key=value,...", or a dict {key: value}. Raises ValueError on an unknown key or value."""
    if plan is None:
        return ""
    if isinstance(plan, dict):
        plan = ",".join(f"{k}={v}" for k, v in sorted(plan.items()))
    if not isinstance(plan, str):
        raise TypeError(f"mok: a plan is a 'key=value,...' text or a dict, got {type(plan).__name__}")
    probe = Plan()
    if lib.mok_plan_parse(plan.encode(), ctypes.byref(probe)) != MOK_SUCCESS:
        raise ValueError(f"mok: bad plan {plan!r}: keys and values are mok_plan's (include/mok.h)")
    return plan


_INT_RANGES = {ctypes.c_int: (-(1 << 31), (1 << 31) - 1),
               ctypes.c_int64: (-(1 << 63), (1 << 63) - 1)}


def _check_knob(key, value, ctype):
    """Raises unless value fits the C field: ctypes would silently truncate an int that does not
    (ring_bytes=1 << 64 would become 0) or a float it cannot hold."""
    if ctype is ctypes.c_float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or \
                not math.isfinite(value) or abs(value) > 3.4e38:
            raise ValueError(f"mok config knob '{key}' wants a finite float, got {value!r}")
        return
    lo, hi = _INT_RANGES[ctype]
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ValueError(f"mok config knob '{key}' wants an int in [{lo}, {hi}], got {value!r}")


def default_plan_cache():
    """The tuned plan cache the package reads unless told otherwise (`mok tune` writes it):
    $XDG_CACHE_HOME/mok/plans.tsv, else ~/.cache/mok/plans.tsv."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "mok", "plans.tsv")


def default_config(plan=None, **knobs):
    """A Config with mok's defaults, then the given fields set (e.g. ring_bytes=1 << 30), and the
    plan requests of `plan` (see plan_text). plan_cache: default_plan_cache() unless given ("" or
    None: none)."""
    cfg = Config()
    call("mok_config_init", ctypes.byref(cfg))
    knobs.setdefault("plan_cache", default_plan_cache())
    types = dict(Config._fields_)
    for key, value in knobs.items():
        if key in ("size", "magic", "version", "plan") or not hasattr(cfg, key):
            raise TypeError(f"unknown mok config knob '{key}'")
        if types[key] is ctypes.c_char_p:  # plan_cache: a path, "" or None (none)
            if value is not None and not isinstance(value, str):
                raise ValueError(f"mok config knob '{key}' wants a str or None, got {value!r}")
            setattr(cfg, key, None if value is None else value.encode())
            continue
        _check_knob(key, value, types[key])
        setattr(cfg, key, value)
    text = plan_text(plan)
    if text:
        call("mok_plan_parse", text.encode(), ctypes.byref(cfg.plan))
    return cfg

"""test_capi.py — the Python ctypes layer agrees with the C library: struct layouts (through
values that round-trip the C functions), status codes raised as MokError, defaults, validation.
Runs without torch and without a GPU; exits non-zero on the first failure."""
import ctypes
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))
from mok import _capi as c  # noqa: E402


def main():
    cfg = c.default_config()
    assert cfg.size == ctypes.sizeof(c.Config) and cfg.magic == c.CONFIG_MAGIC
    assert cfg.version == c.VERSION_CODE, cfg.version  # the bindings mirror this mok.h
    assert cfg.dtype == c.DTYPE_BF16 and cfg.plan.path == c.PATH_AUTO
    assert all(getattr(cfg.plan, n) == 0 for n, _ in c.Plan._fields_)  # every choice mok's
    assert cfg.macrobatch_minibatches == 64 and cfg.ring_bytes == 0 and cfg.schedule_capacity == 0
    assert cfg.use_swiglu_limit == 0 and cfg.timeout_ms == 10000
    assert cfg.fp8_weight_grads == 3 and cfg.fp8_fused_router_grad == 1 and cfg.fp8_shared_expert == 0
    # the plan's text form through the C parser, both ways
    pinned = c.default_config(plan={"path": "grouped", "shared_fwd": "beside_late"})
    assert pinned.plan.path == c.PATH_GROUPED and pinned.plan.shared_fwd == 3
    buf = ctypes.create_string_buffer(512)
    c.call("mok_plan_format", ctypes.byref(pinned.plan), buf, 512)
    assert buf.value == b"path=grouped,shared_fwd=beside_late", buf.value
    for bad_plan in ("path=v1", "no_such=1", {"tile_m": "big"}):
        try:
            c.default_config(plan=bad_plan)
            raise AssertionError(f"plan {bad_plan!r} accepted")
        except ValueError:
            pass

    dsv3 = c.Shape(7168, 7168, 256, 2048, 8, 2048)
    c.call("mok_validate", ctypes.byref(dsv3), ctypes.byref(cfg), 8)
    # a field past the int64s: if the layout were off, timeout_ms would not be where C reads it
    bad = c.default_config(timeout_ms=0)
    try:
        c.call("mok_validate", ctypes.byref(dsv3), ctypes.byref(bad), 8)
        raise AssertionError("timeout_ms=0 accepted")
    except c.MokError as e:
        assert e.status == 1 and "INVALID_ARGUMENT" in str(e), e
    bad = c.default_config(fp8_shared_expert=2)  # past the int64s: the layout agrees with C
    try:
        c.call("mok_validate", ctypes.byref(dsv3), ctypes.byref(bad), 8)
        raise AssertionError("fp8_shared_expert=2 accepted")
    except c.MokError as e:
        assert e.status == 1
    bad = c.default_config(plan="wgrad_cluster_gate_up=3")  # the last field of all
    try:
        c.call("mok_validate", ctypes.byref(dsv3), ctypes.byref(bad), 8)
        raise AssertionError("wgrad_cluster_gate_up=3 accepted")
    except c.MokError as e:
        assert e.status == 1
    bad = c.default_config()
    bad.magic = 0  # not made by mok_config_init
    try:
        c.call("mok_validate", ctypes.byref(dsv3), ctypes.byref(bad), 8)
        raise AssertionError("a config without its magic accepted")
    except c.MokError as e:
        assert e.status == 1
    bad = c.default_config(fp8_shared_expert=2)  # once more, on its own
    try:
        c.call("mok_validate", ctypes.byref(dsv3), ctypes.byref(bad), 8)
        raise AssertionError("fp8_shared_expert=2 accepted")
    except c.MokError as e:
        assert e.status == 1
    bad = c.default_config(use_swiglu_limit=1, swiglu_limit=-2.0)
    try:
        c.call("mok_validate", ctypes.byref(dsv3), ctypes.byref(bad), 8)
        raise AssertionError("negative swiglu_limit accepted")
    except c.MokError as e:
        assert e.status == 1
    c.call("mok_validate", ctypes.byref(dsv3), ctypes.byref(c.default_config(use_swiglu_limit=1, swiglu_limit=7.0)), 8)
    odd = c.Shape(7168, 7100, 256, 2048, 8, 2048)
    try:
        c.call("mok_validate", ctypes.byref(odd), ctypes.byref(cfg), 8)
        raise AssertionError("misaligned hidden accepted")
    except c.MokError as e:
        assert e.status == 3 and "MISALIGNED" in str(e)
    for knob in ("no_such_knob", "size", "magic"):
        try:
            c.default_config(**{knob: 1})
            raise AssertionError(f"knob {knob} accepted")
        except TypeError:
            pass

    rows = ctypes.c_int64()
    c.call("mok_schedule_worst_case_rows", ctypes.byref(dsv3), 8, 128, ctypes.byref(rows))
    assert rows.value == 8 * 7168 * 8 + 32 * 127, rows.value
    for s in range(len(c.STATUS_NAMES)):
        assert c.lib.mok_status_string(s) not in (None, b"unknown status")
    assert c.lib.mok_status_string(99) == b"unknown status"
    assert ctypes.sizeof(c.Grads) == 8 * 8 + 8 and ctypes.sizeof(c.Weights) == 13 * 8
    assert isinstance(c.lib.mok_last_error(), bytes)  # "" until a CUDA or NCCL call fails
    e = c.MokError(c.STATUS_NAMES.index("CUDA"), "mok_forward", "cudaMemcpyAsync(...) at a.c:1: x")
    assert str(e).endswith("(cudaMemcpyAsync(...) at a.c:1: x)") and e.detail.startswith("cuda"), e
    try:  # a NULL schedule: refused by the C library, raised as MokError
        c.call("mok_schedule_set_tokens", None, 1)
        raise AssertionError("mok_schedule_set_tokens(NULL) accepted")
    except c.MokError as e:
        assert e.status == 1, e
    # knob values the C field cannot hold raise, instead of being truncated by ctypes
    for bad in (dict(ring_bytes=1 << 64), dict(ring_bytes=True), dict(timeout_ms=1 << 31),
                dict(macrobatch_minibatches=-(1 << 40)), dict(swiglu_limit=float("inf")),
                dict(swiglu_limit=1e39), dict(schedule_capacity=1.5)):
        try:
            c.default_config(**bad)
            raise AssertionError(f"default_config accepted {bad}")
        except ValueError:
            pass
    assert c.default_config(ring_bytes=(1 << 63) - 1, timeout_ms=(1 << 31) - 1).timeout_ms == (1 << 31) - 1
    # the plan cache's path: the package's default file, a str given, "" or None for none
    os.environ["XDG_CACHE_HOME"] = "/x/cache"
    assert c.default_config().plan_cache == b"/x/cache/mok/plans.tsv"
    del os.environ["XDG_CACHE_HOME"]
    assert c.default_config().plan_cache == os.path.expanduser("~/.cache/mok/plans.tsv").encode()
    assert c.default_config(plan_cache="/tmp/somewhere/plans.tsv").plan_cache == b"/tmp/somewhere/plans.tsv"
    assert c.default_config(plan_cache="").plan_cache == b""
    assert c.default_config(plan_cache=None).plan_cache is None
    try:
        c.default_config(plan_cache=3)
        raise AssertionError("default_config accepted plan_cache=3")
    except ValueError:
        pass
    print("python capi: ok")


if __name__ == "__main__":
    main()

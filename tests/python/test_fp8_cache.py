"""test_fp8_cache.py — mok.FP8WeightCache's rules on CPU tensors (no GPU): codes reused while the
weights are provably unchanged, made again after every kind of write it can see (in-place ops,
optimizer steps of any optimizer, including ones that write through .data, load_state_dict, a
moved or replaced tensor), and after invalidate(). The quantizer here is a stand-in that records
its calls; the GPU test (test_moe_gpu.py) checks the real one against a fresh quantization."""
import os
import sys

import pytest

torch = pytest.importorskip("torch")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
from mok.fp8_cache import FP8WeightCache  # noqa: E402


def fake_quantize(w):
    return (w.clone(), w.abs().amax().reshape(1))


def fake_transpose(*codes):
    return tuple(c.clone() for c in codes[::2])


def weights(seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(2, 4, 8, generator=g).bfloat16()) for _ in range(3)]


def cache():
    return FP8WeightCache(fake_quantize, fake_transpose)


def test_reused_while_unchanged():
    c, w = cache(), weights()
    a = c.codes(*w)
    b = c.codes(*w)
    assert a is b and c.quantizations == 1
    t1, t2 = c.transposed(a), c.transposed(b)
    assert t1 is t2 and c.transpositions == 1
    assert torch.equal(a[0], w[0].detach())


@pytest.mark.parametrize("write", ["inplace_no_grad", "sgd", "adam_foreach", "adam_fused",
                                   "data_optimizer", "load_state_dict"])
def test_write_makes_new_codes(write):
    c, w = cache(), weights()
    first = c.codes(*w)
    t_first = c.transposed(first)
    for p in w:
        p.grad = torch.ones_like(p)
    if write == "inplace_no_grad":
        with torch.no_grad():
            w[1].mul_(2)
    elif write == "sgd":
        torch.optim.SGD(w, lr=0.5).step()
    elif write == "adam_foreach":
        torch.optim.Adam(w, lr=0.5, foreach=True).step()
    elif write == "adam_fused":
        if not hasattr(torch, "_fused_adam_"):
            pytest.skip("no fused Adam in this torch")
        try:
            torch.optim.Adam(w, lr=0.5, fused=True).step()
        except RuntimeError as e:  # fused Adam on CPU tensors is missing from some builds
            pytest.skip(f"fused Adam on CPU: {e}")
    elif write == "data_optimizer":  # an optimizer that writes through .data (no version bump)
        class DataSGD(torch.optim.Optimizer):
            def __init__(self, params):
                super().__init__(params, {})

            def step(self, closure=None):
                for group in self.param_groups:
                    for p in group["params"]:
                        p.data.add_(p.grad, alpha=-0.5)
        DataSGD(w).step()
    elif write == "load_state_dict":
        m = torch.nn.Module()
        for i, p in enumerate(w):
            m.register_parameter(f"w{i}", p)
        m.load_state_dict({f"w{i}": torch.full_like(p, 0.25) for i, p in enumerate(w)})
    second = c.codes(*w)
    assert second is not first and c.quantizations == 2
    changed = [i for i in range(3) if not torch.equal(second[2 * i], first[2 * i])]
    assert changed, "the stand-in codes must follow the new weights"
    for i in range(3):
        assert torch.equal(second[2 * i], w[i].detach())
    assert c.transposed(second) is not t_first and c.transpositions == 2


def test_other_tensors_are_a_miss():
    c, w = cache(), weights()
    first = c.codes(*w)
    other = weights(1)
    assert c.codes(other[0], w[1], w[2]) is not first and c.quantizations == 2
    # a copy with the same values but another object: a miss too (identity is part of the key)
    again = [p.detach().clone() for p in w]
    c.codes(*w)
    c.codes(*again)
    assert c.quantizations == 4


def test_data_write_needs_invalidate():
    """A write through .data outside an optimizer is the one write the cache cannot see: the
    documented remedy is invalidate()."""
    c, w = cache(), weights()
    first = c.codes(*w)
    w[0].data.copy_(torch.zeros_like(w[0]))
    assert c.codes(*w) is first  # unseen, as documented
    c.invalidate()
    second = c.codes(*w)
    assert second is not first and torch.equal(second[0], torch.zeros_like(w[0]).detach())


def test_stale_transposed_codes_are_made_fresh():
    c, w = cache(), weights()
    first = c.codes(*w)
    with torch.no_grad():
        w[2].add_(1)
    c.codes(*w)
    t = c.transposed(first)  # codes the cache no longer holds: made for them, not from the cache
    assert torch.equal(t[2], first[4]) and c.transpositions == 1


def test_inference_tensors_are_not_cached():
    c = cache()
    with torch.inference_mode():
        w = [torch.randn(2, 4, 8).bfloat16() for _ in range(3)]
    c.codes(*w)
    c.codes(*w)
    assert c.quantizations == 2


def test_released_weights_are_not_matched():
    """A weight freed and another allocated at its address is a different object: a miss."""
    c = cache()
    w = weights()
    c.codes(*w)
    del w
    w = weights()
    c.codes(*w)
    assert c.quantizations == 2


def test_codes_for_a_backward_come_with_their_transposed_copies():
    """transposed=True: codes made now come from quantize_transposed with their copies, which
    transposed() then hands out without a second pass; codes already held are reused as they
    are (their copies made once, on demand); transposed=False never calls it."""
    calls = []

    def fake_quantize_transposed(*ws):
        calls.append(len(ws))
        codes = tuple(v for w in ws for v in fake_quantize(w))
        return codes, fake_transpose(*codes)

    c = FP8WeightCache(fake_quantize, fake_transpose, quantize_transposed=fake_quantize_transposed)
    w = weights()
    a = c.codes(*w, transposed=True)
    assert calls == [3] and c.quantizations == 1 and c.transpositions == 1
    t = c.transposed(a)
    assert c.transpositions == 1 and torch.equal(t[1], w[1].detach())
    assert c.codes(*w, transposed=True) is a and calls == [3]
    with torch.no_grad():
        w[0].mul_(3)
    b = c.codes(*w)  # no backward: codes alone
    assert calls == [3] and c.quantizations == 2 and c.transpositions == 1
    c.codes(*w, transposed=True)  # held: reused, its copies made on demand
    assert calls == [3] and torch.equal(c.transposed(b)[0], w[0].detach())
    assert c.transpositions == 2

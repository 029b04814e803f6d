"""fp8_cache.py — the routed experts' FP8 codes made once per weight update, not at every forward.

FP8 training keeps the weights in bf16 and quantizes them for the layer: the forward's codes and
scales (mok_quantize_weight) and the backward's transposed copies (mok_fp8_transpose_weights; for
a forward that a backward follows, both from one read of the bf16 weights,
mok_quantize_weight_transposed).
Both depend only on the weights, so a step of several micro-batches (gradient accumulation), a
recomputed forward, or an evaluation pass can reuse them. An FP8WeightCache holds one set and
hands it out while the weights it was made from are provably unchanged:

  * the same tensor objects (held by weak reference), at the same address, shape and strides;
  * the same autograd version counter on each (every in-place op on the tensor bumps it: the
    optimizers' updates, load_state_dict's copy_, `with torch.no_grad(): w.mul_(...)`);
  * no optimizer step anywhere since (a global post-step hook counts steps, which also covers
    optimizers that write through `p.data`, whose writes bypass the version counter).

The one write none of these sees is user code writing through `.data` (`w.data.copy_(...)`) or
`torch.Tensor.set_` outside an optimizer: call invalidate() (mok.MoE.invalidate_fp8_weights())
after it. Inference tensors (no version counter) are never cached.

Memory: the cache keeps one copy of the codes (1 byte per weight, plus the scales) and, once a
backward ran, the transposed copies (1 byte more) alive between steps — what each step allocated
and freed before."""
import weakref

_steps = [0]  # optimizer steps anywhere in this process, counted by the hook below
_hooked = [False]


def _count_step(optimizer, args, kwargs):
    _steps[0] += 1


def _hook_optimizers():
    if _hooked[0]:
        return
    import torch.optim.optimizer as opt
    opt.register_optimizer_step_post_hook(_count_step)
    _hooked[0] = True


def _fingerprint(t):
    return (t.data_ptr(), tuple(t.shape), tuple(t.stride()), t.dtype, t.device, t._version)


class FP8WeightCache:
    """One layer's FP8 weights (codes, scales and the backward's transposed copies), made from its
    bf16 routed weights and reused until they change (module docstring). `quantize(w)` and
    `transpose(*codes)` make them (by default mok.functional's quantize_weight_format in
    weight_format, "block128" or "mxfp8", and transpose_weights_fp8);
    `quantize_transposed(w_gate, w_up, w_down)` makes both at once, returning (codes, transposed)
    (by default, for "block128", quantize_weights_fp8_transposed: one read of the bf16 weights
    instead of two passes). Counters: quantizations and transpositions made so far."""

    def __init__(self, quantize=None, transpose=None, weight_format="block128",
                 quantize_transposed=None):
        if weight_format not in ("block128", "mxfp8"):
            raise ValueError(f"weight_format must be 'block128' or 'mxfp8', got {weight_format!r}")
        self.weight_format = weight_format
        if quantize is None or transpose is None:
            from . import functional as _f
            # the library's one-pass form makes its own codes and copies: only with both its own
            if quantize is None and transpose is None and weight_format == "block128":
                quantize_transposed = quantize_transposed or _f.quantize_weights_fp8_transposed
            quantize = quantize or (lambda w: _f.quantize_weight_format(w, weight_format))
            transpose = transpose or _f.transpose_weights_fp8
        self._quantize, self._transpose = quantize, transpose
        self._quantize_transposed = quantize_transposed
        self.quantizations = 0
        self.transpositions = 0
        self.invalidate()
        _hook_optimizers()

    def invalidate(self):
        """Forget the codes: the next forward quantizes again (after writes the cache cannot see)."""
        self._refs = None
        self._key = None
        self._codes = None
        self._t = None

    def _valid_for(self, weights):
        if self._key is None or self._refs is None:
            return False
        if any(r() is not w for r, w in zip(self._refs, weights)):
            return False
        return self._key == (_steps[0],) + tuple(_fingerprint(w) for w in weights)

    def codes(self, w_gate, w_up, w_down, transposed=False):
        """The forward's codes and scales of the three routed weights, flat: (q_gate, s_gate,
        q_up, s_up, q_down, s_down); made now unless the weights are those of the last call.
        transposed: a backward will follow, so codes made now come with their transposed copies
        from the same read of the weights (quantize_transposed, where the format has one)."""
        weights = (w_gate, w_up, w_down)
        if self._valid_for(weights):
            return self._codes
        t = None
        if transposed and self._quantize_transposed is not None:
            codes, t = self._quantize_transposed(*(w.detach() for w in weights))
            self.transpositions += 1
        else:
            codes = tuple(v for w in weights for v in self._quantize(w.detach()))
        self.quantizations += 1
        if any(w.is_inference() for w in weights):
            self.invalidate()  # no version counter to key on
            return codes
        self._refs = tuple(weakref.ref(w) for w in weights)
        self._key = (_steps[0],) + tuple(_fingerprint(w) for w in weights)
        self._codes, self._t = codes, t
        return codes

    def transposed(self, codes):
        """The backward's transposed copies of `codes` (a result of codes()): made once per set of
        codes while the cache holds them, made afresh for codes it no longer holds."""
        if codes is self._codes and self._codes is not None:
            if self._t is None:
                self._t = self._transpose(*codes)
                self.transpositions += 1
            return self._t
        self.transpositions += 1
        return self._transpose(*codes)

"""Differential fuzzing of the whole public API against the NumPy reference.

`calls()` is a hypothesis strategy for one call of the public API — any
entry point, with shapes from empty to a few blocks, float32 / float64 /
float16 and bfloat16 caches and wrong dtypes, every memory layout NumPy can make, masks,
windows, padding, block sizes, GQA ratios, NaN and inf, and arguments that
are wrong on purpose.  `check(call)` runs it through attncore and through
attncore.reference and requires one of:

* both raise, the same documented exception type (ValueError, TypeError,
  MemoryError), or
* both return, with the same shapes and dtypes, the same non-finite
  positions (NaN reaches the rows that see it; ±inf stays ±inf), and finite
  values within a tolerance scaled by the data's magnitude;

and in either case that attncore left its inputs as they were.
tests/test_fuzz.py runs it in the suite; tools/fuzz.py runs it for minutes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from hypothesis import strategies as st

import attncore
from attncore import reference

DOCUMENTED = (ValueError, TypeError, MemoryError)
LAYOUTS = ("c", "fortran", "strided", "reversed", "byteswapped", "unaligned", "readonly",
           "broadcast")
ENTRY_POINTS = ("attention", "plain_attention", "scores", "softmax", "merge",
                "attention_backward", "linear_attention", "multi_head_attention", "kvcache")


@dataclass
class Call:
    entry: str
    args: tuple
    kwargs: dict = field(default_factory=dict)
    scale_hint: float = 1.0  # the largest |score| and |v| the data can make
    lists: tuple = ()  # which args go in as nested Python lists

    def __repr__(self):
        def show(a):
            if isinstance(a, np.ndarray):
                f = a.flags
                return (f"array(shape={a.shape}, dtype={a.dtype}, strides={a.strides}, "
                        f"aligned={f.aligned}, writeable={f.writeable}, "
                        f"nonfinite={int(a.size - np.isfinite(a).sum()) if a.dtype.kind == 'f' else 0})")
            return repr(a)
        args = ", ".join(show(a) for a in self.args)
        kw = ", ".join(f"{k}={show(v)}" for k, v in self.kwargs.items())
        return f"{self.entry}({args}{', ' if kw else ''}{kw})"


def relayout(a: np.ndarray, how: str):
    """The values in another memory layout (both sides get the same object,
    so "broadcast" may repeat a row).  Nested lists come in at `as_lists`."""
    if a.ndim == 0 or a.size == 0:
        return a
    if how == "broadcast" and a.ndim >= 2:  # stride 0: one row seen n times, read-only
        return np.broadcast_to(a[..., :1, :], a.shape)
    if how == "fortran":
        return np.asfortranarray(a)
    if how == "strided":
        big = np.zeros(a.shape[:-1] + (2 * a.shape[-1],), a.dtype)
        big[..., ::2] = a
        return big[..., ::2]
    if how == "reversed":
        return a[..., ::-1].copy()[..., ::-1]
    if how == "byteswapped":
        return a.astype(a.dtype.newbyteorder())
    if how == "unaligned":
        buf = np.zeros(a.nbytes + 1, np.uint8)[1:]
        out = buf.view(a.dtype).reshape(a.shape)
        out[...] = a
        return out
    if how == "readonly":
        out = a.copy()
        out.flags.writeable = False
        return out
    return a


@st.composite
def arrays(draw, shape, dtype, spread=1.0, special=True):
    """Standard normal values × spread, maybe with NaN / ±inf, in any layout."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    bf16 = isinstance(dtype, str) and dtype == "bfloat16"  # a bfloat16 cache: uint16 bits
    a = (rng.standard_normal(shape) * spread).astype(np.float32 if bf16 else dtype)
    if special and a.size and a.dtype.kind == "f" and draw(st.integers(0, 3)) == 0:
        for _ in range(draw(st.integers(1, 3))):
            a.flat[draw(st.integers(0, a.size - 1))] = draw(
                st.sampled_from([np.nan, np.inf, -np.inf]))
    if bf16:
        a = attncore.to_bfloat16(a)
    return relayout(a, draw(st.sampled_from(LAYOUTS)))


def sizes(lo=0, hi=70):
    # around the vector widths and the tile sizes the tests use
    return st.one_of(st.integers(lo, 9), st.sampled_from([15, 16, 17, 31, 32, 33, 63, 64, 65]),
                     st.integers(lo, hi))


@st.composite
def heads(draw):
    """(lead, H, Hkv): lead batch dims (maybe empty), GQA ratios, sometimes wrong."""
    lead = tuple(draw(st.lists(st.integers(0, 3), max_size=2)))
    hkv = draw(st.integers(0 if draw(st.integers(0, 20)) == 0 else 1, 3))
    g = draw(st.integers(1, 3))
    h = hkv * g if draw(st.integers(0, 15)) else draw(st.integers(0, 5))
    return lead, h, hkv


def float_dtypes(half=False):
    options = [np.float32, np.float64]
    return st.sampled_from(options + ([np.float16] if half else []))


@st.composite
def bad_dtype(draw, dtype):
    """Nearly always the given dtype; now and then one the API must refuse."""
    if draw(st.integers(0, 30)) == 0:
        return draw(st.sampled_from([np.int32, np.complex64, np.float16, np.float32, np.float64]))
    return dtype


@st.composite
def visibility(draw, lead, h, n, m):
    kw = {}
    if draw(st.booleans()):
        kw["causal"] = True
    if draw(st.integers(0, 3)) == 0:  # a window wants causal: now and then it is missing
        kw["window"] = draw(st.integers(-1 if draw(st.integers(0, 9)) == 0 else 1, max(n, m) + 3))
        kw["causal"] = draw(st.integers(0, 9)) > 0
    if draw(st.integers(0, 3)) == 0:
        shape = draw(st.sampled_from([(n, m), (1, m), (h, n, m), lead + (h, n, m)] * 3 + [(n, m + 1)]))
        rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
        mk = rng.random(shape) < draw(st.sampled_from([0.0, 0.5, 0.9, 1.0]))
        kw["mask"] = mk if draw(st.integers(0, 10)) else mk.astype(np.int8)
    if draw(st.integers(0, 3)) == 0:
        b = math.prod(lead)
        kw["key_lengths"] = np.array(
            draw(st.lists(st.integers(-1, m + 2), min_size=b, max_size=b + (draw(st.integers(0, 9)) == 0))),
            dtype=np.int64).reshape(-1)
        if kw["key_lengths"].size == b:
            kw["key_lengths"] = kw["key_lengths"].reshape(lead)
    if draw(st.integers(0, 4)) == 0:
        kw["scale"] = draw(st.sampled_from([None, 0.5, 0.125, 2.0] * 2 + [0.0, -1.0, np.inf, np.nan]))
    return kw


@st.composite
def qkv(draw, half=True, special=True):
    lead, h, hkv = draw(heads())
    n, m, dk, dv = draw(sizes()), draw(sizes()), draw(sizes(0, 40)), draw(sizes(0, 40))
    dtype = draw(float_dtypes())
    kvdtype = dtype
    if half and dtype == np.float32 and draw(st.integers(0, 5)) == 0:  # a 16-bit cache
        kvdtype = draw(st.sampled_from([np.float16, "bfloat16"]))
    spread = draw(st.sampled_from([1.0, 1.0, 3.0]))
    q = draw(arrays(lead + (h, n, dk), draw(bad_dtype(dtype)), spread, special))
    k = draw(arrays(lead + (hkv, m, dk), kvdtype, spread, special))
    v = draw(arrays(lead + (hkv, m, dv), kvdtype, draw(st.sampled_from([1.0, 100.0])), special))
    if draw(st.integers(0, 25)) == 0:  # a shape that does not fit
        v = v[..., : max(m - 1, 0), :]
    hint = spread * spread * max(dk, 1) ** 0.5 * 6 + 1
    return (q, k, v), lead, h, n, m, hint


@st.composite
def attention_calls(draw):
    (q, k, v), lead, h, n, m, hint = draw(qkv())
    kw = draw(visibility(lead, h, n, m))
    kw["method"] = draw(st.sampled_from(["flash"] * 10 + ["naive"] * 8 + ["bogus"]))
    if draw(st.booleans()):
        kw["block_q"] = draw(st.one_of(st.none(), st.integers(1, 80), st.integers(-1, 80)))
        kw["block_k"] = draw(st.one_of(st.none(), st.integers(1, 80), st.integers(-1, 80)))
    kw["return_lse"] = draw(st.booleans())
    if kw["method"] == "naive" and draw(st.booleans()):
        kw["return_weights"] = True
    return Call("attention", (q, k, v), kw, hint)


@st.composite
def plain_calls(draw):
    (q, k, v), lead, h, n, m, hint = draw(qkv())
    kw = draw(visibility(lead, h, n, m))
    kw["return_lse"] = draw(st.booleans())
    return Call("plain_attention", (q, k, v), kw, hint)


@st.composite
def scores_calls(draw):
    (q, k, _), lead, h, n, m, hint = draw(qkv())
    return Call("scores", (q, k), draw(visibility(lead, h, n, m)), hint)


@st.composite
def softmax_calls(draw):
    shape = tuple(draw(st.lists(sizes(0, 40), min_size=0, max_size=3)))
    x = draw(arrays(shape, draw(bad_dtype(draw(float_dtypes()))), draw(st.sampled_from([1.0, 1e3]))))
    axis = draw(st.integers(-len(shape) - 1, len(shape)))
    return Call("softmax", (x,), {"axis": axis}, 1.0)


@st.composite
def merge_calls(draw):
    lead = tuple(draw(st.lists(st.integers(0, 3), max_size=2)))
    n, dv, parts = draw(sizes(0, 40)), draw(sizes(0, 40)), draw(st.integers(2, 4))
    dtype = draw(float_dtypes())
    args = []
    for _ in range(parts):
        o = draw(arrays(lead + (n, dv), dtype))
        lse = draw(arrays(lead + (n,), dtype, 5.0))
        if lse.size and draw(st.booleans()):  # rows that saw nothing
            lse = np.array(lse)
            lse.flat[draw(st.integers(0, lse.size - 1))] = -np.inf
        args += [o, lse]
    if draw(st.integers(0, 20)) == 0:
        args[-1] = args[-1][..., :-1]
    return Call("merge", tuple(args), {}, 1.0)


@st.composite
def backward_calls(draw):
    (q, k, v), lead, h, n, m, hint = draw(qkv(half=False, special=False))
    kw = draw(visibility(lead, h, n, m))
    kw.pop("scale", None)
    try:
        out, lse = reference.attention(q, k, v, return_lse=True, **kw)
    except DOCUMENTED:
        out, lse = np.zeros(q.shape[:-1] + v.shape[-1:]), np.zeros(q.shape[:-1])
    dtype = np.asarray(q).dtype.newbyteorder("=")
    dtype = dtype if dtype in (np.float32, np.float64) else np.float64
    dout = draw(arrays(out.shape, dtype, special=False))
    kw["method"] = draw(st.sampled_from(["flash", "naive"]))
    # gradients cancel (dP − D, D = rowsum(dO∘O)): their error scales with |dO|·|v|,
    # not with their own size, which may be exactly 0
    vmax = float(np.abs(np.asarray(v, np.float64)).max(initial=1.0))
    return Call("attention_backward", (q, k, v, out.astype(dtype), lse.astype(dtype), dout),
                kw, hint * 4 * vmax)


@st.composite
def linear_calls(draw):
    (q, k, v), *_ = draw(qkv(half=False))
    kw = {"causal": draw(st.booleans())}
    if draw(st.integers(0, 20)) == 0:
        kw["feature_map"] = "relu"
    return Call("linear_attention", (q, k, v), kw, 50.0)


@st.composite
def mha_calls(draw):
    lead = tuple(draw(st.lists(st.integers(0, 2), max_size=1)))
    n, d_head = draw(sizes(0, 40)), draw(st.integers(1, 8))
    kv_heads = draw(st.integers(1, 3))
    heads_ = kv_heads * draw(st.integers(1, 3))
    d_model = draw(st.integers(1, 24))
    dtype = draw(float_dtypes())
    x = draw(arrays(lead + (n, d_model), dtype, special=False))
    shapes = [(d_model, heads_ * d_head), (d_model, kv_heads * d_head),
              (d_model, kv_heads * d_head), (heads_ * d_head, d_model)]
    if draw(st.integers(0, 20)) == 0:
        shapes[draw(st.integers(0, 3))] = (d_model + 1, 2)
    ws = [draw(arrays(s, dtype, 0.3, special=False)) for s in shapes]
    kw = {"heads": heads_, "kv_heads": kv_heads, "causal": draw(st.booleans())}
    if draw(st.integers(0, 3)) == 0:
        kw["window"] = draw(st.integers(1, n + 2))
        kw["causal"] = True
    return Call("multi_head_attention", (x, *ws), kw, 30.0)


@st.composite
def kvcache_calls(draw):
    kv_heads, d = draw(st.integers(1, 3)), draw(st.integers(1, 40))
    dtype = draw(float_dtypes())
    g = draw(st.integers(1, 3))
    chunks = [draw(arrays((kv_heads, draw(st.integers(0, 40)), d), dtype, special=False))
              for _ in range(draw(st.integers(1, 4)))]
    q = draw(arrays((kv_heads * g, draw(st.integers(1, 4)), d), dtype, special=False))
    return Call("kvcache", (q, *chunks), {}, 6 * d ** 0.5 + 1)


STRATEGIES = {
    "attention": attention_calls(), "plain_attention": plain_calls(), "scores": scores_calls(),
    "softmax": softmax_calls(), "merge": merge_calls(), "attention_backward": backward_calls(),
    "linear_attention": linear_calls(), "multi_head_attention": mha_calls(),
    "kvcache": kvcache_calls(),
}


@st.composite
def as_lists(draw, strategy):
    """Now and then a small float64 argument goes in as nested lists."""
    call = draw(strategy)
    small = [i for i, a in enumerate(call.args) if isinstance(a, np.ndarray)
             and a.dtype == np.float64 and 0 < a.size <= 64]
    if small and call.entry != "kvcache" and draw(st.integers(0, 5)) == 0:
        call.lists = (draw(st.sampled_from(small)),)
    return call


def calls(entry: str | None = None):
    chosen = [STRATEGIES[entry]] if entry else list(STRATEGIES.values())
    return st.one_of(*(as_lists(s) for s in chosen))


def _run(module, call: Call):
    if call.lists:
        args = tuple(a.tolist() if i in call.lists else a for i, a in enumerate(call.args))
        call = Call(call.entry, args, call.kwargs, call.scale_hint)
    if call.entry == "kvcache":
        q, *chunks = call.args
        if module is attncore:
            cache = attncore.KVCache(chunks[0].shape[0], chunks[0].shape[-1],
                                     dtype=np.asarray(q).dtype.newbyteorder("="), capacity=8)
            for c in chunks:
                cache.append(c, c[..., ::-1])
            return cache.attend(q)
        keys = np.concatenate(chunks, axis=-2)
        return reference.attention(q, keys, keys[..., ::-1], causal=True)
    return getattr(module, call.entry)(*call.args, **call.kwargs)


def _outputs(r):
    return list(r) if isinstance(r, tuple) else [r]


def check(call: Call) -> None:
    before = [np.array(a, copy=True) if isinstance(a, np.ndarray) else a for a in call.args]
    try:
        want = _run(reference, call)
        want_error = None
    except DOCUMENTED as e:
        want, want_error = None, e
    try:
        got = _run(attncore, call)
        got_error = None
    except DOCUMENTED as e:
        got, got_error = None, e
    for a, b in zip(before, call.args):
        if isinstance(a, np.ndarray):
            assert np.array_equal(a, b, equal_nan=True), f"attncore changed an input of {call!r}"
    if want_error or got_error:
        assert type(got_error) is type(want_error), (
            f"{call!r}: attncore raised {got_error!r}, the reference {want_error!r}")
        return
    got, want = _outputs(got), _outputs(want)
    assert len(got) == len(want)
    if (call.entry == "attention" and want and getattr(call.args[0], "dtype", None) == np.float16
            and call.kwargs.get("out_dtype") is None):
        # float16 queries: attncore rounds the output to their type; the reference keeps
        # float32 (tests/test_float16_cache.py::test_16_bit_dtype_rules)
        want[0] = want[0].astype(np.float16)
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape, (call, i, g.shape, w.shape)
        assert g.dtype == w.dtype, (call, i, g.dtype, w.dtype)
        g64, w64 = g.astype(np.float64), w.astype(np.float64)
        fin = np.isfinite(w64)
        assert np.array_equal(np.isfinite(g64), fin), f"{call!r}: output {i}: non-finite positions differ"
        infs = ~fin & ~np.isnan(w64) & ~np.isnan(g64)
        assert np.array_equal(g64[infs], w64[infs]), f"{call!r}: output {i}: infinities differ"
        if fin.any():
            big = max(float(np.abs(w64[fin]).max()), 1.0)
            m = max(int(g.shape[-1]) if g.ndim else 1, 1)
            atol = 16 * float(np.finfo(g.dtype).eps) * (math.sqrt(m) + 8) * call.scale_hint * big
            err = float(np.abs(g64[fin] - w64[fin]).max())
            assert err <= atol, f"{call!r}: output {i}: max error {err:.3g} > {atol:.3g}"

"""Input checks shared by the C-backed API and the NumPy reference.

Everything checkable is checked before any kernel runs and before the GIL is
released; every message names the argument, what it got and what was
expected.  Each entry point has one function here (attention_args,
scores_args, ...) that attncore._api and attncore.reference both call, so
the two raise the same errors for the same input.  The shape contract and
the visibility rules they use are in attncore._problem.
"""

from __future__ import annotations

import math

import numpy as np

from attncore._problem import (  # noqa: F401 (the names the API and the reference use)
    sink_gradient, sum_to_shape,
    FLOAT_DTYPES, HALF, Problem, Visibility, as_float_array, block_size, cache_problem,
    common_dtype, dims, fast_layout, kv16, kv_values, positive_int, positive_scale, problem,
    visibility)
from attncore._runtime import memory_limit

METHODS = ("flash", "naive")


def method_name(method) -> str:
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    return method


def merge_parts(arrays) -> tuple[list, list, tuple, np.dtype]:
    """Check (o, lse) pairs for merge: o (..., n, dv), lse (..., n), one dtype."""
    if len(arrays) < 2 or len(arrays) % 2:
        raise ValueError("merge takes (o, lse) pairs: o_a, lse_a, o_b, lse_b, ...; got "
                         f"{len(arrays)} arrays")
    outs = [as_float_array(a, f"o_{i}") for i, a in enumerate(arrays[0::2])]
    lses = [as_float_array(a, f"lse_{i}") for i, a in enumerate(arrays[1::2])]
    common_dtype(**{f"o_{i}": a for i, a in enumerate(outs)},
                 **{f"lse_{i}": a for i, a in enumerate(lses)})
    shape = outs[0].shape
    if len(shape) < 1:
        raise ValueError("o_0 must have shape (..., n, d_v), got a 0-d array")
    for i, (o, lse) in enumerate(zip(outs, lses)):
        if o.shape != shape:
            raise ValueError(f"o_{i} has shape {o.shape} but o_0 has {shape}")
        if lse.shape != shape[:-1]:
            raise ValueError(f"lse_{i} must have shape {shape[:-1]} (o's without d_v), got "
                             f"{lse.shape}")
    return outs, lses, shape, outs[0].dtype.newbyteorder("=")


FEATURE_MAPS = ("elu1",)


def no_half(p: Problem, what: str) -> None:
    """Refuse a 16-bit KV cache where only float32/float64 are implemented."""
    if p.kv16:
        raise TypeError(f"{what} takes float32 or float64 arrays, got {p.kv16} k and v")


def linear_problem(q, k, v, causal, feature_map):
    """The checks of linear_attention (core and reference alike)."""
    if feature_map not in FEATURE_MAPS:
        raise ValueError(f"feature_map must be one of {FEATURE_MAPS}, got {feature_map!r}")
    p = problem(q, k, v, scale=1.0)
    no_half(p, "linear_attention")
    return p, visibility(p, causal)


def out_dtype(dt, p: Problem) -> bool:
    """attention's out_dtype: None (the output in q's own type) or float32,
    which 16-bit queries may ask for instead of their type.  Returns whether
    the output stays float32 (wide)."""
    if dt is None:
        return False
    try:
        want = np.dtype(dt)
    except TypeError:
        raise TypeError(f"out_dtype must be None or a dtype, got {dt!r}") from None
    if want == p.dtype and p.q_half is not None:
        return True
    if want == p.dtype or (p.q_half is not None and want == p.q_half):
        return False
    raise ValueError(f"out_dtype must be None, q's dtype, or float32 for 16-bit queries; got "
                     f"{want} for {p.q_half or p.dtype} queries")


def widen_half(kind: str, **arrays) -> tuple[dict, dict]:
    """attention_backward's 16-bit inputs widened to float32, exactly: q, k, v
    of one kind (float16 or bfloat16), out and dout of it or float32.
    Returns (the float32 arrays, the dtype each came in)."""
    wide, dtypes = {}, {}
    for name, x in arrays.items():
        a = np.asarray(x)
        if kv16(a.dtype) != kind and not (name in ("out", "dout") and a.dtype == np.float32):
            also = " or float32" if name in ("out", "dout") else ""
            raise TypeError(f"{name} has dtype {a.dtype}; with {kind} q it must be {kind}{also}")
        wide[name] = kv_values(a, np.dtype(np.float32)) if kv16(a.dtype) else a
        dtypes[name] = a.dtype
    return wide, dtypes


def to_half(x: np.ndarray, like: np.dtype) -> np.ndarray:
    """float32 x rounded to nearest (even) in the 16-bit type `like`: float16,
    bfloat16 bits (uint16) or ml_dtypes.bfloat16."""
    if kv16(like) == "float16":
        from attncore._problem import to_float16

        return to_float16(x).astype(like, copy=False)
    from attncore._bfloat16 import to_bfloat16

    return to_bfloat16(x).view(like)


def token_scales(s, name: str, shape: tuple) -> np.ndarray:
    """An int8 cache's scales as the core reads them: float32 (B, Hkv, m), the
    token axis contiguous.  Their values are not looked at (a pass over them
    would cost a decode step several per cent): KVCache makes them, finite
    and not negative."""
    a = np.asarray(s)
    if a.dtype != np.float32:
        raise TypeError(f"{name} must be float32, got dtype {a.dtype}")
    if a.size != math.prod(shape):
        raise ValueError(f"{name} must hold one scale a token and kv head, {shape}, got {a.shape}")
    return fast_layout(a.reshape(shape))


def check_table(elements: int, itemsize: int, what: str) -> None:
    """MemoryError, before anything is allocated, for a table that cannot fit."""
    nbytes = elements * itemsize
    limit = memory_limit()
    if nbytes > limit:
        raise MemoryError(
            f"{what} needs {nbytes / 2**30:.2f} GiB but only {limit / 2**30:.2f} GiB is "
            "available (ATTNCORE_MAX_TABLE_BYTES overrides); method='flash' streams the "
            "keys in blocks and needs O(n·d) memory"
        )


# ---- one check per entry point, called alike by attncore._api and attncore.reference ----


def attention_args(q, k, v, *, causal, scale, method, block_q, block_k, return_weights, mask,
                   key_lengths, window, split_kv=None, block_counts=None, q_offset=None,
                   k_offset=None, bias=None, alibi_slopes=None, softcap=None, sinks=None,
                   int8=False):
    """The checks of attention: (method, problem, visibility, block_q, block_k),
    block sizes 0 for the core's default.  split_kv and block_counts are
    attncore.attention's private keywords (the reference has none); int8 says
    k and v are an int8 cache's values (KVCache(dtype="int8"))."""
    method = method_name(method)
    if split_kv not in (None, -1, 0, 1) or isinstance(split_kv, bool):
        raise ValueError(f"split_kv must be -1, 0 or 1, got {split_kv!r}")
    if block_counts is not None and not (isinstance(block_counts, np.ndarray)
                                         and block_counts.dtype == np.int64
                                         and block_counts.shape == (2,)):
        raise ValueError("block_counts must be an int64 array of shape (2,)")
    if int8 and (method != "flash" or block_counts is not None):
        raise ValueError(f"an int8 cache is read by method='flash' only, got method={method!r}")
    p = problem(q, k, v, scale=scale, int8=int8)
    vis = visibility(p, causal, window, mask, key_lengths, q_offset, k_offset,
                     bias, alibi_slopes, softcap, sinks)
    bq, bk = block_size(block_q, "block_q"), block_size(block_k, "block_k")
    if return_weights and method != "naive":
        raise ValueError(f"return_weights=True needs method='naive', got method={method!r}")
    return method, p, vis, bq, bk


def plain_args(q, k, v, *, causal, scale, mask, key_lengths, window, q_offset=None,
               k_offset=None, bias=None, alibi_slopes=None, softcap=None, sinks=None):
    """The checks of plain_attention: float32 or float64 throughout."""
    p = problem(q, k, v, scale=scale)
    no_half(p, "plain_attention")
    return p, visibility(p, causal, window, mask, key_lengths, q_offset, k_offset,
                         bias, alibi_slopes, softcap, sinks)


def scores_args(q, k, *, scale, causal, mask, key_lengths, window, q_offset=None,
                k_offset=None, bias=None, alibi_slopes=None, softcap=None, sinks=None):
    """The checks of scores: (problem without v, visibility)."""
    p = problem(q, k, scale=scale)
    return p, visibility(p, causal, window, mask, key_lengths, q_offset, k_offset,
                         bias, alibi_slopes, softcap, sinks)


def softmax_args(x, axis) -> tuple[np.ndarray, int]:
    """The checks of softmax: (x as a float array, the axis as a non-negative int)."""
    a = as_float_array(x, "x")
    if a.ndim == 0:
        raise ValueError("x must have at least one dimension, got a 0-d array")
    if isinstance(axis, (bool, np.bool_)) or not isinstance(axis, (int, np.integer)):
        raise ValueError(f"axis must be an integer, got {axis!r}")
    if not -a.ndim <= axis < a.ndim:
        raise ValueError(f"axis {axis} is out of range for x of shape {a.shape}")
    return a, int(axis) % a.ndim


def backward_args(q, k, v, out, lse, dout, *, causal, scale, window, mask, key_lengths, method,
                  q_offset=None, k_offset=None, bias=None, alibi_slopes=None, softcap=None,
                  sinks=None):
    """The checks of attention_backward: (method, problem, visibility, arrays)
    with arrays["out"], ["lse"], ["dout"] as (B, H, n, ·) views in q's dtype."""
    method = method_name(method)
    p = problem(q, k, v, scale=scale)
    no_half(p, "attention_backward")
    vis = visibility(p, causal, window, mask, key_lengths, q_offset, k_offset,
                     bias, alibi_slopes, softcap, sinks)
    B, H, Hkv, n, m, dk, dv = p.shape
    want = {"out": p.lead + (n, dv), "lse": p.lead + (n,), "dout": p.lead + (n, dv)}
    arrays = {}
    for name, arr in (("out", out), ("lse", lse), ("dout", dout)):
        a = as_float_array(arr, name)
        if a.dtype.newbyteorder("=") != p.dtype:
            raise TypeError(f"{name} has dtype {a.dtype} but q has {p.dtype}")
        if a.shape != want[name]:
            raise ValueError(f"{name} must have shape {want[name]}, got {a.shape}")
        arrays[name] = fast_layout(np.ascontiguousarray(a, dtype=p.dtype)).reshape(
            (B, H, n) + a.shape[len(p.lead) + 1:])
    return method, p, vis, arrays


def mha_args(x, w_q, w_k, w_v, w_o, *, heads, kv_heads) -> tuple[
        np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, int, int, int]:
    """The checks of multi_head_attention: (x, w_q, w_k, w_v, w_o, heads,
    kv_heads, d_head), the arrays of one float dtype and matching shapes."""
    heads = positive_int(heads, "heads")
    kv_heads = heads if kv_heads is None else positive_int(kv_heads, "kv_heads")
    arrays = {"x": as_float_array(x, "x"), "w_q": as_float_array(w_q, "w_q"),
              "w_k": as_float_array(w_k, "w_k"), "w_v": as_float_array(w_v, "w_v"),
              "w_o": as_float_array(w_o, "w_o")}
    common_dtype(**arrays)
    x, w_q, w_k, w_v, w_o = arrays.values()
    if x.ndim < 2:
        raise ValueError(f"x must have shape (..., n, d_model), got {x.shape}")
    d_model = x.shape[-1]
    for name, w in (("w_q", w_q), ("w_k", w_k), ("w_v", w_v), ("w_o", w_o)):
        if w.ndim != 2:
            raise ValueError(f"{name} must be a 2-D matrix, got shape {w.shape}")
    if heads % kv_heads:
        raise ValueError(f"heads ({heads}) must be a multiple of kv_heads ({kv_heads})")
    if w_q.shape[0] != d_model or w_q.shape[1] % heads:
        raise ValueError(f"w_q must have shape ({d_model}, heads·d_head) with heads={heads}, "
                         f"got {w_q.shape}")
    d_head = w_q.shape[1] // heads
    for name, w in (("w_k", w_k), ("w_v", w_v)):
        if w.shape != (d_model, kv_heads * d_head):
            raise ValueError(f"{name} must have shape ({d_model}, {kv_heads * d_head}) "
                             f"(kv_heads·d_head), got {w.shape}")
    if w_o.shape[0] != heads * d_head:
        raise ValueError(f"w_o must have {heads * d_head} rows (heads·d_head), got {w_o.shape}")
    return x, w_q, w_k, w_v, w_o, heads, kv_heads, d_head

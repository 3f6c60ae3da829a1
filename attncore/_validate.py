"""Input checks shared by the C-backed API and the NumPy reference.

Everything checkable is checked here, before any kernel runs and before the
GIL is released; every message names the argument, what it got and what was
expected.  Each entry point has one function at the end of this module
(attention_args, scores_args, ...) that attncore._api and attncore.reference
both call, so the two raise the same errors for the same input.  The result
is a `Problem`: 4-D views (batch, head, row, column)
in one native float dtype with the last axis contiguous, ready for the core.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass

import numpy as np

from attncore._runtime import memory_limit

FLOAT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
HALF = np.dtype(np.float16)
METHODS = ("flash", "naive")
_INT64_MAX = 2**63 - 1


def as_float_array(x, name: str, half: bool = False) -> np.ndarray:
    """np.asarray(x), refusing anything but float32/float64 (and float16 when
    `half`) with a TypeError."""
    a = np.asarray(x)
    dt = a.dtype.newbyteorder("=")
    if dt not in FLOAT_DTYPES and not (half and dt == HALF):
        allowed = "float32, float64 or float16" if half else "float32 or float64"
        raise TypeError(f"{name} must be {allowed}, got dtype {a.dtype}")
    return a


def common_dtype(**arrays: np.ndarray) -> np.dtype:
    kinds = {a.dtype.newbyteorder("=") for a in arrays.values()}
    if len(kinds) > 1:
        got = ", ".join(f"{k} {a.dtype}" for k, a in arrays.items())
        raise TypeError(f"{', '.join(arrays)} must share one dtype, got {got}")
    return kinds.pop()


def fast_layout(a: np.ndarray) -> np.ndarray:
    """The layout the C core reads: native byte order, aligned, last axis
    contiguous, strides whole elements.  Anything else is copied once."""
    if not a.dtype.isnative:
        return np.ascontiguousarray(a.astype(a.dtype.newbyteorder("=")))
    if (
        not a.flags.aligned
        or (a.ndim and a.strides[-1] != a.itemsize)
        or any(s % a.itemsize for s in a.strides)
    ):
        # a fresh array (ascontiguousarray would hand back an unaligned
        # C-contiguous input as it is)
        return np.array(a, order="C")
    return a


def positive_scale(scale, dk: int) -> float:
    if scale is None:
        if dk == 0:
            raise ValueError("scale=None means 1/sqrt(d_k), but d_k is 0: pass scale explicitly")
        return 1.0 / math.sqrt(dk)
    if isinstance(scale, (bool, np.bool_)):
        raise ValueError(f"scale must be a positive finite number, got {scale!r}")
    try:
        s = float(scale)
    except (TypeError, ValueError):
        raise ValueError(f"scale must be a positive finite number, got {scale!r}") from None
    if not (math.isfinite(s) and s > 0):
        raise ValueError(f"scale must be a positive finite number, got {scale!r}")
    return s


def positive_int(x, name: str, limit: int | None = None) -> int:
    """x as a Python int >= 1 (and <= limit), else a ValueError naming it."""
    bound = f" (at most {limit})" if limit else ""
    if isinstance(x, (bool, np.bool_)):
        raise ValueError(f"{name} must be a positive integer{bound}, got {x!r}")
    try:
        i = operator.index(x)
    except TypeError:
        raise ValueError(f"{name} must be a positive integer{bound}, got {x!r}") from None
    if i < 1 or (limit and i > limit):
        raise ValueError(f"{name} must be a positive integer{bound}, got {i}")
    return i


def block_size(b, name: str) -> int:
    """None (the core's tuned default, passed as 0) or a positive integer."""
    return 0 if b is None else positive_int(b, name, 2**31)


def method_name(method) -> str:
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    return method


@dataclass
class Problem:
    """Validated attention inputs as (B, H, n, d) views, plus the shape to give back."""

    q: np.ndarray
    k: np.ndarray
    v: np.ndarray | None
    lead: tuple  # leading shape of the outputs: (..., H) or () for 2-D inputs
    batch: tuple  # the batch dims `...` alone
    scale: float

    @property
    def dtype(self) -> np.dtype:
        """The dtype of the arithmetic and the outputs: the queries'."""
        return self.q.dtype

    @property
    def kv_half(self) -> bool:
        return self.k.dtype == HALF

    @property
    def shape(self):  # B, H, Hkv, n, m, dk, dv
        B, H, n, dk = self.q.shape
        Hkv, m = self.k.shape[1:3]
        dv = self.v.shape[3] if self.v is not None else 0
        return B, H, Hkv, n, m, dk, dv


def _heads(a: np.ndarray, name: str) -> tuple:
    """Split a's shape into (batch dims, heads, rows, cols); 2-D is one head."""
    if a.ndim < 2:
        raise ValueError(
            f"{name} must have shape (..., heads, rows, d) or (rows, d), got shape {a.shape}"
        )
    if a.ndim == 2:
        return (), 1, a.shape[0], a.shape[1]
    return a.shape[:-3], a.shape[-3], a.shape[-2], a.shape[-1]


def problem(q, k, v=None, *, scale=None) -> Problem:
    """Check q, k (and v) against the shape contract and bring them to 4-D."""
    arrays = {"q": as_float_array(q, "q"), "k": as_float_array(k, "k", half=True)}
    if v is not None:
        arrays["v"] = as_float_array(v, "v", half=True)
    kv = {name: a for name, a in arrays.items() if name != "q"}
    if any(a.dtype.newbyteorder("=") == HALF for a in kv.values()):
        # a float16 KV cache: K and V both float16, queries float32
        if arrays["q"].dtype.newbyteorder("=") != np.float32 or len(
                {a.dtype.newbyteorder("=") for a in kv.values()}) > 1:
            got = ", ".join(f"{n} {a.dtype}" for n, a in arrays.items())
            raise TypeError(f"float16 keys and values need float32 queries and must come "
                            f"together; got {got}")
    else:
        common_dtype(**arrays)
    ndims = {name: a.ndim for name, a in arrays.items()}
    if len(set(ndims.values())) > 1:
        got = ", ".join(f"{n} has {d}" for n, d in ndims.items())
        raise ValueError(f"{', '.join(arrays)} must have the same number of dimensions; {got}")
    qa, ka = arrays["q"], arrays["k"]
    qlead, H, n, dk = _heads(qa, "q")
    klead, Hkv, m, dk2 = _heads(ka, "k")
    if klead != qlead:
        raise ValueError(f"k's batch dims {klead} do not match q's {qlead}")
    if dk2 != dk:
        raise ValueError(f"k's last axis (d_k) is {dk2} but q's is {dk}; they must match")
    if Hkv == 0 and H != 0:
        raise ValueError(f"k has 0 heads but q has {H}")
    if Hkv and H % Hkv:
        raise ValueError(
            f"q's heads ({H}) must be a multiple of k's heads ({Hkv}) for grouped-query attention"
        )
    dv = 0
    if v is not None:
        va = arrays["v"]
        vlead, Hv, m2, dv = _heads(va, "v")
        if vlead != qlead:
            raise ValueError(f"v's batch dims {vlead} do not match q's {qlead}")
        if Hv != Hkv:
            raise ValueError(f"v has {Hv} heads but k has {Hkv}; they must match")
        if m2 != m:
            raise ValueError(f"v has {m2} rows (keys) but k has {m}; they must match")
    B = math.prod(qlead)
    for count in (B * H * n * max(m, dk, dv, 1), B * Hkv * m * max(dk, dv, 1)):
        if count > _INT64_MAX:
            raise ValueError(f"problem too large: {count} elements do not fit in 64 bits")

    def four_d(a, h, rows, cols):
        # reshape is a view when it can be; the second look only copies when
        # it gave a size-1 last axis an odd stride
        return fast_layout(fast_layout(a).reshape(B, h, rows, cols))

    return Problem(
        q=four_d(qa, H, n, dk),
        k=four_d(ka, Hkv, m, dk),
        v=four_d(arrays["v"], Hkv, m, dv) if v is not None else None,
        lead=qlead + ((H,) if qa.ndim > 2 else ()),
        batch=qlead,
        scale=positive_scale(scale, dk),
    )


@dataclass
class Visibility:
    """Which keys each query row sees, in the core's terms."""

    causal: bool
    window: int  # 0: none
    key_lengths: np.ndarray | None  # (B,) int64
    mask: np.ndarray | None  # (B, H, n, m) uint8 view, 0 strides where it broadcasts


def visibility(p: Problem, causal, window=None, mask=None, key_lengths=None) -> Visibility:
    """Check causal / window / mask / key_lengths against the problem."""
    B, H, Hkv, n, m, *_ = p.shape
    causal = bool(causal)
    w = 0
    if window is not None:
        w = min(positive_int(window, "window"), 2**62)
        if not causal:
            raise ValueError("window needs causal=True: it is the band of w keys ending at "
                             "the causal diagonal")
    kl = None
    if key_lengths is not None:
        kl = np.asarray(key_lengths)
        if kl.dtype.kind not in "iu":
            raise TypeError(f"key_lengths must be integers, got dtype {kl.dtype}")
        try:
            kl = np.broadcast_to(kl, p.batch)
        except ValueError:
            raise ValueError(f"key_lengths must have the batch shape {p.batch}, got shape "
                             f"{kl.shape}") from None
        if kl.size and (kl.min() < 0 or kl.max() > m):
            raise ValueError(f"key_lengths must lie in [0, m={m}], got values from {kl.min()} "
                             f"to {kl.max()}")
        kl = fast_layout(np.ascontiguousarray(kl, dtype=np.int64)).reshape(B)
    mk = None
    if mask is not None:
        mk = np.asarray(mask)
        if mk.dtype != np.bool_:
            raise TypeError(f"mask must be a boolean array (True = may attend), got dtype {mk.dtype}")
        full = p.lead + (n, m)
        try:
            mk = np.broadcast_to(mk.view(np.uint8), full)
        except ValueError:
            raise ValueError(f"mask of shape {mk.shape} does not broadcast to {full}") from None
        try:  # a view whenever the broadcast dims can be merged; never the full mask
            mk = np.reshape(mk, (B, H, n, m), copy=False)
        except ValueError:
            mk = np.ascontiguousarray(mk).reshape(B, H, n, m)
    return Visibility(causal, w, kl, mk)


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
    """Refuse a float16 KV cache where only float32/float64 are implemented."""
    if p.kv_half:
        raise TypeError(f"{what} takes float32 or float64 arrays, got float16 k and v")


def linear_problem(q, k, v, causal, feature_map):
    """The checks of linear_attention (core and reference alike)."""
    if feature_map not in FEATURE_MAPS:
        raise ValueError(f"feature_map must be one of {FEATURE_MAPS}, got {feature_map!r}")
    p = problem(q, k, v, scale=1.0)
    no_half(p, "linear_attention")
    return p, visibility(p, causal)


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
                   key_lengths, window, split_kv=None, block_counts=None):
    """The checks of attention: (method, problem, visibility, block_q, block_k),
    block sizes 0 for the core's default.  split_kv and block_counts are
    attncore.attention's private keywords (the reference has none)."""
    method = method_name(method)
    if split_kv not in (None, -1, 0, 1) or isinstance(split_kv, bool):
        raise ValueError(f"_split_kv must be -1, 0 or 1, got {split_kv!r}")
    if block_counts is not None and not (isinstance(block_counts, np.ndarray)
                                         and block_counts.dtype == np.int64
                                         and block_counts.shape == (2,)):
        raise ValueError("_block_counts must be an int64 array of shape (2,)")
    p = problem(q, k, v, scale=scale)
    vis = visibility(p, causal, window, mask, key_lengths)
    bq, bk = block_size(block_q, "block_q"), block_size(block_k, "block_k")
    if return_weights and method != "naive":
        raise ValueError(f"return_weights=True needs method='naive', got method={method!r}")
    return method, p, vis, bq, bk


def plain_args(q, k, v, *, causal, scale, mask, key_lengths, window):
    """The checks of plain_attention: float32 or float64 throughout."""
    p = problem(q, k, v, scale=scale)
    no_half(p, "plain_attention")
    return p, visibility(p, causal, window, mask, key_lengths)


def scores_args(q, k, *, scale, causal, mask, key_lengths, window):
    """The checks of scores: (problem without v, visibility)."""
    p = problem(q, k, scale=scale)
    return p, visibility(p, causal, window, mask, key_lengths)


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


def backward_args(q, k, v, out, lse, dout, *, causal, scale, window, mask, key_lengths, method):
    """The checks of attention_backward: (method, problem, visibility, arrays)
    with arrays["out"], ["lse"], ["dout"] as (B, H, n, ·) views in q's dtype."""
    method = method_name(method)
    p = problem(q, k, v, scale=scale)
    no_half(p, "attention_backward")
    vis = visibility(p, causal, window, mask, key_lengths)
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

"""Arrays in the core's terms: the shape contract and the visibility rules.

`problem` turns q, k (and v) into a `Problem`: 4-D views (batch, head, row,
column) in one native float dtype with the last axis contiguous, ready for
the core.  `visibility` turns causal / window / mask / key_lengths into a
`Visibility`, a mask read through its strides and never expanded.  The small
checks they are made of (a float array, a positive int, a scale) are here
too; attncore._validate builds one check per entry point from them.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass

import numpy as np

from attncore._bfloat16 import from_bfloat16, is_bfloat16

FLOAT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
HALF = np.dtype(np.float16)
_INT64_MAX = 2**63 - 1


def kv16(dt: np.dtype) -> str | None:
    """Which 16-bit cache a K/V dtype is: "float16", "bfloat16" (uint16 bits
    or ml_dtypes.bfloat16; see _bfloat16.py) or None."""
    if dt.itemsize != 2:  # the common answer first: a call asks this of q, k and v
        return None
    if dt.newbyteorder("=") == HALF:
        return "float16"
    return "bfloat16" if is_bfloat16(dt) else None


def as_float_array(x, name: str, half: bool = False) -> np.ndarray:
    """np.asarray(x), refusing anything but float32/float64 (and a float16 or
    bfloat16 cache when `half`) with a TypeError."""
    a = np.asarray(x)
    dt = a.dtype.newbyteorder("=")
    if dt not in FLOAT_DTYPES and not (half and kv16(a.dtype)):
        allowed = ("float32, float64, float16 or bfloat16 (uint16 bits or ml_dtypes.bfloat16)"
                   if half else "float32 or float64")
        raise TypeError(f"{name} must be {allowed}, got dtype {a.dtype}")
    return a


def kv_values(a: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """K or V as values of dtype: a float16 or bfloat16 cache widened."""
    kind = kv16(a.dtype)
    if kind == "bfloat16":
        return from_bfloat16(a, dtype)
    if kind == "float16":
        return from_float16(a).astype(dtype, copy=False)
    return a.astype(dtype)


def from_float16(a: np.ndarray) -> np.ndarray:
    """float16 widened to float32, exactly: one pass in C on the calls'
    threads (NumPy's cast is serial, and slow on some CPUs)."""
    from attncore import _core
    from attncore._runtime import get_num_threads  # (it imports this module)

    bits = np.ascontiguousarray(a.astype(HALF, copy=False)).view(np.uint16)
    wide = np.empty(a.shape, np.float32)
    _core.from_f16(bits.reshape(-1), wide.reshape(-1), get_num_threads())
    return wide


def to_float16(x: np.ndarray) -> np.ndarray:
    """float32 x rounded to float16 (nearest even): one pass in C on the
    calls' threads where the CPU has F16C, else NumPy's cast."""
    from attncore import _core
    from attncore._runtime import get_num_threads

    f = np.ascontiguousarray(x, dtype=np.float32).reshape(np.shape(x))
    out = np.empty(f.shape, HALF)
    if _core.to_f16(f.reshape(-1), out.reshape(-1).view(np.uint16), get_num_threads()):
        return out
    return f.astype(HALF)


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
    size, strides = a.itemsize, a.strides
    if a.flags.aligned and (not strides or strides[-1] == size):
        for s in strides:  # a loop, not any(): every call of a decode step passes here
            if s % size:
                break
        else:
            return a
    # a fresh array (ascontiguousarray would hand back an unaligned
    # C-contiguous input as it is)
    return np.array(a, order="C")


def positive_scale(scale, dk: int) -> float:
    if scale is None:
        if dk == 0:
            raise ValueError("scale=None means 1/sqrt(d_k), but d_k is 0: pass scale explicitly")
        return 1.0 / math.sqrt(dk)
    if isinstance(scale, (bool, np.bool_, str, bytes)):  # float("0.5") would take a string
        raise ValueError(f"scale must be a positive finite number, got {scale!r}")
    try:
        s = float(scale)
    except (TypeError, ValueError):
        raise ValueError(f"scale must be a positive finite number, got {scale!r}") from None
    if not (math.isfinite(s) and s > 0):
        raise ValueError(f"scale must be a positive finite number, got {scale!r}")
    return s


def _integer(x) -> int | None:
    """x as a Python int if it is an integer (not a bool, not 2.7, not "2"), else None."""
    if isinstance(x, (bool, np.bool_)):
        return None
    try:
        return operator.index(x)
    except TypeError:
        return None


def positive_int(x, name: str, limit: int | None = None) -> int:
    """x as a Python int >= 1 (and <= limit), else a ValueError naming it."""
    i = _integer(x)
    if i is None or i < 1 or (limit and i > limit):
        bound = f" (at most {limit})" if limit else ""
        raise ValueError(f"{name} must be a positive integer{bound}, got {x!r}")
    return i


def dims(x, name: str) -> tuple[int, ...]:
    """x as a tuple of non-negative Python ints (array dimensions), else a
    ValueError naming it: 2.7 is not a dimension."""
    try:
        out = tuple(_integer(d) for d in x)
    except TypeError:  # not iterable
        out = (None,)
    if any(i is None or i < 0 for i in out):
        raise ValueError(f"{name} must be a tuple of non-negative integers, got {x!r}")
    return out


def block_size(b, name: str) -> int:
    """None (the core's tuned default, passed as 0) or a positive integer."""
    return 0 if b is None else positive_int(b, name, 2**31)


@dataclass
class Problem:
    """Validated attention inputs as (B, H, n, d) views, plus the shape to give back."""

    wide_q: np.ndarray | None  # q (None: bfloat16 queries, widened when q is first asked for)
    k: np.ndarray
    v: np.ndarray | None
    lead: tuple  # leading shape of the outputs: (..., H) or () for 2-D inputs
    batch: tuple  # the batch dims `...` alone
    scale: float
    # 16-bit queries (k and v of their kind): q is them widened to float32;
    # this is the dtype they came in (float16, uint16 bits or ml_dtypes.bfloat16)
    q_half: np.dtype | None = None
    q16: np.ndarray | None = None  # and bfloat16 queries as they came, a 4-D view of their bits

    @property
    def q(self) -> np.ndarray:
        """The queries as the arithmetic's type.  bfloat16 queries are widened
        here, on first use: the bfloat16 dot products read their bits (q16),
        and a prefill's widening pass cost it 1-2 % of its time."""
        if self.wide_q is None:
            self.wide_q = kv_values(self.q16, np.dtype(np.float32))
        return self.wide_q

    @property
    def dtype(self) -> np.dtype:
        """The dtype of the arithmetic and the outputs: the queries'."""
        return np.dtype(np.float32) if self.wide_q is None else self.wide_q.dtype

    @property
    def kv16(self) -> str | None:
        """"float16" or "bfloat16" for a 16-bit KV cache, else None."""
        return kv16(self.k.dtype)

    @property
    def shape(self):  # B, H, Hkv, n, m, dk, dv
        B, H, n, dk = (self.q16 if self.wide_q is None else self.wide_q).shape
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


def problem(q, k, v=None, *, scale=None, int8: bool = False) -> Problem:
    """Check q, k (and v) against the shape contract and bring them to 4-D.
    int8: k and v are an int8 cache's values (KVCache(dtype="int8")), q float32.
    16-bit q (float16 or bfloat16, k and v of the same kind) is widened to
    float32 here, exactly: the arithmetic is float32, and Problem.q_half says
    what the output is rounded back to."""
    q_half = q16 = None
    if int8:
        arrays = {"q": as_float_array(q, "q"), "k": np.asarray(k), "v": np.asarray(v)}
        if arrays["q"].dtype.newbyteorder("=") != np.float32 or any(
                arrays[n].dtype != np.int8 for n in ("k", "v")):
            got = ", ".join(f"{n} {a.dtype}" for n, a in arrays.items())
            raise TypeError(f"an int8 cache takes float32 queries and int8 k and v; got {got}")
    else:
        arrays = {"q": as_float_array(q, "q", half=True), "k": as_float_array(k, "k", half=True)}
        if v is not None:
            arrays["v"] = as_float_array(v, "v", half=True)
        if kv16(arrays["q"].dtype):  # 16-bit queries: k and v of their kind, q widened
            q_half = arrays["q"].dtype
            if any(kv16(a.dtype) != kv16(q_half) for a in arrays.values()):
                got = ", ".join(f"{n} {a.dtype}" for n, a in arrays.items())
                raise TypeError(f"{kv16(q_half)} queries need keys and values of the same kind; "
                                f"got {got}")
            if kv16(q_half) == "bfloat16":  # its bits in native order, for the core
                a = arrays["q"]
                q16 = a.astype(np.uint16, copy=False) if a.dtype.kind == "u" else a.view(np.uint16)
                arrays["q"] = q16  # widened by Problem.q when asked for
            else:
                arrays["q"] = kv_values(arrays["q"], np.dtype(np.float32))
        kinds = {kv16(a.dtype) for name, a in arrays.items() if name != "q"}
        if kinds != {None}:
            # a 16-bit KV cache: K and V both float16 or both bfloat16, queries float32
            if (q_half is None and arrays["q"].dtype.newbyteorder("=") != np.float32
                    or len(kinds) > 1):
                got = ", ".join(f"{n} {a.dtype}" for n, a in arrays.items())
                raise TypeError(f"float16 or bfloat16 keys and values need float32 queries and "
                                f"must come together, of one kind; got {got}")
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
        return _four_d(a, B, h, rows, cols)

    return Problem(
        wide_q=None if q16 is not None else four_d(qa, H, n, dk),
        k=four_d(ka, Hkv, m, dk),
        v=four_d(arrays["v"], Hkv, m, dv) if v is not None else None,
        lead=qlead + ((H,) if qa.ndim > 2 else ()),
        batch=qlead,
        scale=positive_scale(scale, dk),
        q_half=q_half,
        q16=None if q16 is None else four_d(q16, H, n, dk),
    )


def _four_d(a: np.ndarray, B: int, h: int, rows: int, cols: int) -> np.ndarray:
    # reshape is a view when it can be; the second look only copies when it
    # gave a size-1 last axis an odd stride
    return fast_layout(fast_layout(a).reshape(B, h, rows, cols))


def cache_problem(q, k: np.ndarray, v: np.ndarray) -> Problem | None:
    """problem(q, k, v) for a KVCache's own k and v (its arrays, whose dtype,
    shape and layout it made) when q is the plain case: an ndarray of the
    cache's float dtype (float32 for a 16-bit or int8 cache), shaped (*batch,
    H, n, head_dim) as the cache's batch, H a multiple of its kv heads, nothing
    empty.  The same Problem as problem() gives, with q alone looked at (the
    whole of attention's checks cost a step 10-20 µs more); None for anything
    else, which problem() then checks, and refuses, as always."""
    want = k.dtype if k.dtype in FLOAT_DTYPES else FLOAT_DTYPES[0]
    if type(q) is not np.ndarray or q.dtype != want or q.ndim != k.ndim:
        return None
    qlead, H, n, dk = q.shape[:-3], q.shape[-3], q.shape[-2], q.shape[-1]
    Hkv, m, dv = k.shape[-3], k.shape[-2], v.shape[-1]
    if qlead != k.shape[:-3] or dk != k.shape[-1] or not (H and n and m and dk and dv and Hkv):
        return None
    B = math.prod(qlead)
    if H % Hkv or not B or B * H * n * max(m, dk, dv) > _INT64_MAX:
        return None
    return Problem(wide_q=_four_d(q, B, H, n, dk), k=_four_d(k, B, Hkv, m, dk),
                   v=_four_d(v, B, Hkv, m, dv), lead=qlead + (H,), batch=qlead,
                   scale=positive_scale(None, dk))


@dataclass
class Visibility:
    """Which keys each query row sees, in the core's terms."""

    causal: bool
    window: int  # 0: none
    key_lengths: np.ndarray | None  # (B,) int64
    # the boolean mask as uint8, broadcast to (..., H, n, m) and never expanded:
    mask: np.ndarray | None  # that broadcast view (0 strides where it broadcasts)
    mask4: np.ndarray | None = None  # (B, H, n, m) view of it for the core, batch stride 0...
    mask_offsets: np.ndarray | None = None  # ...and each batch's plane at these byte offsets
    q_offset: np.ndarray | None = None  # (B,) int64: query i at position q_offset + i
    k_offset: np.ndarray | None = None  # (B,) int64: key j at position k_offset + j
    # the score modifiers (attncore.h): s = softcap·tanh(z/softcap) + bias - slope·|qpos - kpos|
    bias: np.ndarray | None = None  # broadcast (..., H, n, m) view, in q's dtype, never expanded
    bias4: np.ndarray | None = None  # (B, H, n, m) view of it for the core, batch stride 0...
    bias_offsets: np.ndarray | None = None  # ...and each batch's plane at these element offsets
    bias_shape: tuple | None = None  # the shape it was given in (its gradient's shape)
    alibi: np.ndarray | None = None  # (H,) float64 slopes
    softcap: float = 0.0  # 0: none
    sinks: np.ndarray | None = None  # (H,) float64 sink logits

    def full_mask(self, shape) -> np.ndarray:
        """The mask as a (B, H, n, m) boolean array (the reference's use: it copies)."""
        return np.asarray(self.mask, dtype=bool).reshape(shape)


def _per_batch_ints(x, name: str, batch: tuple, lo: int, hi: int, bounds: str) -> np.ndarray:
    """Integers, one per batch (broadcast to the batch shape), within [lo, hi]:
    int64, flat, as the core reads them."""
    a = np.asarray(x)
    if a.dtype.kind not in "iu":
        raise TypeError(f"{name} must be integers, got dtype {a.dtype}")
    try:
        a = np.broadcast_to(a, batch)
    except ValueError:
        raise ValueError(f"{name} must have the batch shape {batch} (or broadcast to it), got "
                         f"shape {a.shape}") from None
    if a.size and (int(a.min()) < lo or int(a.max()) > hi):
        raise ValueError(f"{name} must lie in {bounds}, got values from {a.min()} to {a.max()}")
    return fast_layout(np.ascontiguousarray(a, dtype=np.int64)).reshape(-1)


def check_key_lengths(key_lengths, batch: tuple, m: int) -> np.ndarray:
    """key_lengths checked against the batch shape and m: int64, one per batch, flat."""
    return _per_batch_ints(key_lengths, "key_lengths", batch, 0, m, f"[0, m={m}]")


MAX_POSITION = 2**60  # |q_offset|, |k_offset| (the C core's AC_MAX_POSITION)


def check_offset(offset, name: str, batch: tuple) -> np.ndarray:
    """A q_offset / k_offset: integers, one per batch (broadcast), |x| ≤ 2**60; int64, flat."""
    return _per_batch_ints(offset, name, batch, -MAX_POSITION, MAX_POSITION, "[-2**60, 2**60]")


def visibility(p: Problem, causal, window=None, mask=None, key_lengths=None, q_offset=None,
               k_offset=None, bias=None, alibi_slopes=None, softcap=None,
               sinks=None) -> Visibility:
    """Check causal / window / mask / key_lengths / q_offset / k_offset and the
    score modifiers against the problem."""
    vis = _visibility(p, causal, window, mask, key_lengths, q_offset, k_offset,
                      alibi_slopes is not None)
    B, H, Hkv, n, m, *_ = p.shape
    if bias is not None:
        vis.bias, vis.bias_shape = check_bias(bias, p)
        vis.bias4, vis.bias_offsets = _plane_for_core(vis.bias, p.batch, H, n, m)
    if alibi_slopes is not None:
        vis.alibi = _per_head(alibi_slopes, "alibi_slopes", H)
        if not np.isfinite(vis.alibi).all():
            raise ValueError("alibi_slopes must be finite")
    if softcap is not None:
        if isinstance(softcap, (bool, np.bool_)) or not isinstance(
                softcap, (int, float, np.integer, np.floating)):
            raise TypeError(f"softcap must be a positive number, got {softcap!r}")
        if not (math.isfinite(float(softcap)) and float(softcap) > 0):
            raise ValueError(f"softcap must be positive and finite, got {softcap!r}")
        vis.softcap = float(softcap)
    if sinks is not None:
        vis.sinks = _per_head(sinks, "sinks", H)
        if np.isnan(vis.sinks).any() or np.isposinf(vis.sinks).any():
            raise ValueError("sinks must not be NaN or +inf (-inf: no sink)")
    return vis


def sum_to_shape(full: np.ndarray, shape: tuple) -> np.ndarray:
    """full, of a broadcast result's shape, summed over the dims along which an
    array of `shape` was broadcast: the gradient of that array."""
    extra = full.ndim - len(shape)
    out = full.sum(axis=tuple(range(extra))) if extra else full
    ones = tuple(i for i, size in enumerate(shape) if size == 1 and out.shape[i] != 1)
    return (out.sum(axis=ones, keepdims=True) if ones else out).reshape(shape)


def sink_gradient(sinks: np.ndarray, lse4: np.ndarray, out4: np.ndarray,
                  dout4: np.ndarray) -> np.ndarray:
    """d loss / d sinks[h] = -Σ_(b, i) exp(sink_h - lse_bhi)·D_bhi with
    D = rowsum(dout ∘ out), (B, H, n, ·) arrays: a sink's weight in row i is
    exp(sink - lse_i), and raising it scales the row's output down."""
    D = np.einsum("bhnc,bhnc->bhn", dout4.astype(np.float64), out4.astype(np.float64))
    with np.errstate(over="ignore", invalid="ignore"):
        w = np.exp(sinks[None, :, None] - lse4.astype(np.float64))
    return -(w * D).sum(axis=(0, 2))


def _per_head(x, name: str, H: int) -> np.ndarray:
    """One float per query head (a scalar broadcasts): float64, contiguous."""
    a = np.asarray(x)
    if a.dtype.kind not in "fiu":
        raise TypeError(f"{name} must be real numbers, got dtype {a.dtype}")
    if a.ndim > 1 or (a.ndim == 1 and a.shape[0] not in (1, H)):
        raise ValueError(f"{name} must have one value per query head, shape ({H},), got "
                         f"shape {a.shape}")
    return np.ascontiguousarray(np.broadcast_to(a.astype(np.float64), (H,)))


def check_bias(bias, p: Problem) -> tuple[np.ndarray, tuple]:
    """An additive bias: a float array broadcastable to (..., H, n, m), as a
    broadcast view in q's dtype (a 16-bit cache's queries: float32), nothing
    expanded; and the shape it came in."""
    b = np.asarray(bias)
    if b.dtype.kind != "f" and b.dtype.name != "bfloat16":
        hint = " (a boolean mask goes to mask=)" if b.dtype == np.bool_ else ""
        raise TypeError(f"bias must be a float array, got dtype {b.dtype}{hint}")
    B, H, Hkv, n, m, *_ = p.shape
    full = p.lead + (n, m)
    shape = b.shape
    b = b.astype(p.dtype, copy=False)
    if not b.flags.aligned or any(st % b.itemsize for st in b.strides):
        b = np.require(b, requirements=("C", "A"))  # odd strides or address (off the wire): a copy
    try:
        b = np.broadcast_to(b, full)
    except ValueError:
        raise ValueError(f"bias of shape {shape} does not broadcast to {full}") from None
    return b, shape


def _visibility(p: Problem, causal, window, mask, key_lengths, q_offset, k_offset,
                alibi: bool) -> Visibility:
    B, H, Hkv, n, m, *_ = p.shape
    causal = bool(causal)
    w = 0
    if window is not None:
        w = min(positive_int(window, "window"), 2**62)
        if not causal:
            raise ValueError("window needs causal=True: it is the band of w keys ending at "
                             "the causal diagonal")
    kl = None if key_lengths is None else check_key_lengths(key_lengths, p.batch, m)
    if (q_offset is not None or k_offset is not None) and not (causal or alibi):
        raise ValueError("q_offset and k_offset need causal=True or alibi_slopes: they place "
                         "the queries and keys for the causal and window rules and ALiBi's "
                         "distances, which are all they change")
    offsets = {"q_offset": None if q_offset is None else check_offset(q_offset, "q_offset",
                                                                       p.batch),
               "k_offset": None if k_offset is None else check_offset(k_offset, "k_offset",
                                                                       p.batch)}
    if mask is None:
        return Visibility(causal, w, kl, None, **offsets)
    mk = np.asarray(mask)
    if mk.dtype != np.bool_:
        raise TypeError(f"mask must be a boolean array (True = may attend), got dtype {mk.dtype}")
    full = p.lead + (n, m)
    try:
        mk = np.broadcast_to(mk.view(np.uint8), full)
    except ValueError:
        raise ValueError(f"mask of shape {mk.shape} does not broadcast to {full}") from None
    return Visibility(causal, w, kl, mk, *_plane_for_core(mk, p.batch, H, n, m), **offsets)


def _plane_for_core(mk: np.ndarray, batch: tuple, H: int, n: int, m: int):
    """A broadcast mask or bias (..., H, n, m) as the core reads it, through
    its own strides whatever dims broadcast: a (B, H, n, m) view whose batch
    stride is unused, and the offset of each batch's plane (the batch dims
    need not merge into one stride), in elements (the uint8 mask's are
    bytes).  Nothing is copied."""
    nb = len(batch)
    offsets = np.zeros(batch, np.int64)
    for axis, (size, stride) in enumerate(zip(batch, mk.strides[:nb])):
        shape = [1] * nb
        shape[axis] = size
        offsets = offsets + np.arange(size, dtype=np.int64).reshape(shape) * (
            stride // mk.itemsize)
    h_stride = mk.strides[nb] if mk.ndim == nb + 3 else 0  # 2-D inputs: one head
    mask4 = np.lib.stride_tricks.as_strided(
        mk, shape=(max(math.prod(batch), 1), H, n, m),
        strides=(0, h_stride) + mk.strides[-2:], writeable=False)
    return mask4, np.ascontiguousarray(offsets.reshape(-1))

"""KVCache: a preallocated key/value cache for token-by-token decoding."""

from __future__ import annotations

import inspect
import os
import threading
import weakref
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from attncore import _validate as validate
from attncore._api import _attention, attention
from attncore._bfloat16 import storage_dtype

INT8 = np.dtype(np.int8)
_ATTENTION_KEYWORDS = frozenset(inspect.signature(attention).parameters) - {"q", "k", "v"}


def quantize_int8(x: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """Rows of x (any float dtype) as int8 and one float32 scale a row, as an
    int8 :class:`KVCache` stores keys and values (one scale a token and kv
    head): ``scale = max|row| / 127``, ``q = round(row / scale)`` in
    [-127, 127], so that ``q · scale`` is within ``scale / 2`` of each value
    (a row of zeros: scale 0).  Returns (q, scale), scale shaped x.shape[:-1].
    Values must be finite (ValueError)."""
    a = validate.kv_values(validate.as_float_array(x, "x", half=True), np.dtype(np.float32))
    if not np.isfinite(a).all():
        raise ValueError("an int8 cache holds finite values only: got inf or NaN")
    scale = (np.abs(a).max(axis=-1, initial=0) / np.float32(127)).astype(np.float32)
    safe = np.where(scale > 0, scale, np.float32(1))
    q = np.clip(np.rint(a / safe[..., None]), -127, 127).astype(np.int8)
    return q, scale


def dequantize_int8(q: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """What an int8 cache's rows stand for: q · scale, float32."""
    return q.astype(np.float32) * scale[..., None]


class KVCache:
    """Keys and values of one attention layer, appended as tokens arrive.

    Storage is ``(*batch, kv_heads, capacity, head_dim)`` for keys (and
    ``value_dim`` for values), preallocated; :meth:`append` writes the new
    tokens in place and doubles the capacity when it runs out, so a sequence
    of m tokens costs O(m) copying in all, not O(m²).  :meth:`attend` runs
    :func:`attncore.attention` of the newest queries against the filled part,
    read in place (a strided view, no copy).

    Parameters
    ----------
    kv_heads, head_dim : int
    batch : tuple of int
        Leading batch dims (default: none).
    value_dim : int, optional
        Default ``head_dim``.
    dtype : float32, float64, float16, "bfloat16" or "int8"
        float16 and bfloat16 halve the bytes a decode step reads; queries are
        then float32 (the output float32) or of the cache's kind (the output
        rounded to it).  "bfloat16" stores ml_dtypes.bfloat16 when that package
        is installed, else uint16 bits (np.uint16 or ml_dtypes.bfloat16 may be
        given directly); :func:`attncore.to_bfloat16` makes the bits.
        "int8" quarters them (and a float32 scale a token and kv head): each
        appended row is quantised by :func:`quantize_int8` (absmax, per token
        and head) and read by the kernels as int8, the scales applied to the
        score and weight columns; queries float32, ``method="flash"`` only.
        Its :attr:`keys` and :attr:`values` are the dequantised rows (a copy).
    capacity : int
        Initial capacity in tokens.

    Notes
    -----
    Threads.  A cache may be shared between threads.  Each :meth:`append`
    lands whole, in the order the appends take the cache's lock (held only
    while the new rows are copied in); :meth:`attend`, :attr:`keys` and
    :attr:`values` see a snapshot taken under the same lock: the rows present
    at that moment, keys and values of the same length, which later appends
    never change (they write only rows past it, or into a new buffer).
    """

    _live: weakref.WeakSet = weakref.WeakSet()  # for the locks after fork()

    def __init__(self, kv_heads: int, head_dim: int, *, batch: tuple[int, ...] = (),
                 value_dim: int | None = None, dtype: DTypeLike = np.float32,
                 capacity: int = 256) -> None:
        if isinstance(dtype, str) and dtype == "bfloat16":
            dtype = storage_dtype()  # ml_dtypes' bfloat16 when installed, else uint16 bits
        dtype = np.dtype(dtype)
        if dtype not in validate.FLOAT_DTYPES and not validate.kv16(dtype) and dtype != INT8:
            raise TypeError(f"dtype must be float32, float64, float16, bfloat16 or int8, "
                            f"got {dtype}")
        self.kv_heads = validate.positive_int(kv_heads, "kv_heads")
        self.head_dim = validate.positive_int(head_dim, "head_dim")
        self.value_dim = validate.positive_int(head_dim if value_dim is None else value_dim,
                                               "value_dim")
        capacity = validate.positive_int(capacity, "capacity")
        self.batch = validate.dims(batch, "batch")
        self.dtype = dtype
        self._k = np.empty(self.batch + (self.kv_heads, capacity, self.head_dim), dtype)
        self._v = np.empty(self.batch + (self.kv_heads, capacity, self.value_dim), dtype)
        # int8: one float32 scale a token and kv head (else empty, never read)
        scales = self.batch + (self.kv_heads, capacity if dtype == INT8 else 0)
        self._ks, self._vs = np.zeros(scales, np.float32), np.zeros(scales, np.float32)
        self._len = 0
        self._lock = threading.Lock()
        KVCache._live.add(self)

    def __len__(self) -> int:
        return self._len

    @property
    def capacity(self) -> int:
        return self._k.shape[-2]

    def _snapshot(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Read-only views of the filled keys, values and their scales (int8),
        taken together."""
        with self._lock:
            n = self._len
            views = (self._k[..., :n, :], self._v[..., :n, :], self._ks[..., :n],
                     self._vs[..., :n])
        for a in views:
            a.flags.writeable = False
        return views

    @property
    def keys(self) -> np.ndarray:
        """The filled keys, (*batch, kv_heads, len, head_dim): a read-only view
        (an int8 cache: the dequantised keys, float32, a copy)."""
        k, _, ks, _ = self._snapshot()
        return dequantize_int8(k, ks) if self.dtype == INT8 else k

    @property
    def values(self) -> np.ndarray:
        """The filled values, (*batch, kv_heads, len, value_dim): a read-only view
        (an int8 cache: the dequantised values, float32, a copy)."""
        _, v, _, vs = self._snapshot()
        return dequantize_int8(v, vs) if self.dtype == INT8 else v

    def _grow(self, need: int) -> None:
        cap = self.capacity
        while cap < need:
            cap *= 2
        for name in ("_k", "_v"):
            old = getattr(self, name)
            new = np.empty(old.shape[:-2] + (cap, old.shape[-1]), self.dtype)
            new[..., : self._len, :] = old[..., : self._len, :]
            setattr(self, name, new)
        if self.dtype == INT8:
            for name in ("_ks", "_vs"):
                old = getattr(self, name)
                new = np.zeros(old.shape[:-1] + (cap,), np.float32)
                new[..., : self._len] = old[..., : self._len]
                setattr(self, name, new)

    def append(self, k: ArrayLike, v: ArrayLike) -> None:
        """Add t tokens: k (*batch, kv_heads, t, head_dim), v (..., t, value_dim)."""
        k = validate.as_float_array(k, "k", half=True)
        v = validate.as_float_array(v, "v", half=True)
        want_k = self.batch + (self.kv_heads, None, self.head_dim)
        for name, a, want in (("k", k, want_k),
                              ("v", v, self.batch + (self.kv_heads, None, self.value_dim))):
            if a.ndim != len(want) or any(w is not None and s != w for s, w in zip(a.shape, want)):
                shown = tuple("t" if w is None else w for w in want)
                raise ValueError(f"{name} must have shape {shown}, got {a.shape}")
            if self.dtype != INT8 and a.dtype.newbyteorder("=") != self.dtype and not (
                    validate.kv16(a.dtype) == validate.kv16(self.dtype) == "bfloat16"):
                raise TypeError(f"{name} has dtype {a.dtype} but the cache holds {self.dtype}")
        t = k.shape[-2]
        if v.shape[-2] != t:
            raise ValueError(f"k has {t} tokens but v has {v.shape[-2]}")
        if self.dtype == INT8:  # any float dtype, quantised before the lock (and checked)
            (k, ks), (v, vs) = quantize_int8(k), quantize_int8(v)
        with self._lock:
            if self._len + t > self.capacity:
                self._grow(self._len + t)
            self._k[..., self._len : self._len + t, :] = self._stored(k)
            self._v[..., self._len : self._len + t, :] = self._stored(v)
            if self.dtype == INT8:
                self._ks[..., self._len : self._len + t] = ks
                self._vs[..., self._len : self._len + t] = vs
            self._len += t

    def _stored(self, a: np.ndarray) -> np.ndarray:
        """a as the cache stores it: bfloat16 bits (uint16) and ml_dtypes'
        bfloat16 are the same bytes, so one is taken for the other."""
        if a.dtype != self.dtype and validate.kv16(self.dtype) == "bfloat16":
            return a.astype(a.dtype.newbyteorder("="), copy=False).view(self.dtype)
        return a

    def attend(self, q: ArrayLike, causal: bool = True, **kwargs: Any) -> Any:
        """attention(q, keys, values, causal=causal, **kwargs) over the filled cache.

        q (*batch, H, n, head_dim) holds the n newest tokens' queries (H a
        multiple of kv_heads); causal is bottom-right aligned, so query i
        sees the cached keys and the new ones up to itself.
        """
        keys, values, ks, vs = self._snapshot()
        int8 = self.dtype == INT8  # the int8 values and their scales, read by the blockwise kernel
        # a plain step: q checked against the cache alone (its own arrays need no checks)
        p = None if kwargs else validate.cache_problem(q, keys, values)
        if p is not None:
            return _attention(q, keys, values, causal=causal, k_scale=ks if int8 else None,
                              v_scale=vs if int8 else None, checked=p)
        if int8:
            unknown = sorted(set(kwargs) - _ATTENTION_KEYWORDS)
            if unknown:  # as attention() would say: _attention takes private ones too
                raise TypeError(f"attend() got unexpected keyword arguments {unknown}")
            return _attention(q, keys, values, causal=causal, k_scale=ks, v_scale=vs, **kwargs)
        return attention(q, keys, values, causal=causal, **kwargs)

    def __repr__(self) -> str:
        return (f"KVCache(batch={self.batch}, kv_heads={self.kv_heads}, head_dim={self.head_dim}, "
                f"value_dim={self.value_dim}, dtype={self.dtype}, len={self._len}, "
                f"capacity={self.capacity})")


def _fresh_locks_after_fork() -> None:
    # a lock another thread held at fork() would stay held in the child
    for cache in list(KVCache._live):
        cache._lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_fresh_locks_after_fork)

"""bfloat16 for a KV cache: what it is and how attncore recognises it.

A bfloat16 is the top 16 bits of a float32 — the same sign and 8-bit
exponent, 7 bits of mantissa — so it keeps float32's range at half the bytes,
and widening it back is exact (a shift).  NumPy has no bfloat16 dtype, so
attncore takes either of two forms for ``k`` and ``v``:

- a uint16 array holding the bits (``to_bfloat16`` makes one), or
- an array of ``ml_dtypes.bfloat16``, when that package is installed.

The arithmetic is float32: the kernels widen K and V as they load them,
exactly as for a float16 cache; bfloat16 queries (with bfloat16 K and V) are
widened too, and the output rounded back once (attncore.attention).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from attncore import _core

BITS = np.dtype(np.uint16)


def is_bfloat16(dt: np.dtype) -> bool:
    """uint16 (bfloat16 bits) or ml_dtypes' bfloat16."""
    dt = np.dtype(dt)
    if dt.itemsize != 2:  # before dt.name, which NumPy computes in Python
        return False
    return dt.newbyteorder("=") == BITS or dt.name == "bfloat16"


def storage_dtype() -> np.dtype:
    """The dtype a bfloat16 cache stores: ml_dtypes' bfloat16 when it is
    installed, else uint16 bits."""
    try:
        import ml_dtypes
    except ImportError:
        return BITS
    return np.dtype(ml_dtypes.bfloat16)


def to_bfloat16(x: ArrayLike) -> np.ndarray:
    """float32 values rounded to the nearest bfloat16 (ties to even), as
    uint16 bits; NaN stays NaN (quiet), ±inf stays ±inf.  One pass in C, on
    the calls' threads (attncore.set_num_threads)."""
    f = np.ascontiguousarray(x, dtype=np.float32)
    out = np.empty(f.shape, np.uint16)
    _core.to_bf16(f.reshape(-1), out.reshape(-1), _threads())
    return out


def from_bfloat16(bits: ArrayLike, dtype: np.dtype | type = np.float32) -> np.ndarray:
    """bfloat16 (uint16 bits or ml_dtypes.bfloat16) widened, exactly, to float32
    (then to dtype)."""
    a = np.asarray(bits)
    if not is_bfloat16(a.dtype):
        raise TypeError(f"expected bfloat16 (uint16 bits or ml_dtypes.bfloat16), got {a.dtype}")
    # uint16 bits in either byte order (astype swaps them; a view would not)
    u = a.astype(np.uint16, copy=False) if a.dtype.kind == "u" else a.view(np.uint16)
    wide = np.empty(u.shape, np.float32)
    _core.from_bf16(np.ascontiguousarray(u).reshape(-1), wide.reshape(-1), _threads())
    return wide.astype(dtype, copy=False)


def _threads() -> int:
    from attncore._runtime import get_num_threads  # (it imports this module)

    return get_num_threads()

"""What a worker computes: one query chunk against one key chunk, forward and
backward, in global coordinates, by attncore's own kernels on slices.

Engine-free (NumPy and attncore only): the Dask tasks call these, and so can
any other executor, or a test on one process.
"""

from __future__ import annotations

import numpy as np

import attncore
from attncore.distributed._plan import segments


def as4(a: np.ndarray) -> np.ndarray:
    """(..., H, s, d) or (s, d) as (B, H, s, d): a view."""
    return a.reshape((-1,) + a.shape[-3:]) if a.ndim >= 3 else a[None, None]


def batch_groups(batch: int, m: int, key_lengths: np.ndarray | None):
    """(batch indices, key length) groups: one group of all when no key_lengths;
    else one per distinct length, since each length moves the causal diagonal."""
    if key_lengths is None:
        return [(slice(None), m)]
    kl = np.asarray(key_lengths, np.int64).reshape(batch)
    return [(np.flatnonzero(kl == L), int(L)) for L in np.unique(kl)]


def _pieces(q4, k4, qa, ka, *, n, m, causal, window, key_lengths):
    """Each attncore call of a block: (batch selection, local row slice, local
    key slice, kind)."""
    for sel, L in batch_groups(q4.shape[0], m, key_lengths):
        for r0, r1, c0, c1, kind in segments(qa, qa + q4.shape[2], ka, ka + k4.shape[2],
                                             causal=causal, window=window, off=L - n, limit=L):
            yield sel, slice(r0 - qa, r1 - qa), slice(c0 - ka, c1 - ka), kind


def _flip(kind: str, *arrays: np.ndarray) -> list[np.ndarray]:
    return [a[..., ::-1, :] if a.ndim == 4 else a[..., ::-1] for a in arrays] \
        if kind == "reversed" else list(arrays)


def _mask_args(kind: str, window: int | None) -> dict:
    return {"causal": kind != "full", "window": window if kind == "causal" else None}


def block_forward(q: np.ndarray, k: np.ndarray, v: np.ndarray, qa: int, ka: int, *, n: int,
                  m: int, causal: bool, window: int | None, scale: float,
                  key_lengths: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(o, lse)`` of the query rows ``q`` (global rows qa, qa+1, ...) against
    the keys ``k, v`` (global keys ka, ...) of an attention of n queries and m
    keys: what :func:`attncore.merge` needs to combine it with the other key
    chunks.  Rows that see none of these keys get o = 0, lse = -inf."""
    q4, k4, v4 = as4(q), as4(k), as4(v)
    out = np.zeros(q4.shape[:3] + (v4.shape[3],), q4.dtype)
    lse = np.full(q4.shape[:3], -np.inf, q4.dtype)
    for sel, rows, keys, kind in _pieces(q4, k4, qa, ka, n=n, m=m, causal=causal, window=window,
                                         key_lengths=key_lengths):
        qs, ks, vs = _flip(kind, q4[sel][:, :, rows], k4[sel][:, :, keys], v4[sel][:, :, keys])
        o, lo = attncore.attention(qs, ks, vs, scale=scale, return_lse=True,
                                   **_mask_args(kind, window))
        o, lo = _flip(kind, o, lo)
        _put(out, sel, rows, o)
        _put(lse, sel, rows, lo)
    return out.reshape(q.shape[:-1] + (v.shape[-1],)), lse.reshape(q.shape[:-1])


def block_backward(q: np.ndarray, k: np.ndarray, v: np.ndarray, out: np.ndarray,
                   lse: np.ndarray, dout: np.ndarray, qa: int, ka: int, *, n: int, m: int,
                   causal: bool, window: int | None, scale: float,
                   key_lengths: np.ndarray | None = None
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """This block's share of the gradients: ``(dq, dk, dv)`` shaped like q, k
    and v, given the *whole* attention's ``out``, ``lse`` (rows of q) and
    ``dout``.  Summed over every key chunk, dq is the full dq; summed over every
    query chunk, dk and dv are."""
    q4, k4, v4 = as4(q), as4(k), as4(v)
    o4, do4 = as4(out), as4(dout)
    l4 = lse.reshape(o4.shape[:3])
    dq, dk, dv = np.zeros_like(q4), np.zeros_like(k4), np.zeros_like(v4)
    for sel, rows, keys, kind in _pieces(q4, k4, qa, ka, n=n, m=m, causal=causal, window=window,
                                         key_lengths=key_lengths):
        part = _flip(kind, q4[sel][:, :, rows], k4[sel][:, :, keys], v4[sel][:, :, keys],
                     o4[sel][:, :, rows], l4[sel][:, :, rows], do4[sel][:, :, rows])
        gq, gk, gv = _flip(kind, *attncore.attention_backward(*part, scale=scale,
                                                              **_mask_args(kind, window)))
        _put(dq, sel, rows, gq, add=True)
        _put(dk, sel, keys, gk, add=True)
        _put(dv, sel, keys, gv, add=True)
    return dq.reshape(q.shape), dk.reshape(k.shape), dv.reshape(v.shape)


def _put(dst: np.ndarray, sel, rows: slice, src: np.ndarray, add: bool = False) -> None:
    """dst[sel][:, :, rows] = src (or +=), for a slice or an index array sel."""
    if isinstance(sel, slice):
        view = dst[sel, :, rows]
        if add:
            view += src
        else:
            view[...] = src
        return
    if add:
        dst[sel, :, rows] += src
    else:
        dst[sel, :, rows] = src


def merge_all(parts: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """attncore.merge of any number of (o, lse) parts (one is returned as it is)."""
    if len(parts) == 1:
        return parts[0]
    return attncore.merge(*(a for part in parts for a in part))

"""What a worker computes: one query chunk against one key chunk, forward and
backward, in global coordinates: one call of attncore's own kernels each,
the block placed in the whole sequence by q_offset / k_offset.

Engine-free (NumPy and attncore only): the Dask tasks call these, and so can
any other executor, or a test on one process.
"""

from __future__ import annotations

import numpy as np

import attncore


def as4(a: np.ndarray) -> np.ndarray:
    """(..., H, s, d) or (s, d) as (B, H, s, d): a view."""
    return a.reshape((-1,) + a.shape[-3:]) if a.ndim >= 3 else a[None, None]


def placement(batch: int, keys: int, qa: int, ka: int, *, n: int, m: int, causal: bool,
              window: int | None, key_lengths: np.ndarray | None = None,
              alibi_slopes: np.ndarray | None = None, softcap: float | None = None) -> dict:
    """The keywords that place a block — query rows from global row qa,
    ``keys`` keys from global key ka — in the whole attention of n queries and
    m keys, for one :func:`attncore.attention` call: the causal, window and
    ALiBi rules by positions (q_offset, k_offset: attncore's one definition of
    who sees what and how far, bottom-right per batch as the whole call has
    it), each batch's padding cut to the block (key_lengths), and the
    modifiers that act on each score alone (ALiBi slopes, soft-cap)."""
    kl = (np.full(batch, m, np.int64) if key_lengths is None
          else np.asarray(key_lengths, np.int64).reshape(batch))
    kw: dict = {"key_lengths": np.clip(kl - ka, 0, keys), "alibi_slopes": alibi_slopes,
                "softcap": softcap}
    if causal:
        kw.update(causal=True, window=window)
    if causal or alibi_slopes is not None:  # row r sits at position r + (L_b - n), key c at c
        kw.update(q_offset=qa + kl - n, k_offset=ka)
    return kw


def block_forward(q: np.ndarray, k: np.ndarray, v: np.ndarray, qa: int, ka: int, *, n: int,
                  m: int, causal: bool, window: int | None, scale: float,
                  key_lengths: np.ndarray | None = None, alibi_slopes: np.ndarray | None = None,
                  softcap: float | None = None, mask: np.ndarray | None = None,
                  bias: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(o, lse)`` of the query rows ``q`` (global rows qa, qa+1, ...) against
    the keys ``k, v`` (global keys ka, ...) of an attention of n queries and m
    keys: what :func:`attncore.merge` needs to combine it with the other key
    chunks.  Rows that see none of these keys get o = 0, lse = -inf.  ``mask``
    and ``bias`` are the block's own cut of the whole call's, as (B or 1,
    H or 1, rows or 1, keys or 1) arrays (:func:`cut`)."""
    q4, k4, v4 = as4(q), as4(k), as4(v)
    o, lse = attncore.attention(q4, k4, v4, scale=scale, return_lse=True, mask=mask, bias=bias,
                                **placement(q4.shape[0], k4.shape[2], qa, ka, n=n, m=m,
                                            causal=causal, window=window,
                                            key_lengths=key_lengths,
                                            alibi_slopes=alibi_slopes, softcap=softcap))
    return o.reshape(q.shape[:-1] + (v.shape[-1],)), lse.reshape(q.shape[:-1])


def block_backward(q: np.ndarray, k: np.ndarray, v: np.ndarray, out: np.ndarray,
                   lse: np.ndarray, dout: np.ndarray, qa: int, ka: int, *, n: int, m: int,
                   causal: bool, window: int | None, scale: float,
                   key_lengths: np.ndarray | None = None, alibi_slopes: np.ndarray | None = None,
                   softcap: float | None = None, mask: np.ndarray | None = None,
                   bias: np.ndarray | None = None, return_dbias: bool = False) -> tuple:
    """This block's share of the gradients: ``(dq, dk, dv)`` shaped like q, k
    and v (and d(bias) shaped like the block's bias, if ``return_dbias``),
    given the *whole* attention's ``out``, ``lse`` (rows of q; a sink's share
    already in it) and ``dout``.  Summed over every key chunk, dq is the full
    dq; summed over every query chunk, dk and dv are."""
    q4, k4, v4 = as4(q), as4(k), as4(v)
    o4, do4 = as4(out), as4(dout)
    grads = attncore.attention_backward(
        q4, k4, v4, o4, lse.reshape(o4.shape[:3]), do4, scale=scale, mask=mask, bias=bias,
        return_dbias=return_dbias,
        **placement(q4.shape[0], k4.shape[2], qa, ka, n=n, m=m, causal=causal, window=window,
                    key_lengths=key_lengths, alibi_slopes=alibi_slopes, softcap=softcap))
    dq, dk, dv = grads[:3]
    return (dq.reshape(q.shape), dk.reshape(k.shape), dv.reshape(v.shape)) + tuple(grads[3:])


def as_pairwise(a: np.ndarray, lead: tuple) -> np.ndarray:
    """A mask or bias of a shape that broadcasts to lead + (H, n, m) as a
    (B or 1, H or 1, n or 1, m or 1) array, B the product of lead: a view,
    unless it varies along some batch dims and not others (then those are
    expanded, never the last three)."""
    a = np.asarray(a)
    a = a.reshape((1,) * (len(lead) + 3 - a.ndim) + a.shape)
    if all(size == 1 for size in a.shape[:-3]):
        return a.reshape((1,) + a.shape[-3:])
    return np.broadcast_to(a, lead + a.shape[-3:]).reshape((-1,) + a.shape[-3:])


def cut(a: np.ndarray | None, qa: int, qb: int, ka: int, kb: int) -> np.ndarray | None:
    """The block (rows qa:qb, keys ka:kb) of a pairwise array (:func:`as_pairwise`);
    a dim of size 1 stays whole (it broadcasts)."""
    if a is None:
        return None
    rows = slice(qa, qb) if a.shape[-2] > 1 else slice(None)
    keys = slice(ka, kb) if a.shape[-1] > 1 else slice(None)
    return a[..., rows, keys]


def merge_all(parts: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """attncore.merge of any number of (o, lse) parts (one is returned as it is)."""
    if len(parts) == 1:
        return parts[0]
    return attncore.merge(*(a for part in parts for a in part))

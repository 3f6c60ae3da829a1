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
              window: int | None, key_lengths: np.ndarray | None = None) -> dict:
    """The keywords that place a block — query rows from global row qa,
    ``keys`` keys from global key ka — in the whole attention of n queries and
    m keys, for one :func:`attncore.attention` call: the causal and window
    rules by positions (q_offset, k_offset: attncore's one definition of who
    sees what, bottom-right per batch as the whole call has it), and each
    batch's padding cut to the block (key_lengths)."""
    kl = (np.full(batch, m, np.int64) if key_lengths is None
          else np.asarray(key_lengths, np.int64).reshape(batch))
    kw: dict = {"key_lengths": np.clip(kl - ka, 0, keys)}
    if causal:  # row r sits at position r + (L_b - n), key c at c
        kw.update(causal=True, window=window, q_offset=qa + kl - n, k_offset=ka)
    return kw


def block_forward(q: np.ndarray, k: np.ndarray, v: np.ndarray, qa: int, ka: int, *, n: int,
                  m: int, causal: bool, window: int | None, scale: float,
                  key_lengths: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(o, lse)`` of the query rows ``q`` (global rows qa, qa+1, ...) against
    the keys ``k, v`` (global keys ka, ...) of an attention of n queries and m
    keys: what :func:`attncore.merge` needs to combine it with the other key
    chunks.  Rows that see none of these keys get o = 0, lse = -inf."""
    q4, k4, v4 = as4(q), as4(k), as4(v)
    o, lse = attncore.attention(q4, k4, v4, scale=scale, return_lse=True,
                                **placement(q4.shape[0], k4.shape[2], qa, ka, n=n, m=m,
                                            causal=causal, window=window,
                                            key_lengths=key_lengths))
    return o.reshape(q.shape[:-1] + (v.shape[-1],)), lse.reshape(q.shape[:-1])


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
    dq, dk, dv = attncore.attention_backward(
        q4, k4, v4, o4, lse.reshape(o4.shape[:3]), do4, scale=scale,
        **placement(q4.shape[0], k4.shape[2], qa, ka, n=n, m=m, causal=causal, window=window,
                    key_lengths=key_lengths))
    return dq.reshape(q.shape), dk.reshape(k.shape), dv.reshape(v.shape)


def merge_all(parts: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """attncore.merge of any number of (o, lse) parts (one is returned as it is)."""
    if len(parts) == 1:
        return parts[0]
    return attncore.merge(*(a for part in parts for a in part))

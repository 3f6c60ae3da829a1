"""The public functions: validate (attncore._validate), allocate the outputs,
call the core once (attncore._core)."""

from __future__ import annotations

import math
from typing import Literal, overload

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from attncore import _core
from attncore import _validate as validate
from attncore._runtime import get_num_threads

__all__ = ["attention", "plain_attention", "scores", "softmax", "merge"]

# ---- the functions ------------------------------------------------------------

# Few query rows (decode) against many keys: split the keys across threads
# and merge (-1: when it pays, 0: never, 1: always).  Tests force each path.
_SPLIT_KV = -1


def _for_core(a: np.ndarray) -> np.ndarray:
    """K or V as the core reads it: a float16 or bfloat16 cache travels as its
    bits (uint16; the core is told which by bf16=)."""
    return a.view(np.uint16) if validate.kv16(a.dtype) else a


# What attention returns depends on return_lse and return_weights: the
# overloads tell a type checker which.


@overload
def attention(q: ArrayLike, k: ArrayLike, v: ArrayLike, *, causal: bool = ...,
              scale: float | None = ..., method: str = ..., block_q: int | None = ...,
              block_k: int | None = ..., return_lse: Literal[False] = ...,
              return_weights: Literal[False] = ...,
              mask: ArrayLike | None = ..., key_lengths: ArrayLike | None = ...,
              window: int | None = ...,
              q_offset: ArrayLike | None = ...,
              k_offset: ArrayLike | None = ...,
              bias: ArrayLike | None = ..., alibi_slopes: ArrayLike | None = ...,
              softcap: float | None = ...,
              sinks: ArrayLike | None = ...,
              out_dtype: DTypeLike | None = ...) -> np.ndarray: ...


@overload
def attention(q: ArrayLike, k: ArrayLike, v: ArrayLike, *, causal: bool = ...,
              scale: float | None = ..., method: str = ..., block_q: int | None = ...,
              block_k: int | None = ..., return_lse: Literal[True],
              return_weights: Literal[False] = ...,
              mask: ArrayLike | None = ..., key_lengths: ArrayLike | None = ...,
              window: int | None = ...,
              q_offset: ArrayLike | None = ...,
              k_offset: ArrayLike | None = ...,
              bias: ArrayLike | None = ..., alibi_slopes: ArrayLike | None = ...,
              softcap: float | None = ...,
              sinks: ArrayLike | None = ...,
              out_dtype: DTypeLike | None = ...) -> tuple[np.ndarray, np.ndarray]: ...


@overload
def attention(q: ArrayLike, k: ArrayLike, v: ArrayLike, *, causal: bool = ...,
              scale: float | None = ..., method: str = ..., block_q: int | None = ...,
              block_k: int | None = ..., return_lse: Literal[False] = ...,
              return_weights: Literal[True],
              mask: ArrayLike | None = ..., key_lengths: ArrayLike | None = ...,
              window: int | None = ...,
              q_offset: ArrayLike | None = ...,
              k_offset: ArrayLike | None = ...,
              bias: ArrayLike | None = ..., alibi_slopes: ArrayLike | None = ...,
              softcap: float | None = ...,
              sinks: ArrayLike | None = ...,
              out_dtype: DTypeLike | None = ...) -> tuple[np.ndarray, np.ndarray]: ...


@overload
def attention(q: ArrayLike, k: ArrayLike, v: ArrayLike, *, causal: bool = ...,
              scale: float | None = ..., method: str = ..., block_q: int | None = ...,
              block_k: int | None = ..., return_lse: Literal[True],
              return_weights: Literal[True],
              mask: ArrayLike | None = ..., key_lengths: ArrayLike | None = ...,
              window: int | None = ...,
              q_offset: ArrayLike | None = ...,
              k_offset: ArrayLike | None = ...,
              bias: ArrayLike | None = ..., alibi_slopes: ArrayLike | None = ...,
              softcap: float | None = ...,
              sinks: ArrayLike | None = ...,
              out_dtype: DTypeLike | None = ...) -> tuple[np.ndarray, np.ndarray, np.ndarray]: ...


@overload
def attention(q: ArrayLike, k: ArrayLike, v: ArrayLike, *, causal: bool = ...,
              scale: float | None = ..., method: str = ..., block_q: int | None = ...,
              block_k: int | None = ..., return_lse: bool = ...,
              return_weights: bool = ...,
              mask: ArrayLike | None = ..., key_lengths: ArrayLike | None = ...,
              window: int | None = ...,
              q_offset: ArrayLike | None = ...,
              k_offset: ArrayLike | None = ...,
              bias: ArrayLike | None = ..., alibi_slopes: ArrayLike | None = ...,
              softcap: float | None = ...,
              sinks: ArrayLike | None = ...,
              out_dtype: DTypeLike | None = ...) -> np.ndarray | tuple[np.ndarray, ...]: ...


def attention(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    *,
    causal: bool = False,
    scale: float | None = None,
    method: str = "flash",
    block_q: int | None = None,
    block_k: int | None = None,
    return_lse: bool = False,
    return_weights: bool = False,
    mask: ArrayLike | None = None,
    key_lengths: ArrayLike | None = None,
    window: int | None = None,
    q_offset: ArrayLike | None = None,
    k_offset: ArrayLike | None = None,
    bias: ArrayLike | None = None,
    alibi_slopes: ArrayLike | None = None,
    softcap: float | None = None,
    sinks: ArrayLike | None = None,
    out_dtype: DTypeLike | None = None,
) -> np.ndarray | tuple[np.ndarray, ...]:
    """Scaled dot-product attention, ``softmax(q·kᵀ·scale)·v``, in the C core.

    Parameters
    ----------
    q : array_like, shape (..., H, n, d_k) or (n, d_k)
    k : array_like, shape (..., H_kv, m, d_k) or (m, d_k)
    v : array_like, shape (..., H_kv, m, d_v) or (m, d_v)
        float32 or float64, all three the same dtype — or 16-bit: k and v
        float16, or bfloat16 (``ml_dtypes.bfloat16``, or its bits as uint16),
        with q float32 (a 16-bit KV cache: the output float32) or of k's
        kind (the output rounded to it, unless ``out_dtype``).  16-bit values
        are widened exactly as they are loaded; the arithmetic, the softmax
        state and the sums are float32.  The batch dims ``...`` equal.
        ``H`` must be a multiple of ``H_kv`` (grouped-query / multi-query
        attention): query head ``h`` reads kv head ``h // (H // H_kv)``.
        ``n != m`` (cross-attention) and ``d_v != d_k`` are fine.  Any strides
        are accepted; the fast path wants the last axis contiguous, anything
        else is copied once.  Inputs are never modified.
    causal : bool
        Bottom-right aligned: query ``i`` sees key ``j`` iff ``j <= i + (m - n)``.
        For ``n == m`` this is the lower triangle; for ``n`` new queries after
        ``m - n`` cached keys it is the KV-cache mask.  (PyTorch's
        ``is_causal`` is top-left aligned, ``j <= i``; the two agree when
        ``n == m``.)  A row that sees no key gives output 0 and lse ``-inf``.
    scale : float, optional
        Positive and finite; default ``1/sqrt(d_k)``.
    method : {"flash", "naive"}
        ``"flash"``: blockwise online softmax (FlashAttention-2 order),
        O(n·d) memory, blocks above the causal diagonal skipped.  With few
        query rows (decode: up to 32 rows per GQA group) it splits the keys
        into chunks processed in parallel, every query head of a group served
        by one pass over its K/V, and merges the chunks (see :func:`merge`).
        ``"naive"``: the n×m score table materialised, O(n·m) memory per head;
        a table that cannot fit raises MemoryError before anything is allocated.
    block_q, block_k : int, optional
        Tile sizes of the flash kernel (default: tuned per instruction set);
        clamped to n and m.  Ignored by ``"naive"``.
    return_lse : bool
        Also return the log-sum-exp of each score row, shape (..., H, n).
    return_weights : bool
        Also return the softmax weights (..., H, n, m); ``method="naive"`` only.
    mask : array_like of bool, optional
        Broadcastable to (..., H, n, m); True = may attend.  Read through its
        broadcast strides, never expanded to the full shape.
    key_lengths : array_like of int, optional
        Shape ``...`` (the batch dims): batch b has ``key_lengths[b]`` real
        keys, the rest is padding that no row sees.  With ``causal`` the
        diagonal is aligned to the last real key, as for a right-padded cache.
    window : int, optional
        With ``causal``: query ``i`` sees keys ``i + (m - n) - window < j <=
        i + (m - n)``.  The blockwise kernel skips every block outside the
        band, so the cost grows as n·window, not n².
    q_offset, k_offset : array_like of int, optional
        With ``causal`` (or ``alibi_slopes``): where the queries and keys sit in their sequence, one
        per batch (shape ``...`` or a scalar).  Query ``i`` is at position
        ``q_offset + i``, key ``j`` at ``k_offset + j``, and the causal and
        window rules compare positions: a key is visible iff its position is
        ≤ the query's (and > the query's − window).  Defaults: ``k_offset =
        0`` and ``q_offset = m - n`` (bottom-right, per batch with
        ``key_lengths``).  A block of queries against a block of keys from
        anywhere in a sequence then sees what the whole causal call would;
        :func:`merge` combines the blocks' ``(out, lse)``.
    bias : array_like of float, optional
        Added to the scaled scores, broadcastable to (..., H, n, m) and read
        through its broadcast strides, never expanded (the blockwise kernel
        reads only the tiles it visits): a relative-position bias, or a float
        mask.  ``-inf`` hides a key exactly as ``mask`` does; huge negative
        values (``finfo.min``) give weight 0 without overflow.  Converted to
        q's dtype.
    alibi_slopes : array_like of float, optional
        One slope per query head (shape (H,)): ALiBi's bias
        ``-slope·|qpos - kpos|`` with the positions of ``q_offset`` /
        ``k_offset`` (bottom-right by default, with or without ``causal``),
        computed in the kernel, never stored.
    softcap : float, optional
        Gemma 2's logit soft-cap: the scaled scores become
        ``softcap·tanh(s / softcap)`` before the bias, ALiBi and the masks.
    sinks : array_like of float, optional
        One logit per query head (shape (H,)), gpt-oss's attention sink: a
        term ``exp(sink)`` in each row's softmax denominator with no value,
        so a row may give weight to nothing.  ``lse`` includes it (so
        :func:`merge` must not see it twice: give it to one part only).
    out_dtype : dtype, optional
        With 16-bit queries, ``np.float32`` keeps the output in float32
        instead of rounding it to the queries' type.  ``lse`` and the weights
        are float32 for 16-bit inputs.

    Returns
    -------
    out : ndarray, shape (..., H, n, d_v), the dtype of q
    lse : ndarray, shape (..., H, n), if ``return_lse``
    weights : ndarray, shape (..., H, n, m), if ``return_weights``

    Notes
    -----
    Cost: 4·B·H·n·m·d FLOPs (about half with ``causal`` and n == m); reads
    the K/V bytes once per query block.  NaN in an input reaches exactly the
    rows that see it: a masked key never affects a row, even where its value
    is inf or NaN.

    Examples
    --------
    >>> import numpy as np, attncore
    >>> rng = np.random.default_rng(0)
    >>> q = rng.standard_normal((8, 128, 64), np.float32)      # (heads, n, d_k)
    >>> k = rng.standard_normal((2, 128, 64), np.float32)      # 2 kv heads: GQA 8/2
    >>> v = rng.standard_normal((2, 128, 64), np.float32)
    >>> attncore.attention(q, k, v, causal=True).shape
    (8, 128, 64)
    >>> out, lse = attncore.attention(q, k, v, return_lse=True)
    >>> lse.shape
    (8, 128)
    >>> ref = attncore.reference.attention(q, k, v, causal=True)   # the NumPy oracle
    >>> bool(np.allclose(attncore.attention(q, k, v, causal=True), ref, atol=1e-5))
    True
    >>> k16, v16 = k.astype(np.float16), v.astype(np.float16)    # a 16-bit KV cache
    >>> attncore.attention(q[:, -1:], k16, v16).dtype           # one decode step
    dtype('float32')
    """
    return _attention(q, k, v, causal=causal, scale=scale, method=method, block_q=block_q,
                      block_k=block_k, return_lse=return_lse, return_weights=return_weights,
                      mask=mask, key_lengths=key_lengths, window=window, q_offset=q_offset,
                      k_offset=k_offset, bias=bias, alibi_slopes=alibi_slopes, softcap=softcap,
                      sinks=sinks, out_dtype=out_dtype)


def _attention(q, k, v, *, causal=False, scale=None, method="flash", block_q=None, block_k=None,
               return_lse=False, return_weights=False, mask=None, key_lengths=None, window=None,
               q_offset=None, k_offset=None, bias=None, alibi_slopes=None, softcap=None,
               sinks=None, split_kv: int | None = None,
               block_counts: np.ndarray | None = None, k_scale: np.ndarray | None = None,
               v_scale: np.ndarray | None = None, out_dtype=None,
               checked: validate.Problem | None = None):
    """:func:`attention` with the keywords of the tests and the teaching code
    (not a stable API).  ``split_kv`` forces the decode path of
    ``method="flash"`` (1), forbids it (0) or leaves it to the kernel (-1;
    ``None``: the module default ``_SPLIT_KV``).  ``block_counts``, an int64
    array of 2, receives the blockwise kernel's own count of the (Q block,
    K block) tiles it computed and of those it had to mask (the rest of the
    grid it skipped); it turns the decode path off.  ``k_scale`` and
    ``v_scale`` make k and v an int8 cache's values (:class:`KVCache`
    ``dtype="int8"``): float32 arrays shaped like k and v without their last
    axis, one scale a token and kv head.  ``checked``: the Problem of q, k and v
    that :func:`validate.cache_problem` made (a KVCache's plain step, no other
    keyword given): the checks of the rest then come to causal alone."""
    int8 = k_scale is not None
    if checked is not None:
        method, p, bq, bk = "flash", checked, 0, 0
        vis = validate.visibility(p, causal)
    else:
        method, p, vis, bq, bk = validate.attention_args(
            q, k, v, causal=causal, scale=scale, method=method, block_q=block_q,
            block_k=block_k, return_weights=return_weights, mask=mask, key_lengths=key_lengths,
            window=window, split_kv=split_kv, block_counts=block_counts, q_offset=q_offset,
            k_offset=k_offset, bias=bias, alibi_slopes=alibi_slopes, softcap=softcap,
            sinks=sinks, int8=int8)
    wide = validate.out_dtype(out_dtype, p)
    B, H, Hkv, n, m, dk, dv = p.shape
    out = np.empty((B, H, n, dv), p.dtype)
    lse = np.empty((B, H, n), p.dtype)
    weights = None
    nt = get_num_threads()
    assert p.v is not None  # attention_args was given v
    k4, v4 = _for_core(p.k), _for_core(p.v)
    bf16 = p.kv16 == "bfloat16"
    if int8:
        ks, vs = (validate.token_scales(s, name, (B, Hkv, m))
                  for s, name in ((k_scale, "k_scale"), (v_scale, "v_scale")))
        split = _SPLIT_KV if split_kv is None else split_kv
        _core.flash_i8(p.q, k4, v4, ks, vs, out, lse, p.scale, vis, bq, bk, nt, split)
    elif (method == "flash" and p.kv16 == "bfloat16" and p.q16 is not None
          and block_counts is None and _core.bf16dot_supported()):
        # bfloat16 q, k, v by the bfloat16 dot products, where they are the faster way
        # (else the float32 q that validation widened goes to the bfloat16-cache kernel)
        split = _SPLIT_KV if split_kv is None else split_kv
        if p.q_half is not None and not wide:  # the kernel rounds each block of rows
            out16 = np.empty((B, H, n, dv), np.uint16)  # to bfloat16 while it is in cache
            _core.flash_bf16in(p.q16, k4, v4, None, lse, p.scale, vis, bq, bk, nt, split,
                               out16)
            out = out16.view(p.q_half)
        else:
            _core.flash_bf16in(p.q16, k4, v4, out, lse, p.scale, vis, bq, bk, nt, split)
    elif method == "flash":
        split = _SPLIT_KV if split_kv is None else split_kv
        if block_counts is not None:
            split = 0  # counting tiles is about the blockwise grid, never decode's chunks
        _core.flash(p.q, k4, v4, out, lse, p.scale, vis, bq, bk, nt, split, block_counts,
                    bf16=bf16)
    else:
        table = B * H * n * m if return_weights else n * m
        validate.check_table(table, p.dtype.itemsize, f"method='naive' with n={n}, m={m}")
        if return_weights:
            weights = np.empty((B, H, n, m), p.dtype)
        _core.naive(p.q, k4, v4, out, lse, weights, p.scale, vis, nt, bf16=bf16)
    if p.q_half is not None and not wide and out.dtype == p.dtype:
        out = validate.to_half(out, p.q_half)  # 16-bit queries: the output rounded to their type
    result = [out.reshape(p.lead + (n, dv))]
    if return_lse:
        result.append(lse.reshape(p.lead + (n,)))
    if weights is not None:
        result.append(weights.reshape(p.lead + (n, m)))
    return result[0] if len(result) == 1 else tuple(result)


@overload
def plain_attention(q: ArrayLike, k: ArrayLike, v: ArrayLike, *, causal: bool = ...,
                    scale: float | None = ..., mask: ArrayLike | None = ...,
                    key_lengths: ArrayLike | None = ..., window: int | None = ...,
                    q_offset: ArrayLike | None = ..., k_offset: ArrayLike | None = ...,
                    bias: ArrayLike | None = ..., alibi_slopes: ArrayLike | None = ...,
                    softcap: float | None = ..., sinks: ArrayLike | None = ...,
                    return_lse: Literal[False] = ...) -> np.ndarray: ...


@overload
def plain_attention(q: ArrayLike, k: ArrayLike, v: ArrayLike, *, causal: bool = ...,
                    scale: float | None = ..., mask: ArrayLike | None = ...,
                    key_lengths: ArrayLike | None = ..., window: int | None = ...,
                    q_offset: ArrayLike | None = ..., k_offset: ArrayLike | None = ...,
                    bias: ArrayLike | None = ..., alibi_slopes: ArrayLike | None = ...,
                    softcap: float | None = ..., sinks: ArrayLike | None = ...,
                    return_lse: Literal[True]) -> tuple[np.ndarray, np.ndarray]: ...


def plain_attention(q: ArrayLike, k: ArrayLike, v: ArrayLike, *, causal: bool = False,
                    scale: float | None = None, mask: ArrayLike | None = None,
                    key_lengths: ArrayLike | None = None, window: int | None = None,
                    q_offset: ArrayLike | None = None, k_offset: ArrayLike | None = None,
                    bias: ArrayLike | None = None, alibi_slopes: ArrayLike | None = None,
                    softcap: float | None = None, sinks: ArrayLike | None = None,
                    return_lse: bool = False) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """Attention by ``csrc/plain.c``: the formula as plain C loops, one thread.

    The readable definition in C — scores, max, exponentials and their sum,
    the weighted mean of the values, one query row at a time — for reading
    next to its source and for checking the fast kernels.  The arguments and
    results are :func:`attention`'s (float32 or float64; no 16-bit cache);
    it is much slower, by design: no SIMD, no tiles, no threads.
    """
    p, vis = validate.plain_args(q, k, v, causal=causal, scale=scale, mask=mask,
                                 key_lengths=key_lengths, window=window, q_offset=q_offset,
                                 k_offset=k_offset, bias=bias, alibi_slopes=alibi_slopes,
                                 softcap=softcap, sinks=sinks)
    B, H, Hkv, n, m, dk, dv = p.shape
    out = np.empty((B, H, n, dv), p.dtype)
    lse = np.empty((B, H, n), p.dtype)
    _core.plain(p.q, p.k, p.v, out, lse, p.scale, vis)
    out = out.reshape(p.lead + (n, dv))
    return (out, lse.reshape(p.lead + (n,))) if return_lse else out


def scores(q: ArrayLike, k: ArrayLike, *, scale: float | None = None, causal: bool = False,
           mask: ArrayLike | None = None, key_lengths: ArrayLike | None = None,
           window: int | None = None, q_offset: ArrayLike | None = None,
           k_offset: ArrayLike | None = None, bias: ArrayLike | None = None,
           alibi_slopes: ArrayLike | None = None, softcap: float | None = None) -> np.ndarray:
    """The scaled score table ``q·kᵀ·scale``, ``-inf`` where a key is hidden
    (by ``causal``, ``window``, ``mask`` or ``key_lengths``, placed by
    ``q_offset`` / ``k_offset``, as in :func:`attention`), after the score
    modifiers ``softcap``, ``bias`` and ``alibi_slopes`` (:func:`attention`).

    Shapes as in :func:`attention`: q (..., H, n, d_k), k (..., H_kv, m, d_k);
    returns (..., H, n, m) in the inputs' dtype.  Cost: 2·B·H·n·m·d_k FLOPs and
    B·H·n·m values of memory (MemoryError up front when they cannot fit).
    """
    p, vis = validate.scores_args(q, k, scale=scale, causal=causal, mask=mask,
                                  key_lengths=key_lengths, window=window, q_offset=q_offset,
                                  k_offset=k_offset, bias=bias, alibi_slopes=alibi_slopes,
                                  softcap=softcap)
    B, H, Hkv, n, m, dk, _ = p.shape
    validate.check_table(B * H * n * m, p.dtype.itemsize, f"the score table with n={n}, m={m}")
    s = np.empty((B, H, n, m), p.dtype)
    _core.scores(p.q, _for_core(p.k), s, p.scale, vis, get_num_threads(),
                 bf16=p.kv16 == "bfloat16")
    return s.reshape(p.lead + (n, m))


def merge(o_a: ArrayLike, lse_a: ArrayLike, o_b: ArrayLike, lse_b: ArrayLike,
          *more: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """Combine attention results over disjoint sets of keys: ``(o_a, lse_a) ⊕ (o_b, lse_b)``.

    If ``o_a, lse_a = attention(q, k_a, v_a, return_lse=True)`` and likewise
    for b, the merge equals attention over the concatenated keys and values:
    ``M = max(lse_a, lse_b)``, ``w = exp(lse - M)``, ``o = (w_a o_a + w_b o_b) /
    (w_a + w_b)``, ``lse = M + log(w_a + w_b)``.  Exact, commutative and
    associative; a part that saw no key (lse = -inf) carries no weight, and
    if none did the result is 0 with lse = -inf.  Give more pairs after the
    first two to merge them all at once (``merge(o1, l1, o2, l2, o3, l3)``).

    Shapes: every o (..., n, d_v), every lse (..., n), one float dtype.
    Returns ``(o, lse)``.  Cost: O(parts · n · d_v).
    """
    outs, lses, shape, dtype = validate.merge_parts((o_a, lse_a, o_b, lse_b) + more)
    rows = math.prod(shape[:-1])
    dv = shape[-1]
    flat_o = [validate.fast_layout(np.ascontiguousarray(o, dtype=dtype)).reshape(rows, dv)
              for o in outs]
    flat_l = [validate.fast_layout(np.ascontiguousarray(lse, dtype=dtype)).reshape(rows)
              for lse in lses]
    nt = get_num_threads()
    while len(flat_o) > 1:  # groups of MERGE_MAX_PARTS, then the merged groups
        step = _core.MERGE_MAX_PARTS
        next_o, next_l = [], []
        for g in range(0, len(flat_o), step):
            out = np.empty((rows, dv), dtype)
            lse = np.empty(rows, dtype)
            _core.merge(flat_o[g:g + step], flat_l[g:g + step], out, lse, nt)
            next_o.append(out)
            next_l.append(lse)
        flat_o, flat_l = next_o, next_l
    return flat_o[0].reshape(shape), flat_l[0].reshape(shape[:-1])


def softmax(x: ArrayLike, axis: int = -1) -> np.ndarray:
    """The numerically stable softmax of x along ``axis``, from the C core.

    ``exp(x - max) / sum(exp(x - max))``: scores of 1e4 do not overflow.  A
    slice of all ``-inf`` (nothing visible) gives zeros, not NaN; NaN in a
    slice makes that slice NaN.  float32 or float64; returns x's dtype and shape.
    """
    a, ax = validate.softmax_args(x, axis)
    moved = validate.fast_layout(np.ascontiguousarray(np.moveaxis(a, ax, -1)))
    rows = moved.reshape(math.prod(moved.shape[:-1]), moved.shape[-1])
    y = np.empty_like(rows)
    _core.softmax(rows, y, np.empty(rows.shape[0], rows.dtype), get_num_threads())
    return np.moveaxis(y.reshape(moved.shape), -1, ax)


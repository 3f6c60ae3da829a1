"""NumPy versions of attncore's functions: the oracle of the tests, and the
readable statement of what the C core computes.

Same signatures, same validation, same output shapes and conventions as the
C-backed functions; computed with plain NumPy in the inputs' precision (pass
float64 arrays for a float64 oracle).  Memory is O(n·m): it always
materialises, whatever ``method`` says.
"""

from __future__ import annotations

from typing import Any, Literal, overload

import numpy as np

from numpy.typing import ArrayLike

from attncore import _validate as validate

__all__ = ["attention", "plain_attention", "attention_backward", "scores", "softmax", "merge",
           "linear_attention", "multi_head_attention"]

_quiet: dict[str, Any] = dict(invalid="ignore", divide="ignore", over="ignore", under="ignore")


def _visible(p: validate.Problem, vis: validate.Visibility) -> np.ndarray:
    """(B, H, n, m): may query i of (batch b, head h) see key j?"""
    B, H, Hkv, n, m, *_ = p.shape
    ms = vis.key_lengths if vis.key_lengths is not None else np.full(B, m)
    mb = ms[:, None, None, None]  # each batch's own key count
    i = np.arange(n)[None, None, :, None]
    j = np.arange(m)[None, None, None, :]
    seen = np.broadcast_to(j < mb, (B, H, n, m))
    if vis.causal:
        # positions: query i at q_offset + i (default m_b - n: bottom-right), key j at k_offset + j
        qo = vis.q_offset if vis.q_offset is not None else ms - n
        ko = vis.k_offset if vis.k_offset is not None else np.zeros(B, np.int64)
        qpos = qo[:, None, None, None] + i
        kpos = ko[:, None, None, None] + j
        seen = seen & (kpos <= qpos)
        if vis.window:
            seen = seen & (kpos > qpos - vis.window)
    if vis.mask is not None:
        seen = seen & vis.full_mask((B, H, n, m))
    if vis.bias is not None:  # a bias of -inf hides a key as the mask does
        seen = seen & ~np.isneginf(np.reshape(vis.bias, (B, H, n, m)))
    return seen


def _distance(p: validate.Problem, vis: validate.Visibility) -> np.ndarray:
    """(B, 1, n, m) query position minus key position (ALiBi's distance)."""
    B, H, Hkv, n, m, *_ = p.shape
    ms = vis.key_lengths if vis.key_lengths is not None else np.full(B, m)
    qo = vis.q_offset if vis.q_offset is not None else ms - n
    ko = vis.k_offset if vis.k_offset is not None else np.zeros(B, np.int64)
    qpos = qo[:, None, None, None] + np.arange(n)[None, None, :, None]
    kpos = ko[:, None, None, None] + np.arange(m)[None, None, None, :]
    return qpos - kpos


def _scores4(p: validate.Problem, vis: validate.Visibility, capped: list | None = None
             ) -> np.ndarray:
    """(B, H, n, m) scores, -inf where hidden; kv head h // group serves query head h.
    The modifiers in their order: soft-cap (its result appended to `capped`
    if given), bias, ALiBi."""
    B, H, Hkv, n, m, dk, _ = p.shape
    k = validate.kv_values(p.k, p.dtype)  # a float16 or bfloat16 cache: the widened values
    k = np.repeat(k, H // Hkv, axis=1) if Hkv else k
    with np.errstate(**_quiet):
        s = np.matmul(p.q, np.swapaxes(k, -1, -2)) * p.dtype.type(p.scale)
        if vis.softcap:
            c = p.dtype.type(vis.softcap)
            s = (c * np.tanh(s / c)).astype(p.dtype)
            if capped is not None:
                capped.append(s)
        if vis.bias is not None:
            s = s + np.reshape(vis.bias, (B, H, n, m))
        if vis.alibi is not None:
            slope = vis.alibi.astype(p.dtype)[None, :, None, None]
            s = s - slope * np.abs(_distance(p, vis)).astype(p.dtype)
    return np.where(_visible(p, vis), s, -np.inf).astype(p.dtype)


def _softmax_last(x: np.ndarray, sinks: np.ndarray | None = None
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Softmax over the last axis and its log-sum-exp; all -inf rows give 0,
    -inf.  sinks (H,): one more logit per row of head h, in the sum only."""
    with np.errstate(**_quiet):
        if sinks is not None:  # the sink as one more column, dropped after the sum
            col = np.broadcast_to(sinks.astype(x.dtype)[None, :, None, None],
                                  x.shape[:-1] + (1,))
            w, lse = _softmax_last(np.concatenate([x, col], axis=-1))
            return w[..., :-1], lse
        mx = np.max(x, axis=-1, keepdims=True, initial=-np.inf)
        safe = np.where(np.isneginf(mx), 0, mx)  # an all -inf row: exp(-inf) = 0, not NaN
        e = np.exp(x - safe)
        total = e.sum(axis=-1, keepdims=True)
        w = np.where(total == 0, 0, e / total)
        lse = (safe + np.log(total))[..., 0]
    return w.astype(x.dtype), lse.astype(x.dtype)


def _weighted_sum(w: np.ndarray, v: np.ndarray, visible: np.ndarray) -> np.ndarray:
    """w @ v over the keys each row may see.  A masked key has weight 0, and
    0·v = 0 unless v is inf or NaN: only then are masked terms left out
    explicitly, so that a key a row cannot see never reaches it.  A visible
    key's inf or NaN does reach the row, whatever its weight."""
    if np.isfinite(v).all():
        return np.matmul(w, v)
    with np.errstate(**_quiet):
        terms = w[..., :, :, None] * v[..., None, :, :]  # (B, H, n, m, dv)
        return np.where(visible[..., None], terms, 0).sum(axis=-2).astype(w.dtype)


def scores(q: ArrayLike, k: ArrayLike, *, scale: float | None = None, causal: bool = False,
           mask: ArrayLike | None = None, key_lengths: ArrayLike | None = None,
           window: int | None = None, q_offset: ArrayLike | None = None,
           k_offset: ArrayLike | None = None, bias: ArrayLike | None = None,
           alibi_slopes: ArrayLike | None = None, softcap: float | None = None) -> np.ndarray:
    """Reference for :func:`attncore.scores`."""
    p, vis = validate.scores_args(q, k, scale=scale, causal=causal, mask=mask,
                                  key_lengths=key_lengths, window=window, q_offset=q_offset,
                                  k_offset=k_offset, bias=bias, alibi_slopes=alibi_slopes,
                                  softcap=softcap)
    B, H, Hkv, n, m, *_ = p.shape
    return _scores4(p, vis).reshape(p.lead + (n, m))


def softmax(x: ArrayLike, axis: int = -1) -> np.ndarray:
    """Reference for :func:`attncore.softmax`."""
    a, axis = validate.softmax_args(x, axis)
    w, _ = _softmax_last(np.moveaxis(a.astype(a.dtype.newbyteorder("=")), axis, -1))
    return np.moveaxis(w, -1, axis)


# What attention returns depends on return_lse and return_weights, as for
# attncore.attention: the overloads tell a type checker which.


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
              sinks: ArrayLike | None = ...) -> np.ndarray: ...


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
              sinks: ArrayLike | None = ...) -> tuple[np.ndarray, np.ndarray]: ...


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
              sinks: ArrayLike | None = ...) -> tuple[np.ndarray, np.ndarray]: ...


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
              sinks: ArrayLike | None = ...) -> tuple[np.ndarray, np.ndarray, np.ndarray]: ...


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
              sinks: ArrayLike | None = ...) -> np.ndarray | tuple[np.ndarray, ...]: ...


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
) -> np.ndarray | tuple[np.ndarray, ...]:
    """Reference for :func:`attncore.attention` (``method`` and block sizes are
    validated, then ignored: the reference always materialises)."""
    method, p, vis, _, _ = validate.attention_args(
        q, k, v, causal=causal, scale=scale, method=method, block_q=block_q, block_k=block_k,
        return_weights=return_weights, mask=mask, key_lengths=key_lengths, window=window,
        q_offset=q_offset, k_offset=k_offset, bias=bias, alibi_slopes=alibi_slopes,
        softcap=softcap, sinks=sinks)
    B, H, Hkv, n, m, dk, dv = p.shape
    w, lse = _softmax_last(_scores4(p, vis), vis.sinks)
    v4 = validate.kv_values(p.v, p.dtype)
    v4 = np.repeat(v4, H // Hkv, axis=1) if Hkv else v4
    out = _weighted_sum(w, v4, _visible(p, vis))
    result = [out.reshape(p.lead + (n, dv))]
    if return_lse:
        result.append(lse.reshape(p.lead + (n,)))
    if return_weights:
        result.append(w.reshape(p.lead + (n, m)))
    return result[0] if len(result) == 1 else tuple(result)


def plain_attention(q: ArrayLike, k: ArrayLike, v: ArrayLike, *, causal: bool = False,
                    scale: float | None = None, mask: ArrayLike | None = None,
                    key_lengths: ArrayLike | None = None, window: int | None = None,
                    q_offset: ArrayLike | None = None, k_offset: ArrayLike | None = None,
                    bias: ArrayLike | None = None, alibi_slopes: ArrayLike | None = None,
                    softcap: float | None = None, sinks: ArrayLike | None = None,
                    return_lse: bool = False) -> np.ndarray | tuple[np.ndarray, ...]:
    """Reference for :func:`attncore.plain_attention`: its checks (float16
    refused), then :func:`attention`."""
    mods = dict(bias=bias, alibi_slopes=alibi_slopes, softcap=softcap, sinks=sinks)
    validate.plain_args(q, k, v, causal=causal, scale=scale, mask=mask, key_lengths=key_lengths,
                        window=window, q_offset=q_offset, k_offset=k_offset, **mods)
    return attention(q, k, v, causal=causal, scale=scale, mask=mask, key_lengths=key_lengths,
                     window=window, q_offset=q_offset, k_offset=k_offset, return_lse=return_lse,
                     **mods)


def merge(o_a: ArrayLike, lse_a: ArrayLike, o_b: ArrayLike, lse_b: ArrayLike,
          *more: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """Reference for :func:`attncore.merge`: the log-sum-exp rule over all parts."""
    outs, lses, shape, dtype = validate.merge_parts((o_a, lse_a, o_b, lse_b) + more)
    o = np.stack([a.astype(dtype) for a in outs])  # (parts, ..., n, dv)
    lse = np.stack([a.astype(dtype) for a in lses])  # (parts, ..., n)
    with np.errstate(**_quiet):
        mx = lse.max(axis=0)
        safe = np.where(np.isneginf(mx), 0, mx)
        w = np.exp(lse - safe)  # parts that saw nothing: exp(-inf) = 0
        total = w.sum(axis=0)
        terms = np.where((w > 0)[..., None], w[..., None] * o, 0)
        out = np.where((total > 0)[..., None] | np.isnan(total)[..., None],
                       terms.sum(axis=0) / total[..., None], 0)
        out_lse = np.where(total > 0, safe + np.log(total), np.where(np.isnan(total), np.nan, -np.inf))
    return out.astype(dtype), out_lse.astype(dtype)


def linear_attention(q: ArrayLike, k: ArrayLike, v: ArrayLike, *, causal: bool = False,
                     feature_map: str = "elu1") -> np.ndarray:
    """Reference for :func:`attncore.linear_attention`, written as the n×m
    table of φ(q)·φ(k) weights it avoids (the definition, not the algorithm)."""
    p, vis = validate.linear_problem(q, k, v, causal, feature_map)
    B, H, Hkv, n, m, dk, dv = p.shape
    phi = lambda x: np.where(x > 0, x + 1, np.exp(np.minimum(x, 0)))  # noqa: E731
    k4 = np.repeat(phi(p.k), H // Hkv, axis=1) if Hkv else phi(p.k)
    v4 = np.repeat(p.v, H // Hkv, axis=1) if Hkv else p.v
    with np.errstate(**_quiet):
        visible = _visible(p, vis)
        w = np.where(visible, np.matmul(phi(p.q), np.swapaxes(k4, -1, -2)), 0)  # (B, H, n, m)
        total = w.sum(axis=-1, keepdims=True)
        # nothing weighed (no visible key, or d_k = 0): 0; NaN stays NaN
        out = np.where(total == 0, 0, _weighted_sum(w, v4, visible) / total)
    return out.astype(p.dtype).reshape(p.lead + (n, dv))


def multi_head_attention(x: ArrayLike, w_q: ArrayLike, w_k: ArrayLike, w_v: ArrayLike,
                         w_o: ArrayLike, *, heads: int, kv_heads: int | None = None,
                         causal: bool = False, scale: float | None = None,
                         mask: ArrayLike | None = None, key_lengths: ArrayLike | None = None,
                         window: int | None = None) -> np.ndarray:
    """Reference for :func:`attncore.multi_head_attention`: NumPy matmuls and
    the reference attention."""
    x, w_q, w_k, w_v, w_o, heads, kv_heads, d_head = validate.mha_args(
        x, w_q, w_k, w_v, w_o, heads=heads, kv_heads=kv_heads)

    def split(t, h):
        return np.swapaxes(t.reshape(t.shape[:-1] + (h, d_head)), -2, -3)

    q, k, v = split(x @ w_q, heads), split(x @ w_k, kv_heads), split(x @ w_v, kv_heads)
    o = attention(q, k, v, causal=causal, scale=scale, mask=mask, key_lengths=key_lengths,
                  window=window)
    return np.swapaxes(o, -2, -3).reshape(x.shape[:-1] + (heads * d_head,)) @ w_o


def attention_backward(q: ArrayLike, k: ArrayLike, v: ArrayLike, out: ArrayLike, lse: ArrayLike,
                       dout: ArrayLike, *, causal: bool = False, scale: float | None = None,
                       window: int | None = None, mask: ArrayLike | None = None,
                       key_lengths: ArrayLike | None = None, q_offset: ArrayLike | None = None,
                       k_offset: ArrayLike | None = None, bias: ArrayLike | None = None,
                       alibi_slopes: ArrayLike | None = None, softcap: float | None = None,
                       sinks: ArrayLike | None = None, return_dbias: bool = False,
                       return_dsinks: bool = False,
                       method: str = "flash") -> tuple[np.ndarray, ...]:
    """Reference for :func:`attncore.attention_backward`: the gradients of
    ``out = softmax(q·kᵀ·scale)·v`` written out on the materialised table.

    With P the weights and D_i = Σ_c dout_ic·out_ic:
    dV = Pᵀ·dout, dP = dout·Vᵀ, dS = P∘(dP − D), dQ = dS·K·scale, dK = dSᵀ·Q·scale;
    for GQA the dK and dV of a kv head are summed over its query heads.  A
    soft-cap multiplies dS by 1 − tanh² on the way to dQ and dK; d(bias) is dS
    summed over the bias's broadcast dims; a sink is a key of value 0, whose
    column of dS is its gradient."""
    _, p, vis, arrays = validate.backward_args(q, k, v, out, lse, dout, causal=causal, scale=scale,
                                               window=window, mask=mask, key_lengths=key_lengths,
                                               method=method, q_offset=q_offset,
                                               k_offset=k_offset, bias=bias,
                                               alibi_slopes=alibi_slopes, softcap=softcap,
                                               sinks=sinks)
    B, H, Hkv, n, m, dk, dv = p.shape
    g = H // Hkv if Hkv else 1
    o4, do4, lse4 = arrays["out"], arrays["dout"], arrays["lse"]
    capped: list = []
    s = _scores4(p, vis, capped)
    with np.errstate(**_quiet):
        P = np.where(np.isneginf(lse4)[..., None], 0, np.exp(s - lse4[..., None]))
    k4 = np.repeat(p.k, g, axis=1)
    v4 = np.repeat(p.v, g, axis=1)
    dV = np.swapaxes(P, -1, -2) @ do4
    dP = do4 @ np.swapaxes(v4, -1, -2)
    D = np.sum(do4 * o4, axis=-1, keepdims=True)
    dS = P * (dP - D)
    extra = []
    if return_dbias:
        if vis.bias is None:
            raise ValueError("return_dbias=True needs a bias")
        db = dS.reshape(p.lead + (n, m))
        shape = vis.bias_shape
        db = db.sum(axis=tuple(range(db.ndim - len(shape))))
        for axis, size in enumerate(shape):
            if size == 1:
                db = db.sum(axis=axis, keepdims=True)
        extra.append(db.astype(p.dtype).reshape(shape))
    if return_dsinks:
        if vis.sinks is None:
            raise ValueError("return_dsinks=True needs sinks")
        with np.errstate(**_quiet):  # the sink's column: weight exp(sink - lse), value 0
            p_sink = np.exp(vis.sinks[None, :, None] - lse4)
        extra.append((p_sink * (0 - D[..., 0])).sum(axis=(0, 2)).astype(p.dtype))
    if capped:
        dS = dS * (1 - (capped[0] / p.dtype.type(vis.softcap)) ** 2)
    dQ = dS @ k4 * p.scale
    dK = np.swapaxes(dS, -1, -2) @ p.q * p.scale
    dK = dK.reshape(B, Hkv, g, m, dk).sum(axis=2)
    dV = dV.reshape(B, Hkv, g, m, dv).sum(axis=2)
    qshape, kshape, vshape = np.shape(q), np.shape(k), np.shape(v)
    return (dQ.astype(p.dtype).reshape(qshape), dK.astype(p.dtype).reshape(kshape),
            dV.astype(p.dtype).reshape(vshape), *extra)

"""The functions built on the forward kernels: the gradient (attention_backward),
the kernelised variant (linear_attention) and a layer (multi_head_attention)."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from attncore import _core
from attncore import _validate as validate
from attncore._api import attention, scores
from attncore._runtime import get_num_threads

__all__ = ["attention_backward", "linear_attention", "multi_head_attention"]


def attention_backward(q: ArrayLike, k: ArrayLike, v: ArrayLike, out: ArrayLike, lse: ArrayLike,
                       dout: ArrayLike, *, causal: bool = False, scale: float | None = None,
                       window: int | None = None, mask: ArrayLike | None = None,
                       key_lengths: ArrayLike | None = None, q_offset: ArrayLike | None = None,
                       k_offset: ArrayLike | None = None, bias: ArrayLike | None = None,
                       alibi_slopes: ArrayLike | None = None, softcap: float | None = None,
                       sinks: ArrayLike | None = None, return_dbias: bool = False,
                       return_dsinks: bool = False,
                       method: str = "flash") -> tuple[np.ndarray, ...]:
    """Gradients of ``out = attention(q, k, v, ...)``: returns ``(dq, dk, dv)``,
    the shapes and dtypes of q, k, v, given ``out`` and ``lse`` from the
    forward call (``return_lse=True``) and ``dout`` = ∂loss/∂out.

    The score modifiers are :func:`attention`'s and must be the forward's.
    The soft-cap's derivative ``1 − tanh²`` reaches dq and dk.
    ``return_dbias=True`` appends d(bias), the gradient of the scores, summed
    over the dims the bias broadcasts along (its own shape: a learned bias);
    it costs a dense (..., H, n, m) array while it is summed.
    ``return_dsinks=True`` appends d(sinks), shape (H,):
    ``−Σ_i exp(sink − lse_i)·D_i``.  ALiBi's slopes are constants (no
    gradient).

    ``method="flash"`` recomputes ``P = exp(S − lse)`` block by block,
    ``D = rowsum(dout ∘ out)``, ``dS = P ∘ (dP − D)``, with O(n·d) extra memory
    and no atomics, in one of two ways the C core chooses
    (``csrc/backward_body.h``).  With at least two (batch, kv head) pairs a
    thread, one pass: each thread owns whole (batch, kv head) pairs and walks
    their K blocks, writing dK, dV and the dQ of the group's query heads.
    With fewer (one long sequence, few heads), two passes: one over K blocks
    writes dK and dV (summed over the query heads of a GQA group), a second
    over Q blocks writes dQ, at the price of computing P and dP twice.  Both
    sum dQ in the same order, so the result is the same bits either way.
    Blocks outside the causal / window band are skipped.  ``method="naive"``
    runs the same algorithm with one tile the size of the whole n×m table.
    The other arguments are :func:`attention`'s.  float32 or float64; or
    16-bit q, k and v of one kind (float16 or bfloat16), with ``out`` and
    ``dout`` of that kind or float32 and ``lse`` float32: widened exactly,
    the gradients computed in float32 and rounded to the types of q, k and v
    (d(bias) and d(sinks) float32).  A float32 q over a 16-bit cache is not
    taken (a cache is not trained).
    """
    half = validate.kv16(np.asarray(q).dtype)
    if half:
        wide, kinds = validate.widen_half(half, q=q, k=k, v=v, out=out, dout=dout)
        grads = attention_backward(
            wide["q"], wide["k"], wide["v"], wide["out"], lse, wide["dout"], causal=causal,
            scale=scale, window=window, mask=mask, key_lengths=key_lengths, q_offset=q_offset,
            k_offset=k_offset, bias=bias, alibi_slopes=alibi_slopes, softcap=softcap,
            sinks=sinks, return_dbias=return_dbias, return_dsinks=return_dsinks, method=method)
        return tuple(validate.to_half(g, kinds[name]) for g, name in zip(grads, "qkv")) + \
            tuple(grads[3:])
    method, p, vis, arrays = validate.backward_args(
        q, k, v, out, lse, dout, causal=causal, scale=scale, window=window, mask=mask,
        key_lengths=key_lengths, method=method, q_offset=q_offset, k_offset=k_offset,
        bias=bias, alibi_slopes=alibi_slopes, softcap=softcap, sinks=sinks)
    B, H, Hkv, n, m, dk, dv = p.shape
    if return_dbias and vis.bias is None:
        raise ValueError("return_dbias=True needs a bias")
    if return_dsinks and vis.sinks is None:
        raise ValueError("return_dsinks=True needs sinks")
    if method == "naive":
        validate.check_table(2 * n * m + n * m, p.dtype.itemsize,
                             f"method='naive' with n={n}, m={m}")
        bq, bk = max(n, 1), max(m, 1)
    else:
        bq = bk = 0
    dq4 = np.empty((B, H, n, dk), p.dtype)
    dk4 = np.empty((B, Hkv, m, dk), p.dtype)
    dv4 = np.empty((B, Hkv, m, dv), p.dtype)
    dbias = None
    if return_dbias:
        validate.check_table(B * H * n * m, p.dtype.itemsize, f"d(bias) with n={n}, m={m}")
        dbias = np.zeros((B, H, n, m), p.dtype)
    _core.backward(p.q, p.k, p.v, arrays["out"], arrays["lse"], arrays["dout"], dq4, dk4, dv4,
                   p.scale, vis, bq, bk, get_num_threads(), dbias)
    result = [dq4.reshape(np.shape(q)), dk4.reshape(np.shape(k)), dv4.reshape(np.shape(v))]
    if dbias is not None:
        result.append(validate.sum_to_shape(dbias.reshape(p.lead + (n, m)), vis.bias_shape))
    if return_dsinks:
        result.append(validate.sink_gradient(vis.sinks, arrays["lse"], arrays["out"],
                                             arrays["dout"]).astype(p.dtype))
    return tuple(result)


def linear_attention(q: ArrayLike, k: ArrayLike, v: ArrayLike, *, causal: bool = False,
                     feature_map: str = "elu1") -> np.ndarray:
    """Kernelised ("linear") attention: the softmax's exp(q·k) replaced by
    φ(q)·φ(k) with the feature map φ = elu(x) + 1 (``feature_map="elu1"``).

    ``out_i = φ(q_i)ᵀ S / (φ(q_i)·z)`` with ``S = Σ_j φ(k_j) v_jᵀ`` and
    ``z = Σ_j φ(k_j)``: the sums over keys are shared by every row, so the cost
    is O(n·d·d_v) time and O(d·d_v) state instead of O(n·m·d) and an n×m
    table.  ``causal`` (bottom-right aligned, as in :func:`attention`) turns S
    and z into running prefix sums.  Shapes and dtypes as in
    :func:`attention` (float32 or float64); returns (..., H, n, d_v).  A row
    that sees no key gives 0.
    """
    p, vis = validate.linear_problem(q, k, v, causal, feature_map)
    B, H, Hkv, n, m, dk, dv = p.shape
    out = np.empty((B, H, n, dv), p.dtype)
    _core.linear(p.q, p.k, p.v, out, vis, get_num_threads())
    return out.reshape(p.lead + (n, dv))


def _project(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """x @ w, (..., n, d_in) @ (d_in, d_out), on the C core: the score kernel
    with scale 1 against wᵀ (broadcast over the batch, never copied)."""
    lead = x.shape[:-2]
    x4 = x.reshape(lead + (1,) + x.shape[-2:]) if lead else x[None]
    wt = np.broadcast_to(w.T, lead + (1,) + w.T.shape) if lead else w.T[None]
    return scores(x4, wt, scale=1.0)[..., 0, :, :] if lead else scores(x4, wt, scale=1.0)[0]


def multi_head_attention(x: ArrayLike, w_q: ArrayLike, w_k: ArrayLike, w_v: ArrayLike,
                         w_o: ArrayLike, *, heads: int, kv_heads: int | None = None,
                         causal: bool = False, scale: float | None = None,
                         mask: ArrayLike | None = None, key_lengths: ArrayLike | None = None,
                         window: int | None = None) -> np.ndarray:
    """A multi-head self-attention layer on the C core.

    ``q = x·w_q``, ``k = x·w_k``, ``v = x·w_v`` split into ``heads`` (query) and
    ``kv_heads`` (key/value, default ``heads``; fewer is GQA) heads of
    ``d_head`` dims, :func:`attention` per head, the heads concatenated, then
    ``·w_o``.  x (..., n, d_model); w_q (d_model, heads·d_head); w_k and w_v
    (d_model, kv_heads·d_head); w_o (heads·d_head, d_out).  The projections
    run on the core's own matrix kernels (no BLAS).  The other arguments are
    :func:`attention`'s.  Returns (..., n, d_out).  Parameters: 3·d_model² +
    d_model² for d_head·heads = d_model, whatever the number of heads.
    """
    x, w_q, w_k, w_v, w_o, heads, kv_heads, d_head = validate.mha_args(
        x, w_q, w_k, w_v, w_o, heads=heads, kv_heads=kv_heads)

    def split(t, h):  # (..., n, h·d_head) -> (..., h, n, d_head)
        return np.swapaxes(t.reshape(t.shape[:-1] + (h, d_head)), -2, -3)

    q, k, v = (split(_project(x, w), h) for w, h in ((w_q, heads), (w_k, kv_heads),
                                                      (w_v, kv_heads)))
    o = attention(q, k, v, causal=causal, scale=scale, mask=mask, key_lengths=key_lengths,
                  window=window)
    o = np.swapaxes(o, -2, -3).reshape(x.shape[:-1] + (heads * d_head,))
    return _project(np.ascontiguousarray(o), w_o)

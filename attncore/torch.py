"""attncore as a drop-in for ``torch.nn.functional.scaled_dot_product_attention``.

    from attncore.torch import scaled_dot_product_attention
    out = scaled_dot_product_attention(q, k, v, is_causal=True)   # q, k, v: CPU tensors
    out.sum().backward()                                            # dq, dk, dv by attncore

torch's signature and torch's semantics, on CPU float32 and float64 tensors: the
forward is attncore's blockwise kernel (:func:`attncore.attention`), the backward
:func:`attncore.attention_backward`.  Both are registered as ``torch.library``
custom ops (``attncore::sdpa`` and ``attncore::sdpa_backward``) with fake
(shape-only) implementations and an autograd formula, so the function works
under ``torch.autograd.gradcheck`` and ``torch.compile(fullgraph=True)``.

Where torch and attncore differ, this module follows torch:

- ``is_causal`` is **top-left** aligned: query ``i`` sees key ``j`` iff ``j <= i``
  (attncore's own ``causal`` is bottom-right, ``j <= i + (m - n)``); it is passed
  as attncore's causal rule with ``q_offset = k_offset = 0``, so the blockwise
  kernel skips the blocks above the diagonal for any n and m.
- ``attn_mask`` is boolean (``True`` = takes part) or a float mask that is
  *added* to the scores: attncore's ``bias``, read through its broadcast strides
  (``-inf`` hides a key, ``finfo.min`` gives weight 0).  A float mask that
  requires grad gets its gradient (summed over the dims it broadcasts along).
- Beyond torch's arguments: ``alibi_slopes`` (one per query head),
  ``softcap`` (Gemma 2's logit soft-cap) and ``sinks`` (one logit per query
  head, gpt-oss; its gradient flows when it requires grad), as
  :func:`attncore.attention` takes them.
- ``enable_gqa=True`` lets ``key``/``value`` have fewer heads than ``query``
  (query head ``h`` reads kv head ``h // (H / H_kv)``, as torch repeats them).
- A row that sees no key: attncore gives 0 (torch's math kernel gives NaN).

bfloat16 and float16 tensors are computed as :func:`attncore.attention` computes
16-bit inputs: widened exactly, float32 arithmetic and softmax state, the output
(and the gradients) rounded to the tensors' dtype; a float ``attn_mask`` of their
dtype is added in float32.

Not supported, each a clear error naming the argument: ``dropout_p > 0``; tensors
not on the CPU; dtypes other than float32, float64, bfloat16 and float16;
``attn_mask`` together with ``is_causal`` (torch refuses that too).
Importing this module imports torch (the ``attncore[torch]`` extra).
"""

from __future__ import annotations

import math

import numpy as np
import torch

import attncore

__all__ = ["scaled_dot_product_attention"]

_DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.float16)
_HALF = (torch.bfloat16, torch.float16)


def _keywords(mask: torch.Tensor | None, causal: bool, alibi: torch.Tensor | None,
              softcap: float | None, sinks: torch.Tensor | None) -> dict:
    """attncore's keywords for torch's (is_causal, attn_mask) and the modifiers:
    a boolean mask or a float bias, read through their broadcast strides, and
    top-left causal as positions (both sequences start at 0)."""
    kw: dict = {"softcap": softcap}
    if causal or alibi is not None:  # positions from 0 on both sides: torch's top-left
        kw.update(causal=causal, q_offset=0, k_offset=0)
    if alibi is not None:
        kw["alibi_slopes"] = alibi.detach().numpy()
    if sinks is not None:
        kw["sinks"] = sinks.detach().numpy()
    if mask is not None:
        if mask.dtype == torch.bool:
            kw["mask"] = mask.detach().numpy()
        else:  # a 16-bit float mask as the float32 bias the 16-bit kernels add
            kw["bias"] = (mask.detach().float() if mask.dtype in _HALF else mask.detach()).numpy()
    return kw


def _np(t: torch.Tensor) -> np.ndarray:
    """A tensor as attncore takes it: bfloat16 as its bits (uint16), without a copy."""
    t = t.detach()
    return (t.view(torch.uint16) if t.dtype == torch.bfloat16 else t).numpy()


def _torch(a: np.ndarray, like: torch.Tensor) -> torch.Tensor:
    """attncore's result as a tensor of like's dtype (bfloat16 from its bits)."""
    t = torch.from_numpy(np.ascontiguousarray(a))
    return t.view(torch.bfloat16) if like.dtype == torch.bfloat16 else t


def _lse_dtype(query: torch.Tensor) -> torch.dtype:
    """lse is float32 for 16-bit queries (their softmax state is float32)."""
    return torch.float32 if query.dtype in _HALF else query.dtype


@torch.library.custom_op("attncore::sdpa", mutates_args=())
def _sdpa(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
          attn_mask: torch.Tensor | None, is_causal: bool, scale: float | None,
          alibi_slopes: torch.Tensor | None, softcap: float | None,
          sinks: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    kw = _keywords(attn_mask, is_causal, alibi_slopes, softcap, sinks)
    out, lse = attncore.attention(_np(query), _np(key), _np(value), scale=scale,
                                  return_lse=True, **kw)
    return _torch(out, query), torch.from_numpy(lse)


@_sdpa.register_fake
def _(query, key, value, attn_mask, is_causal, scale, alibi_slopes, softcap, sinks):
    out = query.new_empty(query.shape[:-1] + value.shape[-1:])
    return out, query.new_empty(query.shape[:-1], dtype=_lse_dtype(query))


@torch.library.custom_op("attncore::sdpa_backward", mutates_args=())
def _sdpa_backward(dout: torch.Tensor, query: torch.Tensor, key: torch.Tensor,
                   value: torch.Tensor, out: torch.Tensor, lse: torch.Tensor,
                   attn_mask: torch.Tensor | None, is_causal: bool, scale: float | None,
                   alibi_slopes: torch.Tensor | None, softcap: float | None,
                   sinks: torch.Tensor | None, mask_grad: bool, sinks_grad: bool
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor,
                              torch.Tensor]:
    """(dq, dk, dv, d attn_mask, d sinks); the last two empty when not asked."""
    kw = _keywords(attn_mask, is_causal, alibi_slopes, softcap, sinks)
    grads = attncore.attention_backward(_np(query), _np(key), _np(value), _np(out), _np(lse),
                                        _np(dout), scale=scale, return_dbias=mask_grad,
                                        return_dsinks=sinks_grad, **kw)
    dq, dk, dv = grads[:3]
    rest = list(grads[3:])
    dmask = (torch.from_numpy(np.ascontiguousarray(rest.pop(0))).to(attn_mask.dtype) if mask_grad
             else query.new_empty(0))
    dsinks = (torch.from_numpy(rest.pop(0)).to(sinks.dtype) if sinks_grad
              else query.new_empty(0))
    return _torch(dq, query), _torch(dk, key), _torch(dv, value), dmask, dsinks


@_sdpa_backward.register_fake
def _(dout, query, key, value, out, lse, attn_mask, is_causal, scale, alibi_slopes, softcap,
      sinks, mask_grad, sinks_grad):
    return (torch.empty_like(query), torch.empty_like(key), torch.empty_like(value),
            torch.empty_like(attn_mask) if mask_grad else query.new_empty(0),
            torch.empty_like(sinks) if sinks_grad else query.new_empty(0))


def _setup_context(ctx, inputs, output):
    query, key, value, attn_mask, is_causal, scale, alibi_slopes, softcap, sinks = inputs
    out, lse = output
    ctx.save_for_backward(query, key, value, out, lse, attn_mask, alibi_slopes, sinks)
    ctx.is_causal, ctx.scale, ctx.softcap = is_causal, scale, softcap


def _backward(ctx, dout, dlse):
    query, key, value, out, lse, attn_mask, alibi_slopes, sinks = ctx.saved_tensors
    mask_grad = bool(ctx.needs_input_grad[3])  # a float mask that requires grad
    sinks_grad = bool(ctx.needs_input_grad[8])
    # lse is an internal output (never returned to the caller): its gradient is zero
    dq, dk, dv, dmask, dsinks = _sdpa_backward(
        dout, query, key, value, out, lse, attn_mask, ctx.is_causal, ctx.scale, alibi_slopes,
        ctx.softcap, sinks, mask_grad, sinks_grad)
    return (dq, dk, dv, dmask if mask_grad else None, None, None, None, None,
            dsinks if sinks_grad else None)


_sdpa.register_autograd(_backward, setup_context=_setup_context)


def _check(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
           attn_mask: torch.Tensor | None, dropout_p: float, is_causal: bool,
           scale: float | None, enable_gqa: bool) -> None:
    for name, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.device.type != "cpu":
            raise ValueError(f"{name} is on {t.device}; attncore runs on the CPU only")
        if t.dtype not in _DTYPES:
            raise TypeError(f"{name} has dtype {t.dtype}; attncore.torch takes float32, "
                            "float64, bfloat16 or float16 tensors")
        if t.dim() < 2:
            raise ValueError(f"{name} must have at least 2 dimensions (..., L, E), "
                             f"got shape {tuple(t.shape)}")
    if not (query.dtype == key.dtype == value.dtype):
        raise TypeError(f"query, key and value must have one dtype, got {query.dtype}, "
                        f"{key.dtype}, {value.dtype}")
    if dropout_p != 0.0:
        raise ValueError(f"dropout_p={dropout_p}: attncore has no attention dropout; "
                         "use dropout_p=0.0")
    if attn_mask is not None:
        if not isinstance(attn_mask, torch.Tensor):
            raise TypeError(f"attn_mask must be a torch.Tensor or None, got "
                            f"{type(attn_mask).__name__}")
        if is_causal:
            raise ValueError("attn_mask and is_causal=True together: give one (as torch does)")
        if attn_mask.device.type != "cpu":
            raise ValueError(f"attn_mask is on {attn_mask.device}; attncore runs on the CPU only")
        if attn_mask.dtype != torch.bool and attn_mask.dtype != query.dtype:
            raise TypeError(f"attn_mask has dtype {attn_mask.dtype}; it must be bool or the "
                            f"dtype of query ({query.dtype})")
    if scale is not None and not (isinstance(scale, (int, float)) and math.isfinite(scale)
                                  and scale > 0):
        raise ValueError(f"scale must be a positive finite number or None, got {scale!r}")
    hq, hkv = (query.shape[-3] if query.dim() > 2 else 1), (key.shape[-3] if key.dim() > 2 else 1)
    if hq != hkv and not enable_gqa:
        raise ValueError(f"query has {hq} heads and key {hkv}: set enable_gqa=True for grouped-"
                         "query attention")


def scaled_dot_product_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                                 attn_mask: torch.Tensor | None = None, dropout_p: float = 0.0,
                                 is_causal: bool = False, scale: float | None = None,
                                 enable_gqa: bool = False, *,
                                 alibi_slopes: torch.Tensor | None = None,
                                 softcap: float | None = None,
                                 sinks: torch.Tensor | None = None) -> torch.Tensor:
    """``torch.nn.functional.scaled_dot_product_attention`` computed by attncore.

    query (..., H, L, E), key (..., H_kv, S, E), value (..., H_kv, S, E_v): CPU
    float32, float64, bfloat16 or float16 tensors of one dtype; returns
    (..., H, L, E_v) of that dtype.  The
    arguments mean what they mean for torch (see the module's docstring for
    the few differences and what is refused); gradients flow to query, key and
    value through :func:`attncore.attention_backward` (and to a float
    ``attn_mask`` or ``sinks`` that requires grad).  ``alibi_slopes``,
    ``softcap`` and ``sinks`` are attncore's score modifiers
    (:func:`attncore.attention`); torch's own function has none of them.
    """
    _check(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    for name, t in (("alibi_slopes", alibi_slopes), ("sinks", sinks)):
        if t is not None and not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor or None, got {type(t).__name__}")
    out, _ = _sdpa(query, key, value, attn_mask, bool(is_causal),
                   None if scale is None else float(scale), alibi_slopes,
                   None if softcap is None else float(softcap), sinks)
    return out

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
  (attncore's own ``causal`` is bottom-right, ``j <= i + (m - n)``; the two agree
  when ``n == m``, which is the case that takes attncore's causal kernel with its
  block skipping — for ``n != m`` the triangle is passed as a mask).
- ``attn_mask`` is boolean (``True`` = takes part) or a float mask that is
  *added* to the scores.  attncore's kernels take boolean masks only, so a float
  mask must hold ``0`` (takes part) and ``-inf`` (does not), as torch's own
  ``Transformer.generate_square_subsequent_mask`` makes; any other value (a
  learned bias, ALiBi) raises ``ValueError``.  A float mask gets no gradient.
- ``enable_gqa=True`` lets ``key``/``value`` have fewer heads than ``query``
  (query head ``h`` reads kv head ``h // (H / H_kv)``, as torch repeats them).
- A row that sees no key: attncore gives 0 (torch's math kernel gives NaN).

Not supported, each a clear error naming the argument: ``dropout_p > 0``; tensors
not on the CPU; dtypes other than float32/float64 (bfloat16 and float16 queries
included); ``attn_mask`` together with ``is_causal`` (torch refuses that too).
Importing this module imports torch (the ``attncore[torch]`` extra).
"""

from __future__ import annotations

import math

import numpy as np
import torch

import attncore

__all__ = ["scaled_dot_product_attention"]

_DTYPES = (torch.float32, torch.float64)


def _visibility(mask: torch.Tensor | None, causal: bool, n: int, m: int):
    """attncore's (causal, mask) for torch's (is_causal, attn_mask): a boolean
    NumPy mask, read through its broadcast strides, or the causal kernel."""
    if causal:
        if n == m:
            return True, None
        return False, np.tri(n, m, dtype=bool)  # top-left: j <= i
    if mask is None:
        return False, None
    a = mask.detach().numpy()
    if a.dtype == np.bool_:
        return False, a
    visible = a == 0
    if not np.all(visible | (a == -np.inf)):
        raise ValueError("attn_mask: a float mask may only hold 0 (takes part) and -inf (does "
                         "not); attncore's kernels take no additive bias")
    return False, visible


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().numpy()


@torch.library.custom_op("attncore::sdpa", mutates_args=())
def _sdpa(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
          attn_mask: torch.Tensor | None, is_causal: bool,
          scale: float | None) -> tuple[torch.Tensor, torch.Tensor]:
    n, m = query.shape[-2], key.shape[-2]
    causal, mask = _visibility(attn_mask, is_causal, n, m)
    out, lse = attncore.attention(_np(query), _np(key), _np(value), causal=causal, mask=mask,
                                  scale=scale, return_lse=True)
    return torch.from_numpy(out), torch.from_numpy(lse)


@_sdpa.register_fake
def _(query, key, value, attn_mask, is_causal, scale):
    out = query.new_empty(query.shape[:-1] + value.shape[-1:])
    return out, query.new_empty(query.shape[:-1])


@torch.library.custom_op("attncore::sdpa_backward", mutates_args=())
def _sdpa_backward(dout: torch.Tensor, query: torch.Tensor, key: torch.Tensor,
                   value: torch.Tensor, out: torch.Tensor, lse: torch.Tensor,
                   attn_mask: torch.Tensor | None, is_causal: bool,
                   scale: float | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    n, m = query.shape[-2], key.shape[-2]
    causal, mask = _visibility(attn_mask, is_causal, n, m)
    dq, dk, dv = attncore.attention_backward(_np(query), _np(key), _np(value), _np(out),
                                             _np(lse), _np(dout), causal=causal, mask=mask,
                                             scale=scale)
    return torch.from_numpy(dq), torch.from_numpy(dk), torch.from_numpy(dv)


@_sdpa_backward.register_fake
def _(dout, query, key, value, out, lse, attn_mask, is_causal, scale):
    return torch.empty_like(query), torch.empty_like(key), torch.empty_like(value)


def _setup_context(ctx, inputs, output):
    query, key, value, attn_mask, is_causal, scale = inputs
    out, lse = output
    ctx.save_for_backward(query, key, value, out, lse, attn_mask)
    ctx.is_causal, ctx.scale = is_causal, scale


def _backward(ctx, dout, dlse):
    query, key, value, out, lse, attn_mask = ctx.saved_tensors
    # lse is an internal output (never returned to the caller): its gradient is zero
    dq, dk, dv = _sdpa_backward(dout, query, key, value, out, lse, attn_mask,
                                ctx.is_causal, ctx.scale)
    return dq, dk, dv, None, None, None


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
            raise TypeError(f"{name} has dtype {t.dtype}; attncore.torch takes float32 or "
                            "float64 tensors")
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
        if attn_mask.requires_grad:
            raise ValueError("attn_mask requires grad; attncore gives a float mask no gradient")
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
                                 enable_gqa: bool = False) -> torch.Tensor:
    """``torch.nn.functional.scaled_dot_product_attention`` computed by attncore.

    query (..., H, L, E), key (..., H_kv, S, E), value (..., H_kv, S, E_v): CPU
    float32 or float64 tensors of one dtype; returns (..., H, L, E_v).  The
    arguments mean what they mean for torch (see the module's docstring for
    the few differences and what is refused); gradients flow to query, key and
    value through :func:`attncore.attention_backward`.
    """
    _check(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    out, _ = _sdpa(query, key, value, attn_mask, bool(is_causal),
                   None if scale is None else float(scale))
    return out

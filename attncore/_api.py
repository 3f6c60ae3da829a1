"""The public functions: validate, allocate the outputs, call the core once."""

from __future__ import annotations

import math
import os
import threading

import numpy as np

from attncore import _core
from attncore import _isa
from attncore import _validate as V

__all__ = ["attention", "attention_backward", "scores", "softmax", "merge", "linear_attention",
           "multi_head_attention", "set_num_threads",
           "get_num_threads", "info"]

# ---- threads ------------------------------------------------------------------

_lock = threading.Lock()


def _default_threads() -> int:
    env = os.environ.get("ATTNCORE_NUM_THREADS")
    if env:
        try:
            n = int(env)
        except ValueError:
            raise ValueError(f"ATTNCORE_NUM_THREADS must be a positive integer, got {env!r}") from None
        if n < 1:
            raise ValueError(f"ATTNCORE_NUM_THREADS must be a positive integer, got {env!r}")
        return n
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


_num_threads = _default_threads()


def set_num_threads(n: int) -> None:
    """Set the number of OpenMP threads every later call uses (n >= 1).

    Calls already running keep the count they started with.  Without OpenMP
    the core runs on one thread whatever is set here.
    """
    global _num_threads
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    with _lock:
        _num_threads = int(n)


def get_num_threads() -> int:
    """The thread count calls use: set_num_threads(), else ATTNCORE_NUM_THREADS,
    else the CPUs this process may run on."""
    return _num_threads


def info() -> dict:
    """What this build is and runs: version, micro-kernels, OpenMP, threads, flags."""
    from attncore import __version__

    bq32, bk32 = _core.default_blocks(4)
    bq64, bk64 = _core.default_blocks(8)
    return {
        "version": __version__,
        "isa": _core.isa(),
        "isa_available": _isa.available(),
        "openmp": _core.openmp(),
        "threads": get_num_threads(),
        "cflags": _core.CFLAGS,
        "default_blocks": {"float32": (bq32, bk32), "float64": (bq64, bk64)},
    }


# ---- the functions ------------------------------------------------------------

# Few query rows (decode) against many keys: split the keys across threads
# and merge (-1: when it pays, 0: never, 1: always).  Tests force each path.
_SPLIT_KV = -1


def _kv_for_core(p):
    """K and V as the core reads them: float16 travels as its bits (uint16)."""
    if not p.kv_half:
        return p.k, p.v
    return p.k.view(np.uint16), (p.v.view(np.uint16) if p.v is not None else None)


def attention(
    q,
    k,
    v,
    *,
    causal: bool = False,
    scale: float | None = None,
    method: str = "flash",
    block_q: int | None = None,
    block_k: int | None = None,
    return_lse: bool = False,
    return_weights: bool = False,
    mask=None,
    key_lengths=None,
    window: int | None = None,
):
    """Scaled dot-product attention, ``softmax(q·kᵀ·scale)·v``, in the C core.

    Parameters
    ----------
    q : array_like, shape (..., H, n, d_k) or (n, d_k)
    k : array_like, shape (..., H_kv, m, d_k) or (m, d_k)
    v : array_like, shape (..., H_kv, m, d_v) or (m, d_v)
        float32 or float64, all three the same dtype — or a float16 KV cache
        (k and v float16 with float32 q: converted as they are loaded, the
        arithmetic and the output float32); the batch dims ``...`` equal.  ``H`` must be a multiple of ``H_kv`` (grouped-query / multi-query
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

    Returns
    -------
    out : ndarray, shape (..., H, n, d_v), the dtype of the inputs
    lse : ndarray, shape (..., H, n), if ``return_lse``
    weights : ndarray, shape (..., H, n, m), if ``return_weights``

    Notes
    -----
    Cost: 4·B·H·n·m·d FLOPs (about half with ``causal`` and n == m); reads
    the K/V bytes once per query block.  NaN in an input reaches exactly the
    rows that see it: a masked key never affects a row, even where its value
    is inf or NaN.
    """
    method = V.method_name(method)
    p = V.problem(q, k, v, scale=scale)
    vis = V.visibility(p, causal, window, mask, key_lengths)
    bq, bk = V.block_size(block_q, "block_q"), V.block_size(block_k, "block_k")
    if return_weights and method != "naive":
        raise ValueError(f"return_weights=True needs method='naive', got method={method!r}")
    B, H, Hkv, n, m, dk, dv = p.shape
    out = np.empty((B, H, n, dv), p.dtype)
    lse = np.empty((B, H, n), p.dtype)
    weights = None
    nt = get_num_threads()
    k4, v4 = _kv_for_core(p)
    if method == "flash":
        vis.split_kv = _SPLIT_KV
        _core.flash(p.q, k4, v4, out, lse, p.scale, vis, bq, bk, nt)
    else:
        table = B * H * n * m if return_weights else n * m
        V.check_table(table, p.dtype.itemsize, f"method='naive' with n={n}, m={m}")
        if return_weights:
            weights = np.empty((B, H, n, m), p.dtype)
        _core.naive(p.q, k4, v4, out, lse, weights, p.scale, vis, nt)
    result = [out.reshape(p.lead + (n, dv))]
    if return_lse:
        result.append(lse.reshape(p.lead + (n,)))
    if return_weights:
        result.append(weights.reshape(p.lead + (n, m)))
    return result[0] if len(result) == 1 else tuple(result)


def attention_backward(q, k, v, out, lse, dout, *, causal: bool = False,
                       scale: float | None = None, window: int | None = None, mask=None,
                       key_lengths=None, method: str = "flash"):
    """Gradients of ``out = attention(q, k, v, ...)``: returns ``(dq, dk, dv)``,
    the shapes and dtypes of q, k, v, given ``out`` and ``lse`` from the
    forward call (``return_lse=True``) and ``dout`` = ∂loss/∂out.

    ``method="flash"`` recomputes ``P = exp(S − lse)`` block by block,
    ``D = rowsum(dout ∘ out)``, ``dS = P ∘ (dP − D)``, with O(n·d) extra memory:
    one pass over K blocks writes dK and dV (summed over the query heads of a
    GQA group), a second over Q blocks writes dQ — no atomics, at the price of
    computing P and dP twice.  Blocks outside the causal / window band are
    skipped.  ``method="naive"`` runs the same algorithm with one tile the size
    of the whole n×m table.  The other arguments are :func:`attention`'s;
    float32 or float64 (not float16).
    """
    method = V.method_name(method)
    p = V.problem(q, k, v, scale=scale)
    V.no_half(p, "attention_backward")
    vis = V.visibility(p, causal, window, mask, key_lengths)
    B, H, Hkv, n, m, dk, dv = p.shape
    want = {"out": p.lead + (n, dv), "lse": p.lead + (n,), "dout": p.lead + (n, dv)}
    arrays = {}
    for name, arr in (("out", out), ("lse", lse), ("dout", dout)):
        a = V.as_float_array(arr, name)
        if a.dtype.newbyteorder("=") != p.dtype:
            raise TypeError(f"{name} has dtype {a.dtype} but q has {p.dtype}")
        if a.shape != want[name]:
            raise ValueError(f"{name} must have shape {want[name]}, got {a.shape}")
        arrays[name] = V.fast_layout(np.ascontiguousarray(a, dtype=p.dtype)).reshape(
            (B, H, n) + a.shape[len(p.lead) + 1:])
    if method == "naive":
        V.check_table(2 * n * m + n * m, p.dtype.itemsize, f"method='naive' with n={n}, m={m}")
        bq, bk = max(n, 1), max(m, 1)
    else:
        bq = bk = 0
    dq4 = np.empty((B, H, n, dk), p.dtype)
    dk4 = np.empty((B, Hkv, m, dk), p.dtype)
    dv4 = np.empty((B, Hkv, m, dv), p.dtype)
    _core.backward(p.q, p.k, p.v, arrays["out"], arrays["lse"], arrays["dout"], dq4, dk4, dv4,
                   p.scale, vis, bq, bk, get_num_threads())
    return (dq4.reshape(np.shape(q)), dk4.reshape(np.shape(k)), dv4.reshape(np.shape(v)))


def linear_attention(q, k, v, *, causal: bool = False, feature_map: str = "elu1"):
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
    p, vis = V.linear_problem(q, k, v, causal, feature_map)
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


def multi_head_attention(x, w_q, w_k, w_v, w_o, *, heads: int, kv_heads: int | None = None,
                         causal: bool = False, scale: float | None = None, mask=None,
                         key_lengths=None, window: int | None = None):
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
    heads = V.positive_int(heads, "heads")
    kv_heads = heads if kv_heads is None else V.positive_int(kv_heads, "kv_heads")
    arrays = {"x": V.as_float_array(x, "x"), "w_q": V.as_float_array(w_q, "w_q"),
              "w_k": V.as_float_array(w_k, "w_k"), "w_v": V.as_float_array(w_v, "w_v"),
              "w_o": V.as_float_array(w_o, "w_o")}
    V.common_dtype(**arrays)
    x, w_q, w_k, w_v, w_o = arrays.values()
    if x.ndim < 2:
        raise ValueError(f"x must have shape (..., n, d_model), got {x.shape}")
    d_model = x.shape[-1]
    for name, w in (("w_q", w_q), ("w_k", w_k), ("w_v", w_v), ("w_o", w_o)):
        if w.ndim != 2:
            raise ValueError(f"{name} must be a 2-D matrix, got shape {w.shape}")
    if heads % kv_heads:
        raise ValueError(f"heads ({heads}) must be a multiple of kv_heads ({kv_heads})")
    if w_q.shape[0] != d_model or w_q.shape[1] % heads:
        raise ValueError(f"w_q must have shape ({d_model}, heads·d_head) with heads={heads}, "
                         f"got {w_q.shape}")
    d_head = w_q.shape[1] // heads
    for name, w in (("w_k", w_k), ("w_v", w_v)):
        if w.shape != (d_model, kv_heads * d_head):
            raise ValueError(f"{name} must have shape ({d_model}, {kv_heads * d_head}) "
                             f"(kv_heads·d_head), got {w.shape}")
    if w_o.shape[0] != heads * d_head:
        raise ValueError(f"w_o must have {heads * d_head} rows (heads·d_head), got {w_o.shape}")

    def split(t, h):  # (..., n, h·d_head) -> (..., h, n, d_head)
        return np.swapaxes(t.reshape(t.shape[:-1] + (h, d_head)), -2, -3)

    q, k, v = (split(_project(x, w), h) for w, h in ((w_q, heads), (w_k, kv_heads),
                                                      (w_v, kv_heads)))
    o = attention(q, k, v, causal=causal, scale=scale, mask=mask, key_lengths=key_lengths,
                  window=window)
    o = np.swapaxes(o, -2, -3).reshape(x.shape[:-1] + (heads * d_head,))
    return _project(np.ascontiguousarray(o), w_o)


def _flash_counted(q, k, v, *, causal=False, window=None, block_q=None, block_k=None):
    """attention(method="flash") that also returns the kernel's own count of the
    (Q block, K block) tiles it computed and of those it masked: (out, computed,
    masked).  Blocks it skipped are the rest of the grid.  For teaching."""
    p = V.problem(q, k, v)
    vis = V.visibility(p, causal, window)
    vis.split_kv = 0  # the blockwise grid, not decode's chunks
    B, H, Hkv, n, m, dk, dv = p.shape
    out = np.empty((B, H, n, dv), p.dtype)
    lse = np.empty((B, H, n), p.dtype)
    counts = np.zeros(2, np.int64)
    k4, v4 = _kv_for_core(p)
    _core.flash(p.q, k4, v4, out, lse, p.scale, vis, V.block_size(block_q, "block_q"),
                V.block_size(block_k, "block_k"), get_num_threads(), counts)
    return out.reshape(p.lead + (n, dv)), int(counts[0]), int(counts[1])


def scores(q, k, *, scale: float | None = None, causal: bool = False, mask=None,
           key_lengths=None, window: int | None = None) -> np.ndarray:
    """The scaled score table ``q·kᵀ·scale``, ``-inf`` where a key is hidden
    (by ``causal``, ``window``, ``mask`` or ``key_lengths``, as in :func:`attention`).

    Shapes as in :func:`attention`: q (..., H, n, d_k), k (..., H_kv, m, d_k);
    returns (..., H, n, m) in the inputs' dtype.  Cost: 2·B·H·n·m·d_k FLOPs and
    B·H·n·m values of memory (MemoryError up front when they cannot fit).
    """
    p = V.problem(q, k, scale=scale)
    vis = V.visibility(p, causal, window, mask, key_lengths)
    B, H, Hkv, n, m, dk, _ = p.shape
    V.check_table(B * H * n * m, p.dtype.itemsize, f"the score table with n={n}, m={m}")
    s = np.empty((B, H, n, m), p.dtype)
    _core.scores(p.q, _kv_for_core(p)[0], s, p.scale, vis, get_num_threads())
    return s.reshape(p.lead + (n, m))


def merge(o_a, lse_a, o_b, lse_b, *more):
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
    outs, lses, shape, dtype = V.merge_parts((o_a, lse_a, o_b, lse_b) + more)
    rows = math.prod(shape[:-1])
    dv = shape[-1]
    flat_o = [V.fast_layout(np.ascontiguousarray(o, dtype=dtype)).reshape(rows, dv) for o in outs]
    flat_l = [V.fast_layout(np.ascontiguousarray(lse, dtype=dtype)).reshape(rows) for lse in lses]
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


def softmax(x, axis: int = -1) -> np.ndarray:
    """The numerically stable softmax of x along ``axis``, from the C core.

    ``exp(x - max) / sum(exp(x - max))``: scores of 1e4 do not overflow.  A
    slice of all ``-inf`` (nothing visible) gives zeros, not NaN; NaN in a
    slice makes that slice NaN.  float32 or float64; returns x's dtype and shape.
    """
    a = V.as_float_array(x, "x")
    if a.ndim == 0:
        raise ValueError("x must have at least one dimension, got a 0-d array")
    if isinstance(axis, (bool, np.bool_)) or not isinstance(axis, (int, np.integer)):
        raise ValueError(f"axis must be an integer, got {axis!r}")
    if not -a.ndim <= axis < a.ndim:
        raise ValueError(f"axis {axis} is out of range for x of shape {a.shape}")
    ax = int(axis) % a.ndim
    moved = V.fast_layout(np.ascontiguousarray(np.moveaxis(a, ax, -1)))
    rows = moved.reshape(math.prod(moved.shape[:-1]), moved.shape[-1])
    y = np.empty_like(rows)
    _core.softmax(rows, y, np.empty(rows.shape[0], rows.dtype), get_num_threads())
    return np.moveaxis(y.reshape(moved.shape), -1, ax)


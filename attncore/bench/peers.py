"""The peers attncore is measured against, and each method as a no-argument
callable: attncore's blockwise and naive kernels, a NumPy materialised
implementation (BLAS matmuls) and PyTorch's ``scaled_dot_product_attention``
when torch is importable."""

from __future__ import annotations

import math

import numpy as np

import attncore
from attncore.bench.cases import Case


METHODS = ("attncore-flash", "attncore-naive", "numpy", "torch")


def numpy_attention(q, k, v, causal: bool = False, window: int | None = None):
    """Materialised attention in NumPy, as one would write it: BLAS matmuls
    and in-place softmax, one head at a time (so memory is one table); kv head
    h // (H // H_kv) serves query head h."""
    B, H, n, d = q.shape
    Hkv, m = k.shape[1], k.shape[2]
    scale = q.dtype.type(1 / math.sqrt(d))
    out = np.empty(q.shape[:3] + (v.shape[3],), q.dtype)
    hidden = None
    if causal:
        hidden = np.triu(np.ones((n, m), bool), 1 + m - n)
        if window:
            hidden |= np.tril(np.ones((n, m), bool), m - n - window)
    for b in range(B):
        for h in range(H):
            kh, vh = k[b, h * Hkv // H], v[b, h * Hkv // H]
            if kh.dtype == np.uint16:  # a bfloat16 cache, as its bits: NumPy needs floats
                kh, vh = attncore.from_bfloat16(kh), attncore.from_bfloat16(vh)
            s = q[b, h] @ kh.T
            s *= scale
            if hidden is not None:
                s[hidden] = -np.inf
            s -= s.max(axis=1, keepdims=True)
            np.exp(s, out=s)
            s /= s.sum(axis=1, keepdims=True)
            out[b, h] = s @ vh
    return out


def torch_available() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def _torch_runner(q, k, v, causal):
    import torch
    import torch.nn.functional as F

    tq, tk, tv = (torch.from_numpy(a) for a in (q, k, v))
    # bfloat16 as its bits (q too, for bfloat16 inputs)
    tq, tk, tv = (t.view(torch.bfloat16) if t.dtype == torch.uint16 else t for t in (tq, tk, tv))
    if tk.dtype != tq.dtype:  # a 16-bit cache: torch wants one dtype, so all 16-bit
        tq = tq.to(tk.dtype)
    gqa = tq.shape[1] != tk.shape[1]
    # torch's is_causal is top-left; attncore's bottom-right.  They agree for
    # n == m, and for n = 1 (decode) causal changes nothing.
    causal = causal and tq.shape[2] > 1

    def run():
        with torch.inference_mode():
            return F.scaled_dot_product_attention(tq, tk, tv, is_causal=causal, enable_gqa=gqa)

    return run


def _backward_runner(method, case, q, k, v):
    """The gradients of one prefill, given its output: what each peer's
    backward pass costs on its own."""
    rng = np.random.default_rng(1)
    dout = rng.standard_normal(q.shape[:-1] + (v.shape[-1],)).astype(q.dtype)
    if method in ("attncore-flash", "attncore-naive"):
        meth = "flash" if method == "attncore-flash" else "naive"
        out, lse = attncore.attention(q, k, v, causal=case.causal, return_lse=True)
        return lambda: attncore.attention_backward(q, k, v, out, lse, dout, causal=case.causal,
                                                   method=meth)
    if method == "numpy":  # the materialised gradients, NumPy's BLAS
        out, lse = attncore.attention(q, k, v, causal=case.causal, return_lse=True)
        return lambda: attncore.reference.attention_backward(q, k, v, out, lse, dout,
                                                             causal=case.causal)
    if method == "torch":
        if not torch_available():
            return None
        import torch
        import torch.nn.functional as F

        tq, tk, tv = (torch.from_numpy(a).requires_grad_() for a in (q, k, v))
        out = F.scaled_dot_product_attention(tq, tk, tv, is_causal=case.causal)
        tdo = torch.from_numpy(dout)

        def run():
            tq.grad = tk.grad = tv.grad = None
            out.backward(tdo, retain_graph=True)
            return tq.grad

        return run
    return None


def runner(method: str, case: Case, inputs):
    """A no-argument callable for one method on one case, or None to skip."""
    q, k, v = inputs
    kw = {"causal": case.causal, "window": case.window}
    if case.regime == "backward":
        return _backward_runner(method, case, q, k, v)
    if case.kv == "int8":  # an int8 cache, as KVCache(dtype="int8") reads it: no peer has one
        if method != "attncore-flash":
            return None
        from attncore._api import _attention

        (k8, ks), (v8, vs) = k, v
        return lambda: _attention(q, k8, v8, k_scale=ks, v_scale=vs, **kw)
    if method == "attncore-flash":
        return lambda: attncore.attention(q, k, v, **kw)
    if method == "attncore-naive":
        if case.regime == "decode":  # one row: nothing to materialise that teaches
            return None
        return lambda: attncore.attention(q, k, v, method="naive", **kw)
    if case.window:  # the peers have no banded kernel: only attncore is timed
        return None
    if method == "numpy":
        if case.dtype == "bfloat16":  # NumPy has no bfloat16 arithmetic to compare
            return None
        return lambda: numpy_attention(q, k, v, case.causal)
    if method == "torch":
        return _torch_runner(q, k, v, case.causal) if torch_available() else None
    raise ValueError(f"unknown method {method!r}; expected one of {METHODS}")


def fits(method: str, case: Case) -> bool:
    """Whether a materialising method's table fits comfortably in memory."""
    if method not in ("attncore-naive", "numpy"):
        return True
    from attncore._runtime import memory_limit

    return 3 * case.n * case.m * case.itemsize < memory_limit() // 2

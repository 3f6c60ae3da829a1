"""attention_backward against the reference and against central finite differences."""

import numpy as np
import pytest

import attncore
from helpers import assert_close, qkv, tol


def grads(method, q, k, v, do, **kw):
    out, lse = attncore.attention(q, k, v, return_lse=True, **kw)
    return attncore.attention_backward(q, k, v, out, lse, do, method=method, **kw), (out, lse)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("method", ["flash", "naive"])
@pytest.mark.parametrize("H,Hkv,n,m", [(1, 1, 1, 1), (2, 2, 17, 33), (4, 2, 33, 17), (4, 1, 130, 129),
                                       (2, 1, 3, 300), (2, 2, 65, 65)])
def test_backward_matches_reference(isa, rng, dtype, method, H, Hkv, n, m):
    q, k, v = qkv(rng, B=(2,), H=H, Hkv=Hkv, n=n, m=m, dk=16, dv=8, dtype=dtype)
    do = rng.standard_normal(q.shape[:-1] + (8,)).astype(dtype)
    for kw in (dict(), dict(causal=True), dict(causal=True, window=20)):
        (dq, dk, dv), (out, lse) = grads(method, q, k, v, do, **kw)
        want = attncore.reference.attention_backward(
            *(a.astype(np.float64) for a in (q, k, v, out, lse, do)), **kw)
        for got, ref, like in zip((dq, dk, dv), want, (q, k, v)):
            assert got.shape == like.shape and got.dtype == dtype
            assert_close(got, ref, 16 * tol(dtype, m, 16) * (1 + np.abs(ref).max()))


def test_backward_matches_finite_differences(isa, rng):
    q, k, v = qkv(rng, B=(1,), H=2, Hkv=1, n=5, m=7, dk=3, dv=2)
    do = rng.standard_normal((1, 2, 5, 2))
    mask = rng.random((5, 7)) < 0.8
    for kw in (dict(), dict(causal=True), dict(mask=mask), dict(causal=True, window=3)):
        (dq, dk, dv), _ = grads("flash", q, k, v, do, **kw)
        loss = lambda q, k, v: float(np.sum(attncore.attention(q, k, v, **kw) * do))  # noqa: E731
        eps = 1e-6
        for name, x, g in (("q", q, dq), ("k", k, dk), ("v", v, dv)):
            num = np.zeros_like(x)
            for idx in np.ndindex(x.shape):
                hi, lo = x.copy(), x.copy()
                hi[idx] += eps
                lo[idx] -= eps
                args = {"q": q, "k": k, "v": v}
                args[name] = hi
                f_hi = loss(**args)
                args[name] = lo
                num[idx] = (f_hi - loss(**args)) / (2 * eps)
            assert_close(g, num, 1e-7)


def test_fully_masked_rows_give_zero_gradients(isa, rng):
    q, k, v = qkv(rng, n=6, m=4, dk=4)  # causal with n > m: rows 0, 1 see nothing
    do = rng.standard_normal((6, 4))
    (dq, dk, dv), (out, lse) = grads("flash", q, k, v, do, causal=True)
    assert np.all(dq[:2] == 0) and np.isneginf(lse[:2]).all()
    lengths = np.array([0, 4])
    q2, k2, v2 = qkv(rng, B=(2,), H=1, n=3, m=4, dk=4)
    do2 = rng.standard_normal((2, 1, 3, 4))
    (dq2, dk2, dv2), _ = grads("flash", q2, k2, v2, do2, key_lengths=lengths)
    assert np.all(dq2[0] == 0) and np.all(dk2[0] == 0) and np.all(dv2[0] == 0)


def test_gradient_descent_reduces_a_loss(rng):
    # fit v so that attention reproduces a target: a few plain gradient steps
    q, k, v = qkv(rng, n=16, m=16, dk=8)
    target = rng.standard_normal(v.shape)
    losses = []
    for _ in range(20):
        out, lse = attncore.attention(q, k, v, causal=True, return_lse=True)
        losses.append(float(np.sum((out - target) ** 2)))
        dq, dk, dv = attncore.attention_backward(q, k, v, out, lse, 2 * (out - target), causal=True)
        q, k, v = q - 0.1 * dq, k - 0.1 * dk, v - 0.5 * dv
    assert losses[-1] < 0.5 * losses[0]


def test_backward_errors(rng):
    q, k, v = qkv(rng, n=4, m=4, dk=4)
    out, lse = attncore.attention(q, k, v, return_lse=True)
    with pytest.raises(ValueError, match=r"dout must have shape \(4, 4\)"):
        attncore.attention_backward(q, k, v, out, lse, np.zeros((4, 5)))
    with pytest.raises(TypeError, match=r"out has dtype float32 but q has float64"):
        attncore.attention_backward(q, k, v, out.astype(np.float32), lse, out)
    h = k.astype(np.float16)
    with pytest.raises(TypeError, match=r"float32 or float64"):
        attncore.attention_backward(q.astype(np.float32), h, h, out.astype(np.float32),
                                    lse.astype(np.float32), out.astype(np.float32))


def test_one_pass_and_two_pass_backward_give_the_same_bits(rng):
    """Enough (batch, kv head) pairs for every thread: one pass, each task
    owning its group's dQ; too few: two passes.  dQ sums its K blocks in the
    same order either way."""
    q, k, v = qkv(rng, B=(1,), H=4, Hkv=2, n=300, m=300, dk=16, dv=8, dtype=np.float32)
    out, lse = attncore.attention(q, k, v, causal=True, return_lse=True)
    do = rng.standard_normal(out.shape).astype(np.float32)
    before = attncore.get_num_threads()
    try:
        attncore.set_num_threads(1)  # 2 pairs, 1 thread: one pass
        one = attncore.attention_backward(q, k, v, out, lse, do, causal=True)
        attncore.set_num_threads(2)  # 2 pairs, 2 threads: two passes
        two = attncore.attention_backward(q, k, v, out, lse, do, causal=True)
    finally:
        attncore.set_num_threads(before)
    for a, b in zip(one, two):
        assert np.array_equal(a, b)

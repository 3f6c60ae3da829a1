"""hypothesis properties of the kernels, on generated shapes."""

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import attncore
from helpers import assert_close, tol

dims = st.integers(1, 70)
dtypes = st.sampled_from([np.float32, np.float64])


@st.composite
def problems(draw):
    Hkv = draw(st.integers(1, 3))
    H = Hkv * draw(st.integers(1, 3))
    n, m, dk, dv = draw(dims), draw(dims), draw(st.integers(1, 40)), draw(st.integers(1, 40))
    dtype = draw(dtypes)
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((H, n, dk)).astype(dtype)
    k = rng.standard_normal((Hkv, m, dk)).astype(dtype)
    v = rng.standard_normal((Hkv, m, dv)).astype(dtype)
    return q, k, v


@given(problems(), st.booleans(), st.integers(1, 80), st.integers(1, 80))
def test_blockwise_equals_naive(isa, p, causal, bq, bk):
    q, k, v = p
    m, d = k.shape[-2], q.shape[-1]
    flash, lse_f = attncore.attention(q, k, v, causal=causal, block_q=bq, block_k=bk,
                                      return_lse=True)
    naive, lse_n = attncore.attention(q, k, v, causal=causal, method="naive", return_lse=True)
    assert_close(flash, naive, 2 * tol(q.dtype, m, d))
    assert_close(lse_f, lse_n, 8 * tol(q.dtype, m, d))


@given(st.integers(1, 50), st.integers(1, 200), dtypes, st.floats(-1e4, 1e4),
       st.integers(0, 2**32 - 1))
def test_softmax_rows_sum_to_one_and_ignore_shifts(isa, rows, cols, dtype, shift, seed):
    x = (np.random.default_rng(seed).standard_normal((rows, cols)) * 5).astype(dtype)
    p = attncore.softmax(x)
    eps = np.finfo(dtype).eps
    np.testing.assert_allclose(p.sum(-1), 1, atol=4 * eps * np.sqrt(cols))
    assert (p >= 0).all()
    # softmax(x + c) == softmax(x): the shift moves the max by the same c.
    # Rounding x + c costs up to |c|·eps in the scores, hence the tolerance.
    shifted = attncore.softmax((x.astype(np.float64) + shift).astype(dtype))
    np.testing.assert_allclose(shifted, p, atol=8 * eps * (abs(shift) + 30))


@given(problems(), st.integers(0, 2**32 - 1))
def test_permutation_equivariance_without_causal(isa, p, seed):
    q, k, v = p
    m, d = k.shape[-2], q.shape[-1]
    rng = np.random.default_rng(seed)
    pq, pk = rng.permutation(q.shape[-2]), rng.permutation(m)
    out = attncore.attention(q, k, v)
    # permuting the keys and values together changes nothing; permuting the
    # queries permutes the output rows
    out2 = attncore.attention(q[:, pq], k[:, pk], v[:, pk])
    assert_close(out2, out[:, pq], 2 * tol(q.dtype, m, d))


@given(problems(), st.integers(0, 2**32 - 1), st.sampled_from(["flash", "naive"]))
def test_causal_row_ignores_later_keys(isa, p, seed, method):
    q, k, v = p
    n, m = q.shape[-2], k.shape[-2]
    i = np.random.default_rng(seed).integers(n)
    last_seen = i + (m - n)  # row i sees keys j <= last_seen
    k2, v2 = k.copy(), v.copy()
    k2[:, max(last_seen + 1, 0):] = 1e3
    v2[:, max(last_seen + 1, 0):] = np.nan
    a = attncore.attention(q, k, v, causal=True, method=method, block_q=7, block_k=5)
    b = attncore.attention(q, k2, v2, causal=True, method=method, block_q=7, block_k=5)
    assert np.array_equal(a[:, i], b[:, i])


@given(problems(), st.integers(0, 2**32 - 1), st.booleans(), st.booleans(),
       st.integers(1, 80), st.integers(1, 80))
def test_blockwise_equals_reference_under_masks(isa, p, seed, use_window, use_mask, bq, bk):
    q, k, v = p
    n, m, d = q.shape[-2], k.shape[-2], q.shape[-1]
    rng = np.random.default_rng(seed)
    kw = {"causal": use_window or bool(rng.integers(2))}
    if use_window:
        kw["window"] = int(rng.integers(1, m + 3))
    if use_mask:
        kw["mask"] = rng.random((n, m)) < 0.7
    want = attncore.reference.attention(q.astype(np.float64), k.astype(np.float64),
                                        v.astype(np.float64), **kw)
    got = attncore.attention(q, k, v, block_q=bq, block_k=bk, **kw)
    assert_close(got, want, 2 * tol(q.dtype, m, d))

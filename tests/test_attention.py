"""attention / scores / softmax against the NumPy reference, per ISA and dtype."""

import numpy as np
import pytest

import attncore
from helpers import EDGE_SIZES, assert_close, qkv, reference, tol

DTYPES = (np.float32, np.float64)
METHODS = ("flash", "naive")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("causal", (False, True))
@pytest.mark.parametrize("n", EDGE_SIZES)
def test_sizes_around_widths_and_blocks(isa, rng, dtype, causal, n):
    for m in sorted({1, 17, 64, 129, n}):
        q, k, v = qkv(rng, H=2, n=n, m=m, dk=16, dv=24, dtype=dtype)
        want, want_lse = reference(q, k, v, causal=causal, return_lse=True)
        for method in METHODS:
            out, lse = attncore.attention(q, k, v, causal=causal, method=method, return_lse=True)
            assert out.dtype == dtype and lse.dtype == dtype
            assert_close(out, want, tol(dtype, m, 16))
            assert_close(lse, want_lse, 4 * tol(dtype, m, 16))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("d", (1, 2, 3, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65, 128, 129))
def test_head_dims(isa, rng, dtype, d):
    q, k, v = qkv(rng, H=1, n=33, m=40, dk=d, dv=(d % 7) + 1, dtype=dtype)
    for causal in (False, True):
        want = reference(q, k, v, causal=causal)
        for method in METHODS:
            assert_close(attncore.attention(q, k, v, causal=causal, method=method), want,
                         tol(dtype, 40, d))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dv", (1, 7, 8, 15, 16, 17, 31, 32, 33, 47, 48, 63, 64, 65, 96, 128, 129))
def test_value_dims_around_pv_tiles(isa, rng, dtype, dv):
    # P·V tiles are 6 rows × up to 4 vectors (64 floats): rows and columns
    # on both sides of every tile edge
    for n in (5, 6, 7, 13):
        q, k, v = qkv(rng, H=1, n=n, m=37, dk=8, dv=dv, dtype=dtype)
        want = reference(q, k, v, causal=True)
        for method in METHODS:
            assert_close(attncore.attention(q, k, v, causal=True, method=method), want,
                         tol(dtype, 37, 8))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("block_q,block_k", [(1, 1), (5, 7), (16, 200), (64, 3), (200, 64), (7, 64)])
def test_block_sizes_that_do_not_divide(isa, rng, dtype, block_q, block_k):
    q, k, v = qkv(rng, B=(2,), H=2, n=101, m=97, dk=12, dtype=dtype)
    for causal in (False, True):
        want, want_lse = reference(q, k, v, causal=causal, return_lse=True)
        out, lse = attncore.attention(q, k, v, causal=causal, block_q=block_q, block_k=block_k,
                                      return_lse=True)
        assert_close(out, want, tol(dtype, 97, 12))
        assert_close(lse, want_lse, 4 * tol(dtype, 97, 12))


@pytest.mark.parametrize("H,Hkv", [(4, 4), (4, 2), (8, 1), (6, 3)])
@pytest.mark.parametrize("method", METHODS)
def test_gqa_and_mqa(isa, rng, H, Hkv, method):
    q, k, v = qkv(rng, B=(3,), H=H, Hkv=Hkv, n=19, m=45, dk=8, dv=5)
    for causal in (False, True):
        assert_close(attncore.attention(q, k, v, causal=causal, method=method),
                     reference(q, k, v, causal=causal), 1e-12)
    # each query head of a group reads the same kv head: h // (H // Hkv)
    g = H // Hkv
    expanded = attncore.attention(q, np.repeat(k, g, axis=-3), np.repeat(v, g, axis=-3),
                                  method=method)
    assert_close(attncore.attention(q, k, v, method=method), expanded, 1e-13)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("n,m", [(5, 40), (40, 5), (1, 64), (64, 1), (33, 33)])
def test_causal_is_bottom_right(isa, rng, method, n, m):
    q, k, v = qkv(rng, n=n, m=m, dk=4)
    out, lse, w = attncore.attention(q, k, v, causal=True, method="naive", return_lse=True,
                                     return_weights=True)
    i, j = np.arange(n)[:, None], np.arange(m)[None, :]
    visible = j <= i + (m - n)
    assert np.all(w[~visible] == 0)
    blind = ~visible.any(axis=1)  # n > m: the first n - m rows see nothing
    assert blind.sum() == max(n - m, 0)
    assert np.all(out[blind] == 0) and np.all(np.isneginf(lse[blind]))
    got = attncore.attention(q, k, v, causal=True, method=method)
    assert_close(got, out, 1e-13)
    # n == m is the lower triangle, i.e. PyTorch's top-left is_causal
    if n == m:
        assert np.array_equal(visible, np.tril(np.ones((n, n), bool)))


@pytest.mark.parametrize("method", METHODS)
def test_rank_2_3_4_5_inputs(isa, rng, method):
    for B in [(), (3,), (2, 3)]:
        for H in (1, 2):
            q, k, v = qkv(rng, B=B, H=H, n=9, m=11, dk=6, dv=3)
            out, lse = attncore.attention(q, k, v, method=method, return_lse=True)
            assert out.shape == q.shape[:-1] + (3,) and lse.shape == q.shape[:-1]
            assert_close(out, reference(q, k, v), 1e-13)


def test_weights_are_returned_by_naive(isa, rng):
    q, k, v = qkv(rng, B=(2,), H=2, n=13, m=21, dk=8)
    out, w = attncore.attention(q, k, v, method="naive", causal=True, return_weights=True)
    want_out, want_w = attncore.reference.attention(q, k, v, causal=True, method="naive",
                                                    return_weights=True)
    assert_close(w, want_w, 1e-14)
    assert_close(out, want_out, 1e-13)
    np.testing.assert_allclose(w.sum(-1), 1, atol=1e-14)


@pytest.mark.parametrize("dtype", DTYPES)
def test_scores(isa, rng, dtype):
    q, k, _ = qkv(rng, B=(2,), H=4, Hkv=2, n=37, m=70, dk=33, dtype=dtype)
    for causal in (False, True):
        for scale in (None, 0.25):
            s = attncore.scores(q, k, scale=scale, causal=causal)
            want = attncore.reference.scores(q.astype(np.float64), k.astype(np.float64),
                                             scale=scale, causal=causal)
            assert s.dtype == dtype and s.shape == (2, 4, 37, 70)
            assert np.array_equal(np.isneginf(s), np.isneginf(want))
            assert_close(np.where(np.isinf(s), 0, s), np.where(np.isinf(want), 0, want),
                         tol(dtype, 1, 33) * 8)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("axis", (0, 1, -1, -2))
def test_softmax(isa, rng, dtype, axis):
    x = (rng.standard_normal((7, 33, 5)) * 30).astype(dtype)
    x[0, 0, :] = -np.inf  # an all -inf slice along axis -1
    got = attncore.softmax(x, axis=axis)
    want = attncore.reference.softmax(x.astype(np.float64), axis=axis)
    assert got.dtype == dtype and got.shape == x.shape
    assert_close(got, want, 4 * tol(dtype, x.shape[axis], 1))


def test_softmax_all_masked_row_is_zero_not_nan(isa):
    x = np.array([[-np.inf, -np.inf], [0.0, -np.inf]])
    assert np.array_equal(attncore.softmax(x), [[0.0, 0.0], [1.0, 0.0]])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("method", METHODS)
def test_large_scores_do_not_overflow(isa, rng, dtype, method):
    q, k, v = qkv(rng, n=40, m=50, dk=4, dtype=dtype)
    q *= 100  # scores of magnitude ~1e4
    k *= 100
    out = attncore.attention(q, k, v, method=method)
    assert np.isfinite(out).all()
    assert_close(out, reference(q, k, v), 1e-4 if dtype == np.float32 else 1e-11)
    x = np.array([1e4, 1e4 - 1, -1e4], dtype)
    assert_close(attncore.softmax(x), attncore.reference.softmax(x.astype(np.float64)), 1e-7)


def test_float32_error_grows_like_sqrt_m(isa, rng):
    # m = 8192 keys: a linear-in-m error bound would be ~90× looser than this one
    q, k, v = qkv(rng, n=16, m=8192, dk=64, dtype=np.float32)
    want = reference(q, k, v)
    for method in METHODS:
        assert_close(attncore.attention(q, k, v, method=method), want, tol(np.float32, 8192, 64))


@pytest.mark.parametrize("method", METHODS)
def test_empty_n_and_m(isa, method):
    q = np.zeros((2, 0, 4))
    k = np.zeros((2, 5, 4))
    out, lse = attncore.attention(q, k, k, method=method, return_lse=True)
    assert out.shape == (2, 0, 4) and lse.shape == (2, 0)
    q = np.ones((2, 3, 4))
    k = np.zeros((2, 0, 4))
    v = np.zeros((2, 0, 6))
    out, lse = attncore.attention(q, k, v, method=method, return_lse=True)
    assert out.shape == (2, 3, 6) and np.all(out == 0) and np.all(np.isneginf(lse))
    assert attncore.scores(q, k).shape == (2, 3, 0)
    out = attncore.attention(np.ones((0, 2, 3, 4)), np.ones((0, 2, 5, 4)), np.ones((0, 2, 5, 1)))
    assert out.shape == (0, 2, 3, 1)


@pytest.mark.parametrize("method", METHODS)
def test_nan_reaches_exactly_the_rows_that_see_it(isa, rng, method):
    n = m = 70
    base = qkv(rng, n=n, m=m, dk=8)
    i = np.arange(n)
    # NaN in q row 9: only output row 9
    q, k, v = (a.copy() for a in base)
    q[9, 3] = np.nan
    out = attncore.attention(q, k, v, causal=True, method=method, block_q=16, block_k=16)
    assert np.array_equal(np.isnan(out).any(axis=1), i == 9)
    # NaN (or inf) in key 40 / value 40: with causal only rows i >= 40 see it
    for which, bad in (("k", np.nan), ("v", np.nan), ("v", np.inf)):
        q, k, v = (a.copy() for a in base)
        (k if which == "k" else v)[40, 2] = bad
        out = attncore.attention(q, k, v, causal=True, method=method, block_q=16, block_k=16)
        assert np.isfinite(out[:40]).all(), (which, bad)
        assert not np.isfinite(out[40:]).all(axis=1).any(), (which, bad)
        assert_close(out, reference(q, k, v, causal=True), 1e-12)


def test_threads_give_bit_identical_results(isa, rng):
    q, k, v = qkv(rng, B=(2,), H=3, n=150, m=170, dk=16, dtype=np.float32)
    before = attncore.get_num_threads()
    try:
        results = []
        for nt in (1, 2, 3):
            attncore.set_num_threads(nt)
            results.append([attncore.attention(q, k, v, causal=True, method=mt) for mt in METHODS])
        for r in results[1:]:
            for a, b in zip(results[0], r):
                assert np.array_equal(a, b)
    finally:
        attncore.set_num_threads(before)


def test_scale_is_used(isa, rng):
    q, k, v = qkv(rng, n=10, m=12, dk=8)
    for scale in (1e-3, 0.5, 3.0):
        for method in METHODS:
            assert_close(attncore.attention(q, k, v, scale=scale, method=method),
                         reference(q, k, v, scale=scale), 1e-13)
    # the default is 1/sqrt(d_k)
    assert_close(attncore.attention(q, k, v), attncore.attention(q, k, v, scale=1 / np.sqrt(8)), 0)


def test_lists_are_accepted(isa):
    q = [[1.0, 0.0], [0.0, 1.0]]
    out = attncore.attention(q, q, q)
    assert out.dtype == np.float64
    assert_close(out, attncore.reference.attention(q, q, q), 1e-15)

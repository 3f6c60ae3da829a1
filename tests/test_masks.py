"""Sliding windows, boolean masks and key lengths, against the reference, per ISA."""

import numpy as np
import pytest

import attncore
from attncore.bench.timing import measure
from helpers import assert_close, qkv, reference, tol

METHODS = ("flash", "naive")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("window", [1, 2, 7, 16, 33, 64, 129, 1000])
@pytest.mark.parametrize("n,m", [(70, 70), (40, 100), (100, 40), (1, 150), (130, 130)])
def test_windows(isa, rng, dtype, window, n, m):
    q, k, v = qkv(rng, B=(2,), H=2, Hkv=1, n=n, m=m, dk=8, dv=5, dtype=dtype)
    want, want_lse = reference(q, k, v, causal=True, window=window, return_lse=True)
    for method in METHODS:
        for bq, bk in ((None, None), (16, 16), (7, 5)):
            if method == "naive" and bq:
                continue
            out, lse = attncore.attention(q, k, v, causal=True, window=window, method=method,
                                          block_q=bq, block_k=bk, return_lse=True)
            assert_close(out, want, tol(dtype, min(window, m), 8))
            assert_close(lse, want_lse, 4 * tol(dtype, min(window, m), 8))


def test_window_semantics(isa, rng):
    n, m, w = 6, 9, 3
    q, k, v = qkv(rng, n=n, m=m, dk=4)
    _, weights = attncore.attention(q, k, v, causal=True, window=w, method="naive",
                                    return_weights=True)
    i, j = np.arange(n)[:, None], np.arange(m)[None, :]
    seen = (j <= i + (m - n)) & (j > i + (m - n) - w)
    assert np.array_equal(weights > 0, seen)
    # a window as wide as the keys is plain causal attention
    assert_close(attncore.attention(q, k, v, causal=True, window=m),
                 attncore.attention(q, k, v, causal=True), 0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("mask_shape", [(17, 23), (1, 23), (17, 1), (2, 1, 17, 23), (3, 17, 23),
                                        (2, 3, 17, 23), (23,)])
def test_boolean_masks(isa, rng, dtype, mask_shape):
    q, k, v = qkv(rng, B=(2,), H=3, n=17, m=23, dk=8, dv=6, dtype=dtype)
    mask = rng.random(mask_shape) < 0.6
    for causal in (False, True):
        want, want_lse = reference(q, k, v, causal=causal, mask=mask, return_lse=True)
        for method in METHODS:
            out, lse = attncore.attention(q, k, v, causal=causal, mask=mask, method=method,
                                          block_q=5, block_k=4, return_lse=True)
            assert_close(out, want, tol(dtype, 23, 8))
            assert_close(lse, want_lse, 4 * tol(dtype, 23, 8))
        s = attncore.scores(q, k, causal=causal, mask=mask)
        assert np.array_equal(np.isneginf(s), np.isneginf(attncore.reference.scores(
            q, k, causal=causal, mask=mask)))


def test_fully_masked_rows_give_zero_and_minus_inf(isa, rng):
    q, k, v = qkv(rng, H=2, n=6, m=9, dk=4)
    mask = np.ones((6, 9), bool)
    mask[2] = False
    v[..., 0, :] = np.nan  # behind the mask for row 2 only... and visible to the others
    mask[:, 0] = False  # ...now hidden from every row
    for method in METHODS:
        out, lse = attncore.attention(q, k, v, mask=mask, method=method, return_lse=True)
        assert np.all(out[:, 2] == 0) and np.all(np.isneginf(lse[:, 2]))
        assert np.isfinite(out).all()
        assert_close(out, reference(q, k, v, mask=mask), 1e-12)


def test_broadcast_mask_is_never_expanded(isa, rng):
    # (B, H, n, m) = (4, 8, 512, 512) as bool would be 8 MiB; the mask is 512 bytes
    q, k, v = qkv(rng, B=(4,), H=8, n=512, m=512, dk=8, dtype=np.float32)
    mask = rng.random(512) < 0.5
    m = measure(attncore.attention, q, k, v, mask=mask, repeat=0)
    out_bytes = q.nbytes + 4 * 8 * 512 * 4  # output and lse
    assert m.peak_bytes < out_bytes + 4 * 8 * 512 * 512 // 4  # well under the full mask
    assert_close(m.result, reference(q, k, v, mask=mask), tol(np.float32, 512, 8))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_key_lengths(isa, rng, dtype):
    q, k, v = qkv(rng, B=(4,), H=2, n=9, m=40, dk=8, dv=3, dtype=dtype)
    lengths = np.array([40, 17, 0, 5])
    for causal in (False, True):
        want, want_lse = reference(q, k, v, causal=causal, key_lengths=lengths, return_lse=True)
        for method in METHODS:
            out, lse = attncore.attention(q, k, v, causal=causal, key_lengths=lengths,
                                          method=method, block_q=4, block_k=6, return_lse=True)
            assert_close(out, want, tol(dtype, 40, 8))
            assert_close(lse, want_lse, 4 * tol(dtype, 40, 8))
        assert np.all(out[2] == 0) and np.all(np.isneginf(lse[2]))  # no keys at all
    # padding is never read: garbage after the real keys changes nothing
    k2, v2 = k.copy(), v.copy()
    k2[1, :, 17:] = np.nan
    v2[1, :, 17:] = np.inf
    for method in METHODS:
        a = attncore.attention(q, k, v, key_lengths=lengths, causal=True, method=method)
        b = attncore.attention(q, k2, v2, key_lengths=lengths, causal=True, method=method)
        assert np.array_equal(a, b)
    # equal to cutting each sequence to its length, causal aligned to its last real key
    for b in range(4):
        L = lengths[b]
        if L:
            assert_close(out[b], attncore.attention(q[b], k[b, :, :L], v[b, :, :L],
                                                    causal=True), 1e-5 if dtype == np.float32 else 1e-13)


def test_everything_together(isa, rng):
    q, k, v = qkv(rng, B=(3,), H=4, Hkv=2, n=33, m=65, dk=16, dv=8)
    mask = rng.random((3, 1, 33, 65)) < 0.8
    lengths = [65, 40, 20]
    kw = dict(causal=True, window=24, mask=mask, key_lengths=lengths)
    want = reference(q, k, v, **kw)
    for method in METHODS:
        assert_close(attncore.attention(q, k, v, method=method, **kw), want, 1e-12)


@pytest.mark.parametrize("impl", [attncore, attncore.reference])
def test_mask_errors(impl):
    q = np.zeros((2, 4, 8))
    with pytest.raises(ValueError, match=r"window needs causal=True"):
        impl.attention(q, q, q, window=4)
    for bad in (0, -2, 1.5, True):
        with pytest.raises(ValueError, match=r"window must be a positive integer"):
            impl.attention(q, q, q, causal=True, window=bad)
    with pytest.raises(TypeError, match=r"mask must be a boolean array.*int64"):
        impl.attention(q, q, q, mask=np.ones((4, 4), np.int64))
    with pytest.raises(ValueError, match=r"mask of shape \(3, 4\) does not broadcast to \(2, 4, 4\)"):
        impl.attention(q, q, q, mask=np.ones((3, 4), bool))
    q4 = np.zeros((3, 2, 4, 8))
    with pytest.raises(TypeError, match=r"key_lengths must be integers"):
        impl.attention(q4, q4, q4, key_lengths=[1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match=r"key_lengths must have the batch shape \(3,\)"):
        impl.attention(q4, q4, q4, key_lengths=[1, 2])
    with pytest.raises(ValueError, match=r"key_lengths must lie in \[0, m=4\]"):
        impl.attention(q4, q4, q4, key_lengths=[1, 2, 5])

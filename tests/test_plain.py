"""plain_attention (csrc/plain.c, the readable C) against the NumPy reference,
on the shapes the naive-kernel tests use.  It runs no micro-kernel, so it is
the same on every ISA; its tolerance is the one the kernels are held to."""

import numpy as np
import pytest

import attncore
from helpers import EDGE_SIZES, assert_close, qkv, reference, tol

DTYPES = (np.float32, np.float64)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("causal", (False, True))
@pytest.mark.parametrize("n", EDGE_SIZES)
def test_sizes_around_widths_and_blocks(rng, dtype, causal, n):
    for m in sorted({1, 17, 64, 129, n}):
        q, k, v = qkv(rng, H=2, n=n, m=m, dk=16, dv=24, dtype=dtype)
        want, want_lse = reference(q, k, v, causal=causal, return_lse=True)
        out, lse = attncore.plain_attention(q, k, v, causal=causal, return_lse=True)
        assert out.dtype == dtype and lse.dtype == dtype
        assert_close(out, want, tol(dtype, m, 16))
        assert_close(lse, want_lse, 4 * tol(dtype, m, 16))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("d", (1, 2, 3, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65, 128, 129))
def test_head_and_value_dims(rng, dtype, d):
    q, k, v = qkv(rng, H=1, n=33, m=40, dk=d, dv=(d % 7) + 1, dtype=dtype)
    for causal in (False, True):
        assert_close(attncore.plain_attention(q, k, v, causal=causal),
                     reference(q, k, v, causal=causal), tol(dtype, 40, d))


@pytest.mark.parametrize("H,Hkv", [(4, 4), (4, 2), (8, 1), (6, 3)])
def test_gqa_and_mqa(rng, H, Hkv):
    q, k, v = qkv(rng, B=(3,), H=H, Hkv=Hkv, n=19, m=45, dk=8, dv=5)
    for causal in (False, True):
        assert_close(attncore.plain_attention(q, k, v, causal=causal),
                     reference(q, k, v, causal=causal), 1e-12)


@pytest.mark.parametrize("n,m", [(5, 40), (40, 5), (1, 64), (64, 1), (33, 33)])
def test_causal_is_bottom_right(rng, n, m):
    q, k, v = qkv(rng, n=n, m=m, dk=4)
    out, lse = attncore.plain_attention(q, k, v, causal=True, return_lse=True)
    want, want_lse = reference(q, k, v, causal=True, return_lse=True)
    assert_close(out, want, 1e-12)
    assert np.array_equal(np.isneginf(lse), np.isneginf(want_lse))  # rows that see nothing
    assert np.all(out[np.isneginf(lse)] == 0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_masks_windows_and_padding(rng, dtype):
    q, k, v = qkv(rng, B=(2,), H=3, n=37, m=53, dk=8, dv=6, dtype=dtype)
    mask = rng.random((3, 37, 53)) < 0.6  # per head, broadcast over the batch
    cases = [dict(mask=mask), dict(causal=True, mask=mask), dict(causal=True, window=9),
             dict(key_lengths=[53, 20]), dict(causal=True, key_lengths=[0, 31]),
             dict(causal=True, window=4, key_lengths=[50, 7], mask=mask[0])]
    for kw in cases:
        want, want_lse = reference(q, k, v, return_lse=True, **kw)
        out, lse = attncore.plain_attention(q, k, v, return_lse=True, **kw)
        assert_close(out, want, tol(dtype, 53, 8))
        assert np.array_equal(np.isneginf(lse), np.isneginf(want_lse)), kw
        seen = ~np.isneginf(want_lse)
        assert_close(lse[seen], want_lse[seen], 4 * tol(dtype, 53, 8))


def test_nan_policy(rng):
    q, k, v = qkv(rng, n=6, m=6, dk=4)
    k[4, 1] = np.nan  # seen by rows 4 and 5 under the causal mask
    v[5, 0] = np.inf  # the last key: only row 5 sees it
    out = attncore.plain_attention(q, k, v, causal=True)
    assert np.all(np.isfinite(out[:4])) and np.all(np.isnan(out[4:]))
    k[4, 1] = 0.0
    out = attncore.plain_attention(q, k, v, causal=True)
    assert np.all(np.isfinite(out[:5])) and np.isinf(out[5, 0])
    big = attncore.plain_attention(q * 1e4, k, np.nan_to_num(v, posinf=1.0))  # no overflow
    assert np.all(np.isfinite(big))


def test_agrees_with_the_fast_kernels_and_odd_layouts(rng):
    q, k, v = qkv(rng, B=(2,), H=4, Hkv=2, n=70, m=90, dk=32, dv=16, dtype=np.float32)
    fast = attncore.attention(q, k, v, causal=True, method="naive")
    assert_close(attncore.plain_attention(q, k, v, causal=True), fast, tol(np.float32, 90, 32))
    fortran = [np.asfortranarray(a) for a in (q, k, v)]
    reversed_ = [a[..., ::-1, :][..., ::-1, :] for a in (q, k, v)]
    for arrays in (fortran, reversed_):
        assert_close(attncore.plain_attention(*arrays, causal=True), fast,
                     tol(np.float32, 90, 32))


def test_empty_and_refused(rng):
    q, k, v = qkv(rng, n=0, m=5, dk=4)
    assert attncore.plain_attention(q, k, v).shape == (0, 4)
    q, k, v = qkv(rng, n=3, m=0, dk=4)
    out, lse = attncore.plain_attention(q, k, v, return_lse=True)
    assert np.all(out == 0) and np.all(np.isneginf(lse))
    q, k, v = qkv(rng, n=3, m=5, dk=4, dtype=np.float32)
    with pytest.raises(TypeError, match="plain_attention takes float32 or float64"):
        attncore.plain_attention(q, k.astype(np.float16), v.astype(np.float16))
    with pytest.raises(ValueError, match="window needs causal=True"):
        attncore.plain_attention(q, k, v, window=2)

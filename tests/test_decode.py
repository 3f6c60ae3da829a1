"""Split-KV decode: few query rows against many keys, chunks merged by the
log-sum-exp rule; forced on and off so that both paths meet the reference."""

import numpy as np
import pytest

import attncore
from attncore import _api
from helpers import assert_close, qkv, reference, tol


@pytest.fixture(params=[1, 0, -1], ids=["split", "no-split", "auto"])
def split(request, monkeypatch):
    monkeypatch.setattr(_api, "_SPLIT_KV", request.param)
    return request.param


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("H,Hkv", [(4, 4), (8, 2), (6, 1)])
@pytest.mark.parametrize("n", [1, 2, 3, 5])
@pytest.mark.parametrize("m", [1, 17, 300, 1100])
def test_decode_equals_full_attention(isa, split, rng, dtype, H, Hkv, n, m):
    q, k, v = qkv(rng, B=(2,), H=H, Hkv=Hkv, n=n, m=m, dk=16, dv=12, dtype=dtype)
    for causal in (False, True):
        want, want_lse = reference(q, k, v, causal=causal, return_lse=True)
        out, lse = attncore.attention(q, k, v, causal=causal, return_lse=True)
        assert_close(out, want, 2 * tol(dtype, m, 16))
        assert_close(lse, want_lse, 8 * tol(dtype, m, 16))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_decode_with_windows_masks_and_lengths(isa, split, rng, dtype):
    q, k, v = qkv(rng, B=(3,), H=8, Hkv=2, n=2, m=900, dk=8, dv=8, dtype=dtype)
    mask = rng.random((3, 1, 2, 900)) < 0.9  # the same for every head of a group
    lengths = [900, 333, 0]
    for kw in (dict(causal=True, window=100), dict(mask=mask), dict(key_lengths=lengths),
               dict(causal=True, window=300, mask=mask, key_lengths=lengths),
               dict(mask=rng.random((3, 8, 2, 900)) < 0.5)):  # per head: not split
        want = reference(q, k, v, **kw)
        assert_close(attncore.attention(q, k, v, **kw), want, 2 * tol(dtype, 900, 8))


def test_decode_nan_reaches_only_rows_that_see_it(isa, split, rng):
    q, k, v = qkv(rng, H=4, Hkv=2, n=3, m=700, dk=8)
    v[..., 699, 0] = np.nan  # the newest key: only the last query row sees it (causal)
    out = attncore.attention(q, k, v, causal=True)
    assert np.isnan(out[:, 2]).any(axis=-1).all()
    assert np.isfinite(out[:, :2]).all()
    assert_close(out, reference(q, k, v, causal=True), 1e-12)


def test_split_and_unsplit_agree_closely(isa, rng, monkeypatch):
    q, k, v = qkv(rng, B=(2,), H=32, Hkv=8, n=1, m=5000, dk=64, dtype=np.float32)
    results = {}
    for mode in (0, 1):
        monkeypatch.setattr(_api, "_SPLIT_KV", mode)
        results[mode] = attncore.attention(q, k, v)
    assert_close(results[1], results[0], 2 * tol(np.float32, 5000, 64))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [1, 2, 3])
@pytest.mark.parametrize("dv", [31, 32, 33, 63, 64, 65, 127, 128, 129, 130, 256])
def test_value_dims_of_the_wide_decode_tile(isa, split, rng, dtype, n, dv):
    # one or two rows take a P·V tile as wide as 8 vectors (32…128 values
    # by ISA and dtype): both sides of that width, and the tail columns
    q, k, v = qkv(rng, B=(1,), H=2, Hkv=1, n=n, m=600, dk=16, dv=dv, dtype=dtype)
    for causal in (False, True):
        assert_close(attncore.attention(q, k, v, causal=causal),
                     reference(q, k, v, causal=causal), 2 * tol(dtype, 600, 16))

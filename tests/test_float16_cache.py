"""float16 K/V with float32 queries: converted as loaded, float32 arithmetic,
checked against the reference computed on the upcast values."""

import numpy as np
import pytest

import attncore
from attncore import _api
from helpers import assert_close, tol


def half_qkv(rng, B=(2,), H=4, Hkv=2, n=9, m=40, d=16, dv=None):
    dv = d if dv is None else dv
    q = rng.standard_normal(B + (H, n, d)).astype(np.float32)
    k = rng.standard_normal(B + (Hkv, m, d)).astype(np.float16)
    v = rng.standard_normal(B + (Hkv, m, dv)).astype(np.float16)
    return q, k, v


def upcast_reference(q, k, v, **kw):
    return attncore.reference.attention(q.astype(np.float64), k.astype(np.float64),
                                        v.astype(np.float64), **kw)


@pytest.mark.parametrize("split", [0, 1])
@pytest.mark.parametrize("method", ["flash", "naive"])
@pytest.mark.parametrize("n,m,d", [(1, 1, 8), (1, 700, 64), (3, 33, 17), (70, 130, 64),
                                   (129, 65, 128), (5, 1000, 128)])
def test_half_cache_matches_the_upcast_reference(isa, rng, monkeypatch, split, method, n, m, d):
    monkeypatch.setattr(_api, "_SPLIT_KV", split)
    q, k, v = half_qkv(rng, n=n, m=m, d=d, dv=d + 3)
    for causal in (False, True):
        want, want_lse = upcast_reference(q, k, v, causal=causal, return_lse=True)
        out, lse = attncore.attention(q, k, v, causal=causal, method=method, return_lse=True)
        assert out.dtype == np.float32 and lse.dtype == np.float32
        assert_close(out, want, 2 * tol(np.float32, m, d))
        assert_close(lse, want_lse, 8 * tol(np.float32, m, d))


def test_half_cache_with_masks_windows_and_lengths(isa, rng):
    q, k, v = half_qkv(rng, B=(3,), H=4, Hkv=2, n=4, m=600, d=32)
    mask = rng.random((3, 1, 4, 600)) < 0.8
    for kw in (dict(causal=True, window=50), dict(mask=mask), dict(key_lengths=[600, 10, 0])):
        assert_close(attncore.attention(q, k, v, **kw), upcast_reference(q, k, v, **kw),
                     2 * tol(np.float32, 600, 32))


def test_conversion_is_exact_for_every_kind_of_half(isa):
    # every finite half, the subnormals included, read back through the scores
    bits = np.arange(0, 2**16, dtype=np.uint16)
    halves = bits.view(np.float16)
    halves = halves[np.isfinite(halves)]  # 63 488 of them: 1 008 keys of 63
    k = halves[: halves.size // 63 * 63].reshape(-1, 63)  # (m, 63)
    q = np.eye(63, dtype=np.float32)  # row t picks component t of every key
    s = attncore.scores(q, k, scale=1.0)  # (63, m): s[t, j] = k[j, t]
    assert np.array_equal(s, k.T.astype(np.float32))
    # inf and NaN in a visible value reach the row; behind the mask they do not
    q1 = np.zeros((2, 4), np.float32)
    kk = np.zeros((2, 4), np.float16)
    vv = np.zeros((2, 4), np.float16)
    vv[1, 0] = np.inf
    out = attncore.attention(q1, kk, vv, causal=True)
    assert np.isfinite(out[0]).all() and not np.isfinite(out[1]).all()


def test_kvcache_in_float16(isa, rng):
    q, k, v = half_qkv(rng, B=(1,), H=8, Hkv=2, n=24, m=24, d=16)
    cache = attncore.KVCache(2, 16, batch=(1,), dtype=np.float16, capacity=2)
    outs = []
    for t in range(24):
        cache.append(k[..., t:t + 1, :], v[..., t:t + 1, :])
        outs.append(cache.attend(q[..., t:t + 1, :]))
    assert cache.keys.dtype == np.float16
    assert_close(np.concatenate(outs, axis=-2), attncore.attention(q, k, v, causal=True),
                 2 * tol(np.float32, 24, 16))


@pytest.mark.parametrize("impl", [attncore, attncore.reference])
def test_half_dtype_rules(impl):
    h = np.zeros((2, 4, 8), np.float16)
    f = np.zeros((2, 4, 8), np.float32)
    d = np.zeros((2, 4, 8))
    for args in ((h, h, h), (d, h, h), (f, h, f), (f, f, h)):
        with pytest.raises(TypeError, match=r"float16|must be float32 or float64"):
            impl.attention(*args)
    assert impl.attention(f, h, h).dtype == np.float32

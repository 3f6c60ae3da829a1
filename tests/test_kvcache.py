"""KVCache: filled token by token it gives what one causal call over the whole sequence gives."""

import numpy as np
import pytest

import attncore
from attncore import KVCache
from helpers import assert_close, tol


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("step", [1, 3])
def test_token_by_token_equals_one_causal_call(isa, rng, dtype, step):
    B, H, Hkv, T, d = 2, 8, 2, 40, 16
    q = rng.standard_normal((B, H, T, d)).astype(dtype)
    k = rng.standard_normal((B, Hkv, T, d)).astype(dtype)
    v = rng.standard_normal((B, Hkv, T, d)).astype(dtype)
    full = attncore.attention(q, k, v, causal=True)
    cache = KVCache(Hkv, d, batch=(B,), dtype=dtype, capacity=4)
    outs = []
    for t in range(0, T, step):
        cache.append(k[..., t:t + step, :], v[..., t:t + step, :])
        outs.append(cache.attend(q[..., t:t + step, :]))
    assert len(cache) == T and cache.capacity >= T
    assert_close(np.concatenate(outs, axis=-2), full, 2 * tol(dtype, T, d))
    assert np.array_equal(cache.keys, k) and np.array_equal(cache.values, v)


def test_growth_is_amortised_and_views_are_read_only():
    cache = KVCache(1, 4, capacity=1)
    caps = []
    for _ in range(100):
        cache.append(np.ones((1, 1, 4), np.float32), np.ones((1, 1, 4), np.float32))
        caps.append(cache.capacity)
    assert len(set(caps)) == 8  # 1, 2, 4, …, 128: a copy per doubling, not per token
    with pytest.raises(ValueError):
        cache.keys[0, 0, 0] = 1.0
    assert "len=100" in repr(cache)


def test_kvcache_errors():
    with pytest.raises(TypeError, match=r"dtype must be float32, float64, float16, bfloat16 or int8"):
        KVCache(2, 4, dtype=np.int32)
    with pytest.raises(ValueError, match=r"kv_heads must be a positive integer"):
        KVCache(0, 4)
    cache = KVCache(2, 4)
    with pytest.raises(ValueError, match=r"k must have shape \(2, 't', 4\)"):
        cache.append(np.zeros((3, 1, 4), np.float32), np.zeros((2, 1, 4), np.float32))
    with pytest.raises(TypeError, match=r"v has dtype float64 but the cache holds float32"):
        cache.append(np.zeros((2, 1, 4), np.float32), np.zeros((2, 1, 4)))
    with pytest.raises(ValueError, match=r"k has 1 tokens but v has 2"):
        cache.append(np.zeros((2, 1, 4), np.float32), np.zeros((2, 2, 4), np.float32))

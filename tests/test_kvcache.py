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


def _filled(rng, dtype, batch, Hkv, m, d):
    cache = KVCache(Hkv, d, batch=batch, dtype=dtype, capacity=m + 3)
    k, v = (rng.standard_normal(batch + (Hkv, m, d)).astype(np.float32) for _ in range(2))
    if dtype == np.float64:
        k, v = k.astype(np.float64), v.astype(np.float64)
    elif dtype == np.float16:
        k, v = k.astype(np.float16), v.astype(np.float16)
    elif dtype == "bfloat16":
        k, v = (attncore.to_bfloat16(x).view(cache.dtype) for x in (k, v))
    cache.append(k, v)
    return cache


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, "bfloat16", "int8"])
@pytest.mark.parametrize("batch, H, Hkv, n", [((), 8, 2, 1), ((2,), 4, 4, 3)])
def test_a_plain_step_checks_q_alone_and_gives_the_same_bits(isa, rng, monkeypatch, dtype,
                                                             batch, H, Hkv, n):
    """attend(q) with no keyword checks q against the cache (cache_problem)
    instead of the whole of attention's checks: the same bits as the checked
    path, which a keyword (window=None, changing nothing) takes."""
    from attncore import _validate

    d = 16
    cache = _filled(rng, dtype, batch, Hkv, 37, d)
    qdt = np.float64 if dtype == np.float64 else np.float32
    q = rng.standard_normal(batch + (H, n, d)).astype(qdt)
    checked = [cache.attend(q, causal=c, window=None) for c in (True, False)]
    with monkeypatch.context() as mp:  # the plain step must not come this way
        mp.setattr(_validate, "attention_args", lambda *a, **k: pytest.fail("checked in full"))
        plain = [cache.attend(q), cache.attend(q, causal=False)]
    for a, b in zip(plain, checked):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert np.array_equal(a, b)
    if n > 1:  # causal was heard (one query, the newest, sees every key either way)
        assert not np.array_equal(plain[0], plain[1])


def test_a_step_that_is_not_plain_is_checked_in_full(isa, rng):
    """q of another dtype, byte order, layout or shape than the plain case goes
    through attention's own checks: the same answers, the same errors."""
    cache = _filled(rng, np.float32, (), 2, 20, 8)
    q = rng.standard_normal((4, 2, 8)).astype(np.float32)
    want = cache.attend(q, window=None)
    for same in (q.astype(q.dtype.newbyteorder("S")), np.asfortranarray(q),
                 np.repeat(q, 2, axis=-1)[..., ::2]):
        assert np.array_equal(cache.attend(same), want)
    for other in (q.astype(np.float64), q.tolist()):  # a list is float64 to NumPy
        with pytest.raises(TypeError, match="must share one dtype"):
            cache.attend(other)
    with pytest.raises(ValueError, match="d_k"):
        cache.attend(q[..., :4])
    with pytest.raises(ValueError, match="multiple of k's heads"):
        cache.attend(q[:3])
    i8 = _filled(rng, "int8", (), 2, 20, 8)
    with pytest.raises(TypeError, match="an int8 cache takes float32 queries"):
        i8.attend(q.astype(np.float64))

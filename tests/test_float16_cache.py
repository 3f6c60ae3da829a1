"""16-bit K/V with float32 queries — a float16 cache, and a bfloat16 one (as
uint16 bits, and as ml_dtypes.bfloat16 when installed): converted as loaded,
float32 arithmetic, checked against the reference computed on the widened
values."""

import numpy as np
import pytest

import attncore
from attncore import _api
from helpers import HALF_KINDS, assert_close, ml_dtypes, to_kind, tol, widen

@pytest.fixture(params=HALF_KINDS)
def kind(request):
    """How the cache stores K and V: float16, bfloat16 bits (uint16) or ml_dtypes.bfloat16."""
    return request.param


def half_qkv(rng, B=(2,), H=4, Hkv=2, n=9, m=40, d=16, dv=None, kind="float16"):
    dv = d if dv is None else dv
    q = rng.standard_normal(B + (H, n, d)).astype(np.float32)
    k = to_kind(rng.standard_normal(B + (Hkv, m, d)), kind)
    v = to_kind(rng.standard_normal(B + (Hkv, m, dv)), kind)
    return q, k, v


def upcast_reference(q, k, v, **kw):
    return attncore.reference.attention(q.astype(np.float64), widen(k), widen(v), **kw)


@pytest.mark.parametrize("split", [0, 1])
@pytest.mark.parametrize("method", ["flash", "naive"])
@pytest.mark.parametrize("n,m,d", [(1, 1, 8), (1, 700, 64), (3, 33, 17), (70, 130, 64),
                                   (129, 65, 128), (5, 1000, 128)])
def test_half_cache_matches_the_upcast_reference(isa, rng, monkeypatch, kind, split, method, n,
                                                 m, d):
    monkeypatch.setattr(_api, "_SPLIT_KV", split)
    q, k, v = half_qkv(rng, n=n, m=m, d=d, dv=d + 3, kind=kind)
    for causal in (False, True):
        want, want_lse = upcast_reference(q, k, v, causal=causal, return_lse=True)
        out, lse = attncore.attention(q, k, v, causal=causal, method=method, return_lse=True)
        assert out.dtype == np.float32 and lse.dtype == np.float32
        assert_close(out, want, 2 * tol(np.float32, m, d))
        assert_close(lse, want_lse, 8 * tol(np.float32, m, d))


def test_half_cache_with_masks_windows_and_lengths(isa, rng, kind):
    q, k, v = half_qkv(rng, B=(3,), H=4, Hkv=2, n=4, m=600, d=32, kind=kind)
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


def test_kvcache_in_16_bits(isa, rng, kind):
    q, k, v = half_qkv(rng, B=(1,), H=8, Hkv=2, n=24, m=24, d=16, kind=kind)
    dtype = "bfloat16" if kind == "bfloat16" else k.dtype
    cache = attncore.KVCache(2, 16, batch=(1,), dtype=dtype, capacity=2)
    outs = []
    for t in range(24):
        # a bfloat16 cache takes bits and ml_dtypes' bfloat16 alike
        kt, vt = k[..., t:t + 1, :], v[..., t:t + 1, :]
        if kind != "float16" and t % 2:
            kt, vt = kt.view(cache.dtype), vt.view(cache.dtype)
        cache.append(kt, vt)
        outs.append(cache.attend(q[..., t:t + 1, :]))
    want = {"float16": np.float16, "ml_dtypes": k.dtype}.get(kind)
    assert cache.keys.dtype == (want or attncore._bfloat16.storage_dtype())
    assert np.array_equal(widen(cache.keys), widen(k)) and np.array_equal(widen(cache.values),
                                                                          widen(v))
    assert_close(np.concatenate(outs, axis=-2), attncore.attention(q, k, v, causal=True),
                 2 * tol(np.float32, 24, 16))


def test_bfloat16_conversion_is_exact_and_rounds_to_nearest_even(isa):
    # every finite bfloat16, read back through the scores: widening is exact
    bits = np.arange(0, 2**16, dtype=np.uint16)
    wide = attncore.from_bfloat16(bits)
    bits = bits[np.isfinite(wide)]
    k = bits[: bits.size // 63 * 63].reshape(-1, 63)
    s = attncore.scores(np.eye(63, dtype=np.float32), k, scale=1.0)
    assert np.array_equal(s, attncore.from_bfloat16(k).T)
    # rounding: ties to even, carries into the exponent, inf and NaN kept
    x = np.array([1 + 2**-8, 1 + 3 * 2**-8, 1 + 2**-8 + 2**-20, 3.4028235e38, -np.inf, np.nan,
                  -0.0, 1e-40], np.float32)
    got = attncore.from_bfloat16(attncore.to_bfloat16(x))
    assert got[0] == 1 and got[1] == 1 + 4 * 2**-8 and got[2] == 1 + 2**-7
    assert got[3] == np.inf and got[4] == -np.inf and np.isnan(got[5])
    assert np.signbit(got[6]) and got[6] == 0 and 0 < got[7] < 1.1e-40
    if ml_dtypes is not None:  # the same bits as ml_dtypes' own rounding
        y = np.random.default_rng(0).standard_normal(10_000).astype(np.float32) * 1e3
        assert np.array_equal(attncore.to_bfloat16(y), y.astype(ml_dtypes.bfloat16).view(np.uint16))
    with pytest.raises(TypeError, match="expected bfloat16"):
        attncore.from_bfloat16(np.zeros(3, np.float16))


def test_bfloat16_conversion_of_large_arrays_is_shared_out_and_the_same_bits():
    """Arrays over one piece (65536 values) are converted by the team, piece
    by piece: every bit pattern, in an order that puts NaNs, infinities and
    ties in every piece and the last one short, comes out as NumPy's one-pass
    rule gives it, on one thread and on several."""
    rng = np.random.default_rng(5)
    bits = np.concatenate([rng.permutation(2**16).astype(np.uint16) for _ in range(3)])[:-7]
    ties = (bits.astype(np.uint32) << 16 | 0x8000).view(np.float32)  # halfway between two
    x = np.where(rng.random(bits.size) < 0.5, ties, rng.standard_normal(bits.size) * 1e3)
    x = x.astype(np.float32)
    x[::9973], x[5::9973] = np.inf, -np.inf
    u = x.view(np.uint32)
    want = ((u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16))
    nan = np.isnan(x)
    want[nan] = (u[nan] >> np.uint32(16)) | np.uint32(0x40)
    before = attncore.get_num_threads()
    try:
        for nt in (1, 2, 3):
            attncore.set_num_threads(nt)
            np.testing.assert_array_equal(attncore.to_bfloat16(x), want.astype(np.uint16))
            wide = attncore.from_bfloat16(bits)
            np.testing.assert_array_equal(wide.view(np.uint32), bits.astype(np.uint32) << 16)
    finally:
        attncore.set_num_threads(before)


@pytest.mark.parametrize("impl", [attncore, attncore.reference])
def test_16_bit_dtype_rules(impl, kind):
    """K and V 16-bit of one kind, with float32 queries (a cache) or queries
    of their kind; the kernels that have no 16-bit path refuse it, naming it."""
    s = to_kind(np.zeros((2, 4, 8)), kind)
    other = to_kind(np.zeros((2, 4, 8)), "bfloat16" if kind == "float16" else "float16")
    f = np.zeros((2, 4, 8), np.float32)
    d = np.zeros((2, 4, 8))
    for args in ((d, s, s), (f, s, f), (f, f, s), (f, s, other), (f, other, s), (s, f, f),
                 (s, s, f), (s, other, other), (s, s, other)):
        with pytest.raises(TypeError, match=r"float16|must be float32 or float64"):
            impl.attention(*args)
    assert impl.attention(f, s, s).dtype == np.float32
    # 16-bit queries: attncore rounds the output to their type, the reference keeps float32
    assert impl.attention(s, s, s).dtype == (s.dtype if impl is attncore else np.float32)
    name = "float16" if kind == "float16" else "bfloat16"
    for fn in (attncore.plain_attention, attncore.linear_attention):
        with pytest.raises(TypeError, match=f"got {name} k and v"):
            fn(f, s, s)


def test_float16_conversions_are_numpys_casts_on_any_thread_count():
    """A float16 q is widened and the output rounded in C (attncore._problem
    from_float16 / to_float16), in pieces of 65536 values shared by the team:
    every half widens to NumPy's float32 of it, and float32 values of every
    size (overflow, subnormal halves, ties, ±inf, NaN, -0) round to NumPy's
    float16 of them, bit for bit, on 1, 2 and 3 threads."""
    from attncore._problem import from_float16, to_float16

    rng = np.random.default_rng(6)
    halves = np.tile(np.arange(2**16, dtype=np.uint16), 3)[:-5].view(np.float16)
    with np.errstate(over="ignore", invalid="ignore"):  # NumPy's casts may warn of NaN, overflow
        x = rng.standard_normal(200_003) * 10.0 ** rng.integers(-9, 6, 200_003)
        x[::7] = halves[: x[::7].size].astype(np.float64) * (1 + 2.0**-11)  # ties (some past)
        x = np.concatenate([x, [np.inf, -np.inf, np.nan, 65504, 65520, 65519.99, 2.0**-25, -0.0]])
        x = x.astype(np.float32)
        want_round = x.astype(np.float16)
        want_wide = halves.astype(np.float32)
    before = attncore.get_num_threads()
    try:
        with np.errstate(over="ignore", invalid="ignore"):  # where NumPy rounds (no F16C)
            for nt in (1, 2, 3):
                attncore.set_num_threads(nt)
                wide = from_float16(halves)
                num = ~np.isnan(want_wide)
                assert np.array_equal(wide[num].view(np.uint32), want_wide[num].view(np.uint32))
                assert np.isnan(wide[~num]).all()
                got = to_float16(x)
                assert got.dtype == np.float16 and got.shape == x.shape
                same = (got.view(np.uint16) == want_round.view(np.uint16))
                assert (same | (np.isnan(got) & np.isnan(want_round))).all()
    finally:
        attncore.set_num_threads(before)

"""The int8 KV cache: K and V quantised per token and kv head (absmax, one
float32 scale each), read by the kernels as int8 and converted as loaded, the
scales applied to the score and weight columns.

Two questions, kept apart.  The kernels: does attention over the int8 cache
equal the float64 reference on the dequantised rows (q8 · scale), to float32
rounding, on every ISA, in decode and blockwise, with every modifier?  The
format: is the error against the unquantised float32 data within the bound
the format gives (docs/usage.md, "An int8 cache")?

A decode step runs two ways (the `step` fixture): widened, each K and V value
made a float32 (every ISA), or, on avx512 where the CPU has AVX512_VNNI and
on avx2, as 16-bit integer dot products, each query row rounded to 16 bits for Q·Kᵀ and each
row's weights, per block of PV_KEYS keys, for P·V.  The reference of the
second is the same float64 attention with q rounded as the kernel rounds it;
the weights' rounding, which NumPy cannot repeat (it happens inside the
online softmax), is allowed for by its bound, and tested exactly where the
weights round without error (equal weights)."""

import math
import types

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import attncore
from attncore import _api, _core
from attncore.kvcache import KVCache, dequantize_int8, quantize_int8
from helpers import assert_close, tol


def filled(rng, B=(2,), Hkv=2, m=40, d=16, dv=None, chunks=2, scale=1.0):
    """An int8 cache of m tokens, appended in `chunks` pieces, and the float32
    rows it was given."""
    dv = d if dv is None else dv
    k = (scale * rng.standard_normal(B + (Hkv, m, d))).astype(np.float32)
    v = (scale * rng.standard_normal(B + (Hkv, m, dv))).astype(np.float32)
    c = KVCache(Hkv, d, batch=B, value_dim=dv, dtype="int8", capacity=3)
    cuts = np.linspace(0, m, chunks + 1).astype(int)
    for a, b in zip(cuts, cuts[1:]):
        c.append(k[..., a:b, :], v[..., a:b, :])
    return c, k, v


def dequantised_reference(q, c, **kw):
    return attncore.reference.attention(q.astype(np.float64), c.keys.astype(np.float64),
                                        c.values.astype(np.float64), **kw)


def rounded_to_16_bits(q):
    """q as the integer dot products take it (kern_avx512_i8dot.c and
    kern_avx2_i8dot.c alike): each row times 32767 / max|row| in float32,
    rounded to an integer (ties to even), and back, in float64."""
    q = np.asarray(q, np.float32)
    top = np.abs(q).max(axis=-1, keepdims=True)
    inv = np.where(top > 0, np.float32(32767) / np.where(top > 0, top, 1), 0).astype(np.float32)
    back = (top / np.float32(32767)).astype(np.float32)
    return np.rint(q * inv).astype(np.float64) * back


PV_KEYS = 64  # keys a block of the weights' rounding (kern_avx512_i8dot.c)


def weights_slack(c):
    """The most rounding the weights to 16 bits (each off by at most its
    block's largest / 65534, the weights ≤ vs and summing to l ≥ 1 before the
    scales) can move an output: PV_KEYS · max|v| / 65534."""
    return PV_KEYS * float(np.abs(c.values).max()) / 65534


def dot_products_on(monkeypatch):
    """Turn the integer dot products on, or skip where the ISA or CPU has
    none, and make every call a decode step, the one path that takes them."""
    _core.i8dot_choose(1)
    if not _core.i8dot_supported():
        _core.i8dot_choose(-1)
        pytest.skip("no integer dot products for this ISA on this CPU")
    monkeypatch.setattr(_api, "_SPLIT_KV", 1)


def widened_step(call):
    """call() with the integer dot products off (the widening kernels)."""
    _core.i8dot_choose(0)
    try:
        return call()
    finally:
        _core.i8dot_choose(1)


@pytest.fixture(params=["widened", "dot products"])
def step(request, isa, monkeypatch):
    """How a decode step runs, for the test's calls: `ref` is the query the
    reference takes (q, or q rounded to 16 bits), `slack(c)` what the weights'
    rounding may add to an output over cache c, `dot` whether the integer dot
    products run (dot_products_on)."""
    dot = request.param == "dot products"
    if dot:
        dot_products_on(monkeypatch)
    else:
        _core.i8dot_choose(0)
    yield types.SimpleNamespace(dot=dot, ref=rounded_to_16_bits if dot else (lambda q: q),
                                slack=weights_slack if dot else (lambda c: 0.0))
    _core.i8dot_choose(-1)


@pytest.fixture
def dot(isa, monkeypatch):
    """The integer dot products on (dot_products_on), for one test."""
    dot_products_on(monkeypatch)
    yield
    _core.i8dot_choose(-1)


@pytest.fixture
def widened(isa):
    """The widening Q·Kᵀ alone, whatever the CPU has."""
    _core.i8dot_choose(0)
    yield
    _core.i8dot_choose(-1)


@pytest.mark.parametrize("split", [0, 1])
@pytest.mark.parametrize("H,Hkv", [(4, 4), (8, 2)])
@pytest.mark.parametrize("n,m,d", [(1, 1, 8), (1, 700, 64), (3, 33, 17), (4, 257, 128),
                                   (70, 130, 64), (129, 65, 33), (5, 1000, 128), (2, 64, 1)])
def test_int8_cache_matches_the_dequantised_reference(step, rng, monkeypatch, split, H, Hkv, n,
                                                      m, d):
    if step.dot and not split:
        pytest.skip("the dot products are a decode step's")
    monkeypatch.setattr(_api, "_SPLIT_KV", split)
    c, _, _ = filled(rng, Hkv=Hkv, m=m, d=d)
    q = rng.standard_normal((2, H, n, d)).astype(np.float32)
    for causal in (False, True):
        out, lse = c.attend(q, causal=causal, return_lse=True)
        want, want_lse = dequantised_reference(step.ref(q), c, causal=causal, return_lse=True)
        assert out.dtype == np.float32
        assert_close(out, want, tol(np.float32, m, d) + step.slack(c))
        assert_close(lse, want_lse, 4 * tol(np.float32, m, d) * math.sqrt(d))


MODIFIERS = {
    "mask": lambda rng, H, n, m: {"mask": rng.random((n, m)) < 0.7},
    "bias": lambda rng, H, n, m: {"bias": rng.standard_normal((H, n, m)).astype(np.float32)},
    "alibi": lambda rng, H, n, m: {"alibi_slopes": np.linspace(0.05, 0.5, H)},
    "softcap": lambda rng, H, n, m: {"softcap": 3.0},
    "sinks": lambda rng, H, n, m: {"sinks": np.linspace(-1, 2, H)},
    "window": lambda rng, H, n, m: {"window": 9},
    "key_lengths": lambda rng, H, n, m: {"key_lengths": [m, m - 7], "causal": False},
    "all": lambda rng, H, n, m: {"mask": rng.random((n, m)) < 0.8, "softcap": 4.0,
                                 "alibi_slopes": np.linspace(0.05, 0.5, H),
                                 "bias": rng.standard_normal((n, m)).astype(np.float32),
                                 "sinks": np.zeros(H)},
}


@pytest.mark.parametrize("modifier", sorted(MODIFIERS))
@pytest.mark.parametrize("n,m", [(1, 300), (4, 77), (40, 200)])
def test_int8_cache_with_masks_and_modifiers(step, rng, modifier, n, m):
    H, Hkv, d = 4, 2, 32
    c, _, _ = filled(rng, Hkv=Hkv, m=m, d=d)
    q = rng.standard_normal((2, H, n, d)).astype(np.float32)
    kw = {"causal": True, **MODIFIERS[modifier](rng, H, n, m)}
    assert_close(c.attend(q, **kw), dequantised_reference(step.ref(q), c, **kw),
                 tol(np.float32, m, d) + step.slack(c))


def test_quantisation_round_trip(rng):
    x = rng.standard_normal((3, 5, 64)).astype(np.float32) * rng.uniform(1e-3, 1e3, (3, 5, 1))
    x[1, 2] = 0  # a row of zeros: scale 0, all q 0
    q, s = quantize_int8(x)
    assert q.dtype == np.int8 and s.dtype == np.float32 and s.shape == x.shape[:-1]
    assert np.abs(q.astype(int)).max() == 127 and q.min() >= -127
    assert s[1, 2] == 0 and not q[1, 2].any()
    # the largest value of each row maps to ±127 exactly; every value within scale/2
    assert (np.abs(q).max(axis=-1)[s > 0] == 127).all()
    err = np.abs(dequantize_int8(q, s).astype(np.float64) - x)
    assert (err <= s[..., None] * (0.5 + 1e-5)).all()
    # quantising what dequantising gave is the identity
    q2, s2 = quantize_int8(dequantize_int8(q, s))
    np.testing.assert_array_equal(q2, q)
    np.testing.assert_allclose(s2, s, rtol=1e-6)


def test_any_float_input_is_quantised_and_non_finite_is_refused(rng):
    c = KVCache(1, 8, dtype="int8")
    k = rng.standard_normal((1, 3, 8))
    for a in (k, k.astype(np.float32), k.astype(np.float16), attncore.to_bfloat16(k)):
        c.append(a, a)
    assert len(c) == 12 and c.keys.dtype == np.float32 and c.keys.shape == (1, 12, 8)
    bad = k.copy()
    bad[0, 1, 3] = np.inf
    for x in (bad, np.where(bad == np.inf, np.nan, bad)):
        with pytest.raises(ValueError, match="finite"):
            c.append(x, k)
        with pytest.raises(ValueError, match="finite"):
            c.append(k, x)
    assert len(c) == 12  # nothing landed
    with pytest.raises(TypeError, match="dtype"):
        c.append(k.astype(np.int32), k)


def test_growth_keeps_the_scales(rng):
    c, k, v = filled(rng, m=100, chunks=9)  # capacity 3, doubled several times
    assert c.capacity >= 100
    q, s = quantize_int8(k)
    np.testing.assert_array_equal(c.keys, dequantize_int8(q, s))
    np.testing.assert_array_equal(c.values, dequantize_int8(*quantize_int8(v)))


def test_int8_cache_refuses_what_it_cannot_do(rng):
    c, _, _ = filled(rng, m=10)
    q = rng.standard_normal((2, 2, 1, 16)).astype(np.float32)
    with pytest.raises(ValueError, match="flash"):
        c.attend(q, method="naive")
    with pytest.raises(ValueError, match="return_weights"):
        c.attend(q, return_weights=True)
    with pytest.raises(TypeError, match="unexpected keyword"):
        c.attend(q, split_kv=1)
    with pytest.raises(TypeError, match="float32 queries"):
        c.attend(q.astype(np.float64))
    with pytest.raises(TypeError):
        KVCache(1, 8, dtype=np.int16)


def test_hostile_inputs(widened, rng):
    c, _, _ = filled(rng, m=50, d=16)
    q = rng.standard_normal((2, 4, 3, 16)).astype(np.float32)
    q[0, 1, 2, 5] = np.nan
    q[1, 2, 0, :] = 1e30  # scores overflow to inf: as float32 over the dequantised rows
    nothing = np.zeros((3, 50), bool)
    for kw in ({}, {"mask": nothing}):
        out, lse = c.attend(q, causal=False, return_lse=True, **kw)
        want, want_lse = dequantised_reference(q, c, causal=False, return_lse=True, **kw)
        assert np.isnan(out[0, 1, 2]).all() == np.isnan(want[0, 1, 2]).all()
        if kw:  # every key hidden: zeros and lse -inf, NaN query or not
            assert not out.any() and (lse == -np.inf).all()
        else:
            assert np.isnan(out[0, 1, 2]).all()
            ok = ~np.isnan(want)
            np.testing.assert_array_equal(np.isnan(out), ~ok)
            mid = np.ones(out.shape[:3], bool)
            mid[0, 1, 2] = mid[1, 2, 0] = False  # the NaN and the overflowing rows
            assert_close(out[mid], want[mid], tol(np.float32, 50, 16))


def test_an_all_zero_row_has_scale_zero_and_scores_zero(isa):
    c = KVCache(1, 4, dtype="int8")
    c.append(np.zeros((1, 2, 4), np.float32), np.ones((1, 2, 4), np.float32))
    out = c.attend(np.ones((1, 1, 4), np.float32))
    np.testing.assert_array_equal(out, np.ones((1, 1, 4), np.float32))


@given(B=st.integers(1, 2), Hkv=st.integers(1, 3), g=st.integers(1, 3), n=st.integers(1, 40),
       m=st.integers(1, 300), d=st.integers(1, 70), causal=st.booleans(), seed=st.integers(0, 9))
def test_int8_cache_fuzzed(step, B, Hkv, g, n, m, d, causal, seed):
    rng = np.random.default_rng(seed)
    c, _, _ = filled(rng, B=(B,), Hkv=Hkv, m=m, d=d, chunks=1 + seed % 3)
    q = rng.standard_normal((B, Hkv * g, n, d)).astype(np.float32)
    assert_close(c.attend(q, causal=causal), dequantised_reference(step.ref(q), c, causal=causal),
                 tol(np.float32, m, d) + step.slack(c))


def error_bound(q, c, scale, dot=False):
    """The most the int8 format can move a row's output from the unquantised
    float32 one (docs/usage.md): each key value off by at most ks/2 moves a
    score by at most δ = scale · Σ|q| · ks/2, so the weights by a factor within
    e^{±2δ}; each value off by at most vs/2.  |Δo| ≤ (e^{2δ} − 1)·max|v| + max vs/2.
    dot: the integer dot products' rounding of q adds scale · max|q|/65534 ·
    Σ|k| (k the dequantised key) to δ."""
    _, _, ks, vs = c._snapshot()
    qn = np.abs(q).sum(axis=-1, keepdims=True).astype(np.float64)  # (B, H, n, 1)
    g = q.shape[1] // ks.shape[1]
    ksh = np.repeat(ks, g, axis=1)[:, :, None, :]  # (B, H, 1, m)
    shift = scale * qn * ksh / 2
    if dot:
        knorm = np.repeat(np.abs(c.keys.astype(np.float64)).sum(axis=-1), g, axis=1)
        qtop = np.abs(q).max(axis=-1, keepdims=True).astype(np.float64)
        shift = shift + scale * qtop / 65534 * knorm[:, :, None, :]
    delta = shift.max(axis=-1)  # (B, H, n)
    vmax = np.repeat(np.abs(c.values).max(axis=(-2, -1)), g, axis=1)[:, :, None]
    vhalf = np.repeat(vs.max(axis=-1), g, axis=1)[:, :, None] / 2
    return np.expm1(2 * delta) * vmax + vhalf


@pytest.mark.parametrize("scale_of_data", [1.0, 30.0])
def test_error_against_float32_is_within_the_format_bound(step, rng, scale_of_data):
    c, k, v = filled(rng, Hkv=2, m=500, d=64, scale=scale_of_data)
    q = rng.standard_normal((2, 8, 4, 64)).astype(np.float32) / scale_of_data
    got = c.attend(q)
    exact = attncore.reference.attention(q.astype(np.float64), k.astype(np.float64),
                                         v.astype(np.float64), causal=True)
    err = np.abs(got - exact).max(axis=-1)
    bound = error_bound(q, c, 1 / 8, dot=step.dot) + step.slack(c)
    assert (err <= bound).all()
    assert err.max() > 0  # the format does lose something: the test sees it


def test_the_dot_products_run_and_differ_from_the_widened_step_within_their_bound(dot, rng):
    """Where they are in use, the integer dot products give other bits than
    the widened step (they ran), by no more than rounding q to 16 bits can
    move a score (scale · max|q|/65534 · Σ|k8|·ks, through the weights) and
    rounding the weights an output."""
    c, _, _ = filled(rng, B=(1,), Hkv=2, m=600, d=128)
    q = rng.standard_normal((1, 8, 1, 128)).astype(np.float32)
    got, got_lse = c.attend(q, return_lse=True)
    wide, wide_lse = widened_step(lambda: c.attend(q, return_lse=True))
    assert not np.array_equal(got, wide)
    knorm = np.abs(c.keys.astype(np.float64)).sum(axis=-1).max()
    delta = np.abs(q).max() / 65534 * knorm / math.sqrt(128)
    assert np.abs(got_lse - wide_lse).max() <= delta + 1e-5
    assert (np.abs(got - wide).max()
            <= np.expm1(2 * delta) * np.abs(c.values).max() + weights_slack(c) + 1e-5)


@pytest.mark.parametrize("bad", [np.nan, np.inf, 1e35, 1e-35])
def test_the_dot_products_decline_a_row_they_cannot_round(dot, rng, bad):
    """A query row with a NaN or an inf, or whose largest value lies outside
    [2^-100, 2^100] (1e35; 1e-35 when the rest is as small), takes its
    tile's Q·Kᵀ to the widening kernel.  NaN and inf make weights P·V by
    integer dot products declines too: the same bits as the widened step;
    the others' weights are ordinary, and differ only by their rounding."""
    c, _, _ = filled(rng, B=(1,), Hkv=1, m=300, d=32)
    q = rng.standard_normal((1, 4, 1, 32)).astype(np.float32)
    q[0, 2, 0] = 1e-36 if bad == 1e-35 else q[0, 2, 0]
    q[0, 2, 0, 5] = bad
    got = c.attend(q)
    want = widened_step(lambda: c.attend(q))
    if np.isfinite(bad):
        assert_close(got, want.astype(np.float64), weights_slack(c) + 1e-6)
    else:
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dv", [1, 33, 64, 130])
@pytest.mark.parametrize("rows", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("m", [1, 64, 65, 600])
def test_the_dot_products_pv_is_exact_where_the_weights_round_exactly(dot, rng, dv, rows, m):
    """q = 0 gives every visible key the weight vs, the same for all where
    every value row has the same largest |v|: the weights then round to
    32767 exactly, and P·V by integer dot products is the mean of the visible
    values to float32 rounding — over every column count around the 32-column
    groups, every row count around the four a tile takes, odd and even key
    counts around the 64-key blocks, and a mask that hides keys."""
    v = rng.standard_normal((1, 1, m, dv)).astype(np.float32)
    v[..., 0] = 4.0  # every row's largest |v|: one scale for all
    v[..., 1:] = np.clip(v[..., 1:], -3.9, 3.9)
    c = KVCache(1, 8, batch=(1,), value_dim=dv, dtype="int8", capacity=m)
    c.append(rng.standard_normal((1, 1, m, 8)).astype(np.float32), v)
    q = np.zeros((1, rows, 1, 8), np.float32)
    mask = rng.random((1, m)) < 0.6
    mask[0, 0] = True
    for kw in ({}, {"mask": mask}):
        got = c.attend(q, causal=False, **kw)
        want = dequantised_reference(q, c, causal=False, **kw)
        assert_close(got, want, tol(np.float32, m, 8))


@pytest.mark.parametrize("d", [512, 520])
@pytest.mark.parametrize("H", [1, 4])
def test_the_dot_products_sums_at_their_largest(dot, rng, H, d):
    """q all ones and each key a multiple of all ones: every q16 is 32767 and
    every k8 127, so each key's integer sum is 32767·127·d, the most it can
    be — under 2^31 at d = 512, summed as integers there (AC_I8DOT_EXACT_D),
    over it at d = 520, summed in float32 there.  The keys' sizes differ, so
    a sum that wrapped would turn the scores' order round, not leave them
    tied; one query row (eight keys a register tile) and four (a GQA group)."""
    m = 40
    k = np.linspace(0.01, 0.2, m, dtype=np.float32)[:, None] * np.ones(d, np.float32)
    c = KVCache(1, d, batch=(1,), dtype="int8", capacity=m)
    c.append(k[None, None], rng.standard_normal((1, 1, m, d)).astype(np.float32))
    q = np.ones((1, H, 1, d), np.float32)
    got = c.attend(q, causal=False)
    want = dequantised_reference(q, c, causal=False)
    assert_close(got, want, tol(np.float32, m, d) + weights_slack(c))


@pytest.mark.parametrize("size", [1e-33, 1e-25])
def test_the_dot_products_with_values_of_a_tiny_size(dot, rng, size):
    """Values of size 1e-33 make every weight (the softmax's numerator times
    the value's scale, ~size/127) smaller than 2^-100, where rounding a block
    to 16 bits would need a factor past float's range: P·V goes to the
    widening kernel, and the output keeps its size (1e-25: the weights round
    as usual).  Without the check the weights of 1e-33 became 0."""
    m, d = 300, 16
    c = KVCache(1, d, batch=(1,), dtype="int8", capacity=m)
    c.append(rng.standard_normal((1, 1, m, d)).astype(np.float32),
             (size * rng.standard_normal((1, 1, m, d))).astype(np.float32))
    q = rng.standard_normal((1, 2, 1, d)).astype(np.float32)
    got = c.attend(q, causal=False)
    want = dequantised_reference(rounded_to_16_bits(q), c, causal=False)
    assert_close(got / size, want / size, tol(np.float32, m, d) + weights_slack(c) / size)


@pytest.mark.parametrize("H,Hkv,d,dv", [(8, 2, 128, 128), (5, 1, 40, 33), (2, 2, 16, 130)])
def test_the_avx2_and_avx512_dot_products_agree(rng, monkeypatch, H, Hkv, d, dv):
    """Both sets round q and the weights alike and take the same integer
    sums; only the order of the float32 additions after them differs, so
    their outputs agree to float32 rounding, far inside what the weights'
    rounding is allowed (weights_slack) — over row counts around the four a
    tile takes and d, dv around the vector widths.  (One row a kv head is the
    exception: there avx2 rounds the weights and avx512 does not.)"""
    from attncore import _isa

    if not {"avx512", "avx2"} <= set(_isa.available()):
        pytest.skip("this CPU runs only one of the two sets")
    before = attncore.info()["isa"]
    c, _, _ = filled(rng, B=(1,), Hkv=Hkv, m=300, d=d, dv=dv)
    q = rng.standard_normal((1, H, 1, d)).astype(np.float32)
    got = {}
    try:
        for name in ("avx512", "avx2"):
            _isa.use(name)
            dot_products_on(monkeypatch)  # skips where avx512 lacks AVX512_VNNI
            got[name] = c.attend(q)
        wide = widened_step(lambda: c.attend(q))  # avx2's widening kernels
    finally:
        _core.i8dot_choose(-1)
        _isa.use(before)
    # (one row a kv head: avx512's P·V declines it, so its weights are not rounded there)
    slack = weights_slack(c) if H == Hkv else 0.0
    assert_close(got["avx2"], got["avx512"].astype(np.float64), tol(np.float32, 300, d) + slack)
    assert not np.array_equal(got["avx2"], wide)  # the avx2 dot products ran


def test_the_avx512_pv_declines_one_row(rng, monkeypatch):
    """AVX-512's P·V by integer dot products takes two rows or more (a GQA
    group), not one (MHA), where the widening kernel was the faster: with
    q = 0 both ways give the same scores (0), so an MHA step is the widened
    step's bits and a GQA step, whose weights it rounds, is not."""
    from attncore import _isa

    if "avx512" not in _isa.available():
        pytest.skip("no avx512 on this CPU")
    before = attncore.info()["isa"]
    c, _, _ = filled(rng, B=(1,), Hkv=2, m=300, d=16)
    try:
        _isa.use("avx512")
        dot_products_on(monkeypatch)  # skips without AVX512_VNNI
        for H, same in ((2, True), (8, False)):
            q = np.zeros((1, H, 1, 16), np.float32)
            got = c.attend(q)
            assert np.array_equal(got, widened_step(lambda: c.attend(q))) == same
    finally:
        _core.i8dot_choose(-1)
        _isa.use(before)

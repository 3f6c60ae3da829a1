"""16-bit inputs: q, k and v all float16 or all bfloat16 (uint16 bits, or
ml_dtypes.bfloat16 when installed).  The values are widened exactly, the
arithmetic, the softmax state and the sums are float32, and the output is
rounded once to the inputs' type (or kept float32 with out_dtype).

So the float32 output must equal the float64 reference on the widened
values to float32's tolerance, and the 16-bit output must be exactly that
float32 output rounded to nearest even: the only error the 16-bit output
adds is one rounding, half an ulp of its type.

One exception, stated in the docs: bfloat16 q, k, v through the bfloat16
dot-product kernels (AVX512_BF16, csrc/bf16dot.c) round the weights P to
bfloat16 for P·V, which moves each output by at most 2⁻⁹·Σ_j p_j|v_j|/l ≤
2⁻⁹·max|v|; `tolerance` adds that where those kernels run."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import attncore
from attncore import _api
from helpers import HALF_KINDS, assert_close, not_emulated, to_kind, tol, widen

@pytest.fixture(params=HALF_KINDS)
def kind(request):
    return request.param


def rounded(out32, like):
    """float32 values rounded as attncore rounds its 16-bit output."""
    if like == np.float16:
        return out32.astype(np.float16)
    return attncore.to_bfloat16(out32).view(like)


def qkv(rng, kind, B=(2,), H=4, Hkv=2, n=9, m=40, d=16, scale=1.0):
    q = to_kind(scale * rng.standard_normal(B + (H, n, d)), kind)
    k = to_kind(scale * rng.standard_normal(B + (Hkv, m, d)), kind)
    v = to_kind(rng.standard_normal(B + (Hkv, m, d)), kind)
    return q, k, v


def reference(q, k, v, **kw):
    return attncore.reference.attention(widen(q), widen(k), widen(v), **kw)


@pytest.fixture(params=["chosen", "dot products"])
def dot(request):
    """bfloat16 inputs as the core chooses (measured: the dot products where
    they beat the FMAs), then with the dot products forced on where the
    kernels in use have them, so that they are tested on any CPU that can
    run them, faster or not."""
    attncore._core.bf16dot_choose(1 if request.param == "dot products" else -1)
    yield request.param
    attncore._core.bf16dot_choose(-1)


def dot_products_run(x):
    """Do bfloat16 inputs go through the bfloat16 dot products here (the
    avx512 kernels in use on a CPU with AVX512_BF16)?"""
    return x.dtype != np.float16 and attncore._core.bf16dot_supported()


def tolerance(v, m, d):
    """float32's, plus P's rounding to bfloat16 where the dot products run."""
    extra = 2.0**-9 * float(np.abs(widen(v)).max(initial=0)) if dot_products_run(v) else 0
    return tol(np.float32, m, d) + extra


@pytest.mark.parametrize("split", [0, 1])
@pytest.mark.parametrize("method", ["flash", "naive"])
@pytest.mark.parametrize("n,m,d", [(1, 1, 8), (1, 700, 64), (3, 33, 17), (70, 130, 64),
                                   (129, 65, 128), (200, 300, 32), (5, 1000, 128)])
def test_half_inputs_match_the_widened_reference(isa, dot, rng, monkeypatch, kind, split, method,
                                                 n, m, d):
    monkeypatch.setattr(_api, "_SPLIT_KV", split)
    q, k, v = qkv(rng, kind, n=n, m=m, d=d)
    for causal in (False, True):
        o32, lse = attncore.attention(q, k, v, causal=causal, method=method, return_lse=True,
                                      out_dtype=np.float32)
        want, want_lse = reference(q, k, v, causal=causal, return_lse=True)
        assert o32.dtype == lse.dtype == np.float32
        assert_close(o32, want, tolerance(v, m, d))
        assert_close(lse, want_lse, 8 * tol(np.float32, m, d))
        out = attncore.attention(q, k, v, causal=causal, method=method)
        assert out.dtype == q.dtype
        np.testing.assert_array_equal(out.view(np.uint16), rounded(o32, q.dtype).view(np.uint16))


@pytest.mark.parametrize("mods", [
    {"causal": True, "window": 7},
    {"mask": "random"},
    {"key_lengths": [40, 25]},
    {"causal": True, "alibi_slopes": [0.1, 0.2, 0.3, 0.4], "softcap": 5.0, "sinks": [0, 1, -1, 2]},
    {"bias": "random"},
])
def test_half_inputs_with_masks_and_modifiers(isa, dot, rng, kind, mods):
    q, k, v = qkv(rng, kind, n=33, m=40, d=32)
    kw = dict(mods)
    if kw.get("mask") == "random":
        kw["mask"] = rng.random((33, 40)) < 0.6
    if kw.get("bias") == "random":
        kw["bias"] = rng.standard_normal((4, 33, 40)).astype(np.float32)
    got = attncore.attention(q, k, v, out_dtype=np.float32, **kw)
    assert_close(got, reference(q, k, v, **kw), tolerance(v, 40, 32))


def test_a_half_kvcache_takes_half_queries(isa, rng, kind):
    dt = np.float16 if kind == "float16" else "bfloat16"
    c = attncore.KVCache(2, 16, dtype=dt)
    q, k, v = qkv(rng, kind, B=(), n=1, m=50)
    if kind == "ml_dtypes" or (kind == "bfloat16" and c.dtype != np.uint16):
        k, v, q = (x.view(c.dtype) for x in (k, v, q))
    c.append(k, v)
    out = c.attend(q, out_dtype=np.float32)
    assert_close(out, reference(q, c.keys, c.values, causal=True), tolerance(v, 50, 16))


def test_half_backward_is_the_widened_backward_rounded(isa, rng, kind):
    q, k, v = qkv(rng, kind, n=50, m=50, d=16)
    o, lse = attncore.attention(q, k, v, causal=True, return_lse=True)
    dout = to_kind(rng.standard_normal(o.shape), kind)
    grads = attncore.attention_backward(q, k, v, o, lse, dout, causal=True)
    wide = attncore.attention_backward(*(widen(a).astype(np.float32) for a in (q, k, v, o)), lse,
                                       widen(dout).astype(np.float32), causal=True)
    for g, w, x in zip(grads, wide, (q, k, v)):
        assert g.dtype == x.dtype and g.shape == x.shape
        np.testing.assert_array_equal(g.view(np.uint16), rounded(w, x.dtype).view(np.uint16))
    ref = attncore.reference.attention_backward(widen(q), widen(k), widen(v), widen(o),
                                                lse.astype(np.float64), widen(dout), causal=True)
    for w, r in zip(wide, ref):
        assert_close(w, r, 20 * tol(np.float32, 50, 16))
    # out and dout may be float32 (out_dtype=np.float32), the gradients are of q, k, v's kind
    o32 = attncore.attention(q, k, v, causal=True, out_dtype=np.float32)
    g32 = attncore.attention_backward(q, k, v, o32, lse, widen(dout).astype(np.float32),
                                      causal=True)
    assert all(g.dtype == q.dtype for g in g32)
    with pytest.raises(TypeError, match="must be"):
        attncore.attention_backward(q, k, widen(v), o, lse, dout)


def test_half_hostile_inputs(isa, dot, rng, kind):
    q, k, v = qkv(rng, kind, n=6, m=20, d=8)
    # huge, but its scores (~8e30 for bfloat16) still finite in float32
    big = to_kind(np.full((8,), 3e4 if kind == "float16" else 1e30), kind)
    nan = to_kind(np.full((8,), np.nan), kind)
    q, v = q.copy(), v.copy()
    q[0, 0, 0] = nan            # a NaN query row: that row NaN
    q[0, 1, 2] = big            # huge scores: the row max is subtracted, no overflow
    v[1, 0, 3] = to_kind(np.full((8,), np.inf), kind)  # inf in a value
    nothing = np.zeros((6, 20), bool)
    out, lse = attncore.attention(q, k, v, return_lse=True, out_dtype=np.float32)
    want, want_lse = reference(q, k, v, return_lse=True)
    np.testing.assert_array_equal(np.isnan(out), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(out), np.isinf(want))
    fin = np.isfinite(want)
    rows = np.ones(out.shape[:3], bool)
    rows[0, 1, 2] = False  # the huge row: float32 scores ~1e30 round by ~1e23, so its
    assert_close(out[rows][fin[rows]], want[rows][fin[rows]], tolerance(v[..., :1, :], 20, 8))
    assert np.isfinite(out[0, 1, 2]).all()  # weights need not match; it is finite, not NaN
    half = attncore.attention(q, k, v)
    assert np.isnan(widen(half[0, 0, 0])).all()
    out, lse = attncore.attention(q, k, v, mask=nothing, return_lse=True)
    assert not widen(out).any() and (lse == -np.inf).all()


@given(n=st.integers(1, 70), m=st.integers(1, 150), d=st.integers(1, 40), g=st.integers(1, 3),
       causal=st.booleans(), seed=st.integers(0, 99), bf=st.booleans())
def test_half_inputs_fuzzed(isa, dot, n, m, d, g, causal, seed, bf):
    rng = np.random.default_rng(seed)
    q, k, v = qkv(rng, "bfloat16" if bf else "float16", B=(1,), H=2 * g, Hkv=2, n=n, m=m, d=d)
    got = attncore.attention(q, k, v, causal=causal, out_dtype=np.float32)
    assert_close(got, reference(q, k, v, causal=causal), tolerance(v, m, d))


def test_byte_swapped_half_inputs(isa, dot, rng, kind):
    if kind == "ml_dtypes":
        pytest.skip("ml_dtypes' bfloat16 has one byte order")
    q, k, v = qkv(rng, kind, n=20, m=30)
    swapped = [a.astype(a.dtype.newbyteorder(">" if a.dtype.byteorder != ">" else "<"))
               for a in (q, k, v)]
    want = attncore.attention(q, k, v, causal=True, out_dtype=np.float32)
    np.testing.assert_array_equal(attncore.attention(*swapped, causal=True, out_dtype=np.float32),
                                  want)
    if kind == "bfloat16":
        np.testing.assert_array_equal(attncore.from_bfloat16(swapped[0]), attncore.from_bfloat16(q))


def test_bfloat16_queries_are_widened_only_when_asked_for(rng):
    from attncore._problem import problem

    q, k, v = qkv(rng, "bfloat16", n=5, m=7)
    p = problem(q, k, v)
    assert p.wide_q is None and p.dtype == np.float32 and p.shape == (2, 4, 2, 5, 7, 16, 16)
    np.testing.assert_array_equal(p.q16, np.asarray(q).view(np.uint16))
    np.testing.assert_array_equal(p.q, widen(q).astype(np.float32))  # widened now, once
    assert p.q is p.wide_q


def test_the_dot_products_never_widen_the_queries(isa, rng, monkeypatch):
    if not attncore._core.bf16dot_supported():
        pytest.skip("the bfloat16 dot products do not run here")
    from attncore._problem import Problem

    q, k, v = qkv(rng, "bfloat16", n=70, m=130, d=64)
    want = attncore.attention(q, k, v, causal=True)

    def refused(self):
        raise AssertionError("bfloat16 queries widened on the dot-product path")

    monkeypatch.setattr(Problem, "q", property(refused))
    np.testing.assert_array_equal(attncore.attention(q, k, v, causal=True), want)


def test_out_dtype_rules(rng):
    q, k, v = qkv(rng, "float16")
    f = widen(q).astype(np.float32)
    assert attncore.attention(q, k, v, out_dtype=np.float16).dtype == np.float16
    assert attncore.attention(f, k, v, out_dtype=np.float32).dtype == np.float32
    for bad in (np.float64, np.int8):
        with pytest.raises(ValueError, match="out_dtype"):
            attncore.attention(q, k, v, out_dtype=bad)
    with pytest.raises(ValueError, match="out_dtype"):
        attncore.attention(f, *(widen(a).astype(np.float32) for a in (k, v)), out_dtype=np.float16)
    with pytest.raises(TypeError, match="out_dtype"):
        attncore.attention(q, k, v, out_dtype="no such dtype")


# ---- the bfloat16 dot products (AVX512_BF16) against the widening kernels ----

def widened_path(q, k, v, **kw):
    """The widening kernels on the same bfloat16 inputs (counting tiles keeps
    the call off the dot products)."""
    return _api._attention(q, k, v, block_counts=np.zeros(2, np.int64), out_dtype=np.float32, **kw)


@pytest.mark.parametrize("n,m,d,dv,bk", [(6, 1, 8, 8, None), (70, 130, 64, 64, None),
                                         (13, 77, 3, 5, 9), (129, 300, 33, 17, 37),
                                         (300, 257, 128, 80, None), (5, 64, 1, 1, 16)])
def test_dot_products_agree_with_the_widening_kernels(isa, rng, n, m, d, dv, bk):
    attncore._core.bf16dot_choose(1)  # wherever the kernels in use have them
    try:
        _agree(rng, n, m, d, dv, bk)
    finally:
        attncore._core.bf16dot_choose(-1)


def _agree(rng, n, m, d, dv, bk):
    q = attncore.to_bfloat16(rng.standard_normal((2, 4, n, d)))
    k = attncore.to_bfloat16(rng.standard_normal((2, 2, m, d)))
    v = attncore.to_bfloat16(rng.standard_normal((2, 2, m, dv)))
    for causal in (False, True):
        got = attncore.attention(q, k, v, causal=causal, block_k=bk, out_dtype=np.float32)
        wide = widened_path(q, k, v, causal=causal, block_k=bk)
        # bit for bit where nothing can differ: one key (its weight is 1, exact in bfloat16),
        # and equal scores (q = 0: every weight exp(0) = 1; the sums of these small
        # integer values are exact in either order)
        if m == 1:
            np.testing.assert_array_equal(got, wide)
        assert_close(got, wide, tol(np.float32, m, d) + 2.0**-9 * np.abs(widen(v)).max())
    vi = attncore.to_bfloat16(rng.integers(-8, 9, (2, 2, m, dv)))
    z = np.zeros_like(q)
    np.testing.assert_array_equal(attncore.attention(z, k, vi, block_k=bk, out_dtype=np.float32),
                                  widened_path(z, k, vi, block_k=bk))


@pytest.mark.parametrize("d", [64, 33, 2])
def test_dot_products_take_any_layout(isa, rng, d):
    # K and V reversed along the keys (negative strides), heads interleaved with the keys
    # ((B, m, H, d) transposed: keys H·d apart) and q strided: the packing reads them all
    # to the same bits as contiguous copies
    attncore._core.bf16dot_choose(1)
    try:
        q = attncore.to_bfloat16(rng.standard_normal((2, 70, 4, d))).transpose(0, 2, 1, 3)
        k = attncore.to_bfloat16(rng.standard_normal((2, 150, 2, d))).transpose(0, 2, 1, 3)
        v = attncore.to_bfloat16(rng.standard_normal((2, 2, 150, d)))[:, :, ::-1]
        # q's rows read in place (pairs on 4-byte boundaries) or packed: a row an odd
        # number of values long and one value off the start of its buffer
        qo = attncore.to_bfloat16(rng.standard_normal((2, 4, 70, d + 1)))[..., 1:]
        for qq, kk in ((q, k), (q, k[:, :, ::-1]), (qo, k)):
            for causal in (False, True):
                got = attncore.attention(qq, kk, v, causal=causal, out_dtype=np.float32)
                want = attncore.attention(*(np.ascontiguousarray(a) for a in (qq, kk, v)),
                                          causal=causal, out_dtype=np.float32)
                np.testing.assert_array_equal(got, want)
    finally:
        attncore._core.bf16dot_choose(-1)


def test_dot_products_keep_hidden_values_out(isa, rng):
    attncore._core.bf16dot_choose(1)
    try:
        _hidden_values(rng)
    finally:
        attncore._core.bf16dot_choose(-1)


def _hidden_values(rng):
    # V with inf and NaN under the causal mask and a -inf bias: the rows that cannot
    # see them stay finite (those tiles take the widening P·V), the others do not
    n = m = 200
    q, k = (attncore.to_bfloat16(rng.standard_normal((1, 2, n, 64))) for _ in range(2))
    v = rng.standard_normal((1, 2, m, 64)).astype(np.float32)
    v[0, 0, 150, 3] = np.inf
    v[0, 1, 160, 4] = np.nan
    v = attncore.to_bfloat16(v)
    out = attncore.attention(q, k, v, causal=True, out_dtype=np.float32)
    want = reference(q, k, v, causal=True)
    np.testing.assert_array_equal(np.isnan(out), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(out), np.isinf(want))
    assert np.isfinite(out[0, 0, :150]).all() and np.isfinite(out[0, 1, :160]).all()
    bias = np.zeros((n, m), np.float32)
    bias[:, 150:170] = -np.inf
    out = attncore.attention(q, k, v, bias=bias, out_dtype=np.float32)
    assert np.isfinite(out).all()
    assert_close(out, reference(q, k, v, bias=bias), tolerance(v[..., :100, :], m, 64))


@pytest.mark.parametrize("spread", [1.0, 6.0])
def test_the_dot_products_weights_are_float32_exps(isa, rng, spread):
    # the dot products compute the weights by their own exp (kern_avx512_bf16.c's
    # exp_weights) and round them to bfloat16 only for P·V; the log-sum-exp sums
    # them before the rounding, so it must hold float32's tolerance against the
    # float64 reference (an exp 10⁻⁴ off fails it), also where the scores spread six
    # times as far and most weights are tiny
    attncore._core.bf16dot_choose(1)
    try:
        for causal in (False, True):
            q, k, v = qkv(rng, "bfloat16", H=2, Hkv=2, n=150, m=300, d=64,
                          scale=float(np.sqrt(spread)))
            _, lse = attncore.attention(q, k, v, causal=causal, return_lse=True,
                                        out_dtype=np.float32)
            _, want = reference(q, k, v, causal=causal, return_lse=True)
            assert_close(lse, want, tol(np.float32, 300, 64) * max(1.0, spread))
    finally:
        attncore._core.bf16dot_choose(-1)


def test_the_dot_products_run_only_on_the_avx512_kernels_and_when_chosen():
    from attncore import _isa

    before = attncore.info()["isa"]
    try:
        for name in _isa.available():
            _isa.use(name)
            attncore._core.bf16dot_choose(1)
            assert attncore._core.bf16dot_supported() == (
                name == "avx512" and "avx512_bf16" in _cpu_flags())
            attncore._core.bf16dot_choose(0)
            assert not attncore._core.bf16dot_supported()
            attncore._core.bf16dot_choose(-1)  # measured: the same answer twice
            assert attncore._core.bf16dot_supported() == attncore._core.bf16dot_supported()
    finally:
        attncore._core.bf16dot_choose(-1)
        _isa.use(before)


@not_emulated("it starts another interpreter")
@pytest.mark.parametrize("env", ["0", "1"])
def test_ATTNCORE_BF16DOT_decides(env, tmp_path):
    import subprocess
    import sys

    code = ("import attncore; from attncore import _isa; "
            "print(attncore._core.bf16dot_supported(), 'avx512' in _isa.available())")
    # from an empty folder: the installed attncore, not a source tree in the working directory
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       cwd=tmp_path, env=dict(__import__("os").environ, ATTNCORE_BF16DOT=env,
                                              ATTNCORE_ISA=""))
    assert r.returncode == 0, r.stderr
    used, avx512 = r.stdout.split()
    assert used == str(env == "1" and avx512 == "True" and "avx512_bf16" in _cpu_flags())


def _cpu_flags():
    try:
        with open("/proc/cpuinfo") as f:
            return next((line for line in f if line.startswith(("flags", "Features"))), "").split()
    except OSError:
        return []

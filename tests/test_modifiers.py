"""Score modifiers: an additive bias, ALiBi, the logit soft-cap and attention
sinks, in every kernel (flash, naive, plain, split-KV decode with float32 and
16-bit caches, backward) on every ISA, against the reference, which writes
each one independently (reference.py: the bias added to the table, ALiBi
from the positions, tanh on the table, the sink as one more column)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import attncore
from attncore._api import _attention
from helpers import assert_close, qkv, reference, tol


def _mods(rng, which, H, n, m, dtype, lead=(1,)):
    """The keywords of one modifier set: "bias", "alibi", "softcap", "sinks", "all"."""
    kw = {}
    if which in ("bias", "all"):
        b = rng.standard_normal(lead + (H, n, m)).astype(dtype)
        b[..., 0, ::3] = -np.inf  # hidden keys
        b[..., -1, :] += np.finfo(dtype).min / 2  # a row at the bottom of the range
        kw["bias"] = b
    if which in ("alibi", "all"):
        kw["alibi_slopes"] = 2.0 ** -np.arange(1, H + 1)
    if which in ("softcap", "all"):
        kw["softcap"] = 2.5
    if which in ("sinks", "all"):
        kw["sinks"] = np.linspace(-1, 2, H)
    return kw


KINDS = ["bias", "alibi", "softcap", "sinks", "all"]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("which", KINDS)
@pytest.mark.parametrize("shape", [dict(n=37, m=53, causal=False), dict(n=64, m=64, causal=True),
                                   dict(n=20, m=70, causal=True, window=17)])
def test_every_kernel_matches_the_reference(isa, rng, dtype, which, shape):
    shape = dict(shape)
    n, m = shape.pop("n"), shape.pop("m")
    q, k, v = qkv(rng, B=(2,), H=4, Hkv=2, n=n, m=m, dk=16, dv=12, dtype=dtype)
    kw = dict(_mods(rng, which, 4, n, m, dtype), key_lengths=np.array([m, m - 7]), **shape)
    want, want_lse = reference(q, k, v, return_lse=True, **kw)
    t = tol(dtype, m, 16) * (4 if which in ("softcap", "all") else 1)
    for method, bq, bk in (("flash", None, None), ("flash", 16, 16), ("flash", 7, 5),
                           ("naive", None, None)):
        out, lse = attncore.attention(q, k, v, method=method, block_q=bq, block_k=bk,
                                      return_lse=True, **kw)
        assert_close(out, want, t)
        assert_close(lse, want_lse, 4 * t)
    assert_close(attncore.plain_attention(q, k, v, **kw), want, t)


@pytest.mark.parametrize("which", KINDS)
@pytest.mark.parametrize("kv", [np.float32, np.float16, "bfloat16"])
def test_decode_and_split_kv(isa, rng, which, kv):
    """A few query rows against a long cache: the split-KV path stacks a GQA
    group's heads, so per-head slopes, sinks and bias planes must follow the
    row; each row's sink goes in once however many chunks there are."""
    q, k, v = qkv(rng, B=(2,), H=8, Hkv=2, n=2, m=3000, dk=32, dtype=np.float32)
    if kv == "bfloat16":
        k, v = attncore.to_bfloat16(k), attncore.to_bfloat16(v)
    else:
        k, v = k.astype(kv), v.astype(kv)
    kw = _mods(rng, which, 8, 2, 3000, np.float32, lead=(2,))
    want = attncore.reference.attention(q, k, v, causal=True, **kw)
    for split in (0, 1):
        got = _attention(q, k, v, causal=True, split_kv=split, **kw)
        assert_close(got, want, 3e-5)


def test_a_minus_inf_bias_is_a_mask(isa, rng):
    """-inf in the bias hides a key exactly as the boolean mask does: the same
    result, and a hidden key's inf or NaN value never reaches the row."""
    q, k, v = qkv(rng, B=(2,), H=2, n=30, m=40, dk=8)
    hide = rng.random((2, 2, 30, 40)) < 0.3
    v[..., 5, :] = np.inf
    v[..., 9, :] = np.nan
    hide[..., 5] = hide[..., 9] = True
    bias = np.where(hide, -np.inf, 0.0)
    for method in ("flash", "naive"):
        by_mask = attncore.attention(q, k, v, mask=~hide, method=method)
        by_bias = attncore.attention(q, k, v, bias=bias, method=method)
        assert np.isfinite(by_bias).all()
        assert_close(by_bias, by_mask, 1e-14)
    assert_close(attncore.plain_attention(q, k, v, bias=bias),
                 attncore.plain_attention(q, k, v, mask=~hide), 1e-14)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_finfo_min_gives_weight_zero_without_nan(isa, rng, dtype):
    """The float masks older transformers releases build: finfo.min where a key
    is hidden.  Weight 0 for those keys, no overflow, no NaN; a row where every
    key has it is the uniform average, as in torch."""
    q, k, v = qkv(rng, H=2, n=16, m=24, dk=8, dtype=dtype)
    hidden = np.zeros((16, 24), bool)
    hidden[:, 10:] = True
    hidden[3] = True  # every key of row 3
    bias = np.where(hidden, np.finfo(dtype).min, 0).astype(dtype)
    out = attncore.attention(q, k, v, bias=bias)
    assert np.isfinite(out).all()
    want = attncore.attention(q, k, v, mask=~hidden)
    rows = np.arange(16) != 3
    assert_close(out[:, rows], want[:, rows], tol(dtype, 24, 8))
    assert_close(out[:, 3], v.mean(axis=-2), tol(dtype, 24, 8) * 4)


def test_the_bias_is_read_through_its_strides(isa, rng):
    """Broadcast dims, a transposed (non-contiguous) bias and several batch
    dims: read in place, never expanded or copied (the same numbers as the
    expanded copy)."""
    q, k, v = qkv(rng, B=(2, 3), H=4, n=12, m=20, dk=8)
    for bias in (rng.standard_normal((20, 12)).T,  # (n, m) view, column-major
                 rng.standard_normal((3, 1, 1, 20)),  # over batch dim 2 and keys only
                 rng.standard_normal((2, 1, 4, 12, 1)),  # per batch 1, head and row
                 np.broadcast_to(rng.standard_normal(20), (2, 3, 4, 12, 20))):
        dense = np.ascontiguousarray(np.broadcast_to(bias, (2, 3, 4, 12, 20)))
        for method in ("flash", "naive"):
            assert_close(attncore.attention(q, k, v, bias=bias, method=method),
                         attncore.attention(q, k, v, bias=dense, method=method), 0)
        assert_close(attncore.attention(q, k, v, bias=bias),
                     attncore.reference.attention(q, k, v, bias=dense), 1e-14)


def test_alibi_is_the_bias_it_stands_for(isa, rng):
    """ALiBi computed in the kernel equals the same penalty given as a bias,
    with positions from q_offset / k_offset, causal or not."""
    q, k, v = qkv(rng, B=(2,), H=4, n=10, m=30, dk=8)
    slopes = np.array([0.5, 0.25, 0.125, 0.0625])
    qo, ko = np.array([100, 35]), np.array([80, 10])
    dist = (qo[:, None, None] + np.arange(10)[None, :, None]) - (
        ko[:, None, None] + np.arange(30)[None, None, :])
    bias = -slopes[None, :, None, None] * np.abs(dist)[:, None]
    for causal in (False, True):
        got = attncore.attention(q, k, v, alibi_slopes=slopes, q_offset=qo, k_offset=ko,
                                 causal=causal)
        placed = dict(q_offset=qo, k_offset=ko) if causal else {}  # only ALiBi and causal
        want = attncore.attention(q, k, v, bias=bias, causal=causal, **placed)  # read them
        assert_close(got, want, 1e-13)
    # the defaults: bottom-right, distance (i + m - n) - j, as FlashAttention's ALiBi
    d0 = (np.arange(10)[:, None] + 20) - np.arange(30)[None, :]
    assert_close(attncore.attention(q, k, v, alibi_slopes=slopes),
                 attncore.attention(q, k, v, bias=-slopes[:, None, None] * np.abs(d0)), 1e-13)


def test_softcap_bounds_the_scores(isa, rng):
    q, k, v = qkv(rng, H=2, n=8, m=16, dk=8)
    s = attncore.scores(q * 10, k, softcap=3.0)
    assert np.abs(s).max() <= 3.0
    assert_close(s, 3.0 * np.tanh(attncore.scores(q * 10, k) / 3.0), 1e-14)
    s32 = attncore.scores((q * 10).astype(np.float32), k.astype(np.float32), softcap=30.0)
    assert_close(s32, 30.0 * np.tanh(attncore.scores(q * 10, k) / 30.0), 30 * 4e-7)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_softcap_in_the_blockwise_kernels_store(isa, rng, dtype):
    """The blockwise kernel caps each score in registers as Q·Kᵀ is stored
    (the maxima fused in): interior tiles, diagonal tiles and a partial last
    vector of keys, huge scores held to the cap, a NaN key still poisoning the
    rows that see it."""
    q, k, v = qkv(rng, B=(1,), H=2, n=70, m=83, dk=16, dtype=dtype)
    q = q * 1e3  # scores in the thousands: tanh is ±1 there, the exp stays finite
    for causal in (False, True):
        got = attncore.attention(q, k, v, causal=causal, softcap=7.0)
        want = reference(q, k, v, causal=causal, softcap=7.0)
        assert np.isfinite(got).all()
        assert_close(got, want, tol(dtype, 83, 16) * 4)
    k[0, 1, 40, 3] = np.nan
    got = attncore.attention(q, k, v, causal=True, softcap=7.0)
    assert np.isnan(got[0, 1, 70 - 83 + 40:]).all()  # the rows that see key 40 (bottom-right)
    assert np.isfinite(got[0, 1, :70 - 83 + 40]).all() and np.isfinite(got[0, 0]).all()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_bias_at_an_odd_address_is_read_as_a_copy(isa, rng, dtype):
    """A bias whose data sits off its itemsize (as one deserialized from a
    network buffer can): read through an aligned copy, same result."""
    q, k, v = qkv(rng, B=(1,), H=2, n=20, m=37, dk=8, dtype=dtype)
    raw = np.zeros(np.dtype(dtype).itemsize * 2 * 20 * 37 + 1, np.uint8)
    bias = np.frombuffer(raw[1:].data, dtype=dtype).reshape(2, 20, 37)
    bias[...] = rng.standard_normal(bias.shape)
    assert not bias.flags.aligned
    got = attncore._problem.check_bias(bias, attncore._problem.problem(q, k, v))[0]
    assert got.flags.aligned
    assert_close(attncore.attention(q, k, v, bias=bias),
                 attncore.attention(q, k, v, bias=bias.copy()), 0)


def test_a_sink_takes_weight_and_a_row_may_give_none(isa, rng):
    q, k, v = qkv(rng, H=2, n=6, m=10, dk=4)
    out, lse = attncore.attention(q, k, v, sinks=[50.0, -np.inf], return_lse=True)
    assert np.abs(out[0]).max() < 1e-15  # the sink takes (nearly) all the weight
    assert_close(out[1], attncore.attention(q, k, v)[1], 0)  # -inf: no sink
    assert_close(lse[0], np.full(6, 50.0), 1e-12)
    # a row that sees no key: weight all on the sink, out 0, lse = the sink
    o2, l2 = attncore.attention(q, k, v, causal=True, q_offset=0, k_offset=100, sinks=[1.5, 2.0],
                                return_lse=True)
    assert np.all(o2 == 0) and np.all(l2 == np.array([[1.5], [2.0]]))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("which", KINDS)
@pytest.mark.parametrize("B,Hkv", [((2,), 2), ((1,), 1)])  # one pass / two passes
def test_backward_matches_the_reference(isa, rng, dtype, which, B, Hkv):
    q, k, v = qkv(rng, B=B, H=4, Hkv=Hkv, n=33, m=41, dk=8, dtype=dtype)
    kw = dict(_mods(rng, which, 4, 33, 41, dtype), causal=True, window=30)
    out, lse = attncore.reference.attention(q, k, v, return_lse=True, **kw)
    dout = rng.standard_normal(out.shape).astype(dtype)
    flags = dict(return_dbias="bias" in kw, return_dsinks="sinks" in kw)
    want = attncore.reference.attention_backward(q, k, v, out, lse, dout, **kw, **flags)
    t = 1e-12 if dtype == np.float64 else 2e-4
    for method in ("flash", "naive"):
        got = attncore.attention_backward(q, k, v, out, lse, dout, method=method, **kw, **flags)
        assert len(got) == 3 + flags["return_dbias"] + flags["return_dsinks"]
        for g, w in zip(got, want):
            assert g.shape == w.shape and g.dtype == dtype
            assert_close(g, w, t * max(1, np.abs(w).max()))


def test_gradients_by_finite_differences(rng):
    """d(bias), d(sinks) and dq through the soft-cap against central differences
    of the loss Σ out ∘ dout, in float64."""
    q, k, v = qkv(rng, B=(2,), H=2, n=9, m=11, dk=4)
    bias = rng.standard_normal((1, 2, 9, 11))  # broadcast over the batch
    kw = dict(bias=bias, sinks=np.array([0.3, -0.7]), softcap=1.5, alibi_slopes=[0.1, 0.2],
              causal=True)
    out, lse = attncore.attention(q, k, v, return_lse=True, **kw)
    dout = rng.standard_normal(out.shape)
    dq, dk, dv, dbias, dsinks = attncore.attention_backward(
        q, k, v, out, lse, dout, return_dbias=True, return_dsinks=True, **kw)
    assert dbias.shape == bias.shape and dsinks.shape == (2,)

    def loss(**change):
        args = dict(q=q, k=k, v=v)
        call = dict(kw)
        for name, value in change.items():
            (args if name in args else call)[name] = value
        return float(np.sum(attncore.attention(args["q"], args["k"], args["v"], **call) * dout))

    def diff(name, base, idx, eps=1e-6):
        up, down = base.copy(), base.copy()
        up[idx] += eps
        down[idx] -= eps
        return (loss(**{name: up}) - loss(**{name: down})) / (2 * eps)

    for idx in ((0, 1, 4, 2), (1, 0, 8, 3)):
        assert abs(diff("q", q, idx) - dq[idx]) < 1e-7
    for idx in ((0, 1, 4, 2), (0, 0, 8, 0)):
        assert abs(diff("bias", bias, idx) - dbias[idx]) < 1e-7
    for h in range(2):
        assert abs(diff("sinks", kw["sinks"], h) - dsinks[h]) < 1e-7


def test_bad_modifiers_are_refused(rng):
    q, k, v = qkv(rng, B=(2,), H=4, n=5, m=9, dk=4)
    with pytest.raises(TypeError, match="bias must be a float array.*mask="):
        attncore.attention(q, k, v, bias=np.ones((5, 9), bool))
    with pytest.raises(ValueError, match="does not broadcast"):
        attncore.attention(q, k, v, bias=np.ones((3, 9)))
    with pytest.raises(ValueError, match="one value per query head"):
        attncore.attention(q, k, v, alibi_slopes=[1.0, 2.0])
    with pytest.raises(ValueError, match="finite"):
        attncore.attention(q, k, v, alibi_slopes=[1.0, np.nan, 1, 1])
    for cap in (0, -1.0, np.inf):
        with pytest.raises(ValueError, match="softcap"):
            attncore.attention(q, k, v, softcap=cap)
    with pytest.raises(TypeError, match="softcap"):
        attncore.attention(q, k, v, softcap="2")
    with pytest.raises(ValueError, match="sinks"):
        attncore.attention(q, k, v, sinks=[0, np.nan, 0, 0])
    with pytest.raises(ValueError, match="sinks"):
        attncore.attention(q, k, v, sinks=np.inf)
    out, lse = attncore.attention(q, k, v, return_lse=True)
    with pytest.raises(ValueError, match="return_dbias=True needs a bias"):
        attncore.attention_backward(q, k, v, out, lse, out, return_dbias=True)
    with pytest.raises(ValueError, match="return_dsinks=True needs sinks"):
        attncore.reference.attention_backward(q, k, v, out, lse, out, return_dsinks=True)
    with pytest.raises(ValueError, match="causal=True or alibi_slopes"):
        attncore.attention(q, k, v, q_offset=3)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 40), m=st.integers(1, 40), which=st.sampled_from(KINDS),
       causal=st.booleans(), window=st.one_of(st.none(), st.integers(1, 30)),
       gqa=st.booleans(), bq=st.sampled_from([None, 1, 3, 8]), bk=st.sampled_from([None, 1, 5, 8]),
       masked=st.booleans())
def test_any_modified_call_matches_the_reference(n, m, which, causal, window, gqa, bq, bk,
                                                 masked):
    rng = np.random.default_rng(n * 1000 + m)
    q, k, v = qkv(rng, B=(2,), H=4, Hkv=2 if gqa else 4, n=n, m=m, dk=4, dtype=np.float64)
    kw = _mods(rng, which, 4, n, m, np.float64)
    if masked:
        kw["mask"] = rng.random((n, m)) < 0.8
    kw.update(causal=causal, window=window if causal else None)
    want, want_lse = attncore.reference.attention(q, k, v, return_lse=True, **kw)
    out, lse = attncore.attention(q, k, v, block_q=bq, block_k=bk, return_lse=True, **kw)
    assert_close(out, want, 1e-13)
    assert_close(lse, want_lse, 1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_kvcache_decode_steps_with_alibi_sinks_and_softcap(isa, rng, dtype):
    """Token by token through a KVCache: each step's row equals the same row of
    one causal call over the whole sequence (ALiBi's distances by the default
    bottom-right positions, the sink once per row)."""
    H, Hkv, L, d = 8, 2, 40, 16
    q, k, v = qkv(rng, H=H, Hkv=Hkv, n=L, dk=d, B=(1,), dtype=np.float32)
    k, v = k.astype(dtype), v.astype(dtype)
    kw = dict(alibi_slopes=2.0 ** -np.arange(1, H + 1), sinks=np.linspace(-2, 1, H), softcap=5.0)
    whole = attncore.reference.attention(q, k, v, causal=True, **kw)
    cache = attncore.KVCache(Hkv, d, batch=(1,), dtype=dtype, capacity=8)
    for t in range(L):
        cache.append(k[..., t:t + 1, :], v[..., t:t + 1, :])
        step = cache.attend(q[..., t:t + 1, :], **kw)
        assert_close(step, whole[..., t:t + 1, :], 2e-6)

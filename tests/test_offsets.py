"""Positions: q_offset / k_offset place a block of queries and a block of keys
anywhere in a sequence for the causal and window rules, in every kernel, per
ISA, against the reference (whose rule is written independently, by positions)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import attncore
from attncore._api import _attention
from helpers import assert_close, qkv, reference, tol


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("window", [None, 1, 16, 100])
@pytest.mark.parametrize("rows,keys", [((0, 40), (0, 40)), ((100, 180), (128, 256)),
                                       ((5, 6), (0, 300)), ((250, 300), (0, 64)),
                                       ((0, 64), (200, 300)), ((60, 61), (61, 90))])
def test_blocks_of_a_sequence_match_the_reference(isa, rng, dtype, window, rows, keys):
    L = 300
    q, k, v = qkv(rng, B=(2,), H=4, Hkv=2, n=L, dk=8, dv=5, dtype=dtype)
    (a, b), (k0, k1) = rows, keys
    qb, kb, vb = q[..., a:b, :], k[..., k0:k1, :], v[..., k0:k1, :]
    kw = dict(causal=True, window=window, q_offset=a, k_offset=k0)
    want, want_lse = reference(qb, kb, vb, return_lse=True, **kw)
    for method, bq, bk in (("flash", None, None), ("flash", 16, 16), ("flash", 7, 5),
                           ("naive", None, None)):
        out, lse = attncore.attention(qb, kb, vb, method=method, block_q=bq, block_k=bk,
                                      return_lse=True, **kw)
        assert_close(out, want, tol(dtype, k1 - k0, 8))
        assert_close(lse, want_lse, 4 * tol(dtype, k1 - k0, 8))
    out = attncore.plain_attention(qb, kb, vb, **kw)  # csrc/plain.c: the same ac_vis rule
    assert_close(out, want, tol(dtype, k1 - k0, 8))


@pytest.mark.parametrize("window", [None, 37])
def test_the_blocks_merge_into_the_whole_causal_call(isa, rng, window):
    """Rows [a, b) against keys split anywhere, merged: the whole causal call's rows."""
    L = 333
    q, k, v = qkv(rng, B=(2,), H=2, n=L, dk=16, dtype=np.float64)
    full, full_lse = attncore.attention(q, k, v, causal=True, window=window, return_lse=True)
    for a, b in ((0, L), (100, 180), (332, 333)):
        parts = []
        for k0, k1 in ((0, 128), (128, 130), (130, 333)):
            parts += attncore.attention(q[..., a:b, :], k[..., k0:k1, :], v[..., k0:k1, :],
                                        causal=True, window=window, q_offset=a, k_offset=k0,
                                        return_lse=True)
        out, lse = attncore.merge(*parts)
        assert_close(out, full[..., a:b, :], 1e-13)
        assert_close(lse, full_lse[..., a:b], 1e-12)


@pytest.mark.parametrize("kv", [np.float32, np.float16, "bfloat16"])
def test_decode_steps_and_16_bit_caches(isa, rng, kv):
    """One query row at position p against a cache chunk: the split-KV decode path."""
    q, k, v = qkv(rng, B=(3,), H=8, Hkv=2, n=1, m=4096, dk=64, dtype=np.float32)
    if kv == "bfloat16":
        k16, v16 = attncore.to_bfloat16(k), attncore.to_bfloat16(v)
    else:
        k16, v16 = k.astype(kv), v.astype(kv)
    q_off = np.array([5000, 4100, 3000])  # per batch: the query's position
    for k_off in (0, 1000, np.array([1000, 0, 2990])):
        want = attncore.reference.attention(q, k16, v16, causal=True, q_offset=q_off,
                                            k_offset=k_off)
        for split in (0, 1):
            got = _attention(q, k16, v16, causal=True, q_offset=q_off, k_offset=k_off,
                             split_kv=split)
            assert_close(got, want, 2e-5)


def test_a_row_that_sees_no_key_is_zero_with_lse_minus_inf(isa, rng):
    q, k, v = qkv(rng, n=4, m=8, dk=4)
    out, lse = attncore.attention(q, k, v, causal=True, q_offset=10, k_offset=12,
                                  return_lse=True)  # rows 10..13 against keys 12..19
    seen = np.arange(4)[:, None] + 10 >= np.arange(8)[None, :] + 12
    assert np.array_equal(np.isneginf(lse), ~seen.any(1))
    assert np.all(out[~seen.any(1)] == 0)
    assert_close(out, attncore.reference.attention(q, k, v, causal=True, q_offset=10,
                                                   k_offset=12), 1e-14)


def test_queries_past_every_keys_window_visit_no_tile(isa, rng):
    """Rows whose window ends before the keys' last position see nothing; the
    blockwise kernels must not round such a band down into a tile of K (the
    sanitizer run reads past the packed band otherwise)."""
    q, k, v = qkv(rng, B=(2,), H=2, n=40, m=21, dk=8, dtype=np.float64)
    kw = dict(causal=True, window=3, q_offset=np.array([500, 21]), k_offset=0)
    want, want_lse = attncore.reference.attention(q, k, v, return_lse=True, **kw)
    assert np.all(np.isneginf(want_lse[0])) and not np.all(np.isneginf(want_lse[1]))
    for bq, bk in ((None, None), (8, 8), (16, 5)):
        out, lse = attncore.attention(q, k, v, block_q=bq, block_k=bk, return_lse=True, **kw)
        assert_close(out, want, 1e-13)
        assert_close(lse, want_lse, 1e-12)
    dout = rng.standard_normal(want.shape)
    grads = attncore.attention_backward(q, k, v, want, want_lse, dout, **kw)
    for g, w in zip(grads, attncore.reference.attention_backward(q, k, v, want, want_lse, dout,
                                                                  **kw)):
        assert_close(g, w, 1e-12)


def test_backward_with_offsets(isa, rng):
    q, k, v = qkv(rng, B=(2,), H=4, Hkv=2, n=50, m=70, dk=8, dtype=np.float64)
    kw = dict(causal=True, window=30, q_offset=np.array([40, 90]), k_offset=np.array([10, 60]))
    out, lse = attncore.attention(q, k, v, return_lse=True, **kw)
    dout = rng.standard_normal(out.shape)
    want = attncore.reference.attention_backward(q, k, v, out, lse, dout, **kw)
    for method in ("flash", "naive"):
        got = attncore.attention_backward(q, k, v, out, lse, dout, method=method, **kw)
        for g, w in zip(got, want):
            assert_close(g, w, 1e-12)


def test_the_defaults_are_bottom_right_alignment(rng):
    q, k, v = qkv(rng, B=(2,), n=5, m=9, dk=4)
    kl = np.array([9, 6])
    base = attncore.attention(q, k, v, causal=True, key_lengths=kl)
    same = attncore.attention(q, k, v, causal=True, key_lengths=kl, q_offset=kl - 5, k_offset=0)
    assert_close(same, base, 0)
    assert_close(attncore.scores(q, k, causal=True, q_offset=kl - 5, key_lengths=kl),
                 attncore.scores(q, k, causal=True, key_lengths=kl), 0)


def test_bad_offsets_are_refused(rng):
    q, k, v = qkv(rng, B=(2,), n=5, m=9, dk=4)
    with pytest.raises(ValueError, match="need causal=True"):
        attncore.attention(q, k, v, q_offset=3)
    with pytest.raises(TypeError, match="q_offset must be integers"):
        attncore.attention(q, k, v, causal=True, q_offset=1.5)
    with pytest.raises(ValueError, match="batch shape"):
        attncore.attention(q, k, v, causal=True, k_offset=[1, 2, 3])
    with pytest.raises(ValueError, match=r"\[-2\*\*60, 2\*\*60\]"):
        attncore.attention(q, k, v, causal=True, q_offset=2**61)
    with pytest.raises(ValueError, match="need causal=True"):
        attncore.reference.attention(q, k, v, k_offset=0)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 40), m=st.integers(1, 40), q_off=st.integers(-50, 90),
       k_off=st.integers(-50, 90), window=st.one_of(st.none(), st.integers(1, 50)),
       bq=st.sampled_from([None, 1, 3, 8]), bk=st.sampled_from([None, 1, 5, 8]))
def test_any_placement_matches_the_reference(n, m, q_off, k_off, window, bq, bk):
    rng = np.random.default_rng(n * 1000 + m)
    q, k, v = qkv(rng, B=(2,), H=2, Hkv=1, n=n, m=m, dk=4, dtype=np.float64)
    kw = dict(causal=True, window=window, q_offset=q_off, k_offset=k_off)
    want, want_lse = attncore.reference.attention(q, k, v, return_lse=True, **kw)
    out, lse = attncore.attention(q, k, v, block_q=bq, block_k=bk, return_lse=True, **kw)
    assert_close(out, want, 1e-13)
    assert_close(lse, want_lse, 1e-12)

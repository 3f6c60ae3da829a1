"""merge: the log-sum-exp algebra behind blocks, threads and machines."""

import numpy as np
import pytest

import attncore
from helpers import assert_close, qkv, tol


def parts(rng, cuts, dtype=np.float64, causal=False, **shape):
    q, k, v = qkv(rng, dtype=dtype, **shape)
    edges = [0, *cuts, k.shape[-2]]
    pieces = []
    for a, b in zip(edges[:-1], edges[1:]):
        pieces += list(attncore.attention(q, k[..., a:b, :], v[..., a:b, :], return_lse=True))
    return (q, k, v), pieces


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("cuts", [(7,), (1, 2), (10, 20, 30), tuple(range(1, 70))])
def test_merge_equals_attention_over_all_keys(rng, dtype, cuts):
    (q, k, v), pieces = parts(rng, cuts, dtype, B=(2,), H=3, n=9, m=71, dk=8, dv=5)
    o, lse = attncore.merge(*pieces)
    want_o, want_lse = attncore.attention(q, k, v, return_lse=True)
    assert o.dtype == dtype and o.shape == want_o.shape and lse.shape == want_lse.shape
    assert_close(o, want_o, 4 * tol(dtype, 71, 8))
    assert_close(lse, want_lse, 8 * tol(dtype, 71, 8))
    ro, rl = attncore.reference.merge(*pieces)
    assert_close(o, ro, 4 * tol(dtype, 71, 8))


def test_commutative_and_associative(rng):
    _, (oa, la, ob, lb, oc, lc) = parts(rng, (5, 13), n=6, m=30, dk=4)
    ab = attncore.merge(oa, la, ob, lb)
    ba = attncore.merge(ob, lb, oa, la)
    assert_close(ab[0], ba[0], 1e-15) and assert_close(ab[1], ba[1], 1e-15)
    left = attncore.merge(*attncore.merge(oa, la, ob, lb), oc, lc)
    right = attncore.merge(oa, la, *attncore.merge(ob, lb, oc, lc))
    flat = attncore.merge(oa, la, ob, lb, oc, lc)
    for x, y in ((left, right), (left, flat)):
        assert_close(x[0], y[0], 1e-14)
        assert_close(x[1], y[1], 1e-14)


def test_fully_masked_parts_carry_no_weight(rng):
    _, (oa, la, ob, lb) = parts(rng, (10,), n=4, m=20, dk=4)
    empty_o = np.full_like(oa, 123.0)  # whatever a part that saw nothing holds
    empty_l = np.full_like(la, -np.inf)
    o, lse = attncore.merge(oa, la, empty_o, empty_l)
    assert_close(o, oa, 1e-15) and assert_close(lse, la, 1e-15)
    o, lse = attncore.merge(empty_o, empty_l, empty_o, empty_l)
    assert np.all(o == 0) and np.all(np.isneginf(lse))
    # the kernel's own empty rows: causal with n > m leaves the first n - m
    # rows blind (0, -inf); merged with another part they take that part whole
    q, k, v = qkv(rng, n=6, m=9, dk=4)
    oa, la = attncore.attention(q, k[:3], v[:3], causal=True, return_lse=True)
    assert np.all(np.isneginf(la[:3])) and np.all(oa[:3] == 0)
    ob, lb = attncore.attention(q, k[3:], v[3:], return_lse=True)
    o, lse = attncore.merge(oa, la, ob, lb)
    assert np.array_equal(o[:3], ob[:3]) and np.array_equal(lse[:3], lb[:3])


def test_nan_propagates_through_merge(rng):
    _, (oa, la, ob, lb) = parts(rng, (10,), n=4, m=20, dk=4)
    la = la.copy()
    la[1] = np.nan
    o, lse = attncore.merge(oa, la, ob, lb)
    assert np.isnan(lse[1]) and np.isnan(o[1]).all()
    assert np.isfinite(np.delete(o, 1, axis=0)).all()
    ro, rl = attncore.reference.merge(oa, la, ob, lb)
    assert_close(o, ro, 1e-14)


@pytest.mark.parametrize("impl", [attncore, attncore.reference])
def test_merge_errors(impl):
    o, lse = np.zeros((3, 4)), np.zeros(3)
    with pytest.raises(ValueError, match=r"merge takes \(o, lse\) pairs"):
        impl.merge(o, lse, o, lse, o)
    with pytest.raises(ValueError, match=r"o_1 has shape \(3, 5\) but o_0 has \(3, 4\)"):
        impl.merge(o, lse, np.zeros((3, 5)), lse)
    with pytest.raises(ValueError, match=r"lse_1 must have shape \(3,\)"):
        impl.merge(o, lse, o, np.zeros(4))
    with pytest.raises(TypeError, match=r"must share one dtype"):
        impl.merge(o, lse, o.astype(np.float32), lse)
    with pytest.raises(TypeError, match=r"o_1 must be float32 or float64.*int64"):
        impl.merge(o, lse, np.zeros((3, 4), np.int64), lse)

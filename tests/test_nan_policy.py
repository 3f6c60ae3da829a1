"""The NaN / inf policy, rule by rule (README, "NaN and inf"), on every path.

Each rule is checked on the blockwise kernel, the materialised one and the
split-KV decode kernel, on every ISA, in float32 and float64.
"""

import numpy as np
import pytest

import attncore
from attncore import _api, reference

PATHS = ("flash", "naive", "split-kv")


def run(path, q, k, v, monkeypatch, **kw):
    monkeypatch.setattr(_api, "_SPLIT_KV", 1 if path == "split-kv" else 0)
    method = "naive" if path == "naive" else "flash"
    return attncore.attention(q, k, v, method=method, return_lse=True, **kw)


@pytest.fixture(params=[np.float32, np.float64], ids=["float32", "float64"])
def data(request):
    rng = np.random.default_rng(3)
    dt = request.param
    q = rng.standard_normal((2, 6, 8)).astype(dt)   # 2 heads, 6 rows
    k = rng.standard_normal((2, 6, 8)).astype(dt)   # 6 keys
    v = rng.standard_normal((2, 6, 5)).astype(dt)
    return q, k, v


@pytest.mark.parametrize("path", PATHS)
def test_nan_reaches_exactly_the_rows_that_see_it(isa, path, data, monkeypatch):
    q, k, v = (a.copy() for a in data)
    q[0, 1, 3] = np.nan  # query row 1 of head 0
    k[1, 2, 0] = np.nan  # key 2 of head 1: causal rows 2.. see it
    v[0, 4, 2] = np.nan  # value 4 of head 0, column 2: causal rows 4.. see it
    out, lse = run(path, q, k, v, monkeypatch, causal=True)
    bad = ~np.isfinite(out).all(axis=-1)
    expect = np.zeros((2, 6), bool)
    expect[0, 1] = True
    expect[1, 2:] = True
    expect[0, 4:] = True
    np.testing.assert_array_equal(bad, expect)
    # a NaN value reaches only its own column
    assert np.isnan(out[0, 4:, 2]).all() and np.isfinite(np.delete(out[0, 4:], 2, axis=-1)).all()
    # lse comes from the scores alone: NaN in q or k, not in v
    nan_scores = np.zeros((2, 6), bool)
    nan_scores[0, 1] = True
    nan_scores[1, 2:] = True
    np.testing.assert_array_equal(np.isnan(lse), nan_scores)


@pytest.mark.parametrize("path", PATHS)
def test_a_plus_inf_score_makes_its_row_nan(isa, path, data, monkeypatch):
    # softmax with a +inf score is inf - inf: undefined, as in the reference
    q, k, v = (a.copy() for a in data)
    q[0, 3] = np.abs(q[0, 3]) + 0.1
    k[0, 1] = np.inf  # +inf score for every row of head 0 whose q·k is positive
    out, lse = run(path, q, k, v, monkeypatch)
    assert np.isnan(out[0, 3]).all() and np.isnan(lse[0, 3])
    assert np.isfinite(out[1]).all()  # the other head never sees it
    np.testing.assert_array_equal(np.isnan(out), np.isnan(reference.attention(q, k, v)))


@pytest.mark.parametrize("path", PATHS)
def test_minus_inf_scores_weigh_nothing_and_all_minus_inf_is_an_empty_row(isa, path, data,
                                                                        monkeypatch):
    q, k, v = (a.copy() for a in data)
    q[...] = np.abs(q) + 0.1
    k[0, 0] = -np.inf  # every row of head 0 scores key 0 as -inf
    out, lse = run(path, q, k, v, monkeypatch)
    want, want_lse = reference.attention(q[0:1], k[0:1, 1:], v[0:1, 1:], return_lse=True)
    np.testing.assert_allclose(out[0], want[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(lse[0], want_lse[0], rtol=1e-5, atol=1e-6)
    k[1] = -np.inf  # head 1: every score -inf: the row sees nothing
    out, lse = run(path, q, k, v, monkeypatch)
    np.testing.assert_array_equal(out[1], 0)
    np.testing.assert_array_equal(lse[1], -np.inf)


@pytest.mark.parametrize("path", PATHS)
def test_masked_keys_never_reach_a_row_even_when_inf_or_nan(isa, path, data, monkeypatch):
    q, k, v = (a.copy() for a in data)
    mask = np.ones((6, 6), bool)
    mask[:, 5] = False
    for a in (k, v):
        a[:, 5] = np.nan  # key 5: hidden by the mask; its k and v are NaN
        a[:, 4, 0] = np.inf  # key 4: hidden from rows 0-3 by the causal band (window 2)
    out, lse = run(path, q, k, v, monkeypatch, mask=mask, causal=True, window=2)
    assert np.isfinite(out[:, :4]).all() and np.isfinite(lse[:, :4]).all()
    assert not np.isfinite(out[:, 4]).all()  # row 4 sees key 4's inf
    s = attncore.scores(q, k, mask=mask, causal=True, window=2)
    assert (s[..., 5] == -np.inf).all()  # masked scores are -inf, whatever the data


@pytest.mark.parametrize("path", PATHS)
def test_rows_that_see_nothing_give_zero_and_lse_minus_inf(isa, path, data, monkeypatch):
    q, k, v = data
    cases = [
        dict(causal=True, k=k[:, :3], v=v[:, :3]),          # n = 6 > m = 3: rows 0-2 see nothing
        dict(mask=np.zeros((6, 6), bool)),                   # everything masked
        dict(key_lengths=np.array(0), k=k, v=v),             # no real keys
        dict(k=k[:, :0], v=v[:, :0]),                        # m = 0
    ]
    for case in cases:
        kk, vv = case.pop("k", k), case.pop("v", v)
        out, lse = run(path, q, kk, vv, monkeypatch, **case)
        empty = lse == -np.inf
        assert empty.any(), case
        np.testing.assert_array_equal(out[empty], 0)
        assert not np.isnan(out).any() and not np.isnan(lse).any()
        want, want_lse = reference.attention(q, kk, vv, return_lse=True, **case)
        np.testing.assert_array_equal(empty, want_lse == -np.inf)


@pytest.mark.parametrize("path", PATHS)
def test_inf_values_stay_inf_and_opposite_infinities_are_nan(isa, path, data, monkeypatch):
    q, k, v = (a.copy() for a in data)
    v[0, 2, 1] = np.inf
    v[1, 2, 1] = np.inf
    v[1, 3, 1] = -np.inf
    out, _ = run(path, q, k, v, monkeypatch)
    assert (out[0, :, 1] == np.inf).all() and np.isnan(out[1, :, 1]).all()
    assert np.isfinite(np.delete(out, 1, axis=-1)).all()


def test_softmax_policy(isa):
    x = np.array([[0.0, -np.inf, 1.0], [-np.inf, -np.inf, -np.inf], [0.0, np.nan, 1.0],
                  [np.inf, 0.0, 1.0], [1e4, 0.0, -1e4]])
    for dt in (np.float32, np.float64):
        y = attncore.softmax(x.astype(dt))
        assert y[0, 1] == 0 and np.isclose(y[0].sum(), 1)
        np.testing.assert_array_equal(y[1], 0)            # nothing visible: zeros
        assert np.isnan(y[2]).all() and np.isnan(y[3]).all()  # NaN, and +inf (inf - inf)
        np.testing.assert_array_equal(y[4], [1, 0, 0])    # large scores never overflow


def test_merge_policy(isa):
    o = np.ones((3, 2))
    a = (o, np.array([0.0, -np.inf, -np.inf]))
    b = (2 * o, np.array([-np.inf, -np.inf, np.nan]))
    out, lse = attncore.merge(*a, *b)
    np.testing.assert_array_equal(out[0], 1)   # a part with lse -inf adds nothing
    np.testing.assert_array_equal(out[1], 0)   # no part saw a key: 0, lse -inf
    assert lse[1] == -np.inf
    assert np.isnan(out[2]).all() and np.isnan(lse[2])  # NaN propagates


def test_backward_of_rows_that_see_nothing_is_zero(isa, data):
    q, k, v = data
    out, lse = attncore.attention(q, k[:, :3], v[:, :3], causal=True, return_lse=True)
    dq, dk, dv = attncore.attention_backward(q, k[:, :3], v[:, :3], out, lse, np.ones_like(out),
                                             causal=True)
    empty = lse == -np.inf
    assert empty.any()
    np.testing.assert_array_equal(dq[empty], 0)
    assert np.isfinite(dq).all() and np.isfinite(dk).all() and np.isfinite(dv).all()

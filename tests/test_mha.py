"""multi_head_attention: projections on the core's matrix kernels, attention per head."""

import numpy as np
import pytest

import attncore
from helpers import assert_close


def layer(rng, d_model=16, heads=4, kv_heads=None, d_out=None, dtype=np.float64):
    kv_heads = kv_heads or heads
    d_head = d_model // heads
    shapes = [(d_model, heads * d_head), (d_model, kv_heads * d_head),
              (d_model, kv_heads * d_head), (heads * d_head, d_out or d_model)]
    return [(rng.standard_normal(s) / np.sqrt(d_model)).astype(dtype) for s in shapes]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("heads,kv_heads", [(1, 1), (4, 4), (4, 2), (8, 1)])
@pytest.mark.parametrize("lead", [(), (3,), (2, 2)])
def test_mha_matches_reference(isa, rng, dtype, heads, kv_heads, lead):
    x = rng.standard_normal(lead + (11, 16)).astype(dtype)
    ws = layer(rng, 16, heads, kv_heads, d_out=12, dtype=dtype)
    for causal in (False, True):
        got = attncore.multi_head_attention(x, *ws, heads=heads, kv_heads=kv_heads, causal=causal)
        want = attncore.reference.multi_head_attention(*(a.astype(np.float64) for a in [x] + ws),
                                                       heads=heads, kv_heads=kv_heads,
                                                       causal=causal)
        assert got.shape == lead + (11, 12) and got.dtype == dtype
        assert_close(got, want, 2e-5 if dtype == np.float32 else 1e-12)


def test_one_head_is_plain_attention_of_the_projections(rng):
    x = rng.standard_normal((7, 8))
    w_q, w_k, w_v, w_o = layer(rng, 8, 1)
    want = attncore.attention(x @ w_q, x @ w_k, x @ w_v) @ w_o
    assert_close(attncore.multi_head_attention(x, w_q, w_k, w_v, w_o, heads=1), want, 1e-13)


@pytest.mark.parametrize("kw,match", [
    (dict(heads=3), r"w_q must have shape \(16, heads·d_head\) with heads=3"),
    (dict(heads=4, kv_heads=3), r"heads \(4\) must be a multiple of kv_heads \(3\)"),
    (dict(heads=0), r"heads must be a positive integer"),
])
def test_mha_errors(rng, kw, match):
    x = rng.standard_normal((5, 16))
    with pytest.raises(ValueError, match=match):
        attncore.multi_head_attention(x, *layer(rng, 16, 4), **kw)
    with pytest.raises(ValueError, match=r"w_k must have shape \(16, 8\)"):
        attncore.multi_head_attention(x, *layer(rng, 16, 4), heads=4, kv_heads=2)
    with pytest.raises(TypeError, match=r"must share one dtype"):
        ws = layer(rng, 16, 4)
        attncore.multi_head_attention(x.astype(np.float32), *ws, heads=4)

"""Adversarial inputs, in the spirit of Bottleneck's: every layout NumPy can
produce, NaN/inf mixes and empty shapes.  attncore and the reference either
both raise the same exception or both agree; a layout that only changes how
the values are stored gives bit-identical results."""

import numpy as np
import pytest

import attncore
from attncore import reference
from helpers import assert_close


def _unaligned(a):
    buf = np.zeros(a.nbytes + 1, np.uint8)
    u = np.frombuffer(buf.data, dtype=a.dtype, count=a.size, offset=1).reshape(a.shape)
    u[...] = a
    return u


def _readonly(a):
    r = a.copy()
    r.flags.writeable = False
    return r


# Each takes a C-contiguous array and returns the same values stored differently.
LAYOUTS = {
    "contiguous": lambda a: a,
    "fortran": np.asfortranarray,
    "transposed": lambda a: np.ascontiguousarray(a.T).T,
    "strided_last": lambda a: np.repeat(a, 2, axis=-1)[..., ::2],
    "strided_rows": lambda a: np.repeat(a, 3, axis=-2)[..., ::3, :],
    "reversed": lambda a: np.flip(np.flip(a, (-1, -2)).copy(), (-1, -2)),
    "byteswapped": lambda a: a.astype(a.dtype.newbyteorder("S")),
    "readonly": _readonly,
    "unaligned": _unaligned,
    "list": lambda a: a.tolist(),
}

CALLS = {
    "flash": lambda lib, q, k, v: lib.attention(q, k, v, causal=True, return_lse=True,
                                                block_q=5, block_k=3),
    "naive": lambda lib, q, k, v: lib.attention(q, k, v, method="naive", return_lse=True),
    "scores": lambda lib, q, k, v: lib.scores(q, k, causal=True),
    "softmax": lambda lib, q, k, v: lib.softmax(q, axis=-2),
}


def _both(call, q, k, v):
    """Run attncore and the reference; both must raise alike or agree."""
    outcomes = []
    for lib in (attncore, reference):
        try:
            outcomes.append(CALLS[call](lib, q, k, v))
        except Exception as e:  # noqa: BLE001 - comparing what each raised
            outcomes.append(type(e))
    got, want = outcomes
    if isinstance(got, type) or isinstance(want, type):
        assert got == want, f"attncore gave {got!r}, the reference {want!r}"
        return None
    for g, w in zip(_tuple(got), _tuple(want)):
        # relative as well: the NaN/inf mixes put 1e300 into the data
        f32 = g.dtype == np.float32
        assert_close(g, w, 1e-5 if f32 else 1e-12, rtol=1e-5 if f32 else 1e-12)
    return got


def _tuple(r):
    return r if isinstance(r, tuple) else (r,)


def _data(rng, dtype=np.float64, B=2, H=2, n=9, m=11, d=4):
    return (rng.standard_normal((B, H, n, d)).astype(dtype),
            rng.standard_normal((B, H, m, d)).astype(dtype),
            rng.standard_normal((B, H, m, d + 1)).astype(dtype))


@pytest.mark.parametrize("call", sorted(CALLS))
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("which", [0, 1, 2])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_layouts_give_identical_results(isa, rng, call, layout, which, dtype):
    base = _data(rng, dtype)
    want = CALLS[call](attncore, *base)
    args = list(base)
    args[which] = LAYOUTS[layout](base[which])
    got = _both(call, *args)
    if got is None:  # refused, as the reference refused it (_both checked the exception)
        assert layout == "list" and dtype == np.float32, "only a float32 list mixes dtypes"
        return
    if layout == "list" and dtype == np.float32:
        # NumPy reads a list of float32 values as float64: the same bits as that array gives
        want = CALLS[call](attncore, *[np.asarray(x) for x in args])
    for g, w in zip(_tuple(got), _tuple(want)):
        assert g.dtype == w.dtype and np.array_equal(g, w, equal_nan=True), layout


def test_broadcast_inputs(isa, rng):
    q, k, v = _data(rng)
    kb = np.broadcast_to(k[:, :, :1, :], k.shape)  # zero row stride: every key equal
    vb = np.broadcast_to(v[:1], v.shape)  # zero batch stride
    qb = np.broadcast_to(q[..., :1], q.shape)  # zero last-axis stride: copied once
    for call in CALLS:
        _both(call, qb, kb, vb)
        want = CALLS[call](attncore, qb.copy(), kb.copy(), vb.copy())
        got = CALLS[call](attncore, qb, kb, vb)
        for g, w in zip(_tuple(got), _tuple(want)):
            assert np.array_equal(g, w, equal_nan=True)


@pytest.mark.parametrize("seed", range(12))
def test_nan_inf_mixes(isa, seed):
    rng = np.random.default_rng(seed)
    q, k, v = _data(rng)
    for a in (q, k, v):
        hit = rng.random(a.shape) < 0.04
        a[hit] = rng.choice([np.nan, np.inf, -np.inf, 1e300, -0.0], size=hit.sum())
    for call in CALLS:
        _both(call, q, k, v)


@pytest.mark.parametrize(
    "shapes",
    [
        ((0, 4), (5, 4), (5, 3)),
        ((3, 4), (0, 4), (0, 3)),
        ((3, 4), (5, 4), (5, 0)),
        ((0, 2, 3, 4), (0, 2, 5, 4), (0, 2, 5, 4)),
        ((2, 0, 3, 4), (2, 0, 5, 4), (2, 0, 5, 4)),
        ((1, 1), (1, 1), (1, 1)),
        ((0, 0), (0, 0), (0, 0)),
    ],
)
def test_empty_and_size_one_shapes(isa, rng, shapes):
    q, k, v = (rng.standard_normal(s) for s in shapes)
    for call in ("flash", "naive", "scores"):
        # d_k = 0 needs an explicit scale: both must refuse it alike otherwise
        _both(call, q, k, v)
    if q.shape[-1] == 0:
        out = attncore.attention(q, k, v, scale=1.0)
        assert_close(out, reference.attention(q, k, v, scale=1.0), 0)


def test_inputs_are_never_modified(isa, rng):
    q, k, v = _data(rng, n=40, m=40)
    q[0, 0, 0, 0] = np.nan
    variants = [(q, k, v), tuple(np.asfortranarray(a) for a in (q, k, v)),
                tuple(a.astype(a.dtype.newbyteorder("S")) for a in (q, k, v))]
    for arrays in variants:
        before = [(a.copy(), a.strides, a.flags.writeable) for a in arrays]
        for call in CALLS:
            CALLS[call](attncore, *arrays)
        attncore.attention(*arrays, method="naive", return_weights=True)
        for a, (copy, strides, writeable) in zip(arrays, before):
            assert np.array_equal(a, copy, equal_nan=True)
            assert a.strides == strides and a.flags.writeable == writeable

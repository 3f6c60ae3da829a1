"""Test helpers: random inputs and the tolerances they are held to."""

import math
import os

import numpy as np
import pytest

import attncore

EPS = {np.dtype(np.float32): float(np.finfo(np.float32).eps),
       np.dtype(np.float64): float(np.finfo(np.float64).eps)}

# Under emulation (tools/arm64-test.sh sets ATTNCORE_EMULATED) some tests cannot run: those
# that start another interpreter, time an interrupt, or do setup work sized for native speed.
# They carry this marker with their reason, so the emulated run lists them as skipped.
EMULATED = os.environ.get("ATTNCORE_EMULATED", "")


try:
    import ml_dtypes
except ImportError:
    ml_dtypes = None

# How 16-bit values are given: float16, bfloat16 bits (uint16), ml_dtypes.bfloat16
HALF_KINDS = ["float16", "bfloat16", pytest.param("ml_dtypes", marks=pytest.mark.skipif(
    ml_dtypes is None, reason="ml_dtypes is not installed"))]


def to_kind(x, kind):
    """x as 16-bit values of `kind` (one of HALF_KINDS), rounded to nearest."""
    if kind == "float16":
        return np.asarray(x).astype(np.float16)
    bits = attncore.to_bfloat16(x)
    return bits if kind == "bfloat16" else bits.view(ml_dtypes.bfloat16)


def widen(x):
    """The exact float64 values of a 16-bit array."""
    if x.dtype == np.float16:
        return x.astype(np.float64)
    return attncore.from_bfloat16(x, np.float64)


def not_emulated(reason: str):
    return pytest.mark.skipif(bool(EMULATED), reason=f"not under {EMULATED} emulation: {reason}")


# Sizes around every vector width (4, 8, 16 lanes) and block size (8 … 128).
EDGE_SIZES = (1, 2, 3, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129)


def randn(rng, shape, dtype=np.float64):
    return rng.standard_normal(shape).astype(dtype)


def qkv(rng, B=(), H=1, Hkv=None, n=8, m=None, dk=16, dv=None, dtype=np.float64):
    m = n if m is None else m
    Hkv = H if Hkv is None else Hkv
    dv = dk if dv is None else dv
    heads = lambda h: B + (h,) if (B or h != 1) else ()  # noqa: E731
    q = randn(rng, heads(H) + (n, dk), dtype)
    k = randn(rng, heads(Hkv) + (m, dk), dtype)
    v = randn(rng, heads(Hkv) + (m, dv), dtype)
    return q, k, v


def tol(dtype, m, d):
    """Absolute tolerance of an attention output against the float64 reference.

    Rounding errors in the running sums behave like a random walk: over the
    d products of a score and the m terms of a row they grow as sqrt(d) and
    sqrt(m), not as d and m.  With N(0,1) data every value is below ~5 in
    magnitude, so 4·eps·(sqrt(m) + sqrt(d) + 1) leaves a margin of about 5×
    over the largest errors measured on the shapes of these tests (n, m up
    to 4096, both methods), and a kernel whose error grew linearly in m would
    fail it once m reaches a few hundred.
    """
    return 4 * EPS[np.dtype(dtype)] * (math.sqrt(m) + math.sqrt(d) + 1)


def reference(q, k, v, **kw):
    """The float64 oracle of any call: inputs upcast, same arguments."""
    up = lambda a: np.asarray(a).astype(np.float64)  # noqa: E731
    return attncore.reference.attention(up(q), up(k), up(v), **kw)


def assert_close(got, want, atol, rtol=0.0):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg="NaN positions differ")
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=rtol, atol=atol)


def assert_figure(path, min_width=400, min_height=300):
    """A figure file that decodes as an image of at least that size, with
    something drawn on it (not one flat colour)."""
    from matplotlib import image

    pixels = image.imread(str(path))
    height, width = pixels.shape[:2]
    assert width >= min_width and height >= min_height, (str(path), width, height)
    assert float(np.ptp(pixels[..., :3])) > 0.1, f"{path}: a blank image"

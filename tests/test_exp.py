"""The exp inside the micro-kernels (the one every softmax uses), against libm."""

import numpy as np
import pytest

from attncore import _core

LIMITS = {  # (ln of the smallest normal, ln of the largest finite)
    np.float32: (-87.33654, 88.72283),
    np.float64: (-708.3964185322641, 709.782712893384),
}


def kernel_exp(x):
    x = np.ascontiguousarray(x)
    y = np.empty_like(x)
    _core.exp(x, y)
    return y


def truth(x):
    """exp in extended precision, rounded once to x's dtype."""
    with np.errstate(over="ignore", under="ignore"):
        return np.exp(x.astype(np.longdouble)).astype(x.dtype)


def ulps(got, want):
    return np.abs(got.astype(np.float64) - want.astype(np.float64)) / np.spacing(want)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_dense_sweep_is_within_two_ulp(isa, dtype):
    lo, hi = LIMITS[dtype]
    rng = np.random.default_rng(7)
    x = np.concatenate([
        np.linspace(lo, hi, 1_000_003),  # the whole normal range, densely
        rng.uniform(-1, 1, 100_000),  # around 0, where r is the whole argument
        np.arange(-126, 128) * np.log(2.0),  # the breakpoints n·ln2
        rng.uniform(lo, hi, 100_000),
    ]).astype(dtype)
    x = x[(x >= lo) & (x <= hi)]
    got, want = kernel_exp(x), truth(x)
    finite = np.isfinite(want) & (want >= np.finfo(dtype).tiny)
    worst = ulps(got[finite], want[finite]).max()
    assert worst <= 2.0, f"max error {worst:.2f} ulp"


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_special_values(isa, dtype):
    lo, hi = LIMITS[dtype]
    tiny = np.finfo(dtype).tiny
    x = np.array([-np.inf, np.inf, np.nan, 0.0, -0.0, -1e30, 1e30, 1.0, -1.0, tiny, -tiny,
                  1.5 * tiny], dtype)
    y = kernel_exp(x)
    assert y[0] == 0 and y[1] == np.inf and np.isnan(y[2])
    assert y[3] == 1 and y[4] == 1 and y[5] == 0 and y[6] == np.inf
    assert np.all(np.abs(y[7:9] - np.exp(x[7:9].astype(np.float64))) <= 2 * np.spacing(y[7:9]))
    assert np.all(y[9:] == 1)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_tails_underflow_to_zero_and_overflow_to_inf(isa, dtype):
    lo, hi = LIMITS[dtype]
    tiny = np.finfo(dtype).tiny
    below = np.linspace(lo * 1.3, lo, 10_001).astype(dtype)[:-1]
    y = kernel_exp(below)
    # below ln(smallest normal) the true value is under `tiny`: the vector
    # kernels give exactly 0 (no denormals), libm (scalar) a denormal
    assert np.all((y >= 0) & (y <= tiny))
    assert np.all(kernel_exp(np.linspace(hi * 1.001, hi * 2, 1001).astype(dtype)) == np.inf)


@pytest.mark.parametrize("n", [1, 2, 3, 7, 8, 15, 16, 17, 31, 33, 100])
def test_every_position_of_a_row_gets_the_same_exp(isa, n):
    # the vector tail must not compute differently from the body
    x = np.full(n, -0.7, np.float32)
    y = kernel_exp(x)
    assert np.all(y == y[0])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_fast_and_the_general_finish_agree_bit_for_bit(isa, dtype):
    """AVX2 builds p·2^n from exponent bits in one add while every lane of a
    vector is <= 87 (708 for double), AVX-512 takes scalef alone while every
    lane also lies above ln(smallest normal), and both the general way
    otherwise: a value gets the same bits whichever way its vector goes."""
    x = np.concatenate([np.linspace(-90, 90, 4001), np.linspace(705, 710, 2001)]).astype(dtype)
    alone = kernel_exp(x)
    big = np.asarray(710 if dtype == np.float64 else 88.5, dtype)
    mixed = np.empty(2 * x.size, dtype)  # each value beside one that forces the general way
    mixed[0::2], mixed[1::2] = x, big
    assert np.array_equal(kernel_exp(mixed)[0::2], alone)

"""Every error path: the exception type, and a message that names the argument."""

import numpy as np
import pytest

import attncore
from attncore import reference
from helpers import not_emulated

IMPLS = {"core": attncore, "reference": reference}


@pytest.fixture(params=sorted(IMPLS))
def impl(request):
    return IMPLS[request.param]


def ok(shape=(2, 4, 8)):
    return np.zeros(shape)


@pytest.mark.parametrize(
    "bad", [np.int32, np.int64, np.complex128, np.bool_, object, np.float16, "U3"]
)
@pytest.mark.parametrize("which", ["q", "k", "v"])
def test_bad_dtype_is_a_type_error(impl, bad, which):
    args = {"q": ok(), "k": ok(), "v": ok()}
    args[which] = np.zeros((2, 4, 8), dtype=bad)
    with pytest.raises(TypeError, match=rf"\b{which}\b.*{np.dtype(bad)}"):
        impl.attention(args["q"], args["k"], args["v"])


def test_16_bit_queries_need_keys_and_values_of_their_kind(impl):
    q = np.zeros((2, 4, 8), np.float16)
    for k in (q.astype(np.float32), q.astype(np.float64), attncore.to_bfloat16(q)):
        with pytest.raises(TypeError, match=r"float16 queries need keys and values of the same "
                                            r"kind.*k (float32|float64|uint16)"):
            impl.attention(q, k, q)
    assert impl.attention(q.astype(np.float32), q, q).dtype == np.float32  # a 16-bit cache


def test_mixed_dtypes_are_a_type_error(impl):
    with pytest.raises(TypeError, match=r"q, k, v must share one dtype.*k float32"):
        impl.attention(ok(), ok().astype(np.float32), ok())
    with pytest.raises(TypeError, match=r"q, k must share one dtype"):
        impl.scores(ok().astype(np.float32), ok())


def test_bad_dtype_in_scores_and_softmax(impl):
    with pytest.raises(TypeError, match=r"\bk\b.*int64"):
        impl.scores(ok(), np.zeros((2, 4, 8), np.int64))
    with pytest.raises(TypeError, match=r"\bx\b.*complex128"):
        impl.softmax(np.zeros(3, np.complex128))


@pytest.mark.parametrize(
    "q,k,v,match",
    [
        (ok((8,)), ok((8,)), ok((8,)), r"\bq\b must have shape .*got shape \(8,\)"),
        (ok(), ok((1, 2, 4, 8)), ok((1, 2, 4, 8)), r"same number of dimensions"),
        (ok(), ok((2, 4, 9)), ok(), r"k's last axis \(d_k\) is 9 but q's is 8"),
        (ok(), ok(), ok((2, 5, 8)), r"v has 5 rows \(keys\) but k has 4"),
        (ok((3, 4, 8)), ok(), ok(), r"q's heads \(3\) must be a multiple of k's heads \(2\)"),
        (ok((6, 4, 8)), ok((3, 4, 8)), ok((2, 4, 8)), r"v has 2 heads but k has 3"),
        (ok((2, 2, 4, 8)), ok((3, 2, 4, 8)), ok((3, 2, 4, 8)), r"k's batch dims \(3,\)"),
        (ok((2, 2, 4, 8)), ok((2, 2, 4, 8)), ok((1, 2, 4, 8)), r"v's batch dims \(1,\)"),
    ],
)
def test_bad_shapes_are_value_errors(impl, q, k, v, match):
    with pytest.raises(ValueError, match=match):
        impl.attention(q, k, v)


@pytest.mark.parametrize("scale", [0, -1.0, np.inf, np.nan, "a", True, None])
def test_bad_scale(impl, scale):
    q = np.zeros((2, 0))  # d_k = 0: the default scale 1/sqrt(d_k) does not exist
    if scale is None:
        with pytest.raises(ValueError, match=r"scale=None.*d_k is 0"):
            impl.attention(q, q, q)
        return
    with pytest.raises(ValueError, match=r"scale must be a positive finite number"):
        impl.attention(ok(), ok(), ok(), scale=scale)
    with pytest.raises(ValueError, match=r"scale must be a positive finite number"):
        impl.scores(ok(), ok(), scale=scale)


@pytest.mark.parametrize("name", ["block_q", "block_k"])
@pytest.mark.parametrize("value", [0, -3, 2.5, "8", True, 2**40])
def test_bad_block_sizes(impl, name, value):
    with pytest.raises(ValueError, match=rf"{name} must be a positive integer"):
        impl.attention(ok(), ok(), ok(), **{name: value})


def test_numpy_integer_block_sizes_are_fine():
    out = attncore.attention(ok(), ok(), ok(), block_q=np.int64(3), block_k=np.int32(2))
    assert out.shape == (2, 4, 8)


def test_unknown_method(impl):
    with pytest.raises(ValueError, match=r"method must be one of \('flash', 'naive'\), got 'fast'"):
        impl.attention(ok(), ok(), ok(), method="fast")


def test_return_weights_needs_naive(impl):
    with pytest.raises(ValueError, match=r"return_weights=True needs method='naive'"):
        impl.attention(ok(), ok(), ok(), return_weights=True)


def test_softmax_bad_axis_and_rank(impl):
    with pytest.raises(ValueError, match=r"axis 2 is out of range for x of shape \(2, 3\)"):
        impl.softmax(np.zeros((2, 3)), axis=2)
    with pytest.raises(ValueError, match=r"axis must be an integer"):
        impl.softmax(np.zeros((2, 3)), axis=1.0)
    with pytest.raises(ValueError, match=r"x must have at least one dimension"):
        impl.softmax(np.float64(1.0))


def test_naive_table_too_large_is_refused_before_allocating(monkeypatch):
    # 64×64 float64 = 32 KiB; the limit below is 1000 bytes
    monkeypatch.setenv("ATTNCORE_MAX_TABLE_BYTES", "1000")
    q = np.zeros((64, 8))
    with pytest.raises(MemoryError, match=r"method='naive'.*method='flash'"):
        attncore.attention(q, q, q, method="naive")
    with pytest.raises(MemoryError, match=r"score table.*method='flash'"):
        attncore.scores(q, q)
    assert attncore.attention(q, q, q).shape == (64, 8)  # flash needs no table


def test_a_bad_table_limit_is_named(monkeypatch):
    q = np.zeros((4, 2))
    for bad in ("lots", "-5", "1e9"):
        monkeypatch.setenv("ATTNCORE_MAX_TABLE_BYTES", bad)
        with pytest.raises(ValueError, match="ATTNCORE_MAX_TABLE_BYTES must be a whole number"):
            attncore.attention(q, q, q, method="naive")


def test_real_memory_limit_refuses_a_terabyte_table():
    # n = m = 2**19 in float32 is a 1 TiB table: refused up front (inputs are 2 MiB)
    q = np.zeros((2**19, 1), np.float32)
    with pytest.raises(MemoryError, match=r"1024\.00 GiB"):
        attncore.attention(q, q, q, method="naive")


def test_sizes_beyond_64_bits_are_value_errors():
    # n = m = 2**40 rows of broadcast zeros (no memory behind them): n·m is 2**80
    q = np.broadcast_to(np.zeros(1), (2**40, 1))
    for fn in (attncore.attention, attncore.reference.attention):
        with pytest.raises(ValueError, match=r"do not fit in 64 bits"):
            fn(q, q, q)


def test_set_num_threads_rejects_bad_counts():
    for bad in (0, -1, 1.5, "2", True):
        with pytest.raises(ValueError, match=r"n must be a positive integer"):
            attncore.set_num_threads(bad)


@not_emulated("starts another interpreter with a bare environment, which has no emulator")
def test_bad_isa_env_fails_at_import(tmp_path):
    import subprocess
    import sys

    env = {"ATTNCORE_ISA": "sse9", "PATH": "/usr/bin:/bin"}
    # run outside the source tree, which has no compiled core
    r = subprocess.run([sys.executable, "-c", "import attncore"], env=env, capture_output=True,
                       text=True, cwd=tmp_path)
    assert r.returncode != 0 and "ATTNCORE_ISA='sse9'" in r.stderr

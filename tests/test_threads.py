"""Thread safety and determinism.

Every entry point gives the same bits on 1, 2, 3 or 4 OpenMP threads: the
work is cut by the problem alone (Q blocks, K blocks, decode chunks), each
output element is summed by one thread in one order, and no atomics touch
the numbers.  Many Python threads calling at once, and set_num_threads
called while they run, change nothing either.
"""

import threading

import numpy as np
import pytest

import attncore

from helpers import qkv

THREAD_COUNTS = (1, 2, 3, 4)


def every_call(rng, dtype=np.float32):
    """name -> a call covering one kernel path; each returns arrays."""
    q, k, v = qkv(rng, B=(2,), H=4, Hkv=2, n=150, m=170, dk=16, dv=24, dtype=dtype)
    dq1, dk1, dv1 = qkv(rng, B=(2,), H=4, Hkv=2, n=1, m=3000, dk=32, dtype=dtype)  # decode
    mask = rng.random((150, 170)) < 0.7
    lengths = np.array([170, 90])
    o, lse = attncore.attention(q, k, v, causal=True, return_lse=True)
    dout = rng.standard_normal(o.shape).astype(dtype)
    x = rng.standard_normal((2, 40, 32)).astype(dtype)
    w = [rng.standard_normal(shape).astype(dtype) / 6
         for shape in ((32, 32), (32, 16), (32, 16), (32, 32))]
    calls = {
        "flash": lambda: attncore.attention(q, k, v),
        "flash-causal": lambda: attncore.attention(q, k, v, causal=True, return_lse=True),
        "flash-window": lambda: attncore.attention(q, k, v, causal=True, window=33),
        "flash-mask": lambda: attncore.attention(q, k, v, mask=mask),
        "flash-key-lengths": lambda: attncore.attention(q, k, v, key_lengths=lengths),
        "flash-blocks": lambda: attncore.attention(q, k, v, block_q=17, block_k=9),
        "naive": lambda: attncore.attention(q, k, v, method="naive", return_weights=True),
        "naive-causal": lambda: attncore.attention(q, k, v, method="naive", causal=True),
        "decode-split-kv": lambda: attncore.attention(dq1, dk1, dv1, return_lse=True),
        "decode-causal": lambda: attncore.attention(dq1, dk1, dv1, causal=True, window=700),
        "scores": lambda: attncore.scores(q, k, causal=True),
        "softmax": lambda: attncore.softmax(x),
        "merge": lambda: attncore.merge(o, lse, o[..., ::-1, :].copy(), lse[..., ::-1].copy()),
        "backward": lambda: attncore.attention_backward(q, k, v, o, lse, dout, causal=True),
        "linear": lambda: attncore.linear_attention(q, k, v, causal=True),
        "mha": lambda: attncore.multi_head_attention(x, *w, heads=4, kv_heads=2, causal=True),
    }
    if dtype == np.float32:
        h16 = [a.astype(np.float16) for a in (dk1, dv1)]
        calls["decode-float16-cache"] = lambda: attncore.attention(dq1, *h16)
    return calls


def as_list(result):
    return list(result) if isinstance(result, tuple) else [result]


def assert_same_bits(a, b, what):
    for x, y in zip(as_list(a), as_list(b), strict=True):
        assert x.dtype == y.dtype and x.shape == y.shape, what
        assert np.array_equal(x, y, equal_nan=True), what


@pytest.fixture
def restore_threads():
    before = attncore.get_num_threads()
    yield
    attncore.set_num_threads(before)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_every_entry_point_is_bit_identical_across_thread_counts(isa, rng, dtype,
                                                                 restore_threads):
    calls = every_call(rng, dtype)
    runs = {}
    for nt in THREAD_COUNTS:
        attncore.set_num_threads(nt)
        runs[nt] = {name: call() for name, call in calls.items()}
    for nt in THREAD_COUNTS[1:]:
        for name in calls:
            assert_same_bits(runs[1][name], runs[nt][name], f"{name} on {nt} threads")


def test_many_python_threads_at_once_match_one_call(rng, restore_threads):
    attncore.set_num_threads(2)
    calls = every_call(rng)
    expect = {name: call() for name, call in calls.items()}
    names = sorted(calls) * 3
    got, errors = [None] * len(names), []
    start = threading.Barrier(len(names))

    def work(i):
        try:
            start.wait()
            got[i] = calls[names[i]]()
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(names))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for name, result in zip(names, got):
        assert_same_bits(expect[name], result, name)


def test_set_num_threads_while_other_threads_call(rng, restore_threads):
    calls = every_call(rng)
    expect = {name: call() for name, call in calls.items()}
    stop, errors, mismatches = threading.Event(), [], []

    def toggle():
        i = 0
        while not stop.is_set():
            attncore.set_num_threads(1 + i % 4)
            i += 1

    def work():
        try:
            for _ in range(3):
                for name, call in calls.items():
                    r = call()
                    try:
                        assert_same_bits(expect[name], r, name)
                    except AssertionError as e:
                        mismatches.append(str(e))
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    toggler = threading.Thread(target=toggle)
    workers = [threading.Thread(target=work) for _ in range(4)]
    toggler.start()
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    stop.set()
    toggler.join()
    assert not errors, errors
    assert not mismatches, mismatches
    assert attncore.get_num_threads() in THREAD_COUNTS

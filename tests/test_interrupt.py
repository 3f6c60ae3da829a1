"""Interrupts: a long call stops soon after a signal whose handler raises.

The core polls a hook between tasks; from the main thread the hook runs
Python's pending signal handlers (csrc/runtime.c, attncore/_core.pyx).
Each test here starts a call that would run for seconds, raises from a
SIGALRM handler 0.1 s into the kernel, and checks that the call stops within a second,
that the exception is the handler's, and that no thread keeps computing.
The last test sends a real SIGINT to a child process and expects
KeyboardInterrupt.
"""

import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import attncore
from attncore import _api, _layers

from helpers import not_emulated

# slow: latencies timed against the wall clock, so run alone (`pytest -m slow`), not beside
# other xdist workers on the same cores
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="needs setitimer"),
              not_emulated("the calls and the one-second deadline are sized for native speed, "
                           "and the last test starts another interpreter")]

ALARM_AFTER = 0.1  # s
LATENCY = 1.0  # s: "within about a second"


class Stop(Exception):
    pass


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape, dtype=np.float32)


class _FinishedEarly(Exception):
    pass


def interrupted(call, attempts=2):
    """Run call() with SIGALRM raising Stop after ALARM_AFTER; return the
    seconds from the alarm to the exception.  The exception must come out of
    the C call (raised by the core's poll), not out of Python code around it.
    A call that returns before its alarm has not tested anything (the machine
    was busy elsewhere, as under the sanitizers beside other tests): it is run
    again, and fails the test the second time."""
    for attempt in range(attempts):
        try:
            return _interrupted(call)
        except _FinishedEarly:
            if attempt == attempts - 1:
                pytest.fail("the call finished before the alarm, twice: make the problem larger")


class _ArmedOnEntry:
    """Stands in for ``attncore._core`` in the modules that call it: the first
    kernel call arms the alarm, so ALARM_AFTER counts from the kernel's start,
    not from the validation and allocation before it (which, under the
    sanitizers beside other tests, took longer than ALARM_AFTER: the handler
    then ran in Python code before the call and tested nothing)."""

    def __init__(self, core):
        self._core, self.armed = core, False

    def __getattr__(self, name):
        f = getattr(self._core, name)
        if not callable(f):
            return f

        def entered(*args, **kwargs):
            if not self.armed:
                self.armed = True
                signal.setitimer(signal.ITIMER_REAL, ALARM_AFTER)
            return f(*args, **kwargs)
        return entered


def _interrupted(call):
    fired = []

    def handler(signum, frame):
        fired.append(time.perf_counter())
        raise Stop

    old = signal.signal(signal.SIGALRM, handler)
    threads = threading.active_count()
    callers = (_api, _layers)
    armed = _ArmedOnEntry(_api._core)
    try:
        for m in callers:
            m._core = armed
        with pytest.raises(Stop) as info:
            call()
            raise _FinishedEarly
        stopped = time.perf_counter()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        for m in callers:
            m._core = armed._core
    assert armed.armed, "no kernel was called"
    assert len(fired) == 1
    # the handler (the last frame) ran inside the kernel call: its caller is
    # the binding (attncore/_core.pyx), not Python code around the call
    where = info.traceback[-2]
    assert str(where.path).endswith("_core.pyx"), where
    # no thread keeps computing: the process idles once the call is gone
    c0 = time.process_time()
    time.sleep(0.3)
    assert time.process_time() - c0 < 0.15
    assert threading.active_count() == threads
    return stopped - fired[0]


def long_call(name):
    """The call for one kernel, its inputs made before the clock starts; each
    runs for a second or more on two fast cores, uninterrupted."""
    r = lambda *shape: rand(*shape, seed=len(shape))  # noqa: E731
    if name == "flash":
        q = r(1, 1, 32768, 64)
        return lambda: attncore.attention(q, q, q)
    if name == "flash-causal-float64":
        q = r(1, 1, 32768, 64).astype(np.float64)
        return lambda: attncore.attention(q, q, q, causal=True)
    if name == "naive":
        q = r(16, 8192, 64)
        return lambda: attncore.attention(q, q, q, method="naive")
    if name == "scores":
        q = r(8, 4096, 1024)
        return lambda: attncore.scores(q, q)
    if name == "backward":
        q = r(1, 16384, 64)
        o, lse = attncore.attention(q, q, q, return_lse=True)
        return lambda: attncore.attention_backward(q, q, q, o, lse, q)
    if name == "linear":
        q = r(4, 131072, 64)
        return lambda: attncore.linear_attention(q, q, q)
    if name == "flash-long-k":  # a few rows over 2^21 keys: most of the time packs K
        q, k = r(1, 33, 64), np.ones((1, 2**21, 64), np.float32)
        return lambda: attncore.attention(q, k, k, causal=True)
    raise KeyError(name)


LONG_CALLS = ("flash", "flash-causal-float64", "naive", "scores", "backward", "linear",
              "flash-long-k")


@pytest.mark.parametrize("name", sorted(LONG_CALLS))
def test_a_long_call_stops_soon_after_the_handler_raises(name):
    assert interrupted(long_call(name)) < LATENCY


def test_split_kv_decode_stops(monkeypatch):
    monkeypatch.setattr(_api, "_SPLIT_KV", 1)  # many rows through the decode kernel
    q, k, v = rand(1, 4096, 64), rand(1, 65536, 64), rand(1, 65536, 64)
    assert interrupted(lambda: attncore.attention(q, k, v)) < LATENCY


def test_a_long_k_is_polled_while_it_is_packed():
    # Most of this call packs K and checks V (2^21 keys, two query heads of
    # 33 rows, one per thread).  The poll that runs Python's handlers must
    # come every 20 ms or so through all of it: a handler on a 5 ms timer
    # records when it ran, and no stretch of the call goes unpolled.  Before
    # the packing was polled, it ran ~40 % of the call without a poll.
    q, k = rand(1, 2, 33, 64), np.ones((1, 1, 2**21, 64), np.float32)
    call = lambda: attncore.attention(q, k, k, causal=True)  # noqa: E731
    call()
    share = _largest_unpolled_share(call)
    assert share < 0.2, f"{share:.0%} of the call unpolled"


def _largest_unpolled_share(call):
    """The longest stretch of `call` in which no Python handler ran (a
    5 ms timer's), as a share of the call."""
    runs = []
    old = signal.signal(signal.SIGALRM, lambda s, f: runs.append(time.perf_counter()))
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.005, 0.005)
        t0 = time.perf_counter()
        call()
        t1 = time.perf_counter()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    inside = [t0] + [t for t in runs if t0 < t < t1] + [t1]
    return max(b - a for a, b in zip(inside, inside[1:])) / (t1 - t0)


def test_the_caller_polls_while_the_other_threads_finish():
    # Two tasks, one light (16 keys) and one heavy (2^19 keys), on two
    # threads: whichever the calling thread takes, it must go on polling
    # until the heavy one is done, not wait deaf at a loop's barrier.
    # Before it did, the caller's near-empty static share of the packing
    # left ~40 % of every such call unpolled; three in a row must be polled.
    if attncore.get_num_threads() < 2:
        pytest.skip("needs two threads")
    q, k = rand(2, 1, 33, 64), np.ones((2, 1, 2**19, 64), np.float32)
    call = lambda: attncore.attention(q, k, k, key_lengths=[16, 2**19])  # noqa: E731
    call()
    shares = [_largest_unpolled_share(call) for _ in range(3)]
    assert max(shares) < 0.3, f"unpolled shares of three calls: {shares}"


def test_a_handler_that_does_not_raise_lets_the_call_finish():
    q, k, v = rand(2, 4096, 64), rand(2, 4096, 64), rand(2, 4096, 64)
    expect = attncore.attention(q, k, v)
    calls = []
    old = signal.signal(signal.SIGALRM, lambda s, f: calls.append(s))
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.005, 0.005)  # every 5 ms
        got = attncore.attention(q, k, v)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert calls, "the timer never fired"
    np.testing.assert_array_equal(got, expect)


def test_calls_from_other_threads_are_not_interrupted_and_stay_right():
    # signals go to the main thread only: a worker's call gets no hook
    q, k, v = rand(1, 1024, 32), rand(1, 1024, 32), rand(1, 1024, 32)
    expect = attncore.attention(q, k, v)
    out = []
    t = threading.Thread(target=lambda: out.append(attncore.attention(q, k, v)))
    t.start()
    t.join()
    np.testing.assert_array_equal(out[0], expect)


CHILD = r"""
import sys, time
import numpy as np
import attncore
n = 131072
rng = np.random.default_rng(0)
q, k, v = (rng.standard_normal((1, n, 64), dtype=np.float32) for _ in range(3))
print("ready", flush=True)
try:
    attncore.attention(q, k, v)
    print("finished", flush=True)
except KeyboardInterrupt:
    print("KeyboardInterrupt", flush=True)
    c0 = time.process_time()
    time.sleep(0.3)
    print("idle-cpu", time.process_time() - c0, flush=True)
"""


def test_ctrl_c_raises_keyboard_interrupt_in_a_blockwise_call_at_n_131072(tmp_path):
    # cwd away from the checkout: `python -c` would import the source tree
    with subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True,
                          cwd=tmp_path) as child:
        try:
            assert child.stdout.readline().strip() == "ready"
            time.sleep(0.5)  # well inside the call (tens of seconds uninterrupted)
            sent = time.perf_counter()
            child.send_signal(signal.SIGINT)
            line = child.stdout.readline().strip()
            latency = time.perf_counter() - sent
            rest = child.stdout.read()
            assert child.wait(timeout=60) == 0
        finally:
            if child.poll() is None:
                child.kill()
    assert line == "KeyboardInterrupt"
    assert latency < LATENCY
    idle = float(rest.split()[-1])
    assert idle < 0.15  # no thread of the core kept running

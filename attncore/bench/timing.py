"""The one timer of attncore's measurements (``attncore bench``, ``attncore
check``, the tour), the thread settings every peer shares, and peak memory.

Time: the fastest of repeated calls, after a warm-up, repeated until a minimum
time has passed; several functions are timed in interleaved rounds, one call
of each a round, so that a burst of load from elsewhere on the machine hits
all of them alike.  Peak memory is counted, not sampled: NumPy reports its
array buffers to tracemalloc, and the C core counts every workspace buffer
it allocates.  Their sum is the memory a call needs beyond its inputs.
"""

from __future__ import annotations

import statistics
import time
import tracemalloc
from dataclasses import dataclass

import attncore
from attncore import _core
from attncore.bench.peers import torch_available


def rounds_of(fns: dict, *, min_time: float = 0.3, min_rounds: int = 2, max_rounds: int = 20,
              between=None) -> dict:
    """Every call's time of each of ``fns`` (name -> no-argument callable), in
    interleaved rounds until every function has run ``min_rounds`` times and
    (up to ``max_rounds``) for ``min_time`` seconds; ``between()`` runs after
    each round.  No warm-up here: the caller makes it."""
    times: dict = {name: [] for name in fns}
    rounds = 0
    while fns and (rounds < min_rounds
                   or (rounds < max_rounds and min(map(sum, times.values())) < min_time)):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
        if between is not None:
            between()
        rounds += 1
    return times


def best_of(fns: dict, **kw) -> dict:
    """The fastest call of each of ``fns``, timed as :func:`rounds_of` does."""
    return {name: min(ts, default=float("inf")) for name, ts in rounds_of(fns, **kw).items()}


def spread(times) -> float:
    """How far the typical round sits above the best: median / min − 1."""
    return statistics.median(times) / min(times) - 1


def best_time(fn, min_time: float = 0.3, max_reps: int = 20, min_reps: int = 2) -> float:
    """The fastest of repeated calls of fn, after one warm-up, repeated until
    min_time has passed (at least min_reps, at most max_reps calls)."""
    fn()
    return best_of({"fn": fn}, min_time=min_time, min_rounds=min_reps, max_rounds=max_reps)["fn"]


@dataclass
class Measured:
    result: object
    seconds: float  # best of the repeats
    peak_bytes: int  # NumPy allocations + C workspace, beyond the inputs


def peak_bytes(fn, *args, **kwargs) -> tuple:
    """(fn's result, the peak memory of one call beyond its inputs)."""
    started = not tracemalloc.is_tracing()
    if started:
        tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        _core.workspace_reset_peak()
        ws_base = _core.workspace_peak()
        result = fn(*args, **kwargs)
        peak = tracemalloc.get_traced_memory()[1] - base + _core.workspace_peak() - ws_base
    finally:
        if started:
            tracemalloc.stop()
    return result, peak


def measure(fn, *args, repeat: int = 3, **kwargs) -> Measured:
    """Call fn(*args, **kwargs) once for memory (which is also the warm-up),
    then ``repeat`` times for time (repeat=0: memory alone, seconds inf)."""
    result, peak = peak_bytes(fn, *args, **kwargs)
    seconds = best_of({"fn": lambda: fn(*args, **kwargs)}, min_time=0.0, min_rounds=repeat,
                      max_rounds=repeat)["fn"]
    return Measured(result, seconds, peak)


def quiesce_blas() -> None:
    """Wait for NumPy's BLAS threads to go to sleep.  OpenBLAS workers spin
    for tens of milliseconds after a call (measured here: the FMA probe ran
    at half speed for 50 ms after a 2048² sgemm, and at full speed after
    100 ms); whatever is timed next would share the cores with them."""
    time.sleep(0.25)


class threads:
    """Run every peer on the same number of threads: attncore, NumPy's BLAS
    (threadpoolctl) and torch."""

    def __init__(self, n: int):
        self.n = n

    def __enter__(self):
        self._before = attncore.get_num_threads()
        attncore.set_num_threads(self.n)
        self._limits = None
        try:
            from threadpoolctl import threadpool_limits

            self._limits = threadpool_limits(self.n, user_api="blas")
        except ImportError:
            pass
        if torch_available():
            import torch

            self._torch_before = torch.get_num_threads()
            torch.set_num_threads(self.n)
        return self

    def __exit__(self, *exc):
        attncore.set_num_threads(self._before)
        if self._limits is not None:
            self._limits.restore_original_limits()
        if torch_available():
            import torch

            torch.set_num_threads(self._torch_before)

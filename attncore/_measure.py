"""Timing and peak memory of one call, shared by the CLI, benchmarks and the tour.

Peak memory is counted, not sampled: NumPy reports its array buffers to
tracemalloc, and the C core counts every workspace buffer it allocates (the
naive n×m table, the flash kernel's per-thread tiles).  Their sum is the
memory a call needs beyond its inputs.
"""

from __future__ import annotations

import time
import tracemalloc
from dataclasses import dataclass

from attncore import _core


@dataclass
class Measured:
    result: object
    seconds: float  # best of the repeats
    peak_bytes: int  # NumPy allocations + C workspace, beyond the inputs


def measure(fn, *args, repeat: int = 3, **kwargs) -> Measured:
    """Call fn(*args, **kwargs) once for memory, then `repeat` times for time."""
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
    best = float("inf")
    for _ in range(max(repeat, 1)):
        t0 = time.perf_counter()
        fn(*args, **kwargs)
        best = min(best, time.perf_counter() - t0)
    return Measured(result, best, peak)


def quiesce_blas() -> None:
    """Wait for NumPy's BLAS threads to go to sleep.  OpenBLAS workers spin
    for tens of milliseconds after a call (measured here: the FMA probe ran
    at half speed for 50 ms after a 2048² sgemm, and at full speed after
    100 ms); whatever is timed next would share the cores with them."""
    time.sleep(0.25)


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"  # pragma: no cover

"""The machine as the core sees it: the thread count every call uses, the memory
a materialised table may take, and what this build is (info())."""

from __future__ import annotations

import os
import threading

import numpy as np

from attncore import _core, _isa

_lock = threading.Lock()


def _default_threads() -> int:
    env = os.environ.get("ATTNCORE_NUM_THREADS")
    if env:
        try:
            n = int(env)
        except ValueError:
            raise ValueError(
                f"ATTNCORE_NUM_THREADS must be a positive integer, got {env!r}") from None
        if n < 1:
            raise ValueError(f"ATTNCORE_NUM_THREADS must be a positive integer, got {env!r}")
        return n
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


_num_threads = _default_threads()


def set_num_threads(n: int) -> None:
    """Set the number of OpenMP threads every later call uses (n >= 1).

    Calls already running keep the count they started with.  Without OpenMP
    the core runs on one thread whatever is set here.
    """
    global _num_threads
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    with _lock:
        _num_threads = int(n)


def get_num_threads() -> int:
    """The thread count calls use: set_num_threads(), else ATTNCORE_NUM_THREADS,
    else the CPUs this process may run on."""
    return _num_threads


def info() -> dict[str, object]:
    """What this build is and runs: version, micro-kernels, OpenMP, threads, flags."""
    from attncore import __version__

    bq32, bk32 = _core.default_blocks(4)
    bq64, bk64 = _core.default_blocks(8)
    return {
        "version": __version__,
        "isa": _core.isa(),
        "isa_available": _isa.available(),
        "openmp": _core.openmp(),
        "threads": get_num_threads(),
        "cflags": _core.CFLAGS,
        "default_blocks": {"float32": (bq32, bk32), "float64": (bq64, bk64)},
    }


def memory_limit() -> int:
    """Bytes a materialised table may take: ATTNCORE_MAX_TABLE_BYTES, or the
    memory the system reports available now."""
    env = os.environ.get("ATTNCORE_MAX_TABLE_BYTES", "").strip()
    if env:
        try:
            limit = int(env)
        except ValueError:
            limit = -1
        if limit < 0:
            raise ValueError(
                f"ATTNCORE_MAX_TABLE_BYTES must be a whole number of bytes, got {env!r}")
        return limit
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 2**63 - 1

"""The machine as the core sees it: the thread count every call uses, the memory
a materialised table may take, and what this build is (info())."""

from __future__ import annotations

import os
import threading

from attncore import _core, _isa
from attncore._problem import positive_int

_lock = threading.Lock()

# The most threads a call may use.  A team far larger than the machine only
# costs memory (each thread has its own stack), and libgomp ends the process
# when it cannot start one, so the count is bounded here and checked up front.
MAX_THREADS = 1024


def _default_threads() -> int:
    env = os.environ.get("ATTNCORE_NUM_THREADS")
    if env:
        try:
            n = int(env)
        except ValueError:
            n = 0
        return positive_int(n if n >= 1 else env, "ATTNCORE_NUM_THREADS", MAX_THREADS)
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


_num_threads = _default_threads()
_started = 1  # the largest team this process has shown it can start


def _can_start(n: int) -> None:
    """Start n - 1 threads that live at the same time, as a team would, then
    end them; RuntimeError if the system refuses (a memory or process limit).
    libgomp, meeting the same refusal inside a call, would end the process."""
    global _started
    if n <= _started:
        return
    go = threading.Event()
    started = []
    try:
        for _ in range(n - 1):
            t = threading.Thread(target=go.wait, daemon=True)
            t.start()
            started.append(t)
    except RuntimeError as e:
        raise RuntimeError(f"set_num_threads({n}): the system started only {len(started) + 1} "
                           f"threads ({e}); the thread count is unchanged") from None
    finally:
        go.set()
        for t in started:
            t.join()
    _started = n


def set_num_threads(n: int) -> None:
    """Set the number of OpenMP threads every later call uses, 1 ≤ n ≤ MAX_THREADS (1024).

    Calls already running keep the count they started with.  The threads are
    tried first: if the system cannot start n at once (a memory or process
    limit), this raises RuntimeError and nothing changes.  Without OpenMP the
    core runs on one thread whatever is set here; so does a child made by
    fork() after this process ran several threads (see get_num_threads).
    """
    global _num_threads
    n = positive_int(n, "n", MAX_THREADS)
    _can_start(n)
    with _lock:
        _num_threads = n


def get_num_threads() -> int:
    """The thread count calls use: set_num_threads(), else ATTNCORE_NUM_THREADS,
    else the CPUs this process may run on.

    1 in a child made by fork() once the parent had run a call on several
    threads: GNU OpenMP's idle threads do not survive fork(), and a team of
    several would wait for them forever, so the core runs such a child on one
    thread (a spawned or forkserver child is a fresh process and keeps them)."""
    return 1 if _core.single_after_fork() else _num_threads


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


def _fresh_lock_after_fork() -> None:
    global _lock
    _lock = threading.Lock()  # one another thread held at fork() would stay held


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_fresh_lock_after_fork)

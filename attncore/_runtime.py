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


def _omp_num_threads() -> int | None:
    """OMP_NUM_THREADS as OpenMP reads it: a positive count, or the first of a
    comma-separated list (the outermost level); None when unset or not a
    count, which OpenMP ignores too."""
    env = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    try:
        n = int(env)
    except ValueError:
        return None
    return min(n, MAX_THREADS) if n >= 1 else None


def _default_threads() -> int:
    env = os.environ.get("ATTNCORE_NUM_THREADS")
    if env:
        try:
            n = int(env)
        except ValueError:
            n = 0
        return positive_int(n if n >= 1 else env, "ATTNCORE_NUM_THREADS", MAX_THREADS)
    omp = _omp_num_threads()
    if omp is not None:
        return omp
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
    """The thread count calls use: set_num_threads() (or threadpoolctl's
    threadpool_limits, which calls it), else ATTNCORE_NUM_THREADS, else
    OMP_NUM_THREADS, else the CPUs this process may run on.

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


_registered = False  # the controller is registered once per process


def register_threadpoolctl() -> bool:
    """Make threadpoolctl see attncore's thread pool, as it sees OpenBLAS's and
    OpenMP's: ``threadpool_info()`` lists it (user_api "openmp", internal_api
    "attncore") and ``threadpool_limits(n)`` — or ``user_api="openmp"`` — sets
    its count for the block.  Done at import when threadpoolctl is installed;
    False when it is not (or too old to take a controller)."""
    global _registered
    if _registered:
        return True
    try:
        import threadpoolctl
    except ImportError:
        return False
    if not hasattr(threadpoolctl, "register"):
        return False

    class AttncoreController(threadpoolctl.LibController):
        """attncore's compiled core, found by its file name and one of its
        symbols; the count is attncore's own (set_num_threads), which every
        call passes to its OpenMP team."""

        user_api = "openmp"
        internal_api = "attncore"
        filename_prefixes = ("_core.",)
        check_symbols = ("ac_flash_f32",)

        def get_num_threads(self) -> int:
            return get_num_threads()

        def set_num_threads(self, num_threads: int) -> None:
            set_num_threads(num_threads)

        def get_version(self) -> str:
            from attncore import __version__

            return __version__

        def set_additional_attributes(self) -> None:
            self.isa = _core.isa()

    threadpoolctl.register(AttncoreController)
    _registered = True
    return True

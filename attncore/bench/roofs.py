"""The machine's roofs, measured with the kernels' own instructions in the same
run as the benchmarks (the FMA-throughput and streaming-read probes of
``csrc/probes.c`` and NumPy's sgemm), and what the machine is."""

from __future__ import annotations

import os
import platform
import subprocess
import time

import numpy as np

import attncore
from attncore import _core
from attncore.bench.peers import torch_available
from attncore.bench.timing import best_time, quiesce_blas, threads


def blas_info() -> dict:
    """Which BLAS NumPy runs and which kernel it chose (OpenBLAS's 'architecture')."""
    info = {"openblas_coretype": os.environ.get("OPENBLAS_CORETYPE")}
    try:
        from threadpoolctl import threadpool_info

        for lib in threadpool_info():
            if lib.get("user_api") == "blas":
                info.update(library=lib.get("internal_api"), version=lib.get("version"),
                            kernel=lib.get("architecture"), threads=lib.get("num_threads"))
                break
    except ImportError:
        info["library"] = "unknown (threadpoolctl not installed)"
    return info


def measure_roofs(nthreads: int, quick: bool = False) -> dict:
    """The machine's roofs, measured now with the kernels' own instructions."""
    with threads(nthreads):
        iters = 10_000_000  # ~0.1 s a call on a current core
        flops = _core.probe_fma(iters, nthreads)
        best = best_time(lambda: _core.probe_fma(iters, nthreads), min_time=0.3, max_reps=8,
                         min_reps=3)
        fma = flops / best / 1e9
        buf = np.ones((64 if quick else 256) * 2**20 // 4, np.float32)  # far beyond the caches
        nbytes = buf.nbytes
        read = nbytes / best_time(lambda: _core.probe_read(buf, nthreads), min_time=0.3) / 1e9
        del buf
        # the bfloat16 dot-product roof (AVX512_BF16's vdpbf16ps), where the kernels have it
        bf16 = None
        if _core.probe_bf16dot(1000, nthreads):
            dflops = _core.probe_bf16dot(iters, nthreads)
            bf16 = dflops / best_time(lambda: _core.probe_bf16dot(iters, nthreads), min_time=0.3,
                                      max_reps=8, min_reps=3) / 1e9
        a = np.random.default_rng(0).standard_normal((2048, 2048), dtype=np.float32)
        sgemm = 2 * 2048**3 / best_time(lambda: a @ a, min_time=0.3) / 1e9
        quiesce_blas()
    return {"fma_gflops": fma, "read_gbs": read, "sgemm_gflops": sgemm, "isa": _core.isa(),
            "threads": nthreads, "bf16dot_gflops": bf16}


def cache_sizes() -> dict:
    """The data caches of CPU 0 as the OS reports them (Linux sysfs): level ->
    bytes ({"L1": 49152, "L2": 2097152, "L3": ...}); {} where it reports none.
    L1 and L2 are per core on current x86 and Arm cores; L3 is shared."""
    found = {}
    root = "/sys/devices/system/cpu/cpu0/cache"
    try:
        entries = sorted(os.listdir(root))
    except OSError:
        return found
    for entry in entries:
        try:
            with open(os.path.join(root, entry, "type")) as f:
                kind = f.read().strip()
            with open(os.path.join(root, entry, "level")) as f:
                level = int(f.read())
            with open(os.path.join(root, entry, "size")) as f:
                size = f.read().strip()
        except (OSError, ValueError):
            continue
        if kind == "Instruction" or not size:
            continue
        scale = {"K": 2**10, "M": 2**20, "G": 2**30}.get(size[-1], 1)
        found[f"L{level}"] = int(size.rstrip("KMG")) * scale
    return found


def machine() -> dict:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    versions = {"attncore": attncore.__version__, "numpy": np.__version__}
    if torch_available():
        import torch

        versions["torch"] = torch.__version__
    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(),
            "versions": versions, "blas": blas_info(), "version": attncore.__version__,
            "caches": cache_sizes(),
            "commit": source_commit(),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def source_commit() -> str | None:
    """The git commit of the checkout this attncore was built from (with
    "+changes" when its code — csrc/, attncore/, the build files — differs
    from it), or None for an installed wheel."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(attncore.__file__)))
    if not os.path.isdir(os.path.join(here, ".git")):
        return None
    try:
        head = subprocess.run(["git", "-C", here, "rev-parse", "--short=10", "HEAD"],
                              capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "-C", here, "status", "--porcelain", "--", "csrc",
                                "attncore", "setup.py", "pyproject.toml"],
                               capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if head.returncode != 0:
        return None
    return head.stdout.strip() + ("+changes" if dirty.stdout.strip() else "")

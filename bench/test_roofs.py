"""The machine's roofs, as benchmarks: FMA throughput, streaming read, sgemm."""

import numpy as np
import pytest

import attncore
from attncore import _core
from attncore.bench import quiesce_blas


@pytest.mark.smoke
def test_fma_roof(benchmark):
    nt, iters = attncore.get_num_threads(), 2_000_000
    flops = benchmark.pedantic(_core.probe_fma, args=(iters, nt), rounds=5, warmup_rounds=1)
    benchmark.extra_info.update(roof="fma_gflops",
                                value=flops / benchmark.stats.stats.min / 1e9)


@pytest.mark.smoke
def test_read_roof(benchmark):
    buf = np.ones(64 * 2**20 // 4, np.float32)
    nbytes = benchmark.pedantic(_core.probe_read, args=(buf, attncore.get_num_threads()),
                                rounds=5, warmup_rounds=1)
    benchmark.extra_info.update(roof="read_gbs", value=nbytes / benchmark.stats.stats.min / 1e9)


@pytest.mark.smoke
def test_sgemm_roof(benchmark):
    a = np.random.default_rng(0).standard_normal((1024, 1024), dtype=np.float32)
    benchmark.pedantic(np.matmul, args=(a, a), rounds=5, warmup_rounds=1)
    benchmark.extra_info.update(roof="sgemm_gflops",
                                value=2 * 1024**3 / benchmark.stats.stats.min / 1e9)
    quiesce_blas()

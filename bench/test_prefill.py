"""Prefill (n = m): the compute-bound regime, every method side by side."""

import pytest

from attncore import bench
from attncore.bench.timing import measure

NS = (128, 256, 512, 1024, 2048, 4096, 8192, 16384)
SMOKE = {"n": 128, "d": 64}


def _params():
    for n in NS:
        for d in (64, 128):
            for causal in (False, True):
                for dtype in ("float32", "float64"):
                    for method in bench.METHODS:
                        marks = []
                        if n == SMOKE["n"] and d == SMOKE["d"]:
                            marks.append(pytest.mark.smoke)
                        yield pytest.param(n, d, causal, dtype, method, marks=marks,
                                           id=f"{method}-n{n}-d{d}-{'causal' if causal else 'full'}-{dtype}")


@pytest.mark.parametrize("n,d,causal,dtype,method", list(_params()))
def test_prefill(benchmark, n, d, causal, dtype, method):
    case = bench.Case(n=n, d=d, causal=causal, dtype=dtype)
    if method == "torch" and not bench.torch_available():
        pytest.skip("torch is not installed")
    if not bench.fits(method, case):
        pytest.skip("the materialised table does not fit in memory")
    fn = bench.runner(method, case, bench.make_inputs(case))
    if method != "torch":  # torch's allocator is invisible to tracemalloc
        benchmark.extra_info["peak_bytes"] = measure(fn, repeat=0).peak_bytes
    benchmark.extra_info.update(method=method, regime=case.regime, n=n, m=case.m, d=d,
                                causal=causal, dtype=dtype, B=case.B, H=case.H,
                                flops=case.flops, bytes=case.bytes(method))
    # a few rounds of the big cases, more of the small ones
    rounds = max(1, min(20, int(2e9 / case.flops)))
    benchmark.pedantic(fn, rounds=rounds, iterations=1, warmup_rounds=1)
    if method == "numpy":
        bench.quiesce_blas()

"""Decode (one new query row against a long KV cache): the bandwidth-bound
regime, and prefill under sliding windows."""

import pytest

from attncore import bench
from attncore.bench.timing import measure

MS = (1024, 4096, 16384, 32768, 65536, 131072)


def _run(benchmark, case, method):
    if method == "torch" and not bench.torch_available():
        pytest.skip("torch is not installed")
    fn = bench.runner(method, case, bench.make_inputs(case))
    if fn is None or not bench.fits(method, case):
        pytest.skip(f"{method} does not run this case")
    if method != "torch":
        benchmark.extra_info["peak_bytes"] = measure(fn, repeat=0).peak_bytes
    benchmark.extra_info.update(method=method, regime=case.regime, n=case.n, m=case.m, d=case.d,
                                causal=case.causal, dtype=case.dtype, B=case.B, H=case.H,
                                Hkv=case.Hkv, kv_dtype=case.kv, window=case.window,
                                flops=case.flops, bytes=case.bytes(method))
    rounds = max(1, min(20, int(2e9 / max(case.flops, case.bytes(method)))))
    benchmark.pedantic(fn, rounds=rounds, iterations=1, warmup_rounds=1)
    if method == "numpy":
        bench.quiesce_blas()


def _decode_params():
    for m in MS:
        for kv in ("float32", "float16"):
            for hkv in (32, 8):
                for method in ("attncore-flash", "numpy", "torch"):
                    marks = [pytest.mark.smoke] if (m, kv, hkv) == (1024, "float32", 32) else []
                    yield pytest.param(m, kv, hkv, method, marks=marks,
                                       id=f"{method}-m{m}-{kv}-H32/{hkv}")


@pytest.mark.parametrize("m,kv,hkv,method", list(_decode_params()))
def test_decode(benchmark, m, kv, hkv, method):
    _run(benchmark, bench.Case(1, 128, False, H=32, regime="decode", keys=m, kv_heads=hkv,
                               kv_dtype=kv), method)


def _window_params():
    for n in (1024, 4096, 16384):
        for window in (256, 1024, None):
            marks = [pytest.mark.smoke] if (n, window) == (1024, 256) else []
            yield pytest.param(n, window, marks=marks, id=f"n{n}-window{window or 'none'}")


@pytest.mark.parametrize("n,window", list(_window_params()))
def test_window(benchmark, n, window):
    _run(benchmark, bench.Case(n, 64, True, regime="window", window=window), "attncore-flash")

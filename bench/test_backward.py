"""The backward pass: gradients of a causal prefill, every peer's backward alone."""

import pytest

from attncore import bench
from test_decode import _run


def _params():
    for n in (512, 1024, 2048, 4096):
        for method in ("attncore-flash", "attncore-naive", "numpy", "torch"):
            marks = [pytest.mark.smoke] if (n, method) == (512, "attncore-flash") else []
            yield pytest.param(n, method, marks=marks, id=f"{method}-n{n}")


@pytest.mark.parametrize("n,method", list(_params()))
def test_backward(benchmark, n, method):
    _run(benchmark, bench.Case(n, 64, True, regime="backward"), method)

"""The thread controls users know from NumPy and scikit-learn: OMP_NUM_THREADS
(when ATTNCORE_NUM_THREADS is not set) and threadpoolctl, each checked in a
fresh interpreter, since both are read when attncore is imported."""

import json
import os
import subprocess
import sys
import tempfile

import pytest

from helpers import not_emulated

pytestmark = not_emulated("starts other interpreters")


def _child(code: str, **env_overrides: str) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("ATTNCORE_NUM_THREADS", "OMP_NUM_THREADS")}
    env.update(env_overrides)
    # run outside the source tree, which has no compiled core
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       cwd=tempfile.gettempdir(), check=False)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


THREADS = "import json, os, attncore; print(json.dumps({'n': attncore.get_num_threads(), " \
          "'cpus': len(os.sched_getaffinity(0))}))"


@pytest.mark.parametrize("omp, want", [("1", 1), ("3", 3), ("3,2", 3), (" 2 ", 2)])
def test_omp_num_threads_is_honoured(omp, want):
    assert _child(THREADS, OMP_NUM_THREADS=omp)["n"] == want


def test_attncore_num_threads_wins_over_omp_num_threads():
    assert _child(THREADS, OMP_NUM_THREADS="1", ATTNCORE_NUM_THREADS="3")["n"] == 3


@pytest.mark.parametrize("omp", ["", "abc", "0", "-2"])
def test_an_omp_num_threads_that_is_not_a_count_is_ignored_as_openmp_ignores_it(omp):
    got = _child(THREADS, OMP_NUM_THREADS=omp)
    assert got["n"] == got["cpus"]


def test_threadpoolctl_sees_and_limits_attncore():
    pytest.importorskip("threadpoolctl")
    code = """
import json, numpy as np, attncore
from threadpoolctl import threadpool_info, threadpool_limits
ours = [x for x in threadpool_info() if x["internal_api"] == "attncore"]
attncore.set_num_threads(2)
q = np.random.default_rng(0).standard_normal((4, 300, 32))
full = attncore.attention(q, q, q, causal=True)
with threadpool_limits(limits=1):
    inside = attncore.get_num_threads()
    one = attncore.attention(q, q, q, causal=True)
after = attncore.get_num_threads()
with threadpool_limits(limits=1, user_api="openmp"):
    openmp = attncore.get_num_threads()
with threadpool_limits(limits=1, user_api="blas"):
    blas_only = attncore.get_num_threads()
print(json.dumps({"ours": ours, "inside": inside, "after": after, "openmp": openmp,
                  "blas_only": blas_only, "same": bool((one == full).all())}))
"""
    got = _child(code)
    assert len(got["ours"]) == 1
    info = got["ours"][0]
    assert info["user_api"] == "openmp" and info["num_threads"] >= 1
    assert info["filepath"].endswith(".so") or info["filepath"].endswith(".pyd")
    assert got["inside"] == 1 and got["after"] == 2 and got["openmp"] == 1
    assert got["blas_only"] == 2  # a BLAS limit is not attncore's
    assert got["same"]  # the same bits on one thread as on two


def test_threadpoolctl_imported_first_still_sees_attncore():
    pytest.importorskip("threadpoolctl")
    code = ("import json, threadpoolctl, attncore; print(json.dumps("
            "[x['internal_api'] for x in threadpoolctl.threadpool_info()]))")
    r = _child(code)
    assert r.count("attncore") == 1

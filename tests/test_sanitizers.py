"""The test suite again, on a build with AddressSanitizer and UBSan.

This test copies the sources into a temporary folder, builds the extension
there with ATTNCORE_SANITIZE=1 (-fsanitize=address,undefined, any finding
fatal), and runs the tests of every kernel on every ISA against that build in
a child process with the ASan runtime preloaded.  Left out of the child run:
the files that only draw figures, time the benchmarks or print the tour
(matplotlib's own C++ exceptions trip ASan's interceptor), torch's tests (its
C++ and its compiler are not ours to instrument; attncore.torch calls the same
entry points the other tests check), the mypy check, and this file.

Leaks are not checked here (CPython frees little at exit, by design); the
valgrind memcheck of tools/memcheck.py (the second test) covers the core's own
allocations.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LEFT_OUT = ["test_bench_smoke.py", "test_teach.py", "test_tour.py", "test_cli_and_build.py",
            "test_sanitizers.py", "test_notebooks.py",  # figures, Jupyter kernels, the build
            "test_torch.py", "test_typing.py",  # torch's own C++ and compiler, mypy: not the core
            "test_docs.py"]  # the pages, which the copy leaves out: prose, not the core
SANITIZE_ENV = {
    "ASAN_OPTIONS": "detect_leaks=0:allocator_may_return_null=1:abort_on_error=0",
    "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1",
}


def libasan():
    gcc = shutil.which("gcc")
    if not gcc or not sys.platform.startswith("linux"):
        return None
    path = subprocess.run([gcc, "-print-file-name=libasan.so"], capture_output=True,
                          text=True).stdout.strip()
    return path if os.path.isabs(path) and os.path.exists(path) else None


pytestmark = [
    pytest.mark.slow,  # the suite rebuilt and run under the sanitizers: `pytest -m slow`
    pytest.mark.skipif(bool(os.environ.get("ATTNCORE_SANITIZED")),
                       reason="already the sanitized run"),
    pytest.mark.skipif(libasan() is None, reason="needs gcc with libasan (Linux)"),
    pytest.mark.skipif(not (ROOT / "setup.py").exists() or not (ROOT / "csrc").exists(),
                       reason="needs the source tree"),
]


def run(cmd, cwd, env, timeout):
    r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    out = r.stdout + r.stderr
    assert r.returncode == 0, f"{' '.join(map(str, cmd))} failed ({r.returncode}):\n{out[-8000:]}"
    return out


def test_the_suite_is_clean_under_address_and_undefined_behaviour_sanitizers(tmp_path):
    pytest.importorskip("Cython")
    src = tmp_path / "src"
    src.mkdir()
    skip = shutil.ignore_patterns("*.so", "_core.c", "__pycache__", ".hypothesis")
    for name in ("csrc", "attncore", "tests"):
        shutil.copytree(ROOT / name, src / name, ignore=skip)
    for name in ("setup.py", "pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)

    env = dict(os.environ, ATTNCORE_SANITIZE="1")
    run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], src, env, 1800)

    env = dict(os.environ, **SANITIZE_ENV, LD_PRELOAD=libasan(), PYTHONPATH=str(src),
               ATTNCORE_SANITIZED="1")
    env.pop("ATTNCORE_SANITIZE", None)
    env.pop("ATTNCORE_ISA", None)  # the suite runs every ISA itself
    which = run([sys.executable, "-c",
                 "import attncore; print(attncore.__file__); print(attncore.info()['cflags'])"],
                src, env, 120)
    assert str(src) in which and "-fsanitize=address,undefined" in which, which

    ignores = [a for f in LEFT_OUT for a in ("--ignore", f"tests/{f}")]
    # -s: a sanitizer report goes to stderr, which must not be captured and lost
    # -m: the slow set too (the interrupts), as before it was one (this test skips itself there)
    out = run([sys.executable, "-m", "pytest", "-q", "-x", "-s", "-p", "no:cacheprovider",
               "-p", "no:randomly", "-m", "slow or not slow", *ignores, "tests"], src, env, 3600)
    assert "passed" in out and "ERROR: AddressSanitizer" not in out
    assert "runtime error:" not in out


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="needs valgrind")
@pytest.mark.skipif(not (ROOT / "tools" / "memcheck.py").exists(), reason="needs the source tree")
def test_memcheck_of_a_representative_run_is_clean():
    # the attncore installed for this test run, every entry point, scalar and avx2
    out = run([sys.executable, str(ROOT / "tools" / "memcheck.py"), "--valgrind"], ROOT,
              dict(os.environ), 1200)
    assert "memcheck: 0 error contexts in attncore, 0 bytes lost by attncore" in out, out

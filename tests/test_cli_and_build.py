"""The attncore command, info(), and what the build promised."""

import os
import subprocess
import sys

import numpy as np
import pytest

import attncore
from attncore import cli


def test_info_reports_the_build():
    info = attncore.info()
    assert info["version"] == attncore.__version__
    assert info["isa"] in info["isa_available"] and "scalar" in info["isa_available"]
    assert isinstance(info["openmp"], bool) and info["threads"] == attncore.get_num_threads()
    flags = info["cflags"].split()
    assert "-O3" in flags or "-O0" in flags
    assert not {"-ffast-math", "-Ofast"} & set(flags)
    assert info["default_blocks"]["float32"][0] >= 1


def test_cli_info(capsys):
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    assert "isa" in out and attncore.__version__ in out


def test_the_isa_list_is_the_c_core_s_and_its_first_runnable_entry_is_the_default(tmp_path):
    from attncore import _core, _isa

    assert _isa.ISAS == _core.isa_names()
    assert set(_isa.ISAS) >= {"scalar", "avx2", "avx512", "neon"}
    assert _isa.ISAS[-1] == "scalar" and _isa.available()[-1] == "scalar"
    # a fresh interpreter, nothing forced: the core picks the best the CPU runs
    env = {k: v for k, v in os.environ.items() if k != "ATTNCORE_ISA"}
    code = ("import attncore; from attncore import _isa; "
            "print(attncore.info()['isa'], _isa.available()[0])")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                       cwd=tmp_path, env=env)
    chosen, best = r.stdout.split()
    assert chosen == best


def test_cli_check_prints_error_time_and_memory(capsys):
    before = attncore.get_num_threads()
    try:
        assert cli.main(["--threads", "1", "check", "--sizes", "16", "130", "--repeat", "1"]) == 0
        out = capsys.readouterr().out
        for word in ("naive", "flash", "peak memory", "130"):
            assert word in out
        assert attncore.get_num_threads() == 1
    finally:
        attncore.set_num_threads(before)


def test_cli_check_fails_on_a_wrong_kernel(monkeypatch, capsys):
    real = attncore.attention
    monkeypatch.setattr(attncore, "attention", lambda *a, **kw: real(*a, **kw) + 1e-3)
    assert cli.main(["check", "--sizes", "8", "--repeat", "1"]) == 1
    assert "FAILED" in capsys.readouterr().err


# Subprocesses run outside the source tree, which has no compiled core.


def test_console_script_runs(tmp_path):
    r = subprocess.run([sys.executable, "-m", "attncore.cli", "info"], capture_output=True,
                       text=True, cwd=tmp_path)
    assert r.returncode == 0 and "openmp" in r.stdout


def test_import_stays_light(tmp_path):
    # importing attncore must not pull in the CLI's table library or plotting
    code = "import sys, attncore; print(sorted(m for m in ('rich', 'matplotlib') if m in sys.modules))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                       cwd=tmp_path)
    assert r.stdout.strip() == "[]"


def test_workspace_peak_grows_as_n_squared_for_naive_only():
    from attncore.bench.timing import measure

    peaks = {}
    for n in (256, 512):
        q = np.zeros((n, 16), np.float32)
        for method in ("naive", "flash"):
            peaks[method, n] = measure(attncore.attention, q, q, q, method=method,
                                       repeat=1).peak_bytes
    # naive holds the n×n float32 table: 4·n² bytes at least
    assert peaks["naive", 512] >= 4 * 512 * 512
    assert peaks["naive", 512] / peaks["naive", 256] > 3.5
    # flash holds the output, lse and per-thread tiles: linear in n
    assert peaks["flash", 512] / peaks["flash", 256] < 2.2
    assert peaks["flash", 512] < 4 * 512 * 512 / 4


def test_the_suite_runs_on_the_numpy_floor_in_ci():
    """pyproject.toml's numpy floor is tested: .ci/run installs exactly that
    minor release in a second virtualenv and runs the suite with
    ATTNCORE_NUMPY_FLOOR set, which this test then holds it to."""
    import re
    import tomllib
    from pathlib import Path

    pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
    deps = tomllib.loads(pyproject.read_text())["project"]["dependencies"]
    floor = next(re.fullmatch(r"numpy>=([0-9.]+)", d.replace(" ", "")).group(1)
                 for d in deps if d.replace(" ", "").startswith("numpy>="))
    have = tuple(int(x) for x in re.findall(r"\d+", np.__version__)[:2])
    assert have >= tuple(int(x) for x in floor.split(".")[:2])
    if os.environ.get("ATTNCORE_NUMPY_FLOOR"):
        assert os.environ["ATTNCORE_NUMPY_FLOOR"] == floor
        assert np.__version__.startswith(floor + "."), np.__version__


@pytest.mark.slow
def test_the_kernel_timing_tool_builds_and_times_each_isa():
    """tools/kernel-timing.sh compiles against the core's own kernel table, whose
    signatures change with the kernels (a soft-cap argument once broke it
    unnoticed): it must build, and time a tile on every x86 ISA this CPU runs."""
    import platform
    import re
    import shutil

    if shutil.which("gcc") is None or platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("the tool times the x86 kernels with gcc")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    r = subprocess.run(["bash", os.path.join(root, "tools", "kernel-timing.sh"), "16", "16", "16",
                        "64"], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    for isa in attncore.info()["isa_available"]:
        assert re.search(rf"^{isa}\s+roof\s+[\d.]+ GFLOP/s .*tile\s+\d+% of roof", r.stdout,
                         re.M), r.stdout


@pytest.mark.slow
def test_the_ab_tool_pairs_two_trees_in_workers_and_in_fresh_children(tmp_path):
    """tools/ab.py against the attncore under test itself (an A/A run): both ways
    of pairing give a row per case chosen, and every ratio is a time over a time
    of the same code, so it is positive and finite; --cases that match none are
    refused.  The tool imports attncore from each tree it is given, so the tree
    here is a folder holding a link to the package this test imports (built in
    place or installed)."""
    import re

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    tree = str(tmp_path)
    os.symlink(os.path.dirname(os.path.abspath(attncore.__file__)), tmp_path / "attncore")
    isa = attncore.info()["isa"]
    for how in ([], ["--fresh"]):
        r = subprocess.run([sys.executable, os.path.join(root, "tools", "ab.py"), tree, tree,
                            "--isa", isa, "--rounds", "2", "--repeats", "1", "--pause", "0",
                            "--cases", "tiny", "small", *how], capture_output=True, text=True,
                           timeout=900)
        assert r.returncode == 0, r.stderr[-3000:]
        rows = re.findall(r"^(decode m=64 H 4/4 d=16 \(tiny\)|prefill n=256 causal \(small\))"
                          r"\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s", r.stdout, re.M)
        assert [row[0] for row in rows] == ["decode m=64 H 4/4 d=16 (tiny)",
                                            "prefill n=256 causal (small)"], r.stdout
        assert all(0 < float(x) < float("inf") for row in rows for x in row[1:]), r.stdout
        assert f"ISA {isa}" in r.stdout
    r = subprocess.run([sys.executable, os.path.join(root, "tools", "ab.py"), tree, tree, "--isa",
                        isa, "--rounds", "1", "--cases", "no such case"], capture_output=True,
                       text=True, timeout=900)
    assert r.returncode != 0 and "no case matches" in r.stderr, (r.stdout, r.stderr[-3000:])

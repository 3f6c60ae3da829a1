"""The public API's annotations hold under ``mypy --strict``: a small program
using it (tests/typecheck/usage.py) type-checks, and runs.  attncore's own modules
are read for their types, not reported (tests/typecheck/mypy.ini), as a user's
checker treats an installed package."""

import os
import subprocess
import sys
import sysconfig

import pytest

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "typecheck")


def test_the_usage_file_runs():
    r = subprocess.run([sys.executable, os.path.join(HERE, "usage.py")], capture_output=True,
                       text=True, cwd=HERE)
    assert r.returncode == 0, r.stderr[-3000:]


def test_the_public_api_passes_mypy_strict(tmp_path):
    pytest.importorskip("mypy", reason="mypy is in the test extras")
    import attncore

    env = dict(os.environ)
    where = os.path.dirname(os.path.dirname(os.path.abspath(attncore.__file__)))
    site = {os.path.realpath(sysconfig.get_paths()[k]) for k in ("purelib", "platlib")}
    if os.path.realpath(where) not in site:  # an editable install, which mypy cannot follow
        env["MYPYPATH"] = where
    r = subprocess.run([sys.executable, "-m", "mypy", "--config-file",
                        os.path.join(HERE, "mypy.ini"), "--cache-dir", str(tmp_path / "cache"),
                        os.path.join(HERE, "usage.py")],
                       capture_output=True, text=True, cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stdout[-5000:] + r.stderr[-2000:]
    assert "Success: no issues found in 1 source file" in r.stdout

"""The README and the documentation pages: their examples run as scripts, the
guarantees cite tests that exist, the README stays short, its numbers come from
a saved run, and the site builds and renders."""

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")
DOCS = os.path.join(ROOT, "docs")
# the tutorials are written by `attncore tour`, whose tests run each call they show
if not os.path.isdir(DOCS):  # a copy of the package and tests without the pages
    pytest.skip("needs the source tree's docs/", allow_module_level=True)
PAGES = [README] + sorted(os.path.join(DOCS, f) for f in os.listdir(DOCS)
                          if f.endswith(".md") and not f.startswith("tutorial"))


def _blocks():
    for path in PAGES:
        with open(path, encoding="utf-8") as f:
            for i, code in enumerate(re.findall(r"```python\n(.*?)```", f.read(), re.S)):
                yield pytest.param(path, textwrap.dedent(code),  # a block inside a list item
                                   id=f"{os.path.relpath(path, ROOT)}-{i}")


@pytest.mark.parametrize("path,code", list(_blocks()))
def test_every_python_block_runs_as_a_script(path, code, tmp_path):
    """Each block is saved as a file and run by a fresh interpreter, as a reader
    would run it (a LocalCluster's spawned workers need `if __name__ ==
    "__main__":` there).  A block that begins ``# needs attncore[distributed]``
    (or ``[torch]``) runs where Dask (torch) is installed — CI's extras stage."""
    need = re.match(r"# needs attncore\[(\w+)\]", code)
    if need:
        module = {"distributed": "distributed", "torch": "torch"}[need.group(1)]
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"needs attncore[{need.group(1)}]")
    script = tmp_path / "example.py"
    script.write_text(code, encoding="utf-8")
    r = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, f"{os.path.relpath(path, ROOT)}:\n{code}\n{r.stderr[-3000:]}"


def test_the_readme_is_short_and_points_to_the_docs():
    with open(README, encoding="utf-8") as f:
        text = f.read()
    assert len(text.splitlines()) <= 200
    for link in re.findall(r"\]\((docs/[^)#]+)", text):
        assert os.path.exists(os.path.join(ROOT, link)), link
    assert "csrc/plain.c" in text and "pytest" in text and "attncore bench" in text


def test_the_readme_and_performance_numbers_come_from_the_saved_run():
    run = os.path.join(DOCS, "bench")  # one bench.json per ISA
    r = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "docs_numbers.py"), run,
                        "--check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_every_guarantee_names_tests_that_exist():
    with open(os.path.join(DOCS, "guarantees.md"), encoding="utf-8") as f:
        text = f.read()
    rows = [r for r in text.splitlines() if r.startswith("| ") and not r.startswith("| guarantee")]
    assert len(rows) >= 10
    for row in rows:
        cited = row.rsplit("|", 2)[-2]
        refs = re.findall(r"`((?:tests/|tools/)?[\w/]+\.py)((?:::\w+)?)`|`::(\w+)`", cited)
        assert refs, row
        last = None
        for path, test, bare in refs:
            if path:
                last = path if path.startswith(("tests/", "tools/")) else "tests/" + path
                assert os.path.exists(os.path.join(ROOT, last)), last
            name = (test or "::" + bare if (test or bare) else "")[2:]
            if name:
                with open(os.path.join(ROOT, last)) as f:
                    assert f"def {name}(" in f.read(), (last, name)


@pytest.mark.skipif(importlib.util.find_spec("mkdocs") is None,
                    reason="mkdocs is in the docs extra (pip install '.[docs]')")
def test_the_site_builds_strict_and_every_page_renders(tmp_path):
    """mkdocs build --strict, then every page opened in headless Chromium:
    a heading, text, and every image loaded (tools/site_check.py)."""
    site = tmp_path / "site"
    r = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                        str(site)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    pages = {os.path.relpath(os.path.join(dp, f), site) for dp, _, fs in os.walk(site)
             for f in fs if f.endswith(".html")}
    for page in ("index.html", "api/index.html", "tutorial/index.html",
                 "notebooks/01-sentence/index.html", "architecture/index.html"):
        assert page in pages, page
    with open(site / "api" / "index.html", encoding="utf-8") as f:
        api = f.read()
    assert "attncore.attention" in api and "Examples" in api  # from the docstrings
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if importlib.util.find_spec("playwright") is None or not chromium:
        pytest.skip("the rendering check needs playwright and chromium "
                    "(the screenshot extra, tools/install-docs-tools.sh)")
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    import site_check

    rows = site_check.check(str(site), chromium, str(tmp_path / "home.png"))
    assert len(rows) >= 20
    assert site_check.failures(rows) == []
    assert sum(r["images"] for r in rows) >= 10


def test_attention_s_examples_run_and_its_signature_is_public():
    import doctest
    import inspect

    import attncore

    finder, runner = doctest.DocTestFinder(), doctest.DocTestRunner()
    for test in finder.find(attncore.attention, "attention", globs={}):
        runner.run(test)
    failed, attempted = runner.summarize(verbose=False)
    assert attempted >= 8 and failed == 0
    assert not [p for p in inspect.signature(attncore.attention).parameters if p.startswith("_")]

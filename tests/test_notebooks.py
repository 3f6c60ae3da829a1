"""The live notebooks (docs/notebooks/): stored without outputs, and each runs
top to bottom in a real kernel (nbclient), its widgets built and drawn once.
Skipped without the notebook extra; CI installs it."""

import json
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# the notebooks live in the source tree (tools/wheel-test.sh runs the tests without it)
pytestmark = pytest.mark.skipif(not os.path.isdir(os.path.join(ROOT, "docs", "notebooks")),
                                reason="needs the source tree's docs/notebooks")
NOTEBOOKS = sorted(os.path.join(ROOT, "docs", "notebooks", f)
                   for f in os.listdir(os.path.join(ROOT, "docs", "notebooks"))
                   if f.endswith(".ipynb")) if os.path.isdir(os.path.join(ROOT, "docs",
                                                                            "notebooks")) else []


def test_there_are_notebooks():
    assert len(NOTEBOOKS) >= 3


@pytest.mark.parametrize("path", NOTEBOOKS, ids=os.path.basename)
def test_the_prose_is_in_english_and_chinese(path):
    with open(path, encoding="utf-8") as f:
        nb = json.load(f)
    text = [" ".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown"]
    first = text[0]  # the notebook's introduction, in both
    assert "**中文：**" in first and sum("\u4e00" <= ch <= "\u9fff" for ch in first) > 60
    for cell in text:  # and every other paragraph of prose too
        assert "**中文：**" in cell, cell[:80]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=os.path.basename)
def test_stored_without_outputs(path):
    with open(path, encoding="utf-8") as f:
        nb = json.load(f)
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            assert cell["outputs"] == [] and cell["execution_count"] is None


def _execute(nbclient, nb, cwd) -> None:
    """Run nb in a kernel that talks over Unix sockets (where it can): a kernel
    on TCP takes ports that were free when they were picked, and a process
    beside it (another test's kernel or Dask cluster, under pytest-xdist) can
    take one first; the kernel then never answers, and the client waits a
    minute before it restarts it (once, 04-trace took 121 s here, 6 s alone)."""
    import shutil
    import sys
    import tempfile

    from jupyter_client import KernelManager

    sockets = None
    if sys.platform == "win32":
        km = KernelManager(kernel_name="python3")
    else:  # a short path: a Unix socket's is limited to about 100 bytes
        sockets = tempfile.mkdtemp(prefix="ack")
        km = KernelManager(kernel_name="python3", transport="ipc",
                           ip=os.path.join(sockets, "k"))
    client = nbclient.NotebookClient(nb, km=km, timeout=120, startup_timeout=120,
                                     resources={"metadata": {"path": str(cwd)}})
    try:
        client.execute()
    finally:
        if client.kc is not None:
            client.kc.stop_channels()
        if km.has_kernel:
            km.shutdown_kernel(now=True)
        if sockets:
            shutil.rmtree(sockets, ignore_errors=True)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=os.path.basename)
def test_runs_top_to_bottom(path, tmp_path):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    pytest.importorskip("ipywidgets")
    pytest.importorskip("matplotlib")
    nb = nbformat.read(path, as_version=4)
    _execute(nbclient, nb, tmp_path)
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs
              if o.output_type == "error"]
    assert not errors, errors
    widgets = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs
               if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]
    assert widgets, "no widget was displayed"


def test_an_executed_notebook_is_drawn_with_its_widgets(tmp_path):
    """tools/notebook_screenshot.py: 01-sentence executed with its widget state
    stored, exported to HTML with that state embedded, and drawn in headless
    Chromium from the state alone — sliders, buttons and the figure inside its
    Output widget — with no error output."""
    import shutil
    import subprocess
    import sys

    for name in ("nbclient", "nbconvert", "jupyterlab", "ipywidgets", "playwright"):
        pytest.importorskip(name, reason=f"{name} is in the notebook/screenshot extras")
    if not (shutil.which("chromium") or shutil.which("chromium-browser")):
        pytest.skip("no chromium (tools/install-docs-tools.sh installs Debian's)")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out, html = tmp_path / "shot.png", tmp_path / "nb.html"
    run = subprocess.run([sys.executable, os.path.join(root, "tools", "notebook_screenshot.py"),
                          "--out", str(out), "--html", str(html)],
                         capture_output=True, text=True, timeout=400)
    assert run.returncode == 0, run.stdout + run.stderr[-3000:]
    assert "widget models embedded" in run.stdout and "0 errors" in run.stdout
    text = html.read_text(encoding="utf-8")
    assert 'type="application/vnd.jupyter.widget-state+json"' in text
    with open(out, "rb") as f:
        head = f.read(24)
    width, height = int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")
    assert head[:4] == b"\x89PNG" and width >= 800 and height >= 800

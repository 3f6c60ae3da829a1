"""Execute one live notebook, keep its widget state, export it to HTML, and
look at it in headless Chromium.

    python tools/notebook_screenshot.py [--notebook docs/notebooks/01-sentence.ipynb]
                                        [--out docs/notebook-01-sentence.png] [--html FILE]

1. nbclient runs the notebook top to bottom in a real kernel with
   ``store_widget_state=True``: the executed .ipynb carries every widget's
   state (sliders, buttons, the Output widgets holding the figures) in its
   metadata.
2. nbconvert writes it as HTML with that state embedded (a
   ``application/vnd.jupyter.widget-state+json`` script, and one view per
   widget output); the script checks that every view's model is in the state.
3. Drawing widgets needs a widget manager.  nbconvert's HTML loads one
   (@jupyter-widgets/html-manager) from a CDN, which this machine cannot
   reach, so the page is drawn where the package ships one: JupyterLab (the
   ``notebook`` extra) opens the *executed* notebook, restores the stored
   widget state, and headless Chromium (Debian's ``chromium``, driven by
   Playwright) waits until the widgets and their figures are drawn, then
   takes the screenshot.

Needs ``pip install ".[notebook,screenshot]"`` and ``chromium`` (``apt-get
install chromium``; ``--chromium PATH`` for another binary).  Exit status 0
with the paths printed, else a message saying what is missing.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def execute(src: str, dst: str, timeout: int = 180) -> dict:
    """Run the notebook with nbclient, storing the widget state; return it."""
    import nbclient
    import nbformat

    nb = nbformat.read(src, as_version=4)
    nbclient.NotebookClient(nb, timeout=timeout, startup_timeout=timeout, kernel_name="python3",
                            store_widget_state=True,
                            resources={"metadata": {"path": os.path.dirname(src)}}).execute()
    nbformat.write(nb, dst)
    return nb


def views_and_state(nb) -> tuple[list[str], dict]:
    """The model ids the outputs display, and the stored widget state."""
    state = nb.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    views = [out["data"][WIDGET_VIEW]["model_id"] for cell in nb.cells
             for out in cell.get("outputs", []) if WIDGET_VIEW in out.get("data", {})]
    return views, state


def to_html(nb, path: str) -> int:
    """nbconvert's HTML of the executed notebook; returns the number of widget
    models embedded in it."""
    import nbconvert

    body, _ = nbconvert.HTMLExporter().from_notebook_node(nb)
    with open(path, "w", encoding="utf-8") as f:
        f.write(body)
    start = body.find(f'<script type="{WIDGET_STATE}">')
    if start < 0:
        return 0
    end = body.find("</script>", start)
    return len(json.loads(body[body.index(">", start) + 1:end])["state"])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _for_display(nb, path: str, data_dir: str) -> None:
    """A copy of the executed notebook to look at: code cells folded (the page
    shows the text, the widgets and their figures), signed as trusted, since
    JupyterLab draws widgets only in trusted notebooks' outputs."""
    import copy

    import nbformat
    from nbformat.sign import NotebookNotary

    shown = copy.deepcopy(nb)
    for cell in shown.cells:
        if cell.cell_type == "code":
            cell.metadata.setdefault("jupyter", {})["source_hidden"] = True
    os.makedirs(data_dir, exist_ok=True)
    NotebookNotary(data_dir=data_dir).sign(shown)
    nbformat.write(shown, path)


def screenshot(nb, folder: str, out: str, chromium: str, timeout: float = 120.0) -> dict:
    """Open the executed notebook in JupyterLab in headless Chromium and save a
    screenshot of the notebook once its widgets are drawn."""
    from playwright.sync_api import sync_playwright

    port = _free_port()
    env = dict(os.environ, JUPYTER_CONFIG_DIR=os.path.join(folder, ".jupyter"),
               JUPYTER_DATA_DIR=os.path.join(folder, ".data"),
               JUPYTERLAB_SETTINGS_DIR=os.path.join(folder, ".lab-settings"),
               JUPYTERLAB_WORKSPACES_DIR=os.path.join(folder, ".lab-workspaces"))
    executed = os.path.join(folder, "notebook.ipynb")
    _for_display(nb, executed, env["JUPYTER_DATA_DIR"])
    news = os.path.join(env["JUPYTERLAB_SETTINGS_DIR"], "@jupyterlab", "apputils-extension")
    os.makedirs(news, exist_ok=True)
    with open(os.path.join(news, "notification.jupyterlab-settings"), "w") as f:
        json.dump({"fetchNews": "false", "checkForUpdates": False}, f)
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", f"--port={port}", "--ip=127.0.0.1",
         "--IdentityProvider.token=", "--ServerApp.password=", "--ServerApp.disable_check_xsrf=True",
         "--ServerApp.allow_root=True",
         f"--ServerApp.root_dir={folder}", "--LabApp.news_url=",
         "--LabServerApp.extra_labextensions_path=[]"],
        cwd=folder, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/api", timeout=2).read()
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError("JupyterLab did not start") from None
                time.sleep(0.5)
        url = f"http://127.0.0.1:{port}/lab/tree/{os.path.basename(executed)}?reset"
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, headless=True,
                                        args=["--no-sandbox", "--disable-gpu"])
            page = browser.new_page(viewport={"width": 1400, "height": 2000})
            page.goto(url, timeout=timeout * 1000)
            # the widgets drawn from the stored state, and the figures inside them
            page.wait_for_selector(".jp-OutputArea .widget-slider", timeout=timeout * 1000)
            page.wait_for_selector(".jp-OutputArea .jupyter-widgets img", timeout=timeout * 1000)
            page.wait_for_timeout(1500)  # let the fonts and images settle
            counts = page.evaluate("""() => ({
                sliders: document.querySelectorAll('.jp-OutputArea .widget-slider').length,
                buttons: document.querySelectorAll('.jp-OutputArea .widget-button').length,
                images: document.querySelectorAll('.jp-OutputArea .jupyter-widgets img').length,
                errors: document.querySelectorAll('.jp-OutputArea-output[data-mime-type*=error]').length,
            })""")
            # the notebook's own scrolling panel holds the cells: shoot it whole
            panel = page.locator(".jp-WindowedPanel-outer, .jp-Notebook").first
            height = page.evaluate("""() => {
                const el = document.querySelector('.jp-WindowedPanel-inner')
                    || document.querySelector('.jp-Notebook');
                return el ? el.scrollHeight : 2000; }""")
            page.set_viewport_size({"width": 1400, "height": min(int(height) + 200, 6000)})
            page.wait_for_timeout(1500)
            panel.screenshot(path=out)
            browser.close()
        return counts
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--notebook", default=os.path.join(ROOT, "docs", "notebooks",
                                                       "01-sentence.ipynb"))
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "notebook-01-sentence.png"))
    ap.add_argument("--html", help="also keep the HTML export here")
    ap.add_argument("--chromium", default=shutil.which("chromium") or shutil.which("chromium-browser")
                    or "")
    args = ap.parse_args(argv)
    missing = [name for name in ("nbclient", "nbconvert", "jupyterlab", "playwright")
               if importlib.util.find_spec(name) is None]
    if missing:
        print(f"missing: {', '.join(missing)} (pip install \".[notebook,screenshot]\")")
        return 2
    if not args.chromium or not os.path.exists(args.chromium):
        print("missing: chromium (apt-get install chromium, or --chromium PATH)")
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        executed = os.path.join(tmp, os.path.basename(args.notebook))
        t0 = time.monotonic()
        nb = execute(os.path.abspath(args.notebook), executed)
        views, state = views_and_state(nb)
        lost = [v for v in views if v not in state]
        print(f"executed {os.path.basename(args.notebook)} in {time.monotonic() - t0:.1f} s: "
              f"{len(views)} widget views, {len(state)} widget models stored")
        if not views or lost:
            print(f"widget state incomplete: {len(lost)} views without a stored model")
            return 1
        html = args.html or os.path.join(tmp, "notebook.html")
        embedded = to_html(nb, html)
        print(f"HTML: {html if args.html else '(temporary)'} with {embedded} widget models embedded")
        if embedded != len(state):
            print("the HTML does not embed the whole widget state")
            return 1
        t0 = time.monotonic()
        view = os.path.join(tmp, "view")
        os.makedirs(view)
        counts = screenshot(nb, view, os.path.abspath(args.out), args.chromium)
        print(f"drawn in headless Chromium in {time.monotonic() - t0:.1f} s: {counts['sliders']} "
              f"sliders, {counts['buttons']} buttons, {counts['images']} figures, "
              f"{counts['errors']} errors")
        print(f"screenshot: {args.out}")
        return 0 if counts["errors"] == 0 and counts["images"] > 0 else 1


if __name__ == "__main__":
    sys.exit(main())

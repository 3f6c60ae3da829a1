"""Open every page of the built documentation site in headless Chromium and check
that it renders: a heading, text, and every image loaded (decoded, non-zero size).

    mkdocs build --strict
    python tools/site_check.py site [--screenshot docs/site-home.png]
                                    [--shot tutorial.zh/index.html=docs/site-tutorial-zh.png]

The site is served from a local HTTP server on 127.0.0.1 (as a reader's browser
would fetch it), each page is loaded, and after the load the page must have a
visible <h1>, some text in its article, and no <img> whose naturalWidth is 0.
--screenshot saves the home page as drawn; --shot PAGE=PNG (repeatable) any
other page, its top screen, or scrolled to PAGE#anchor.  Needs Playwright (the screenshot
extra) and Chromium (tools/install-docs-tools.sh).  Exit status 0 when every
page passes, 1 when one does not, 2 when a tool is missing.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import os
import shutil
import sys
import threading


def pages(site: str) -> list[str]:
    """Every HTML page of the site, as paths relative to it (404 and search left out)."""
    out = []
    for dp, _, fs in os.walk(site):
        for f in fs:
            rel = os.path.relpath(os.path.join(dp, f), site)
            if f.endswith(".html") and not rel.startswith(("search", "404")):
                out.append(rel.replace(os.sep, "/"))
    return sorted(out)


CHECK = """() => {
    const imgs = [...document.querySelectorAll('article img, .md-content img')];
    const h1 = document.querySelector('article h1, .md-content h1');
    const text = (document.querySelector('article') || document.body).innerText || '';
    return {
        heading: h1 ? h1.innerText.trim() : '',
        chars: text.length,
        images: imgs.length,
        broken: imgs.filter(i => !i.complete || i.naturalWidth === 0)
                    .map(i => i.getAttribute('src')),
    };
}"""


def check(site: str, chromium: str, screenshot: str | None = None,
          shots: dict | None = None) -> list[dict]:
    """One row per page: its heading, text length, images and the broken ones;
    ``shots`` (page -> PNG path) saves those pages as drawn."""
    shots = dict(shots or {})
    if screenshot:
        shots["index.html"] = screenshot
    from playwright.sync_api import sync_playwright

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):  # no line per request
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                             functools.partial(Quiet, directory=site))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}/"
    rows = []
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, headless=True,
                                        args=["--no-sandbox", "--disable-gpu"])
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            for rel in pages(site):
                page.goto(base + rel, wait_until="load", timeout=60_000)
                page.wait_for_timeout(100)
                row = page.evaluate(CHECK)
                row["page"] = rel
                rows.append(row)
                for key in [k for k in shots if k.split("#")[0] == rel]:
                    if "#" in key:  # scrolled to the anchor
                        page.goto(base + key, wait_until="load", timeout=60_000)
                        page.wait_for_timeout(300)
                    page.screenshot(path=shots.pop(key), full_page=False)
            browser.close()
    finally:
        server.shutdown()
        server.server_close()
    if shots:
        raise SystemExit(f"no such page to shoot: {', '.join(shots)}")
    return rows


def failures(rows: list[dict]) -> list[str]:
    bad = []
    for r in rows:
        if not r["heading"]:
            bad.append(f"{r['page']}: no heading")
        if r["chars"] < 200:
            bad.append(f"{r['page']}: only {r['chars']} characters of text")
        for src in r["broken"]:
            bad.append(f"{r['page']}: image {src} did not load")
    return bad


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("site", help="the built site (mkdocs build)")
    ap.add_argument("--screenshot", help="save the home page as drawn here (PNG)")
    ap.add_argument("--shot", action="append", default=[], metavar="PAGE=PNG",
                    help="save this page of the site as drawn (repeatable)")
    ap.add_argument("--chromium",
                    default=shutil.which("chromium") or shutil.which("chromium-browser"))
    args = ap.parse_args(argv)
    try:
        import playwright  # noqa: F401
    except ImportError:
        print("missing: playwright (pip install '.[screenshot]')")
        return 2
    if not args.chromium or not os.path.exists(args.chromium):
        print("missing: chromium (tools/install-docs-tools.sh, or --chromium PATH)")
        return 2
    shots = dict(item.split("=", 1) for item in args.shot)
    rows = check(args.site, args.chromium, args.screenshot, shots)
    for r in rows:
        print(f"{r['page']:<45} {r['heading'][:40]:<40} {r['chars']:>7} chars "
              f"{r['images']:>3} images {len(r['broken'])} broken")
    bad = failures(rows)
    print(f"{len(rows)} pages, {len(bad)} problems")
    for b in bad:
        print("  " + b)
    return 1 if bad or not rows else 0


if __name__ == "__main__":
    sys.exit(main())

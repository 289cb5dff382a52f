"""Check the built documentation: no broken link, and pages that render in a browser.

Usage (after ``python -m sphinx -W -b html doc doc/_build/html``)::

    python doc/check_site.py [--html doc/_build/html] [--screenshot PATH] [--guides DIR]
                             [--no-browser]

1. **Links** (always): every ``href`` and ``src`` of every built page that points
   inside the site must name an existing file, and its ``#anchor`` an existing
   ``id`` of that page. External links are listed, not fetched (the build runs
   offline).
2. **Browser** (when Debian's ``chromium`` and ``chromium-driver`` and the
   ``selenium`` package are installed): the site is served on 127.0.0.1 and
   headless Chromium opens the index, the SUML API page and a gallery page; each
   must have its title and main text, every ``<img>`` must have loaded
   (``naturalWidth > 0``), and the gallery page must show its figures. A
   screenshot of the gallery page is saved with ``--screenshot``, and of the top of
   each user guide (deep, linear, SUML) with ``--guides DIR``.

Exits non-zero on any failure.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import shutil
import sys
import threading
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

HERE = Path(__file__).resolve().parent
PAGES = {  # page -> text that must be visible in its main content
    "index.html": "skdml learns distances",
    "generated/skdml.linear.SUML.html": "n_components",
    "auto_examples/plot_zero_shot_retrieval.html": "Zero-shot retrieval",
}


class _Collector(HTMLParser):
    def __init__(self):
        super().__init__()
        self.links, self.ids = [], set()

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if "id" in attrs:
            self.ids.add(attrs["id"])
        if tag == "a" and "name" in attrs:
            self.ids.add(attrs["name"])
        for key in ("href", "src"):
            if attrs.get(key) and not (tag == "link" and attrs.get("rel") == "preload"):
                self.links.append(attrs[key])


@functools.lru_cache(maxsize=None)
def _parse(path):
    parser = _Collector()
    parser.feed(Path(path).read_text(encoding="utf-8", errors="replace"))
    return parser


def check_links(html_dir):
    """Return (broken, external): broken internal links as messages, external URLs."""
    html_dir = Path(html_dir).resolve()
    broken, external = [], set()
    for page in sorted(html_dir.rglob("*.html")):
        if page.relative_to(html_dir).parts[0] == "_static":  # theme templates, not pages
            continue
        for link in _parse(page).links:
            parts = urlsplit(link)
            if parts.scheme in ("http", "https"):
                external.add(link)
                continue
            if parts.scheme in ("mailto", "data", "javascript") or link.startswith("//"):
                continue
            target = page if not parts.path else (page.parent / unquote(parts.path)).resolve()
            if target.is_dir():
                target = target / "index.html"
            if not target.exists():
                broken.append(f"{page.relative_to(html_dir)}: {link} (no such file)")
                continue
            if parts.fragment and target.suffix == ".html":
                if unquote(parts.fragment) not in _parse(target).ids:
                    broken.append(f"{page.relative_to(html_dir)}: {link} (no such anchor)")
    return broken, sorted(external)


def browser_available():
    """Whether headless Chromium can be driven here (Debian chromium + chromedriver + selenium)."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return False
    return bool(shutil.which("chromium") or shutil.which("chromium-browser")) \
        and bool(shutil.which("chromedriver"))


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


#: The user guides whose screenshots ``--guides DIR`` saves (as ``docs_<name>_guide.png``).
GUIDES = ("deep", "linear", "suml")


def check_in_browser(html_dir, screenshot=None, pages=PAGES, guides_dir=None):
    """Serve ``html_dir`` on 127.0.0.1 and open ``pages`` in headless Chromium.

    With ``guides_dir``, also save a screenshot of the top of each guide of
    :data:`GUIDES` there.

    Returns a list of failure messages (empty when every page passed).
    """
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By

    handler = functools.partial(_QuietHandler, directory=str(html_dir))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{server.server_address[1]}/"

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or shutil.which("chromium-browser")
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1400,1000"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    driver.set_page_load_timeout(60)
    failures = []
    try:
        for page, text in pages.items():
            driver.get(base + page)
            title = driver.title
            main = driver.find_element(By.TAG_NAME, "main").text
            if "skdml" not in title:
                failures.append(f"{page}: unexpected title {title!r}")
            if text not in main:
                failures.append(f"{page}: {text!r} is not in the rendered page")
            images = driver.execute_script(
                "return Array.from(document.images).map(i => "
                "[i.currentSrc || i.src, i.complete && i.naturalWidth > 0]);")
            failures += [f"{page}: image {src} did not load" for src, ok in images if not ok]
            if page.startswith("auto_examples/") and \
                    not any("sphx_glr" in src for src, _ in images):
                failures.append(f"{page}: the gallery page shows no figure")
            print(f"  {page}: title {title!r}, {len(images)} images loaded", flush=True)
        if screenshot:
            gallery = next(p for p in pages if p.startswith("auto_examples/"))
            driver.get(base + gallery)
            driver.execute_script(
                "document.querySelector('.sphx-glr-single-img, img.sphx-glr-multi-img')"
                "?.scrollIntoView({block: 'center'});")
            Path(screenshot).parent.mkdir(parents=True, exist_ok=True)
            driver.save_screenshot(str(screenshot))
            print(f"  screenshot: {screenshot}")
        for name in GUIDES if guides_dir else ():
            driver.get(base + f"{name}.html")
            path = Path(guides_dir) / f"docs_{name}_guide.png"
            path.parent.mkdir(parents=True, exist_ok=True)
            driver.save_screenshot(str(path))
            print(f"  screenshot: {path}")
    finally:
        driver.quit()
        server.shutdown()
        server.server_close()
    return failures


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--html", default=str(HERE / "_build" / "html"))
    parser.add_argument("--screenshot", default=None)
    parser.add_argument("--guides", default=None, metavar="DIR",
                        help="also save screenshots of the user guides in DIR")
    parser.add_argument("--no-browser", action="store_true")
    args = parser.parse_args(argv)
    html = Path(args.html)
    if not (html / "index.html").exists():
        raise SystemExit(f"{html}/index.html not found: build the docs first.")
    broken, external = check_links(html)
    n_pages = len(list(html.rglob("*.html")))
    print(f"links: {n_pages} pages, {len(broken)} broken internal links, "
          f"{len(external)} external links (not fetched)")
    for message in broken:
        print("  BROKEN", message)
    failures = list(broken)
    if args.no_browser:
        pass
    elif browser_available():
        print("browser: headless Chromium on 127.0.0.1")
        failures += check_in_browser(html, screenshot=args.screenshot, guides_dir=args.guides)
    else:
        print("browser: skipped (needs Debian's chromium and chromium-driver and selenium)")
    if failures:
        print(f"FAILED: {len(failures)} problem(s)")
        for message in failures:
            print("  ", message)
        return 1
    print("site check passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

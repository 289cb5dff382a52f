"""The documentation: API reference completeness, the link checker, the built site."""

import importlib
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "doc"))
import check_site  # noqa: E402

PUBLIC_MODULES = ["skdml", "skdml.linear", "skdml.deep", "skdml.losses", "skdml.metrics",
                  "skdml.model_selection", "skdml.datasets", "skdml.plotting",
                  "skdml.retrieval", "skdml.callbacks", "skdml.exceptions"]


def test_api_reference_lists_every_public_class_and_function():
    api = (ROOT / "doc" / "api.rst").read_text()
    listed = set(re.findall(r"^   (\w+)$", api, flags=re.M))
    missing = []
    for name in PUBLIC_MODULES:
        module = importlib.import_module(name)
        for attr in module.__all__:
            obj = getattr(module, attr)
            if callable(obj) and not attr.startswith("_") and attr not in listed:
                missing.append(f"{name}.{attr}")
    assert not missing, f"not in doc/api.rst: {missing}"


def _toctree_entries(page):
    """The documents a Markdown page's ``{toctree}`` blocks list."""
    blocks = re.findall(r"^```\{toctree\}\n(.*?)^```", page.read_text(), flags=re.M | re.S)
    return {line.strip() for block in blocks for line in block.splitlines()
            if line.strip() and not line.lstrip().startswith(":")}


def test_every_user_guide_page_is_in_a_toctree():
    doc = ROOT / "doc"
    listed = set().union(*(_toctree_entries(page) for page in doc.rglob("*.md")
                           if "_build" not in page.parts))
    for page in doc.rglob("*.md"):
        if page.stem != "index" and not {"_build", "auto_examples"} & set(page.parts):
            assert page.relative_to(doc).with_suffix("").as_posix() in listed, page.name


def test_top_level_navigation_is_one_row_of_sections():
    top = _toctree_entries(ROOT / "doc" / "index.md")
    assert top == {"install", "auto_examples/index", "user_guide", "api", "benchmarks",
                   "changelog"}


def test_link_checker_finds_missing_files_and_anchors(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "index.html").write_text(
        '<a href="sub/page.html#here">ok</a><a href="sub/page.html#gone">bad anchor</a>'
        '<img src="missing.png"><a href="https://example.org">external</a><p id="top"></p>'
        '<a href="#top">self</a>')
    (tmp_path / "sub" / "page.html").write_text('<h1 id="here">x</h1><a href="../index.html">')
    broken, external = check_site.check_links(tmp_path)
    assert sorted(broken) == ["index.html: missing.png (no such file)",
                              "index.html: sub/page.html#gone (no such anchor)"]
    assert external == ["https://example.org"]


BUILT = ROOT / "doc" / "_build" / "html"


@pytest.mark.browser
@pytest.mark.skipif(not (BUILT / "auto_examples" / "plot_zero_shot_retrieval.html").exists(),
                    reason="the docs are not built (python -m sphinx -W -b html doc "
                           "doc/_build/html); .ci/run checks the site after building it")
@pytest.mark.skipif(not check_site.browser_available(),
                    reason="needs Debian's chromium and chromium-driver and selenium")
def test_built_site_renders_in_headless_chromium(tmp_path):
    broken, _ = check_site.check_links(BUILT)
    assert broken == []
    assert check_site.check_in_browser(BUILT, screenshot=tmp_path / "shot.png") == []
    assert (tmp_path / "shot.png").stat().st_size > 10_000

"""Sphinx configuration for skdml's documentation.

Build with ``python -m sphinx -W -b html doc doc/_build/html`` (warnings are
errors). The user guide is the Markdown pages of this folder (myst-parser), the
API reference is generated from the docstrings (autosummary + numpydoc) and the
gallery is ``examples/`` run by sphinx-gallery at build time.
"""

import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "doc"))  # _gallery_order
os.environ.setdefault("SKDML_NUM_THREADS", "1")

import skdml  # noqa: E402

project = "skdml"
author = "the skdml developers"
copyright = "2026, the skdml developers"
version = release = skdml.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.intersphinx",
    "sphinx.ext.mathjax",
    "numpydoc",
    "myst_parser",
    "sphinx_gallery.gen_gallery",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
templates_path = ["_templates"]
exclude_patterns = ["_build", "auto_examples/*.ipynb", "auto_examples/*.py",
                    "auto_examples/*.zip", "auto_examples/*.md5", "**/*.codeobj.json"]
root_doc = "index"

# -- API reference --------------------------------------------------------------
autosummary_generate = True
autosummary_imported_members = False
autodoc_default_options = {"members": True}
autodoc_typehints = "none"
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_attributes_as_param_list = True
numpydoc_xref_param_type = False
add_module_names = False


def _plain_foreign_roles(app, what, name, obj, options, lines):
    """Turn scikit-learn's and torch's cross-reference roles into plain text.

    Estimator pages list inherited methods (``get_params``, ``set_output``...);
    their docstrings point into scikit-learn's own site (``:ref:``, ``:term:``),
    whose targets do not exist here. Only docstrings written outside skdml change.
    """
    module = getattr(obj, "__module__", None) or ""
    if module.startswith(("sklearn", "torch")):
        lines[:] = [_FOREIGN_ROLE.sub(lambda m: m.group(1).strip(), line) for line in lines]


_FOREIGN_ROLE = re.compile(r":(?:ref|term|doc|meth|func|class|attr|mod|obj):`~?([^`<]*?)\s*(?:<[^>]*>)?`")


def setup(app):
    app.connect("autodoc-process-docstring", _plain_foreign_roles, priority=100)
    app.add_css_file("skdml.css")


# -- Markdown pages ---------------------------------------------------------------
myst_enable_extensions = ["dollarmath", "colon_fence", "deflist"]
myst_heading_anchors = 3

# -- Gallery ------------------------------------------------------------------------
sphinx_gallery_conf = {
    "examples_dirs": str(ROOT / "examples"),
    "gallery_dirs": "auto_examples",
    "filename_pattern": r"plot_",
    "ignore_pattern": r"__init__\.py",
    "download_all_examples": False,
    "remove_config_comments": True,
    "within_subsection_order": "_gallery_order.FlagshipFirst",
    "backreferences_dir": "generated/backreferences",
    "doc_module": ("skdml",),
    "matplotlib_animations": False,
    "image_scrapers": ("matplotlib",),
    "show_memory": False,
}

# -- Cross-references -------------------------------------------------------------
intersphinx_mapping = {}  # the build must work offline: no inventories are fetched
nitpicky = False

# -- HTML -------------------------------------------------------------------------
html_theme = "pydata_sphinx_theme"
html_title = f"skdml {release}"

html_theme_options = {
    "navbar_align": "left",
    "header_links_before_dropdown": 6,  # the top-level sections fit on one row
    "show_toc_level": 2,
    "navigation_with_keys": False,
}
html_static_path = ["_static"]
html_sidebars = {  # pages without sub-pages get no empty section sidebar
    "index": [], "install": [], "changelog": [],
}
html_show_sourcelink = False

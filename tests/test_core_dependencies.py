"""Every package skdml imports is a declared core dependency, or an optional one by design.

A feature that imports an undeclared package works in the developers' environment and
fails with ``ModuleNotFoundError`` after ``pip install skdml`` (``verbose=1`` needed tqdm).
CI also installs the core package alone in a fresh virtual environment and fits every
estimator with ``verbose=1`` (``.ci/core_install_check.py``).
"""

import ast
import re
import sys
from pathlib import Path

import pytest

try:  # Python >= 3.11
    import tomllib
except ImportError:  # pragma: no cover
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parents[1]

#: import name -> distribution name, where they differ
DISTRIBUTION = {"sklearn": "scikit-learn", "PIL": "pillow", "yaml": "pyyaml"}

#: optional packages, each imported only where its feature is used, with a clear message
#: when missing: plots, Dask clusters, the faiss and ONNX back ends, and the versions report
OPTIONAL = {"matplotlib", "dask", "distributed", "faiss", "onnx", "onnxruntime",
            "pytorch_metric_learning", "tomli"}


def _imported_top_level_names():
    names = {}
    for path in (ROOT / "skdml").rglob("*.py"):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found = [node.module]
            else:
                continue
            for name in found:
                names.setdefault(name.split(".")[0], set()).add(
                    str(path.relative_to(ROOT)))
    return names


def _core_dependencies():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return {re.split(r"[<>=!~\[ ;]", spec, maxsplit=1)[0].strip().lower()
            for spec in project["dependencies"]}


def test_every_import_is_a_core_or_optional_dependency():
    stdlib = set(sys.stdlib_module_names)
    core = _core_dependencies()
    missing = {
        name: sorted(files)
        for name, files in _imported_top_level_names().items()
        if name not in stdlib and name != "skdml" and name not in OPTIONAL
        and DISTRIBUTION.get(name, name).lower() not in core
    }
    assert not missing, (
        f"imported but not declared in pyproject's [project] dependencies: {missing}")


@pytest.mark.parametrize("name", ["tqdm", "threadpoolctl", "pillow"])
def test_features_of_the_core_install_are_declared(name):
    # verbose=1 (tqdm), the thread policy (threadpoolctl) and load_omniglot (Pillow)
    assert name in _core_dependencies()


def test_the_install_pages_name_every_core_dependency():
    # cloudpickle became a core dependency without reaching either list (audit 19)
    readme = (ROOT / "README.md").read_text().split("## Dependencies", 1)[1].split("\n## ")[0]
    install = (ROOT / "doc" / "install.md").read_text().split("The core install", 1)[1]
    install = install.split("add:", 1)[0]
    for page, text in (("README.md", readme), ("doc/install.md", install)):
        unnamed = sorted(name for name in _core_dependencies() if name not in text.lower())
        assert not unnamed, f"{page} does not name the core dependencies {unnamed}"


def test_the_suite_starts_without_pytest_xdist():
    # the worker-count hook of tests/conftest.py is optional: pytest rejected it as an
    # unknown hook where the plugin is absent
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:xdist", "-q",
                           "--collect-only", "tests/test_constraints.py"],
                          cwd=root, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]

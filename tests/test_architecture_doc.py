"""doc/architecture.md matches the code: every module it names exists, every module of
skdml/deep and skdml/_training is on it, and every test file it names exists."""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "doc" / "architecture.md").read_text()


def test_every_deep_and_training_module_is_on_the_page():
    for package in ("deep", "_training"):
        for module in sorted((ROOT / "skdml" / package).glob("_*.py")):
            if module.name != "__init__.py":
                assert f"`{module.name}`" in PAGE or f"{package}/{module.name}" in PAGE or \
                    f"{module.stem}`" in PAGE, f"skdml/{package}/{module.name} is not described"


def test_every_module_and_test_file_named_exists():
    named = set(re.findall(r"`((?:deep|_training|_utils|linear|losses)/[\w/]+\.py)", PAGE))
    assert named, "the page names no module"
    missing = [m for m in named if not (ROOT / "skdml" / m).exists()]
    assert not missing, f"named on the page but not in skdml/: {missing}"
    tests = set(re.findall(r"`(tests/[\w/]+\.py)", PAGE))
    assert len(tests) > 10
    missing = [t for t in tests if not (ROOT / t).exists()]
    assert not missing, f"named on the page but not found: {missing}"
    assert "_fitting" not in PAGE
    assert "_fitting" not in (ROOT / "doc" / "robustness.md").read_text()


def test_the_picture_of_a_fit_is_committed_and_names_existing_modules():
    assert (ROOT / "doc" / "_static" / "fit_flow.png").stat().st_size > 10_000
    assert "_static/fit_flow.png" in PAGE
    sys.path.insert(0, str(ROOT / "doc"))
    try:
        import make_fit_flow
    finally:
        sys.path.remove(str(ROOT / "doc"))
    for _, module, _, _ in make_fit_flow.STAGES:
        assert (ROOT / "skdml" / module).exists(), module

"""The README's quick example runs as written (on the shared copy of USPS)."""

import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "datasets"


@pytest.mark.slow
@pytest.mark.skipif(not (SHARED / "usps_16x16.mat").exists(),
                    reason="needs ../shared/datasets/usps_16x16.mat beside the checkout")
def test_readme_quick_example_runs(monkeypatch, capsys):
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert blocks, "the README has no python example"
    monkeypatch.setitem(os.environ, "SKDML_DATA", str(SHARED))
    namespace = {}
    exec(compile(blocks[0], "README.md", "exec"), namespace)  # noqa: S102 - our own README
    out = capsys.readouterr().out.splitlines()
    recalls = eval(out[0])  # noqa: S307 - printed dict {k: recall}
    assert set(recalls) == {1, 2, 4, 8} and 0.9 < recalls[1] <= 1.0
    assert 0.9 < float(out[1]) <= 1.0  # k-NN accuracy of the ECAML pipeline
    search = namespace["search"]
    assert search.cv.n_splits == 3
    assert search.best_params_["regularizer_weight"] in (0.0, 0.1)  # the search is fitted, not only built
    assert out[2].startswith(f"{search.best_params_!r} ")
    assert 0.5 < search.best_score_ <= 1.0

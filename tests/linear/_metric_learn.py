"""Run a snippet of metric-learn in its own virtual environment (benchmarks/.venv-metric-learn).

metric-learn 0.7.0 fails on scikit-learn >= 1.8, so it runs in the venv that
``benchmarks/compare_linear.py`` (``ensure_venv``) builds on scikit-learn 1.7. Tests
using :func:`run_metric_learn` are skipped where the venv is absent (CI).
"""

import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest

VENV_PYTHON = Path(__file__).resolve().parents[2] / "benchmarks" / ".venv-metric-learn" / \
    "bin" / "python"

needs_metric_learn = pytest.mark.skipif(not VENV_PYTHON.exists(),
                                        reason="no metric-learn venv (ensure_venv in "
                                               "benchmarks/compare_linear.py builds it)")

_PRELUDE = """
import sys, warnings
import numpy as np
warnings.simplefilter("ignore")
import metric_learn
inp = dict(np.load(sys.argv[1]))
out = {}
"""


def run_metric_learn(code, **arrays):
    """Run ``code`` (which reads ``inp`` and fills ``out``) under metric-learn; return ``out``."""
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp) / "in.npz", Path(tmp) / "out.npz"
        np.savez(src, **arrays)
        script = _PRELUDE + code + f"\nnp.savez({str(dst)!r}, **out)\n"
        done = subprocess.run([str(VENV_PYTHON), "-c", script, str(src)], capture_output=True,
                              text=True, timeout=120, check=False)
        if done.returncode:
            raise RuntimeError(f"metric-learn failed:\n{done.stderr[-2000:]}")
        return dict(np.load(dst))

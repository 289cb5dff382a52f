"""Run inside a fresh virtual environment holding only ``pip install .`` (and its torch).

Every estimator fits with ``verbose=1`` (the progress bar needs tqdm, a core
dependency), transforms, and the documented loaders and scorers import and run
on small data, so a feature that needs an undeclared package fails here.
"""

import io
import re
import sys
import warnings
import zipfile
from contextlib import redirect_stderr

import numpy as np
from sklearn.datasets import load_digits

import skdml
from skdml import ECAML, JRD, SUML, DeepMetricTransformer
from skdml.deep import make_deml
from skdml.metrics import map_at_r, recall_at_k

X, y = load_digits(return_X_y=True)
X, y = X[y < 4][:200], y[y < 4][:200]
images = X.reshape(-1, 1, 8, 8).astype(np.float32) / 16.0
estimators = {
    "SUML": (SUML(n_components=8, max_iter=3, verbose=1, random_state=0), X, None),
    "ECAML": (ECAML(n_components=8, max_iter=2, verbose=1, random_state=0), X, y),
    "JRD": (JRD(n_components=8, max_iter=2, verbose=1, random_state=0), X, y),
    "DeepMetricTransformer": (DeepMetricTransformer(n_components=8, max_iter=1, verbose=1,
                                                    device="cpu", random_state=0), images, y),
    "DeML": (make_deml(n_components=8, max_iter=1, verbose=1, device="cpu",
                       random_state=0), images, y),
}
for name, (est, data, labels) in estimators.items():
    err = io.StringIO()
    with redirect_stderr(err), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # short fits: a ConvergenceWarning is expected
        Z = est.fit(data, labels).transform(data)
    assert np.isfinite(Z).all(), name
    assert re.search(r"\d+/\d+ \[", err.getvalue()), \
        f"{name}: verbose=1 showed no progress bar:\n{err.getvalue()[:500]}"
    print(f"{name:>22}: fitted with verbose=1, embedding {Z.shape}, R@1 "
          f"{recall_at_k(Z, labels if labels is not None else y, k=1):.3f}")
print(f"{'map_at_r':>22}: {map_at_r(X, y):.3f}")

# the Omniglot reader decodes PNGs (Pillow): a tiny zip of the real layout
from PIL import Image  # noqa: E402  (a core dependency since the Omniglot loader needs it)

buf = io.BytesIO()
with zipfile.ZipFile(buf, "w") as zf:
    png = io.BytesIO()
    Image.new("1", (105, 105), 1).save(png, format="PNG")
    zf.writestr("images_background_small1/Alpha/character01/0101_01.png", png.getvalue())
print(f"{'Pillow':>22}: PNG written and zipped ({len(buf.getvalue())} bytes)")
print(f"skdml {skdml.__version__} core install: every estimator fits with verbose=1")
sys.exit(0)

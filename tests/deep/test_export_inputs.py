"""skdml/deep/_export.py on awkward inputs (issue 37): grey images without a channel axis,
a linear learner passed to export_embedding, a path under a file."""

import numpy as np
import pytest
import torch
from sklearn.datasets import load_digits

from skdml import ECAML, DeepMetricTransformer
from skdml.deep import export_embedding


@pytest.fixture(scope="module")
def digits():
    X, y = load_digits(return_X_y=True)
    keep = y < 5
    return (X[keep][:200] / 16.0).astype(np.float32), y[keep][:200]


def test_torchscript_export_takes_grey_images_without_a_channel_axis(digits, tmp_path):
    X, y = digits
    images = X.reshape(-1, 8, 8)
    net = DeepMetricTransformer(n_components=8, max_iter=1, device="cpu",
                                random_state=0).fit(images, y)
    model = torch.jit.load(export_embedding(net, tmp_path / "net.pt"))
    expected = net.transform(images[:5])
    for batch in (images[:5], images[:5, None]):  # (n, H, W) as transform takes, and (n, 1, H, W)
        np.testing.assert_allclose(model(torch.from_numpy(batch)).numpy(), expected, atol=1e-5)


def test_export_of_a_linear_learner_says_what_it_supports(digits, tmp_path):
    X, y = digits
    est = ECAML(n_components=4, max_iter=1, random_state=0).fit(X, y)
    with pytest.raises(TypeError, match="ECAML is a linear learner.*components_"):
        export_embedding(est, tmp_path / "e.pt")


def test_export_under_a_file_names_the_file(digits, tmp_path):
    X, y = digits
    net = DeepMetricTransformer(n_components=4, max_iter=1, device="cpu", random_state=0).fit(X, y)
    (tmp_path / "blocker").write_text("x")
    with pytest.raises(NotADirectoryError, match="blocker' is a file"):
        export_embedding(net, tmp_path / "blocker" / "net.pt")

"""Tests of skdml.deep.export_embedding: exported models reproduce ``transform``."""

import importlib.util
import os
import warnings

import numpy as np
import pytest
import torch
from sklearn.exceptions import NotFittedError
from sklearn.utils._param_validation import InvalidParameterError
from torch import nn

from skdml.deep import DeepMetricTransformer, export_embedding
import skdml.deep._export as export_module

HAS_ONNX = importlib.util.find_spec("onnx") is not None
HAS_ONNXRUNTIME = importlib.util.find_spec("onnxruntime") is not None


def _fit(X, y, **params):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # one epoch: a ConvergenceWarning
        return DeepMetricTransformer(n_components=4, max_iter=1, device="cpu", random_state=0,
                                     **params).fit(X, y)


@pytest.fixture(scope="module")
def fitted():
    """A vector model (MLP backbone) and a grey-image model (ConvNet, resized 8x8 -> 32x32)."""
    rng = np.random.RandomState(0)
    y = np.repeat(np.arange(4), 8)
    vectors = (rng.randn(32, 6) * 5 + 20 + 3 * y[:, None]).astype(np.float32)
    images = (rng.rand(32, 8, 8) * 255).astype(np.float32)
    held_out = {"vector": (rng.randn(7, 6) * 5 + 20).astype(np.float32),
                "image": (rng.rand(7, 8, 8) * 255).astype(np.float32)}
    return {"vector": (_fit(vectors, y), held_out["vector"]),
            "image": (_fit(images, y), held_out["image"])}


def _model_input(X):
    x = torch.from_numpy(X)
    return x.unsqueeze(1) if x.ndim == 3 else x  # grey images: (n, 1, H, W)


@pytest.mark.parametrize("kind", ["vector", "image"])
def test_torchscript_matches_transform(fitted, kind, tmp_path):
    est, X_new = fitted[kind]
    assert type(est.module_.backbone).__name__ == ("MLP" if kind == "vector" else "ConvNet")
    path = export_embedding(est, tmp_path / "embedding.pt")
    assert path == os.fspath(tmp_path / "embedding.pt")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # recent torch on torch.jit
        model = torch.jit.load(path)
    with torch.no_grad():
        Z = model(_model_input(X_new)).numpy()
        Z1 = model(_model_input(X_new[:1])).numpy()  # any batch size
    expected = est.transform(X_new)
    assert Z.shape == (7, 4) and Z.dtype == np.float32
    np.testing.assert_allclose(Z, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(Z1, expected[:1], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(Z, axis=1), 1.0, rtol=1e-5)  # normalize=True
    # the plain network cannot be traced as it is: forward returns (emb, aux, features)
    with pytest.raises(RuntimeError), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.jit.trace(est.module_, _model_input(X_new))


@pytest.mark.parametrize("kind", ["vector", "image"])
def test_exported_program_matches_transform(fitted, kind, tmp_path):
    est, X_new = fitted[kind]
    path = export_embedding(est, tmp_path / "embedding.pt2", format="exported_program",
                            example=X_new[:3])
    model = torch.export.load(path).module()
    with torch.no_grad():
        Z = model(_model_input(X_new)).numpy()
    np.testing.assert_allclose(Z, est.transform(X_new), rtol=1e-5, atol=1e-6)


@pytest.mark.skipif(not (HAS_ONNX and HAS_ONNXRUNTIME), reason="onnx/onnxruntime not installed")
@pytest.mark.parametrize("kind", ["vector", "image"])
def test_onnx_matches_transform(fitted, kind, tmp_path):
    import onnxruntime

    est, X_new = fitted[kind]
    path = export_embedding(est, tmp_path / "embedding.onnx", format="onnx")
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    Z = session.run(None, {"input": _model_input(X_new).numpy()})[0]
    np.testing.assert_allclose(Z, est.transform(X_new), rtol=1e-4, atol=1e-5)


@pytest.mark.skipif(HAS_ONNX, reason="onnx is installed")
def test_onnx_without_onnx_says_what_to_install(fitted, tmp_path):
    with pytest.raises(ImportError, match="pip install onnx"):
        export_embedding(fitted["vector"][0], tmp_path / "embedding.onnx", format="onnx")
    assert not (tmp_path / "embedding.onnx").exists()


def test_refuses_to_overwrite_and_bad_inputs(fitted, tmp_path):
    est, X_new = fitted["vector"]
    path = tmp_path / "embedding.pt"
    path.write_bytes(b"keep me")
    with pytest.raises(FileExistsError, match="overwrite=True"):
        export_embedding(est, path)
    assert path.read_bytes() == b"keep me"
    export_embedding(est, path, overwrite=True)
    assert path.read_bytes() != b"keep me"
    with pytest.raises(IsADirectoryError):
        export_embedding(est, tmp_path)
    with pytest.raises(NotFittedError):
        export_embedding(DeepMetricTransformer(), tmp_path / "unfitted.pt")
    with pytest.raises(ValueError, match=r"example has shape \(3, 5\).*\(n, 6\)"):
        export_embedding(est, tmp_path / "other.pt", example=X_new[:3, :5])
    bad = X_new[:3].copy()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        export_embedding(est, tmp_path / "other.pt", example=bad)
    with pytest.raises(InvalidParameterError, match="format"):
        export_embedding(est, tmp_path / "other.pt", format="tflite")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["embedding.pt"]


class _BatchBaked(nn.Module):
    """Works eagerly, but bakes the batch size into a traced graph (``int(x.shape[0])``)."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(6, 5)

    def forward(self, x):
        return self.linear(x) + torch.zeros(int(x.shape[0]), 1)


@pytest.mark.parametrize("format", ["torchscript", "exported_program"])
def test_untraceable_backbone_is_refused_and_nothing_written(format, tmp_path):
    rng = np.random.RandomState(0)
    y = np.repeat(np.arange(4), 8)
    est = _fit(rng.randn(32, 6).astype(np.float32) + y[:, None], y, backbone=_BatchBaked())
    with pytest.raises(ValueError, match="traceable|trace"):
        export_embedding(est, tmp_path / "embedding.pt", format=format)
    assert not (tmp_path / "embedding.pt").exists()


def test_a_hooked_feature_extractor_is_pointed_to_torchscript(tmp_path):
    # torch.export cannot follow FeatureExtractor(layer=...)'s hook; the error blamed
    # "Python control flow on tensor values"
    from skdml.deep.backbones import FeatureExtractor

    rng = np.random.RandomState(0)
    y = np.repeat(np.arange(4), 10)
    X = (rng.rand(40, 1, 8, 8) + y[:, None, None, None]).astype(np.float32)
    net = nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 36, 10))
    est = DeepMetricTransformer(FeatureExtractor(net, layer="1"), n_components=4, max_iter=1,
                                device="cpu", random_state=0).fit(X, y)
    with pytest.raises(ValueError, match="FeatureExtractor.*format='torchscript'"):
        export_embedding(est, tmp_path / "m.pt2", format="exported_program")
    export_embedding(est, tmp_path / "m.pt", format="torchscript")  # works


def test_a_single_vector_example_is_named_as_given(tmp_path):
    # the grey-image axis was added to a vector example: "example has shape (6, 1)"
    rng = np.random.RandomState(0)
    y = np.repeat(np.arange(4), 10)
    X = (rng.randn(40, 6) + y[:, None]).astype(np.float32)
    est = DeepMetricTransformer(n_components=3, max_iter=1, device="cpu", random_state=0).fit(X, y)
    with pytest.raises(ValueError, match=r"example has shape \(6,\)"):
        export_embedding(est, tmp_path / "m.pt", example=X[0])


def test_a_file_created_during_the_export_is_not_replaced(tmp_path, monkeypatch):
    rng = np.random.RandomState(0)
    y = np.repeat(np.arange(4), 8)
    X = (rng.randn(32, 6) + 3 * y[:, None]).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = DeepMetricTransformer(n_components=4, max_iter=1, device="cpu",
                                    random_state=0).fit(X, y)
    path = tmp_path / "emb.pt"
    real = export_module.check_output_file

    def check_then_someone_writes(p, **kw):
        out = real(p, **kw)
        path.write_bytes(b"someone else's work")  # created after the check, before the write
        return out

    monkeypatch.setattr(export_module, "check_output_file", check_then_someone_writes)
    with pytest.raises(FileExistsError):
        export_embedding(est, path, overwrite=False)
    assert path.read_bytes() == b"someone else's work"

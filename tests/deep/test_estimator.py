"""skdml/deep/_estimator.py: DeepMetricTransformer as a scikit-learn estimator (fit, transform,
backbones, pickling, Pipeline and GridSearchCV, devices). CPU; GPU-only paths are mocked
or gpu-marked. The tests of each other module live in the file named after it."""

from __future__ import annotations

import functools
import pickle

import numpy as np
import pytest
import torch
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV
from sklearn.neighbors import KNeighborsClassifier
from sklearn.pipeline import make_pipeline
from torch import nn

from skdml.deep import MLP, ConvNet, SmallCNN, SmallResNet
from skdml.deep._network import build_optimizer
from skdml.losses import JRSRegularizer
from skdml._utils import cuda_syncs
from skdml.metrics import recall_at_k, recall_at_k_scorer
from skdml.model_selection import ClassDisjointSplit

from _deep_helpers import (assert_same_params, fast, make, params_of, tiny_cnn, tiny_mlp,
                           zero_shot_vectors)

pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")

CUDA = torch.cuda.is_available()
gpu = pytest.mark.skipif(not CUDA, reason="needs a CUDA device")


# ----------------------------------------------------------------- scikit-learn API


def test_fit_transform_vectors(blobs):
    X, y = blobs
    est = make()
    Z = est.fit(X, y).transform(X)
    assert Z.shape == (len(X), 4) and Z.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(Z, axis=1), 1.0, rtol=1e-5)
    assert est.n_iter_ == 2 == len(est.history_)
    assert est.input_shape_ == (10,) and est.n_features_in_ == 10
    assert not est.module_.training
    assert list(est.get_feature_names_out()) == [f"deepmetrictransformer{i}" for i in range(4)]
    Z2 = make(normalize=False).fit_transform(X, y)
    assert not np.allclose(np.linalg.norm(Z2, axis=1), 1.0)


def test_set_output_pandas(blobs):
    pd = pytest.importorskip("pandas")
    X, y = blobs
    out = make(max_iter=1).set_output(transform="pandas").fit(X, y).transform(X)
    assert isinstance(out, pd.DataFrame) and out.shape == (len(X), 4)


@pytest.mark.parametrize("shape", [(1, 8, 8), (8, 8), (3, 6, 6)])
def test_images(shape):
    rng = np.random.RandomState(0)
    y = np.repeat(np.arange(3), 8)
    X = rng.rand(len(y), *shape).astype(np.float32)
    est = make(backbone=None, max_iter=1)
    Z = est.fit(X, y).transform(X)
    assert Z.shape == (len(y), 4) and Z.dtype == np.float32
    assert isinstance(est.module_.backbone, ConvNet)
    assert est.input_shape_ == ((1,) + shape if len(shape) == 2 else shape)
    with pytest.raises(ValueError, match="shape|features"):
        est.transform(rng.rand(2, *shape[:-2], 5, 5))


def test_images_for_a_model_of_vectors_name_the_sample_shapes(blobs):
    X, y = blobs  # 10 features
    est = make(backbone=None, max_iter=1).fit(X, y)
    for images in (X.reshape(len(X), 1, 2, 5), X.reshape(len(X), 1, 2, 5).tolist()):
        with pytest.raises(ValueError, match=r"samples of shape \(1, 2, 5\).*on \(10,\)"):
            est.transform(images)  # not "X has 1 features"


def test_default_backbone_vectors_is_mlp(blobs):
    X, y = blobs
    est = make(backbone=None, max_iter=1).fit(X, y)
    assert isinstance(est.module_.backbone, MLP)


def test_backbone_instance_is_copied_not_mutated(blobs):
    X, y = blobs
    backbone = MLP(10, hidden=(8,))
    before = {k: v.clone() for k, v in backbone.state_dict().items()}
    est = make(backbone=backbone).fit(X, y)
    assert est.module_.backbone is not backbone
    assert_same_params(before, backbone.state_dict())
    assert not torch.equal(est.module_.backbone.blocks[0][0].weight, backbone.blocks[0][0].weight)
    # refit starts again from the same initial weights: same result
    assert_same_params(params_of(est), params_of(clone(est).fit(X, y)))


def test_backbone_builder_receives_input_shape(blobs):
    X, y = blobs
    seen = []

    def builder(shape):
        seen.append(shape)
        return nn.Sequential(nn.Flatten(), nn.Linear(int(np.prod(shape)), 5))

    est = make(backbone=builder).fit(X, y)
    assert seen == [(10,)] and est.module_.head.in_features == 5
    with pytest.raises(TypeError, match="not a torch.nn.Module"):
        make(backbone=lambda shape: "nope").fit(X, y)


# ----------------------------------------------------------------- losses and regularisers


def test_amsoftmax_proxies_trained_with_head_lr(blobs):
    X, y = blobs
    est = make(loss="amsoftmax", learning_rate=1e-3,
               optimizer_params={"head_lr_mult": 7.0, "lr_schedule": "constant"}).fit(X, y)
    groups = est._resume_state["optimizer"]["param_groups"]
    lrs = sorted(g["lr"] for g in groups)
    assert lrs == pytest.approx([1e-3, 7e-3])
    n_backbone = sum(1 for n, _ in est.module_.named_parameters() if n.startswith("backbone."))
    small = [g for g in groups if g["lr"] == pytest.approx(1e-3)][0]
    assert len(small["params"]) == n_backbone  # head + proxies form the other group


@pytest.mark.parametrize("loss", ["binomial", "amsoftmax"])
def test_jrs_hooks_capture_named_layers(blobs, loss, monkeypatch):
    X, y = blobs
    shapes = []
    original = JRSRegularizer.forward

    def spy(self, representations, labels):
        shapes.append([tuple(r.shape) for r in representations])
        return original(self, representations, labels)

    monkeypatch.setattr(JRSRegularizer, "forward", spy)
    est = make(loss=loss, regularizer=JRSRegularizer(layers=["blocks.?"]), regularizer_weight=0.5,
               n_classes_per_batch=3, n_samples_per_class=2)
    est.fit(X, y)
    expected = [(6, 16), (6, 8), (6, 4)] + ([(6, 6)] if loss == "amsoftmax" else [])
    assert shapes and all(s == expected for s in shapes)
    for module in est.module_.modules():
        assert not module._forward_hooks  # hooks removed after fit
    assert "regularizer" in est.history_[0]
    pickle.dumps(est)
    # default joint representation: pooled backbone output + embedding
    shapes.clear()
    make(regularizer="jrs", regularizer_weight=0.5, n_classes_per_batch=3,
         n_samples_per_class=2, max_iter=1).fit(X, y)
    assert shapes[0] == [(6, 8), (6, 4)]


def test_jrs_layer_pattern_must_match(blobs):
    X, y = blobs
    with pytest.raises(ValueError, match="matches no module"):
        make(regularizer=JRSRegularizer(layers="nothing*"), regularizer_weight=0.1).fit(X, y)


class AuxBackbone(nn.Module):
    def __init__(self, aux, net):
        super().__init__()
        self.net = net  # shared initial weights (deep-copied by fit)
        self.aux = aux

    def forward(self, x):
        feats = self.net(x)
        if self.aux is None:
            return feats
        if self.aux == "tensor":
            return feats, torch.tensor(0.25)
        return feats, {"const": torch.tensor(0.5), "zero": 0.0 * feats.sum()}


def test_aux_losses_are_added_and_logged(blobs):
    X, y = blobs
    net = MLP(10, hidden=(8,))
    plain = make(backbone=AuxBackbone(None, net)).fit(X, y)
    with_aux = make(backbone=AuxBackbone("dict", net)).fit(X, y)
    as_tensor = make(backbone=AuxBackbone("tensor", net)).fit(X, y)
    for a, b, c in zip(plain.history_, with_aux.history_, as_tensor.history_):
        assert b["metric_loss"] == pytest.approx(a["metric_loss"], rel=1e-6)
        assert b["loss"] - a["loss"] == pytest.approx(0.5, abs=1e-5)
        assert b["aux_const"] == pytest.approx(0.5) and b["aux_zero"] == 0.0
        assert c["aux"] == pytest.approx(0.25)
        assert c["loss"] - a["loss"] == pytest.approx(0.25, abs=1e-5)
    np.testing.assert_allclose(with_aux.transform(X), plain.transform(X), atol=1e-5)


# ----------------------------------------------------------------- determinism, resume, stop


# ----------------------------------------------------------------- pickling, cloning, search
def test_pickle_and_clone(blobs):
    X, y = blobs
    est = make(loss="amsoftmax").fit(X, y)
    Z = est.transform(X)
    back = pickle.loads(pickle.dumps(est))
    np.testing.assert_array_equal(back.transform(X), Z)
    assert back.device_ == torch.device("cpu")
    cl = clone(est)
    assert not hasattr(cl, "module_") and cl.get_params()["loss"] == "amsoftmax"


def test_pickle_from_before_the_resize_layer_still_transforms(blobs):
    """A 0.1 pickle's ``EmbeddingNet`` has no ``resize`` sub-module; it loads as ``None``."""
    X, y = blobs
    est = make().fit(X, y)
    Z = est.transform(X)
    del est.module_.resize  # the network as skdml 0.1 pickled it
    with pytest.raises(AttributeError):
        est.module_.resize
    back = pickle.loads(pickle.dumps(est))
    assert back.module_.resize is None
    np.testing.assert_array_equal(back.transform(X), Z)


def test_pickle_without_fitted_transform_settings_still_transforms(blobs):
    """A pickle from before ``n_components_`` and the fitted transform settings existed."""
    X, y = blobs
    est = make().fit(X, y)
    Z = est.transform(X)
    del est.n_components_, est._embedding  # the fitted state as an earlier skdml kept it
    back = pickle.loads(pickle.dumps(est))
    np.testing.assert_array_equal(back.transform(X), Z)
    assert back.n_components_ == 4 and len(back.get_feature_names_out()) == 4


def test_model_fitted_on_gpu_unpickles_on_cpu(blobs, monkeypatch):
    """Mocked: a model recorded as fitted on cuda unpickles on a CPU-only machine."""
    X, y = blobs
    est = make().fit(X, y)
    Z = est.transform(X)
    est.device_ = torch.device("cuda", 0)
    blob = pickle.dumps(est)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    back = pickle.loads(blob)
    assert back.device_ == torch.device("cpu")
    assert all(p.device.type == "cpu" for p in back.module_.parameters())
    np.testing.assert_array_equal(back.transform(X), Z)


def test_pipeline_and_grid_search(blobs):
    X, y = blobs
    pipe = make_pipeline(make(max_iter=1), KNeighborsClassifier(1)).fit(X, y)
    assert pipe.score(X, y) > 0.5
    search = GridSearchCV(make(max_iter=1), {"regularizer_weight": [0.0, 0.1]},
                          cv=ClassDisjointSplit(2, test_size=0.5, random_state=0),
                          scoring=recall_at_k_scorer(1)).fit(X, y)
    assert set(search.cv_results_["param_regularizer_weight"]) == {0.0, 0.1}
    search.set_params(estimator__regularizer="ec")
    assert np.isfinite(search.fit(X, y).best_score_)


# ----------------------------------------------------------------- errors


# ----------------------------------------------------------------- devices, AMP, loaders
def test_amp_bf16_on_cpu(blobs):
    X, y = blobs
    est = make(amp="bf16").fit(X, y)
    assert all(np.isfinite(rec["loss"]) for rec in est.history_)
    Z = est.transform(X)
    assert Z.dtype == np.float32 and np.isfinite(Z).all()


def test_amp_fp16_uses_grad_scaler(blobs, monkeypatch):
    """The fp16 path: GradScaler enabled, scale(loss).backward(), step(opt), update()."""
    X, y = blobs
    calls = []
    Real = torch.amp.GradScaler

    class Spy(Real):
        def scale(self, outputs):
            calls.append("scale")
            return super().scale(outputs)

        def step(self, optimizer, *args, **kwargs):
            calls.append("step")
            return super().step(optimizer, *args, **kwargs)

        def update(self, new_scale=None):
            calls.append("update")
            return super().update(new_scale)

    monkeypatch.setattr(torch.amp, "GradScaler", Spy)
    est = make(backbone=tiny_cnn, amp="fp16", max_iter=1, loader_params={"batches_per_epoch": 2})
    X_img = np.random.RandomState(0).rand(24, 1, 6, 6)
    est.fit(X_img, np.repeat(np.arange(3), 8))
    assert calls == ["scale", "step", "update"] * 2
    assert est._resume_state["scaler"]["scale"] > 0  # an enabled scaler has state


def test_verbose_table_and_progress(blobs, capsys):
    X, y = blobs
    make(verbose=1, validation_fraction=0.34).fit(X, y)
    captured = capsys.readouterr()
    out = captured.out
    assert "validation_score" in out and "epoch" in out and len(out.strip().splitlines()) == 3
    assert "step/s" in captured.err and "<" in captured.err  # tqdm's bar with its ETA
    make(max_iter=1).fit(X, y)
    assert capsys.readouterr() == ("", "")  # silent by default


def test_param_groups_freeze_backbone(blobs):
    X, y = blobs
    backbone = MLP(10, hidden=(8,))
    est = make(backbone=backbone,
               optimizer_params={"param_groups": [("backbone.*", {"lr": 0.0})]}).fit(X, y)
    for name, p in est.module_.backbone.named_parameters():
        assert torch.equal(p, backbone.get_parameter(name)), name
    with pytest.raises(ValueError, match="param_groups"):
        make(optimizer_params={"param_groups": ["backbone.*"]}).fit(X, y)


def test_flattened_cnn_infers_feature_size():
    rng = np.random.RandomState(0)
    X, y = rng.rand(12, 1, 8, 8), np.repeat(np.arange(3), 4)
    est = make(backbone=lambda shape: SmallCNN(shape[0], widths=(4, 6), global_pool=False),
               max_iter=1).fit(X, y)
    assert est.module_.head.in_features == 6 * 4 * 4  # one max-pool: 8x8 -> 4x4
    assert est.transform(X).shape == (12, 4)


def test_resnet_backbone_runs():
    rng = np.random.RandomState(0)
    X, y = rng.rand(16, 3, 8, 8), np.repeat(np.arange(4), 4)
    est = make(backbone=SmallResNet(3, widths=(4, 8), blocks_per_stage=1), max_iter=1,
               regularizer=JRSRegularizer(layers="stages.*"), regularizer_weight=0.1)
    assert est.fit(X, y).transform(X).shape == (16, 4)


@pytest.mark.slow
def test_learning_helps_on_unseen_classes():
    """Zero-shot: classes differ in 5 of 40 dims, the rest is loud noise. Trained on classes
    0-9, the held-out Recall@1 on classes 10-19 beats the untrained net and raw inputs."""
    rng = np.random.RandomState(0)
    y = np.repeat(np.arange(20), 30)
    centers = np.zeros((20, 40))
    centers[:, :5] = 2 * rng.randn(20, 5)
    noise = np.concatenate([0.3 * rng.randn(len(y), 5), 2 * rng.randn(len(y), 35)], axis=1)
    X = (centers[y] + noise).astype(np.float32)
    seen = y < 10
    kw = dict(backbone=functools.partial(tiny_mlp, hidden=(64, 64)), n_components=16,
              loader_params={"batches_per_epoch": 30}, early_stopping=False)
    untrained = make(learning_rate=1e-12, max_iter=1, **kw).fit(X[seen], y[seen])
    trained = make(learning_rate=3e-3, max_iter=8, **kw).fit(X[seen], y[seen])
    r_raw = recall_at_k(X[~seen], y[~seen], k=1)
    r0 = recall_at_k(untrained.transform(X[~seen]), y[~seen], k=1)
    r1 = recall_at_k(trained.transform(X[~seen]), y[~seen], k=1)
    assert r1 > max(r0, r_raw) + 0.05, (r_raw, r0, r1)


# ----------------------------------------------------------------- GPU (skipped without CUDA)
@pytest.mark.gpu
@gpu
def test_cuda_fit_fp16_and_cpu_unpickle(blobs, monkeypatch):
    X, y = blobs
    est = make(device="auto", amp="fp16", backbone=tiny_cnn, max_iter=2)
    X_img = np.random.RandomState(0).rand(24, 1, 8, 8)
    y_img = np.repeat(np.arange(3), 8)
    est.fit(X_img, y_img)
    assert est.device_.type == "cuda"
    assert next(est.module_.parameters()).is_cuda
    assert est._resume_state["scaler"] is not None
    Z = est.transform(X_img)
    assert Z.dtype == np.float32 and np.isfinite(Z).all()
    blob = pickle.dumps(est)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    back = pickle.loads(blob)
    assert back.device_.type == "cpu"
    np.testing.assert_allclose(back.transform(X_img), Z, atol=2e-2)


@pytest.mark.gpu
@gpu
def test_cuda_bf16_pinned_and_back_on_gpu(blobs):
    X, y = blobs
    est = make(device="cuda", amp="bf16", loader_params={"pin_memory": "auto"}).fit(X, y)
    back = pickle.loads(pickle.dumps(est))
    assert back.device_.type == "cuda" and next(back.module_.parameters()).is_cuda
    np.testing.assert_allclose(back.transform(X), est.transform(X), atol=1e-6)


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("amp", [False, "bf16", "fp16"])
def test_cuda_training_steps_never_wait_for_the_device(amp):
    # The per-epoch reads (loss means, the non-finite check) and the end of the fit are the
    # only synchronisations: a step that synchronised would add 9 to an epoch of 12 steps
    # over one of 3 (one once-per-fit read was seen to differ by one on an H100).
    X = np.random.RandomState(0).rand(48, 1, 8, 8).astype(np.float32)
    y = np.repeat(np.arange(4), 12)
    make(device="cuda", amp=amp, backbone=tiny_cnn, max_iter=1, early_stopping=False).fit(X, y)
    counts = []  # after a warm-up fit: lazy CUDA initialisation synchronises once per process
    for n_batches in (3, 12):
        est = make(device="cuda", amp=amp, backbone=tiny_cnn, max_iter=1, early_stopping=False,
                   loader_params={"batches_per_epoch": n_batches})
        with cuda_syncs() as where:
            est.fit(X, y)
        counts.append(len(where))
    assert counts[1] - counts[0] <= 1, counts


def test_adam_is_not_fused_on_cpu():
    opt = build_optimizer(nn.Linear(3, 2), None, optimizer="adam", learning_rate=1e-3,
                          head_lr_mult=1.0, param_groups=None, weight_decay=0.0)
    assert not opt.defaults.get("fused")  # CPU results stay those of the default Adam


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("name", ["adam", "adamw"])
def test_adam_is_fused_on_cuda(name):
    opt = build_optimizer(nn.Linear(3, 2).cuda(), None, optimizer=name, learning_rate=1e-3,
                          head_lr_mult=1.0, param_groups=None, weight_decay=0.0)
    assert opt.defaults["fused"] is True


def _first_conv_weight(est):
    return next(m for m in est.module_.modules() if isinstance(m, nn.Conv2d)).weight


def tiny_resnet(input_shape):
    return SmallResNet(input_shape[0], widths=(4, 8), blocks_per_stage=1)


def test_cpu_fit_keeps_the_backbone_layout():
    # place() switches layouts on CUDA only: SmallResNet stays NCHW on the CPU (see its notes)
    X = np.random.RandomState(0).rand(24, 3, 8, 8).astype(np.float32)
    est = make(backbone=tiny_resnet, early_stopping=False).fit(X, np.repeat(np.arange(3), 8))
    assert _first_conv_weight(est).is_contiguous()


@pytest.mark.gpu
@gpu
def test_cuda_fit_runs_channels_last_and_keeps_it_after_unpickling():
    X = np.random.RandomState(0).rand(24, 3, 8, 8).astype(np.float32)
    y = np.repeat(np.arange(3), 8)
    est = make(device="cuda", backbone=tiny_resnet, early_stopping=False).fit(X, y)
    assert _first_conv_weight(est).is_contiguous(memory_format=torch.channels_last)
    back = pickle.loads(pickle.dumps(est))
    assert _first_conv_weight(back).is_cuda
    assert _first_conv_weight(back).is_contiguous(memory_format=torch.channels_last)
    np.testing.assert_allclose(back.transform(X), est.transform(X), atol=1e-6)


def test_a_row_far_beyond_the_training_range_keeps_a_unit_embedding():
    # the float32 norm of its embedding overflowed and F.normalize returned the zero vector
    X, y = zero_shot_vectors(per_class=5)
    est = fast(max_iter=1).fit(X, y)
    far = np.vstack([np.full((1, X.shape[1]), 1e20, np.float32), X[:1] * 1e30, X[:1]])
    Z = est.transform(far)
    np.testing.assert_allclose(np.linalg.norm(Z, axis=1), 1.0, rtol=1e-5)
    np.testing.assert_allclose(Z[2], est.transform(X[:1])[0], atol=1e-6)  # an ordinary row


def test_a_row_whose_standardised_value_overflows_is_named_as_such():
    # "check the input for NaN/inf and the batch norm statistics" for a finite row of 1e30
    # given to a model fitted at 1e-20 (no batch norm there)
    X, y = zero_shot_vectors(per_class=5)
    est = fast(max_iter=1).fit(X * 1e-20, y)
    with pytest.raises(ValueError, match="standardised value overflows float32"):
        est.transform(np.full((1, X.shape[1]), 1e30, np.float32))


# audit 20 (mutation round 5): stale_attributes_and_resume_at_max_iter
def test_a_refit_without_validation_drops_the_validation_attributes():
    rng = np.random.RandomState(0)
    y = np.repeat(np.arange(6), 12)
    X = rng.randn(6, 10)[y] * 3 + rng.randn(72, 10)
    est = make(max_iter=2, validation_fraction=0.34, early_stopping=True).fit(X, y)
    assert hasattr(est, "best_iteration_") and hasattr(est, "validation_split_")
    est.set_params(validation_fraction=None, early_stopping=False).fit(X, y)
    for stale in ("best_iteration_", "best_validation_score_", "validation_split_"):
        assert not hasattr(est, stale), stale


def test_a_warm_start_of_a_run_that_reached_max_iter_is_not_refused():
    # max_iter counts every epoch of the run: a run at exactly max_iter resumes (nothing to
    # train), only one beyond it is refused

    rng = np.random.RandomState(0)
    y = np.repeat(np.arange(6), 12)
    X = rng.randn(6, 10)[y] * 3 + rng.randn(72, 10)
    est = make(max_iter=2).fit(X, y)
    est.set_params(warm_start=True).fit(X, y)
    assert est.n_iter_ == 2 and len(est.history_) == 2
    with pytest.raises(ValueError, match="raise max_iter"):
        est.set_params(max_iter=1).fit(X, y)

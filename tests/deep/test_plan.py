"""skdml/deep/_plan.py: the checks of fit and transform inputs, and the objective built
from the fit's ObjectiveConfig (losses and regularisers)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from skdml.deep import MLP
from skdml.losses import AMSoftmaxLoss

from _deep_helpers import fast, make
from skdml.deep._trainable import DeepTrainable
from skdml.losses import DistancePreservation, MetricObjective, build_loss

pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")


def test_clear_errors(blobs):
    X, y = blobs
    with pytest.raises(ValueError, match="requires y"):
        make().fit(X)
    with pytest.raises(ValueError, match="1 class"):
        make().fit(X, np.zeros(len(X)))
    # more classes per batch than classes: capped, as in ECAML and JRD (it raised here)
    n_classes = len(np.unique(y))
    capped = make(n_classes_per_batch=7, random_state=0).fit(X, y)
    exact = make(n_classes_per_batch=n_classes, random_state=0).fit(X, y)
    np.testing.assert_array_equal(capped.transform(X), exact.transform(X))
    with pytest.raises(ValueError, match="rank 5"):
        make().fit(np.zeros((12, 1, 2, 3, 4)), np.repeat([0, 1], 6))
    with pytest.raises(ValueError):
        make().fit(X[:, 0], y)
    with pytest.raises(ValueError, match="NaN"):
        make().fit(np.where(X > 2, np.nan, X), y)
    with pytest.raises(ValueError):
        make().fit(np.zeros((0, 10)), np.zeros(0))
    fitted = make(max_iter=1).fit(X, y)
    with pytest.raises(ValueError, match="features"):
        fitted.transform(X[:, :5])
    with pytest.raises(ValueError, match="loss_params"):
        make(loss=_pml_triplet(), loss_params={"margin": 1.0}).fit(X, y)


def _pml_triplet():
    pml = pytest.importorskip("pytorch_metric_learning.losses")
    return pml.TripletMarginLoss(margin=0.1)


@pytest.mark.parametrize("loss", ["triplet", "npair", "binomial", "amsoftmax", "pml", AMSoftmaxLoss])
def test_losses(blobs, loss):
    X, y = blobs
    if loss == "pml":
        loss = _pml_triplet()
    est = make(loss=loss).fit(X, y)
    assert all(np.isfinite(rec["loss"]) for rec in est.history_)
    if loss in ("amsoftmax", AMSoftmaxLoss):
        assert est.loss_.proxies.shape == (6, 4)  # n_classes and embedding_dim filled in


def test_ec_gradient_reaches_only_the_head(blobs):
    X, y = blobs

    def zero_loss(z, labels):
        return 0.0 * z.sum()

    backbone = MLP(10, hidden=(8,))
    est = make(backbone=backbone, loss=zero_loss, regularizer="ec", regularizer_weight=1.0,
               optimizer_params={"weight_decay": 0.0}).fit(X, y)
    init = make(backbone=backbone, loss=zero_loss, optimizer_params={"weight_decay": 0.0},
                learning_rate=1e-12, max_iter=1)
    init.fit(X, y)
    for name, p in est.module_.named_parameters():
        if name.startswith("backbone."):
            assert torch.equal(p, backbone.get_parameter(name[len("backbone."):])), name
    assert not torch.allclose(est.module_.head.weight, init.module_.head.weight)
    assert est.history_[0]["regularizer"] > 0


@pytest.mark.parametrize("channels", [1, 3])
def test_channels_last_images_are_refused(channels):
    X = np.random.RandomState(0).rand(12, 16, 16, channels)
    with pytest.raises(ValueError, match="channels-last.*transpose"):
        fast(max_iter=1).fit(X, np.repeat([0, 1, 2], 4))


def test_the_objective_is_built_from_its_config_alone():
    from skdml.deep._config import ObjectiveConfig
    from skdml.deep._plan import build_objective
    from skdml.losses import EnergyConfusion, TripletLoss

    ec = EnergyConfusion(log=False)
    config = ObjectiveConfig(loss="triplet", loss_params={"margin": 0.3}, regularizer=ec,
                             regularizer_weight=0.5, n_components=4)
    objective = build_objective(config, n_classes=3)
    assert isinstance(objective.loss, TripletLoss) and objective.loss.margin == 0.3
    assert objective.regularizer is not ec and objective.regularizer.log is False  # a copy
    assert objective.weight == 0.5
    proxies = build_objective(ObjectiveConfig("amsoftmax", {}, None, 0.0, 4), n_classes=3)
    assert proxies.loss.proxies.shape == (3, 4) and proxies.regularizer is None
    with pytest.raises(ValueError, match="resolved by fit"):
        build_objective(ObjectiveConfig("auto", {}, None, 0.0, 4), n_classes=3)


def test_refit_on_a_dataset_forgets_the_feature_count_of_an_array_fit(blobs):
    from torch.utils.data import TensorDataset
    X, y = blobs
    est = make().fit(X, y)
    narrow = torch.as_tensor(X[:, :5], dtype=torch.float32)
    est.fit(TensorDataset(narrow, torch.as_tensor(y)))
    assert est.input_shape_ == (5,) and not hasattr(est, "n_features_in_")
    assert est.transform(X[:, :5]).shape == (len(X), 4)  # was "expecting 10 features"


def test_grey_images_transform_in_either_layout_and_bad_shapes_say_shapes():
    rng = np.random.RandomState(0)
    y = np.repeat([0, 1, 2], 8)
    grey = (rng.rand(24, 8, 8) + y[:, None, None]).astype(np.float32)
    est = fast(n_components=4, max_iter=1, n_samples_per_class=4).fit(grey, y)
    np.testing.assert_array_equal(est.transform(grey[:, None]), est.transform(grey))
    with pytest.raises(ValueError, match=r"shape \(1, 9, 8\), the model was fitted on"):
        est.transform(np.zeros((2, 9, 8), np.float32))  # was "X has 9 features"
    with pytest.raises(ValueError, match="NaN"):
        est.transform(np.full((2, 8, 8), np.nan, np.float32))


def test_tensors_that_require_grad_are_read_detached(blobs):
    X, y = blobs
    Xt = torch.as_tensor(X, dtype=torch.float32).requires_grad_()
    est = make().fit(Xt, torch.as_tensor(y))  # was torch's "Can't call numpy()" error
    np.testing.assert_array_equal(est.transform(Xt), est.transform(X.astype(np.float32)))


def test_warm_start_below_the_epochs_run_is_refused(blobs):
    X, y = blobs
    est = make(max_iter=3, warm_start=True, early_stopping=False).fit(X, y)
    with pytest.raises(ValueError, match="raise max_iter"):  # was a silent no-op
        est.set_params(max_iter=2).fit(X, y)
    assert est.set_params(max_iter=4).fit(X, y).n_iter_ == 4



def test_warm_start_with_max_iter_auto(blobs):
    # "auto" was compared with the epochs run before it was resolved: a TypeError
    X, y = blobs
    est = make(max_iter=2, early_stopping=False).fit(X, y)
    assert est.set_params(warm_start=True, max_iter="auto").fit(X, y).n_iter_ > 2


def test_an_interrupted_warm_start_leaves_the_run_to_resume_as_it_was(blobs):
    # Adam updated the in-memory resume state's tensors in place: after the rollback, the
    # retried warm start no longer matched an uninterrupted fit (max |dZ| 0.006 on digits)
    from skdml.callbacks import Callback

    class Interrupt(Callback):
        def on_epoch_end(self, estimator, info):
            if info.epoch == 3:
                raise KeyboardInterrupt

    X, y = blobs
    full = make(max_iter=4, early_stopping=False).fit(X, y)
    est = make(max_iter=2, early_stopping=False).fit(X, y)
    with pytest.raises(KeyboardInterrupt):
        est.set_params(max_iter=4, warm_start=True, callbacks=[Interrupt()]).fit(X, y)
    est.set_params(callbacks=None).fit(X, y)
    np.testing.assert_array_equal(est.transform(X), full.transform(X))


def test_warm_start_refuses_other_data_than_its_run(blobs):
    # the run indexes its samples by position: more rows trained on its first ones only,
    # fewer gave an IndexError, shuffled ones trained on other samples silently
    X, y = blobs
    est = make(max_iter=2, warm_start=True, early_stopping=False).fit(X, y)
    est.set_params(max_iter=3)
    with pytest.raises(ValueError, match="trained on 72 samples, and fit was given 36"):
        est.fit(X[::2], y[::2])
    order = np.random.RandomState(0).permutation(len(y))
    with pytest.raises(ValueError, match="other labels than y"):
        est.fit(X[order], y[order])
    assert est.fit(X, y).n_iter_ == 3


def test_warm_start_refuses_other_inputs_of_one_size_and_labels(blobs, tmp_path):
    # a cross-validation's folds of one size and label order passed the checks of sizes
    # and labels: with checkpoint_path and warm_start, every fold and candidate took the
    # first fit's finished model, trained on the others' test samples (audit 19)
    X, y = blobs
    path = tmp_path / "run.ckpt"
    make(max_iter=2, early_stopping=False, checkpoint_path=path).fit(X, y)
    other = make(max_iter=2, early_stopping=False, checkpoint_path=path, warm_start=True)
    with pytest.raises(ValueError, match="other inputs than X"):
        other.fit(X.reshape(6, 12, -1)[:, ::-1].reshape(X.shape), y)  # rows shuffled in class
    with pytest.raises(ValueError, match="other inputs than X"):
        other.fit(X + 1.0, y)
    # the same X (another array, another dtype) resumes
    assert other.set_params(max_iter=3).fit(X.astype(np.float64), y).n_iter_ == 3
    # in memory, as from the file
    est = make(max_iter=2, warm_start=True, early_stopping=False).fit(X, y)
    with pytest.raises(ValueError, match="other inputs than X"):
        est.set_params(max_iter=3).fit(X * 2.0, y)


def test_a_resumed_collapse_refit_keeps_its_settings(monkeypatch):
    # the resumed run rebuilt loss="auto" as the multi-similarity loss that had collapsed
    import skdml.deep._trainer as trainer_module

    real, calls = trainer_module.class_separation, []

    def first_fit_collapsed(Z, y):
        calls.append(1)
        return (0.0, 0.9, 0.9) if len(calls) == 1 else real(Z, y)

    monkeypatch.setattr(trainer_module, "class_separation", first_fit_collapsed)
    rng = np.random.RandomState(0)
    y = np.repeat(np.arange(4), 10)
    X = (rng.randn(4, 1, 4, 4)[y] + 0.3 * rng.randn(40, 1, 4, 4)).astype(np.float32)
    backbone = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 8))
    est = make(backbone=backbone, max_iter=10, augment=False, learning_rate=1e-2,
               loss="auto", loader_params={"batches_per_epoch": 1}).fit(X, y)
    assert est.collapse_refit_ == {"loss": "binomial"}
    est.set_params(warm_start=True, max_iter=12).fit(X, y)
    assert est.collapse_refit_ == {"loss": "binomial"}
    assert type(est.loss_).__name__ == "BinomialDevianceLoss"


# audit 19 (mutation round 4): deep_trainable_unit
def _fitted_net():
    rng = np.random.RandomState(0)
    y = np.repeat(np.arange(3), 8)
    # features on very different scales: the standardised input differs from the raw one
    X = (rng.randn(24, 5) * [1, 10, 100, 0.1, 1] + 50).astype(np.float32)
    net = make(max_iter=1).fit(X, y).module_
    return net, torch.as_tensor(X), torch.as_tensor(y)


def test_preserve_input_compares_with_the_standardised_augmented_input_in_training_only():
    net, X, y = _fitted_net()
    seen = []

    def augment(x):
        seen.append(x)
        return x + 1.0

    objective = MetricObjective(build_loss("amsoftmax", None, n_classes=3, embedding_dim=4))
    trainable = DeepTrainable(net, objective, y, input_shape=(5,), device=torch.device("cpu"),
                              augment=augment, preserve_input=2.0)
    trainable.train(True)
    total, terms = trainable.batch_loss((X, torch.arange(24)))
    assert len(seen) == 1
    z = net(X + 1.0)[0].float()
    want = DistancePreservation()(z, net.standardize(X + 1.0))
    assert float(terms["preserve_input"]) == pytest.approx(float(want), rel=1e-5)
    assert float(total) == pytest.approx(float(terms["metric_loss"] + 2.0 * want), rel=1e-5)
    # the loss module follows the network's mode; evaluation mode does not augment
    assert objective.loss.training
    trainable.train(False)
    assert not net.training and not objective.loss.training
    trainable.batch_loss((X, torch.arange(24)))
    assert len(seen) == 1


def test_embeddings_of_a_diverged_network_blame_the_learning_rate():
    rng = np.random.RandomState(0)
    X, y = rng.randn(24, 5).astype(np.float32), np.repeat(np.arange(3), 8)
    est = make(max_iter=1).fit(X, y)
    with torch.no_grad():
        next(est.module_.parameters()).fill_(float("nan"))
    with pytest.raises(ValueError, match="training diverged; lower learning_rate"):
        est.transform(X)


# audit 19 (mutation round 4): objective_and_host
def test_a_regulariser_of_weight_zero_is_not_built():
    from skdml.deep._config import ObjectiveConfig
    from skdml.deep._plan import build_objective

    objective = build_objective(ObjectiveConfig("triplet", {}, "ec", 0.0, 4), n_classes=3)
    assert objective.regularizer is None and not objective.regularized


def test_bfloat16_input_comes_back_as_float32_with_every_value_exact():
    from skdml.deep._plan import _host

    x = torch.tensor([1e30, 1.0078125, -3.0e-30], dtype=torch.bfloat16)
    out = _host(x)
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, x.float().numpy())
    assert np.isfinite(out).all()

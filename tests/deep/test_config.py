"""The deep learner's grouped parameters and its one resolved configuration per fit."""

import dataclasses
import inspect

import numpy as np
import pytest
import torch

from skdml import DeepMetricTransformer
from skdml.deep._config import FitConfig, resolve_config
from skdml.deep._state import TrainingState
from skdml.losses import EnergyConfusion, JRSRegularizer

#: The parameters merged into groups (or into a regulariser instance) in 0.2.
MERGED = ("regularizer_params", "jrs_layers", "head_lr_mult", "weight_decay", "param_groups",
          "lr_schedule", "ema_epochs", "validation_split", "num_workers", "pin_memory",
          "transform_batch_size", "batches_per_epoch")


def blobs(n_classes=6, per_class=10, dim=8, seed=0):
    rng = np.random.RandomState(seed)
    y = np.repeat(np.arange(n_classes), per_class)
    return (rng.randn(len(y), dim) + 3 * rng.randn(n_classes, dim)[y]).astype(np.float32), y


def fast(**kw):
    return DeepMetricTransformer(**{**dict(n_components=4, max_iter=2, device="cpu",
                                           random_state=0), **kw})


def test_the_parameter_list_is_short_and_grouped():
    names = list(inspect.signature(DeepMetricTransformer).parameters)
    assert len(names) == 28
    assert not set(MERGED) & set(names)
    assert {"optimizer_params", "loader_params", "regularizer", "regularizer_weight"} <= set(names)


def test_optimizer_params_reach_the_optimizer():
    X, y = blobs()
    est = fast(optimizer="adam", optimizer_params={
        "weight_decay": 0.0, "betas": (0.5, 0.6), "lr_schedule": "constant"}).fit(X, y)
    groups = est._resume_state["optimizer"]["param_groups"]
    assert all(tuple(g["betas"]) == (0.5, 0.6) and g["weight_decay"] == 0.0 for g in groups)
    default = fast().fit(X, y)._resume_state["optimizer"]["param_groups"]
    assert all(g["weight_decay"] == 1e-4 and tuple(g["betas"]) == (0.9, 0.999) for g in default)


@pytest.mark.parametrize("params, match", [
    ({"weight_decay": -1.0}, "weight_decay must be"),
    ({"lr_schedule": "step"}, "lr_schedule must be"),
    ({"ema_epochs": float("nan")}, "ema_epochs must be"),
    ({"lr": 0.1}, "learning_rate parameter"),
    ({"no_such_option": 1}, "does not accept"),
    # a pattern without the "backbone." prefix froze nothing, silently (audit 19)
    ({"param_groups": [("module.*", {"lr": 0.0})]},
     r"the pattern 'module\.\*' matches no parameter.*backbone\."),
])
def test_bad_optimizer_params_are_refused(params, match):
    X, y = blobs()
    with pytest.raises(ValueError, match=match):
        fast(optimizer_params=params).fit(X, y)


@pytest.mark.parametrize("params, match", [
    ({"workers": 2}, r"Unknown loader_params keys \['workers'\]"),
    ({"num_workers": -1}, "num_workers must be"),
    ({"batches_per_epoch": 0}, "batches_per_epoch must be"),
    ({"transform_batch_size": 2.5}, "transform_batch_size must be"),
    ({"pin_memory": "yes"}, "pin_memory must be"),
])
def test_bad_loader_params_are_refused(params, match):
    X, y = blobs()
    with pytest.raises(ValueError, match=match):
        fast(loader_params=params).fit(X, y)
    assert not hasattr(fast(loader_params=params), "module_")


def test_loader_params_set_the_epoch_and_transform_batches():
    X, y = blobs()
    seen = []

    class Count:
        def on_batch_end(self, estimator, info):
            seen.append(info.epoch)

    from skdml.callbacks import Callback
    counter = type("Counter", (Callback,), {"on_batch_end": Count.on_batch_end})()
    est = fast(max_iter=1, loader_params={"batches_per_epoch": 3, "transform_batch_size": 7},
               callbacks=[counter]).fit(X, y)
    assert len(seen) == 3
    np.testing.assert_allclose(est.transform(X), fast(max_iter=1, loader_params={
        "batches_per_epoch": 3}).fit(X, y).transform(X), atol=1e-6)


def test_a_regularizer_instance_carries_its_options():
    X, y = blobs()
    by_name = fast(regularizer="ec", regularizer_weight=0.5).fit(X, y)
    own = fast(regularizer=EnergyConfusion(log=False), regularizer_weight=0.5).fit(X, y)
    same = fast(regularizer=EnergyConfusion(), regularizer_weight=0.5).fit(X, y)
    assert by_name.history_[0]["regularizer"] == pytest.approx(same.history_[0]["regularizer"])
    assert own.history_[0]["regularizer"] != pytest.approx(by_name.history_[0]["regularizer"])
    assert repr(JRSRegularizer(layers=["blocks.0"])).endswith("layers=('blocks.0',))")
    with pytest.raises(ValueError, match="layers must be"):
        JRSRegularizer(layers=[3])


def test_every_auto_is_resolved_once_into_a_frozen_config():
    X, y = blobs()
    est = fast(max_iter="auto", validation_fraction=0.34)
    cfg = resolve_config(est, y_enc=y, input_shape=(8,), in_memory=True,
                         device=torch.device("cpu"), rng=np.random.RandomState(0))
    assert isinstance(cfg, FitConfig)
    values = [getattr(cfg, f.name) for f in dataclasses.fields(cfg)]
    assert not any(isinstance(v, str) and v == "auto" for v in values)
    # 2 of the 6 classes are held out: batches draw from the 4 training classes
    assert cfg.max_iter == 30 and cfg.n_classes_per_batch == 4 and cfg.early_stopping is False
    assert cfg.validation_split == "class_disjoint" and cfg.preserve_input > 0
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.max_iter = 3


def test_the_checkpoint_schema_lives_in_one_dataclass():
    X, y = blobs()
    state = fast().fit(X, y)._resume_state
    required = TrainingState.required()
    assert set(required) <= set(state) and "source" not in state
    assert set(state) == {f.name for f in dataclasses.fields(TrainingState)} - {"source"}
    from skdml.exceptions import CheckpointError
    with pytest.raises(CheckpointError, match="lacks \\['optimizer'\\]"):
        TrainingState.from_dict({k: v for k, v in state.items() if k != "optimizer"}, "here")


def test_auto_loss_is_binomial_for_default_vectors_only():
    from skdml.losses import BinomialDevianceLoss, MultiSimilarityLoss
    y = np.repeat(np.arange(4), 5)
    est = DeepMetricTransformer()
    cfg = resolve_config(est, y_enc=y, input_shape=(8,), in_memory=True,
                         device=torch.device("cpu"), rng=np.random.RandomState(0))
    assert cfg.loss == "binomial"
    for shape, in_memory, backbone in [((1, 8, 8), True, None), ((8,), False, None),
                                       ((8,), True, torch.nn.Linear(8, 4))]:
        est = DeepMetricTransformer(backbone=backbone)
        cfg = resolve_config(est, y_enc=y, input_shape=shape, in_memory=in_memory,
                             device=torch.device("cpu"), rng=np.random.RandomState(0))
        assert cfg.loss == "multisimilarity"
    X, y = blobs()
    assert isinstance(fast().fit(X, y).loss_, BinomialDevianceLoss)
    assert isinstance(fast(loss="multisimilarity").fit(X, y).loss_, MultiSimilarityLoss)
    with pytest.raises(ValueError, match="loss_params needs a named loss"):
        fast(loss_params={"alpha": 2.0}).fit(X, y)


# ---------------------------------------------------------------- nested parameters (issue 38)
def test_grid_search_tunes_a_nested_optimizer_option_and_a_loss_option():
    from sklearn.model_selection import GridSearchCV
    from sklearn.neighbors import KNeighborsClassifier
    from sklearn.pipeline import Pipeline

    X, y = blobs(n_classes=4, per_class=8)
    pipe = Pipeline([("dml", fast(max_iter=1, loss="triplet")),
                     ("knn", KNeighborsClassifier(1))])
    grid = {"dml__optimizer__weight_decay": [0.0, 0.25], "dml__loss__margin": [0.05, 0.4]}
    search = GridSearchCV(pipe, grid, cv=2, error_score="raise").fit(X, y)
    assert sorted((p["dml__optimizer__weight_decay"], p["dml__loss__margin"])
                  for p in search.cv_results_["params"]) == [(0.0, 0.05), (0.0, 0.4),
                                                             (0.25, 0.05), (0.25, 0.4)]
    best = search.best_estimator_.named_steps["dml"]
    wd, margin = (search.best_params_[k] for k in grid)
    assert best.optimizer_params == {"weight_decay": wd} and best.loss_params == {"margin": margin}
    # the values reach the fitted optimiser and loss
    groups = best._resume_state["optimizer"]["param_groups"]
    assert all(g["weight_decay"] == wd for g in groups)
    assert best.loss_.margin == pytest.approx(margin)
    # the searched estimator itself is untouched
    assert search.estimator.named_steps["dml"].optimizer_params is None


@pytest.mark.parametrize("key, match", [
    ("optimizer__weight_decy", r"optimizer__weight_decy.*optimizer__weight_decay"),
    ("loader__workers", r"loader__workers.*loader__num_workers"),
    ("optimizer_params__nope", r"optimizer_params__weight_decay"),
])
def test_a_misspelt_nested_key_is_refused_at_set_params(key, match):
    est = fast(loss="triplet", optimizer_params={"weight_decay": 0.5})
    with pytest.raises(ValueError, match=match):
        est.set_params(**{key: 0.1}, n_components=9)
    assert est.n_components == 4 and est.optimizer_params == {"weight_decay": 0.5}  # unchanged
    with pytest.raises(ValueError, match=r"loss__alpha.*\['loss__margin', 'loss__reduction'\]"):
        est.set_params(loss__alpha=2.0)
    with pytest.raises(ValueError, match="loss='auto' is chosen by the learner"):
        fast().set_params(loss__margin=0.2)
    with pytest.raises(ValueError, match="set regularizer"):
        fast().set_params(regularizer__log=False)
    with pytest.raises(ValueError, match=r"Invalid parameter optimizer__momentum"):
        fast(optimizer="adam").set_params(optimizer__momentum=0.5)  # Adam has none


def test_nested_keys_land_in_the_grouped_parameters_and_survive_clone():
    from sklearn.base import clone

    user = {"weight_decay": 0.5}
    est = fast(optimizer_params=user).set_params(
        optimizer="sgd", optimizer__momentum=0.5, optimizer_params__head_lr_mult=2.0,
        loader__transform_batch_size=7, loss="triplet", loss__margin=0.3,
        regularizer="ec", regularizer__log=False)
    assert user == {"weight_decay": 0.5}  # the user's dict is not changed in place
    assert est.optimizer_params == {"weight_decay": 0.5, "momentum": 0.5, "head_lr_mult": 2.0}
    assert est.loader_params == {"transform_batch_size": 7}
    assert est.loss_params == {"margin": 0.3}
    assert isinstance(est.regularizer, EnergyConfusion) and est.regularizer.log is False
    est.set_params(regularizer__reduction="sum")  # an instance keeps its other options
    assert est.regularizer.log is False and est.regularizer.reduction == "sum"
    params = clone(est).get_params(deep=False)
    assert params["optimizer_params"] == est.optimizer_params
    assert repr(params["regularizer"]) == repr(est.regularizer)
    # the fit checks the same key lists: a stale key after a change of loss is refused
    X, y = blobs()
    with pytest.raises(ValueError, match=r"does not accept \['margin'\]"):
        fast(loss="npair", loss_params={"margin": 0.3}).fit(X, y)


def test_loss_docstring_and_validator_come_from_the_registry():
    import re

    from skdml.losses import LOSSES, REGULARIZERS

    doc = DeepMetricTransformer.__doc__
    line = re.search(r"^    loss : \{(.*?)\}", doc, re.M).group(1)
    assert set(re.findall(r'"(\w+)"', line)) == set(LOSSES) | {"auto"}
    assert "lmnn" in line
    allowed = DeepMetricTransformer._parameter_constraints["loss"][0].options
    assert set(allowed) == set(LOSSES) | {"auto"}
    line = re.search(r"^    regularizer : \{(.*?)\}", doc, re.M).group(1)
    assert set(re.findall(r'"(\w+)"', line)) == set(REGULARIZERS)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("change", [dict(n_components=7), dict(amp="bf16"),
                                    dict(loader_params={"transform_batch_size": 3}),
                                    dict(loader__transform_batch_size=5), dict(normalize=False)])
def test_fitted_answers_come_from_fitted_state_after_any_set_params(change, monkeypatch):
    X, y = blobs()
    est = fast(n_components=3).fit(X, y)
    before = est.transform(X)
    est.set_params(**change)
    import skdml.deep._trainer as trainer
    seen = []
    real = trainer.make_loader
    monkeypatch.setattr(trainer, "make_loader", lambda *a, **k: seen.append(k) or real(*a, **k))
    after = est.transform(X)
    np.testing.assert_array_equal(after, before)
    assert seen[0]["batch_size"] == 256  # the fitted loader settings
    names = est.get_feature_names_out()
    assert len(names) == after.shape[1] == est.n_components_ == 3
    est.fit(X, y)  # a refit takes the new parameters
    assert len(est.get_feature_names_out()) == est.transform(X).shape[1] == est.n_components_


def test_the_estimator_parameters_are_read_by_the_config_module_only():
    """No ``est.<parameter>`` read outside the estimator and ``_config`` (issue 38)."""
    import pathlib
    import re

    import skdml.deep as deep

    params = set(inspect.signature(DeepMetricTransformer).parameters)
    root = pathlib.Path(deep.__file__).parent
    for path in list(root.glob("*.py")) + list((root.parent / "_training").glob("*.py")):
        if path.name in ("_estimator.py", "_config.py"):
            continue
        reads = {m.group(2) for m in re.finditer(r"\b(est|estimator)\.(\w+)\b",
                                                 path.read_text())}
        assert not reads & params, (path.name, reads & params)


@pytest.mark.parametrize("params, warns", [
    ({"regularizer": "ec"}, "adds nothing"),  # the default weight 0: silently left out
    ({"regularizer_weight": 1.0}, "no effect without a regularizer"),
])
def test_a_regularizer_left_out_by_its_weight_warns(params, warns):
    X, y = np.random.RandomState(0).randn(40, 5).astype(np.float32), np.repeat(np.arange(4), 10)
    with pytest.warns(UserWarning, match=warns):
        DeepMetricTransformer(max_iter=1, random_state=0, device="cpu", **params).fit(X, y)


def test_a_loss_with_class_weights_learns_from_single_samples():
    # only a loss with a tensor named "proxies" was exempt from the positive-pair check:
    # pytorch-metric-learning's ArcFace / NormalizedSoftmax (weights "W") were refused
    import torch.nn.functional as F

    class ClassWeights(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.W = torch.nn.Parameter(torch.randn(4, 3))

        def forward(self, z, y):
            return F.cross_entropy(10 * F.normalize(z) @ F.normalize(self.W).T, y)

    X, y = np.random.RandomState(0).randn(40, 5).astype(np.float32), np.repeat(np.arange(4), 10)
    est = DeepMetricTransformer(n_components=3, loss=ClassWeights(), n_samples_per_class=1,
                                max_iter=1, random_state=0, device="cpu").fit(X, y)
    assert est.transform(X).shape == (40, 3)
    with pytest.raises(ValueError, match="positive pair"):  # a pair loss still is refused
        DeepMetricTransformer(n_components=3, loss="triplet", n_samples_per_class=1,
                              max_iter=1, device="cpu").fit(X, y)


def test_an_optimiser_without_weight_decay_trains_and_a_class_that_is_none_is_refused():
    # skdml's default weight_decay went to every optimiser: Rprop (and LBFGS, and many
    # others) were refused for a key the user never set; optimizer=int failed inside torch
    import numpy as np
    import torch

    from skdml import DeepMetricTransformer

    rng = np.random.RandomState(0)
    y = np.repeat(np.arange(4), 6)
    X = (rng.randn(24, 5) + y[:, None]).astype(np.float32)
    est = DeepMetricTransformer(n_components=3, max_iter=1, device="cpu", random_state=0,
                                optimizer=torch.optim.Rprop).fit(X, y)
    assert est.transform(X).shape == (24, 3)
    with pytest.raises(ValueError, match="subclass of torch.optim.Optimizer; got the class int"):
        DeepMetricTransformer(n_components=3, max_iter=1, device="cpu", optimizer=int).fit(X, y)


def test_device_none_means_auto_as_in_the_scorers():
    # the scorers and the index take device=None ("auto"); the deep learner refused it
    import numpy as np

    from skdml import DeepMetricTransformer

    rng = np.random.RandomState(0)
    y = np.repeat(np.arange(4), 6)
    X = (rng.randn(24, 5) + y[:, None]).astype(np.float32)
    est = DeepMetricTransformer(n_components=3, max_iter=1, device=None, random_state=0)
    assert est.fit(X, y).transform(X).shape == (24, 3)


def test_lbfgs_is_refused_by_name():
    # it failed inside torch: "LBFGS doesn't support per-parameter options"
    import numpy as np
    import torch

    from skdml import DeepMetricTransformer

    rng = np.random.RandomState(0)
    y = np.repeat(np.arange(4), 6)
    X = (rng.randn(24, 5) + y[:, None]).astype(np.float32)
    with pytest.raises(ValueError, match="LBFGS cannot train here: it re-evaluates"):
        DeepMetricTransformer(n_components=3, max_iter=1, device="cpu",
                              optimizer=torch.optim.LBFGS).fit(X, y)


def test_weight_decay_is_no_key_of_an_optimiser_without_it_and_sparse_adam_is_refused():
    # the key list promised weight_decay to Rprop, which torch then refused at the fit
    import torch

    from skdml.deep._config import check_optimizer_params, optimizer_keys

    assert "weight_decay" not in optimizer_keys(torch.optim.Rprop)
    assert "weight_decay" in optimizer_keys("adam")
    with pytest.raises(ValueError, match=r"Rprop does not accept \['weight_decay'\]"):
        check_optimizer_params({"weight_decay": 0}, torch.optim.Rprop)
    with pytest.raises(ValueError, match="SparseAdam takes sparse gradients only"):
        check_optimizer_params(None, torch.optim.SparseAdam)

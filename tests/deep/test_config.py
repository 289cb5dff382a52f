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
                         device=torch.device("cpu"), backbone=None,
                         rng=np.random.RandomState(0))
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
                         device=torch.device("cpu"), backbone=None,
                         rng=np.random.RandomState(0))
    assert cfg.loss == "binomial"
    for shape, in_memory, backbone in [((1, 8, 8), True, None), ((8,), False, None),
                                       ((8,), True, torch.nn.Linear(8, 4))]:
        est = DeepMetricTransformer(backbone=backbone)
        cfg = resolve_config(est, y_enc=y, input_shape=shape, in_memory=in_memory,
                             device=torch.device("cpu"), backbone=backbone,
                             rng=np.random.RandomState(0))
        assert cfg.loss == "multisimilarity"
    X, y = blobs()
    assert isinstance(fast().fit(X, y).loss_, BinomialDevianceLoss)
    assert isinstance(fast(loss="multisimilarity").fit(X, y).loss_, MultiSimilarityLoss)
    with pytest.raises(ValueError, match="loss_params needs a named loss"):
        fast(loss_params={"alpha": 2.0}).fit(X, y)

"""One regulariser, one meaning: ECAML/JRD and the deep learner optimise the same EC and JRS.

For the same embeddings, labels and weight, the regulariser term each learner
computes *in its own training step* is the same number. The linear learner's
map ``L`` and the deep learner's linear head (on an identity backbone) are set
to the same matrix, so both embed the batch identically; what is compared is
everything each learner does after that.
"""

import numpy as np
import pytest
import torch
from torch import nn

from skdml import ECAML, JRD, DeepMetricTransformer
from skdml.deep._network import EmbeddingNet
from skdml.deep._trainable import DeepTrainable
from skdml.losses import EnergyConfusion, JRSRegularizer


def batch(seed=0, n_classes=4, per_class=5, dim=6):
    rng = np.random.RandomState(seed)
    y = np.repeat(np.arange(n_classes), per_class)
    X = rng.randn(len(y), dim) + 2 * rng.randn(n_classes, dim)[y]
    return torch.tensor(X, dtype=torch.float32), torch.tensor(y)


def deep_terms(estimator, X, y, W, b=None, proxies=None):
    """The terms of one training step of ``estimator`` whose head is ``x -> W x + b``."""
    objective = estimator._build_objective(n_classes=int(y.max()) + 1)
    net = EmbeddingNet(nn.Identity(), X.shape[1], W.shape[0], estimator.normalize)
    with torch.no_grad():
        net.head.weight.copy_(W)
        net.head.bias.copy_(torch.zeros(W.shape[0]) if b is None else b)
        if proxies is not None:
            objective.loss.proxies.copy_(proxies)
    step = DeepTrainable(net, objective, y, input_shape=(X.shape[1],),
                         device=torch.device("cpu"))
    return step.batch_loss((X, torch.arange(len(y))))


# N-pair works on raw dot products: a normalising head would change its embedding
@pytest.mark.parametrize("loss, normalize", [("binomial", False), ("binomial", True),
                                             ("triplet", False), ("triplet", True),
                                             ("npair", False)])
def test_energy_confusion_is_one_regulariser(loss, normalize):
    X, y = batch()
    W = torch.tensor(np.random.RandomState(1).randn(3, X.shape[1]), dtype=torch.float32)
    weight = 0.37
    linear = ECAML(loss=loss, regularizer_weight=weight)._make_objective(4, 3, X.shape[1])
    with torch.no_grad():
        linear.L.copy_(W)
    total_lin, terms_lin = linear(X, y)
    deep = DeepMetricTransformer(loss=loss, regularizer="ec", regularizer_weight=weight,
                                 normalize=normalize)
    total_deep, terms_deep = deep_terms(deep, X, y, W)
    assert isinstance(linear.objective.regularizer, EnergyConfusion)
    assert terms_lin["regularizer"].item() == pytest.approx(terms_deep["regularizer"].item(),
                                                            rel=1e-6)
    assert terms_lin["metric_loss"].item() == pytest.approx(terms_deep["metric_loss"].item(),
                                                            rel=1e-6)
    assert total_lin.item() == pytest.approx(total_deep.item(), rel=1e-6)
    # and the term is the mean over ordered class pairs, on the loss's representation
    Z = X @ W.T
    if linear.objective.loss.normalize_embeddings:
        Z = torch.nn.functional.normalize(Z, dim=1)
    E = EnergyConfusion(log=True, reduction="sum")(Z, y).item() / (4 * 3)
    assert terms_lin["regularizer"].item() == pytest.approx(E, rel=1e-5)


def test_jrs_is_one_regulariser():
    X, y = batch(seed=2)
    rng = np.random.RandomState(3)
    W = torch.tensor(rng.randn(3, X.shape[1]), dtype=torch.float32)
    b = torch.tensor(rng.randn(3), dtype=torch.float32)
    weight = 0.8
    # the paper's objective (the k-NN neighbour term is JRD's own, not the regulariser's)
    linear = JRD(regularizer_weight=weight, neighbor_weight=0)._make_objective(4, 3, X.shape[1])
    with torch.no_grad():
        linear.L.copy_(W)
        linear.bias.copy_(b)
        linear.am.proxies.copy_(torch.tensor(rng.randn(4, 3), dtype=torch.float32))
    total_lin, terms_lin = linear(X, y)
    deep = DeepMetricTransformer(loss="amsoftmax", loss_params={"scale": 20.0, "margin": 0.1},
                                 regularizer="jrs", regularizer_weight=weight, n_components=3)
    total_deep, terms_deep = deep_terms(deep, X, y, W, b, proxies=linear.am.proxies.detach())
    assert isinstance(linear.objective.regularizer, JRSRegularizer)
    assert terms_lin["regularizer"].item() == pytest.approx(terms_deep["regularizer"].item(),
                                                            rel=1e-6)
    assert total_lin.item() == pytest.approx(total_deep.item(), rel=1e-6)
    # the joint representation: (input, embedding, class cosines)
    E = torch.nn.functional.normalize(X @ W.T + b, dim=1)
    cos = E @ torch.nn.functional.normalize(linear.am.proxies.detach(), dim=1).T
    expected = JRSRegularizer()([X, E, cos], y).item()
    assert terms_lin["regularizer"].item() == pytest.approx(expected, rel=1e-5)


# ----------------------------------------------------------------- one name, one meaning
def test_shared_names_across_learners():
    import inspect

    from skdml import SUML

    names = {cls: set(inspect.signature(cls).parameters)
             for cls in (ECAML, JRD, DeepMetricTransformer, SUML)}
    for cls in (ECAML, JRD, DeepMetricTransformer):
        assert {"regularizer_weight", "learning_rate", "max_iter", "tol", "early_stopping",
                "validation_fraction", "n_iter_no_change", "n_classes_per_batch",
                "n_samples_per_class", "callbacks"} <= names[cls], cls
    for old in ("ec_weight", "jrs_weight"):
        assert not any(old in n for n in names.values())
    # ``solver`` names the algorithm wherever it exists
    assert ECAML().solver == JRD().solver == "adam"
    assert SUML().solver == "conjugate_gradient"
    ECAML(solver="conjugate_gradient")._validate_params()


def test_history_records_share_one_layout():
    from sklearn.datasets import load_digits

    from skdml import SUML

    X, y = load_digits(return_X_y=True)
    X, y = X[:200], y[:200]
    epoch_based = [ECAML(n_components=4, max_iter=2, early_stopping=False),
                   JRD(n_components=4, max_iter=2, early_stopping=False),
                   DeepMetricTransformer(n_components=4, max_iter=2, device="cpu")]
    for est in epoch_based:
        records = est.fit(X, y).history_
        assert [r["epoch"] for r in records] == [1, 2]
        assert {"epoch", "loss", "metric_loss", "seconds"} <= set(records[0]), est
    iterations = [SUML(n_components=4, max_iter=2),
                  ECAML(n_components=4, max_iter=2, solver="conjugate_gradient")]
    for est in iterations:
        records = est.fit(X, y).history_
        assert {"iteration", "loss", "gradient_norm"} <= set(records[0]), est


def test_one_validation_rule():
    """One hold-out rule: the deep learner, like ECAML set for unseen classes, holds out
    whole classes from 5 classes up (ECAML's default task, k-NN on the training classes,
    holds out samples of every class)."""
    from skdml._training import validation_holdout

    y = np.repeat(np.arange(10), 6)
    train, val, kind = validation_holdout(y, None, "auto", np.random.RandomState(0))
    assert kind == "class_disjoint" and len(np.unique(y[val])) == 2
    train, val, kind = validation_holdout(y[y < 4], None, "auto", np.random.RandomState(0))
    assert kind == "stratified" and set(y[val]) <= set(y[train])
    X = np.random.RandomState(0).randn(len(y), 5) + y[:, None]
    deep = DeepMetricTransformer(n_components=3, max_iter=1, early_stopping=True,
                                 device="cpu", random_state=0).fit(X, y)
    linear = ECAML(n_components=3, max_iter=2, early_stopping=True,
                   validation_split="class_disjoint", random_state=0).fit(X, y)
    assert deep.validation_split_ == linear.validation_split_ == "class_disjoint"
    knn = ECAML(n_components=3, max_iter=2, early_stopping=True, random_state=0).fit(X, y)
    assert knn.validation_split_ == "stratified"

"""Issue-39 audit cases: the classic catalogue, the core estimators' API edges, the losses.

See tests/_robustness_cases.py for Case, check and classify. Found by three audits of
this session (the classic learners and the weakly-supervised API; the core estimators
in scikit-learn's and PyTorch's conventions; the losses, callbacks, DeML and export). A case whose old answer was a refusal of
a valid input raises ``Wrong`` itself, so that the refusal is not counted as clear.
Every case runs against the old code too.
"""

from __future__ import annotations

import numpy as np

from _robustness_cases import Case, Wrong, check, deep, linear, quiet  # noqa: F401


def _pairs():
    from skdml.constraints import Constraints
    rng = np.random.RandomState(0)
    yc = np.repeat([0, 1, 2], 10)
    X = np.c_[3.0 * yc + 0.3 * rng.randn(30), rng.randn(30)]
    pairs, y = Constraints(yc).labeled_pairs(20, random_state=0)
    return X, pairs, y


def _iris():
    from sklearn.datasets import load_iris
    return load_iris(return_X_y=True)


def _usable(L, what):
    L = np.asarray(L)
    check(np.all(np.isfinite(L)), f"{what}: non-finite components")
    check(np.any(L != 0), f"{what}: the zero map")
    check(np.linalg.norm(L) > 1e-2, f"{what}: collapsed (norm {np.linalg.norm(L):.1e})")
    return L


def mmc_init(init, diagonal=False):
    def run():
        X, pairs, y = _pairs()
        est = linear("MMC", init=init, diagonal=diagonal, preprocessor=X).fit(pairs, y)
        L = _usable(est.components_, "MMC")
        check(np.all(np.abs(L).sum(axis=0) > 0), "MMC: a feature never weighted")
    return run


def _lfda(**params):
    from skdml.linear import LFDA  # closed form: no random_state
    return LFDA(**params)


def lfda_degenerate(X, y):
    def run():
        _usable(_lfda().fit(X, y).components_, "LFDA")
    return run


def lfda_scale(scale):
    def run():
        X, y = _iris()
        ref = _lfda(n_components=2).fit(X, y).eigenvalues_
        got = _lfda(n_components=2).fit(X * scale, y).eigenvalues_
        check(np.allclose(got, ref, rtol=1e-4), f"eigenvalues {got} against {ref}")
    return run


def scml_cancelling_triplets():
    X = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 2.0]])
    linear("SCML", preprocessor=X).fit(np.array([[0, 1, 1], [1, 2, 2], [2, 0, 0]]))


def scml_constant(basis):
    def run():
        linear("SCML_Supervised", basis=basis).fit(np.ones((20, 3)), np.repeat([0, 1], 10))
    return run


def itml_gamma_inf():
    from sklearn.utils._param_validation import InvalidParameterError
    rng = np.random.RandomState(0)
    try:
        est = linear("ITML", gamma=np.inf).fit(rng.randn(10, 2, 3), np.r_[[1] * 5, [-1] * 5])
    except InvalidParameterError as exc:
        raise Wrong(f"the documented gamma=np.inf refused: {exc}") from exc
    _usable(est.components_, "ITML")


def lmnn_or_mlkr(name, **params):
    def run():
        X, y = _iris()
        _usable(linear(name, max_iter=20, **params).fit(X, y * 1.0 if name == "MLKR" else y)
                .components_, name)
    return run


def lmnn_lda_dependent():
    from sklearn.datasets import load_digits
    X, y = load_digits(return_X_y=True)
    X, y = X[:300, 18:21], y[:300]
    linear("LMNN", init="lda", n_components=4, max_iter=5).fit(np.c_[X, X[:, 0], X[:, 1]], y)


class _FirstFeature:
    @staticmethod
    def make():
        from skdml.linear import BasePairsLearner

        class FirstFeature(BasePairsLearner):
            def __init__(self, preprocessor=None):
                self.preprocessor = preprocessor

            def _fit_tuples(self, pairs, y):
                self.components_ = np.eye(pairs.shape[2])[:1]
        return FirstFeature()


def calibrate_huge():
    pairs = np.array([[[0.0], [1e17]], [[0.0], [2e17]], [[0.0], [3e17]]])
    y = np.array([-1, -1, -1])
    est = _FirstFeature.make().fit(pairs, np.array([1, -1, -1])).calibrate_threshold(pairs, y)
    check(np.all(est.predict(pairs) == -1), f"accept none accepted {est.predict(pairs)}")


def pair_score_01():
    X, pairs, y = _pairs()
    est = linear("ITML", preprocessor=X).fit(pairs, y)
    score = est.score(pairs, (y > 0).astype(int))
    raise Wrong(f"0/1 labels scored {score:.2f} without a word")


def constraints_nan():
    from skdml.constraints import Constraints
    labels = np.array([0.0, 0.0, np.nan, 1.0, 1.0, np.nan])
    pairs, y = Constraints(labels).labeled_pairs(4, random_state=0)
    check(not np.isin(pairs, [2, 5]).any(), "NaN labels drawn as one class")


def suml_two_triplets():
    X = np.random.RandomState(0).randn(50, 5)
    linear("SUML", n_components=2, n_triplets=2, max_iter=3).fit(X)


def _digits_vectors():
    from sklearn.datasets import load_digits
    X, y = load_digits(return_X_y=True)
    keep = y < 4
    return X[keep].astype(np.float32), y[keep]


def deep_refit_dataset():
    import torch
    from torch.utils.data import TensorDataset
    X, y = _digits_vectors()
    est = deep(n_components=4, max_iter=1).fit(X, y)
    est.fit(TensorDataset(torch.from_numpy(X[:, :32].copy()), torch.from_numpy(y)))
    try:
        est.transform(X[:, :32])
    except ValueError as exc:
        raise Wrong(f"refused the shape it was fitted on: {exc}") from exc


def deep_grey_layouts():
    X, y = _digits_vectors()
    grey = X.reshape(-1, 8, 8)
    est = deep(n_components=4, max_iter=1).fit(grey, y)
    try:
        est.transform(grey[:, None])
    except ValueError as exc:
        raise Wrong(f"refused its images with the channel axis: {exc}") from exc


def deep_requires_grad():
    import torch
    X, y = _digits_vectors()
    est = deep(n_components=4, max_iter=1).fit(X, y)
    est.transform(torch.from_numpy(X[:5]).requires_grad_())


def deep_warm_start_below():
    X, y = _digits_vectors()
    est = deep(n_components=4, max_iter=3, warm_start=True, early_stopping=False).fit(X, y)
    est.set_params(max_iter=2).fit(X, y)
    raise Wrong(f"max_iter=2 after {est.n_iter_} epochs: a silent no-op")


def ecaml_stale_loss_option():
    X, y = _iris()
    est = linear("ECAML", max_iter=1, loss="lmnn").set_params(loss__margin=0.5)
    est.set_params(loss="npair").fit(X, y)


def ecaml_constant_start():
    from sklearn.datasets import load_digits
    X, y = load_digits(return_X_y=True)
    init = np.zeros((2, 64))
    init[0, 0] = init[1, 32] = 1.0  # pixels that are 0 in every image
    Z = linear("ECAML", n_components=2, init=init, max_iter=5).fit(X, y).transform(X)
    check(len(np.unique(Z.round(6), axis=0)) > 1, "every sample embedded at one point")


def index_label_precision():
    from skdml.retrieval import RetrievalIndex
    rng = np.random.RandomState(0)
    ids = np.array([2**53 + 1, 2**53 + 2, 2**53 + 3])
    index = RetrievalIndex().fit(rng.randn(3, 2), ids)
    index.add(rng.randn(1, 2), np.array([7.0]))
    check(np.array_equal(index.labels_[:3].astype(np.int64), ids),
          f"labels changed to {index.labels_[:3]}")


def scores_mixed_labels():
    from skdml.metrics import recall_at_k
    rng = np.random.RandomState(0)
    yq, yr = rng.randint(0, 3, 20), rng.randint(0, 3, 30)
    score = recall_at_k(rng.randn(20, 3), yq, X_ref=rng.randn(30, 3), y_ref=yr.astype(str))
    raise Wrong(f"1 and '1' counted as one label (Recall@1 {score:.2f})")


def split_rounding():
    from skdml.model_selection import ClassDisjointSplit
    y = np.repeat(np.arange(100), 2)
    _, test = next(ClassDisjointSplit(1, test_size=0.07, random_state=0).split(
        np.zeros((len(y), 1)), y))
    n = len(np.unique(y[test]))
    check(n == 7, f"test_size=0.07 of 100 classes gave {n} classes")


def lmnn_loss_huge():
    import torch
    from skdml.losses import LMNNLoss
    z = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 1.5], [0.0, 3.0]]) * 1e20
    value = LMNNLoss(n_neighbors=1, reduction="sum")(z, torch.tensor([0, 0, 1, 1])).item()
    check(value != 0.0, "embeddings of 1e20 scored a perfect loss of 0.0")


def loss_zero_row_gradient():
    import torch
    from skdml.losses import TripletLoss
    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(0))
    x[0] = 0.0
    x.requires_grad_()
    TripletLoss()(x, torch.tensor([0, 0, 1])).backward()
    check(float(x.grad.abs().max()) < 1e6, f"a zero row got gradients of {float(x.grad.abs().max()):.1e}")


def loss_subnormal_rows():
    import torch
    from skdml.losses import TripletLoss
    r = torch.randn(6, 5, generator=torch.Generator().manual_seed(0))
    y = torch.tensor([0, 0, 1, 1, 2, 2])
    tiny, ref = TripletLoss()(r * 1e-40, y).item(), TripletLoss()(r, y).item()
    check(abs(tiny - ref) < 1e-3 * ref, f"rows of norm 1e-40 scored {tiny:.4f}, not {ref:.4f}")


def loss_nan_option():
    import torch
    from skdml.losses import BinomialDevianceLoss
    value = BinomialDevianceLoss(scale=float("nan"))(torch.randn(6, 3), torch.tensor([0, 0, 1, 1, 2, 2]))
    check(bool(torch.isfinite(value)), "scale=nan accepted: the loss is NaN")


def loss_truncated_option():
    from skdml.losses import LMNNLoss
    loss = LMNNLoss(n_neighbors=2.5)
    raise Wrong(f"n_neighbors=2.5 accepted as {loss.n_neighbors}")


def callback_wrong_signature():
    from skdml.callbacks import Callback

    class OneArgument(Callback):
        def on_epoch_end(self, info):
            pass

    X, y = _iris()
    linear("ECAML", n_components=2, max_iter=2, callbacks=[OneArgument()]).fit(X, y)


def deml_params_not_a_dict():
    from skdml.deep import make_deml
    make_deml(2, 2, deml_params="x")


def write_race():
    import os
    import tempfile
    from unittest import mock
    from skdml._utils import _files
    folder = tempfile.mkdtemp()
    path = os.path.join(folder, "embedding.pt")
    real = _files.tempfile.mkstemp

    def mkstemp(*args, **kwargs):
        out = real(*args, **kwargs)
        with open(path, "wb") as fh:
            fh.write(b"theirs")
        return out

    from skdml.retrieval import RetrievalIndex
    index = RetrievalIndex().fit(np.random.RandomState(0).randn(5, 2))
    with mock.patch.object(_files.tempfile, "mkstemp", mkstemp):
        index.save(path)
    with open(path, "rb") as fh:
        check(fh.read() == b"theirs", "a file created during the save was replaced")


def lmnn_singletons():
    X = np.random.RandomState(0).randn(6, 3)
    est = linear("LMNN").fit(X, np.arange(6))
    raise Wrong(f"every class a single sample: returned its start ({est.n_iter_} iterations)")


_y3 = np.repeat([0, 1, 2], 5)
CASES = [Case(name, group, quiet(fn), budget) for name, group, fn, budget in [
    ("MMC, zero init", "silent", mmc_init(np.zeros((2, 2))), 30),
    ("MMC_Supervised diagonal, zero init", "silent", mmc_init(np.zeros((2, 2)), True), 30),
    ("MMC diagonal, a zero weight in init", "silent", mmc_init(np.diag([0.0, 1.0]), True), 30),
    ("LFDA, each class one point", "silent",
     lfda_degenerate(np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]])[_y3], _y3), 30),
    ("LFDA, constant X", "silent", lfda_degenerate(np.ones((10, 2)), np.repeat([0, 1], 5)), 30),
    ("LFDA at scale 1e-23", "silent", lfda_scale(1e-23), 30),
    ("LFDA at scale 1e19", "obscure", lfda_scale(1e19), 30),
    ("SCML, triplets whose differences cancel", "slow", scml_cancelling_triplets, 10),
    ("SCML_Supervised triplet_diffs, constant X", "slow", scml_constant("triplet_diffs"), 10),
    ("SCML_Supervised lda, constant X", "obscure", scml_constant("lda"), 30),
    ("ITML(gamma=np.inf)", "obscure", itml_gamma_inf, 30),
    ("LMNN, zero init", "silent", lmnn_or_mlkr("LMNN", init=np.zeros((4, 4))), 30),
    ("LMNN(push_weight=0)", "silent", lmnn_or_mlkr("LMNN", push_weight=0.0), 30),
    ("MLKR, zero init", "silent", lmnn_or_mlkr("MLKR", init=np.zeros((4, 4))), 30),
    ("LMNN init='lda', dependent features", "obscure", lmnn_lda_dependent, 30),
    ("calibrate_threshold, distances 1e17", "silent", calibrate_huge, 30),
    ("pair score, 0/1 labels", "silent", pair_score_01, 30),
    ("Constraints, NaN labels", "silent", constraints_nan, 30),
    ("SUML(n_triplets=2)", "slow", suml_two_triplets, 10),
    ("DeepMetricTransformer refit on a Dataset", "obscure", deep_refit_dataset, 60),
    ("DeepMetricTransformer grey images, (n, 1, H, W)", "obscure", deep_grey_layouts, 60),
    ("DeepMetricTransformer transform, requires_grad", "obscure", deep_requires_grad, 60),
    ("DeepMetricTransformer warm_start, max_iter below", "silent", deep_warm_start_below, 60),
    ("ECAML, a loss option left from another loss", "obscure", ecaml_stale_loss_option, 30),
    ("ECAML, init reading constant pixels", "silent", ecaml_constant_start, 30),
    ("RetrievalIndex.add, float labels to int64 ids", "silent", index_label_precision, 30),
    ("recall_at_k, int y against str y_ref", "silent", scores_mixed_labels, 30),
    ("ClassDisjointSplit(test_size=0.07), 100 classes", "silent", split_rounding, 30),
    ("LMNNLoss, embeddings of 1e20", "silent", lmnn_loss_huge, 30),
    ("TripletLoss, a zero row's gradient", "silent", loss_zero_row_gradient, 30),
    ("TripletLoss, rows of norm 1e-40", "silent", loss_subnormal_rows, 30),
    ("BinomialDevianceLoss(scale=nan)", "silent", loss_nan_option, 30),
    ("LMNNLoss(n_neighbors=2.5)", "silent", loss_truncated_option, 30),
    ("callback hook without the estimator argument", "obscure", callback_wrong_signature, 60),
    ("make_deml(deml_params='x')", "obscure", deml_params_not_a_dict, 30),
    ("RetrievalIndex.save, a file created during the write", "silent", write_race, 30),
    ("LMNN, every class a single sample", "silent", lmnn_singletons, 30),
]]

"""Tests of skdml.ECAML and of the shared supervised linear core (skdml.linear._supervised)."""

import warnings

import numpy as np
import pytest
import torch
from sklearn.datasets import make_classification
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import GridSearchCV
from sklearn.neighbors import KNeighborsClassifier
from sklearn.pipeline import make_pipeline

from skdml import ECAML
from skdml.linear._preprocessing import orthonormal_rows, qr_retraction

pytestmark = [pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning"),
              pytest.mark.filterwarnings("ignore:.*L is orthogonal:UserWarning")]


@pytest.fixture(autouse=True)
def _one_blas_thread():
    """The shared 2-core test machine: multi-threaded BLAS was measured 10x slower here."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):
        yield


def losses(est):
    """Objective per epoch of the run that made ``components_`` (the refit, if any)."""
    refit = [h["loss"] for h in est.history_ if h.get("refit")]
    return np.array(refit or [h["loss"] for h in est.history_])


def validation_scores(est):
    return np.array([h["validation_score"] for h in est.history_ if "validation_score" in h])


def _data(n_samples=120, n_features=10, n_classes=4, seed=0):
    X, y = make_classification(n_samples=n_samples, n_features=n_features, n_informative=4,
                               n_redundant=0, n_classes=n_classes, n_clusters_per_class=1,
                               class_sep=2.0, random_state=seed)
    return X, y


def _two_informative(n_samples=200, seed=0):
    """Only features 0 and 1 carry the class; 18 noisy features of larger variance."""
    rng = np.random.RandomState(seed)
    y = rng.randint(0, 4, n_samples)
    centers = np.array([[0, 0], [0, 1], [1, 0], [1, 1]], dtype=float) * 3.0
    X = np.hstack([centers[y] + 0.5 * rng.randn(n_samples, 2), 4.0 * rng.randn(n_samples, 18)])
    return X, y


@pytest.mark.parametrize("solver", ["adam", "conjugate_gradient"])
@pytest.mark.parametrize("loss", ["lmnn", "binomial", "triplet", "npair"])
def test_solvers_reduce_objective(solver, loss):
    X, y = _data()
    est = ECAML(n_components=3, loss=loss, solver=solver, init="random", max_iter=15,
                early_stopping=False, random_state=0).fit(X, y)
    hist = losses(est)
    assert len(hist) >= 2 and np.all(np.isfinite(hist))
    assert hist[-1] < hist[0]
    if solver == "conjugate_gradient":  # deterministic cost: CG with line search never increases it
        assert np.all(np.diff(hist) <= 1e-6 * np.abs(hist[:-1]) + 1e-7)


@pytest.mark.parametrize("solver", ["adam", "conjugate_gradient"])
def test_stiefel_keeps_orthonormal_rows(solver):
    X, y = _data()
    est = ECAML(n_components=3, solver=solver, manifold="stiefel", max_iter=10,
                random_state=0).fit(X, y)
    L = est.components_
    np.testing.assert_allclose(L @ L.T, np.eye(3), atol=1e-8)


def test_euclidean_manifold_is_unconstrained():
    X, y = _data()
    est = ECAML(n_components=3, loss="npair", manifold="euclidean", max_iter=20,
                learning_rate=0.05, random_state=0).fit(X, y)
    gram = est.components_ @ est.components_.T
    assert not np.allclose(gram, np.eye(3), atol=1e-3)
    assert losses(est)[-1] < losses(est)[0]


def test_qr_retraction_and_orthonormal_rows():
    rng = np.random.RandomState(0)
    A = torch.tensor(rng.randn(3, 7))
    Q = qr_retraction(A)
    np.testing.assert_allclose((Q @ Q.T).numpy(), np.eye(3), atol=1e-12)
    # same row space: projecting A's rows onto Q's rows leaves them unchanged
    np.testing.assert_allclose((A @ Q.T @ Q).numpy(), A.numpy(), atol=1e-10)
    # a point already on the manifold is a fixed point
    np.testing.assert_allclose(qr_retraction(Q).numpy(), Q.numpy(), atol=1e-12)
    # Gram-Schmidt keeps the preferred order and skips dependent rows
    rows = np.array([[1.0, 0, 0], [2.0, 0, 0], [1.0, 1.0, 0]])
    B = orthonormal_rows(rows, 3, 0)
    np.testing.assert_allclose(B @ B.T, np.eye(3), atol=1e-12)
    np.testing.assert_allclose(np.abs(B[:2]), [[1, 0, 0], [0, 1, 0]], atol=1e-12)


@pytest.mark.parametrize("init", ["pca", "lda", "identity", "random"])
def test_init_options(init):
    X, y = _data()
    est = ECAML(n_components=3, init=init, max_iter=2, random_state=0).fit(X, y)
    assert est.components_.shape == (3, 10)


def test_pca_init_matches_principal_axes():
    X, y = _data()
    from sklearn.decomposition import PCA

    est = ECAML(n_components=2, init="pca", max_iter=1, learning_rate=1e-6,
                random_state=0).fit(X, y)
    axes = PCA(2).fit(X).components_
    np.testing.assert_allclose(np.abs(np.sum(est.components_ * axes, axis=1)), 1.0, atol=1e-3)


def test_init_array_is_used_and_checked():
    X, y = _data()
    rng = np.random.RandomState(1)
    A = np.linalg.qr(rng.randn(10, 3))[0].T
    est = ECAML(init=A, max_iter=1, learning_rate=1e-6, random_state=0).fit(X, y)
    assert est.components_.shape == (3, 10)
    np.testing.assert_allclose(est.components_, A, atol=1e-4)
    with pytest.raises(ValueError, match="shape"):
        ECAML(init=np.eye(3, 9)).fit(X, y)
    with pytest.raises(ValueError, match="n_components"):
        ECAML(n_components=2, init=A).fit(X, y)
    with pytest.raises(ValueError, match="NaN"):
        ECAML(init=np.full((3, 10), np.nan)).fit(X, y)


@pytest.mark.parametrize("solver", ["adam", "conjugate_gradient"])
def test_random_state_reproducible(solver):
    X, y = _data()
    kw = dict(n_components=3, solver=solver, max_iter=5, init="random")
    a = ECAML(random_state=3, **kw).fit(X, y).components_
    b = ECAML(random_state=3, **kw).fit(X, y).components_
    c = ECAML(random_state=4, **kw).fit(X, y).components_
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, c)


def test_clear_errors():
    X, y = _data()
    with pytest.raises(ValueError, match="at least 2 classes"):
        ECAML().fit(X, np.zeros(len(X)))
    y_one = y.copy()
    y_one[0] = 99
    with pytest.raises(ValueError, match="only 1 sample"):
        ECAML().fit(X, y_one)
    X_nan = X.copy()
    X_nan[3, 2] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        ECAML().fit(X_nan, y)
    X_inf = X.copy()
    X_inf[0, 0] = np.inf
    with pytest.raises(ValueError, match="infinity"):
        ECAML().fit(X_inf, y)
    with pytest.raises(ValueError, match="n_components=11 must be <= n_features=10"):
        ECAML(n_components=11).fit(X, y)
    with pytest.raises(ValueError, match="n_reduce"):
        ECAML(n_components=5, n_reduce=3).fit(X, y)
    with pytest.raises(ValueError):
        ECAML().fit(X[:0], y[:0])
    with pytest.raises(ValueError, match="loss"):
        ECAML(loss="nope").fit(X, y)


def test_pml_loss_callable():
    pml_losses = pytest.importorskip("pytorch_metric_learning.losses")
    X, y = _data()
    est = ECAML(n_components=3, loss=pml_losses.TripletMarginLoss(margin=0.1), regularizer_weight=0.05,
                max_iter=10, learning_rate=0.01, early_stopping=False, random_state=0).fit(X, y)
    assert losses(est)[-1] < losses(est)[0]
    assert est._resolved_ec_weight() == 0.05


def test_ec_weight_auto_uses_paper_values():
    assert ECAML(loss="triplet")._resolved_ec_weight() == 0.02
    assert ECAML(loss="npair")._resolved_ec_weight() == 0.3
    assert ECAML(loss="binomial")._resolved_ec_weight() == 0.13
    assert ECAML(loss=lambda z, t: z.sum())._resolved_ec_weight() == 0.1


def test_energy_confusion_pulls_classes_together():
    """A large EC weight gives a smaller between-class energy of the embedding than none."""
    from skdml.losses import EnergyConfusion

    X, y = _data()
    energies = []
    for weight in (0.0, 5.0):
        est = ECAML(n_components=3, regularizer_weight=weight, solver="conjugate_gradient", max_iter=30,
                    random_state=0).fit(X, y)
        Z = torch.nn.functional.normalize(torch.tensor(est.transform(X - X.mean(0))), dim=1)
        energies.append(float(EnergyConfusion(log=False, reduction="mean")(Z, torch.tensor(y))))
    assert energies[1] < energies[0]


def test_high_dimensional_input_reduced_and_folded():
    rng = np.random.RandomState(0)
    y = np.repeat(np.arange(4), 20)
    X = rng.randn(80, 600) + 2.0 * np.eye(4, 600)[y] * 5
    est = ECAML(n_components=5, manifold="stiefel", max_iter=5, random_state=0).fit(X, y)
    assert est.components_.shape == (5, 600)
    np.testing.assert_allclose(est.components_ @ est.components_.T, np.eye(5), atol=1e-8)
    assert est.transform(X).shape == (80, 5)
    # explicit reduction
    est = ECAML(n_components=5, n_reduce=20, max_iter=5, random_state=0).fit(X, y)
    assert est.components_.shape == (5, 600)
    # the learned map lives in the span of the centred training data
    Xc = X - X.mean(0)
    _, _, Vt = np.linalg.svd(Xc, full_matrices=False)
    np.testing.assert_allclose(est.components_ @ Vt.T @ Vt, est.components_, atol=1e-8)


def test_convergence_warning_and_n_iter():
    X, y = _data()
    with pytest.warns(ConvergenceWarning, match="did not converge"):
        est = ECAML(n_components=3, max_iter=1, early_stopping=False, random_state=0).fit(X, y)
    assert est.n_iter_ == 1
    with pytest.warns(ConvergenceWarning, match="did not converge"):
        est = ECAML(n_components=3, max_iter=1, random_state=0).fit(X, y)
    assert est.n_iter_ == 1 and est.best_iteration_ in (0, 1)  # 0: the start was kept
    with pytest.warns(ConvergenceWarning):
        est = ECAML(n_components=3, solver="conjugate_gradient", max_iter=1, random_state=0).fit(X, y)
    assert est.n_iter_ == 1 and len(est.history_) == 2


def test_full_rank_stiefel_warns():
    X, y = _data()
    with pytest.warns(UserWarning, match="Euclidean one"):
        ECAML(manifold="stiefel", max_iter=1).fit(X, y)


def test_minibatch_stops_on_plateau():
    X, y = _data()
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        est = ECAML(n_components=3, max_iter=500, tol=10.0, early_stopping=False,
                    random_state=0).fit(X, y)
    assert est.n_iter_ == 10 + 1  # first epoch sets the best loss, then 10 without improvement


def test_verbose_prints_a_table(capsys):
    X, y = _data()
    ECAML(max_iter=2, verbose=1, early_stopping=False, random_state=0).fit(X, y)
    captured = capsys.readouterr()
    out = captured.out
    assert "epoch" in out and "metric_loss" in out and len(out.strip().splitlines()) == 3
    assert "ECAML" in captured.err and "step/s" in captured.err  # the tqdm bar
    est = ECAML(max_iter=2, verbose=1, early_stopping=True, random_state=0).fit(X, y)
    captured = capsys.readouterr()
    # per candidate loss (loss="auto": LMNN, binomial): a header + 2 epochs with their
    # validation score; then the refit's header + epochs
    runs = len(est.candidate_scores_)
    assert runs == 2 and captured.out.count("validation_score") == runs
    refit = 1 + est.best_iteration_ if est.best_iteration_ else 0
    assert len(captured.out.strip().splitlines()) == runs * (1 + 2) + refit
    assert "ECAML (refit)" in captured.err
    ECAML(solver="conjugate_gradient", max_iter=2, verbose=2, random_state=0).fit(X, y)
    assert "Cost" in capsys.readouterr().out  # pymanopt's own table at verbose=2
    ECAML(max_iter=2, random_state=0).fit(X, y)
    assert capsys.readouterr() == ("", "")  # silent by default


def test_pipeline_and_grid_search_with_class_disjoint_split():
    from skdml.metrics import recall_at_k_scorer
    from skdml.model_selection import ClassDisjointSplit

    X, y = _data(n_samples=160, n_classes=8, n_features=8)
    pipe = make_pipeline(ECAML(n_components=3, max_iter=3, random_state=0),
                         KNeighborsClassifier(3)).fit(X, y)
    assert pipe.score(X, y) > 0.5
    search = GridSearchCV(ECAML(n_components=3, max_iter=3, random_state=0),
                          {"regularizer_weight": [0.0, 0.5]}, cv=ClassDisjointSplit(n_splits=2,
                                                                           random_state=0),
                          scoring=recall_at_k_scorer(1)).fit(X, y)
    assert search.best_params_["regularizer_weight"] in (0.0, 0.5)
    assert 0.0 <= search.best_score_ <= 1.0


def test_float32_input_and_feature_names():
    pd = pytest.importorskip("pandas")
    X, y = _data()
    est = ECAML(n_components=2, max_iter=2, random_state=0).fit(X.astype(np.float32), y)
    assert est.transform(X.astype(np.float32)).dtype == np.float32
    df = pd.DataFrame(X, columns=[f"f{i}" for i in range(10)])
    est.fit(df, y)
    assert list(est.get_feature_names_out()) == ["ecaml0", "ecaml1"]


def test_early_stopping_refits_for_the_best_epoch_count(monkeypatch):
    import skdml.linear._supervised as linear

    monkeypatch.setattr(linear, "MIN_STEPS_NO_CHANGE", 0)  # patience: n_iter_no_change epochs
    X, y = _data(n_samples=200)
    est = ECAML(n_components=3, early_stopping=True, validation_fraction=0.2, max_iter=60,
                random_state=0).fit(X, y)
    scores = validation_scores(est)
    best_epoch = len(scores) - int(np.argmax(scores[::-1]))  # the latest of the best epochs
    assert est.best_iteration_ == best_epoch and est.best_validation_score_ == scores.max()
    # validation stopped N_ITER_NO_CHANGE epochs without improvement (or ran to max_iter)
    first_best = int(np.argmax(scores)) + 1
    assert len(scores) == 60 or len(scores) - first_best >= est.n_iter_no_change
    assert 0.5 < est.best_validation_score_ <= 1.0
    # the final fit is the refit on all the data for best_epoch epochs
    assert est.n_iter_ == best_epoch and len(losses(est)) == best_epoch
    # the validation run cut at best_epoch has the same best epoch, hence the same refit
    again = ECAML(n_components=3, early_stopping=True, validation_fraction=0.2,
                  max_iter=best_epoch, random_state=0).fit(X, y)
    assert again.best_iteration_ == best_epoch
    np.testing.assert_allclose(again.components_, est.components_, atol=1e-6)


def test_validation_score_is_mean_knn_accuracy():
    import skdml.linear._validation as linear

    X, y = _data(n_samples=150, n_features=6, n_classes=3)
    L = np.random.RandomState(0).randn(2, 6)
    tr, va = np.arange(100), np.arange(100, 150)
    score = linear.knn_score(torch.as_tensor(L, dtype=torch.float64), torch.as_tensor(X[tr]),
                              torch.as_tensor(X[va]), y[tr], y[va])
    Z = X @ L.T
    expected = np.mean([KNeighborsClassifier(k).fit(Z[tr], y[tr]).score(Z[va], y[va])
                        for k in linear.VALIDATION_KS])
    assert score == pytest.approx(expected)


def test_per_sample_validation_scores_are_the_votes_and_average_to_the_score():
    import skdml.linear._validation as linear

    rng = np.random.RandomState(0)
    for trial in range(20):  # ties on a grid, labels absent from the training part
        n = rng.randint(14, 60)
        X = np.round(rng.randn(n, 3), 1)
        y = rng.randint(0, 4, n).astype(str) if trial % 2 else rng.randint(0, 4, n)
        L = torch.as_tensor(rng.randn(2, 3))
        tr, va = np.arange(n) < 0.7 * n, np.arange(n) >= 0.7 * n
        args = L, torch.as_tensor(X[tr]), torch.as_tensor(X[va]), y[tr], y[va]
        per_sample = linear.knn_sample_scores(*args)
        assert per_sample.mean() == pytest.approx(linear.knn_score(*args), abs=1e-12)
        # brute force: each k's vote among the k nearest (by distance, then index)
        Z = X @ L.numpy().T
        d = ((Z[va][:, None] - Z[tr][None]) ** 2).sum(-1)
        order = np.lexsort((np.broadcast_to(np.arange(tr.sum()), d.shape), d), axis=1)
        classes = np.unique(y[tr])
        expected = np.zeros(va.sum())
        for k in linear.VALIDATION_KS:
            k = min(k, tr.sum())
            for i, row in enumerate(order):
                counts = [(y[tr][row[:k]] == c).sum() for c in classes]
                expected[i] += classes[int(np.argmax(counts))] == y[va][i]
        np.testing.assert_allclose(per_sample, expected / len(linear.VALIDATION_KS))


def test_stratified_paired_test_is_off_by_default(monkeypatch):
    import skdml.linear._validation as linear

    gains = np.array([0.5, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])  # one sample better
    assert linear.improves(0.55, 0.5, 1e-4, gains)  # off: the mean alone
    monkeypatch.setattr(linear, "STRATIFIED_SIGNIFICANCE_Z", 2.0)
    assert not linear.improves(0.55, 0.5, 1e-4, gains)  # 1 of 10: within the noise
    assert linear.improves(0.55, 0.5, 1e-4, np.full(10, 0.05))


def test_early_stopping_auto_needs_three_samples_in_a_class():
    X, y = _data(n_samples=60)
    assert hasattr(ECAML(n_components=2, max_iter=3, random_state=0).fit(X, y),
                   "best_iteration_")
    est = ECAML(n_components=2, max_iter=3, early_stopping=False, random_state=0).fit(X, y)
    assert len(validation_scores(est)) == 0 and est.n_iter_ == 3
    X2 = np.random.RandomState(0).randn(8, 3)
    y2 = np.repeat([0, 1, 2, 3], 2)
    est = ECAML(n_components=2, max_iter=3, random_state=0).fit(X2, y2)  # "auto": no hold-out
    assert len(validation_scores(est)) == 0 and not hasattr(est, "best_iteration_")


def test_early_stopping_needs_a_validation_sample():
    X = np.random.RandomState(0).randn(8, 3)
    y = np.repeat([0, 1, 2, 3], 2)
    with pytest.raises(ValueError, match="validation"):
        ECAML(n_components=2, early_stopping=True).fit(X, y)


@pytest.mark.parametrize("solver", ["adam", "conjugate_gradient"])
def test_non_finite_objective_raises_and_leaves_the_estimator_as_it_was(solver):
    """A NaN objective used to run to max_iter and return all-NaN components_."""
    from skdml.deep import NonFiniteLossError

    X, y = _data()
    est = ECAML(n_components=3, max_iter=2, random_state=0).fit(X, y)
    before = est.components_.copy()
    est.set_params(loss=lambda z, labels: z.sum() * float("nan"), solver=solver)
    with pytest.raises(NonFiniteLossError, match="Non-finite"):
        est.fit(X, y)
    np.testing.assert_array_equal(est.components_, before)  # the failed fit changed nothing
    with pytest.raises(NonFiniteLossError):
        ECAML(loss=lambda z, labels: z.sum() * float("nan"), solver=solver).fit(X, y)


def test_max_iter_zero_is_the_initialisation():
    X, y = _data()
    start = ECAML(n_components=3, max_iter=0, random_state=0).fit(X, y)
    assert start.n_iter_ == 0 and start.history_ == []
    from sklearn.decomposition import PCA

    axes = PCA(3).fit(X).components_
    np.testing.assert_allclose(np.abs(np.sum(start.components_ * axes, axis=1)), 1.0, atol=1e-6)


@pytest.mark.parametrize("learner", ["ECAML", "JRD"])
def test_a_start_that_reads_constant_features_is_refused(learner):
    import skdml
    from sklearn.datasets import load_digits
    X, y = load_digits(return_X_y=True)  # pixels 0 and 32 are 0 in every image
    init = np.zeros((2, 64))
    init[0, 0] = init[1, 32] = 1.0
    with pytest.raises(ValueError, match="onto 0 directions with any spread"):
        getattr(skdml, learner)(n_components=2, init=init, max_iter=2).fit(X, y)
    with pytest.raises(ValueError, match="init='identity' maps X onto 7 directions"):
        getattr(skdml, learner)(n_components=8, init="identity", max_iter=2).fit(X, y)


@pytest.mark.parametrize("learner", ["ECAML", "JRD"])
def test_the_unseen_class_setting_fits_three_classes(learner):
    # early_stopping="auto" held 2 of 3 classes out and raised ("leave 1 for training"),
    # naming validation_fraction, which the user never set; it then trained on all three,
    # unguarded; it now keeps the start, with a warning (the unseen-class guard cannot run:
    # tests/linear/test_unseen_classes.py), and early_stopping=False trains on all three
    import skdml
    from sklearn.datasets import load_iris
    X, y = load_iris(return_X_y=True)
    with pytest.warns(UserWarning, match="kept its start"):
        est = getattr(skdml, learner)(validation_split="class_disjoint", max_iter=5,
                                      random_state=0).fit(X, y)
    assert est.n_iter_ == 0 and est.best_iteration_ == 0
    with pytest.warns(ConvergenceWarning):  # 5 epochs of training, cut short
        est.set_params(early_stopping=False).fit(X, y)
    assert est.n_iter_ == 5 and not hasattr(est, "best_iteration_")
    with pytest.raises(ValueError, match="early_stopping=False trains on every class"):
        est.set_params(early_stopping=True).fit(X, y)


def test_the_conjugate_gradient_solver_counts_what_it_ran_and_stays_quiet():
    from sklearn.datasets import load_wine
    from sklearn.preprocessing import StandardScaler

    from skdml import JRD
    X, y = load_wine(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    est = ECAML(solver="conjugate_gradient", tol=1e6, random_state=0).fit(X, y)
    assert est.n_iter_ == 0 and [r["iteration"] for r in est.history_] == [0]  # was n_iter_ 1
    with warnings.catch_warnings():
        # pymanopt's Hestenes-Stiefel beta is 0/0 after a failed line search: numpy's
        # "invalid value encountered in scalar divide" reached the user
        warnings.simplefilter("error", RuntimeWarning)
        JRD(n_components=3, solver="conjugate_gradient", random_state=0).fit(X, y)


@pytest.mark.parametrize("learner", ["ECAML", "JRD"])
def test_an_lda_start_is_scored_on_samples_whose_labels_it_did_not_read(learner):
    # The "lda" start was fitted on every label, the hold-out's too, before the hold-out
    # was drawn: on pure noise its held-out k-NN accuracy read 0.63-0.88 (chance: 0.25), so
    # keeping the start looked right and best_validation_score_ overstated it
    import skdml
    scores = []
    for seed in range(3):
        rng = np.random.RandomState(seed)
        X, y = rng.randn(120, 60), np.repeat(np.arange(4), 30)
        est = getattr(skdml, learner)(init="lda", n_components=3, max_iter=1, tol=10.0,
                                      early_stopping=True, random_state=seed).fit(X, y)
        assert est.best_iteration_ == 0  # tol=10: the start is kept, and scored
        scores.append(est.best_validation_score_)
    assert np.mean(scores) < 0.4


def test_a_stratified_validation_run_starts_from_its_training_rows(monkeypatch):
    from skdml.linear import _jrd
    seen = []
    init_extras = _jrd._JRDObjective.init_extras
    monkeypatch.setattr(_jrd._JRDObjective, "init_extras",
                        lambda self, X, y: (seen.append(len(y)), init_extras(self, X, y))[1])
    X, y = _data(n_samples=120)
    _jrd.JRD(max_iter=2, early_stopping=True, random_state=0).fit(X, y)
    n_val = 120 - seen[0]
    assert n_val > 0  # the proxies (class means) of the validation runs omit the hold-out
    assert seen[:2] == [120 - n_val] * 2  # one run per neighbour-weight candidate


def test_held_out_classes_start_with_uninformed_proxies(monkeypatch):
    # class-disjoint: a held-out class has no training sample; its proxy started at its
    # held-out samples' mean, a negative the validation run trained against
    from skdml.linear import _jrd
    seen = []
    init_extras = _jrd._JRDObjective.init_extras

    def record(self, X, y):
        init_extras(self, X, y)
        seen.append((np.unique(y.numpy()), self.am.proxies.detach().numpy().copy()))

    monkeypatch.setattr(_jrd._JRDObjective, "init_extras", record)
    rng = np.random.RandomState(0)
    X, y = rng.randn(200, 10), np.repeat(np.arange(20), 10)
    est = _jrd.JRD(validation_split="class_disjoint", max_iter=2, early_stopping=True,
                   random_state=0).fit(X, y)
    classes, proxies = seen[0]
    held_out = np.setdiff1d(np.arange(20), classes)
    assert held_out.size >= 2  # the validation run read its training classes only
    assert np.isfinite(proxies).all()  # a class without samples: a random unit direction
    np.testing.assert_allclose(np.linalg.norm(proxies, axis=1), 1.0, rtol=1e-5)
    assert np.isfinite(est.proxies_).all()


@pytest.mark.parametrize("learner, params", [
    ("ECAML", {}), ("ECAML", {"loss": "lmnn"}),
    ("JRD", {"neighbor_weight": 0.0}), ("JRD", {"neighbor_weight": 1.0}),
])
def test_the_batch_solver_gets_the_gradient_of_its_cost(learner, params, monkeypatch):
    # JRD's regulariser held its bandwidth tau constant in the gradient but not in the cost:
    # the conjugate gradient's line search then stopped early (13 of 200 iterations, at
    # a cost 20 % above the one it reached with the true gradient) and called it converged
    import skdml
    from skdml.linear import _jrd, _supervised
    monkeypatch.setattr(_supervised, "DTYPE", torch.float64)  # finite differences in float64
    monkeypatch.setattr(_jrd, "DTYPE", torch.float64)
    errors = []

    def checked(manifold, cost, gradient, start, **kwargs):
        rng = np.random.RandomState(1)
        point = start if isinstance(start, list) else [start]
        point = [p + 0.1 * rng.randn(*p.shape) for p in point]  # off the start's symmetries
        direction = [rng.randn(*p.shape) for p in point]
        grads = gradient(*point)
        grads = grads if isinstance(grads, tuple) else (grads,)
        slope = sum(float(np.sum(g * d)) for g, d in zip(grads, direction))
        h = 1e-6
        up = cost(*[p + h * d for p, d in zip(point, direction)])
        down = cost(*[p - h * d for p, d in zip(point, direction)])
        errors.append(abs((up - down) / (2 * h) - slope) / abs(slope))
        return run_manopt(manifold, cost, gradient, start, **kwargs)

    run_manopt = _supervised.run_manopt
    monkeypatch.setattr(_supervised, "run_manopt", checked)
    X, y = _data(n_samples=48, n_features=5)
    getattr(skdml, learner)(n_components=3, solver="conjugate_gradient", max_iter=2,
                            random_state=0, **params).fit(X, y)
    assert errors and errors[0] < 1e-6


def test_loss_params_nested_names_set_the_loss_parameters_like_the_deep_learner():
    est = ECAML(loss="triplet").set_params(loss_params__margin=0.3)
    assert est.loss_params == {"margin": 0.3}
    est = ECAML(loss="triplet", loss_params={"margin": 0.1}).set_params(loss_params__margin=0.2)
    assert est.loss_params == {"margin": 0.2}


@pytest.mark.parametrize("learner", ["ECAML", "JRD"])
def test_an_int_n_reduce_bounds_the_default_n_components(learner):
    import skdml

    learner = getattr(skdml, learner)
    rng = np.random.RandomState(0)
    y = np.repeat(np.arange(3), 10)
    X = rng.randn(30, 40) + y[:, None]
    est = learner(n_reduce=10, max_iter=1, random_state=0).fit(X, y)
    assert est.components_.shape == (10, 40)
    with pytest.raises(ValueError, match="n_reduce=10 is smaller than n_components=20"):
        learner(n_components=20, n_reduce=10, max_iter=1).fit(X, y)


def test_set_params_names_an_unknown_loss_as_such():
    from skdml import DeepMetricTransformer

    with pytest.raises(ValueError, match="'contrastive' is not a loss name"):
        DeepMetricTransformer(loss="contrastive").set_params(loss__margin=0.2)


def test_one_dimension_on_unit_embeddings_says_the_map_cannot_move():
    # a unit 1-d embedding is the sign of Lx, whose gradient is 0: the fit returned its start
    # bit for bit, quietly
    from sklearn.datasets import load_wine
    from sklearn.preprocessing import StandardScaler

    X, y = load_wine(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    kw = dict(n_components=1, early_stopping=False, max_iter=20, random_state=0)
    with pytest.warns(UserWarning, match="n_components=1 with a loss on unit embeddings"):
        ECAML(loss="binomial", **kw).fit(X, y)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="n_components=1")
        ECAML(loss="lmnn", **kw).fit(X, y)  # raw distances learn in 1-d: no warning


class _EpochMaps:
    """A callback keeping the learner's map after every epoch (and the worst |L L^T - I|)."""

    def __new__(cls):
        from skdml.callbacks import Callback

        class EpochMaps(Callback):
            def __init__(self):
                self.maps, self.worst_gram = {}, 0.0

            def on_epoch_end(self, estimator, info):
                L = info.optimizer.param_groups[0]["params"][0].detach().double().numpy()
                self.maps[info.epoch] = L.copy()
                self.worst_gram = max(self.worst_gram,
                                      np.abs(L @ L.T - np.eye(len(L))).max())

        return EpochMaps()


def test_a_class_disjoint_fit_returns_its_best_epochs_map():
    # without a refit the validated run is the model: its map must be the best epoch's (the
    # stratified default refits from the start, which hid a run returning its last epoch)
    rng = np.random.RandomState(0)
    y = np.repeat(np.arange(30), 20)  # the class is in 4 features; 12 are loud noise
    X = np.c_[rng.randn(30, 4)[y] * 2.0 + 0.5 * rng.randn(600, 4), 3.0 * rng.randn(600, 12)]
    maps = _EpochMaps()
    est = ECAML(n_components=4, loss="binomial", validation_split="class_disjoint",
                max_iter=60, n_iter_no_change=3, standardize=False, random_state=0,
                callbacks=[maps]).fit(X, y)  # raw features: components_ is the map itself
    best, last = est.best_iteration_, max(maps.maps)
    assert 0 < best < last  # the case: the run went on past its best epoch
    np.testing.assert_allclose(est.components_, maps.maps[best], atol=1e-6)
    assert np.abs(est.components_ - maps.maps[last]).max() > 1e-3


def test_stiefel_steps_stay_on_the_manifold_during_training():
    # the final polar() orthonormalises any map: only the maps of the epochs show that each
    # step is retracted onto the manifold (without it, |L L^T - I| drifted to 5.5)
    rng = np.random.RandomState(0)
    y = np.repeat(np.arange(4), 20)
    X = rng.randn(80, 10) + 3.0 * np.eye(4, 10)[y]
    maps = _EpochMaps()
    ECAML(n_components=3, manifold="stiefel", max_iter=20, early_stopping=False,
          learning_rate=0.05, random_state=0, callbacks=[maps]).fit(X, y)
    assert len(maps.maps) > 5 and maps.worst_gram < 1e-5


def test_the_refit_starts_from_the_validation_runs_start(monkeypatch):
    import skdml.linear._supervised as linear

    starts = []
    real = linear.train_epochs

    def spy(trainable, *args, **kwargs):
        starts.append(trainable.objective.L.detach().clone())
        return real(trainable, *args, **kwargs)

    monkeypatch.setattr(linear, "train_epochs", spy)
    X, y = make_classification(n_samples=200, n_features=6, n_informative=4, n_classes=3,
                               random_state=0)
    est = ECAML(n_components=3, early_stopping=True, validation_fraction=0.2, max_iter=20,
                random_state=0).fit(X, y)
    # validation run(s), one per candidate, then the refit (the last call)
    assert est.best_iteration_ > 0 and est.history_[-1].get("refit") and len(starts) >= 2
    # "from the same start": the refit begins where a validation run began, not at its trained map
    assert any(torch.equal(starts[-1], s) for s in starts[:-1])

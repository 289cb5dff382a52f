"""skdml.linear.LMNN: the exact loss and gradient, learning, and metric-learn's optimum."""

import warnings

import numpy as np
import pytest
import torch
from _classic_data import knn_score, noisy_classes
from _metric_learn import needs_metric_learn, run_metric_learn
from sklearn.exceptions import ConvergenceWarning

import skdml.linear._lmnn as lmnn_module
from skdml.linear import LMNN
from skdml.linear._lmnn import lmnn_loss_grad, target_neighbors


def _loop_loss(L, X, y, targets, mu):
    """LMNN's loss as the paper writes it, a loop over (i, j, l), differentiable by autograd."""
    Z = torch.as_tensor(X) @ L.T
    D = ((Z[:, None] - Z[None]) ** 2).sum(-1)
    loss = 0.0
    for i in range(len(X)):
        for j in targets[i]:
            if j < 0:
                continue
            loss = loss + (1 - mu) * D[i, j]
            for l in np.flatnonzero(y != y[i]):
                loss = loss + mu * torch.relu(1 + D[i, j] - D[i, l])
    return loss


@pytest.mark.parametrize("block", [2 ** 22, 37])
@pytest.mark.parametrize("mu", [0.5, 0.9])
def test_loss_and_gradient_match_the_loop_under_autograd(block, mu, monkeypatch):
    monkeypatch.setattr(lmnn_module, "BLOCK_ELEMENTS", block)  # one block, then many
    rng = np.random.RandomState(0)
    X, y = rng.randn(30, 4), np.r_[np.zeros(14), np.ones(14), [2, 3]].astype(int)
    targets = target_neighbors(X, y, 3)  # classes 2 and 3: one sample, no target
    L = torch.tensor(rng.randn(2, 4), requires_grad=True)
    expected = _loop_loss(L, X, y, targets, mu)
    expected.backward()
    loss, grad = lmnn_loss_grad(L.detach(), torch.as_tensor(X), torch.as_tensor(y),
                                torch.as_tensor(targets), mu)
    assert loss == pytest.approx(float(expected.detach()), rel=1e-12)
    np.testing.assert_allclose(grad.numpy(), L.grad.numpy(), rtol=1e-10, atol=1e-10)


def test_gradient_matches_finite_differences():
    rng = np.random.RandomState(1)
    X, y = rng.randn(25, 3), rng.randint(0, 3, 25)
    args = (torch.as_tensor(X), torch.as_tensor(y), torch.as_tensor(target_neighbors(X, y, 2)),
            0.5)
    L = rng.randn(3, 3)
    _, grad = lmnn_loss_grad(torch.as_tensor(L), *args)
    eps = 1e-6
    for idx in np.ndindex(L.shape):
        step = np.zeros_like(L)
        step[idx] = eps
        numeric = (lmnn_loss_grad(torch.as_tensor(L + step), *args)[0]
                   - lmnn_loss_grad(torch.as_tensor(L - step), *args)[0]) / (2 * eps)
        assert grad.numpy()[idx] == pytest.approx(numeric, rel=1e-4, abs=1e-4)


def test_target_neighbours_are_fixed_in_the_input_space():
    X, y = noisy_classes(n=60)
    est = LMNN(max_iter=10).fit(X, y)
    np.testing.assert_array_equal(est.target_neighbors_, target_neighbors(X, y, 3))
    D = ((X[:, None] - X[None]) ** 2).sum(-1)
    for i in range(0, 60, 7):
        same = np.flatnonzero((y == y[i]) & (np.arange(60) != i))
        assert set(est.target_neighbors_[i]) == set(same[np.argsort(D[i, same])[:3]])


def test_lmnn_learns():
    X, y = noisy_classes(seed=4)
    est = LMNN(max_iter=100)
    assert knn_score(est, X, y) > knn_score(None, X, y) + 0.2
    fitted = est.fit(X, y)
    assert fitted.objective_ < 0.5 * fitted.initial_objective_


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_lmnn_init_options_and_errors():
    X, y = noisy_classes(n=60)
    assert LMNN(max_iter=0).fit(X, y).components_.tolist() == np.eye(8).tolist()
    reduced = LMNN(n_components=2, max_iter=0).fit(X, y)
    assert reduced.components_.shape == (2, 8)
    assert LMNN(n_components=2, init="lda", max_iter=3).fit(X, y).components_.shape == (2, 8)
    with pytest.raises(ValueError, match="init='lda' gives at most"):
        LMNN(n_components=3, init="lda").fit(X, y)
    with pytest.raises(ValueError, match="init array"):
        LMNN(init=np.eye(3)).fit(X, y)
    # more components than samples (legal: at most n_features): the error names init='pca',
    # not only PCA's own limit (audit 19)
    with pytest.raises(ValueError, match=r"init='pca' gives at most .* = 6 components"):
        LMNN(n_components=7, init="pca").fit(X[:6], y[:6])
    with pytest.warns(ConvergenceWarning, match="max_iter=2"):
        LMNN(max_iter=2).fit(X, y)
    LMNN(max_iter=2, verbose=1).fit(X, y)


@needs_metric_learn
def test_lmnn_reaches_metric_learns_optimum_or_lower():
    """metric-learn 0.7.0's LMNN (gradient descent, regularization=0.5) and ours (L-BFGS,
    push_weight=0.5) minimise the same loss from the identity with the same target neighbours:
    ours ends at most 0.1% above metric-learn's final loss (in practice below it)."""
    X, y = noisy_classes(n=60, n_noise=3)
    out = run_metric_learn("""
est = metric_learn.LMNN(n_neighbors=3, init="identity", max_iter=300).fit(inp["X"], inp["y"])
out["L"] = est.components_
""", X=X, y=y)
    args = (torch.as_tensor(X), torch.as_tensor(y), torch.as_tensor(target_neighbors(X, y, 3)),
            0.5)
    theirs = lmnn_loss_grad(torch.as_tensor(out["L"]), *args)[0]
    ours = LMNN(max_iter=300, tol=1e-7).fit(X, y)  # to the optimum
    assert ours.objective_ <= theirs * 1.001
    assert ours.objective_ == pytest.approx(lmnn_loss_grad(torch.as_tensor(ours.components_),
                                                      *args)[0])


@pytest.mark.parametrize("params, error, match", [
    ({"init": np.zeros((4, 4))}, ValueError, "rank 0"),  # was the zero map, silently
    ({"init": np.full((4, 4), np.nan)}, ValueError, "NaN or infinity"),
    ({"push_weight": 0.0}, ValueError, "push_weight"),  # pull alone: the zero map is optimal
])
def test_lmnn_refuses_starts_and_weights_that_collapse_the_map(params, error, match):
    from sklearn.datasets import load_iris
    X, y = load_iris(return_X_y=True)
    with pytest.raises(error, match=match):
        LMNN(max_iter=5, **params).fit(X, y)


def test_lmnn_lda_start_on_dependent_features_says_how_many_directions_it_found():
    X, y = noisy_classes(n_classes=5, seed=0)
    X = np.c_[X[:, :3], X[:, 0] + X[:, 1]]  # four features of rank 3, five classes
    with pytest.raises(ValueError, match="found 3 discriminant directions"):
        LMNN(init="lda", n_components=4, max_iter=5).fit(X, y)  # was a reshape error


def test_lmnn_with_tol_0_runs_max_iter_without_a_convergence_warning():
    import warnings
    X, y = noisy_classes(seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        est = LMNN(tol=0.0, max_iter=3).fit(X, y)
    assert est.n_iter_ == 3


def test_lmnn_with_every_class_a_single_sample_says_so():
    X = np.random.RandomState(0).randn(6, 3)
    with pytest.raises(ValueError, match="at least 2 samples"):  # returned its start silently
        LMNN().fit(X, np.arange(6))


def test_init_auto_with_more_components_than_samples():
    # "auto" chose PCA, which has at most n_samples directions: scikit-learn's PCA error
    # about an svd_solver the user never set; now the identity's first rows, as metric-learn
    from skdml.linear import MLKR
    X = np.random.RandomState(0).randn(6, 10)
    y = np.array([0, 0, 0, 1, 1, 1])
    assert LMNN(n_components=8, max_iter=3).fit(X, y).components_.shape == (8, 10)
    assert MLKR(n_components=8, max_iter=3).fit(X, y * 1.0).components_.shape == (8, 10)


def test_lmnn_requires_y_like_scikit_learns_estimators():
    from sklearn.utils import get_tags
    X = np.random.RandomState(0).randn(20, 3)
    assert get_tags(LMNN()).target_tags.required is True
    with pytest.raises(ValueError, match="requires y to be passed"):  # was "too many values
        LMNN().fit(X, None)                                             # to unpack"


def test_an_offset_changes_nothing():
    # the loss reads differences of samples, but was computed through |z|^2 - 2 z.z' + |z'|^2
    # on uncentred X: at an offset of 1e8 the loss read 3589 instead of 924
    rng = np.random.RandomState(0)
    X, y = rng.randn(60, 4), np.repeat(np.arange(3), 20)
    plain = LMNN(max_iter=30, random_state=0).fit(X, y)
    shifted = LMNN(max_iter=30, random_state=0).fit(X + 1e8, y)
    assert shifted.objective_ == pytest.approx(plain.objective_, rel=1e-8)
    np.testing.assert_allclose(shifted.components_, plain.components_, rtol=1e-6, atol=1e-8)


def test_lmnn_refuses_a_constant_X():
    with pytest.raises(ValueError, match="X is constant"):
        LMNN().fit(np.ones((12, 3)), np.repeat([0, 1, 2], 4))


def test_lmnn_that_barely_moves_from_its_start_says_to_standardise():
    # at 1e-8 every impostor is inside the unit margin: the hinges are constant, and
    # L-BFGS stops at once; the same data at unit scale learns without a warning
    from sklearn.datasets import load_wine
    from sklearn.preprocessing import StandardScaler

    X, y = load_wine(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        LMNN(random_state=0).fit(X, y)
    with pytest.warns(UserWarning, match="standardise X"):
        LMNN(random_state=0).fit(X * 1e-8, y)


def test_lmnn_refit_from_its_own_solution_does_not_blame_the_scale():
    from sklearn.datasets import load_iris
    from sklearn.preprocessing import StandardScaler

    X, y = load_iris(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    first = LMNN(random_state=0).fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        LMNN(init=first.components_, random_state=0).fit(X, y)


def test_lda_start_beyond_the_classes_says_what_to_set():
    from sklearn.datasets import load_iris

    X, y = load_iris(return_X_y=True)
    with pytest.raises(ValueError, match="n_components <= 2, or use init='pca'"):
        LMNN(init="lda", max_iter=2).fit(X, y)
    assert LMNN(init="lda", n_components=2, max_iter=2).fit(X, y).components_.shape == (2, 4)


def test_lmnn_does_not_stop_on_the_plateau_of_a_feature_in_other_units():
    # features at 1e-3, 1e3 and 1: in the input's units L-BFGS's relative-decrease test
    # fired after 7 iterations at a loss of 2323, with no warning and a k-NN accuracy
    # below the Euclidean one's, where the same problem reaches 305 (audit 19)
    rng = np.random.RandomState(0)
    y = np.repeat([0, 1, 2], 20)
    X = np.c_[y + 0.3 * rng.randn(60), rng.randn(60), rng.randn(60)] * [1e-3, 1e3, 1.0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        default = LMNN().fit(X, y)
    longer = LMNN(tol=0, max_iter=300).fit(X, y)  # the same targets, run long
    np.testing.assert_array_equal(default.target_neighbors_, longer.target_neighbors_)
    assert default.objective_ <= 1.05 * longer.objective_
    assert knn_score(LMNN(), X, y, k=3) > knn_score(None, X, y, k=3) + 0.2
    # one unit (any overall scale): the optimiser's coordinates are the input's own
    assert lmnn_module.unit_scales(np.c_[X[:, 2], 30 * X[:, 2]] * 1e-6).tolist() == [1.0, 1.0]


# audit 19 (mutation round 4): barely_moved_is_relative
def test_the_barely_moved_warning_compares_the_fall_with_tol_times_the_start_loss():
    # at 3e-7 the loss (about 31,287) falls by about 0.02: more than tol=1e-3 in absolute
    # terms, far less than tol times the start's loss: the scale is still to blame
    from sklearn.datasets import load_wine
    from sklearn.preprocessing import StandardScaler

    X, y = load_wine(return_X_y=True)
    X = StandardScaler().fit_transform(X) * 3e-7
    with pytest.warns(UserWarning, match="standardise X"):
        est = LMNN(random_state=0).fit(X, y)
    fall = est.initial_objective_ - est.objective_
    assert est.tol < fall < est.tol * est.initial_objective_


# audit 19 (mutation round 4): optimal_start_counts_one_iteration
def test_a_start_with_zero_gradient_counts_one_checking_iteration():
    # duplicates as target neighbours and no impostor within the margin: the gradient at
    # the start is exactly zero and L-BFGS takes no step; n_iter_ counts the check
    X = np.array([[0.0, 0.0], [0.0, 0.0], [10.0, 0.0], [10.0, 0.0]])
    y = np.array([0, 0, 1, 1])
    with pytest.warns(UserWarning, match="barely moved"):
        est = LMNN(n_neighbors=1).fit(X, y)
    assert est.n_iter_ == 1
    np.testing.assert_array_equal(est.components_, np.eye(2))


# audit 19 (mutation round 4): targets_not_in_start_space
def test_target_neighbours_are_chosen_in_the_input_space_not_in_the_start_maps():
    # the start L0 = diag(10, 1) stretches the first axis: there sample 0's nearest
    # classmate is sample 2 (|L0 (x0 - x2)|^2 = 4 < 100); in the input space it is sample 1
    X = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 2.0], [50.0, 50.0], [51.0, 50.0], [50.0, 52.0]])
    y = np.array([0, 0, 0, 1, 1, 1])
    start = np.diag([10.0, 1.0])
    assert target_neighbors(X @ start.T, y, 1)[0, 0] == 2  # the start's space would differ
    est = LMNN(n_neighbors=1, init=start, max_iter=0).fit(X, y)
    assert est.target_neighbors_[0, 0] == 1
    np.testing.assert_array_equal(est.target_neighbors_, target_neighbors(X, y, 1))


# audit 19 (mutation round 4): tol_is_lbfgs_ftol
def test_tol_is_l_bfgs_relative_decrease_and_no_gradient_tolerance_stops_it(monkeypatch):
    seen = []
    from skdml._training import _lbfgs

    real = _lbfgs.minimize

    def spy(*args, **kwargs):
        seen.append(dict(kwargs["options"]))
        return real(*args, **kwargs)

    monkeypatch.setattr(_lbfgs, "minimize", spy)
    rng = np.random.RandomState(0)
    X, y = rng.randn(30, 3), np.repeat([0, 1, 2], 10)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        LMNN(tol=0.02, max_iter=5).fit(X, y)
    assert seen == [{"maxiter": 5, "ftol": 0.02, "gtol": 0.0}]


def test_round_off_columns_keep_their_units_and_the_gate_reads_the_spreads_themselves():
    # a column constant up to one ulp was divided up to unit size (s = 2.8e-17) and LMNN
    # learned weights of 1e15 on its noise; PCA's trailing components of constant pixels
    # likewise (a review of audit 19's fix)
    from sklearn.datasets import load_wine
    from sklearn.preprocessing import StandardScaler

    X, y = load_wine(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    ulp = np.full(len(X), 0.3)
    ulp[::2] = 0.1 * 3
    Xu = np.c_[X, ulp - ulp.mean()]
    assert lmnn_module.unit_scales(Xu).tolist() == [1.0] * Xu.shape[1]
    assert np.abs(LMNN(random_state=0).fit(Xu, y).components_[:, -1]).max() <= 10.0
    # spreads 1000 apart (below 2**10) are one unit; 1500 apart are not
    rng = np.random.RandomState(0)
    base = rng.randn(50, 2)
    assert lmnn_module.unit_scales(base * [1.0, 1000.0] / base.std(0)).tolist() == [1.0, 1.0]
    assert lmnn_module.unit_scales(base * [1.0, 1500.0] / base.std(0)).tolist() == [1.0, 2048.0]


# audit 20 (mutation round 5): random_start_rows_of_unit_norm
def test_a_random_start_has_rows_of_norm_about_one():
    from skdml.linear._classic import initial_map

    X = np.random.RandomState(1).randn(30, 400)
    L = initial_map("random", X, 5, np.random.RandomState(0))
    assert L.shape == (5, 400)
    np.testing.assert_allclose(np.linalg.norm(L, axis=1), 1.0, atol=0.15)

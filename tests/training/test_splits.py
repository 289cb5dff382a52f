"""skdml/_training/_splits.py: the one validation hold-out rule of every learner."""

import numpy as np
import pytest

from skdml._training import validation_holdout
from skdml._training._splits import (MIN_CLASSES_CLASS_DISJOINT, class_disjoint_holdout,
                                     stratified_holdout)


def rng(seed=0):
    return np.random.RandomState(seed)


@pytest.mark.parametrize("n_classes", [MIN_CLASSES_CLASS_DISJOINT, 12])
def test_whole_classes_are_held_out_from_five_classes_up(n_classes):
    y = np.repeat(np.arange(n_classes), 6)
    train, val, split = validation_holdout(y, None, "auto", rng())
    assert split == "class_disjoint"
    assert not set(y[train]) & set(y[val])
    assert len(np.unique(y[val])) == max(2, round(0.2 * n_classes))
    assert sorted(np.concatenate([train, val])) == list(range(len(y)))


def test_fewer_classes_hold_out_a_tenth_of_each_class_keeping_a_pair_for_training():
    y = np.repeat(np.arange(4), [20, 20, 3, 2])
    train, val, split = validation_holdout(y, None, "auto", rng())
    assert split == "stratified"
    held = dict(zip(*np.unique(y[val], return_counts=True)))
    assert held == {0: 2, 1: 2, 2: 1}  # 10 % of 20; the 3-sample class gives one, not two
    assert all(np.sum(y[train] == c) >= 2 for c in range(4))


def test_the_same_seed_draws_the_same_split_and_fractions_are_honoured():
    y = np.repeat(np.arange(10), 5)
    a = validation_holdout(y, 0.4, "auto", rng(3))
    b = validation_holdout(y, 0.4, "auto", rng(3))
    assert np.array_equal(a[1], b[1]) and len(np.unique(y[a[1]])) == 4
    train, val = stratified_holdout(y, 0.4, rng(0))
    assert len(val) == 20 and len(train) == 30


def test_impossible_hold_outs_raise():
    with pytest.raises(ValueError, match="needs at least 2 classes for training"):
        class_disjoint_holdout(np.repeat(np.arange(5), 3), 0.8, rng())
    with pytest.raises(ValueError, match="at least one class with 3 or more samples"):
        validation_holdout(np.repeat(np.arange(3), 2), None, "auto", rng())


# ---------------------------------------------------- a hold-out scored among itself (issue 37)
def test_stratified_holdout_of_singletons_names_the_split_and_classes():
    y = np.repeat(np.arange(4), 5)
    with pytest.raises(ValueError, match=r"stratified validation split .*classes 0 \(5 samples\)"):
        validation_holdout(y, None, "auto", rng(), scored_within=True)
    # a hold-out scored against the training part (the linear learners) still takes them
    _, val, split = validation_holdout(y, None, "auto", rng())
    assert split == "stratified" and len(val) == 4


def test_deep_fit_on_singleton_holdout_names_the_split():
    from skdml import DeepMetricTransformer

    y = np.repeat(np.arange(4), 5)
    X = rng().randn(20, 6) + y[:, None]
    est = DeepMetricTransformer(n_components=3, max_iter=2, early_stopping=True, device="cpu",
                                random_state=0)
    with pytest.raises(ValueError, match="stratified validation split"):
        est.fit(X, y)


def test_class_disjoint_hold_out_draws_classes_that_can_be_scored():
    # 5 classes of 10 and 10 singletons: the held-out classes are scored among
    # themselves, so they are drawn among the classes of 2 or more samples
    from skdml._training._splits import class_disjoint_holdout

    y = np.r_[np.repeat(np.arange(5), 10), np.arange(5, 15)]
    for seed in range(20):
        _, val = class_disjoint_holdout(y, 0.2, np.random.RandomState(seed))
        assert np.unique(y[val], return_counts=True)[1].min() >= 2
    # the same draws as before where every class has 2 samples
    y2 = np.repeat(np.arange(10), 3)
    _, val = class_disjoint_holdout(y2, 0.2, np.random.RandomState(0))
    expected = np.random.RandomState(0).choice(np.arange(10), 2, replace=False)
    assert set(y2[val]) == set(expected)
    with pytest.raises(ValueError, match="only 1 of the 11 classes have 2 or more"):
        class_disjoint_holdout(np.r_[0, 0, np.arange(1, 11)], 0.2, np.random.RandomState(0))

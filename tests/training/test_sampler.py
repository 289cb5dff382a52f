"""skdml/_training/_sampler.py: the class-balanced P x K batch plans of every learner."""

import numpy as np
import pytest

from skdml._training import ClassBalancedBatchSampler


def test_class_balanced_sampler_plan_is_seeded_and_balanced():
    y = np.repeat(np.arange(6), [5, 5, 5, 5, 5, 2])
    a = list(ClassBalancedBatchSampler(y, 3, 4, np.random.RandomState(0), n_batches=20))
    b = list(ClassBalancedBatchSampler(y, 3, 4, np.random.RandomState(0), n_batches=20))
    assert all(np.array_equal(i, j) for i, j in zip(a, b))
    for batch in a:
        labels, counts = np.unique(y[batch], return_counts=True)
        assert len(labels) == 3 and np.all(counts == 4)
    with pytest.raises(ValueError, match="only 6 classes"):
        ClassBalancedBatchSampler(y, 7, 2, np.random.RandomState(0))


def test_k_is_bounded_by_the_largest_class_and_small_classes_are_drawn_with_replacement():
    y = np.repeat(np.arange(4), [3, 3, 2, 2])
    sampler = ClassBalancedBatchSampler(y, 2, 50, np.random.RandomState(0))
    assert sampler.n_samples_per_class == 3 and sampler.batch_size == 6
    assert len(sampler) == 2  # ceil(10 / 6)
    for batch in sampler:
        labels, counts = np.unique(y[batch], return_counts=True)
        assert len(labels) == 2 and np.all(counts == 3)  # 2-sample classes repeat one
    assert len(ClassBalancedBatchSampler(y, 2, 2, np.random.RandomState(0), n_batches=7)) == 7


def test_the_plan_comes_from_the_labels_it_is_given():
    """Any hashable labels; only the classes present (a GridSearchCV fold's) are drawn."""
    y = np.array(["b", "b", "d", "d", "d", "f", "f"])
    seen = set()
    for batch in ClassBalancedBatchSampler(y, 3, 2, np.random.RandomState(1), n_batches=5):
        seen |= set(y[batch])
        assert len(set(y[batch])) == 3
    assert seen == {"b", "d", "f"}
    with pytest.raises(ValueError, match="must be >= 1"):
        ClassBalancedBatchSampler(y, 0, 2, np.random.RandomState(0))


def test_a_class_with_at_least_k_samples_is_drawn_without_replacement():
    # only classes with fewer than K samples are sampled with replacement
    from skdml._training._sampler import ClassBalancedBatchSampler

    y = np.repeat(np.arange(4), 6)
    for seed in range(20):
        for batch in ClassBalancedBatchSampler(y, 2, 5, np.random.RandomState(seed)):
            assert len(np.unique(batch)) == len(batch), batch

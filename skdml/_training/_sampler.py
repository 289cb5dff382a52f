"""Class-balanced batch plans (P classes x K samples), shared by linear and deep learners."""

from __future__ import annotations

import numpy as np

__all__ = ["ClassBalancedBatchSampler"]


class ClassBalancedBatchSampler:
    """Yield index batches of ``n_classes_per_batch`` classes x ``n_samples_per_class``.

    The plan is built from the labels of the current fit only (never from a
    global label set), so it stays correct under ``GridSearchCV`` and internal
    validation splits, and it is seeded, so two fits with the same
    ``random_state`` see the same batches.

    Parameters
    ----------
    labels : array-like of shape (n_samples,)
        Integer (or any hashable) labels of the training samples.
    n_classes_per_batch : int
        P, the number of distinct classes in each batch.
    n_samples_per_class : int
        K, the number of samples drawn from each chosen class. Classes with
        fewer than K samples are sampled with replacement. K is bounded by the
        data: it never exceeds the size of the largest class (``batch_size``
        gives the resulting size), so an oversized K cannot allocate more than
        the data hold.
    random_state : numpy.random.RandomState
        Resolved random state (``check_random_state`` is done by the caller in ``fit``).
    n_batches : int, default=None
        Batches per epoch. ``None`` gives ``ceil(n_samples / (P * K))``.

    Examples
    --------
    >>> import numpy as np
    >>> y = np.repeat([0, 1, 2, 3], 5)
    >>> sampler = ClassBalancedBatchSampler(y, 2, 3, np.random.RandomState(0))
    >>> batches = list(sampler)
    >>> len(batches), len(batches[0])
    (4, 6)
    >>> len(np.unique(y[batches[0]]))
    2
    """

    def __init__(self, labels, n_classes_per_batch, n_samples_per_class, random_state, n_batches=None):
        labels = np.asarray(labels)
        self.classes, inverse = np.unique(labels, return_inverse=True)
        if n_classes_per_batch < 1 or n_samples_per_class < 1:
            raise ValueError("n_classes_per_batch and n_samples_per_class must be >= 1.")
        if len(self.classes) < n_classes_per_batch:
            raise ValueError(
                f"The batch plan needs {n_classes_per_batch} classes per batch but the training "
                f"labels hold only {len(self.classes)} classes. Lower n_classes_per_batch."
            )
        self.index_by_class = [np.flatnonzero(inverse == c) for c in range(len(self.classes))]
        self.n_classes_per_batch = int(n_classes_per_batch)
        largest = max(len(idx) for idx in self.index_by_class)
        self.n_samples_per_class = int(min(n_samples_per_class, largest))
        self.random_state = random_state
        batch = self.n_classes_per_batch * self.n_samples_per_class
        self.n_batches = int(n_batches) if n_batches is not None else max(1, -(-len(labels) // batch))

    def __len__(self):
        return self.n_batches

    @property
    def batch_size(self):
        """Samples per batch, ``P * K`` (K bounded by the largest class)."""
        return self.n_classes_per_batch * self.n_samples_per_class

    def __iter__(self):
        rng = self.random_state
        K = self.n_samples_per_class
        for _ in range(self.n_batches):
            chosen = rng.choice(len(self.classes), self.n_classes_per_batch, replace=False)
            parts = []
            for c in chosen:
                idx = self.index_by_class[c]
                parts.append(rng.choice(idx, K, replace=len(idx) < K))
            yield np.concatenate(parts)

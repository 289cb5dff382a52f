"""skdml/deep/_data.py: arrays and torch Datasets as training sources, their labels, and the
DataLoaders of training and transform."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.utils.data import Dataset

from skdml.deep import _data as tmod

from _deep_helpers import fast, make, without_seconds, zero_shot_vectors

pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")


class PairDataset(Dataset):
    def __init__(self, X, y, with_targets):
        self.X, self.y = torch.as_tensor(X, dtype=torch.float32), torch.as_tensor(y)
        if with_targets:
            self.targets = list(np.asarray(y))

    def __len__(self):
        return len(self.X)

    def __getitem__(self, i):
        return self.X[i], self.y[i]


class XOnlyDataset(Dataset):
    def __init__(self, X):
        self.X = torch.as_tensor(X, dtype=torch.float32)

    def __len__(self):
        return len(self.X)

    def __getitem__(self, i):
        return self.X[i]


@pytest.mark.parametrize("with_targets", [True, False])
def test_torch_dataset_matches_arrays(blobs, with_targets):
    X, y = blobs
    labels = np.array(["c%d" % v for v in y])  # non-integer labels, encoded inside fit
    ds = PairDataset(X.astype(np.float32), y, with_targets)
    if with_targets:
        ds.targets = list(labels)
    ref = make().fit(X.astype(np.float32), labels if with_targets else y)
    est = make().fit(ds)
    assert without_seconds(est.history_) == without_seconds(ref.history_)
    Z = est.transform(XOnlyDataset(X))
    np.testing.assert_allclose(Z, ref.transform(X), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(est.transform(ds), Z, rtol=1e-6, atol=1e-7)
    assert not hasattr(est, "n_features_in_")


def test_dataset_without_labels_raises(blobs):
    X, _ = blobs
    with pytest.raises(ValueError, match="Labels are missing"):
        make().fit(XOnlyDataset(X))


class MixedLabels(Dataset):
    """Items ``(x, label)`` whose labels mix numbers and strings: 1 and "1" are two classes."""

    def __init__(self, X, labels, with_targets):
        self.X, self.labels = torch.as_tensor(X, dtype=torch.float32), labels
        if with_targets:
            self.targets = labels

    def __len__(self):
        return len(self.X)

    def __getitem__(self, i):
        return self.X[i], self.labels[i]


@pytest.mark.parametrize("with_targets", [True, False])
def test_a_dataset_mixing_numbers_and_strings_is_refused_not_merged(blobs, with_targets):
    # numpy made 1 and "1" one string label: one class where the data have two
    X, _ = blobs
    labels = [1, "1"] * (len(X) // 2)
    with pytest.raises(ValueError, match=r"mixes label types \['int', 'str'\]"):
        make().fit(MixedLabels(X[:len(labels)], labels, with_targets))
    assert tmod.dataset_labels(MixedLabels(X[:4], ["1", "2", "1", "3"], with_targets),
                               None).dtype.kind == "U"  # strings alone stay strings


def test_dataloader_gets_pin_memory_and_workers(blobs, monkeypatch):
    X, y = blobs
    seen = []
    Real = tmod.DataLoader

    def spy(*args, **kwargs):
        seen.append((kwargs["num_workers"], kwargs["pin_memory"]))
        return Real(*args, **{**kwargs, "pin_memory": False, "num_workers": 0})

    monkeypatch.setattr(tmod, "DataLoader", spy)
    make(max_iter=1, loader_params={"pin_memory": True, "num_workers": 3}).fit(X, y)
    assert seen and set(seen) == {(3, True)}
    seen.clear()
    make(max_iter=1).fit(X, y)
    assert set(seen) == {(0, False)}  # "auto": pin only for CUDA


def test_num_workers_real_run(blobs):
    X, y = blobs
    a = make(max_iter=1, loader_params={"num_workers": 1}).fit(X, y)
    b = make(max_iter=1).fit(X, y)
    assert without_seconds(a.history_) == without_seconds(b.history_)


def test_transform_of_a_dataset_with_nan_is_refused_like_arrays():
    from torch.utils.data import TensorDataset

    X, y = zero_shot_vectors(per_class=5)
    est = fast(max_iter=1).fit(X, y)
    bad = X.copy()
    bad[7, 3] = np.nan
    with pytest.raises(ValueError, match="Input X contains NaN"):
        est.transform(bad)
    with pytest.raises(ValueError, match="Input X contains NaN or infinity.*Dataset"):
        est.transform(TensorDataset(torch.from_numpy(bad)))
    bad[7, 3] = np.inf
    with pytest.raises(ValueError, match="Input X contains NaN or infinity.*Dataset"):
        est.transform(TensorDataset(torch.from_numpy(bad), torch.from_numpy(y)))


def test_an_image_given_as_nested_lists_is_an_input_not_a_pair():
    # a list item was read as (x, label): x the image's first row (input_shape_ (8,))
    rng = np.random.RandomState(0)
    y = np.repeat(np.arange(4), 10)
    img = (rng.rand(40, 8, 8) + y[:, None, None]).astype(np.float32)

    class Images(Dataset):
        def __len__(self):
            return len(img)

        def __getitem__(self, i):
            return img[i].tolist()

    est = make(max_iter=1, backbone=None, n_components=3).fit(Images(), y)
    assert est.input_shape_ == (1, 8, 8)


def test_a_zero_size_axis_is_refused_by_name():
    # ZeroDivisionError in the default backbone's resizing, or "variance overflows float64"
    with pytest.raises(ValueError, match="zero-size axis"):
        make(max_iter=1).fit(np.zeros((40, 0, 8), dtype=np.float32), np.repeat(np.arange(4), 10))


def test_a_read_only_array_fits_without_torch_warning():
    # a joblib memmap under GridSearchCV(n_jobs=...) is read-only: torch warned that writing
    # to the tensor would be undefined; skdml only reads it
    import warnings

    rng = np.random.RandomState(0)
    y = np.repeat(np.arange(4), 10)
    X = (rng.randn(40, 6) + y[:, None]).astype(np.float32)
    X.flags.writeable = False
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        warnings.filterwarnings("ignore", category=UserWarning, message=".*(metric loss|separate)")
        make(max_iter=1).fit(X, y).transform(X)


def test_an_iterable_dataset_is_refused_up_front():
    class Stream(torch.utils.data.IterableDataset):
        def __iter__(self):
            yield from ((torch.zeros(4), 0) for _ in range(8))

    with pytest.raises(TypeError, match="map-style Dataset"):
        make(max_iter=1).fit(Stream())


def test_a_nan_item_is_named_as_such_not_as_an_overflow():
    rng = np.random.RandomState(0)
    X = rng.randn(40, 4).astype(np.float32)
    X[5, 2] = np.nan
    y = np.repeat(np.arange(4), 10)
    with pytest.raises(ValueError, match="NaN or infinity"):
        make(max_iter=1).fit(PairDataset(X, y, with_targets=True))


def test_a_builder_that_returns_a_module_it_keeps_gives_each_fit_its_own_copy():
    X, y = zero_shot_vectors(n_classes=6, per_class=10, dim=8)
    shared = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU())
    before = [p.detach().clone() for p in shared.parameters()]
    a = make(backbone=lambda shape: shared, max_iter=2).fit(X, y)
    Za = a.transform(X)
    b = make(backbone=lambda shape: shared, max_iter=3).fit(X, y)
    assert a.module_.backbone is not shared and b.module_.backbone is not a.module_.backbone
    assert all(torch.equal(p, q) for p, q in zip(shared.parameters(), before))
    np.testing.assert_array_equal(a.transform(X), Za)


def test_a_dataset_item_beyond_float32_is_named_as_the_input():
    # finite in the float64 check, infinite in the network's float32: blamed on the loss before
    from torch.utils.data import TensorDataset

    X, y = zero_shot_vectors(per_class=5)
    X = X.astype(np.float64)
    X[0, 0] = 1e39
    with pytest.raises(ValueError, match="too large for float32"):
        fast(max_iter=1).fit(TensorDataset(torch.from_numpy(X), torch.from_numpy(y)))


def test_grey_channels_last_images_are_refused_like_colour_ones():
    from skdml.deep._data import input_shape_of

    for c in (1, 3, 4):
        with pytest.raises(ValueError, match="channels-last"):
            input_shape_of((28, 28, c))
    assert input_shape_of((1, 28, 28)) == (1, 28, 28)


def test_a_dataset_item_that_is_a_list_of_three_numbers_is_an_input():
    # only a list of two whose second entry is one label is an (x, y) pair
    from skdml.deep._data import _item_x, dataset_shape

    class Vectors(torch.utils.data.Dataset):
        def __len__(self):
            return 4

        def __getitem__(self, i):
            return [0.1 * i, 0.2, 0.3]

    assert _item_x([0.1, 0.2, 0.3]) == [0.1, 0.2, 0.3]
    assert dataset_shape(Vectors(), "training") == (3,)


def test_training_batches_stay_in_the_training_split(monkeypatch):
    # the sampler maps the batch plan's positions within the training part to source rows:
    # without it, training read validation rows (a leak) and never the last training rows
    import skdml.deep._trainer as trainer
    from skdml import DeepMetricTransformer

    seen, index = [], {}
    original = trainer.MappedSampler

    class Spy(original):
        def __init__(self, sampler, idx):
            super().__init__(sampler, idx)
            index["train"] = np.asarray(idx)

        def __iter__(self):
            for batch in super().__iter__():
                seen.append(np.asarray(batch))
                yield batch

    monkeypatch.setattr(trainer, "MappedSampler", Spy)
    rng = np.random.RandomState(0)
    y = np.repeat(np.arange(4), 15)
    X = rng.randn(60, 6) + y[:, None]
    DeepMetricTransformer(n_components=2, max_iter=2, validation_fraction=0.3,
                          early_stopping=True, random_state=0, device="cpu").fit(X, y)
    train = set(index["train"].tolist())
    assert len(train) < 60 and seen
    outside = sorted(set(np.concatenate(seen).tolist()) - train)
    assert not outside, f"training batches read non-training rows {outside[:10]}"

"""Data adapters of the deep learner: input checks, datasets, loaders, batch plans."""

from __future__ import annotations

import numpy as np
import torch
from sklearn.utils.multiclass import check_classification_targets
from torch.utils.data import DataLoader, Dataset

from .._utils import (check_label_input, check_orderable_labels, keep_label_types,
                      quiet_warnings)

__all__ = ["as_source", "dataset_labels", "first_items", "input_shape_of", "make_loader",
           "prepare_source", "to_model_input"]

#: Rows sent through the fixed input layers at a time by :func:`prepare_source`.
_PREPARE_ROWS = 4096


class _IndexedArray(Dataset):
    """Batched access to an in-memory tensor: ``ds[idx] -> (X[idx], idx)``."""

    def __init__(self, X):
        self.X = X

    def __len__(self):
        return self.X.shape[0]

    def __getitem__(self, idx):
        idx = torch.as_tensor(idx, dtype=torch.long)
        return self.X[idx], idx


class _IndexedDataset(Dataset):
    """Wraps a user ``Dataset``: ``ds[i] -> (x_i, i)`` (labels come from the fit's own y)."""

    def __init__(self, dataset):
        self.dataset = dataset

    def __len__(self):
        return len(self.dataset)

    def __getitem__(self, i):
        x = _item_x(self.dataset[i])
        if not isinstance(x, torch.Tensor):
            x = torch.as_tensor(np.asarray(x))
        return x, i


class _ListSampler:
    """Feeds index arrays to a DataLoader's ``batch_sampler`` as lists of ints."""

    def __init__(self, sampler):
        self.sampler = sampler

    def __len__(self):
        return len(self.sampler)

    def __iter__(self):
        for batch in self.sampler:
            yield np.asarray(batch).tolist()


class MappedSampler:
    """Maps batches of positions in a subset (e.g. the training part) to source indices."""

    def __init__(self, sampler, index):
        self.sampler, self.index = sampler, np.asarray(index)

    def __len__(self):
        return len(self.sampler)

    def __iter__(self):
        for batch in self.sampler:
            yield self.index[batch]


def _item_x(item):
    """The input of a Dataset item: ``x`` of an ``(x, y)`` pair, else the item itself.

    A pair is a tuple, or a list of two whose second entry is one label (a number, a
    string or a 0-d tensor): an image given as nested lists is an input, not a pair of
    its first row and its other rows.
    """
    return item[0] if _is_pair(item) else item


def _is_pair(item):
    if isinstance(item, tuple):
        return True
    if not isinstance(item, list) or len(item) != 2:
        return False
    label = item[1]
    return isinstance(label, (int, float, str, np.generic)) or \
        (isinstance(label, (torch.Tensor, np.ndarray)) and label.ndim == 0)


def input_shape_of(sample_shape, what="X"):
    """Input shape of one sample -> model input shape, or a clear error.

    Vectors ``(d,)`` stay; grey images ``(H, W)`` become ``(1, H, W)``; images
    are ``(C, H, W)``, channels first. Channels-last images ``(H, W, C)`` with
    ``C`` in {1, 3, 4} and ``H, W`` larger are refused with a message (they
    would be read as ``H`` channels).
    """
    shape = tuple(int(s) for s in sample_shape)
    if 0 in shape:
        raise ValueError(f"{what} has samples of shape {shape}, with a zero-size axis: a "
                         "sample needs at least one feature (or pixel) along every axis.")
    if len(shape) == 1:
        return shape
    if len(shape) == 2:
        return (1,) + shape
    if len(shape) == 3:
        c, h, w = shape
        if w in (1, 3, 4) and c > 4 and h > 4:
            raise ValueError(
                f"{what} looks channels-last: samples of shape {shape} would be read as {c} "
                f"channels of {h}x{w} pixels. skdml expects channels first, (n, C, H, W): "
                "transpose with X.transpose(0, 3, 1, 2) (numpy) or x.permute(0, 3, 1, 2) "
                "(torch).")
        return shape
    raise ValueError(
        f"{what} must hold vectors (n, d), grey images (n, H, W) or images (n, C, H, W); got "
        f"samples of shape {shape} (array rank {len(shape) + 1}).")


def dataset_labels(dataset, y):
    """Labels of a ``Dataset``: ``y``, else its ``targets``, else one pass over its items."""
    n = len(dataset)
    if y is None:
        targets = getattr(dataset, "targets", None)
        if targets is not None:
            y = keep_label_types(targets.cpu() if isinstance(targets, torch.Tensor) else targets)
        else:
            labels = []
            for i in range(n):
                item = dataset[i]
                if not _is_pair(item) or len(item) < 2:
                    raise ValueError(
                        "Labels are missing: pass y, give the Dataset a `targets` attribute, "
                        "or make it yield (x, y) pairs.")
                lab = item[1]
                labels.append(lab.item() if isinstance(lab, torch.Tensor) else lab)
            y = keep_label_types(labels)
    y = np.asarray(check_label_input(y, "y (the Dataset's labels)", column=False))
    if y.ndim != 1 or y.shape[0] != n:
        raise ValueError(f"Expected {n} labels for the Dataset, got shape {y.shape}.")
    y = check_orderable_labels(y, "y (the Dataset's labels)")
    check_classification_targets(y)
    return y


def dataset_shape(dataset, what):
    """The model input shape of a Dataset's items (from the first one)."""
    if isinstance(dataset, torch.utils.data.IterableDataset) or not (
            hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__")):
        raise TypeError(
            f"The {what} Dataset ({type(dataset).__name__}) must be a map-style Dataset, with "
            "__len__ and __getitem__ (the batches are drawn by index); an IterableDataset "
            "cannot be sampled by class. Collect its items into arrays, or wrap them in a "
            "map-style Dataset.")
    if len(dataset) == 0:
        raise ValueError(f"The {what} Dataset is empty.")
    first = _item_x(dataset[0])
    return input_shape_of(np.shape(first), "Dataset items")


def as_source(X):
    """A float32 tensor of model inputs from a validated array (no copy when possible)."""
    shape = input_shape_of(X.shape[1:])
    X = np.ascontiguousarray(X, dtype=np.float32)
    if not X.flags.writeable:  # a read-only array (a joblib memmap in GridSearchCV): the
        # tensor is only read, so torch's "not writable" warning does not apply
        with quiet_warnings({"message": "The given NumPy array is not writable"}):
            return torch.from_numpy(X).reshape((X.shape[0],) + shape)
    return torch.from_numpy(X).reshape((X.shape[0],) + shape)


def first_items(source, n=2):
    """The first ``n`` inputs of ``source`` as one batch, without a DataLoader."""
    if isinstance(source, torch.Tensor):
        return source[:n]
    return _collate([_IndexedDataset(source)[i] for i in range(min(n, len(source)))])[0]


def make_loader(source, indices=None, *, batch_size=256, batch_sampler=None, num_workers=0,
                pin_memory=False):
    """DataLoader over ``source[indices]`` in order, or driven by ``batch_sampler``.

    In-memory tensors are fetched a whole batch at a time (``batch_size=None``
    with a sampler yielding index arrays); user Datasets item by item with
    default collation.
    """
    if batch_sampler is None:
        batch_sampler = [indices[i:i + batch_size] for i in range(0, len(indices), batch_size)]
    common = dict(num_workers=num_workers, pin_memory=pin_memory)
    if isinstance(source, torch.Tensor):
        return DataLoader(_IndexedArray(source), sampler=batch_sampler, batch_size=None,
                          **common)
    return DataLoader(_IndexedDataset(source), batch_sampler=_ListSampler(batch_sampler),
                      collate_fn=_collate, **common)


def _collate(items):
    xs, idx = zip(*items)
    shapes = {tuple(x.shape) for x in xs}
    if len(shapes) > 1:
        raise ValueError(
            f"The Dataset's items have different shapes {sorted(shapes)[:3]}: a batch needs "
            "items of one shape (resize or pad them in the Dataset).")
    return torch.stack(xs), torch.as_tensor(idx)


def to_model_input(xb, device, input_shape):
    """Move a batch to ``device`` as float32 in the model's layout.

    (Input standardisation is the first layer of the network,
    :class:`~skdml.deep.Standardize`, so that it travels with ``module_``.)
    """
    xb = xb.to(device, non_blocking=True)
    if xb.dtype != torch.float32:
        xb = xb.float()
    if xb.ndim == len(input_shape):  # grey images (n, H, W) from a Dataset
        xb = xb.unsqueeze(1)
    return xb


def prepare_source(net, source, input_shape, augment):
    """``(source, prepared)``: vectors sent once through ``net``'s fixed input layers.

    The standardisation (and projection) of in-memory vectors is the same at
    every epoch, so training reads its output, computed once here in chunks,
    instead of recomputing it for every batch; ``prepared`` says so. Images,
    ``Dataset`` sources, vectors with a training augmentation (it sees the
    raw batch) and networks without an input layer are returned as they are.
    """
    if not isinstance(source, torch.Tensor) or len(input_shape) != 1 or augment is not None \
            or net.standardize is None or source.device.type != "cpu":
        return source, False
    layer = net.standardize
    device = layer.mean.device
    with torch.no_grad():
        parts = [layer(source[i:i + _PREPARE_ROWS].to(device)).cpu()
                 for i in range(0, source.shape[0], _PREPARE_ROWS)]
    return torch.cat(parts).contiguous(), True

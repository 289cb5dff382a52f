"""Class labels as given: numbers kept apart from strings, missing labels refused, object ints.

Every entry point that reads class labels goes through ``skdml._utils._labels``;
these tests call the public entry points (learners, scorers, splitter, index,
``Constraints``, the deep learner on arrays and on a ``Dataset``).
"""

import warnings

import numpy as np
import pandas as pd
import pytest
import torch

from skdml import LFDA, ECAML, Constraints, DeepMetricTransformer
from skdml.metrics import recall_at_k
from skdml.model_selection import ClassDisjointSplit
from skdml.retrieval import RetrievalIndex

X = np.random.RandomState(0).randn(30, 4)
MIXED = [0] * 10 + ["0"] * 10 + [1] * 10  # three classes: 0, "0" and 1


def _deep():
    return DeepMetricTransformer(max_iter=1, device="cpu", random_state=0)


ENTRY_POINTS = {
    "LFDA": lambda y: LFDA(k=3).fit(X, y),
    "ECAML": lambda y: ECAML(max_iter=1, random_state=0).fit(X, y),
    "deep": lambda y: _deep().fit(X, y),
    "recall_at_k": lambda y: recall_at_k(X, y),
    "ClassDisjointSplit": lambda y: next(ClassDisjointSplit(random_state=0).split(X, y)),
    "RetrievalIndex": lambda y: RetrievalIndex().fit(X, y),
    "Constraints": lambda y: Constraints(y).positive_negative_pairs(5, random_state=0),
}


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
def test_a_list_mixing_numbers_and_strings_is_refused_not_merged(entry):
    # np.asarray made 0 and "0" one class: every entry point "fitted" two classes of three
    with pytest.raises(ValueError, match="mixes label types|cannot be sorted"):
        ENTRY_POINTS[entry](MIXED)


@pytest.mark.parametrize("entry", sorted(set(ENTRY_POINTS) - {"RetrievalIndex"}))
def test_a_pandas_na_label_is_named(entry):
    # a bare "boolean value of NA is ambiguous" from scikit-learn's check before
    y = pd.Series([None] + [f"c{i % 3}" for i in range(1, 30)], dtype="string")
    with pytest.raises(ValueError, match="missing"):
        ENTRY_POINTS[entry](y)


def test_constraints_take_pandas_na_as_unknown_when_asked():
    y = pd.Series([None] + [f"c{i % 3}" for i in range(1, 30)], dtype="string")
    pairs = Constraints(y, unknown_label=np.nan).positive_negative_pairs(5, random_state=0)
    assert 0 not in np.concatenate([pairs[0].ravel(), pairs[1].ravel()])


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
def test_integer_labels_in_an_object_column_are_integers(entry):
    # scikit-learn's type_of_target calls them 'unknown': the learners and scorers refused
    # what the index and the splitter accepted
    ints = np.arange(30) % 3
    out_obj = ENTRY_POINTS[entry](pd.Series(ints, dtype=object))
    out_int = ENTRY_POINTS[entry](ints)
    if hasattr(out_int, "components_"):
        np.testing.assert_array_equal(out_obj.components_, out_int.components_)
    elif isinstance(out_int, float):
        assert out_obj == out_int


def test_the_deep_learner_reads_object_integer_labels_as_integers():
    est = _deep().fit(X, pd.Series(np.arange(30) % 3, dtype=object))
    assert est.classes_.dtype.kind == "i"


def test_a_dataset_labels_with_none_are_named():
    from torch.utils.data import TensorDataset

    class Labelled(TensorDataset):
        targets = [None] + [i % 3 for i in range(1, 30)]

    with pytest.raises(ValueError, match="missing label"):
        _deep().fit(Labelled(torch.from_numpy(X).float()))


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
def test_a_column_of_string_labels_is_still_a_column(entry):
    # a review regression: [["a"], ["b"], ...] became an object array of lists, refused as
    # "legacy multi-label" (and Constraints took the lists themselves as classes)
    column = [[f"c{i % 3}"] for i in range(30)]
    flat = [f"c{i % 3}" for i in range(30)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scikit-learn's DataConversionWarning for a column
        out_col, out_flat = ENTRY_POINTS[entry](column), ENTRY_POINTS[entry](flat)
    if hasattr(out_flat, "components_"):
        np.testing.assert_array_equal(out_col.components_, out_flat.components_)
    elif isinstance(out_flat, float):
        assert out_col == out_flat


def test_constraints_read_the_unknown_label_in_a_column():
    from sklearn.exceptions import DataConversionWarning

    # named as the user passed it (audit 32: scikit-learn's message said "y")
    with pytest.warns(DataConversionWarning, match="column-vector partial_labels"):
        c = Constraints([["a"], ["a"], ["?"], ["?"], ["b"], ["b"]], unknown_label="?")
    a, b, _, _ = c.positive_negative_pairs(20, random_state=0)
    assert {tuple(sorted(p)) for p in zip(a.tolist(), b.tolist())} <= {(0, 1), (4, 5)}


def test_the_index_names_a_none_label():
    with pytest.raises(ValueError, match="missing label .* position 2"):
        RetrievalIndex().fit(X[:4], ["a", "b", None, "c"])


# audit 20 (mutation round 5): integer_ids_bounds_and_bytes
def test_integer_ids_at_the_64_bit_boundaries():
    from skdml._utils._labels import integer_ids

    ids = integer_ids([0, 2**63])  # one past int64: uint64, exactly
    assert ids.dtype == np.uint64 and int(ids[1]) == 2**63
    assert integer_ids([-1, 2**63 - 1]).dtype == np.int64
    assert int(integer_ids([0, 2**64 - 1])[1]) == 2**64 - 1
    with pytest.raises(ValueError, match="fit no 64-bit integer type"):
        integer_ids([0, 2**64])


def test_bytes_and_numbers_are_kept_apart_and_booleans_are_not_integers():
    from skdml._utils._labels import check_orderable_labels, keep_label_types

    mixed = keep_label_types([b"0", 0])  # np.asarray made both b"0": one class
    assert mixed.dtype == object and mixed.tolist() == [b"0", 0]
    flags = check_orderable_labels(np.array([True, False, True], dtype=object))
    assert [type(v) for v in flags.tolist()] == [bool, bool, bool]  # not made 1, 0, 1


def test_a_column_of_labels_warns_at_the_users_line_at_every_entry_point():
    # audit 21: scikit-learn's column_or_1d warns with a fixed stacklevel, which named
    # sklearn/utils/validation.py (learners) or skdml's own file (Constraints, the splitter)
    from sklearn.exceptions import DataConversionWarning

    from skdml.linear import MLKR, RCA_Supervised

    labels = np.repeat([0, 1, 2], 10)
    column = labels[:, None]
    calls = {
        "LFDA": lambda: LFDA(k=3).fit(X, column),
        "ECAML": lambda: ECAML(n_components=2, max_iter=2, random_state=0).fit(X, column),
        "RCA_Supervised": lambda: RCA_Supervised(n_chunks=6, chunk_size=3,
                                                 random_state=0).fit(X, column),
        "MLKR": lambda: MLKR(max_iter=2).fit(X, column.astype(float)),
        "Constraints": lambda: Constraints(column),
        "ClassDisjointSplit": lambda: list(ClassDisjointSplit(n_splits=2, random_state=0)
                                           .split(X, column)),
        "recall_at_k": lambda: recall_at_k(X, column, k=1),
        "DeepMetricTransformer": lambda: DeepMetricTransformer(
            n_components=2, max_iter=1, early_stopping=False,
            random_state=0).fit(X.astype(np.float32), column),
    }
    for name, call in calls.items():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            call()
        found = [w for w in caught if issubclass(w.category, DataConversionWarning)]
        assert len(found) == 1, name
        assert found[0].filename == __file__, (name, found[0].filename)


def test_labels_in_a_sparse_matrix_are_refused_by_name():
    from scipy.sparse import csr_matrix

    column = csr_matrix(np.repeat([0, 1, 2], 10)[:, None])
    for call in (lambda: LFDA(k=3).fit(X, column), lambda: Constraints(column),
                 lambda: list(ClassDisjointSplit(n_splits=2).split(X, column))):
        with pytest.raises(ValueError, match="dense 1-d array; got a sparse"):
            call()


def test_a_column_of_labels_in_a_dataset_is_still_refused():
    # review of audit 21: a Dataset's labels are not a y argument: the column convention
    # (flattened with a warning about "y") does not apply to them
    labelled = torch.utils.data.TensorDataset(torch.as_tensor(X, dtype=torch.float32))
    labelled.targets = np.repeat([0, 1, 2], 10)[:, None]
    with pytest.raises(ValueError, match=r"Expected 30 labels for the Dataset, got shape \(30, 1\)"):
        DeepMetricTransformer(n_components=2, max_iter=1).fit(labelled)


@pytest.mark.parametrize("fit, y, shown", [
    (lambda X, y: ECAML(max_iter=1).fit(X, y), [0, 0, 0, 1, 1, 1, 2, 2, 7], "class(es) [7] have"),
    (lambda X, y: ECAML(max_iter=1).fit(X, y), ["a"] * 4 + ["b"] * 4 + ["lonely"],
     "class(es) ['lonely'] have"),
    (lambda X, y: ECAML(max_iter=1).fit(X, y),  # numpy scalars in an object array
     np.array([np.str_("a")] * 4 + [np.str_("b")] * 4 + [np.str_("lonely")], dtype=object),
     "class(es) ['lonely'] have"),
    (lambda X, y: ECAML(max_iter=1).fit(X, y), np.zeros(9), "1 class (0.0)"),
    (lambda X, y: LFDA().fit(X, y), np.zeros(9), "1 class (0.0)"),
    (lambda X, y: recall_at_k(X, y), np.full(9, 3), "single class (3)"),
])
def test_messages_show_labels_as_plain_values(fit, y, shown):
    """Not numpy's reprs (``np.int64(7)``, ``np.str_('lonely')``) of numpy 2."""
    X = np.random.RandomState(0).randn(9, 3)
    with pytest.raises(ValueError) as error:
        fit(X, y)
    assert shown in str(error.value) and "np." not in str(error.value)

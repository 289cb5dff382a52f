"""The fourth audit's second round: deep warm starts, the linear learners' options, and the
tools around them (loaders, the command line, the distributed scorer, plotting).

See tests/_robustness_cases.py for Case, check and classify. Every case runs against the
old code too (``benchmarks/studies/audit_robustness.py --checkout``); a case whose old
answer was a refusal of a valid input, or a wrong answer, raises ``Wrong``.
"""

from __future__ import annotations

import tempfile

import numpy as np

from _robustness_cases import Case, Wrong, check, linear, quiet


def _blobs():
    rng = np.random.RandomState(0)
    y = np.repeat(np.arange(6), 12)
    return (rng.randn(6, 10) * 3)[y] + rng.randn(len(y), 10), y


def _deep(**params):
    import torch

    from skdml import DeepMetricTransformer
    torch.manual_seed(0)
    backbone = torch.nn.Sequential(torch.nn.Linear(10, 16), torch.nn.ReLU())
    base = dict(backbone=backbone, n_components=4, device="cpu", random_state=0,
                early_stopping=False)
    return DeepMetricTransformer(**{**base, **params})


def warm_start_auto():
    X, y = _blobs()
    est = _deep(max_iter=2).fit(X, y)
    try:
        est.set_params(warm_start=True, max_iter="auto").fit(X, y)
    except TypeError as exc:  # the documented default
        raise Wrong(f"max_iter='auto' refused: {exc}") from exc


def warm_start_after_interrupt():
    from skdml.callbacks import Callback

    class Interrupt(Callback):
        def on_epoch_end(self, estimator, info):
            if info.epoch == 3:
                raise KeyboardInterrupt

    X, y = _blobs()
    full = _deep(max_iter=4).fit(X, y)
    est = _deep(max_iter=2).fit(X, y)
    try:
        est.set_params(max_iter=4, warm_start=True, callbacks=[Interrupt()]).fit(X, y)
    except KeyboardInterrupt:
        pass
    est.set_params(callbacks=None).fit(X, y)
    gap = float(np.abs(est.transform(X) - full.transform(X)).max())
    check(gap == 0.0, f"the retried warm start drifted by {gap:.3g}")


def warm_start_other_data():
    X, y = _blobs()
    est = _deep(max_iter=1).fit(X[::2], y[::2])
    est.set_params(warm_start=True, max_iter=2).fit(X, y)  # twice the samples
    raise Wrong("resumed on other data: trained on the old run's row numbers")


def class_disjoint_three_classes():
    from sklearn.datasets import load_iris
    X, y = load_iris(return_X_y=True)
    try:
        linear("ECAML", validation_split="class_disjoint", max_iter=5).fit(X, y)
    except ValueError as exc:
        raise Wrong(f"a valid setting refused: {exc}") from exc


def suml_keeps_training_data():
    import pickle
    rng = np.random.RandomState(0)
    sizes = [len(pickle.dumps(linear("SUML", n_components=3, max_iter=0).fit(rng.randn(n, 20))))
             for n in (200, 4000)]
    check(sizes[1] < 1.5 * sizes[0], f"pickle sizes {sizes}: the training data kept")


def suml_steepest_descent_history():
    from sklearn.datasets import load_digits
    est = linear("SUML", n_components=3, n_triplets=300, max_iter=3,
                 solver="steepest_descent").fit(load_digits().data[:200])
    numbers = [r["iteration"] for r in est.history_]
    check(numbers == [0, 1, 2, 3], f"history numbered {numbers}")


def suml_large_tol():
    from sklearn.datasets import load_digits
    est = linear("SUML", n_components=3, n_triplets=300, tol=10.0).fit(load_digits().data[:200])
    check(est.n_iter_ <= 20, f"a tol of 10 ran {est.n_iter_} iterations")


def distributed_bad_batch_size():
    from skdml.metrics import distributed_retrieval_scores
    X, y = np.random.RandomState(0).randn(30, 3), np.repeat(np.arange(3), 10)
    scores = distributed_retrieval_scores(X, y, k=1, batch_size=-5)
    raise Wrong(f"batch_size=-5 accepted: {scores}")


def loader_home_below_a_file():
    from skdml.datasets import fetch_file
    with tempfile.TemporaryDirectory() as tmp:
        blocker = f"{tmp}/a_file"
        open(blocker, "w").close()
        try:
            fetch_file("usps_16x16.mat", f"{blocker}/home", url="http://127.0.0.1:9/x",
                       timeout=5)
        except OSError as exc:
            check("SKDML_DATA" in str(exc), f"no install-by-hand hint: {exc}")
            raise


def loader_timeout_none():
    from skdml.datasets import fetch_file
    with tempfile.TemporaryDirectory() as tmp:
        fetch_file("usps_16x16.mat", tmp, url="http://127.0.0.1:9/x", timeout=None)


def plot_uint8_queries():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from sklearn.datasets import load_digits

    from skdml.plotting import plot_retrieval
    X = load_digits().data[:300]
    plt.close(plot_retrieval(X, np.array([5], dtype=np.uint8)))


def index_identity_transformer():
    from sklearn.preprocessing import FunctionTransformer

    from skdml.retrieval import RetrievalIndex
    X = np.random.RandomState(0).rand(5, 3)
    index = RetrievalIndex(FunctionTransformer()).fit(X)
    X[:] = 0
    check(index.embeddings_.any(), "the caller's edit of X changed the gallery")


def index_loaded_width():
    from skdml.retrieval import RetrievalIndex
    with tempfile.TemporaryDirectory() as tmp:
        RetrievalIndex().fit(np.ones((4, 3))).save(f"{tmp}/index.npz")
        loaded = RetrievalIndex.load(f"{tmp}/index.npz")
    check(getattr(loaded, "n_features_in_", None) == 3, "a loaded index lacks n_features_in_")


def index_object_float_labels():
    from skdml.retrieval import RetrievalIndex
    labels = np.array([0.5, 1.0] * 5, dtype=object)
    try:
        RetrievalIndex().fit(np.random.RandomState(0).rand(10, 4), labels)
    except ValueError as exc:
        raise Wrong(f"numbers refused as labels: {exc}") from exc


def threads_overlapping_sections():
    import threading

    import torch

    from skdml._utils import thread_limits
    inside, first_out, sizes = threading.Event(), threading.Event(), {}

    def first():
        sizes["before"] = torch.get_num_threads()
        with thread_limits(1):
            inside.wait()
        sizes["after"] = torch.get_num_threads()
        first_out.set()

    def second():
        with thread_limits(1):
            inside.set()
            first_out.wait()

    workers = [threading.Thread(target=f) for f in (first, second)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    check(sizes["after"] == sizes["before"], f"the thread kept {sizes['after']} torch threads "
          f"(had {sizes['before']})")


def threads_override_underscore():
    import os

    from skdml._utils import thread_budget
    old = os.environ.get("SKDML_NUM_THREADS")
    os.environ["SKDML_NUM_THREADS"] = "2_0"
    try:
        n = thread_budget()
    finally:
        if old is None:
            del os.environ["SKDML_NUM_THREADS"]
        else:
            os.environ["SKDML_NUM_THREADS"] = old
    raise Wrong(f"SKDML_NUM_THREADS='2_0' read as a count ({n})")


def deml_energy_confusion():
    from skdml.deep import make_deml
    rng = np.random.RandomState(0)
    y = np.repeat(np.arange(4), 16)
    X = (rng.rand(4, 1, 16, 16)[y] + 0.2 * rng.rand(64, 1, 16, 16)).astype(np.float32)
    make_deml(1, 2, n_components=16, widths=(8, 16, 16), deml_params={"crop_min_size": 8},
              max_iter=1, loader_params={"batches_per_epoch": 2}, device="cpu", random_state=0,
              early_stopping=False, regularizer="ec", regularizer_weight=1.0).fit(X, y)
    raise Wrong("regularizer='ec' accepted where it changes nothing")


CASES = [Case(name, group, quiet(fn), budget) for name, group, fn, budget in [
    ("deep warm_start with max_iter='auto'", "obscure", warm_start_auto, 60),
    ("deep warm_start retried after an interrupt", "silent", warm_start_after_interrupt, 60),
    ("deep warm_start on other data", "silent", warm_start_other_data, 60),
    ("ECAML class_disjoint on 3 classes", "silent", class_disjoint_three_classes, 30),
    ("SUML keeps its training data", "silent", suml_keeps_training_data, 30),
    ("SUML steepest descent history", "silent", suml_steepest_descent_history, 30),
    ("SUML tol=10", "silent", suml_large_tol, 60),
    ("distributed_retrieval_scores(batch_size=-5)", "silent", distributed_bad_batch_size, 30),
    ("fetch_file, a data home below a file", "obscure", loader_home_below_a_file, 30),
    ("fetch_file(timeout=None)", "obscure", loader_timeout_none, 30),
    ("plot_retrieval, uint8 query indices", "obscure", plot_uint8_queries, 30),
    ("RetrievalIndex, a transformer returning X itself", "silent", index_identity_transformer,
     30),
    ("RetrievalIndex.load, n_features_in_", "silent", index_loaded_width, 30),
    ("RetrievalIndex, float labels in an object array", "silent", index_object_float_labels, 30),
    ("thread_limits sections overlapping in two threads", "silent",
     threads_overlapping_sections, 30),
    ("SKDML_NUM_THREADS='2_0'", "silent", threads_override_underscore, 30),
    ("DeML with regularizer='ec'", "silent", deml_energy_confusion, 60),
]]

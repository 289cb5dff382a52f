"""Grid search and cross-validation on a Dask cluster through joblib's Dask backend.

One ``LocalCluster`` of 2 worker processes (2 task slots each) on 127.0.0.1 serves
the module. Every skdml learner and scorer must pickle to the workers, give the
same ``cv_results_`` as ``n_jobs=1`` for the same ``random_state``, stay within
the worker's thread budget, ship the data once per search, and survive (or
report clearly) a worker that dies mid-search.
"""

import os
import signal
import sys
import threading
import time
import types

import numpy as np
import pytest
from sklearn.datasets import load_digits
from sklearn.model_selection import GridSearchCV, KFold, cross_validate
from sklearn.neighbors import KNeighborsClassifier
from sklearn.pipeline import make_pipeline

distributed = pytest.importorskip("distributed")
joblib = pytest.importorskip("joblib")

from skdml._utils import _threads, thread_budget, thread_limits  # noqa: E402
from skdml.deep import DeepMetricTransformer  # noqa: E402
from skdml.linear import ECAML, JRD, SUML  # noqa: E402
from skdml.metrics import (map_at_r_scorer, nmi_scorer, recall_at_k_scorer)  # noqa: E402

_X, _Y = load_digits(return_X_y=True)
X = (_X[:200] / 16.0).astype(np.float64)
Y = _Y[:200]
CV = KFold(2, shuffle=True, random_state=0)


def _searches():
    """One small search per learner; each also exercises a scorer of skdml."""
    return {
        "ECAML+kNN": GridSearchCV(
            make_pipeline(ECAML(n_components=8, max_iter=3, random_state=0),
                          KNeighborsClassifier(3)),
            {"ecaml__regularizer_weight": [0.0, 0.1]}, cv=CV),
        "SUML": GridSearchCV(SUML(n_components=8, n_triplets=200, max_iter=5, random_state=0),
                             {"n_components": [4, 8]}, cv=CV, scoring=recall_at_k_scorer(1)),
        "JRD": GridSearchCV(JRD(n_components=8, max_iter=3, random_state=0),
                            {"n_components": [4, 8]}, cv=CV, scoring=map_at_r_scorer()),
        "Deep": GridSearchCV(DeepMetricTransformer(n_components=4, max_iter=1,
                                                   loader_params={"batches_per_epoch": 2},
                                                   device="cpu",
                                                   random_state=0),
                             {"n_components": [3, 4]}, cv=CV,
                             scoring={"r1": recall_at_k_scorer(1), "nmi": nmi_scorer()},
                             refit="r1"),
    }


def _scores(results):
    return {k: v for k, v in results.items()
            if k.startswith(("split", "mean_test", "std_test", "rank_test"))}


def _assert_same_results(expected, got):
    for key, value in _scores(expected).items():
        if key.startswith(("split", "mean_test")):  # NaN == NaN would hide failed scoring
            assert np.isfinite(np.asarray(value, dtype=float)).all(), key
        np.testing.assert_array_equal(got[key], value, err_msg=key)
    assert [str(p) for p in got["params"]] == [str(p) for p in expected["params"]]


@pytest.fixture(scope="module")
def client():
    import dask

    # No OMP_NUM_THREADS from the nanny: the thread test then checks that skdml
    # itself splits a worker's cores between its task slots.
    with dask.config.set({"distributed.nanny.pre-spawn-environ": {}}), \
            distributed.LocalCluster(n_workers=2, threads_per_worker=2, host="127.0.0.1",
                                     dashboard_address=":0", processes=True) as cluster, \
            distributed.Client(cluster) as c:
        yield c


@pytest.fixture(scope="module")
def serial_results():
    results = {}
    for name, search in _searches().items():
        results[name] = search.fit(X, Y).cv_results_
    return results


def test_search_on_dask_equals_n_jobs_1(client, serial_results):
    with joblib.parallel_config(backend="dask"):
        for name, search in _searches().items():
            search.set_params(n_jobs=-1).fit(X, Y)
            _assert_same_results(serial_results[name], search.cv_results_)


def test_cross_validate_on_dask_equals_n_jobs_1(client):
    # an embedding scorer needs a transformer; a k-NN pipeline is scored by accuracy
    scoring = {"recall@1": recall_at_k_scorer(1)}
    est = ECAML(n_components=6, max_iter=2, random_state=1)
    knn = make_pipeline(ECAML(n_components=6, max_iter=2, random_state=1),
                        KNeighborsClassifier(1))
    expected = cross_validate(est, X, Y, cv=CV, scoring=scoring)
    expected_knn = cross_validate(knn, X, Y, cv=CV, scoring="accuracy")
    with joblib.parallel_config(backend="dask"):
        got = cross_validate(est, X, Y, cv=CV, scoring=scoring, n_jobs=-1)
        got_knn = cross_validate(knn, X, Y, cv=CV, scoring="accuracy", n_jobs=-1)
    assert np.isfinite(expected["test_recall@1"]).all()  # a NaN would compare equal to NaN
    np.testing.assert_array_equal(got["test_recall@1"], expected["test_recall@1"])
    np.testing.assert_array_equal(got_knn["test_score"], expected_knn["test_score"])


def _budget_in_task():
    import torch
    from threadpoolctl import threadpool_info

    with thread_limits() as granted:
        blas = [p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"]
        return {"granted": granted, "torch": torch.get_num_threads(), "blas": blas,
                "cores": joblib.cpu_count(only_physical_cores=False),
                "omp": os.environ.get("OMP_NUM_THREADS"),
                "slots": distributed.get_worker().state.nthreads}


def test_dask_task_gets_its_share_of_the_worker(client):
    seen = client.gather([client.submit(_budget_in_task, pure=False) for _ in range(4)])
    for s in seen:
        assert s["slots"] == 2 and s["omp"] is None  # the budget comes from skdml's rule
        share = max(1, s["cores"] // s["slots"])
        assert s["granted"] <= share and s["torch"] <= share
        assert all(n <= share for n in s["blas"])


def test_thread_budget_divides_by_task_slots(monkeypatch):
    # a fake worker with 4 task slots: the budget is a quarter of what it would be
    monkeypatch.delenv("SKDML_NUM_THREADS", raising=False)
    for var in _threads._THREAD_VARS:
        monkeypatch.setenv(var, "8")
    monkeypatch.setattr(_threads, "cpu_count", lambda only_physical_cores=False: 8)
    monkeypatch.setattr(_threads.torch, "get_num_threads", lambda: 8)
    assert thread_budget() == 8
    worker = types.SimpleNamespace(state=types.SimpleNamespace(nthreads=4), nthreads=4)
    fake = types.SimpleNamespace(get_worker=lambda: worker)
    monkeypatch.setitem(sys.modules, "distributed", fake)
    assert thread_budget() == 2
    worker.state.nthreads = worker.nthreads = 16
    assert thread_budget() == 1


def test_data_are_scattered_once_per_search(client, monkeypatch):
    calls = []
    original = type(client).scatter

    def spy(self, data, *args, **kwargs):
        calls.append(data)
        return original(self, data, *args, **kwargs)

    monkeypatch.setattr(type(client), "scatter", spy)
    search = _searches()["JRD"].set_params(n_jobs=-1)
    with joblib.parallel_config(backend="dask"):
        search.fit(X, Y)
    n_tasks = len(search.cv_results_["params"]) * CV.get_n_splits()
    assert n_tasks == 4
    assert sum(d is X for d in calls) == 1  # not once per task
    assert sum(d is Y for d in calls) == 1


def _slow_search():
    # a fixed amount of work (no early stopping), long enough that the worker dies mid-search
    return GridSearchCV(make_pipeline(ECAML(n_components=8, max_iter=60, early_stopping=False,
                                            tol=0.0, random_state=0),
                                      KNeighborsClassifier(3)),
                        {"ecaml__regularizer_weight": [0.0, 0.05, 0.1, 0.2]}, cv=CV, n_jobs=-1)


def _kill_one_worker(client, delay, record):
    pids = client.run(os.getpid)
    victim = sorted(pids.values())[0]
    time.sleep(delay)
    os.kill(victim, signal.SIGKILL)
    record["killed"], record["at"] = victim, time.perf_counter()


def _search_with_a_killed_worker(client, **config):
    record = {}
    killer = threading.Thread(target=_kill_one_worker, args=(client, 0.2, record))
    search = _slow_search()
    error = None
    try:
        with joblib.parallel_config(backend="dask", **config):
            killer.start()
            search.fit(X, Y)
    except Exception as exc:  # noqa: BLE001 - the test inspects it
        error = exc
    done = time.perf_counter()
    killer.join()
    assert record["at"] < done, "the search finished before the worker was killed"
    _wait_for_replacement(client, record["killed"])
    return search, error


def _wait_for_replacement(client, killed, timeout=60):
    """Wait until the nanny's new worker has replaced the killed one (the scheduler may
    still list the dead one for a moment, and a broadcast to it fails)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            pids = client.run(os.getpid).values()
            if len(pids) == 2 and killed not in pids:
                return
        except (OSError, distributed.comm.CommClosedError):
            pass
        assert time.monotonic() < deadline, "the killed worker was not replaced in time"
        time.sleep(0.2)


@pytest.fixture(scope="module")
def slow_expected():
    return _slow_search().set_params(n_jobs=None).fit(X, Y).cv_results_


def test_killed_worker_with_default_scatter_is_same_result_or_clear_error(client, slow_expected):
    # Dask re-runs the tasks of a dead worker elsewhere; but joblib's automatic scatter
    # keeps one copy of each argument over 1 kB (X, y, the fold indices) on one worker,
    # and losing it makes Dask cancel the search (FutureCancelledError). Either way,
    # never a partial or wrong table.
    search, error = _search_with_a_killed_worker(client)
    if error is None:
        _assert_same_results(slow_expected, search.cv_results_)
    else:
        assert isinstance(error, (distributed.client.FutureCancelledError,
                                  distributed.KilledWorker)), repr(error)
        assert not hasattr(search, "cv_results_")


def _retrieval_cases():
    rng = np.random.RandomState(0)
    y = rng.randint(0, 7, 301)
    X = rng.randn(301, 5) + y[:, None]
    grid = np.round(X)  # many exact ties: the float64 repair path decides them
    gallery = rng.randn(120, 5) + rng.randint(0, 7, 120)[:, None]
    y_gallery = rng.randint(0, 7, 120)
    return [dict(X=X, y=y), dict(X=grid, y=y), dict(X=X, y=y, metric="cosine"),
            dict(X=X, y=y, X_ref=gallery, y_ref=y_gallery)]


@pytest.mark.parametrize("case", range(4))
def test_sharded_retrieval_on_dask_equals_one_process(client, case):
    from skdml.metrics import retrieval_scores, sharded_retrieval_scores

    kwargs = _retrieval_cases()[case]
    expected = retrieval_scores(k=[1, 5, 20], batch_size=64, **kwargs)
    with joblib.parallel_config(backend="dask"):
        got = sharded_retrieval_scores(k=[1, 5, 20], n_shards=3, n_jobs=-1, batch_size=64,
                                       **kwargs)
    assert got == expected  # bit for bit


def test_reduction_refuses_missing_shards():
    from skdml.metrics._retrieval import query_scores
    from skdml.metrics._sharded import _check_tiling

    X, y = _retrieval_cases()[0]["X"], _retrieval_cases()[0]["y"]
    part = query_scores(X, y, [1], want_map=True, metric="euclidean", X_ref=None, y_ref=None,
                        batch_size=None, device=None, rows=(0, 100))
    with pytest.raises(ValueError, match="a shard is missing or repeated"):
        _check_tiling([part], len(X))

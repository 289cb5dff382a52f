"""Bad inputs and parameters get a clear error or the exact answer, never a silent wrong one.

Losses propagate non-finite embeddings; the retrieval scores rank exactly at large
offsets for every metric; the distributed scores refuse ranks holding different
data; constructors validate their parameters; ``SKDML_NUM_THREADS`` is clamped.
"""

import inspect

import numpy as np
import pytest
import torch

from skdml.losses import LOSSES, REGULARIZERS, DecoupledLoss, MetricObjective


# ------------------------------------------------------------------ losses
def _build(cls):
    params = inspect.signature(cls).parameters
    if "n_classes" in params:
        return cls(n_classes=4, embedding_dim=6)
    if "n_learners" in params:
        return cls(n_learners=2)
    return cls()


ALL_LOSSES = {**LOSSES, **REGULARIZERS, "decoupled": DecoupledLoss}


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
@pytest.mark.parametrize("name", sorted(ALL_LOSSES))
def test_every_loss_is_nan_for_a_non_finite_embedding(name, bad):
    loss = _build(ALL_LOSSES[name])
    y = torch.arange(4).repeat_interleave(3)
    z = torch.randn(12, 6, generator=torch.Generator().manual_seed(0))
    z[5, 2] = bad
    value = loss([z], y) if name == "jrs" else loss(z, y)
    assert torch.isnan(value), f"{name} gave {value} for a batch holding {bad}"
    z[5, 2] = 0.0  # the same batch, finite: a finite value
    value = loss([z], y) if name == "jrs" else loss(z, y)
    assert torch.isfinite(value), name


def test_objective_propagates_a_non_finite_embedding_a_foreign_loss_hides():
    def masking_loss(z, y):  # drops non-finite rows, as a mining step may
        keep = torch.isfinite(z).all(dim=1)
        return (z[keep] ** 2).mean()

    z = torch.randn(6, 3)
    y = torch.tensor([0, 0, 1, 1, 2, 2])
    assert torch.isfinite(MetricObjective(masking_loss)(z, y)[0])
    z[1, 0] = float("nan")
    total, terms = MetricObjective(masking_loss)(z, y)
    assert torch.isnan(total) and torch.isnan(terms["metric_loss"])


# ------------------------------------------------------------------ SKDML_NUM_THREADS
def _threads_in_child(value):
    """Run a threaded score in a child process with ``SKDML_NUM_THREADS=value``."""
    import os
    import subprocess
    import sys
    code = ("import warnings, numpy as np, torch\n"
            "from skdml.metrics import recall_at_k\n"
            "X = np.random.RandomState(0).rand(3000, 64); y = np.arange(3000) % 5\n"
            "with warnings.catch_warnings(record=True) as w:\n"
            "    warnings.simplefilter('always')\n"
            "    recall_at_k(X, y)\n"
            "warned = any('SKDML_NUM_THREADS' in str(x.message) for x in w)\n"
            "print('WARN' if warned else 'NOWARN')\n")
    env = dict(os.environ, SKDML_NUM_THREADS=value)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=120)


def test_huge_thread_override_is_clamped_with_a_warning():
    proc = _threads_in_child("100000")
    assert proc.returncode == 0, f"rc={proc.returncode}: {proc.stderr[-400:]}"
    assert proc.stdout.strip().endswith("WARN") and "NOWARN" not in proc.stdout


@pytest.mark.parametrize("value", ["0", "-2", "2.5", "four"])
def test_bad_thread_override_is_refused_clearly(value, monkeypatch):
    from skdml._utils import thread_budget
    monkeypatch.setenv("SKDML_NUM_THREADS", value)
    with pytest.raises(ValueError, match="SKDML_NUM_THREADS.*positive integer"):
        thread_budget()


# ------------------------------------------------------------------ parameters
def test_triplet_margin_must_be_non_negative():
    from skdml.losses import TripletLoss
    with pytest.raises(ValueError, match="TripletLoss: margin"):
        TripletLoss(margin=-1)
    assert TripletLoss(margin=0).margin == 0.0


@pytest.mark.parametrize("args, kwargs, name", [
    ((0,), {}, "in_features"), ((True,), {}, "in_features"), ((10,), {"hidden": (16, 0)}, "hidden"),
    ((10,), {"hidden": ()}, "hidden"), ((10,), {"dropout": 1.5}, "dropout")])
def test_mlp_validates_its_sizes(args, kwargs, name):
    from skdml.deep import MLP
    with pytest.raises(ValueError, match=f"MLP: {name}"):
        MLP(*args, **kwargs)


def test_convnet_takes_an_int_image_size_and_refuses_bad_ones():
    from skdml.deep import ConvNet
    x = torch.zeros(2, 1, 28, 28)
    assert ConvNet(1, 28).eval()(x).shape == ConvNet(1, (28, 28)).eval()(x).shape == (2, 64)
    for args in [(1, (28,)), (1, (28, 0)), (0, 28), (True, 28), (1, 28.5), (1, "28")]:
        with pytest.raises(ValueError, match="ConvNet: (image_size|in_channels)"):
            ConvNet(*args)
    with pytest.raises(ValueError, match="ConvNet: n_blocks"):
        ConvNet(1, 28, n_blocks=0)


def test_deep_estimator_refuses_a_bool_for_an_int():
    from skdml.deep import DeepMetricTransformer
    X = np.random.RandomState(0).rand(20, 4).astype(np.float32)
    y = np.repeat(np.arange(4), 5)
    with pytest.raises(ValueError, match="n_components"):
        DeepMetricTransformer(n_components=True, max_iter=1, device="cpu").fit(X, y)


@pytest.mark.parametrize("kwargs, name", [({"n_scales": 0}, "n_scales"), ({"n_cams": 0}, "n_cams"),
                                          ({"n_scales": True}, "n_scales")])
def test_make_deml_validates_the_learner_grid(kwargs, name):
    from skdml.deep import make_deml
    with pytest.raises(ValueError, match=f"make_deml: {name}"):
        make_deml(**kwargs)


# ------------------------------------------------------------------ exact cosine at an offset
def _angles(X):
    """Angles between rows by Kahan's formula, accurate in float64 even for nearly parallel rows.

    ``2 atan2(|| x |y| - y |x| ||, || x |y| + y |x| ||)``: no cosine is formed, so the tiny
    angles of rows sharing a huge offset keep their digits (unlike ``1 - <u, v>``).
    """
    X = np.asarray(X, dtype=np.float64)
    norms = np.linalg.norm(X, axis=1)
    out = np.empty((len(X), len(X)))
    for i, x in enumerate(X):
        a, b = x[None, :] * norms[:, None], X * norms[i]
        out[i] = 2 * np.arctan2(np.linalg.norm(a - b, axis=1), np.linalg.norm(a + b, axis=1))
    return out


@pytest.mark.parametrize("offset", [1e8, 1e12])
def test_cosine_scores_are_exact_at_a_large_offset(offset):
    from skdml.metrics import nearest_neighbors, recall_at_k
    rng = np.random.RandomState(0)
    y = np.repeat(np.arange(10), 20)
    X = rng.randn(200, 8) + 1.5 * rng.randn(10, 8)[y] + offset
    A = _angles(X)
    np.fill_diagonal(A, np.inf)
    want = np.argsort(A, axis=1, kind="stable")[:, :3]
    assert np.array_equal(nearest_neighbors(X, 3, metric="cosine"), want)
    assert recall_at_k(X, y, metric="cosine") == np.mean(y[want[:, 0]] == y)


# ------------------------------------------------------------------ R-precision
def _brute_ranking(Q, R, exclude_self):
    """Per query: references sorted by (float64 squared distance, index)."""
    Q, R = np.asarray(Q, np.float64), np.asarray(R, np.float64)
    orders = []
    for i, q in enumerate(Q):
        order = np.argsort(np.sum((R - q) ** 2, axis=1), kind="stable")
        orders.append(order[order != i] if exclude_self else order)
    return orders


def _brute_map_and_rp(Q, yq, R=None, yr=None):
    exclude_self = R is None
    R, yr = (Q, yq) if exclude_self else (R, yr)
    aps, rps = [], []
    for i, order in enumerate(_brute_ranking(Q, R, exclude_self)):
        rel = yr[order] == yq[i]
        n_rel = int(rel.sum())
        if n_rel == 0:
            continue
        hits, ap = 0, 0.0
        for rank in range(1, n_rel + 1):
            if rel[rank - 1]:
                hits += 1
                ap += hits / rank
        aps.append(ap / n_rel)
        rps.append(hits / n_rel)
    return float(np.mean(aps)), float(np.mean(rps))


def _tied_data(seed):
    """Integer-grid points, each twice (ties at distance 0 and between grid distances)."""
    rng = np.random.RandomState(seed)
    base = rng.randint(-3, 4, size=(40, 3)).astype(np.float64)
    X = np.repeat(base, 2, axis=0)
    y = rng.randint(0, 4, size=len(X))
    return X, y


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_r_precision_and_map_match_brute_force_with_ties(seed):
    from skdml.metrics import map_at_r, r_precision, retrieval_scores
    X, y = _tied_data(seed)
    want_map, want_rp = _brute_map_and_rp(X, y)
    assert r_precision(X, y) == pytest.approx(want_rp, abs=1e-12)
    assert map_at_r(X, y) == pytest.approx(want_map, abs=1e-12)
    both = retrieval_scores(X, y, k=1, batch_size=7)
    assert both["r_precision"] == pytest.approx(want_rp, abs=1e-12)
    assert both["map_at_r"] == pytest.approx(want_map, abs=1e-12)
    q = np.arange(len(X)) % 3 == 0  # query/gallery form
    want_rp = _brute_map_and_rp(X[q], y[q], X[~q], y[~q])[1]
    assert r_precision(X[q], y[q], X_ref=X[~q], y_ref=y[~q]) == pytest.approx(want_rp, abs=1e-12)


def test_r_precision_differs_from_map_and_has_a_scorer():
    from sklearn.decomposition import PCA

    from skdml.metrics import map_at_r, r_precision, r_precision_scorer, sharded_retrieval_scores
    X = np.array([[0.0], [0.4], [0.5], [1.0], [1.1], [1.15]])
    y = np.array([0, 1, 0, 1, 0, 1])
    want_map, want_rp = _brute_map_and_rp(X, y)
    assert want_map != want_rp
    assert (map_at_r(X, y), r_precision(X, y)) == pytest.approx((want_map, want_rp), abs=1e-12)
    assert r_precision_scorer()(PCA(1).fit(X), X, y) == pytest.approx(want_rp, abs=1e-12)
    assert "r_precision_scorer(metric='euclidean'" in repr(r_precision_scorer())
    assert sharded_retrieval_scores(X, y, k=1, n_shards=2, n_jobs=1)["r_precision"] == \
        pytest.approx(want_rp, abs=1e-12)


# ------------------------------------------------------------------ distributed scores
def _scores_on_own_data(rank, world_size, port, out_dir):
    """A rank of a gloo job scoring data that differs between ranks (rank 1's is shifted)."""
    import os

    import torch.distributed as dist
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), SKDML_NUM_THREADS="1")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    try:
        from skdml.metrics import distributed_retrieval_scores
        rng = np.random.RandomState(0)
        y = np.repeat(np.arange(5), 8)
        X = rng.randn(40, 3) + 2.0 * rng.randn(5, 3)[y]
        if rank == 1:
            X = X[::-1].copy()  # the same rows, another order: other queries, other labels
        try:
            outcome = distributed_retrieval_scores(X, y, k=[1, 3])
        except ValueError as exc:
            outcome = f"ValueError: {exc}"
        with open(os.path.join(out_dir, f"rank{rank}.txt"), "w") as fh:
            fh.write(outcome if isinstance(outcome, str) else repr(outcome))
    finally:
        dist.destroy_process_group()


@pytest.mark.slow  # two spawned processes importing torch: 10-30 s
def test_distributed_scores_refuse_ranks_with_different_data(tmp_path):
    import socket
    import time

    import torch.distributed as dist
    import torch.multiprocessing as mp
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.start_processes(_scores_on_own_data, args=(2, port, str(tmp_path)), nprocs=2,
                             join=False, start_method="spawn")
    deadline = time.monotonic() + 120
    try:
        while not ctx.join(timeout=1):
            assert time.monotonic() < deadline, "the ranks hung"
    finally:
        for p in ctx.processes:
            if p.is_alive():
                p.terminate()
    for rank in range(2):
        text = (tmp_path / f"rank{rank}.txt").read_text()
        assert text.startswith("ValueError") and "hold different inputs" in text, text


@pytest.mark.parametrize("kind", ["grid_ties", "few_points", "offset", "cosine"])
def test_large_class_scores_match_brute_force(kind):
    """Classes of ~300: long candidate lists (the thresholded selection and its fallback)."""
    from skdml.metrics import map_at_r, r_precision
    rng = np.random.RandomState(5)
    y = rng.randint(0, 2, 600)
    if kind == "grid_ties":
        X = rng.randint(-4, 5, size=(600, 3)).astype(np.float64)
    elif kind == "few_points":  # 27 distinct points: ties far beyond every list
        X = rng.randint(-1, 2, size=(600, 3)).astype(np.float64)
    else:
        X = rng.randn(600, 4) + 0.7 * y[:, None] + (1e6 if kind == "offset" else 0.0)
    metric = "cosine" if kind == "cosine" else "euclidean"
    Xb = X / np.linalg.norm(X, axis=1, keepdims=True) if metric == "cosine" else X
    want_map, want_rp = _brute_map_and_rp(Xb, y)
    assert map_at_r(X, y, metric=metric) == pytest.approx(want_map, abs=1e-12)
    assert r_precision(X, y, metric=metric, batch_size=97) == pytest.approx(want_rp, abs=1e-12)


def _nasty(kind):
    rng = np.random.RandomState(7)
    X = rng.randn(120, 5)
    if kind == "offset":
        X += 1e8
    elif kind == "outlier":
        X[3] = 1e7
    elif kind == "mixed":
        X[::2] *= 1e150
        X[1::2] *= 1e-150
    return X


@pytest.mark.parametrize("metric", ["euclidean", "cosine"])
@pytest.mark.parametrize("kind", ["plain", "offset", "outlier", "mixed"])
def test_per_query_slacks_contain_the_float64_distance(kind, metric):
    """The certificate of long lists: one slack pair per query bounds every candidate."""
    from skdml.metrics._exact import Frame
    X = _nasty(kind)
    frame = Frame(X, X, exclude_self=False, metric=metric, device=torch.device("cpu"))
    n = X.shape[0]
    with torch.inference_mode():
        vals, idx = torch.sort(frame.distances(slice(0, n), False), dim=1, stable=True)
    vals, idx = vals.numpy(), idx.numpy()
    rows = np.arange(n)
    v = frame.estimate(vals, rows)
    exact = frame.exact_distances(np.repeat(rows, n), idx.ravel()).reshape(n, n)
    with np.errstate(over="ignore", under="ignore"):
        exact = np.ldexp(exact, frame.frame_exp)
    for stop in (10, n):  # a list of the 10 nearest, and whole rows
        b_max = frame.r_norm[idx[:, :stop]].max(axis=1)
        s_hi, s_lo = frame.slacks(v[:, 0], v[:, stop - 1], rows, b_max)
        assert np.all(exact[:, :stop] <= v[:, :stop] + s_hi[:, None])
        assert np.all(exact[:, :stop] >= v[:, :stop] - s_lo[:, None])


@pytest.mark.parametrize("kwargs", [{"batch_size": -5}, {"batch_size": 0},
                                    {"metric": "Cosine"}, {"metric": "l1"}])
def test_distributed_retrieval_scores_checks_its_parameters(kwargs):
    # it had no parameter check: batch_size=-5 scored 0.0 everywhere, "Cosine" and "l1" ran
    # the Euclidean search
    from sklearn.utils._param_validation import InvalidParameterError

    from skdml.metrics import distributed_retrieval_scores
    X, y = np.random.RandomState(0).randn(30, 3), np.repeat(np.arange(3), 10)
    with pytest.raises(InvalidParameterError):
        distributed_retrieval_scores(X, y, k=1, **kwargs)

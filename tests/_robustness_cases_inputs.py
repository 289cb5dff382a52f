"""Issue-28 audit cases (inputs): see tests/_robustness_cases.py for Case, check and classify.

Losses and non-finite embeddings, exact cosine scores at an offset, distributed scores
over ranks holding different data, parameter validation, the thread override, and
MAP@R with large classes. Every case runs against the old code too.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from unittest import mock

import numpy as np

from _robustness_cases import Case, Missing, Refused, Wrong, blobs, check  # noqa: F401


def multisimilarity_nan():
    import torch
    from skdml.losses import MultiSimilarityLoss
    z = torch.randn(12, 6, generator=torch.Generator().manual_seed(0))
    z[5, 2] = float("nan")
    value = MultiSimilarityLoss()(z, torch.arange(4).repeat_interleave(3))
    check(torch.isnan(value), f"a NaN embedding gave the finite loss {float(value):.4f}")


def _kahan_angles(X):
    X = np.asarray(X, dtype=np.float64)
    norms = np.linalg.norm(X, axis=1)
    out = np.empty((len(X), len(X)))
    for i, x in enumerate(X):
        a, b = x[None, :] * norms[:, None], X * norms[i]
        out[i] = 2 * np.arctan2(np.linalg.norm(a - b, axis=1), np.linalg.norm(a + b, axis=1))
    np.fill_diagonal(out, np.inf)
    return out


def cosine_offset():
    from skdml.metrics import recall_at_k
    X, y = blobs(10, 20, 8)
    X = X + 1e8
    want = float(np.mean(y[np.argmin(_kahan_angles(X), axis=1)] == y))
    got = recall_at_k(X, y, metric="cosine")
    check(abs(got - want) < 1e-12, f"cosine recall_at_k={got:.3f}, accurate float64 {want:.3f}")


def distributed_mixed_data():
    """Rank 0 of a two-rank job whose rank 1 holds other data (its gather simulated)."""
    import torch.distributed as dist
    from skdml.metrics import distributed_retrieval_scores
    from skdml.metrics._retrieval import query_scores
    from skdml.metrics._sharded import shard_rows
    X, y = blobs(5, 8, 3)
    X_other = X[::-1].copy()

    def gather(out, obj):
        if isinstance(obj, dict) and "rows" in obj:  # rank 1 scores its own X
            other = query_scores(X_other, y, [1, 3], want_map=True, metric="euclidean",
                                 X_ref=None, y_ref=None, batch_size=None, device="cpu",
                                 rows=shard_rows(len(X), 1, 2))
        else:  # anything else rank 1 sends about its data differs too
            other = ("rank 1", obj)
        out[:] = [obj, other]

    with mock.patch.object(dist, "is_initialized", lambda: True), \
            mock.patch.object(dist, "get_rank", lambda: 0), \
            mock.patch.object(dist, "get_world_size", lambda: 2), \
            mock.patch.object(dist, "all_gather_object", gather):
        scores = distributed_retrieval_scores(X, y, k=[1, 3], device="cpu")
    check(False, f"ranks holding different X were mixed silently: {scores['recall_at_k']}")


def triplet_negative_margin():
    from skdml.losses import TripletLoss
    TripletLoss(margin=-1)
    check(False, "TripletLoss(margin=-1) accepted")


def mlp_zero_inputs():
    from skdml.deep import MLP
    MLP(0)
    check(False, "MLP(0) accepted")


def deep_bool_components():
    from _robustness_cases import deep, tiny_backbone, tiny_images
    X, y = tiny_images()
    est = deep(backbone=tiny_backbone(), n_components=True, max_iter=1).fit(X, y)
    check(False, f"n_components=True fitted as {est.transform(X[:1]).shape[1]} component(s)")


def deml_no_scales():
    from skdml.deep import make_deml
    make_deml(n_scales=0)
    check(False, "make_deml(n_scales=0) accepted")


def convnet_int_size():
    import torch
    from skdml.deep import ConvNet
    out = ConvNet(1, 28).eval()(torch.zeros(2, 1, 28, 28))
    check(tuple(out.shape) == (2, 64), f"ConvNet(1, 28) gave features of shape {out.shape}")


def threads_huge_override():
    code = ("import numpy as np\nfrom skdml.metrics import recall_at_k\n"
            "X = np.random.RandomState(0).rand(3000, 64); y = np.arange(3000) % 5\n"
            "print(recall_at_k(X, y))\n")
    env = dict(os.environ, SKDML_NUM_THREADS="100000")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=120)
    if proc.returncode < 0:
        raise RuntimeError(f"the process died of signal {-proc.returncode}")
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["?"])[-1]
        if "SKDML_NUM_THREADS" in last:
            raise Refused(last)
        raise RuntimeError(last)
    float(proc.stdout.strip().splitlines()[-1])


def map_large_classes():
    """MAP@R where every query has about 1,000 same-class neighbours (10 classes)."""
    from skdml.metrics import map_at_r
    rng = np.random.RandomState(0)
    y = rng.randint(0, 10, 10000)
    X = rng.randn(10000, 16).astype(np.float32)
    start = time.perf_counter()
    map_at_r(X, y)
    return time.perf_counter() - start


CASES = [
    Case("MultiSimilarityLoss, NaN embedding", "silent", multisimilarity_nan),
    Case("recall_at_k cosine, offset 1e8", "silent", cosine_offset),
    Case("distributed_retrieval_scores, ranks with different X", "silent",
         distributed_mixed_data),
    Case("TripletLoss(margin=-1)", "silent", triplet_negative_margin),
    Case("MLP(0)", "silent", mlp_zero_inputs),
    Case("DeepMetricTransformer(n_components=True)", "obscure", deep_bool_components),
    Case("make_deml(n_scales=0)", "obscure", deml_no_scales),
    Case("ConvNet(1, 28)", "obscure", convnet_int_size),
    Case("SKDML_NUM_THREADS=100000", "obscure", threads_huge_override, budget=120),
    Case("map_at_r, 10000 x 16, 10 classes", "slow", map_large_classes, budget=20),
]

"""The sixth audit's cases: resumed deep fits, 16-bit and offset batches in the losses, label
tensors and far-apart classes in the scorers, the classic learners' covariance prior.

See tests/_robustness_cases.py for Case, check and classify. Every case runs against the
old code too (``benchmarks/studies/audit_robustness.py --checkout``); a case whose old
answer was a refusal of a valid input, or an obscure error, raises ``Wrong``.
"""

from __future__ import annotations

import os
import tempfile

import numpy as np

from _robustness_cases import Case, Wrong, check, quiet


def _vectors(seed=0):
    rng = np.random.RandomState(seed)
    y = np.repeat(np.arange(6), 12)
    return (rng.randn(72, 6) + 2 * y[:, None] * rng.randn(1, 6)).astype(np.float32), y


def resumed_fit_keeps_the_start():
    from skdml import DeepMetricTransformer
    from skdml.callbacks import Callback

    X, y = _vectors()
    kw = dict(n_components=3, max_iter=5, device="cpu", random_state=0,
              validation_fraction=0.34, early_stopping=True)
    folder = tempfile.mkdtemp()
    ref = DeepMetricTransformer(checkpoint_path=os.path.join(folder, "a.ckpt"), **kw).fit(X, y)

    class CtrlC(Callback):
        def on_epoch_end(self, estimator, info):
            if info.epoch == 2:
                raise KeyboardInterrupt

    est = DeepMetricTransformer(checkpoint_path=os.path.join(folder, "b.ckpt"),
                                callbacks=[CtrlC()], **kw)
    try:
        est.fit(X, y)
    except KeyboardInterrupt:
        pass
    est.set_params(warm_start=True, callbacks=None).fit(X, y)
    gap = float(np.abs(est.transform(X) - ref.transform(X)).max())
    check(gap == 0.0, f"the resumed fit differs from the uninterrupted one by {gap:.3g}")


def resumed_with_another_optimiser():
    from skdml import DeepMetricTransformer
    from skdml._training import CheckpointError

    X, y = _vectors()
    path = os.path.join(tempfile.mkdtemp(), "run.ckpt")
    DeepMetricTransformer(n_components=3, max_iter=1, device="cpu", random_state=0,
                          checkpoint_path=path).fit(X, y)
    try:
        DeepMetricTransformer(n_components=3, max_iter=2, device="cpu", random_state=0,
                              checkpoint_path=path, warm_start=True, optimizer="sgd").fit(X, y)
    except CheckpointError as exc:
        check("another optimiser" in str(exc), f"unclear: {exc}")
        raise
    except KeyError as exc:
        raise Wrong(f"torch's error at the first step: KeyError {exc}") from exc


def warm_start_after_a_callback_stop():
    from skdml import DeepMetricTransformer
    from skdml.callbacks import Callback

    class Budget(Callback):
        def on_epoch_end(self, estimator, info):
            if info.epoch == 2:
                info.stop("time budget")

    X, y = _vectors()
    est = DeepMetricTransformer(n_components=3, max_iter=5, device="cpu", random_state=0,
                                callbacks=[Budget()]).fit(X, y)
    est.set_params(warm_start=True, callbacks=None, max_iter=4).fit(X, y)
    check(est.n_iter_ == 4, f"warm_start trained {est.n_iter_} of max_iter=4 epochs")


def half_precision_triplets():
    import torch

    from skdml.losses import TripletLoss

    torch.manual_seed(0)
    y = torch.arange(32).repeat_interleave(8)
    x = torch.randn(256, 16)
    half, full = TripletLoss()(x.half(), y), TripletLoss()(x.half().float(), y)
    check(abs(float(half) - float(full)) < 1e-2 * abs(float(full)),
          f"float16 triplet loss {float(half)} (float32 {float(full):.4f})")


def lmnn_loss_at_an_offset():
    import torch

    from skdml.losses import LMNNLoss

    torch.manual_seed(0)
    y = torch.tensor([0, 0, 1, 1, 2, 2])
    x = torch.randn(6, 8, dtype=torch.float64) + 1e4
    got, want = float(LMNNLoss()(x.float(), y)), float(LMNNLoss()(x.float().double(), y))
    check(abs(got - want) < 1e-3 * want, f"float32 LMNN loss {got:.4g} at an offset of 1e4 "
          f"(float64 {want:.4g})")


def collapsed_batch_preserves_nothing():
    import torch

    from skdml.losses import DistancePreservation

    loss = float(DistancePreservation()(torch.full((3, 2), 0.7), torch.eye(3)))
    check(abs(loss - 0.5) < 1e-6, f"a collapsed embedding costs {loss} (0.5 expected)")


def label_tensor_of_large_ids():
    import torch

    from skdml.retrieval import RetrievalIndex

    ids = [1234567890123456789, 1234567890123456790, 7]
    index = RetrievalIndex().fit(np.eye(3), y=torch.tensor(ids))
    check(index.labels_.tolist() == ids, f"labels stored as {index.labels_.tolist()}")


def few_shot_classes_far_apart():
    from skdml.metrics import few_shot_accuracy

    rng = np.random.RandomState(0)
    y = np.repeat(np.arange(10), 20)
    X = rng.randn(200, 4) + 3 * np.eye(10, 4)[y % 5]
    X[:, 0] += np.where(y < 5, 1e8, -1e8)
    got = few_shot_accuracy(X, y, n_way=5, n_shot=5, n_queries=10, n_episodes=50,
                            random_state=0)[0]
    check(abs(got - 0.9344) < 1e-9, f"few-shot accuracy {got:.4f} (brute force 0.9344)")


def covariance_prior_moves_with_the_seed():
    from skdml.linear import LSML

    rng = np.random.RandomState(0)
    X = rng.randn(3000, 3) * [1.0, 2.0, 5.0]
    quads = rng.randint(0, 3000, size=(1500, 4))
    full = np.linalg.inv(np.cov(np.unique(X[quads].reshape(-1, 3), axis=0), rowvar=False))
    M = LSML(prior="covariance", max_iter=0, random_state=1,
             preprocessor=X).fit(quads).get_mahalanobis_matrix()
    gap = float(np.abs(M - full).max() / np.abs(full).max())
    check(gap < 1e-10, f"the prior is {gap:.2g} from the samples' inverse covariance")


def tiny_test_fraction():
    from skdml.model_selection import ClassDisjointSplit

    y = np.repeat(np.arange(10), 3)
    _, test = next(ClassDisjointSplit(n_splits=1, test_size=1e-14,
                                      random_state=0).split(np.zeros((30, 1)), y))
    check(len(test) > 0, "an empty test fold (every score NaN)")


CASES = [Case(name, group, quiet(fn), budget) for name, group, fn, budget in [
    ("deep fit resumed after Ctrl-C keeps the unbeaten start", "silent",
     resumed_fit_keeps_the_start, 60),
    ("deep warm start with another optimiser", "obscure", resumed_with_another_optimiser, 60),
    ("deep warm start after a callback's stop", "silent", warm_start_after_a_callback_stop, 60),
    ("TripletLoss on a float16 batch of 256", "silent", half_precision_triplets, 30),
    ("LMNNLoss in float32 at an offset of 1e4", "silent", lmnn_loss_at_an_offset, 30),
    ("DistancePreservation of a collapsed batch", "silent", collapsed_batch_preserves_nothing,
     30),
    ("RetrievalIndex with a tensor of 64-bit ids", "silent", label_tensor_of_large_ids, 30),
    ("few_shot_accuracy, classes 2e8 apart", "silent", few_shot_classes_far_apart, 30),
    ("LSML prior='covariance' on 3,000 samples", "silent", covariance_prior_moves_with_the_seed,
     30),
    ("ClassDisjointSplit(test_size=1e-14)", "silent", tiny_test_fraction, 30),
]]

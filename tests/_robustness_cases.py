"""The bad-input and fault catalogue of issue 11, shared by the tests and the audit.

Each :class:`Case` runs one careless or unlucky call and says what a correct
answer is. :func:`classify` sorts the outcome into the audit's classes:

``ok``
    The call returned the correct answer (checked against a float64 reference
    where one exists), or a documented warning and a correct answer.
``standard``
    scikit-learn's own validation refused the input (raised inside ``sklearn``).
``clear``
    skdml refused the input with its own error (raised inside ``skdml``).
``silent-wrong``
    The call returned without error, and the answer is wrong.
``obscure``
    An error from deep inside numpy, torch, pymanopt or the standard library
    (``KeyError``, ``EOFError``, ``UnpicklingError``, ...), or an internal
    ``AttributeError``/``IndexError`` of ours.
``slow``
    Still running after the case's time budget.

``tests/test_robustness.py`` asserts every case is ``ok``, ``standard`` or
``clear``; ``benchmarks/studies/audit_robustness.py`` runs the same catalogue against
any checkout (for the before/after table). The cases adapt to the 0.1 names
(``embedding_dim``, ``lr``, ``max_epochs``, ``alpha``) so that the old code
can be audited too.
"""

from __future__ import annotations

import inspect
import os
import signal
import tempfile
import time
import traceback
import warnings
from dataclasses import dataclass
from typing import Callable

import numpy as np

OBSCURE_TYPES = (KeyError, IndexError, AttributeError, EOFError, ZeroDivisionError,
                 UnboundLocalError, NameError, AssertionError, RecursionError)


class Wrong(AssertionError):
    """Raised by a case's check: the call returned, with a wrong answer."""


class Refused(Exception):
    """Raised by a case that inspected a refusal (e.g. a CLI's exit) and found it clear."""


class OverBudget(BaseException):
    """The case's time budget ran out (a BaseException, so no ``except OSError`` eats it)."""


class Missing(Exception):
    """Raised by a case whose material (a data file) is not on this machine."""


@dataclass
class Case:
    name: str
    group: str
    run: Callable[[], object]
    budget: float = 30.0


def classify(case):
    """Run ``case`` and return ``(class, detail, seconds)``."""
    def alarm(signum, frame):
        raise OverBudget(f"still running after {case.budget:.0f} s")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, case.budget)
    start = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            case.run()
    except OverBudget as exc:
        return "slow", str(exc), time.perf_counter() - start
    except Wrong as exc:
        return "silent-wrong", str(exc), time.perf_counter() - start
    except Refused as exc:
        return "clear", str(exc), time.perf_counter() - start
    except Missing as exc:
        return "skipped", str(exc), time.perf_counter() - start
    except BaseException as exc:  # noqa: BLE001 - classifying every outcome is the point
        seconds = time.perf_counter() - start
        frames = traceback.extract_tb(exc.__traceback__)
        where = frames[-1].filename.replace(os.sep, "/") if frames else ""
        detail = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:160]
        if isinstance(exc, (KeyboardInterrupt, SystemExit)) or isinstance(exc, OBSCURE_TYPES):
            return "obscure", detail, seconds
        # a deliberate refusal is a ``raise`` statement in skdml (or sklearn) itself, not an
        # error that numpy or torch raised from C code called in one of our frames
        deliberate = bool(frames) and "raise" in (frames[-1].line or "")
        if deliberate and "/skdml/" in where and "/tests/" not in where:
            return "clear", detail, seconds
        if deliberate and "/sklearn/" in where and isinstance(exc, (ValueError, TypeError)):
            return "standard", detail, seconds
        return "obscure", detail + f" (in {where.rsplit('/', 2)[-2:]})", seconds
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    seconds = time.perf_counter() - start
    if seconds > case.budget:
        return "slow", f"took {seconds:.0f} s", seconds
    return "ok", "", seconds


def check(condition, message):
    if not condition:
        raise Wrong(message)


def quiet(fn):
    """``fn`` run with its warnings ignored (a case that judges the answer, not the warnings)."""
    def run():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return fn()
    return run


# ---------------------------------------------------------------- version shims
def _skdml():
    import skdml
    return skdml


def _renamed(cls, params):
    names = set(inspect.signature(cls).parameters)
    renames = {"n_components": "embedding_dim", "learning_rate": "lr",
               "max_iter": "max_epochs", "n_iter_no_change": "patience", "angle": "alpha",
               "regularizer_weight": "alpha"}
    return {renames[k] if k not in names and renames.get(k) in names else k: v
            for k, v in params.items()}


def set_params(est, **params):
    """``est.set_params(**params)`` with the 0.1 names where the class still uses them."""
    return est.set_params(**_renamed(type(est), params))


def _make(cls, **params):
    """``cls(**params)`` with the 0.1 parameter names where ``cls`` still uses them."""
    return cls(**_renamed(cls, params))


def deep(**params):
    from skdml.deep import DeepMetricTransformer
    params.setdefault("random_state", 0)
    params.setdefault("device", "cpu")
    return _make(DeepMetricTransformer, **params)


def linear(name, **params):
    cls = getattr(_skdml(), name)
    params.setdefault("random_state", 0)
    return _make(cls, **params)


def tiny_images(n_classes=6, per_class=10, size=8, seed=0):
    """Class-dependent textured images of shape (n, 1, size, size)."""
    rng = np.random.RandomState(seed)
    y = np.repeat(np.arange(n_classes), per_class)
    protos = rng.rand(n_classes, 1, size, size)
    X = protos[y] + 0.3 * rng.rand(len(y), 1, size, size)
    return X.astype(np.float32), y


def blobs(n_classes=6, per_class=20, n_features=10, seed=0, spread=1.5):
    rng = np.random.RandomState(seed)
    y = np.repeat(np.arange(n_classes), per_class)
    X = rng.randn(len(y), n_features) + spread * rng.randn(n_classes, n_features)[y]
    return X, y


def tiny_backbone(n_in=64, n_out=16):
    import torch
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(n_in, n_out))


def rank(Z, rtol=1e-4):
    Z = np.asarray(Z, dtype=np.float64)
    Z = Z - Z.mean(axis=0)
    s = np.linalg.svd(Z, compute_uv=False)
    return int(np.sum(s > rtol * s[0])) if s.size and s[0] > 0 else 0


def brute_recall_at_1(X, y):
    """Recall@1 from float64 differences (no ``|x|^2 - 2xy + |y|^2`` cancellation)."""
    X = np.asarray(X, dtype=np.float64)
    D = np.array([np.sum((X - x) ** 2, axis=1) for x in X])
    np.fill_diagonal(D, np.inf)
    return float(np.mean(y[np.argmin(D, axis=1)] == y))


def read_checkpoint(path):
    """A deep checkpoint's state, through skdml's reader where there is one."""
    try:
        from skdml._training import load_checkpoint
    except ImportError:
        import torch
        return torch.load(path, weights_only=False)
    return load_checkpoint(path)


# ---------------------------------------------------------------- silent wrong answers
def scorer_outlier():
    from skdml.metrics import recall_at_k
    rng = np.random.RandomState(0)
    y = np.repeat(np.arange(10), 20)
    X = rng.randn(200, 8) + 1.5 * rng.randn(10, 8)[y]
    X[0] = 1e7
    got, want = recall_at_k(X, y), brute_recall_at_1(X, y)
    check(abs(got - want) < 1e-12, f"recall_at_k={got:.3f}, float64 brute force {want:.3f}")


def scorer_offset():
    from skdml.metrics import recall_at_k
    X, y = blobs(10, 20, 8)
    got, want = recall_at_k(X + 1e8, y), brute_recall_at_1(X + 1e8, y)
    check(abs(got - want) < 1e-12, f"recall_at_k={got:.3f}, float64 brute force {want:.3f}")


def map_outlier():
    from skdml.metrics import map_at_r
    rng = np.random.RandomState(0)
    y = np.repeat(np.arange(10), 20)
    X = rng.randn(200, 8) + 1.5 * rng.randn(10, 8)[y]
    ref = map_at_r(X, y)
    X[0] = 1e7
    got = map_at_r(X, y)
    check(got > 0.8 * ref, f"map_at_r={got:.3f} with one outlier, {ref:.3f} without")


def deep_channels_last():
    X, y = tiny_images()
    Xl = np.ascontiguousarray(X.transpose(0, 2, 3, 1))  # (n, 8, 8, 1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est = deep(max_iter=1).fit(Xl, y)
    layout = [w for w in caught if "channel" in str(w.message).lower()]
    check(layout, f"(n, H, W, 1) images fitted silently as {Xl.shape[1]} channels")
    check(est.transform(Xl).shape == (len(Xl), est.transform(Xl[:2]).shape[1]), "shape")


def _deep_scale(factor):
    def run():
        X, y = blobs(6, 20, 10)
        Z = deep(max_iter=3, n_components=8).fit(X * factor, y).transform(X * factor)
        check(np.isfinite(Z).all(), "non-finite embedding")
        check(rank(Z) >= 6, f"input scaled by {factor:g}: embedding of rank {rank(Z)}")
    return run


def deep_nan_dataset():
    import torch
    X, y = tiny_images()
    est = deep(backbone=tiny_backbone(), max_iter=1).fit(X, y)
    Xn = X.copy()
    Xn[3, 0, 2, 2] = np.nan
    Z = est.transform(torch.utils.data.TensorDataset(torch.as_tensor(Xn)))
    check(False, f"NaN input in a TensorDataset embedded ({np.isnan(Z).any(axis=1).sum()} "
                 "NaN rows)")


def deep_nan_eval_only():
    import torch

    class EvalNaN(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(64, 16)

        def forward(self, x):
            out = self.lin(x.flatten(1))
            return out if self.training else out * float("nan")

    X, y = tiny_images()
    est = deep(backbone=EvalNaN(), max_iter=1, early_stopping=False).fit(X, y)
    Z = est.transform(X)
    check(False, f"eval-mode NaN backbone gave {np.isnan(Z).all(axis=1).sum()} NaN rows")


def deep_one_component():
    X, y = blobs(6, 20, 10)
    Z = deep(max_iter=2, n_components=1).fit(X, y).transform(X)
    check(np.unique(np.round(Z, 6)).size > 2, "n_components=1 gives only +-1")


def linear_zero_init():
    X, y = blobs()
    est = linear("ECAML", n_components=3, init=np.zeros((3, 10)), max_iter=20).fit(X, y)
    check(np.abs(est.components_).max() > 0, "all-zero init returned all-zero components")


def linear_nan_loss():
    import torch
    X, y = blobs()

    def loss(Z, labels):
        return torch.full((), float("nan"), dtype=Z.dtype) + 0 * Z.sum()

    est = linear("ECAML", n_components=3, loss=loss, max_iter=5, solver="adam").fit(X, y)
    check(np.isfinite(est.components_).all(), "NaN loss gave non-finite components")


def linear_tiny_scale():
    X, y = blobs()
    est = linear("ECAML", n_components=3, max_iter=20).fit(X * 1e-200, y)
    Z = est.transform(X * 1e-200)
    check(np.abs(Z).max() > 0 and rank(Z) == 3, "X*1e-200 fitted as all-zero data")


def pair_distance_huge():
    X, y = blobs()
    est = linear("ECAML", n_components=3, max_iter=2).fit(X, y)
    pairs = np.stack([X[:5], X[5:10]], axis=1) * 1e160
    d = est.pair_distance(pairs)
    Z0, Z1 = est.transform(pairs[:, 0]), est.transform(pairs[:, 1])
    check(np.isfinite(Z0).all(), "transform not finite")
    want = np.sqrt(np.sum(((Z0 / 1e160) - (Z1 / 1e160)) ** 2, axis=1)) * 1e160
    check(np.all(np.isfinite(d)) and np.allclose(d, want, rtol=1e-5),
          f"pair_distance={d[:2]} where transform gives {want[:2]}")


def partial_fit_zero_triplets():
    X, _ = blobs()
    est = linear("SUML", n_components=3, batch_size=40).partial_fit(X)
    est.set_params(n_triplets=0)
    est.partial_fit(X)
    check(np.isfinite(est.components_).all(), "n_triplets=0 set between calls gave NaN")
    check(False, "n_triplets=0 accepted between partial_fit calls")


def partial_fit_new_components():
    X, _ = blobs()
    est = linear("SUML", n_components=3, batch_size=40).partial_fit(X)
    set_params(est, n_components=5)
    est.partial_fit(X)
    check(est.components_.shape[0] == 5, "a new n_components is ignored by partial_fit")


def partial_fit_constant_first():
    X, _ = blobs()
    est = linear("SUML", n_components=3, batch_size=40)
    est.partial_fit(np.ones_like(X))
    check(False, "a constant first batch was accepted")


def _cluster_scale(factor):
    def run():
        from skdml.metrics import clustering_scores
        X, y = blobs(6, 20, 10, spread=4.0)
        ref = clustering_scores(X, y, random_state=0)
        got = clustering_scores(X * factor, y, random_state=0)
        for key in ref:
            check(abs(got[key] - ref[key]) < 1e-6,
                  f"{key}={got[key]:.3f} at scale {factor:g}, {ref[key]:.3f} at 1")
    return run


def _loss_huge(kind):
    def run():
        import torch
        from skdml import losses
        Z = torch.randn(12, 4, dtype=torch.float64) * 1e20
        y = torch.arange(6).repeat_interleave(2)
        if kind == "npair":
            value = losses.NPairLoss()(Z, y)
        else:
            value = losses.EnergyConfusion()(Z, y)
        check(torch.isfinite(value).all(), f"{kind} at norm 1e20 gave {value}")
    return run


# ---------------------------------------------------------------- lost work
def checkpoint_overwrite():
    X, y = tiny_images()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "ck.pt")
        with open(path, "wb") as fh:
            fh.write(b"precious work")
        deep(backbone=tiny_backbone(), max_iter=1, checkpoint_path=path).fit(X, y)
        with open(path, "rb") as fh:
            check(fh.read() == b"precious work", "an existing checkpoint was overwritten")


def interrupted_fit_looks_fitted():
    import torch

    class Dies(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(64, 16)
            self.calls = 0

        def forward(self, x):
            self.calls += 1
            if self.calls > 3 and self.training:
                raise KeyboardInterrupt
            return self.lin(x.flatten(1))

    X, y = tiny_images()
    check_interrupted_fit_unfitted(deep(backbone=Dies(), max_iter=5, early_stopping=False),
                                   X, y, "after Ctrl-C mid-fit, transform runs on a "
                                   "half-trained network")


def check_interrupted_fit_unfitted(est, X, y, message):
    """Fit ``est`` (whose fit raises ``KeyboardInterrupt``); ``transform`` must be refused."""
    from sklearn.exceptions import NotFittedError
    try:
        est.fit(X, y)
    except KeyboardInterrupt:
        pass
    try:
        est.transform(X)
    except NotFittedError:
        return
    check(False, message)


def warm_start_learning_rate():
    X, y = tiny_images()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "ck.pt")
        est = deep(backbone=tiny_backbone(), max_iter=1, checkpoint_path=path,
                   learning_rate=1e-3, early_stopping=False)
        if "optimizer_params" in est.get_params():  # a constant rate, so the checkpoint shows it
            est.set_params(optimizer_params={"lr_schedule": "constant"})
        est.fit(X, y)
        set_params(est, warm_start=True, max_iter=2, learning_rate=0.5)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            est.fit(X, y)
        groups = read_checkpoint(path)["optimizer"]["param_groups"]
        lrs = [g["lr"] for g in groups]
        honoured = bool(lrs) and max(lrs) >= 0.5 - 1e-12
        warned = any("learning" in str(w.message).lower() or "lr" in str(w.message)
                     for w in caught)
        check(honoured or warned, "warm_start ignored a changed learning rate silently")


def _deep_checkpoint(tmp, X, y):
    path = os.path.join(tmp, "ck.pt")
    est = deep(backbone=tiny_backbone(), max_iter=1, checkpoint_path=path,
               early_stopping=False).fit(X, y)
    return est, path


def checkpoint_bit_flips():
    import torch
    X, y = tiny_images()
    rng = np.random.RandomState(0)
    silent = 0
    with tempfile.TemporaryDirectory() as tmp:
        est, path = _deep_checkpoint(tmp, X, y)
        clean = open(path, "rb").read()
        ref = {k: v.clone() for k, v in est.module_.state_dict().items()}
        for _ in range(40):
            data = bytearray(clean)
            pos = rng.randint(len(data))
            data[pos] ^= 1 << rng.randint(8)
            open(path, "wb").write(bytes(data))
            resumed = deep(backbone=tiny_backbone(), max_iter=1, checkpoint_path=path,
                           warm_start=True, early_stopping=False)
            try:
                resumed.fit(X, y)
            except Exception:  # noqa: BLE001 - any refusal is fine here
                continue
            state = resumed.module_.state_dict()
            if any(not torch.equal(state[k], ref[k]) for k in ref if k in state):
                silent += 1
    check(silent == 0, f"{silent} of 40 single-bit flips loaded silently and changed state")


def _corrupt_checkpoint(content):
    def run():
        X, y = tiny_images()
        with tempfile.TemporaryDirectory() as tmp:
            _, path = _deep_checkpoint(tmp, X, y)
            data = open(path, "rb").read()
            open(path, "wb").write(content(data))
            deep(backbone=tiny_backbone(), max_iter=2, checkpoint_path=path,
                 warm_start=True, early_stopping=False).fit(X, y)
            check(False, "a damaged checkpoint was accepted")
    return run


def resume_keeps_split():
    X, y = tiny_images(12, 10)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "ck.pt")
        a = deep(backbone=tiny_backbone(), max_iter=1, checkpoint_path=path,
                 early_stopping=True, random_state=None).fit(X, y)
        first = read_checkpoint(path).get("split")
        set_params(a, warm_start=True, max_iter=2)
        a.fit(X, y)
        second = read_checkpoint(path).get("split")
        check(first is not None and second is not None, "validation split not recorded")
        check(all(np.array_equal(np.sort(f), np.sort(s)) for f, s in zip(first, second)),
              "resuming redrew the validation split")


# ---------------------------------------------------------------- minutes, not seconds
def suml_wide():
    X = np.random.RandomState(0).rand(50, 3000)
    linear("SUML").fit(X)


def ecaml_wide():
    X, y = blobs(6, 10, 4096)
    linear("ECAML").fit(X, y)


def ecaml_huge_batch():
    X, y = blobs(6, 10, 10)
    linear("ECAML", n_samples_per_class=1000, max_iter=3).fit(X, y)


def deep_huge_batch():
    X, y = tiny_images()
    deep(backbone=tiny_backbone(), n_samples_per_class=1000, max_iter=1).fit(X, y)


# ---------------------------------------------------------------- obscure errors
def _backbone(forward, n_in=64):
    import torch

    class Odd(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(n_in, 16)

        def forward(self, x):
            return forward(self.lin(x.flatten(1)))

    return Odd()


def _bad_backbone(forward):
    def run():
        X, y = tiny_images()
        deep(backbone=_backbone(forward), max_iter=1).fit(X, y)
        check(False, "a malformed backbone was accepted")
    return run


def backbone_float64():
    X, y = tiny_images()
    est = deep(backbone=_backbone(lambda z: z.double()), max_iter=1).fit(X, y)
    Z = est.transform(X)
    check(np.isfinite(Z).all() and rank(Z) > 1, "float64 backbone: degenerate embedding")


def backbone_class():
    import torch
    X, y = tiny_images()
    deep(backbone=torch.nn.Linear, max_iter=1).fit(X, y)
    check(False, "a backbone class (not an instance) was accepted")


def ragged_dataset():
    import torch

    class Ragged(torch.utils.data.Dataset):
        def __len__(self):
            return 60

        def __getitem__(self, i):
            return torch.rand(1, 8, 8 + (i % 2)), i // 10

    deep(backbone=tiny_backbone(), max_iter=1).fit(Ragged())
    check(False, "ragged Dataset items were accepted")


def device_meta():
    X, y = tiny_images()
    deep(backbone=tiny_backbone(), max_iter=1, device="meta").fit(X, y)
    check(False, "device='meta' accepted")


def _split_labels(labels):
    def run():
        from skdml.model_selection import ClassDisjointSplit
        X = np.zeros((len(labels), 2))
        list(ClassDisjointSplit(n_splits=2, random_state=0).split(X, labels))
        check(False, f"labels {sorted(set(map(str, labels)))} accepted")
    return run


def data_home_file():
    from skdml.datasets import load_usps
    with tempfile.NamedTemporaryFile() as fh:
        try:
            load_usps(data_home=fh.name, **_loader_kwargs(load_usps, download_if_missing=False))
        except Exception as exc:  # noqa: BLE001
            if "not a directory" in str(exc) or "is a file" in str(exc):
                raise
            raise RuntimeError(f"does not say data_home is a file: {str(exc)[:80]}") from None
    check(False, "data_home that is a file accepted")


def callable_loss_non_scalar():
    X, y = blobs()
    linear("ECAML", n_components=3, loss=lambda Z, labels: Z.sum(dim=1), max_iter=2,
           solver="adam").fit(X, y)
    check(False, "a non-scalar loss was accepted")


def _huge_scale(name):
    def run():
        X, y = blobs()
        est = linear(name, n_components=3, max_iter=5)
        est.fit(X * 1e154, y) if name != "SUML" else est.fit(X * 1e154)
        check(np.isfinite(est.components_).all(), "non-finite components")
    return run


def pair_distance_0d():
    X, y = blobs()
    est = linear("ECAML", n_components=3, max_iter=2).fit(X, y)
    est.pair_distance(np.array(1.0))
    check(False, "a 0-D array accepted")


def get_metric_one_row():
    X, y = blobs()
    est = linear("ECAML", n_components=3, max_iter=2).fit(X, y)
    d = est.get_metric()(X[:1], X[1:2])
    want = np.linalg.norm(est.transform(X[:1]) - est.transform(X[1:2]))
    check(np.allclose(np.ravel(d)[0], want), f"get_metric()(1 x d) = {d}, want {want}")


def n_components_zero():
    skdml = _skdml()
    module = getattr(skdml, "linear", None)
    fn = getattr(module, "check_n_components", None) or skdml.base.check_n_components
    out = fn(0, 5)
    check(False, f"check_n_components(0, 5) returned {out}")


def demo_negative_seed():
    import subprocess
    import sys
    proc = subprocess.run([sys.executable, "-m", "skdml", "demo", "--seed", "-1"],
                          capture_output=True, text=True, timeout=60)
    check(proc.returncode != 0, "seed -1 accepted")
    if "Traceback" in proc.stderr:
        raise RuntimeError("traceback: " + proc.stderr.strip().splitlines()[-1])
    raise Refused(proc.stderr.strip().splitlines()[-1])  # argparse's one-line message


def _loader_kwargs(fn, **kw):
    names = set(inspect.signature(fn).parameters)
    return {k: v for k, v in kw.items() if k in names}


def download_offline_hint():
    from skdml.datasets import load_usps
    with tempfile.TemporaryDirectory() as tmp:
        try:
            load_usps(data_home=tmp, **_loader_kwargs(load_usps, url="http://127.0.0.1:9/x.mat",
                                                      timeout=5))
        except Exception as exc:  # noqa: BLE001
            text = str(exc)
            if "SKDML_DATA" in text and "data_home" in text:
                raise
            raise RuntimeError(f"no hint where to put the file: {text[:100]}") from None
    check(False, "a failed download returned")


def download_trickle():
    import http.server
    import threading

    class Trickle(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            self.send_response(200)
            self.send_header("Content-Length", "1000000")
            self.end_headers()
            try:
                for _ in range(120):
                    self.wfile.write(b"x")
                    self.wfile.flush()
                    time.sleep(0.5)
            except OSError:
                pass

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Trickle)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    from skdml.datasets import load_usps
    try:
        with tempfile.TemporaryDirectory() as tmp:
            load_usps(data_home=tmp, **_loader_kwargs(
                load_usps, url=f"http://127.0.0.1:{server.server_address[1]}/usps.mat",
                timeout=3, deadline=5))
    finally:
        server.shutdown()
    check(False, "a trickled download returned")


def cache_permissions():
    import http.server
    import threading
    from pathlib import Path
    shared = Path(__file__).resolve().parents[1].parent / "shared" / "datasets"
    source = shared / "usps_16x16.mat"
    if not source.exists():
        raise Missing(f"{source} (needed to serve a real download)")
    handler = lambda *a, **k: http.server.SimpleHTTPRequestHandler(  # noqa: E731
        *a, directory=str(shared), **k)
    http.server.SimpleHTTPRequestHandler.log_message = lambda *a: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    from skdml.datasets import load_usps
    old = os.umask(0o022)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            load_usps(data_home=tmp, **_loader_kwargs(
                load_usps, url=f"http://127.0.0.1:{server.server_address[1]}/usps_16x16.mat"))
            files = [p for p in Path(tmp).rglob("*") if p.is_file()]
            modes = {p.name: oct(p.stat().st_mode & 0o777) for p in files}
            check(files and all(p.stat().st_mode & 0o044 for p in files),
                  f"cached files not readable by the group: {modes}")
    finally:
        os.umask(old)
        server.shutdown()


CASES = [
    Case("recall_at_k, one outlier at 1e7", "silent", scorer_outlier),
    Case("recall_at_k, offset 1e8", "silent", scorer_offset),
    Case("map_at_r, one outlier at 1e7", "silent", map_outlier),
    Case("deep, channels-last images", "silent", deep_channels_last),
    Case("deep, input x 1e-6", "silent", _deep_scale(1e-6)),
    Case("deep, input x 1e-12", "silent", _deep_scale(1e-12)),
    Case("deep, input x 1e30", "silent", _deep_scale(1e30)),
    Case("deep, TensorDataset with NaN", "silent", deep_nan_dataset),
    Case("deep, NaN only in eval mode", "silent", deep_nan_eval_only),
    Case("deep, n_components=1", "silent", deep_one_component),
    Case("linear, all-zero init", "silent", linear_zero_init),
    Case("linear, callable loss returns NaN", "silent", linear_nan_loss),
    Case("linear, X x 1e-200", "silent", linear_tiny_scale),
    Case("pair_distance, pairs x 1e160", "silent", pair_distance_huge),
    Case("partial_fit, n_triplets=0 set between calls", "silent", partial_fit_zero_triplets),
    Case("partial_fit, n_components changed", "silent", partial_fit_new_components),
    Case("partial_fit, constant first batch", "silent", partial_fit_constant_first),
    Case("clustering scores x 1e155", "silent", _cluster_scale(1e155)),
    Case("clustering scores x 1e-155", "silent", _cluster_scale(1e-155)),
    Case("NPairLoss at norm 1e20", "silent", _loss_huge("npair")),
    Case("EnergyConfusion at norm 1e20", "silent", _loss_huge("ec")),
    Case("checkpoint overwritten without warm_start", "lost", checkpoint_overwrite),
    Case("Ctrl-C mid-fit leaves estimator fitted", "lost", interrupted_fit_looks_fitted),
    Case("warm_start with a new learning rate", "lost", warm_start_learning_rate),
    Case("checkpoint, 40 single-bit flips", "lost", checkpoint_bit_flips, budget=90),
    Case("checkpoint, truncated", "lost", _corrupt_checkpoint(lambda d: d[: len(d) // 2])),
    Case("checkpoint, empty", "lost", _corrupt_checkpoint(lambda d: b"")),
    Case("checkpoint, foreign file", "lost",
         _corrupt_checkpoint(lambda d: b"PK\x03\x04 not a checkpoint" * 10)),
    Case("resume with random_state=None keeps the split", "lost", resume_keeps_split),
    Case("SUML default n_components, 50 x 3000", "slow", suml_wide),
    Case("ECAML default n_components, 60 x 4096", "slow", ecaml_wide),
    Case("ECAML n_samples_per_class=1000 on 60 samples", "slow", ecaml_huge_batch),
    Case("deep n_samples_per_class=1000 on 60 samples", "slow", deep_huge_batch),
    Case("download trickling 2 bytes/s", "slow", download_trickle, budget=20),
    Case("backbone returns a 1-D tensor", "obscure", _bad_backbone(lambda z: z.sum(dim=1))),
    Case("backbone returns a numpy array", "obscure",
         _bad_backbone(lambda z: z.detach().numpy())),
    Case("backbone returns a float as aux", "obscure", _bad_backbone(lambda z: (z, 1.5))),
    Case("backbone returns float64", "obscure", backbone_float64),
    Case("backbone width depends on the batch", "obscure",
         _bad_backbone(lambda z: z[:, : max(2, min(16, z.shape[0] // 2))])),
    Case("backbone passed as a class", "obscure", backbone_class),
    Case("ragged Dataset items", "obscure", ragged_dataset),
    Case("device='meta'", "obscure", device_meta),
    Case("ClassDisjointSplit, mixed str/int labels", "obscure",
         _split_labels(np.array([1, "a", 2, "b"] * 5, dtype=object))),
    Case("ClassDisjointSplit, None labels", "obscure",
         _split_labels(np.array([1, None, 2, 3] * 5, dtype=object))),
    Case("data_home is an existing file", "obscure", data_home_file),
    Case("callable loss returns a non-scalar", "obscure", callable_loss_non_scalar),
    Case("SUML at scale 1e154", "obscure", _huge_scale("SUML")),
    Case("ECAML at scale 1e154", "obscure", _huge_scale("ECAML")),
    Case("downloaded file mode in a shared cache", "obscure", cache_permissions),
    Case("python -m skdml demo --seed -1", "obscure", demo_negative_seed),
    Case("download offline: hint where to put the file", "obscure", download_offline_hint),
    Case("pair_distance of a 0-D array", "obscure", pair_distance_0d),
    Case("get_metric() callable on (1, d)", "obscure", get_metric_one_row),
    Case("check_n_components(0, 5)", "obscure", n_components_zero),
]


def _families(attribute="CASES"):
    """The later families (checkpoint safety, downloads, inputs, speed, issue 37's busy
    machine, issue 39's classic catalogue and API edges, the fourth audit's pair thresholds
    and extreme scales, its deep warm starts, linear options and tools, the fifth audit's
    labels, starts, offsets, gradients and conventions, the sixth's resumed fits, losses,
    ids and priors, the seventh's float64 spans, builders, hold-outs and data files, the
    eighth's labels, scales and parameter bounds, the ninth's warm starts, locks and cosine
    keys, the tenth's mixed units and checkpoints in searches, the eleventh's honest
    reports), one module each."""
    import importlib
    out = []
    for name in ("security", "lostwork", "inputs", "speed_linear", "speed_deep", "busy",
                 "classic", "pairs_and_scales", "resume_and_tools", "labels_starts_offsets",
                 "resume_losses_ids", "spans_builders_loaders", "labels_scales_bounds",
                 "lifecycle", "mixed_units", "honest_reports"):
        out += getattr(importlib.import_module(f"_robustness_cases_{name}"), attribute, [])
    return out


CASES = CASES + _families()
#: Full-size default fits (a minute each): run by ``benchmarks/studies/audit_robustness.py``, not by
#: the unit suite.
SLOW_CASES = _families("SLOW_CASES")

"""Omniglot zero-shot benchmark: train on small1, retrieve among small2's unseen characters.

The class-disjoint protocol of ``load_omniglot("train")`` / ``load_omniglot("test")``:
train on all of the "minimal" background split small1 (136 characters), retrieve in
small2 *without* Greek and Latin, the two alphabets small1 also holds (their 50
characters and 1000 images are identical in both zips): 106 characters of 3 alphabets,
2120 images, none trained on. (Results before this protocol retrieved in all of small2,
a third of whose characters had been trained on.) Rows:

* raw pixels, PCA at the deep embedding's dimension (128), the linear learners
  ECAML and JRD with their defaults;
* ``DeepMetricTransformer(random_state=0)`` with its defaults ("deep defaults") and
  one tuned setting ("deep tuned", see ``TUNED``);
* the plain-loop anchor: a bare torch loop, written here, with the
  4-block ConvNet (64 channels, BatchNorm, ReLU, max-pool), pytorch-metric-learning's
  ``MultiSimilarityLoss`` with its ``MultiSimilarityMiner``, class-balanced batches
  of 64 (16 characters x 4 drawings) and Adam at 1e-3. Its embeddings are scored at
  unit length, as its loss compares cosines (ours are unit length too).

The anchor and the deep estimators run *interleaved*: after every epoch of a deep
fit, one epoch of the anchor runs (inside the fit's epoch-end callback, timed on
its own and subtracted), so that the load of the shared machine hits both alike.
Every epoch of both is followed by an (untimed) Recall@1 of the test side: the curves of
``omniglot_curves.png``. The fit times exclude those evaluations.

``--epochs`` is the budget of every deep row *and* of the anchor (the same for
all); the deep estimators may stop early (when their epoch loss stops improving;
the defaults hold out no validation set).

Usage::

    python benchmarks/bench_omniglot.py --quick          # smoke run, ~1 min
    python benchmarks/bench_omniglot.py --epochs 30      # the reported run
    python benchmarks/bench_omniglot.py --full-defaults  # whole default budget vs the
                                                         # augmented anchor (66 epochs)
    python benchmarks/bench_omniglot.py --linear-only --seeds 3   # raw, PCA, ECAML, JRD; ~4 min
    python benchmarks/bench_omniglot.py --linear-only --seeds 3 --reverse   # small2 -> small1
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks._common import SHARED_DATA, markdown_table, save  # noqa: E402
from skdml import ECAML, JRD, DeepMetricTransformer  # noqa: E402
from skdml._training import ClassBalancedBatchSampler  # noqa: E402
from skdml.callbacks import Callback  # noqa: E402
from skdml.datasets import load_omniglot  # noqa: E402
from skdml.metrics import clustering_scores, recall_at_k, retrieval_scores  # noqa: E402

KS = (1, 2, 4, 8)
#: Epoch budget of the main table (``omniglot.*``).
DEFAULT_EPOCHS = 30
#: Epochs of the augmented anchor in ``--full-defaults`` (the issue's measurement).
ANCHOR_EPOCHS = 66
#: The "deep tuned" row: one alternative setting chosen a priori (a higher peak rate and
#: the anchor's 64-d embedding), not the result of a search on the test characters.
TUNED = dict(learning_rate=2e-3, n_components=64)


def omniglot(subset, size):
    X, y = load_omniglot(subset, image_size=size, data_home=SHARED_DATA,
                         download_if_missing=False, return_X_y=True)
    return X.reshape(-1, 1, size, size), y


def zero_shot(source="small1", target="small2", size=28):
    """``(X_train, y_train, X_test, y_test)``: all of ``source``; ``target`` without its alphabets.

    The two minimal splits share Greek and Latin (identical images), so the test side
    keeps only the alphabets the training side lacks: every test character is unseen.
    small1 -> small2 is the loader's own protocol (``load_omniglot("train")`` /
    ``("test")``); the reverse direction applies the same rule.
    """
    if (source, target) == ("small1", "small2"):
        return (*omniglot("train", size), *omniglot("test", size))
    a, b = (load_omniglot(s, image_size=size, data_home=SHARED_DATA, download_if_missing=False)
            for s in (source, target))
    keep = ~np.isin(b.alphabet_names[b.alphabet], a.alphabet_names)
    y_test = np.unique(b.target[keep], return_inverse=True)[1].astype(np.int64)
    side = (-1, 1, size, size)
    return a.data.reshape(side), a.target, b.data[keep].reshape(side), y_test


def evaluate(Z, y):
    r = retrieval_scores(Z, y, k=KS)["recall_at_k"]
    c = clustering_scores(Z, y, random_state=0)
    return {**{f"R@{k}": r[k] for k in KS}, "NMI": c["nmi"], "F1": c["f1"]}


class Table:
    """Rows of scores on the test set (printed as they come) and their JSON record."""

    HEADER = ["method", "R@1", "R@2", "R@4", "R@8", "NMI", "F1", "fit s", "note"]

    def __init__(self, y_test):
        self.y_test, self.rows, self.results = y_test, [], {}

    def add(self, name, Z, seconds, note=""):
        scores = evaluate(Z, self.y_test)
        self.results[name] = {**scores, "fit_s": seconds, "note": note}
        self.rows.append([name] + [f"{100 * scores[k]:.2f}" for k in
                                   ("R@1", "R@2", "R@4", "R@8", "NMI", "F1")]
                         + ["" if seconds is None else f"{seconds:.1f}", note])
        print(self.rows[-1], flush=True)

    def markdown(self):
        return markdown_table(self.HEADER, self.rows)


# ------------------------------------------------------------------ the plain-loop anchor
def anchor_convnet():
    layers, width = [], 1
    for _ in range(4):
        layers += [nn.Conv2d(width, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(),
                   nn.MaxPool2d(2)]
        width = 64
    return nn.Sequential(*layers, nn.Flatten())


def random_affine(x, generator, degrees=10.0, translate=0.1):
    """The anchor's light augmentation, written here in plain torch (not skdml's).

    A random rotation in ``[-degrees, degrees]`` and shift of up to ``translate`` of
    the side per image, zero padding (the ink images have a 0 background).
    """
    n = x.shape[0]
    u = torch.rand(n, 3, generator=generator) * 2 - 1
    angle = u[:, 0] * (degrees * np.pi / 180)
    cos, sin = torch.cos(angle), torch.sin(angle)
    theta = torch.stack([torch.stack([cos, -sin, 2 * translate * u[:, 1]], 1),
                         torch.stack([sin, cos, 2 * translate * u[:, 2]], 1)], 1)
    grid = nn.functional.affine_grid(theta, list(x.shape), align_corners=False)
    return nn.functional.grid_sample(x, grid, align_corners=False)


class Anchor:
    """The bare loop: nothing of skdml but the class-balanced sampler (own RandomState).

    ``augment=True`` adds the issue's "light random-affine augmentation"
    (:func:`random_affine`, its own torch generator); ``max_epochs`` stops the
    interleaving of :class:`Interleave` once reached.
    """

    def __init__(self, X, y, X_test, y_test, seed=0, augment=False, max_epochs=None):
        from pytorch_metric_learning import losses, miners

        gen_state = torch.get_rng_state()
        torch.manual_seed(seed)
        self.model = anchor_convnet()
        torch.set_rng_state(gen_state)  # the anchor uses no global RNG after this
        self.generator = torch.Generator().manual_seed(seed) if augment else None
        self.opt = torch.optim.Adam(self.model.parameters(), lr=1e-3)
        self.loss = losses.MultiSimilarityLoss()
        self.miner = miners.MultiSimilarityMiner()
        self.X, self.y = torch.from_numpy(X), torch.from_numpy(y)
        self.X_test, self.y_test = torch.from_numpy(X_test), y_test
        self.sampler = ClassBalancedBatchSampler(y, 16, 4, np.random.RandomState(seed))
        self.seconds, self.curve = [], []
        self.max_epochs = max_epochs

    def done(self):
        return self.max_epochs is not None and len(self.seconds) >= self.max_epochs

    def epoch(self):
        t0 = time.perf_counter()
        self.model.train()
        for idx in self.sampler:
            xb, yb = self.X[idx], self.y[idx]
            if self.generator is not None:
                xb = random_affine(xb, self.generator)
            emb = self.model(xb)
            loss = self.loss(emb, yb, self.miner(emb, yb))
            self.opt.zero_grad(set_to_none=True)
            loss.backward()
            self.opt.step()
        self.seconds.append(time.perf_counter() - t0)
        self.curve.append(recall_at_k(self.embed(self.X_test), self.y_test, k=1))

    @torch.no_grad()
    def embed(self, X):
        """Unit-length embeddings: the multi-similarity loss compares cosines (ours too)."""
        self.model.eval()
        Z = torch.cat([self.model(X[i:i + 512]) for i in range(0, len(X), 512)])
        return torch.nn.functional.normalize(Z, dim=1).numpy()


# ------------------------------------------------------------------ deep rows, interleaved
class Interleave(Callback):
    """After each epoch of our fit: the unseen-class R@1 (untimed) and one anchor epoch.

    A public :class:`skdml.callbacks.Callback`: it runs after the epoch's record
    (and its ``seconds``) is stored, so its own time is not in the epoch's.
    """

    def __init__(self, X_test, y_test, anchor):
        self.X_test, self.y_test, self.anchor = X_test, y_test, anchor
        self.curve, self.excluded, self.epoch_seconds = [], 0.0, []

    def on_epoch_end(self, estimator, info):
        self.epoch_seconds.append(info.record["seconds"])
        t0 = time.perf_counter()
        net = info.model
        was_training = net.training
        net.eval()
        with torch.no_grad():
            X = torch.from_numpy(self.X_test)
            Z = torch.cat([net(X[i:i + 512])[0] for i in range(0, len(X), 512)]).numpy()
        net.train(was_training)
        self.curve.append(recall_at_k(Z, self.y_test, k=1))
        if self.anchor is not None and not self.anchor.done():
            self.anchor.epoch()
        self.excluded += time.perf_counter() - t0


def fit_deep(params, X, y, X_test, y_test, anchor, per_epoch=False):
    """``(estimator, fit seconds, R@1 curve[, seconds of each of our epochs])``."""
    spy = Interleave(X_test, y_test, anchor)
    t0 = time.perf_counter()
    est = DeepMetricTransformer(**params, callbacks=[spy]).fit(X, y)
    seconds = time.perf_counter() - t0 - spy.excluded
    return (est, seconds, spy.curve) + ((spy.epoch_seconds,) if per_epoch else ())


# ------------------------------------------------------------------ per-epoch overhead
def overhead(X, y, n_epochs, n_batches):
    """Median epoch time of ``fit`` against a bare loop on the same model, batches and loss.

    Both train the default network (standardisation, ConvNet, 128-d head, L2
    normalisation) with the multi-similarity loss on 16x4 class-balanced batches
    with Adam; ours with ``augment=False, preserve_input=0`` and no weight average (row
    1, the same work as the bare loop: the engine's overhead), then adding, one at a
    time, the default weight average (row 2), the default ``preserve_input`` (row
    3) and the default augmentation (row 4, the defaults). Epochs alternate, ours
    (one ``warm_start`` epoch, timed by its ``history_``) then bare, so that load
    drift hits both.
    """
    import copy

    from skdml.losses import MultiSimilarityLoss

    common = dict(random_state=0, early_stopping=False,
                  loader_params={"batches_per_epoch": n_batches}, warm_start=True)
    constant = {"lr_schedule": "constant"}
    same = "fit, same work (augment=False, preserve_input=0, ema_epochs=None)"
    ours = {same: DeepMetricTransformer(augment=False, preserve_input=0.0,
                                        optimizer_params={**constant, "ema_epochs": None},
                                        **common),
            "fit, + weight average (ema_epochs=5)": DeepMetricTransformer(
                augment=False, preserve_input=0.0, optimizer_params=constant, **common),
            "fit, + preserve_input (augment=False)": DeepMetricTransformer(
                augment=False, optimizer_params=constant, **common),
            "fit, defaults (+ augmentation)": DeepMetricTransformer(optimizer_params=constant,
                                                                    **common)}
    for est in ours.values():
        est.set_params(max_iter=1).fit(X, y)
    net = copy.deepcopy(ours[same].module_).train()
    loss_fn = MultiSimilarityLoss()
    opt = torch.optim.Adam(net.parameters(), lr=1e-3, weight_decay=1e-4)
    Xt, yt = torch.from_numpy(X), torch.from_numpy(y)
    sampler = ClassBalancedBatchSampler(y, 16, 4, np.random.RandomState(0), n_batches=n_batches)

    def bare_epoch():
        t0 = time.perf_counter()
        for idx in sampler:
            z = net(Xt[idx])[0]
            loss = loss_fn(z, yt[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        return time.perf_counter() - t0

    times = {name: [] for name in ours} | {"bare torch loop": []}
    for epoch in range(2, n_epochs + 2):
        for name, est in ours.items():
            est.set_params(max_iter=epoch).fit(X, y)
            times[name].append(est.history_[-1]["seconds"])
        times["bare torch loop"].append(bare_epoch())
    medians = {name: float(np.median(t)) for name, t in times.items()}
    ref = medians["bare torch loop"]
    rows = [[name, f"{m:.3f}", f"{n_batches * 64 / m:.0f}", f"{m / ref:.3f}"]
            for name, m in medians.items()]
    threads = torch.get_num_threads()
    md = (f"### Per-epoch cost: Omniglot small1 28x28, default network, multi-similarity loss, "
          f"{n_batches} batches of 16x4, median of {n_epochs} alternating epochs\n\n"
          f"Command: `python benchmarks/bench_omniglot.py --overhead`. CPU, {threads} torch "
          "threads, loaded 2-core machine (ratios only).\n\n"
          + markdown_table(["loop", "s / epoch", "images / s", "ratio to bare"], rows))
    save("omniglot_overhead", md, {"times": times, "medians": medians, "threads": threads})


def curves_figure(curves, title, references=None):
    """Unseen-character Recall@1 per epoch, one line per fit; ``references``: grey levels."""
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, curve in curves.items():
        ax.plot(np.arange(1, len(curve) + 1), curve, marker=".", label=name)
    for name, level in (references or {}).items():
        ax.axhline(level, ls="--", lw=1, color="grey")
        ax.text(1, level, name, fontsize=7, va="bottom")
    ax.set(xlabel="epoch", ylabel="unseen-character Recall@1 (small2 without Greek, Latin)",
           title=title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def full_defaults(X, y, X_te, y_te, anchor_epochs, quick=False, seed=0, max_iter=None):
    """The defaults with their whole budget, then the augmented plain-loop anchor.

    The anchor is the issue's reference for the goal: the bare loop with light
    random-affine augmentation for ``anchor_epochs`` epochs (66 in the issue's
    measurement). Its epochs are interleaved with ours (one after each of our
    epochs, timed apart), then it goes on alone; every epoch of both is followed by
    an untimed unseen-class Recall@1 (the curves). ``seed`` is our ``random_state``
    and the anchor's seed; a seed other than 0 writes ``*_seed<N>`` files. ``max_iter``
    (or ``quick``: 3 epochs for both) reduces our budget (the cosine schedule follows it)
    and writes ``*_<N>ep`` (``*_quick``) files, so that a reduced run never replaces the
    whole-budget table.
    """
    if quick:
        max_iter = 3
    params = dict(random_state=seed, **({} if max_iter is None else {"max_iter": max_iter}))
    anchor = Anchor(X, y, X_te, y_te, seed=seed, augment=True, max_epochs=anchor_epochs)
    est, seconds, curve, epoch_seconds = fit_deep(params, X, y, X_te, y_te, anchor,
                                                  per_epoch=True)
    table = Table(y_te)
    results = table.results
    ours = ("deep defaults, max_iter=3 (quick)" if quick
            else "deep defaults (max_iter=90)" if max_iter is None
            else f"deep defaults but max_iter={max_iter}")
    if seed:
        ours = ours.replace("deep defaults", f"deep defaults, random_state={seed}")
    best = getattr(est, "best_iteration_", None)  # only with early stopping
    ours_epoch = float(np.median(epoch_seconds))
    table.add(ours, est.transform(X_te), seconds,
              f"{est.n_iter_} epochs" + (f", best {best}" if best else "")
              + f"; median epoch {ours_epoch:.2f} s")
    results[ours].update(curve=curve, n_iter=est.n_iter_, best_iteration=best,
                         epoch_seconds=epoch_seconds)
    while not anchor.done():
        anchor.epoch()
    name = "plain-loop anchor + augmentation (bare torch + pml)"
    table.add(name, anchor.embed(torch.from_numpy(X_te)), float(np.sum(anchor.seconds)),
              f"{anchor_epochs} epochs, best R@1 {100 * max(anchor.curve):.2f} "
              f"at epoch {int(np.argmax(anchor.curve)) + 1}; median epoch "
              f"{np.median(anchor.seconds):.2f} s")
    results[name].update(curve=anchor.curve, epoch_seconds=anchor.seconds)
    command = "python benchmarks/bench_omniglot.py --full-defaults" + (
        " --quick" if quick else
        ("" if max_iter is None else f" --max-iter {max_iter}")
        + ("" if anchor_epochs == ANCHOR_EPOCHS else f" --anchor-epochs {anchor_epochs}")
    ) + (f" --seed {seed}" if seed else "")
    budget = ("the whole default budget" if max_iter is None
              else f"a reduced budget ({max_iter} epochs of ours, {anchor_epochs} of the anchor)")
    md = (f"### Omniglot small1 -> unseen small2 characters: {budget}, the defaults against "
          "the augmented anchor\n\n"
          f"Command: `{command}`. CPU, {torch.get_num_threads()} torch threads, both in one "
          "run, the anchor's epochs interleaved with ours (then alone once our fit has "
          "stopped). Class-disjoint protocol: train on every small1 character (no validation "
          "set), retrieve among the 106 characters of small2's three alphabets small1 lacks "
          "(Greek and Latin, in both zips, dropped; `load_omniglot(\"test\")`). Neither fit "
          "time includes the per-epoch Recall@1 of the curves.\n\n"
          + table.markdown())
    fig = curves_figure({"deep defaults": curve, "anchor + augmentation": anchor.curve},
                        "Omniglot small1 -> unseen small2 characters"
                        + (", whole budgets" if max_iter is None else f", {budget}"))
    stem = "omniglot_full_defaults" + ("" if quick or max_iter is None else f"_{max_iter}ep") \
        + (f"_seed{seed}" if seed else "")  # (save() adds _quick to a quick run's files)
    save(stem, md, {"command": command, "seed": seed, "results": results},
         figures=[(f"{stem}_curves", fig)])


def linear_only(X_tr, y_tr, X_te, y_te, seeds, size, reverse=False):
    """Raw pixels, PCA-128 and the linear learners' defaults, one row per seed and their mean.

    The linear learners run with their defaults, so for k-NN on the training classes
    (``validation_split="stratified"``): these rows show what that setting does to classes
    it never saw, next to the class-disjoint setting made for them.
    """
    from sklearn.decomposition import PCA

    flat = lambda A: A.reshape(len(A), -1)  # noqa: E731
    table = Table(y_te)
    table.add("raw pixels", flat(X_te), None)
    c0 = time.process_time()
    table.add("PCA (128)", PCA(128, random_state=0).fit(flat(X_tr)).transform(flat(X_te)),
              time.process_time() - c0)
    makes = {"ECAML()": lambda s: ECAML(random_state=s), "JRD()": lambda s: JRD(random_state=s),
             'ECAML(validation_split="class_disjoint")': lambda s: ECAML(
                 validation_split="class_disjoint", random_state=s),
             'JRD(validation_split="class_disjoint")': lambda s: JRD(
                 validation_split="class_disjoint", random_state=s)}
    with threadpool_limits(1):
        for name, make in makes.items():
            for seed in range(seeds):
                c0 = time.process_time()
                est = make(seed).fit(flat(X_tr), y_tr)
                note = f"random_state={seed}, best epoch {est.best_iteration_}" + (
                    f", neighbor_weight_={est.neighbor_weight_:g}"
                    if hasattr(est, "neighbor_weight_") else f", loss_={est.loss_}")
                table.add(f"{name}, seed {seed}", est.transform(flat(X_te)),
                          time.process_time() - c0, note)
            rows = [table.results[f"{name}, seed {s}"] for s in range(seeds)]
            mean = {k: float(np.mean([r[k] for r in rows])) for k in rows[0]
                    if k not in ("note", "fit_s")}
            table.results[f"{name}, mean"] = mean
            table.rows.append([f"**{name}, mean of {seeds}**"]
                              + [f"{100 * mean[k]:.2f}" for k in
                                 ("R@1", "R@2", "R@4", "R@8", "NMI", "F1")]
                              + [f"{np.median([r['fit_s'] for r in rows]):.1f}", ""])
    command = f"python benchmarks/bench_omniglot.py --linear-only --seeds {seeds}" + (
        " --reverse" if reverse else "")
    source, target = ("small2", "small1") if reverse else ("small1", "small2")
    md = (f"### Omniglot zero-shot, linear rows: train {source} ({len(np.unique(y_tr))} "
          f"characters), retrieve among {len(np.unique(y_te))} unseen {target} characters "
          f"({len(y_te)} images), "
          f"{size}x{size}\n\nCommand: `{command}`. Fit CPU seconds on one thread. "
          "Recall@K, NMI and F1 in %.\n\n" + table.markdown())
    save("omniglot_linear" + ("_reverse" if reverse else ""), md,
         {"command": command, "results": table.results},
         threads="1 (BLAS, torch)")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=DEFAULT_EPOCHS,
                        help="epoch budget of every deep row and of the anchor (a budget "
                             f"other than {DEFAULT_EPOCHS} writes omniglot_<N>ep.*)")
    parser.add_argument("--size", type=int, default=28, help="image side")
    parser.add_argument("--quick", action="store_true",
                        help="3 epochs, own file names (*_quick)")
    parser.add_argument("--overhead", action="store_true",
                        help="only the per-epoch cost against a bare loop")
    parser.add_argument("--full-defaults", action="store_true",
                        help="only DeepMetricTransformer(random_state=0) with its whole default "
                             "budget (max_iter=90), then the anchor with "
                             "augmentation")
    parser.add_argument("--anchor-epochs", type=int, default=ANCHOR_EPOCHS,
                        help="--full-defaults: epochs of the augmented anchor (the issue's "
                             f"{ANCHOR_EPOCHS})")
    parser.add_argument("--max-iter", type=int, default=None,
                        help="--full-defaults: our epoch budget instead of the default 90 (a "
                             "reduced run, written to omniglot_full_defaults_<N>ep.*)")
    parser.add_argument("--seed", type=int, default=0,
                        help="--full-defaults: our random_state and the anchor's seed (a seed "
                             "other than 0 writes *_seed<N> files)")
    parser.add_argument("--linear-only", action="store_true",
                        help="only raw pixels, PCA and the linear learners' defaults, each "
                             "learner with random_state 0 .. --seeds - 1 (omniglot_linear.*)")
    parser.add_argument("--seeds", type=int, default=1, help="--linear-only: seeds per learner")
    parser.add_argument("--reverse", action="store_true",
                        help="--linear-only: train on small2, retrieve among small1's characters "
                             "outside small2's alphabets (omniglot_linear_reverse.*)")
    args = parser.parse_args(argv)
    epochs = 3 if args.quick else args.epochs
    X_tr, y_tr, X_te, y_te = zero_shot(size=args.size)
    if args.linear_only:
        if args.reverse:
            X_tr, y_tr, X_te, y_te = zero_shot("small2", "small1", size=args.size)
        return linear_only(X_tr, y_tr, X_te, y_te, args.seeds, args.size, args.reverse)
    if args.overhead:
        return overhead(X_tr, y_tr, n_epochs=7, n_batches=15)
    if args.full_defaults:
        return full_defaults(X_tr, y_tr, X_te, y_te, 3 if args.quick else args.anchor_epochs,
                             quick=args.quick, seed=args.seed, max_iter=args.max_iter)
    flat = lambda A: A.reshape(len(A), -1)  # noqa: E731
    table, curves = Table(y_te), {}
    add, results = table.add, table.results

    add("raw pixels", flat(X_te), None)
    from sklearn.decomposition import PCA

    t0 = time.perf_counter()
    pca = PCA(128, random_state=0).fit(flat(X_tr))
    add("PCA (128)", pca.transform(flat(X_te)), time.perf_counter() - t0)
    for name, est in (("ECAML (linear)", ECAML(random_state=0)),
                      ("JRD (linear)", JRD(random_state=0))):
        t0 = time.perf_counter()
        est.fit(flat(X_tr), y_tr)
        add(name, est.transform(flat(X_te)), time.perf_counter() - t0)

    anchor = Anchor(X_tr, y_tr, X_te, y_te)
    for name, params in (("deep defaults", {}), ("deep tuned", TUNED)):
        params = dict(random_state=0, max_iter=epochs, **params)
        est, seconds, curve = fit_deep(params, X_tr, y_tr, X_te, y_te,
                                       anchor if name == "deep defaults" else None)
        curves[name] = curve
        note = f"{est.n_iter_} epochs" + (f", best {est.best_iteration_}"
                                          if hasattr(est, "best_iteration_") else "")
        add(name, est.transform(X_te), seconds, note)
        results[name]["params"] = {k: v for k, v in params.items()}
        results[name]["curve"] = curve
    while len(anchor.seconds) < epochs:  # our defaults stopped early: the anchor goes on
        anchor.epoch()
    curves["plain-loop anchor"] = anchor.curve
    add("plain-loop anchor (bare torch + pml)", anchor.embed(torch.from_numpy(X_te)),
        float(np.sum(anchor.seconds)), f"{epochs} epochs")
    results["plain-loop anchor (bare torch + pml)"]["curve"] = anchor.curve

    threads = torch.get_num_threads()
    command = "python benchmarks/bench_omniglot.py" + (" --quick" if args.quick else
                                                      f" --epochs {epochs}")
    md = (f"### Omniglot zero-shot: train small1 (136 characters, 2720 images), retrieve in "
          f"small2 without Greek and Latin ({len(np.unique(y_te))} unseen characters, "
          f"{len(y_te)} images), {args.size}x{args.size}; epoch "
          f"budget {epochs} for every deep row and the anchor\n\n"
          f"Command: `{command}`. CPU, {threads} torch threads, on a 2-core machine shared "
          "with other jobs (loaded): fit times are comparable within this table only (the "
          "anchor's epochs are interleaved with the defaults' epochs).\n\n"
          + table.markdown())
    fig = curves_figure(curves, "Omniglot small1 -> unseen small2 characters",
                        {name: results[name]["R@1"] for name in ("raw pixels", "PCA (128)")})
    # the default budget writes omniglot.*, another one omniglot_<N>ep.* (quick: *_quick)
    stem = "omniglot" if args.quick or epochs == DEFAULT_EPOCHS else f"omniglot_{epochs}ep"
    save(stem, md, {"command": command, "threads": threads, "epochs": epochs,
                    "results": results}, figures=[(f"{stem}_curves", fig)])


if __name__ == "__main__":
    main()

"""DeML (CVPR 2019) ablations in miniature: the paper's Tables 1, 2 and 4 on small real data.

Zero-shot protocol (test classes never seen in training):

* ``omniglot``: train on Omniglot ``images_background_small1`` (5 alphabets, 136
  characters), retrieve among the characters of ``images_background_small2`` never
  trained on (its 3 alphabets small1 lacks, 106 characters; Greek and Latin are in
  both zips and dropped): ``load_omniglot("train")`` / ``("test")`` through
  ``bench_omniglot.zero_shot``; 20 drawings per character, ink = 1, area-resized to
  28x28.
* ``usps``: USPS digits 0-4 -> 5-9, 16x16.

Rows (every one on the same SmallCNN split after its second stage, trained with the
same loss, Eq. 5, the same epochs and the same learning rates; learners x10):

* ``U-d``: one d-dimensional learner, no CAM, no L_act (the paper's Ud baseline);
* ``U-d + L_act``: Table 1;
* ``DeML(I, J)``, I in {1, 2}, J in {1, 2, 4}: Table 2 (``O1`` / ``O2``: Recall@1 of
  each scale's root learner alone);
* ``DeML(1, 4) w/o L_adv``: Table 4, with ``sim``, the mean cosine between the CA
  learners of a scale (:func:`skdml.deep.deml.learner_similarity`).

Recall@K with the cosine distance, NMI and F1 of k-means (as many clusters as test
classes), fit seconds and their ratio to U-d in the same seed (the machine is shared).
The attention figure (paper Fig. 4): input, attention at scale 1, the crop (scale 2's
input), attention at scale 2, for test images, from the seed-0 DeML(2, 2).

``--gpu`` (not run in CPU-only sessions): DeML(2, 2) against U-d on a SmallResNet at
64x64 Omniglot on CUDA, with training images/s.

Usage::

    python benchmarks/studies/bench_deml.py --quick                 # smoke run, a few minutes
    python benchmarks/studies/bench_deml.py --seeds 0 1 2           # the published tables
    python benchmarks/studies/bench_deml.py --gpu --device cuda     # on a CUDA machine
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks._common import load, markdown_table, save  # noqa: E402
from skdml.deep import make_deml  # noqa: E402
from skdml.deep.deml import learner_similarity  # noqa: E402
from skdml.metrics import clustering_scores, recall_at_k, retrieval_scores  # noqa: E402

KS = (1, 2, 4, 8)
UNIFIED = {"channel_attention": False}
#: name -> (I, J, DeML parameters)
ROWS = {
    "U-d": (1, 1, {**UNIFIED, "activation_decay": 0.0, "anti_trivial_weight": 0.0}),
    "U-d + L_act": (1, 1, UNIFIED),
    "DeML(1,1)": (1, 1, {}),
    "DeML(1,2)": (1, 2, {}),
    "DeML(1,4)": (1, 4, {}),
    "DeML(2,1)": (2, 1, {}),
    "DeML(2,2)": (2, 2, {}),
    "DeML(2,4)": (2, 4, {}),
    "DeML(1,4) w/o L_adv": (1, 4, {"adversary_weight": 0.0}),
}


# ------------------------------------------------------------------ data
def zero_shot_data(name, size=None):
    """(X_train, y_train, X_test, y_test, description) of a class-disjoint split."""
    if name == "omniglot":
        size = size or 28
        from benchmarks.bench_omniglot import zero_shot

        Xtr, ytr, Xte, yte = zero_shot(size=size)
        what = (f"Omniglot {size}x{size}: small1 ({len(np.unique(ytr))} characters) -> small2 "
                f"without Greek and Latin ({len(np.unique(yte))} unseen characters)")
        return Xtr, ytr, Xte, yte, what
    X, y = load(name)
    side = int(round(np.sqrt(X.shape[1])))
    X = X.reshape(-1, 1, side, side).astype(np.float32)
    if X.max() > 1.5:
        X = X / 255.0
    classes = np.unique(y)
    seen = np.isin(y, classes[: len(classes) // 2])
    what = f"{name.upper()} {side}x{side}: first half of the classes -> second half"
    return X[seen], y[seen], X[~seen], y[~seen], what


# ------------------------------------------------------------------ one row
def batch_plan(args, n_classes):
    """P classes x K samples: at most ``--P`` classes, about ``--batch-size`` images."""
    P = min(args.P, n_classes)
    return P, max(2, args.batch_size // P)


def build(row, args, seed, n_classes):
    I, J, params = ROWS[row]
    deml_params = {"crop_min_size": args.crop_min_size, **params}
    P, K = batch_plan(args, n_classes)
    return make_deml(I, J, n_components=args.dim, backbone=args.backbone,
                     widths=tuple(args.widths), deml_params=deml_params,
                     learning_rate=args.lr, max_iter=args.epochs,
                     loader_params={"batches_per_epoch": args.batches}, n_classes_per_batch=P,
                     n_samples_per_class=K, early_stopping=False, device=args.device,
                     amp=args.amp or False, random_state=seed)


def evaluate(row, est, Z, y, seed):
    I, J, _ = ROWS[row]
    scores = retrieval_scores(Z, y, k=KS, metric="cosine")["recall_at_k"]
    out = {f"R@{k}": 100 * scores[k] for k in KS}
    out.update({name: 100 * v for name, v in
                clustering_scores(Z, y, random_state=seed).items()})
    if I > 1:  # Table 2's O: each root learner (scale) alone
        for i, part in enumerate(np.split(Z, I, axis=1)):
            out[f"O{i + 1}"] = 100 * recall_at_k(part, y, k=1, metric="cosine")
    out["sim"] = learner_similarity(Z, I, J) if J > 1 else float("nan")
    out["epochs"] = est.n_iter_
    out.update({k: v for k, v in est.history_[-1].items() if k.startswith(("aux", "metric"))})
    out["aux_adv_first_epoch"] = est.history_[0].get("aux_adv", float("nan"))
    return out


def run_dataset(name, args):
    Xtr, ytr, Xte, yte, what = zero_shot_data(name, args.size)
    P, K = batch_plan(args, len(np.unique(ytr)))
    runs, keep = {row: [] for row in args.rows}, {}
    warm = build(args.rows[0], args, 0, len(np.unique(ytr)))  # first-fit imports, not timed
    few = np.random.RandomState(0).permutation(len(ytr))[:200]  # several classes
    warm.set_params(max_iter=1, loader_params={"batches_per_epoch": 1},
                    n_classes_per_batch=2).fit(Xtr[few], ytr[few])
    for seed in args.seeds:
        for row in args.rows:  # interleaved: every row of a seed before the next seed
            est = build(row, args, seed, len(np.unique(ytr)))
            t0 = time.perf_counter()
            est.fit(Xtr, ytr)
            fit_s = time.perf_counter() - t0
            Z = est.transform(Xte)
            result = evaluate(row, est, Z, yte, seed)
            result.update(seed=seed, fit_s=fit_s,
                          images_per_s=est.n_iter_ * args.batches * P * K / fit_s)
            runs[row].append(result)
            if seed == args.seeds[0] and ROWS[row][0] == 2:
                keep[row] = est
            print(f"  {name} seed {seed} {row:>20s}: R@1 {result['R@1']:.2f} NMI "
                  f"{result['nmi']:.2f} sim {result['sim']:.3f} fit {fit_s:.1f}s", flush=True)
    return what, runs, keep, (Xte, yte), (P, K)


# ------------------------------------------------------------------ tables and figures
def summarise(runs, base="U-d"):
    cols = [f"R@{k}" for k in KS] + ["nmi", "f1", "O1", "O2", "sim"]
    rows, data = [], {}
    for row, results in runs.items():
        cells, data[row] = [row], {}
        for col in cols:
            values = np.array([r.get(col, np.nan) for r in results], dtype=float)
            data[row][col] = values.tolist()
            if np.all(np.isnan(values)):
                cells.append("")
            elif col == "sim":
                cells.append(f"{np.mean(values):.3f} ± {np.std(values):.3f}")
            else:
                cells.append(f"{np.mean(values):.2f} ± {np.std(values):.2f}")
        fit = np.array([r["fit_s"] for r in results])
        data[row]["fit_s"] = fit.tolist()
        cells.append(f"{fit.mean():.0f}")
        if base in runs:
            ratio = fit / np.array([r["fit_s"] for r in runs[base]])
            cells.append(f"{ratio.mean():.2f}x")
        rows.append(cells)
    header = ["method"] + [f"R@{k}" for k in KS] + ["NMI", "F1", "O1 R@1", "O2 R@1", "sim",
                                                   "fit s", "fit / U-d"]
    return markdown_table(header, rows), data


def attention_figure(est, X, y, title, n=6, seed=0):
    """Paper Fig. 4: input, attention at scale 1, crop (scale-2 input), attention at scale 2."""
    rng = np.random.RandomState(seed)
    classes = np.unique(y)
    classes = rng.choice(classes, n, replace=len(classes) < n)
    idx = np.array([rng.choice(np.flatnonzero(y == c)) for c in classes])
    if len(np.unique(idx)) < n:  # few classes: distinct images, classes cycled
        idx = np.concatenate([rng.permutation(np.flatnonzero(y == c))[:1 + n // len(
            np.unique(y))] for c in np.unique(y)])[:n]
    net = est.module_.backbone
    inside = net.look_inside(torch.as_tensor(X[idx], device=est.device_))
    fig, axes = plt.subplots(4, n, figsize=(1.6 * n, 6.6))
    H, W = X.shape[2:]
    for col in range(n):
        image = X[idx[col], 0]
        box = inside["boxes"][0][col].cpu().numpy() * [H, W, H, W]
        panels = [(image, None), (inside["attention"][0][col], "magma"),
                  (inside["inputs"][1][col, 0], None), (inside["attention"][1][col], "magma")]
        for r, (img, cmap) in enumerate(panels):
            ax = axes[r, col]
            img = img.cpu().numpy() if torch.is_tensor(img) else img
            if cmap is None:
                ax.imshow(img, cmap="gray_r", vmin=0, vmax=1)
            else:
                ax.imshow(X[idx[col], 0] if r == 1 else inside["inputs"][1][col, 0].cpu(),
                          cmap="gray_r", vmin=0, vmax=1)
                ax.imshow(img, cmap=cmap, alpha=0.6)
            if r == 0:
                ax.add_patch(plt.Rectangle((box[1] - 0.5, box[0] - 0.5), box[3] - box[1],
                                           box[2] - box[0], fill=False, color="tab:red", lw=1.5))
            ax.set_xticks([])
            ax.set_yticks([])
    for r, label in enumerate(["input + crop box", "attention, scale 1", "crop (scale 2)",
                               "attention, scale 2"]):
        axes[r, 0].set_ylabel(label, fontsize=8)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    return fig


def ablation_figure(all_data):
    fig, axes = plt.subplots(1, len(all_data), figsize=(6 * len(all_data), 3.6), squeeze=False)
    for ax, (name, data) in zip(axes[0], all_data.items()):
        rows = [r for r in data if not r.startswith("_")]
        means = [np.mean(data[r]["R@1"]) for r in rows]
        stds = [np.std(data[r]["R@1"]) for r in rows]
        colours = {"U-d": "0.6", "U-d + L_act": "0.6", "DeML(1,4) w/o L_adv": "tab:orange"}
        ax.barh(rows, means, xerr=stds, color=[colours.get(r, "tab:blue") for r in rows])
        ax.set_xlim(min(means) - 3 * max(max(stds), 1), max(means) + 3 * max(max(stds), 1))
        ax.invert_yaxis()
        ax.set_xlabel("unseen-class Recall@1 (%)")
        ax.set_title(name)
    fig.tight_layout()
    return fig


# ------------------------------------------------------------------ main
def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smoke run (own file names)")
    parser.add_argument("--datasets", nargs="+", default=["omniglot", "usps"])
    parser.add_argument("--rows", nargs="+", default=list(ROWS), choices=list(ROWS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--batches", type=int, default=25, help="batches per epoch")
    parser.add_argument("--P", type=int, default=16, help="most classes per batch")
    parser.add_argument("--batch-size", type=int, default=64,
                        help="images per batch (K = batch_size // P)")
    parser.add_argument("--size", type=int, default=28, help="Omniglot image side")
    parser.add_argument("--dim", type=int, default=64, help="embedding size d")
    parser.add_argument("--widths", nargs="+", type=int, default=[16, 32, 64])
    parser.add_argument("--backbone", default="small_cnn", choices=["small_cnn", "small_resnet"])
    parser.add_argument("--lr", type=float, default=1e-3,
                        help="learning rate (the learners get x10)")
    parser.add_argument("--crop-min-size", type=int, default=8)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--amp", default=None, choices=["bf16", "fp16"])
    parser.add_argument("--threads", type=int, default=1, help="SKDML_NUM_THREADS")
    parser.add_argument("--gpu", action="store_true",
                        help="CUDA run: DeML(2,2) vs U-d, SmallResNet, Omniglot 64x64")
    parser.add_argument("--name", default=None, help="results file stem")
    args = parser.parse_args(argv)
    os.environ["SKDML_NUM_THREADS"] = str(args.threads)
    if args.quick:
        args.seeds, args.epochs, args.batches = args.seeds[:1], 2, 4
    if args.gpu:
        args.datasets, args.rows = ["omniglot"], ["U-d", "DeML(2,2)"]
        args.backbone, args.widths, args.dim = "small_resnet", [32, 64, 128, 256], 128
        args.crop_min_size, args.size = 24, 64
    stem = args.name or ("deml_gpu" if args.gpu else "deml_ablation")
    stem += "_quick" if args.quick else ""
    sections, data, figures = [], {}, []
    for name in args.datasets:
        t0 = time.perf_counter()
        what, runs, keep, (Xte, yte), (P, K) = run_dataset(name, args)
        table, data[name] = summarise(runs)
        data[name]["_runs"] = runs
        budget = (f"{args.epochs} epochs x {args.batches} batches of {P}x{K}, "
                  f"{args.backbone}{tuple(args.widths)} split after its 2nd stage, d={args.dim}, "
                  f"lr {args.lr:g} (learners x10), seeds {args.seeds}, device {args.device}, "
                  f"{args.threads} thread(s); {time.perf_counter() - t0:.0f} s in all")
        sections.append(f"### {what}\n\n{budget}. Mean ± std over seeds.\n\n{table}")
        print(sections[-1], flush=True)
        if "DeML(2,2)" in keep:
            figures.append((f"{stem}_attention_{name}" if args.quick or args.gpu
                            else f"deml_attention_{name}",
                            attention_figure(keep["DeML(2,2)"], Xte, yte,
                                             f"DeML(2,2), {what.split(':')[0]}, unseen classes")))
    figures.append((f"{stem}_recall", ablation_figure({n: d for n, d in data.items()})))
    header = ("Command: `python benchmarks/studies/bench_deml.py "
              + " ".join(argv if argv is not None else sys.argv[1:]) + "`. Machine: "
              f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores shared with "
              "other jobs (loaded), torch " + torch.__version__ + f", {args.threads} thread(s) "
              "(SKDML_NUM_THREADS); fit seconds are pessimistic, ratios less so. "
              + ("" if args.device.startswith("cuda") else
                 "Nothing was run on a GPU (none was available); the `--gpu` table was not run."))
    save(stem, header + "\n\n" + "\n\n".join(sections), data, figures)


if __name__ == "__main__":
    main()

"""Benchmark of DeepMetricTransformer (overhead, zero-shot, AMP and memory format).

Sections (all on by default; pick with flags):

* ``--overhead``: our ``fit`` epoch time vs a bare hand-written torch loop on the
  same model, batch plan (same sampler, same seed) and loss, in the same run.
* ``--zero-shot``: small CNN, USPS digits 0-4 -> 5-9 and COIL-20 objects 1-10 ->
  11-20: Recall@1/2/4/8, NMI, F1 for triplet / N-pair / binomial with and without
  EC, binomial + JRS and AM-Softmax + JRS (JRD), against raw pixels, PCA and the
  linear learners ``skdml.ECAML`` / ``skdml.JRD``; training vs testing Recall@1
  curves per epoch (ECAML Fig. 2 style), recorded with ``warm_start`` one epoch
  at a time (equivalent to one uninterrupted fit, see tests/deep/test_trainer.py).
* ``--amp-speed``: images/s of training steps, fp32 vs AMP, on a ResNet-style
  backbone (fp16 and bf16 on CUDA; bf16 on CPU, for information only). The GPU
  proof, with ``fit`` itself and the input pipeline, is ``bench_gpu.py``.
* ``--memory-format``: a training step of the default ConvNet (64-wide, batch 64,
  128-d head, binomial loss; the step of ``--amp-speed``) with its weights and activations in channels-last
  (NHWC, what :class:`~skdml.deep.ConvNet` does) against the same network in
  NCHW, per image size, repeats interleaved.

Usage::

    python benchmarks/bench_deep.py --quick          # smoke run, < 1 min
    python benchmarks/bench_deep.py --epochs 8       # the reported run
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks._common import load, markdown_table, save  # noqa: E402
from skdml import DeepMetricTransformer  # noqa: E402
from skdml._training import ClassBalancedBatchSampler  # noqa: E402
from skdml._utils import thread_limits  # noqa: E402
from skdml.deep import ConvNet, SmallCNN, SmallResNet  # noqa: E402
from skdml.losses import BinomialDevianceLoss, JRSRegularizer  # noqa: E402
from skdml.metrics import clustering_scores, recall_at_k, retrieval_scores  # noqa: E402

KS = (1, 2, 4, 8)


def images(name):
    X, y = load(name)
    side = int(round(np.sqrt(X.shape[1])))
    return X.reshape(-1, 1, side, side).astype(np.float32), y


def first_half_split(y):
    classes = np.unique(y)
    train_classes = classes[: len(classes) // 2]
    seen = np.isin(y, train_classes)
    return np.flatnonzero(seen), np.flatnonzero(~seen)


def cnn_builder(widths, global_pool=True):
    def build(shape):
        return SmallCNN(shape[0], widths=widths, global_pool=global_pool)
    return build


# ------------------------------------------------------------------ (1) overhead
class BareLoop:
    """The hand-written reference: same model, sampler, loss and optimiser groups."""

    def __init__(self, X, y, widths, P, K, n_batches, lr, seed):
        rng = np.random.RandomState(seed)
        torch.manual_seed(seed)
        self.backbone = SmallCNN(X.shape[1], widths=widths)
        self.head = nn.Linear(self.backbone.out_features, 128)
        self.loss_fn = BinomialDevianceLoss()
        self.opt = torch.optim.Adam([{"params": self.backbone.parameters(), "lr": lr},
                                     {"params": self.head.parameters(), "lr": 10 * lr}],
                                    lr=lr, weight_decay=2e-4)
        self.Xt, self.yt = torch.from_numpy(X), torch.as_tensor(y, dtype=torch.long)
        self.sampler = ClassBalancedBatchSampler(y, P, K, rng, n_batches=n_batches)

    def epoch(self):
        with thread_limits():
            self.backbone.train()
            t0 = time.perf_counter()
            for idx in self.sampler:
                idx = torch.from_numpy(idx)
                z = F.normalize(self.head(self.backbone(self.Xt[idx]).flatten(1)), dim=1)
                loss = self.loss_fn(z, self.yt[idx])
                self.opt.zero_grad(set_to_none=True)
                loss.backward()
                self.opt.step()
                loss.item()
            return time.perf_counter() - t0


def bench_overhead(args):
    X, y = images("usps")
    tr, _ = first_half_split(y)
    X, y = X[tr], y[tr]
    widths, P, K, n_batches, lr = (16, 32, 64), 5, 8, args.overhead_batches, 1e-3
    est = DeepMetricTransformer(cnn_builder(widths), loss="binomial", learning_rate=lr,
                                n_classes_per_batch=P, n_samples_per_class=K,
                                loader_params={"batches_per_epoch": n_batches}, max_iter=1,
                                warm_start=True,
                                early_stopping=False, device="cpu", random_state=0)
    bare = BareLoop(X, y, widths, P, K, n_batches, lr, 0)
    ours_t, bare_t = [], []
    # epochs alternate (ours, bare, ours, ...) so that load drift hits both alike; epoch 1
    # of each is a discarded warm-up. Ours resumes with warm_start: its "seconds" cover
    # the epoch loop only, exactly like one uninterrupted fit (see tests/deep/test_trainer.py).
    for epoch in range(1, args.overhead_epochs + 2):
        est.set_params(max_iter=epoch).fit(X, y)
        t_bare = bare.epoch()
        if epoch > 1:
            ours_t.append(est.history_[-1]["seconds"])
            bare_t.append(t_bare)
    ours, ref = statistics.median(ours_t), statistics.median(bare_t)
    rows = [["DeepMetricTransformer.fit", f"{ours:.3f}", f"{n_batches * P * K / ours:.0f}"],
            ["bare torch loop", f"{ref:.3f}", f"{n_batches * P * K / ref:.0f}"],
            ["ratio (ours / bare)", f"{ours / ref:.3f}", ""]]
    md = ("### Overhead: epoch time, USPS 0-4, SmallCNN(16,32,64), binomial, "
          f"{n_batches} batches of {P}x{K}, median of {len(ours_t)} alternating epochs (CPU, "
          f"{torch.get_num_threads()} threads)\n\n"
          + markdown_table(["loop", "s / epoch", "images / s"], rows))
    return md, {"ours_s": ours_t, "bare_s": bare_t, "ratio": ours / ref}


# ------------------------------------------------------------------ (2) zero-shot
def deep_configs(n_train_classes):
    ec = {"triplet": 0.02, "npair": 0.3, "binomial": 0.13}  # ECAML Tab. 1 optima
    configs = {}
    for loss in ("triplet", "npair", "binomial"):
        configs[loss] = dict(loss=loss)
        configs[f"{loss}+EC"] = dict(loss=loss, regularizer="ec", regularizer_weight=ec[loss])
    configs["binomial+JRS"] = dict(loss="binomial", regularizer_weight=1.0,
                                   regularizer=JRSRegularizer(layers=["blocks.1"]))
    configs["amsoftmax+JRS"] = dict(loss="amsoftmax", regularizer_weight=1.0,
                                    regularizer=JRSRegularizer(layers=["blocks.1"]))
    return configs


def evaluate(Z, y, seed=0):
    r = retrieval_scores(Z, y, k=KS)["recall_at_k"]
    c = clustering_scores(Z, y, random_state=seed)
    return {**{f"R@{k}": r[k] for k in KS}, "NMI": c["nmi"], "F1": c["f1"]}


def linear_learners(args):
    out = {}
    try:
        from skdml import ECAML
        out["ECAML (linear)"] = ECAML(n_components=64, random_state=0,
                                      max_iter=args.linear_iter)
    except Exception as exc:  # noqa: BLE001 - report, do not fail the benchmark
        print(f"ECAML not available: {exc!r}")
    try:
        from skdml import JRD
        out["JRD (linear)"] = JRD(n_components=64, random_state=0, max_iter=args.linear_iter)
    except Exception as exc:  # noqa: BLE001
        print(f"JRD not available: {exc!r}")
    return out


def bench_zero_shot(args, name):
    from sklearn.decomposition import PCA

    X, y = images(name)
    tr, te = first_half_split(y)
    if args.quick:
        rng = np.random.RandomState(0)
        # at most 600 of each half (AT&T's halves hold 200 faces each)
        tr = np.sort(rng.choice(tr, min(600, len(tr)), replace=False))
        te = np.sort(rng.choice(te, min(600, len(te)), replace=False))
    n_train_classes = len(np.unique(y[tr]))
    rng = np.random.RandomState(1)
    tr_eval = np.sort(rng.choice(tr, min(1000, len(tr)), replace=False))
    Xflat = X.reshape(len(X), -1)
    results, curves, seconds = {}, {}, {}

    results["raw pixels"] = evaluate(Xflat[te], y[te])
    t0 = time.perf_counter()
    pca = PCA(64, random_state=0).fit(Xflat[tr])
    seconds["PCA (64)"] = time.perf_counter() - t0
    results["PCA (64)"] = evaluate(pca.transform(Xflat[te]), y[te])
    for label, est in linear_learners(args).items():
        t0 = time.perf_counter()
        try:
            est.fit(Xflat[tr], y[tr])
        except Exception as exc:  # noqa: BLE001
            print(f"{label} failed: {exc!r}")
            continue
        seconds[label] = time.perf_counter() - t0
        results[label] = evaluate(est.transform(Xflat[te]), y[te])
        print(f"[{name}] {label}: R@1 {results[label]['R@1']:.4f} ({seconds[label]:.1f}s)",
              flush=True)

    P = min(8, n_train_classes)
    K = max(2, 40 // P)
    # flattened last feature map (no global pooling): keeps the layout of small aligned
    # images, measured +2-3 points of unseen-class R@1 on USPS over global pooling
    common = dict(backbone=cnn_builder((16, 32, 64), global_pool=False), n_components=64,
                  learning_rate=args.lr, early_stopping=False,
                  n_classes_per_batch=P, n_samples_per_class=K,
                  loader_params={"batches_per_epoch": args.batches}, device="cpu",
                  random_state=0)
    configs = deep_configs(n_train_classes)
    if args.quick:
        configs = {k: configs[k] for k in ("binomial", "binomial+EC", "amsoftmax+JRS")}
    for label, cfg in configs.items():
        est = DeepMetricTransformer(**common, **cfg, max_iter=1, warm_start=True)
        curve = {"train": [], "test": []}
        t0 = time.perf_counter()
        for epoch in range(1, args.epochs + 1):
            est.set_params(max_iter=epoch).fit(X[tr], y[tr])
            curve["train"].append(recall_at_k(est.transform(X[tr_eval]), y[tr_eval], k=1))
            curve["test"].append(recall_at_k(est.transform(X[te]), y[te], k=1))
        seconds[f"deep {label}"] = sum(rec["seconds"] for rec in est.history_)
        results[f"deep {label}"] = evaluate(est.transform(X[te]), y[te])
        curves[label] = curve
        print(f"[{name}] deep {label}: train R@1 {curve['train'][-1]:.4f} test R@1 "
              f"{curve['test'][-1]:.4f} ({time.perf_counter() - t0:.1f}s)", flush=True)

    header = ["method"] + [f"R@{k}" for k in KS] + ["NMI", "F1", "fit s"]
    rows = [[m] + [f"{100 * v:.2f}" for v in r.values()]
            + [f"{seconds[m]:.1f}" if m in seconds else ""] for m, r in results.items()]
    title = {"usps": "USPS 16x16: train digits 0-4, test digits 5-9",
             "coil20": "COIL-20 32x32: train objects 1-10, test objects 11-20"}[name]
    md = (f"### Zero-shot {title} ({len(tr)} / {len(te)} images, {args.epochs} epochs x "
          f"{args.batches} batches of {P}x{K}, SmallCNN(16,32,64, flattened), embedding 64, "
          f"lr {args.lr:g}; linear learners max_iter={args.linear_iter})\n\n"
          + markdown_table(header, rows))
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    epochs = np.arange(1, args.epochs + 1)
    for ax, which in zip(axes, ("train", "test")):
        for label, curve in curves.items():
            ax.plot(epochs, curve[which], marker="o", ms=3, label=label,
                    ls="-" if "+" in label else "--")
        ax.set_title(f"{name}: {'training (seen)' if which == 'train' else 'testing (unseen)'}"
                     " classes")
        ax.set_xlabel("epoch")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("Recall@1")
    axes[1].legend(fontsize=7)
    return md, {"results": results, "curves": curves, "seconds": seconds}, fig


# ------------------------------------------------------------------ (4) AMP speed
def images_per_second(model, device, amp, batch, side, steps, channels=3, *,
                      memory_format=None, loss_fn=None, n_classes=8, warmup=3, fused=False):
    """Training images/s (forward, loss, backward, Adam) of a copy of ``model``.

    The batch is already on ``device``; ``memory_format`` (e.g.
    ``torch.channels_last``) converts the copy and the batch, ``None`` leaves
    the model's own layout; the loss is binomial deviance unless ``loss_fn``.
    """
    model = copy.deepcopy(model).to(device).train()
    x = torch.randn(batch, channels, side, side, device=device)
    if memory_format is not None:
        model = model.to(memory_format=memory_format)
        x = x.contiguous(memory_format=memory_format)
    head = nn.Linear(model.out_features, 128).to(device)
    opt = torch.optim.Adam(list(model.parameters()) + list(head.parameters()), lr=1e-4,
                           fused=fused)
    scaler = torch.amp.GradScaler(device.type, enabled=amp == "fp16")
    loss_fn = BinomialDevianceLoss() if loss_fn is None else loss_fn
    y = torch.arange(batch, device=device) % n_classes
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(amp)

    def step():
        with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
            z = head(model(x))
        loss = loss_fn(F.normalize(z.float(), dim=1), y)
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    for _ in range(warmup):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return batch * steps / (time.perf_counter() - t0)


def bench_amp(args):
    if torch.cuda.is_available():
        device, modes = torch.device("cuda"), ("fp32", "fp16", "bf16")
        model, batch, side, steps = SmallResNet(3), 256, 64, 30
        note = f"CUDA ({torch.cuda.get_device_name()}), ResNet-18-style body, 64x64, batch 256"
    else:
        print("No CUDA device: AMP speed measured on CPU (bf16) for information only; the "
              "GPU goal (AMP >= 1.5x fp32) was not measured.")
        device, modes = torch.device("cpu"), ("fp32", "bf16")
        model, batch, side, steps = SmallResNet(3, widths=(16, 32, 64), blocks_per_stage=1), \
            32, 32, 3 if args.quick else 8
        note = "CPU only (no CUDA device), SmallResNet(16,32,64), 32x32, batch 32"
    rows, data = [], {}
    with thread_limits():
        for mode in modes:
            ips = images_per_second(model, device, None if mode == "fp32" else mode, batch,
                                    side, steps)
            data[mode] = ips
    for mode in modes:
        rows.append([mode, f"{data[mode]:.0f}", f"{data[mode] / data['fp32']:.2f}x"])
    md = f"### Training throughput, fp32 vs AMP ({note})\n\n" + markdown_table(
        ["precision", "images / s", "vs fp32"], rows)
    return md, data


# ------------------------------------------------------------------ (5) memory format
MEMORY_FORMAT_SIZES = ((1, 8), (1, 16), (1, 28), (1, 32), (1, 64), (3, 32))


def bench_memory_format(args):
    repeats, steps = (2, 2) if args.quick else (5, 10)
    rows, data = [], {}
    with thread_limits() as n_threads:
        for channels, side in MEMORY_FORMAT_SIZES:
            nhwc = ConvNet(channels, (side, side)).train()  # skdml's layout: channels-last
            nchw = copy.deepcopy(nhwc).to(memory_format=torch.contiguous_format)
            nchw = nn.Sequential(nchw.blocks, nn.Flatten()).train()  # a plain NCHW network
            nchw.out_features = nhwc.out_features
            times = {"nchw": [], "nhwc": []}
            for _ in range(repeats):  # interleaved: load drift hits both alike
                for name, net in (("nchw", nchw), ("nhwc", nhwc)):
                    ips = images_per_second(net, torch.device("cpu"), None, 64, side, steps,
                                            channels=channels)
                    times[name].append(64 / ips)  # seconds per step
            med = {k: statistics.median(v) for k, v in times.items()}
            data[f"{channels}x{side}x{side}"] = {**times, "median": med}
            rows.append([f"({channels}, {side}, {side})", f"{1e3 * med['nchw']:.1f}",
                         f"{1e3 * med['nhwc']:.1f}", f"{med['nchw'] / med['nhwc']:.2f}x"])
    md = (f"### Memory format: a training step of the default ConvNet, NCHW vs channels-last "
          f"(CPU, {n_threads} torch threads, batch 64, median of {repeats} interleaved repeats "
          f"of {steps} steps)\n\n" + markdown_table(
              ["image (C, H, W)", "NCHW ms / step", "channels-last ms / step",
               "speed-up"], rows))
    fig, ax = plt.subplots(figsize=(6, 3.2))
    labels = [r[0] for r in rows]
    ax.bar(labels, [float(r[3][:-1]) for r in rows], color="tab:blue")
    ax.axhline(1.0, color="grey", lw=1, ls="--")
    ax.set_ylabel("NCHW time / channels-last time")
    ax.set_title(f"ConvNet training step, CPU, {n_threads} threads", fontsize=9)
    ax.tick_params(axis="x", labelsize=8)
    fig.tight_layout()
    return md, data, fig


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small smoke run")
    parser.add_argument("--overhead", action="store_true")
    parser.add_argument("--zero-shot", action="store_true")
    parser.add_argument("--amp-speed", action="store_true")
    parser.add_argument("--memory-format", action="store_true")
    parser.add_argument("--datasets", nargs="+", default=["usps", "coil20"],
                        choices=["att", "coil20", "usps"])
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--batches", type=int, default=40, help="batches per epoch")
    parser.add_argument("--linear-iter", type=int, default=300,
                        help="max_iter of ECAML/JRD (300 = their default)")
    parser.add_argument("--lr", type=float, default=3e-4,
                        help="backbone learning rate of the deep zero-shot models (head: x10)")
    parser.add_argument("--overhead-epochs", type=int, default=9)
    parser.add_argument("--overhead-batches", type=int, default=30)
    parser.add_argument("--threads", type=int, default=None,
                        help="torch intra-op threads (default: torch's)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.quick:
        args.epochs, args.batches, args.linear_iter = 2, 5, 5
        args.overhead_epochs, args.overhead_batches = 2, 5
    run_all = not (args.overhead or args.zero_shot or args.amp_speed or args.memory_format)
    sections, data, figures = [], {}, []
    if run_all or args.overhead:
        md, data["overhead"] = bench_overhead(args)
        sections.append(md)
        print(md, flush=True)
    if run_all or args.zero_shot:
        for name in args.datasets:
            md, data[f"zero_shot_{name}"], fig = bench_zero_shot(args, name)
            sections.append(md)
            figures.append((f"deep_recall_curves_{name}", fig))
            print(md, flush=True)
    if run_all or args.amp_speed:
        md, data["amp"] = bench_amp(args)
        sections.append(md)
        print(md, flush=True)
    if run_all or args.memory_format:
        md, data["memory_format"], fig = bench_memory_format(args)
        sections.append(md)
        figures.append(("deep_memory_format", fig))
        print(md, flush=True)
    name = "bench_deep" if run_all else "bench_deep_" + "_".join(
        k for k in ("overhead", "zero_shot", "amp_speed", "memory_format") if getattr(args, k))
    save(name, "\n\n".join(sections), data, figures, quick=args.quick)


if __name__ == "__main__":
    main()

"""GPU proof of DeepMetricTransformer: precision, input pipeline, round trip.

Sections (all by default; pick with flags):

* ``--step``: images/s of a bare training step (forward, multi-similarity loss,
  backward, Adam) of :class:`~skdml.deep.SmallResNet` (ResNet-18's body) at
  64x64 RGB, batch 256, with the batch already on the GPU: strict fp32 (TF32
  off), PyTorch's default fp32 (TF32 convolutions), bf16 and fp16 autocast, in
  NCHW and channels-last. The ceiling a fit can reach.
* ``--fit``: the same network trained by ``DeepMetricTransformer.fit`` on
  arrays in host memory (class-balanced batches of 32 x 8, the default
  augmentation, weight average and schedule; early stopping off so that only
  training steps are timed), for ``amp=False``, ``"bf16"`` and ``"fp16"``:
  images/s over the epochs after the first, the **loader's share of step
  time** (time the training loop spends inside the DataLoader's ``__next__``
  over the epoch's wall time), the GPU utilisation read by NVML during those
  epochs, and the host-device synchronisations per training step (counted
  with ``torch.cuda.set_sync_debug_mode("warn")`` in one-epoch fits of 3 and
  13 steps: the difference over the 10 extra steps).
* ``--defaults``: ``DeepMetricTransformer(random_state=0)`` on scikit-learn's
  digits 0-4 -> 5-9 (the README's unseen-class case) on the GPU in fp32, bf16
  and fp16, and on the same machine's CPU: fit seconds, unseen-class Recall@1
  and NMI.
* ``--roundtrip``: a model fitted on the GPU is pickled, then unpickled and
  used by ``transform`` in a fresh process that sees no GPU
  (``CUDA_VISIBLE_DEVICES=""``); the embeddings are compared with the GPU's.
  ``--pickle-out DIR`` also writes the pickle, the inputs and the GPU's
  embeddings, to repeat the check on another (CPU-only) machine with
  ``--check-pickle DIR``.

Usage::

    python benchmarks/bench_gpu.py            # on a CUDA machine: results/gpu.{md,json,png}
    python benchmarks/bench_gpu.py --quick    # smoke run (CPU too: the code paths only)
    python benchmarks/bench_gpu.py --check-pickle DIR   # the round trip, on a CPU machine
"""

from __future__ import annotations

import argparse
import collections
import os
import pickle
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks._common import markdown_table, save  # noqa: E402
from benchmarks.bench_deep import images_per_second  # noqa: E402
from skdml import DeepMetricTransformer  # noqa: E402
from skdml._utils import cuda_syncs  # noqa: E402
from skdml.deep import SmallResNet  # noqa: E402
# the one private hook left in the benchmarks: the loader's share of a step needs the
# loader itself timed (a callback sees whole steps only)
from skdml.deep import _trainer  # noqa: E402
from skdml.losses import MultiSimilarityLoss  # noqa: E402
from skdml.metrics import clustering_scores, recall_at_k  # noqa: E402

PRECISIONS = {"fp32 (TF32 off)": (None, False), "fp32 (default: TF32 convs)": (None, True),
              "bf16": ("bf16", True), "fp16": ("fp16", True)}


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


# ------------------------------------------------------------------ (1) the bare step
def step_images_per_second(model, device, amp, *, batch, side, steps, channels_last):
    """Images/s of forward + multi-similarity + backward + Adam on a batch already on device,
    with the fit's optimiser (fused Adam on CUDA)."""
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    return images_per_second(model, device, amp, batch, side, steps, memory_format=fmt,
                             loss_fn=MultiSimilarityLoss(), n_classes=batch // 8, warmup=5,
                             fused=device.type == "cuda")


def bench_step(args, device):
    model = SmallResNet(3) if not args.quick else SmallResNet(3, widths=(8, 16), blocks_per_stage=1)
    batch, side = (256, 64) if not args.quick else (16, 16)
    steps, repeats = (30, 3) if not args.quick else (2, 1)
    times = collections.defaultdict(list)
    for _ in range(repeats):  # interleaved: drift hits every precision alike
        for name, (amp, tf32) in PRECISIONS.items():
            if amp == "fp16" and device.type == "cpu":
                continue
            torch.backends.cudnn.allow_tf32 = tf32
            for channels_last in (False, True):
                ips = step_images_per_second(model, device, amp, batch=batch, side=side,
                                             steps=steps, channels_last=channels_last)
                times[(name, channels_last)].append(ips)
    torch.backends.cudnn.allow_tf32 = True
    med = {k: statistics.median(v) for k, v in times.items()}
    base = med[("fp32 (default: TF32 convs)", False)]
    strict = med[("fp32 (TF32 off)", False)]
    rows = [[name, "channels-last" if cl else "NCHW", f"{ips:.0f}", f"{ips / strict:.2f}x",
             f"{ips / base:.2f}x"] for (name, cl), ips in med.items()]
    md = (f"### Bare training step: SmallResNet (ResNet-18 body), {side}x{side} RGB, batch "
          f"{batch}, multi-similarity loss, Adam (fused on CUDA); batch already on the device "
          f"(median of "
          f"{repeats} interleaved repeats of {steps} steps)\n\n"
          + markdown_table(["precision", "memory format", "images / s", "vs fp32 (TF32 off)",
                            "vs fp32 (default)"], rows))
    return md, {f"{n} | {'channels_last' if cl else 'nchw'}": v for (n, cl), v in times.items()}


# ------------------------------------------------------------------ (2) the fit
def synthetic_images(n_classes, per_class, side, seed=0):
    """Class templates (smooth random images) plus noise: a learnable RGB task."""
    rng = np.random.RandomState(seed)
    low = rng.randn(n_classes, 3, 8, 8).astype(np.float32)
    templates = F.interpolate(torch.from_numpy(low), size=(side, side), mode="bilinear",
                              align_corners=False).numpy()
    X = np.repeat(templates, per_class, axis=0)
    X += 0.8 * rng.randn(*X.shape).astype(np.float32)
    return X, np.repeat(np.arange(n_classes), per_class)


class TimedLoader:
    """A DataLoader whose ``__next__`` time, summed per epoch, is kept in ``seconds``."""

    def __init__(self, loader, seconds):
        self.loader, self.seconds = loader, seconds

    def __len__(self):
        return len(self.loader)

    def __iter__(self):
        iterator, total = iter(self.loader), 0.0
        while True:
            t0 = time.perf_counter()
            try:
                batch = next(iterator)
            except StopIteration:
                self.seconds.append(total)
                return
            total += time.perf_counter() - t0
            yield batch


class GPUSampler(threading.Thread):
    """NVML utilisation (%) of the current GPU, sampled every 50 ms with timestamps."""

    def __init__(self):
        super().__init__(daemon=True)
        self.samples, self.done = [], threading.Event()

    def run(self):
        while not self.done.is_set():
            try:
                self.samples.append((time.perf_counter(), torch.cuda.utilization()))
            except Exception:  # noqa: BLE001 - no NVML: no utilisation column
                return
            time.sleep(0.05)


def timed_fit(est, X, y, device):
    """Fit ``est`` with the loader timed and the GPU sampled; per-epoch figures."""
    loader_seconds, make_loader = [], _trainer.make_loader

    def timed_make_loader(*a, **kw):
        return TimedLoader(make_loader(*a, **kw), loader_seconds)

    sampler = GPUSampler() if device.type == "cuda" else None
    _trainer.make_loader = timed_make_loader
    try:
        if sampler is not None:
            sampler.start()
        t_start = time.perf_counter()
        est.fit(X, y)
    finally:
        _trainer.make_loader = make_loader
        if sampler is not None:
            sampler.done.set()
            sampler.join()
    epochs = [r["seconds"] for r in est.history_]
    after_first = t_start + epochs[0]
    util = [u for t, u in (sampler.samples if sampler else []) if t > after_first]
    return epochs, loader_seconds, (statistics.mean(util) if util else None)


def syncs_per_step(make, X, y, steps=(3, 13)):
    """Host-device synchronisations per training step, and where the per-step ones are.

    Two one-epoch fits of ``steps[0]`` and ``steps[1]`` batches (after a warm-up
    fit) are counted with ``torch.cuda.set_sync_debug_mode("warn")``; their
    difference over the extra steps is what a step costs. The once-per-fit
    reads (epoch means, moving the fitted state to the CPU) cancel out.
    """
    make(3).fit(X, y)  # warm-up: lazy CUDA initialisation synchronises once per process
    counts = []
    for n in steps:
        with cuda_syncs() as where:
            make(n).fit(X, y)
        counts.append(collections.Counter(where))
    extra = counts[1] - counts[0]
    return sum(extra.values()) / (steps[1] - steps[0]), dict(extra)


def bench_fit(args, device):
    side = 64 if not args.quick else 16
    X, y = synthetic_images(64, 48, side) if not args.quick else synthetic_images(8, 8, side)
    P, K = (32, 8) if not args.quick else (4, 2)
    n_batches, epochs = (40, 4) if not args.quick else (3, 2)
    widths = (64, 128, 256, 512) if not args.quick else (8, 16)
    # (row, estimator options): the defaults per precision, then one lever each
    modes = [("fp32", {"amp": False}), ("bf16", {"amp": "bf16"}), ("fp16", {"amp": "fp16"}),
             ("fp16, Adam not fused", {"amp": "fp16", "optimizer": torch.optim.Adam}),
             ("bf16, num_workers=4", {"amp": "bf16", "loader_params": {"num_workers": 4}})]
    if device.type != "cuda":
        modes = modes[:1]

    def make(options, max_iter, batches=n_batches):
        return DeepMetricTransformer(
            backbone=lambda shape: SmallResNet(shape[0], widths=widths),
            n_classes_per_batch=P, n_samples_per_class=K, max_iter=max_iter,
            early_stopping=False, device=device, random_state=0,
            **{**options, "loader_params": {"batches_per_epoch": batches,
                                            **options.get("loader_params", {})}})

    rows, data = [], {}
    for name, options in modes:
        seconds, loader, util = timed_fit(make(options, epochs), X, y, device)
        later = seconds[1:] or seconds
        ips = P * K * n_batches / statistics.median(later)
        share = statistics.median([lo / s for lo, s in zip(loader[1:] or loader, later)])
        per_step, where = syncs_per_step(
            lambda n, o=options: make(o, 1, batches=n), X, y) \
            if device.type == "cuda" else (None, {})
        data[name] = {"epoch_seconds": seconds, "loader_seconds": loader,
                      "images_per_s": ips, "loader_share": share, "gpu_util": util,
                      "syncs_per_step": per_step, "syncs_per_step_at": where}
        rows.append([name, f"{ips:.0f}", f"{ips / data['fp32']['images_per_s']:.2f}x",
                     f"{100 * share:.1f} %", "n/a" if util is None else f"{util:.0f} %",
                     "n/a" if per_step is None else f"{per_step:g}"])
        print(rows[-1], where, flush=True)
    md = (f"### `DeepMetricTransformer.fit` on the GPU: SmallResNet (ResNet-18 body), "
          f"{side}x{side} RGB arrays in host memory, batches of {P}x{K}, {n_batches} batches "
          f"x {epochs} epochs (median of epochs 2-{epochs}), default augmentation, weight "
          "average and learning-rate schedule, the default Adam (fused on CUDA), "
          "`num_workers=0` and pinned memory unless the row says otherwise\n\n"
          + markdown_table(["amp", "images / s", "vs fp32", "loader share of step time",
                            "GPU utilisation (NVML)", "host-device syncs per step"],
                           rows))
    return md, data


# ------------------------------------------------------------------ (3) the defaults
def digits_split():
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    X = (X / 16.0).reshape(-1, 1, 8, 8).astype(np.float32)
    seen = y < 5
    return X[seen], y[seen], X[~seen], y[~seen]


def bench_defaults(args, device):
    Xtr, ytr, Xte, yte = digits_split()
    rows, data = [], {}
    runs = [(device, False)]
    if device.type == "cuda":
        runs += [(device, "bf16"), (device, "fp16"), (torch.device("cpu"), False)]
    for seed in (0, 1):
        for where, amp in runs:
            est = DeepMetricTransformer(random_state=seed, device=where, amp=amp,
                                        max_iter=2 if args.quick else 90)
            t0 = time.perf_counter()
            est.fit(Xtr, ytr)
            fit_s = time.perf_counter() - t0
            Z = est.transform(Xte)
            r1 = recall_at_k(Z, yte, k=1)
            # k-means NMI from one start (the other tables' protocol) and the best of 10
            nmi = [clustering_scores(Z, yte, random_state=0, n_init=n)["nmi"] for n in (1, 10)]
            name = f"{where.type}, {amp or 'fp32'}, seed {seed}"
            data[name] = {"fit_s": fit_s, "n_iter": est.n_iter_, "recall_at_1": r1,
                          "nmi": nmi[0], "nmi_n_init_10": nmi[1]}
            rows.append([name, f"{fit_s:.1f}", est.n_iter_, f"{fit_s / est.n_iter_:.3f}",
                         f"{100 * r1:.2f}", f"{100 * nmi[0]:.2f}", f"{100 * nmi[1]:.2f}"])
            print(rows[-1], flush=True)
    md = ("### `DeepMetricTransformer(random_state=seed)` on the GPU and on the same "
          "machine's CPU: scikit-learn digits 0-4 -> 5-9 (unseen classes)\n\n"
          + markdown_table(["device, amp, seed", "fit s", "epochs", "s / epoch",
                            "unseen R@1 (%)", "NMI (%), k-means 1 start",
                            "NMI (%), best of 10 starts"], rows))
    return md, data


# ------------------------------------------------------------------ (4) the round trip
def bench_roundtrip(args, device, out_dir=None):
    Xtr, ytr, Xte, _ = digits_split()
    est = DeepMetricTransformer(random_state=0, device=device, max_iter=2 if args.quick else 5)
    est.fit(Xtr, ytr)
    Z_gpu = est.transform(Xte)
    out = Path(out_dir) if out_dir else Path(os.environ.get("TMPDIR", "/tmp")) / "skdml_rt"
    out.mkdir(parents=True, exist_ok=True)
    (out / "model.pkl").write_bytes(pickle.dumps(est))
    np.save(out / "X.npy", Xte)
    np.save(out / "Z_fit_device.npy", Z_gpu)
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run([sys.executable, __file__, "--check-pickle", str(out)], env=env,
                          capture_output=True, text=True, check=False)
    print(proc.stdout, proc.stderr, flush=True)
    line = [s for s in proc.stdout.splitlines() if s.startswith("ROUNDTRIP")]
    result = {"fitted_on": str(est.device_), "child": line[-1] if line else proc.stderr[-500:],
              "returncode": proc.returncode}
    md = ("### Fitted on the GPU, unpickled and transformed in a process that sees no GPU\n\n"
          f"Fitted on `{est.device_}`; child process with `CUDA_VISIBLE_DEVICES=\"\"`: "
          f"`{result['child']}` (exit {proc.returncode}).")
    return md, result


def check_pickle(folder):
    """Unpickle ``folder/model.pkl`` here and compare its ``transform`` with the saved one."""
    folder = Path(folder)
    est = pickle.loads((folder / "model.pkl").read_bytes())
    X, Z_ref = np.load(folder / "X.npy"), np.load(folder / "Z_fit_device.npy")
    Z = est.transform(X)
    err = float(np.abs(Z - Z_ref).max())
    print(f"ROUNDTRIP cuda available here: {torch.cuda.is_available()}; device_ after "
          f"unpickling: {est.device_}; module on {next(est.module_.parameters()).device}; "
          f"max |Z_here - Z_fit_device| = {err:.2e} over {Z.shape}")
    return err


def plot(step_data, fit_data):
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.4))
    names = list(step_data)
    axes[0].barh(names, [statistics.median(step_data[n]) for n in names], color="tab:blue")
    axes[0].set_xlabel("images / s (bare step)")
    axes[0].tick_params(axis="y", labelsize=7)
    if fit_data:
        modes = list(fit_data)
        ips = [fit_data[m]["images_per_s"] for m in modes]
        share = [fit_data[m]["images_per_s"] * fit_data[m]["loader_share"] for m in modes]
        axes[1].barh(modes, ips, color="tab:green", label="fit images / s")
        axes[1].barh(modes, share, color="tab:red", label="of which: time in the loader")
        axes[1].set_xlabel("images / s (fit, epochs 2-4)")
        axes[1].tick_params(axis="y", labelsize=7)
        axes[1].legend(fontsize=7, loc="lower right")
    axes[1].set_title("DeepMetricTransformer.fit", fontsize=9)
    fig.tight_layout()
    return fig


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small smoke run")
    for flag in ("step", "fit", "defaults", "roundtrip"):
        parser.add_argument(f"--{flag}", action="store_true")
    parser.add_argument("--pickle-out", default=None, help="folder for the round trip's files")
    parser.add_argument("--check-pickle", default=None, metavar="DIR",
                        help="only unpickle DIR/model.pkl here and compare its transform")
    args = parser.parse_args(argv)
    if args.check_pickle:
        check_pickle(args.check_pickle)
        return
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cpu":
        print("No CUDA device: the code paths run on the CPU; no GPU figure is measured.")
    everything = not (args.step or args.fit or args.defaults or args.roundtrip)
    sections, data = [], {"torch": torch.__version__,
                          "gpu": torch.cuda.get_device_name() if device.type == "cuda" else None}
    if everything or args.step:
        md, data["step"] = bench_step(args, device)
        sections.append(md)
        print(md, flush=True)
    if everything or args.fit:
        md, data["fit"] = bench_fit(args, device)
        sections.append(md)
        print(md, flush=True)
    if everything or args.defaults:
        md, data["defaults"] = bench_defaults(args, device)
        sections.append(md)
        print(md, flush=True)
    if everything or args.roundtrip:
        md, data["roundtrip"] = bench_roundtrip(args, device, args.pickle_out)
        sections.append(md)
        print(md, flush=True)
    figures = [("gpu", plot(data["step"], data.get("fit")))] if "step" in data else []
    header = f"GPU: {data['gpu'] or 'none (CPU smoke run)'}, torch {torch.__version__}\n\n"
    save("gpu", header + "\n\n".join(sections), data, figures, quick=args.quick)


if __name__ == "__main__":
    main()

"""CPU training speed and glibc's memory allocation (Linux): skdml's policy against the rest.

A CPU training step allocates and frees the same large activation buffers (12.8 MB
for the first block of the Omniglot ConvNet at batch 64) at every step. With its
start-up settings, glibc's ``malloc`` hands memory of that size back to the
operating system when it is freed and takes it again on the next step, which costs
system calls and page faults, until the process frees one ``mmap``-ed block and glibc
raises its thresholds by itself. A default ``fit`` on CPU makes that happen before
its first step (``skdml._utils.keep_freed_buffers``); the environment variables
``MALLOC_MMAP_THRESHOLD_`` and ``MALLOC_TRIM_THRESHOLD_`` (or a preloaded jemalloc
or tcmalloc, PyTorch's CPU tuning advice) do the same for a whole process.

Each measurement is a fresh process (the settings are read when a process starts):
three epochs of the default ``DeepMetricTransformer`` fit on Omniglot small1, the
same with ``keep_freed_buffers`` turned off, and three epochs of the plain-loop
anchor of ``bench_omniglot.py`` (bare torch + pytorch-metric-learning, with
augmentation), each with glibc's start-up settings and with the environment
variables, alternating, ``--repeats`` times. A loop's time is the median of its
per-epoch seconds after the first epoch.

Usage::

    python benchmarks/studies/bench_cpu_allocator.py             # 3 repeats, about 5 minutes
    python benchmarks/studies/bench_cpu_allocator.py --repeats 1 --quick
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks._common import markdown_table, save  # noqa: E402

#: The environment variables: keep buffers of up to 32 MB (glibc's upper limit for the
#: mmap threshold on 64-bit systems) in the heap, and never trim it between steps.
TUNED = {"MALLOC_MMAP_THRESHOLD_": str(32 * 1024 * 1024),
         "MALLOC_TRIM_THRESHOLD_": str(4 * 1024 ** 3)}
LOOPS = ("deep defaults (fit)", "deep defaults, keep_freed_buffers off", "plain-loop anchor")


def worker(loop, epochs):
    """One measurement in this process: per-epoch seconds of ``loop``, as JSON."""
    import torch

    from benchmarks.bench_omniglot import Anchor, omniglot
    from skdml import DeepMetricTransformer

    X, y = omniglot("small1", 28)
    if loop == LOOPS[1]:  # skdml's documented switch, read when the fit starts
        os.environ["SKDML_KEEP_FREED_BUFFERS"] = "0"
    if loop in LOOPS[:2]:
        est = DeepMetricTransformer(random_state=0, max_iter=epochs).fit(X, y)
        seconds = [record["seconds"] for record in est.history_]
    else:
        anchor = Anchor(X, y, X[:64], y[:64], seed=0, augment=True)  # tiny untimed eval
        for _ in range(epochs):
            anchor.epoch()
        seconds = anchor.seconds
    print(json.dumps({"seconds": seconds, "threads": torch.get_num_threads()}))


def measure(loop, epochs, tuned):
    env = dict(os.environ)
    for key in TUNED:
        env.pop(key, None)
    if tuned:
        env.update(TUNED)
    out = subprocess.run([sys.executable, __file__, "--worker", loop, "--epochs", str(epochs)],
                         env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="smoke run: 2 epochs")
    parser.add_argument("--worker", choices=LOOPS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    epochs = 2 if args.quick else args.epochs
    if args.worker:
        return worker(args.worker, epochs)
    if not sys.platform.startswith("linux"):
        raise SystemExit("The settings measured here are glibc's (Linux).")
    times = {(loop, tuned): [] for loop in LOOPS for tuned in (False, True)}
    threads = None
    for repeat in range(args.repeats):
        for tuned in (False, True):
            for loop in LOOPS:
                result = measure(loop, epochs, tuned)
                threads = result["threads"]
                times[loop, tuned].append(float(np.median(result["seconds"][1:])))
                print(repeat, loop, "env set" if tuned else "glibc as started",
                      f"{times[loop, tuned][-1]:.3f} s / epoch", flush=True)
    med = {key: float(np.median(v)) for key, v in times.items()}
    rows = [[loop, f"{med[loop, False]:.3f}", f"{med[loop, True]:.3f}",
             f"{med[loop, False] / med[loop, True]:.2f}x"] for loop in LOOPS]
    for loop in LOOPS[:2]:
        rows.append([f"{loop} / anchor", f"{med[loop, False] / med[LOOPS[2], False]:.2f}",
                     f"{med[loop, True] / med[LOOPS[2], True]:.2f}", ""])
    env_line = " ".join(f"{k}={v}" for k, v in TUNED.items())
    command = ("python benchmarks/studies/bench_cpu_allocator.py"
               + (" --quick" if args.quick else ""))
    md = ("### CPU epoch time with glibc's start-up settings and with "
          f"`{env_line}`\n\n"
          f"Command: `{command}`. Omniglot small1 28x28, {threads} torch threads, each "
          f"cell the median over {args.repeats} fresh processes of the median epoch "
          f"after the first of {epochs}; the processes alternate.\n\n"
          + markdown_table(["loop", "s / epoch, glibc as started", "s / epoch, env set",
                            "speed-up"], rows))
    fig, ax = plt.subplots(figsize=(7, 3.4))
    x = np.arange(len(LOOPS))
    for offset, tuned, label in ((-0.2, False, "glibc as started"), (0.2, True, "env set")):
        ax.bar(x + offset, [med[loop, tuned] for loop in LOOPS], 0.4, label=label)
    ax.set(xticks=x, xticklabels=[loop.replace(", ", ",\n") for loop in LOOPS],
           ylabel="seconds per epoch", title="Omniglot small1 epoch on CPU")
    ax.legend(fontsize=8)
    fig.tight_layout()
    def key(k):
        return f"{k[0]} | {'env set' if k[1] else 'glibc as started'}"

    save("cpu_allocator", md,
         {"command": command, "env": TUNED, "times": {key(k): v for k, v in times.items()},
          "medians": {key(k): v for k, v in med.items()}},
         figures=[("cpu_allocator", fig)])


if __name__ == "__main__":
    main()

"""Can a deep fit keep two threads on a busy machine? OpenMP's wait policy, measured.

On a busy 2-core machine the thread policy runs a deep fit on one thread
(``skdml/_utils/_threads.py``, rule 4): torch's CPU operators are OpenMP
parallel regions, and libgomp's threads spin at each region's end waiting for
the other, which other processes have descheduled. The fair share of issue 37
(``bench_contention.py``) counts the fit's threads, so a fit that drops to one
thread is judged against a two-thread share. This study asks whether two threads
that *sleep* instead of spinning would earn that share. Each variant runs the
demo's deep fit on the 8x8 digit images (and on the 64-pixel vectors), each in a
fresh process, idle and beside ``--busy`` spinning processes, in the same run:

- one thread (``SKDML_NUM_THREADS=1``, what the policy gives on a busy machine);
- two threads, libgomp's default wait (spin about 300,000 rounds, then sleep; stated
  as ``OMP_WAIT_POLICY=ACTIVE GOMP_SPINCOUNT=300000``, since ``import skdml`` now asks
  for passive waits when the policy is unset);
- two threads, ``OMP_WAIT_POLICY=PASSIVE`` (sleep at once);
- two threads, ``GOMP_SPINCOUNT=10000`` (a short spin, then sleep).

The environment variables are read when torch loads libgomp, so each run sets
them before its process starts. This study chose skdml's default, passive waits
(``skdml/_openmp.py``). The table gives wall and CPU time idle and
loaded, and each loaded wall time against the one-thread run's.

Usage::

    python benchmarks/studies/bench_wait_policy.py           # results/wait_policy.{md,json,png}
    python benchmarks/studies/bench_wait_policy.py --quick   # 1 epoch
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _common import markdown_table, save  # noqa: E402
from bench_contention import SPIN, run_fit  # noqa: E402

from skdml._utils._threads import machine_cpus  # noqa: E402

CORES = machine_cpus()

VARIANTS = {
    "1 thread": (1, {}),
    # libgomp's default spin count, stated: unset, import skdml would ask for passive waits
    "2 threads, spin (libgomp's default)": (2, {"OMP_WAIT_POLICY": "ACTIVE",
                                                "GOMP_SPINCOUNT": "300000"}),
    "2 threads, OMP_WAIT_POLICY=PASSIVE": (2, {"OMP_WAIT_POLICY": "PASSIVE"}),
    "2 threads, GOMP_SPINCOUNT=10000": (2, {"GOMP_SPINCOUNT": "10000"}),
}
#: The plot's labels of the variants.
SHORT = ["1 thread", "2, spin", "2, passive", "2, spin 10k"]
#: The two-thread fit whose idle time sets the fair share of two threads.
TWO = "2 threads, spin (libgomp's default)"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--busy", type=int, default=4, help="spinning processes when loaded")
    parser.add_argument("--epochs", type=int, default=5, help="deep epochs per fit")
    parser.add_argument("--fits", nargs="+", default=["deep_images", "deep_vectors"],
                        choices=["deep_images", "deep_vectors"])
    parser.add_argument("--quick", action="store_true", help="1 epoch")
    args = parser.parse_args(argv)
    epochs = 1 if args.quick else args.epochs

    def run_all():
        return {(fit, name): run_fit(fit, epochs, threads, env)
                for fit in args.fits for name, (threads, env) in VARIANTS.items()}

    idle = run_all()
    spinners = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(args.busy)]
    try:
        time.sleep(2.0)
        loaded = run_all()
    finally:
        for proc in spinners:
            proc.kill()
        for proc in spinners:
            proc.wait()

    rows, data = [], {"busy": args.busy, "epochs": epochs, "runs": []}
    for fit in args.fits:
        one = loaded[(fit, "1 thread")]["wall"]
        fair = _fair_share(idle[(fit, TWO)]["wall"], args.busy)
        for name in VARIANTS:
            a, b = idle[(fit, name)], loaded[(fit, name)]
            rows.append([fit, name, f"{a['wall']:.1f}", f"{a['cpu']:.1f}", f"{b['wall']:.1f}",
                         f"{b['cpu']:.1f}", f"{b['cpu'] / a['cpu']:.2f}", f"{b['wall'] / one:.2f}",
                         f"{b['wall'] / fair:.2f}"])
            data["runs"].append({"fit": fit, "variant": name, "idle": a, "loaded": b})
    table = markdown_table(["fit", "variant", "idle wall (s)", "idle CPU (s)", "loaded wall (s)",
                            "loaded CPU (s)", "CPU loaded/idle", "loaded wall / 1 thread's",
                            "loaded wall / two threads' fair share"], rows)
    markdown = (f"# OpenMP's wait policy on a busy machine ({args.busy} spinning processes, "
                f"{CORES} cores)\n\nThe demo's deep fit on digits 0-4, {epochs} epochs, each run "
                "in a fresh process, idle then loaded, all in this run. Two threads' fair share "
                "is issue 37's formula for the two-thread fit: its idle wall x (busy + 2) / "
                "cores.\n\n" + table + "\n\n![wait policy](wait_policy.png)\n")
    save("wait_policy", markdown, data,
         [("wait_policy", _plot(args.fits, idle, loaded, args.busy))],
         threads="per variant (SKDML_NUM_THREADS)")
    return 0


def _fair_share(idle_wall, busy, threads=2):
    """Issue 37's fair share: the idle wall time x (busy processes + threads) / cores."""
    return idle_wall * (busy + threads) / CORES


def _plot(fits, idle, loaded, busy):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, axes = plt.subplots(1, len(fits), figsize=(5 * len(fits), 3.6), squeeze=False)
    names = list(VARIANTS)
    x = np.arange(len(names))
    for ax, fit in zip(axes[0], fits):
        ax.bar(x - 0.2, [idle[(fit, n)]["wall"] for n in names], 0.4, label="idle")
        ax.bar(x + 0.2, [loaded[(fit, n)]["wall"] for n in names], 0.4,
               label=f"{busy} busy processes")
        ax.axhline(_fair_share(idle[(fit, TWO)]["wall"], busy), color="0.3", ls="--", lw=1,
                   label="two threads' fair share")
        ax.set_xticks(x, SHORT, fontsize=8)
        ax.set_ylabel("wall time (s)")
        ax.set_title(fit)
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


if __name__ == "__main__":
    sys.exit(main())

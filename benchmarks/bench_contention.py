"""The demo's fits on an idle and on a busy machine: CPU time and wall time, same run.

A fit on a machine shared with other jobs should cost about the CPU it costs on
an idle one, and take about its fair share of the wall time. For each fit of the
demo (``python -m skdml demo``: the deep learner on the 8x8 digit images and on
the 64-pixel vectors, ECAML, SUML; digits 0-4, the demo's settings), and for one
score (``map_at_r`` on 30,000 blobs, d=16, 10 classes: the neighbour search, whose
threads share no barrier), this script measures, each in a fresh process,

1. *idle*: with nothing started by the benchmark (other jobs of the machine are
   whatever they are: the load average is in the table);
2. *loaded*: with ``--busy`` processes (default 4) that spin on the CPU, started
   by the benchmark before the loaded runs and stopped after them.

and reports wall and CPU time (the fit's own process: all its threads), the
threads the thread policy granted (``skdml._utils.choose_n_threads``, the
largest value of the fit), the mean number of runnable threads of the machine
during the fit, and the two ratios of the goal (issue 37):

- ``CPU loaded / idle`` at most 1.3;
- ``wall loaded / fair share`` at most 1.2, where the fair share is
  ``idle wall x (busy + idle threads) / cores``: the wall time if the fit got
  its threads' share of the cores among the busy processes. On a machine that
  is not idle to begin with (other jobs, perhaps niced), the table also gives
  the fair share measured: the idle wall times the *stretch* (wall time per CPU
  second of one spinning thread in the fit's process, just before and after the
  fit) loaded over idle.

``--threads N`` runs every fit with ``SKDML_NUM_THREADS=N`` instead of the
policy (e.g. ``--threads 2``, the count the policy replaced on a busy 2-core
machine). All idle runs come first, then all loaded runs: the 1-minute load
average lags, and an idle run just after the busy processes stop would still
see them.

Usage::

    python benchmarks/bench_contention.py                  # the published table
    python benchmarks/bench_contention.py --quick          # 2 deep epochs, a smoke run
    python benchmarks/bench_contention.py --busy 2 --fits ecaml suml
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from _common import ROOT, markdown_table, save

FITS = ("deep_images", "deep_vectors", "ecaml", "suml", "map_at_r")

CHILD = r"""
import json, sys, time
import numpy as np
sys.path.insert(0, sys.argv[1])
from skdml._utils import _threads
granted = []
_choose = _threads.choose_n_threads
def spy(flops=None, **kwargs):
    n = _choose(flops, **kwargs)
    granted.append(n)
    return n
_threads.choose_n_threads = spy
from skdml.__main__ import DEEP_EPOCHS, _digits, _split
fit, epochs = sys.argv[2], int(sys.argv[3])
X, y = _digits()
train, _ = _split(y, "first-half", 0)
X, y = X[train], y[train]
if fit == "deep_images" or fit == "deep_vectors":
    from skdml import DeepMetricTransformer
    est = DeepMetricTransformer(max_iter=epochs, random_state=0)
    if fit == "deep_images":
        X = X.reshape(-1, 8, 8)
elif fit == "ecaml":
    from skdml import ECAML
    est = ECAML(n_components=16, random_state=0)
elif fit == "suml":
    from skdml import SUML
    est = SUML(n_components=16, random_state=0)
else:  # a score: MAP@R of 30,000 blobs (d=16, 10 classes), the neighbour search's threads
    from skdml.metrics import _neighbors, map_at_r
    _neighbors.choose_n_threads = spy  # the engine's own reference to the policy
    rng = np.random.RandomState(0)
    labels = rng.randint(0, 10, 30000)
    blobs = (rng.randn(30000, 16) + rng.randn(10, 16)[labels]).astype(np.float32)
    class Score:
        def fit(self, X, y):
            self.score_ = map_at_r(blobs, labels)
    est = Score()
import threading
load = __import__("os").getloadavg()[0]
runnable, done = [], threading.Event()
def sample():  # runnable threads of the machine (ours included), every 0.2 s
    while not done.wait(0.2):
        with open("/proc/loadavg") as fh:
            runnable.append(int(fh.read().split()[3].split("/")[0]))
sampler = threading.Thread(target=sample, daemon=True)
sampler.start()
def reference(seconds=0.5):  # wall per CPU second of one spinning thread, here and now
    w0, p0 = time.perf_counter(), time.process_time()
    while time.process_time() - p0 < seconds:
        pass
    return (time.perf_counter() - w0) / (time.process_time() - p0)
before = reference()
t0, c0 = time.perf_counter(), time.process_time()
est.fit(X, y)
wall, cpu = time.perf_counter() - t0, time.process_time() - c0
done.set()
stretch = (before + reference()) / 2
print(json.dumps({"wall": wall, "cpu": cpu, "threads": max(granted, default=0),
                  "load": load, "runnable": float(np.mean(runnable)) if runnable else None,
                  "stretch": stretch,
                  "n_iter": getattr(est, "n_iter_", None)}))
"""

#: A busy process that ends when its parent does (even a parent killed with SIGKILL, whose
#: ``finally`` never runs): it is then adopted by another process.
SPIN = "import os\nparent = os.getppid()\nwhile os.getppid() == parent:\n    pass\n"


def run_fit(fit, epochs, threads, extra_env=None):
    """Run ``fit`` in a fresh process (``extra_env``: more environment variables)."""
    env = dict(os.environ)
    env.pop("SKDML_NUM_THREADS", None)
    if threads is None:  # the thread policy, uncapped: a runner's OMP_NUM_THREADS=1 (run.py
        # passes its own on) pinned every fit to one thread under a table saying "the policy"
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
            env.pop(var, None)
    else:
        env["SKDML_NUM_THREADS"] = str(threads)
    env.update(extra_env or {})
    proc = subprocess.run([sys.executable, "-c", CHILD, str(ROOT), fit, str(epochs)],
                          capture_output=True, text=True, env=env, cwd=ROOT)
    if proc.returncode:
        raise RuntimeError(f"{fit} failed:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--busy", type=int, default=4, help="spinning processes when loaded")
    parser.add_argument("--fits", nargs="+", choices=FITS, default=list(FITS))
    parser.add_argument("--epochs", type=int, default=None,
                        help="deep epochs (default: the demo's DEEP_EPOCHS, 2 with --quick)")
    parser.add_argument("--threads", type=int, default=None,
                        help="SKDML_NUM_THREADS for every fit instead of the policy")
    parser.add_argument("--quick", action="store_true", help="2 deep epochs")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from skdml.__main__ import DEEP_EPOCHS
    from skdml._utils._threads import machine_cpus

    epochs = args.epochs or (2 if args.quick else DEEP_EPOCHS)
    cores = machine_cpus()
    idle = {fit: run_fit(fit, epochs, args.threads) for fit in args.fits}
    spinners = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(args.busy)]
    try:
        time.sleep(2.0)
        loaded = {fit: run_fit(fit, epochs, args.threads) for fit in args.fits}
    finally:
        for proc in spinners:
            proc.kill()
        for proc in spinners:
            proc.wait()
    rows, data = [], {"cores": cores, "busy": args.busy, "epochs": epochs, "fits": {}}
    for fit in args.fits:
        a, b = idle[fit], loaded[fit]
        fair = a["wall"] * (args.busy + max(a["threads"], 1)) / cores
        # what one spinning thread got beside each run (wall per CPU second, before and after
        # the fit): the fit's fair share when other jobs share the machine too
        fair_measured = a["wall"] * b["stretch"] / a["stretch"]
        cpu_ratio, wall_ratio = b["cpu"] / a["cpu"], b["wall"] / fair
        ok = "yes" if cpu_ratio <= 1.3 and min(wall_ratio, b["wall"] / fair_measured) <= 1.2 \
            else "**no**"
        rows.append([fit, a["threads"], f"{a['runnable']:.1f}", f"{a['stretch']:.2f}",
                     f"{a['wall']:.1f}", f"{a['cpu']:.1f}", b["threads"], f"{b['runnable']:.1f}",
                     f"{b['stretch']:.2f}",
                     f"{b['wall']:.1f}", f"{b['cpu']:.1f}", f"{cpu_ratio:.2f}",
                     f"{fair:.1f}", f"{wall_ratio:.2f}", f"{fair_measured:.1f}",
                     f"{b['wall'] / fair_measured:.2f}", ok])
        data["fits"][fit] = {"idle": a, "loaded": b, "fair_share_wall": fair,
                             "fair_share_wall_measured": fair_measured,
                             "cpu_ratio": cpu_ratio, "wall_ratio": wall_ratio}
    table = markdown_table(
        ["fit", "idle: threads", "runnable", "stretch", "wall (s)", "CPU (s)",
         "loaded: threads", "runnable", "stretch", "wall (s)", "CPU (s)", "CPU loaded/idle", "fair share (s)",
         "wall/fair", "fair share, measured (s)", "wall/fair, measured", "goal met"], rows)
    policy = (f"SKDML_NUM_THREADS={args.threads}" if args.threads is not None
              else "the thread policy (skdml._utils.choose_n_threads)")
    markdown = (
        f"# The demo's fits, idle and with {args.busy} busy processes ({cores} cores)\n\n"
        f"Digits 0-4 (the demo's training half), deep fits {epochs} epochs, threads by "
        f"{policy}; each fit in a fresh process. Goal: CPU loaded/idle <= 1.3, wall <= 1.2 x "
        "the fair share: idle wall x (busy + idle threads) / cores (the issue's formula, "
        "for an idle baseline) or, measured, idle wall x stretch loaded / stretch idle, where "
        "'stretch' is the wall time per CPU second of one spinning thread run in the fit's "
        "process just before and after the fit: the share of a core one thread got, with "
        "other jobs of the machine (and their nice levels) as they were. 'runnable': the mean "
        "count of runnable threads of the machine during the fit (/proc/loadavg, every "
        "0.2 s).\n\n" + table)
    suffix = "" if args.threads is None else f"_threads{args.threads}"
    if args.epochs and args.epochs != DEEP_EPOCHS:
        suffix += f"_epochs{args.epochs}"
    if set(args.fits) != set(FITS):
        suffix += "_" + "_".join(args.fits)
    save(f"contention_busy{args.busy}{suffix}", markdown, data, threads=policy)
    return 0


if __name__ == "__main__":
    sys.exit(main())

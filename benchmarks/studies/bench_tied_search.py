"""The exact neighbour search on tied data: does a row of equal values cost more than an ordinary one?

Ties are broken by index, a fully defined order, so a tied row should cost about what an
ordinary row costs. Before the ninth audit it did not: an exact frame never certified a
list whose values tie past its end, so each such row was searched again with a list 4x
longer up to a full sort, each time through ``np.argpartition``, which is 7-9x slower on
rows of equal values. This times ``nearest_neighbors(X, 10)`` and
``recall_at_k(X, y, k=[1, 10])`` (CPU seconds, one thread, each call in a fresh
process) on ordinary data and on tied data of the same size, for this checkout and,
with ``--checkout``, another one, and the ratio of each to the ordinary data's time.

Inputs (n x 8, 40 classes): ``ordinary`` (standard normal), ``all equal`` (every row
``1``: an exact frame), ``half zero`` (every other row of the ordinary data set to 0:
ties among the zero rows in a float32 frame, still searched again until the list
holds the tied run), ``three values`` (integers 0..2: an exact frame with many ties).

Usage::

    python benchmarks/studies/bench_tied_search.py --checkout /tmp/old   # ~1 min
    python benchmarks/studies/bench_tied_search.py --n 2000 --quick

Writes ``results/tied_search.{md,json,png}`` (``--name``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

from _common import markdown_table, save  # noqa: E402

CASES = ("ordinary", "all equal", "half zero", "three values")
CALLS = ("nearest_neighbors(X, 10)", "recall_at_k(X, y, k=[1, 10])")

_CHILD = r"""
import json, sys, time
import numpy as np
from skdml.metrics import nearest_neighbors, recall_at_k
case, call, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
rng = np.random.RandomState(0)
X = rng.randn(n, 8)
y = rng.randint(0, 40, n)
if case == "all equal":
    X = np.ones((n, 8))
elif case == "half zero":
    X[::2] = 0
elif case == "three values":
    X = rng.randint(0, 3, size=(n, 8)).astype(float)
start = time.process_time()
if call.startswith("nearest"):
    nearest_neighbors(X, 10)
else:
    recall_at_k(X, y, k=[1, 10])
print(json.dumps(time.process_time() - start))
"""


def _time(tree, case, call, n):
    env = dict(os.environ, SKDML_NUM_THREADS="1", OMP_NUM_THREADS="1",
               PYTHONPATH=str(tree) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-c", _CHILD, case, call, str(n)], env=env,
                         cwd="/", check=True, capture_output=True, text=True).stdout
    return float(json.loads(out.strip().splitlines()[-1]))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=4000)
    parser.add_argument("--checkout", type=Path, default=None,
                        help="another checkout's root folder, timed the same way (before)")
    parser.add_argument("--name", default="tied_search")
    parser.add_argument("--quick", action="store_true", help="n = 1,000")
    args = parser.parse_args(argv)
    n = 1000 if args.quick else args.n
    trees = [("this checkout", ROOT)] + ([("--checkout", args.checkout.resolve())]
                                         if args.checkout else [])
    data, rows = {}, []
    for label, tree in trees:
        for call in CALLS:
            times = {case: _time(tree, case, call, n) for case in CASES}
            data.setdefault(label, {})[call] = times
            for case in CASES:
                rows.append([label, call, case, f"{times[case]:.2f}",
                             f"{times[case] / times['ordinary']:.1f}x"])
    header = ["tree", "call", "data", "CPU s", "/ ordinary"]
    markdown = (f"## The exact neighbour search on tied data, n = {n:,}, d = 8, one thread\n\n"
                "Each call in a fresh process; CPU seconds and the ratio to the ordinary "
                "data's time in the same tree (`--checkout`: the tree before).\n\n"
                + markdown_table(header, rows) + "\n\nPlot: `tied_search.png`.\n")
    figures = []
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, len(CALLS), figsize=(10, 3.6), sharey=True)
        width = 0.8 / len(trees)
        for ax, call in zip(axes, CALLS):
            for i, (label, _) in enumerate(trees):
                ax.bar([j + i * width for j in range(len(CASES))],
                       [data[label][call][c] for c in CASES], width, label=label)
            ax.set_xticks([j + width * (len(trees) - 1) / 2 for j in range(len(CASES))],
                          CASES, fontsize=8)
            ax.set_yscale("log")
            ax.set_title(call, fontsize=9)
        axes[0].set_ylabel("CPU seconds (log)")
        axes[0].legend(fontsize=8)
        fig.suptitle(f"Exact search on tied data, n = {n:,}: "
                     f"python benchmarks/studies/bench_tied_search.py, one thread", fontsize=9)
        fig.tight_layout()
        figures.append(("tied_search", fig))
    except ImportError:  # the table alone
        pass
    save(args.name, markdown, {"n": n, "times": data}, figures, quick=args.quick,
         threads="one thread (SKDML_NUM_THREADS=1, OMP_NUM_THREADS=1), each call in a fresh "
                 "process")


if __name__ == "__main__":
    main()

"""Fit times of the classic learners' fits of milliseconds, two source trees side by side.

Each tree's fits run in their own process (``PYTHONPATH=<tree>``), one thread, the median
of ``--fits`` fits; the trees alternate ``--rounds`` times and the minimum of the medians
is kept (the machine is shared). The protocol's first split (``compare_linear.prepare``,
PCA-100 for AT&T and COIL-20).

Usage::

    git worktree add /tmp/old 28f9c19
    python benchmarks/studies/ab_fit_times.py --trees /tmp/old . --datasets att coil20

Prints one line per tree, data set and learner (milliseconds of CPU).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

WORKER = r"""
import sys, time, numpy as np
from threadpoolctl import threadpool_limits
sys.path.insert(0, sys.argv[1] + "/benchmarks")
import compare_linear as cl
from skdml.linear import LFDA, RCA_Supervised
X, y, _, _ = cl.prepare(sys.argv[2], 1, 100)[0]
chunks = int(min(100, sum(c // 3 for c in np.bincount(np.unique(y, return_inverse=True)[1]))))
make = {"rca": lambda: RCA_Supervised(n_chunks=chunks, chunk_size=3, random_state=0),
        "lfda": lambda: LFDA(k=7)}[sys.argv[3]]
with threadpool_limits(1):
    for _ in range(5):
        make().fit(X, y)
    times = []
    for _ in range(int(sys.argv[4])):
        start = time.process_time()
        make().fit(X, y)
        times.append(time.process_time() - start)
print(1000 * float(np.median(times)))
"""


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trees", nargs="+", required=True, help="source trees to compare")
    parser.add_argument("--datasets", nargs="+", default=["att", "coil20"],
                        choices=["att", "coil20", "usps"])
    parser.add_argument("--learners", nargs="+", default=["rca", "lfda"], choices=["rca", "lfda"])
    parser.add_argument("--fits", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
           "SKDML_NUM_THREADS": "1"}
    best = {}
    for _ in range(args.rounds):
        for tree in args.trees:
            tree = str(Path(tree).resolve())
            for name in args.datasets:
                for learner in args.learners:
                    out = subprocess.run(
                        [sys.executable, "-c", WORKER, tree, name, learner, str(args.fits)],
                        env={**env, "PYTHONPATH": tree}, capture_output=True, text=True,
                        check=True)
                    key = (tree, name, learner)
                    best[key] = min(best.get(key, float("inf")), float(out.stdout.split()[-1]))
    for (tree, name, learner), ms in sorted(best.items()):
        print(f"{tree}  {name:7s} {learner:5s} {ms:.2f} ms")


if __name__ == "__main__":
    main()

"""The cost of opening a thread section: threadpoolctl's scan of the loaded libraries.

Every skdml fit and score runs inside ``skdml._utils.thread_limits``, which limits the
BLAS pools through threadpoolctl. Building a ``ThreadpoolController`` scans every loaded
library (1-4 ms here), and a section needed the pools up to three times: a small default
JRD fit, whose hold-out scoring opens a section each epoch, spent a quarter of its time
there. The scan is now reused for ``_POOLS_TTL`` seconds. This times, in one process and
alternating the two settings, a default ``JRD()`` fit (300 x 20, its docstring's data) and
200 calls of ``nearest_neighbors`` on 200 x 8, with the scan reused (the default) and
redone at every use (``_POOLS_TTL = 0``, the code before), CPU seconds on one thread.

Usage::

    python benchmarks/studies/bench_thread_sections.py           # ~1 min
    python benchmarks/studies/bench_thread_sections.py --quick   # one round

Writes ``results/thread_sections.{md,json}`` (``--name``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("SKDML_NUM_THREADS", "1")
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

from _common import markdown_table, save  # noqa: E402


def _jrd_fit():
    import numpy as np
    from skdml import JRD
    rng = np.random.RandomState(0)
    y = rng.randint(0, 4, 300)
    signal = 3.0 * np.array([[0, 0], [0, 1], [1, 0], [1, 1]])[y] + 0.5 * rng.randn(300, 2)
    X = np.hstack([signal, 4.0 * rng.randn(300, 18)])
    JRD(random_state=0).fit(X[:200], y[:200])


def _searches():
    import numpy as np
    from skdml.metrics import nearest_neighbors
    X = np.random.RandomState(0).randn(200, 8)
    for _ in range(200):
        nearest_neighbors(X, 5)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--name", default="thread_sections")
    parser.add_argument("--quick", action="store_true", help="one round")
    args = parser.parse_args(argv)
    from skdml._utils import _threads

    rounds = 1 if args.quick else args.rounds
    settings = {"scan reused (default)": _threads._POOLS_TTL, "scan at every use (before)": 0.0}
    work = {"JRD() fit, 200 x 20": _jrd_fit, "200 x nearest_neighbors(200 x 8, 5)": _searches}
    _searches()  # imports and first-call costs outside the timings
    times = {w: {s: [] for s in settings} for w in work}
    for _ in range(rounds):
        for w, fn in work.items():
            for s, ttl in settings.items():
                _threads._POOLS_TTL = ttl
                _threads._POOLS["at"] = -float("inf")
                start = time.process_time()
                fn()
                times[w][s].append(time.process_time() - start)
    rows = []
    for w in work:
        best = {s: min(v) for s, v in times[w].items()}
        new, old = best["scan reused (default)"], best["scan at every use (before)"]
        rows.append([w, f"{new:.2f}", f"{old:.2f}", f"{old / new:.2f}x"])
    header = ["work", "CPU s, scan reused", "CPU s, scan at every use", "before / now"]
    markdown = ("## Thread sections: threadpoolctl's library scan reused or redone\n\n"
                f"Best of {rounds} alternating round(s), one process, one thread.\n\n"
                + markdown_table(header, rows) + "\n")
    save(args.name, markdown, {"rounds": rounds, "times": times}, quick=args.quick,
         threads="one thread (SKDML_NUM_THREADS=1)")


if __name__ == "__main__":
    main()

"""When the neighbour search's float64 frame pays: the rule behind ``_neighbors._wide_pays``.

The exact search ranks in a float32 frame and settles float32's near-ties with a
float64 brute force (``skdml/metrics/_exact.py``). Deep lists among many references
are dense in value and leave many such ties; a float64 frame (``Frame(wide=True)``)
leaves almost none, for twice the cost of the matrix product and a wider selection.
For each problem this times both frames (forced, one thread, same process, same
data), counts the candidates float32 sends to the float64 pass per query and per
reference (what the probe measures on 32 queries), and records which frame the
default search chose. The plot puts the time ratio against that count, with the
threshold ``_WIDE_RATIO``.

Problems: ``nearest_neighbors`` and ``map_at_r`` on float32 blobs (class means plus
unit noise), n = 20,000 at d = 16 to 512, and issue 37's MAP@R at n = 55,000, d = 16,
10 classes.

Usage::

    python benchmarks/studies/bench_frames.py            # results/frames.{md,json,png}
    python benchmarks/studies/bench_frames.py --quick    # n = 4,000
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ["SKDML_NUM_THREADS"] = "1"  # before skdml is imported: one thread throughout

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import numpy as np  # noqa: E402

from skdml.metrics import _exact, _neighbors, map_at_r, nearest_neighbors  # noqa: E402

#: (kind, n, d, k or number of classes)
PROBLEMS = [
    ("nearest_neighbors", 20_000, 16, 64),
    ("nearest_neighbors", 20_000, 16, 256),
    ("nearest_neighbors", 20_000, 128, 64),
    ("nearest_neighbors", 20_000, 128, 256),
    ("nearest_neighbors", 20_000, 512, 100),
    ("map_at_r", 20_000, 16, 10),
    ("map_at_r", 20_000, 128, 10),
    ("map_at_r", 20_000, 128, 100),
    ("map_at_r", 20_000, 512, 20),
    ("map_at_r", 55_000, 16, 10),
]


class _Spy:
    """Counts the float64 pass's candidates and records the frames built."""

    def __init__(self):
        self.repaired, self.frames = 0, []
        self._distances, self._init = _exact.Frame.exact_distances, _exact.Frame.__init__
        spy = self

        def counting(frame, qi, rj):
            spy.repaired += qi.size
            return spy._distances(frame, qi, rj)

        def recording(frame, *args, **kwargs):
            spy._init(frame, *args, **kwargs)
            spy.frames.append(frame.wide)

        _exact.Frame.exact_distances, _exact.Frame.__init__ = counting, recording


def _data(kind, n, d, k, seed=0):
    rng = np.random.RandomState(seed)
    n_classes = 20 if kind == "nearest_neighbors" else k
    y = rng.randint(0, n_classes, n)
    return (rng.randn(n, d) + rng.randn(n_classes, d)[y]).astype(np.float32), y


def _timed(run, spy, forced):
    original = _neighbors._wide_pays
    if forced is not None:
        _neighbors._wide_pays = lambda *args: forced
    spy.repaired, spy.frames = 0, []
    try:
        start = time.process_time()
        result = run()
        return time.process_time() - start, result
    finally:
        _neighbors._wide_pays = original


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="n = 4,000 smoke run")
    args = parser.parse_args(argv)

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from _common import markdown_table, save

    spy = _Spy()
    rows, records = [], []
    for kind, n, d, k in PROBLEMS:
        n = 4_000 if args.quick else n
        X, y = _data(kind, n, d, k)
        run = ((lambda: nearest_neighbors(X, k)) if kind == "nearest_neighbors"
               else (lambda: map_at_r(X, y)))
        cpu32, out32 = _timed(run, spy, False)
        per_pair = spy.repaired / (n * n)
        cpu64, out64 = _timed(run, spy, True)
        cpu_auto, out_auto = _timed(run, spy, None)
        chose = "float64" if spy.frames[-1] else "float32"
        same = all(np.array_equal(out32, other) for other in (out64, out_auto))
        size = f"k={k}" if kind == "nearest_neighbors" else f"{k} classes"
        record = {"kind": kind, "n": n, "d": d, "size": size, "float64_pass_per_pair": per_pair,
                  "cpu_float32_s": cpu32, "cpu_float64_s": cpu64, "cpu_default_s": cpu_auto,
                  "default_frame": chose, "same_result": same}
        records.append(record)
        rows.append([kind, n, d, size, f"{per_pair:.5f}", f"{cpu32:.2f}", f"{cpu64:.2f}",
                     f"{cpu64 / cpu32:.2f}", chose, f"{cpu_auto:.2f}",
                     "yes" if same else "NO"])
        print(" | ".join(map(str, rows[-1])), flush=True)
    header = ["search", "n", "d", "list", "float64 pass / (query x reference), float32 frame",
              "float32 frame CPU (s)", "float64 frame CPU (s)", "float64 / float32",
              "default chose", "default CPU (s)", "same result"]
    fig, ax = plt.subplots(figsize=(6, 4))
    for kind, marker in (("nearest_neighbors", "o"), ("map_at_r", "s")):
        pts = [r for r in records if r["kind"] == kind]
        ax.scatter([max(r["float64_pass_per_pair"], 1e-7) for r in pts],
                   [r["cpu_float64_s"] / r["cpu_float32_s"] for r in pts], marker=marker,
                   label=kind)
    ax.axvline(_neighbors._WIDE_RATIO, color="0.4", ls="--", label="_WIDE_RATIO")
    ax.axhline(1.0, color="0.7", lw=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("candidates float32 sends to the float64 pass, per query and reference")
    ax.set_ylabel("CPU time: float64 frame / float32 frame")
    ax.set_title("The float64 frame pays right of the line")
    ax.legend(fontsize=8)
    markdown = (
        "## The neighbour search's two frames, one thread\n\nEach problem on float32 blobs "
        "(seed 0), both frames forced, then the default (which probes 32 queries first). "
        "'same result': both frames and the default return identical neighbours / scores "
        "(both are exact). The default takes the float64 frame when the probe counts more "
        f"than `_WIDE_RATIO` = {_neighbors._WIDE_RATIO} float64-pass candidates per query and "
        "per reference.\n\n" + markdown_table(header, rows) + "\n\n![ratio](frames.png)\n")
    save("frames", markdown, {"results": records}, [("frames", fig)], quick=args.quick,
         threads="1 (SKDML_NUM_THREADS=1)")


if __name__ == "__main__":
    main()

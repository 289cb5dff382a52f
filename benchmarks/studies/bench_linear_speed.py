"""Fit time of the linear learners' defaults on 10000 x 4096, against an older checkout.

Each fit runs in its own process (``PYTHONPATH`` picks the checkout), on the same
input: ``X = RandomState(0).rand(10000, 4096).astype(float32)`` and 40 classes
(``y = RandomState(1).randint(0, 40, 10000)``), with every parameter at its default
but ``random_state=0``; ``--n-components 64`` adds the same fits at 64 components.
A fit still running after ``--timeout`` seconds is stopped and reported as such.
The machine may be shared, so the table gives the load average next to each fit
and the ratio old / new of fits run back to back.

Usage::

    python benchmarks/studies/bench_linear_speed.py --baseline /tmp/orig [--n-components None 64]
    python benchmarks/studies/bench_linear_speed.py --quick     # 2000 x 1024, own results files
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks._common import ROOT, is_quick, markdown_table, save  # noqa: E402

LEARNERS = ("SUML", "ECAML", "JRD")

WORKER = r"""
import json, sys, time, warnings
import numpy as np
n, d, name, k = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
X = np.random.RandomState(0).rand(n, d).astype(np.float32)
y = np.random.RandomState(1).randint(0, 40, n)
import skdml
kw = {} if k == "None" else {"n_components": int(k)}
est = getattr(skdml, name)(random_state=0, **kw)
start = time.perf_counter()
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    est.fit(X, y)
seconds = time.perf_counter() - start
print(json.dumps({"seconds": seconds, "n_components": int(est.components_.shape[0]),
                  "n_iter": int(getattr(est, "n_iter_", -1)), "skdml": skdml.__file__}))
"""


def time_fit(checkout, name, n_components, shape, timeout, threads):
    env = dict(os.environ, PYTHONPATH=str(checkout), OMP_NUM_THREADS=str(threads),
               OPENBLAS_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    load = os.getloadavg()[0]
    try:
        proc = subprocess.run([sys.executable, "-c", WORKER, str(shape[0]), str(shape[1]), name,
                               str(n_components)], capture_output=True, text=True, env=env,
                              timeout=timeout, cwd="/")
    except subprocess.TimeoutExpired:
        return {"seconds": None, "timed_out": True, "load": load}
    if proc.returncode:
        return {"seconds": None, "error": proc.stderr.strip().splitlines()[-1], "load": load}
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    return dict(out, load=load, timed_out=False)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default="/tmp/orig", help="older checkout to compare")
    parser.add_argument("--n-components", nargs="+", default=["None"],
                        help="n_components values ('None': the default)")
    parser.add_argument("--learners", nargs="+", default=list(LEARNERS))
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    shape = (2000, 1024) if is_quick() else (10000, 4096)
    rows, data = [], []
    for k in args.n_components:
        for name in args.learners:
            new = time_fit(ROOT, name, k, shape, args.timeout, args.threads)
            old = time_fit(args.baseline, name, k, shape, args.timeout, args.threads)
            ratio = (old["seconds"] / new["seconds"]) if old["seconds"] and new["seconds"] \
                else None

            def cell(r):
                if r.get("timed_out"):
                    return f"> {args.timeout:.0f} (stopped)"
                return "error" if r["seconds"] is None else f"{r['seconds']:.1f}"
            rows.append([name, k, new.get("n_components", "?"), cell(old), cell(new),
                         f"{ratio:.1f}x" if ratio else (
                             f"> {args.timeout / new['seconds']:.1f}x"
                             if old.get("timed_out") and new["seconds"] else "-"),
                         f"{old['load']:.1f} / {new['load']:.1f}"])
            data.append({"learner": name, "n_components_param": k, "old": old, "new": new})
            print(rows[-1], flush=True)
    header = ["learner", "n_components", "resolved (new)", "old s", "new s", "old / new",
              "load avg (old / new)"]
    markdown = (f"Default fits on {shape[0]} x {shape[1]} float32, 40 classes, "
                f"`random_state=0`, {args.threads} threads; old = `{args.baseline}`.\n\n"
                + markdown_table(header, rows))
    save("linear_speed", markdown, {"shape": shape, "baseline": args.baseline,
                                    "threads": args.threads, "rows": data},
         threads=f"{args.threads} (OMP/OpenBLAS/MKL_NUM_THREADS of each fit's process)")


if __name__ == "__main__":
    main()

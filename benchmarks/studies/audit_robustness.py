"""Run the bad-input robustness catalogue against a checkout and tabulate the outcome classes.

Usage::

    python benchmarks/studies/audit_robustness.py                     # this checkout
    python benchmarks/studies/audit_robustness.py --checkout ../old --name before

Each case of ``tests/_robustness_cases.py`` is classified as ok / standard /
clear / silent-wrong / obscure / slow (see that module). Writes
``benchmarks/results/robustness_<name>.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
from _common import results_dir, save  # noqa: E402
CLASSES = ["ok", "standard", "clear", "silent-wrong", "obscure", "slow", "skipped"]

WORKER = r"""
import json, sys
sys.path.insert(0, sys.argv[1]); sys.path.insert(1, sys.argv[2])
import skdml
import _robustness_cases
from _robustness_cases import CASES, classify
slow = getattr(_robustness_cases, "SLOW_CASES", []) if sys.argv[3] == "1" else []
out = []
for case in CASES + slow:
    outcome, detail, seconds = classify(case)
    out.append(dict(name=case.name, group=case.group, outcome=outcome, detail=detail,
                    seconds=round(seconds, 2)))
    print(f"{outcome:>12}  {seconds:6.1f} s  {case.name}  {detail[:90]}", file=sys.stderr)
print(json.dumps(dict(skdml=skdml.__file__, cases=out)))
"""


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkout", default=str(ROOT), help="repository root to audit")
    parser.add_argument("--name", default="after", help="results file suffix")
    parser.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"),
                        help="only tabulate two saved runs side by side (names of results)")
    parser.add_argument("--no-slow", action="store_true",
                        help="leave out SLOW_CASES (the full-size default fits, a minute each)")
    args = parser.parse_args(argv)
    if args.compare:
        return compare(*args.compare)
    env = dict(os.environ, PYTHONPATH=args.checkout)
    proc = subprocess.run([sys.executable, "-c", WORKER, args.checkout, str(ROOT / "tests"),
                           "0" if args.no_slow else "1"],
                          capture_output=True, text=True, env=env, cwd=args.checkout)
    sys.stderr.write(proc.stderr)
    if proc.returncode:
        raise SystemExit(proc.returncode)
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    counts = Counter(c["outcome"] for c in result["cases"])
    commit = subprocess.run(["git", "-C", args.checkout, "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    result.update(commit=commit, counts=dict(counts), machine=platform.processor() or
                  platform.machine(), cpus=os.cpu_count(),
                  command="python benchmarks/studies/audit_robustness.py "
                  + " ".join(argv or sys.argv[1:]))
    lines = [f"## Robustness audit of {commit} ({len(result['cases'])} cases)", "",
             f"Command: `{result['command']}`; machine {result['machine']}, "
             f"{result['cpus']} CPUs.", "",
             "| case | group | outcome | seconds | detail |", "|---|---|---|---|---|"]
    lines += [f"| {c['name']} | {c['group']} | {c['outcome']} | {c['seconds']} | "
              f"{c['detail'].replace('|', '/')[:100]} |" for c in result["cases"]]
    lines += ["", "| " + " | ".join(CLASSES) + " |", "|" + "---|" * len(CLASSES),
              "| " + " | ".join(str(counts.get(k, 0)) for k in CLASSES) + " |"]
    save(f"robustness_{args.name}", "\n".join(lines), result,
         threads="one process running every case, under the SKDML_NUM_THREADS of this run "
         f"({os.environ.get('SKDML_NUM_THREADS', 'unset: the thread policy')})")


def _latest_run(folder, name):
    """The newest run saved as ``name`` (a rerun's files carry its time stamp: see _common)."""
    runs = [path for path in (folder / f"robustness_{name}.json",
                              *folder.glob(f"robustness_{name}.2*.json")) if path.exists()]
    if not runs:
        raise SystemExit(f"no saved run named {name!r} in {folder}")
    return max(runs, key=lambda path: path.stat().st_mtime)


def compare(before, after):
    """Print and save the class counts of two saved runs over the same cases."""
    paths = [_latest_run(results_dir(), name) for name in (before, after)]
    print("comparing " + " and ".join(map(str, paths)))
    runs = [json.loads(path.read_text()) for path in paths]
    names = [[c["name"] for c in run["cases"]] for run in runs]
    if names[0] != names[1]:
        raise SystemExit("the two runs did not use the same cases; re-run both")
    lines = [f"## Robustness audit: {runs[0]['commit']} ({before}) against "
             f"{runs[1]['commit']} ({after}), {len(names[0])} cases", "",
             "| outcome | " + " | ".join([before, after]) + " |", "|---|---|---|"]
    lines += [f"| {k} | " + " | ".join(str(r["counts"].get(k, 0)) for r in runs) + " |"
              for k in CLASSES]
    lines += ["", "| case | " + before + " | " + after + " |", "|---|---|---|"]
    lines += [f"| {a['name']} | {a['outcome']} | {b['outcome']} |"
              for a, b in zip(runs[0]["cases"], runs[1]["cases"])]
    save("robustness_compare", "\n".join(lines), {"before": before, "after": after},
         threads="those of the two runs")


if __name__ == "__main__":
    main()

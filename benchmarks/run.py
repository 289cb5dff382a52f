"""Run the regression suite: the published protocols, each in its own process.

Every entry names a script of ``benchmarks/``, the commands of its published runs
with the result files they write, and the arguments of its smoke run. Only
``--quick`` is cheap (a minute or a few per entry on two cores); the published runs
take minutes to an hour each and write the files the documentation cites.

Usage::

    python benchmarks/run.py --list                   # the entries
    python benchmarks/run.py --quick                  # every entry's smoke run
    python benchmarks/run.py --quick metrics deep     # some entries' smoke runs
    python benchmarks/run.py metrics                  # the published run(s) of an entry
    python benchmarks/run.py --all                    # every published run (hours)
    python benchmarks/run.py --dry-run --quick        # print the commands, run nothing

Each command runs in a fresh process from the repository root, one at a time; a
failure does not stop the others. At the end a table of the commands, their exit
status and seconds is printed and saved by ``_common.save`` as
``results/suite_summary.{md,json}`` (``suite_summary_quick.*`` for ``--quick``),
with the runner's command, the machine and the thread settings it passed on.
The exit status is 1 if any command failed.

The studies behind particular defaults are in ``benchmarks/studies/`` and are not
run from here (``benchmarks/README.md`` lists them).
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import OVERWRITE, ROOT, markdown_table, save  # noqa: E402

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Run:
    """One command of an entry: its arguments and the result files it writes."""

    args: tuple[str, ...]
    writes: str


@dataclass(frozen=True)
class Entry:
    """A script of the suite: the published runs and the smoke run."""

    name: str
    script: str
    about: str
    published: tuple[Run, ...]
    quick: Run
    needs: str = ""
    notes: tuple[str, ...] = field(default_factory=tuple)


ENTRIES = (
    Entry("metrics", "bench_metrics.py",
          "exact Recall@K / MAP@R at N=60,000, d=512: peak memory and time against "
          "pytorch-metric-learning's AccuracyCalculator",
          (Run((), "metrics_n60000_d512.{md,json,png}"),
           Run(("--scaling",), "metrics_scaling.{md,json} (the published table adds "
               "--checkout <the previous commit's checkout>)"),
           Run(("--scaling", "--scaling-n", "60000", "--name", "metrics_scaling_2threads"),
               "metrics_scaling_2threads.{md,json} (published with SKDML_NUM_THREADS=2 and "
               "--checkout <the previous commit's checkout>)")),
          Run(("--quick",), "metrics_n5000_d512_quick.*")),
    Entry("contention", "bench_contention.py",
          "the demo's fits (deep on images and vectors, ECAML, SUML) and MAP@R on 30,000 "
          "blobs idle and with 4 busy processes, CPU and wall time in the same run, against "
          "the fair share",
          (Run((), "contention_busy4.{md,json}"),
           Run(("--fits", "map_at_r", "--threads", "1"),
               "contention_busy4_threads1_map_at_r.{md,json} (the score on one thread, the "
               "count the load rule gave it before)")),
          Run(("--quick",), "contention_busy4_quick.*")),
    Entry("deep", "bench_deep.py",
          "DeepMetricTransformer overhead against a bare torch loop, fp32 vs AMP images/s; "
          "CPU zero-shot (USPS, COIL-20); NCHW vs channels-last step",
          (Run(("--overhead", "--amp-speed", "--threads", "1"),
               "bench_deep_overhead_amp_speed.{md,json}"),
           Run(("--zero-shot", "--threads", "1", "--epochs", "18", "--batches", "40"),
               "bench_deep_zero_shot.{md,json}, deep_recall_curves_{usps,coil20}.png"),
           Run(("--memory-format",), "bench_deep_memory_format.{md,json}, deep_memory_format.png")),
          Run(("--quick",), "bench_deep_quick.*, deep_*_quick.png")),
    Entry("gpu", "bench_gpu.py",
          "on a CUDA GPU: training step per precision and layout, fit throughput with the "
          "loader's share, syncs per step, defaults on digits, CPU round trip",
          (Run((), "gpu.{md,json,png}"),),
          Run(("--quick",), "gpu_quick.* (CPU or GPU: the code paths only)"),
          needs="cuda",
          notes=("then, on a machine without a GPU: `python benchmarks/bench_gpu.py "
                 "--check-pickle $TMPDIR/skdml_rt` (the folder the published run wrote)",
                 "gpu_on_device.* measured a reverted experiment; no entry re-runs it")),
    Entry("scale", "bench_scale.py",
          "GridSearchCV with n_jobs=1, loky and Dask (identical cv_results_); exact Recall@K "
          "at N=100,000, d=128 against faiss-cpu",
          (Run(("--part", "grid"), "scale_grid.{md,json,png}"),
           Run(("--part", "eval", "--n", "100000", "--d", "128", "--threads", "2"),
               "scale_eval_n100000_d128.{md,json}")),
          Run(("--quick",), "scale_grid_quick.*, scale_eval_n5000_d128_quick.*")),
    Entry("suml", "bench_suml.py",
          "SUML paper Table 1 (10 stratified 70/30 splits, k-NN), SUML vs NCA fit time, "
          "convergence / sensitivity / probability-form plots",
          (Run(("--only", "table", "--n-splits", "10", "--nca-splits", "2"),
               "suml_table1.{md,json}"),
           Run(("--only", "timing"), "suml_timing.{md,json}"),
           Run(("--only", "ablation"),
               "suml_ablation.{md,json}, suml_{convergence,sensitivity,probability}.png")),
          Run(("--quick",), "suml_*_quick.*")),
    Entry("linear", "bench_linear.py",
          "Table 1 for ECAML and JRD against Euclidean, PCA and NCA; zero-shot protocol with "
          "the regulariser ablation; solvers; regulariser-weight and training-curve plots",
          (Run(("--sections", "table1", "--datasets", "usps", "--n-splits", "10",
                "--name", "linear_usps", "--verbose"), "linear_usps.{md,json}"),
           Run(("--sections", "table1", "--datasets", "att", "coil20", "--n-splits", "10",
                "--name", "linear_table1_att_coil20", "--verbose"),
               "linear_table1_att_coil20.{md,json}"),
           Run(("--sections", "zeroshot", "plots", "solvers", "--datasets", "att", "coil20",
                "--plot-dataset", "att", "--name", "linear_att_coil20"),
               "linear_att_coil20.{md,json} (older defaults, see reports/linear.md)"),
           Run(("--sections", "zeroshot", "--datasets", "usps", "--name", "linear_usps_zeroshot"),
               "linear_usps_zeroshot.{md,json} (older defaults, see reports/linear.md)"),
           Run(("--sections", "plots", "--datasets", "att", "--plot-dataset", "att",
                "--name", "linear_plots_att"),
               "linear_plots_att.{md,json}, linear_weights.png, linear_curves.png")),
          Run(("--quick",), "linear_quick.*")),
    Entry("rivals", "compare_linear.py",
          "ECAML, JRD, SUML against NCA and metric-learn's LMNN and ITML (their own "
          "scikit-learn 1.7 environment) on AT&T, COIL-20, USPS",
          (Run(("--methods", "pca", "nca", "lmnn", "itml", "--itml-timeout", "150",
                "--name", "linear_comparison_rivals"), "linear_comparison_rivals.{md,json}"),
           Run(("--methods", "ecaml", "jrd", "suml",
                "--reuse", "benchmarks/results/linear_comparison_rivals.json"),
               "linear_comparison.{md,json,png}")),
          Run(("--quick",), "linear_comparison_quick.*"),
          needs="metric-learn",
          notes=("LMNN and ITML run in benchmarks/.venv-metric-learn (git-ignored), which "
                 "the script creates with pip on first use (network needed once)",)),
    Entry("closed-set", "compare_linear.py",
          "the users' first workflow: ECAML, JRD and SUML defaults in a k-NN pipeline against "
          "NCA, LMNN and ITML run in the same run (AT&T, COIL-20, USPS; k=1/10; fit times "
          "as ratios to LMNN and ITML; gaps to the best rival)",
          (Run(("--itml-timeout", "150", "--name", "linear_closed_set"),
               "linear_closed_set.{md,json,png}, linear_closed_set_gaps.png"),
           Run(("--datasets", "att", "--n-splits", "10", "--name",
                "linear_closed_set_att_10splits"),
               "linear_closed_set_att_10splits.{md,json,png}, "
               "linear_closed_set_att_10splits_gaps.png (AT&T over 10 splits)"),
           Run(("--datasets", "usps", "--n-splits", "10", "--itml-timeout", "150", "--name",
                "linear_closed_set_usps_10splits"),
               "linear_closed_set_usps_10splits.{md,json,png}, "
               "linear_closed_set_usps_10splits_gaps.png (USPS over 10 splits)")),
          Run(("--quick", "--name", "linear_closed_set_quick"), "linear_closed_set_quick.*"),
          needs="metric-learn"),
    Entry("classic", "bench_classic.py",
          "the classic catalogue (issue 39): LFDA, RCA, ITML, LMNN, MMC, SDML, LSML, MLKR "
          "against metric-learn 0.7.0's in the same run (closed-set protocol; k=1/10, fit CPU "
          "seconds and their ratio)",
          (Run(("--datasets", "att", "coil20", "--timeout", "300",
                "--name", "classic_comparison_att_coil20"),
               "classic_comparison_att_coil20.{md,json,png}"),
           Run(("--datasets", "att", "coil20", "--timeout", "300", "--learners", "lmnn", "scml",
                "--name", "classic_comparison_att_coil20_lmnn_scml"),
               "classic_comparison_att_coil20_lmnn_scml.{md,json,png} (LMNN and SCML re-run "
               "after their speed-ups)"),
           Run(("--datasets", "usps", "--timeout", "600", "--name", "classic_comparison_usps"),
               "classic_comparison_usps.{md,json,png}"),
           Run(("--datasets", "att", "--learners", "mlkr", "itml", "--n-splits", "10",
                "--timeout", "300", "--name", "classic_att_10splits_mlkr_itml"),
               "classic_att_10splits_mlkr_itml.{md,json,png} (the one-image gaps over 10 "
               "splits)"),
           Run(("--datasets", "coil20", "--learners", "lfda", "--n-splits", "10",
                "--name", "classic_coil20_10splits_lfda"),
               "classic_coil20_10splits_lfda.{md,json,png}"),
           Run(("--datasets", "usps", "--learners", "mmc", "--n-splits", "1", "--timeout",
                "2400", "--name", "classic_usps_mmc_long"),
               "classic_usps_mmc_long.{md,json,png} (metric-learn's MMC run to its end)")),
          Run(("--quick",), "classic_comparison_quick.*"),
          needs="metric-learn"),
    Entry("stress", "bench_stress.py",
          "unseen-class Recall@1 and MAP@R on stress sets nobody tuned on (faces under strong "
          "synthetic lighting, few training classes, noisy vectors) and the usual ones: raw, "
          "PCA, ECAML, JRD, SUML and the deep defaults over two seeds, with fit times",
          (Run((), "stress.{md,json,png}"),
           Run(("--data", "att-light", "--methods", "deep", "--threads", "2",
                "--name", "stress_two_threads"), "stress_two_threads.{md,json,png}"),
           Run(("--data", "att-light", "att-light-b", "--methods", "raw", "PCA", "ECAML", "JRD",
                "deep", "--seeds", "0", "1", "2", "3", "4", "5", "--seeded", "ECAML", "JRD",
                "deep", "--name", "stress_seeds_att_light"),
               "stress_seeds_att_light.{md,json,png} (every learner over six seeds)")),
          Run(("--quick",), "stress_quick.*")),
    Entry("ecaml-grid", "bench_ecaml_grid.py",
          "ECAML GridSearchCV over its documented grid (loss x early stopping) on the "
          "closed-set bar protocol (3 stratified 70/30 splits, 64 components, k=1/10), "
          "against NCA, LMNN and ITML (reused)",
          (Run((), "ecaml_grid.{md,json,png}"),
           Run(("--folds", "3", "--name", "ecaml_grid_folds3"), "ecaml_grid_folds3.*"),
           Run(("--choose", "mean", "--name", "ecaml_grid_mean"), "ecaml_grid_mean.*"),
           Run(("--datasets", "usps", "--name", "ecaml_grid_usps"), "ecaml_grid_usps.*")),
          Run(("--quick",), "ecaml_grid_quick.*")),
    Entry("omniglot", "bench_omniglot.py",
          "Omniglot small1 -> the 106 unseen small2 characters: raw, PCA, ECAML, JRD, deep "
          "defaults and tuned against the plain torch + pytorch-metric-learning anchor",
          (Run(("--full-defaults",), "omniglot_full_defaults.{md,json}, "
               "omniglot_full_defaults_curves.png"),
           Run(("--full-defaults", "--quick"), "omniglot_full_defaults_quick.{md,json}, "
               "omniglot_full_defaults_curves_quick.png (the published 3-epoch table)"),
           Run(("--full-defaults", "--seed", "1"), "omniglot_full_defaults_seed1.*"),
           Run(("--epochs", "30"), "omniglot.{md,json}, omniglot_curves.png"),
           Run(("--epochs", "10"), "omniglot_10ep.{md,json}, omniglot_10ep_curves.png"),
           Run(("--overhead",), "omniglot_overhead.{md,json}")),
          Run(("--quick",), "omniglot_quick.*, omniglot_curves_quick.png")),
    Entry("few-shot", "bench_omniglot_few_shot.py",
          "Omniglot few-shot episodes (5/20-way, 1/5-shot, 600 episodes) on the 106 unseen "
          "characters: raw pixels, PCA-128, the deep defaults",
          (Run((), "omniglot_few_shot.{md,json}"),),
          Run(("--quick",), "omniglot_few_shot_quick.*")),
)
BY_NAME = {entry.name: entry for entry in ENTRIES}


def command(entry, run):
    """The command line of one run, relative to the repository root."""
    return [sys.executable, str((HERE / entry.script).relative_to(ROOT)), *run.args]


def shown(cmd):
    return "python " + shlex.join(cmd[1:])


def cuda_available():
    try:
        import torch
    except ImportError:  # pragma: no cover
        return False
    return torch.cuda.is_available()


def listing():
    rows = []
    for entry in ENTRIES:
        published = "<br>".join(f"`{shlex.join(run.args) or '(no arguments)'}` -> {run.writes}"
                                for run in entry.published)
        rows.append([f"`{entry.name}`", f"`{entry.script}`", entry.about, published,
                     f"`{shlex.join(entry.quick.args)}` -> {entry.quick.writes}",
                     entry.needs or ""])
    return markdown_table(["name", "script", "protocol", "published runs -> results/",
                           "quick run", "needs"], rows)


def _stop_on_signal(signum, frame):
    raise SystemExit(128 + signum)  # unwinds through run_command's ``finally``


def run_command(cmd, timeout):
    """Run ``cmd`` from the repository root; its exit status, or None when ``timeout`` ran out.

    In a session of its own, so that a timeout (or Ctrl-C) stops the whole process tree: the
    command's workers and the spinning processes of ``bench_contention.py`` too, not only
    the command (whose later siblings would be timed on a loaded machine).
    """
    proc = subprocess.Popen(cmd, cwd=ROOT, start_new_session=True)
    try:  # SIGTERM and SIGHUP to the runner unwind through here too (main's handlers)
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        return None
    finally:  # also after a normal end: what the command started may outlive it
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        proc.wait()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     epilog="entries: " + ", ".join(BY_NAME))
    parser.add_argument("names", nargs="*", metavar="NAME",
                        help="entries to run (default with --quick or --all: every entry)")
    parser.add_argument("--list", action="store_true", help="print the entries and exit")
    parser.add_argument("--quick", action="store_true", help="each entry's smoke run")
    parser.add_argument("--all", action="store_true",
                        help="every entry's published runs (hours; without --quick)")
    parser.add_argument("--dry-run", action="store_true", help="print the commands only")
    parser.add_argument("--overwrite", action="store_true",
                        help="let the runs replace the files of the same name (published "
                             "results included); without it a run whose files exist writes "
                             "them with its time stamp beside them")
    parser.add_argument("--timeout", type=float, default=None,
                        help="seconds after which one command is stopped (default: none)")
    args = parser.parse_args(argv)
    if args.list:
        print(listing())
        return 0
    unknown = [name for name in args.names if name not in BY_NAME]
    if unknown:
        parser.error(f"unknown entries {unknown}; choose from {list(BY_NAME)}")
    if not args.names and not (args.quick or args.all):
        parser.error("name entries, or pass --quick (every smoke run) or --all "
                     "(every published run)")
    entries = [BY_NAME[name] for name in args.names] if args.names else list(ENTRIES)
    plan = [(entry, run) for entry in entries
            for run in ((entry.quick,) if args.quick else entry.published)]
    missing = sorted({entry.script for entry, _ in plan if not (HERE / entry.script).exists()})
    if args.dry_run:
        for entry, run in plan:
            print(shown(command(entry, run)) + ("   # script missing" if entry.script in missing
                                                  else ""))
        return 0

    if args.overwrite:  # the commands (and the summary) may replace what is on disk
        os.environ[OVERWRITE] = "1"
    if os.environ.get("SKDML_RESULTS"):  # the commands run from the repository root
        os.environ["SKDML_RESULTS"] = str(Path(os.environ["SKDML_RESULTS"]).resolve())
    # a runner stopped by SIGTERM or a hang-up (``timeout``, a closed terminal) stops the
    # command it runs too: the command has a session of its own, which those do not reach
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _stop_on_signal)
    rows, records, failed = [], [], False
    for entry, run in plan:
        cmd = command(entry, run)
        record = {"entry": entry.name, "command": shown(cmd), "writes": run.writes}
        if entry.script in missing:
            status, seconds = "missing", 0.0
        elif entry.needs == "cuda" and not args.quick and not cuda_available():
            status, seconds = "skipped (no CUDA)", 0.0
        else:
            print(f"\n=== {entry.name}: {record['command']}", flush=True)
            t0 = time.perf_counter()
            rc = run_command(cmd, args.timeout)
            status = (f"fail (stopped after {args.timeout:g} s)" if rc is None
                      else "pass" if rc == 0 else f"fail (exit {rc})")
            seconds = time.perf_counter() - t0
        failed |= not (status == "pass" or status.startswith("skipped"))
        record.update(status=status, seconds=round(seconds, 1))
        records.append(record)
        rows.append([entry.name, f"`{record['command']}`", status, f"{seconds:.1f}"])

    env = ", ".join(f"{k}={os.environ[k]}" for k in
                    ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                     "SKDML_NUM_THREADS", "CUDA_VISIBLE_DEVICES") if k in os.environ)
    threads = ("each command's own (its table states them); the runner passes on "
               + (env or "no thread variables"))
    kind = "smoke runs (--quick)" if args.quick else "published runs"
    md = (f"### Regression suite: {kind}, one process per command, one at a time\n\n"
          + markdown_table(["entry", "command", "status", "seconds"], rows)
          + f"\n\n{sum(r['status'] == 'pass' for r in records)} of {len(records)} passed.")
    save("suite_summary", md, {"runs": records}, quick=args.quick, threads=threads)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

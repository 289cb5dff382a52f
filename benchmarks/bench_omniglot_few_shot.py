"""Omniglot few-shot episodes on unseen characters: raw pixels, PCA and the deep defaults.

The class-disjoint protocol of ``load_omniglot("train")`` / ``("test")`` (train on
small1, test on the 106 small2 characters of the three alphabets small1 lacks), scored
with :func:`skdml.metrics.few_shot_accuracy`: 5-way and 20-way, 1-shot and 5-shot,
nearest-prototype classification of 15 queries a class, 600 episodes each, mean accuracy
and 95 % interval. Published figures (e.g. Prototypical Networks, 20-way 1-shot 96.0)
use the Vinyals split (1200 training characters, 423 test characters, rotations as
classes) at 28x28: this protocol trains on 136 characters only, so its numbers are not
directly comparable; they compare the rows of one table.

Usage::

    python benchmarks/bench_omniglot_few_shot.py            # the deep defaults (~2 min)
    python benchmarks/bench_omniglot_few_shot.py --quick    # 5 epochs, 100 episodes
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
from sklearn.decomposition import PCA  # noqa: E402

from benchmarks._common import SHARED_DATA, markdown_table, save  # noqa: E402
from skdml import DeepMetricTransformer  # noqa: E402
from skdml.datasets import load_omniglot  # noqa: E402
from skdml.metrics import few_shot_accuracy  # noqa: E402

SETTINGS = [(5, 1), (5, 5), (20, 1), (20, 5)]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="5 epochs, 100 episodes")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    episodes = 100 if args.quick else 600
    side = (-1, 1, 28, 28)
    train, test = (load_omniglot(s, data_home=SHARED_DATA, download_if_missing=False)
                   for s in ("train", "test"))
    X_tr, y_tr = train.data.reshape(side).astype(np.float32), train.target
    X_te, y_te = test.data.reshape(side).astype(np.float32), test.target
    params = dict(random_state=args.seed) | (dict(max_iter=5) if args.quick else {})
    t0 = time.perf_counter()
    deep = DeepMetricTransformer(**params).fit(X_tr, y_tr)
    fit_seconds = time.perf_counter() - t0
    flat_tr, flat_te = X_tr.reshape(len(X_tr), -1), X_te.reshape(len(X_te), -1)
    embeddings = {
        "raw pixels (784-d)": flat_te,
        "PCA-128 (fitted on train)": PCA(128, random_state=0).fit(flat_tr).transform(flat_te),
        f"deep defaults ({deep.n_iter_} epochs, {fit_seconds:.0f} s)": deep.transform(X_te),
    }
    rows, data = [], []
    for name, Z in embeddings.items():
        cells = [name]
        for n_way, n_shot in SETTINGS:
            acc, ci = few_shot_accuracy(Z, y_te, n_way=n_way, n_shot=n_shot, n_queries=15,
                                        n_episodes=episodes, random_state=args.seed)
            cells.append(f"{100 * acc:.2f} ± {100 * ci:.2f}")
            data.append(dict(embedding=name, n_way=n_way, n_shot=n_shot, accuracy=acc,
                             ci95=ci, n_episodes=episodes))
        rows.append(cells)
    header = ["embedding"] + [f"{w}-way {s}-shot" for w, s in SETTINGS]
    markdown = (
        "### Omniglot few-shot episodes on the 106 unseen small2 characters\n\n"
        f"Nearest prototype, 15 queries a class, {episodes} episodes a setting, seed "
        f"{args.seed}; accuracy in % with its 95 % interval. Trained on small1 only "
        "(136 characters): not the Vinyals split of published figures.\n\n"
        + markdown_table(header, rows))
    save("omniglot_few_shot", markdown, dict(rows=data, fit_seconds=fit_seconds),
         quick=args.quick)


if __name__ == "__main__":
    main()

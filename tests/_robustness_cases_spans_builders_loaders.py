"""The seventh audit's cases: data spanning the float64 range in the scorers, SUML batches
on another scale, constant inputs to the classic learners, extreme F-beta weights, huge
constraint requests, builders that return one module, hold-outs of single samples, missing
labels, and swapped or duplicated data files.

See tests/_robustness_cases.py for Case, check and classify. Every case runs against the
old code too (``benchmarks/studies/audit_robustness.py --checkout``); a case whose old
answer was a refusal of a valid input, or an obscure error, raises ``Wrong``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import zipfile

import numpy as np

from _robustness_cases import Case, Missing, Wrong, check, quiet

SHARED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared",
                      "datasets")


def nearest_neighbours_across_the_float64_range():
    from skdml.metrics import nearest_neighbors

    X = np.array([[-1e308], [-0.9e308], [-0.8e308], [1e308]])  # finite; max - min is not
    got = nearest_neighbors(X, 1).ravel().tolist()
    check(got == [1, 0, 1, 2], f"neighbours {got}, expected [1, 0, 1, 2]")


def few_shot_across_the_float64_range():
    from skdml.metrics import few_shot_accuracy

    y = np.repeat(np.arange(4), 6)
    X = (np.array([-1.0, -0.9, -0.8, 1.0])[y] + 0.001 * np.tile(np.arange(6), 4))[:, None]
    acc = few_shot_accuracy(X * 1e308, y, n_way=4, n_shot=1, n_queries=5, n_episodes=20,
                            random_state=0)[0]
    check(acc == 1.0, f"accuracy {acc} on classes the unscaled data separate perfectly")


def suml_batch_on_another_scale():
    from skdml import SUML

    X = np.random.RandomState(0).randn(20, 5)
    est = SUML(n_triplets=50, max_iter=5, random_state=0).partial_fit(X[:10])
    before = est.components_.copy()
    try:
        est.partial_fit(X[10:] * 1e40)
    except ValueError:
        check(np.array_equal(est.components_, before), "the refused batch changed the model")
        raise
    check(np.isfinite(est.components_).all(), "NaN components after a finite batch")


def _constant_fit(make):
    X, y = np.ones((12, 3)), np.repeat([0, 1, 2], 4)
    est = make().fit(X, y if make.__name__ != "MLKR" else np.arange(12.0))
    raise Wrong(f"a constant X gave a fitted {type(est).__name__} (nothing to learn)")


def lmnn_on_a_constant_X():
    from skdml.linear import LMNN

    _constant_fit(LMNN)


def mlkr_on_a_constant_X():
    from skdml.linear import MLKR

    _constant_fit(MLKR)


def sdml_on_a_constant_X():
    from skdml.linear import SDML_Supervised

    _constant_fit(SDML_Supervised)


def f_beta_with_an_infinite_beta():
    from skdml.linear._weakly import calibrated_threshold

    d, y = np.array([0.1, 0.2, 1.0, 1.5, 3.0]), np.array([1, 1, -1, 1, -1])
    t = calibrated_threshold(d, y, strategy="f_beta", beta=np.inf)
    check(1.5 < t < 3.0, f"threshold {t}: beta=inf (recall) must accept every similar pair")


def a_trillion_pairs_among_four_samples():
    from skdml.constraints import Constraints

    pairs, _ = Constraints([0, 0, 1, 1]).labeled_pairs(10**12, random_state=0)
    check(len(pairs) == 12, f"{len(pairs)} pairs where 12 exist")


def builder_returning_one_module():
    import torch

    from skdml import DeepMetricTransformer

    rng = np.random.RandomState(0)
    y = np.repeat(np.arange(6), 10)
    X = (rng.randn(60, 8) + 2 * y[:, None]).astype(np.float32)
    torch.manual_seed(0)
    shared = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU())
    kw = dict(backbone=lambda shape: shared, n_components=4, max_iter=2, device="cpu",
              random_state=0, optimizer_params={"ema_epochs": None})  # module_ is trained
    a = DeepMetricTransformer(**kw).fit(X, y)
    Za = a.transform(X)
    DeepMetricTransformer(**kw).fit(X, y)
    gap = float(np.abs(a.transform(X) - Za).max())
    check(gap == 0.0, f"a second fit changed the first fitted model by {gap:.3g}")


def class_disjoint_hold_out_of_singletons():
    from skdml import DeepMetricTransformer

    y = np.r_[np.repeat(np.arange(5), 10), np.arange(5, 15)]
    X = (np.random.RandomState(1).randn(len(y), 8) + y[:, None]).astype(np.float32)
    try:  # 5 classes of 10 samples can be held out: a valid request
        DeepMetricTransformer(n_components=4, max_iter=2, device="cpu", random_state=1,
                              early_stopping=True, validation_fraction=0.2).fit(X, y)
    except ValueError as exc:
        raise Wrong(f"a valid hold-out refused: {exc}") from None


def object_labels_with_nan():
    from skdml.model_selection import ClassDisjointSplit

    y = np.array([1.0, 1.0, 2.0, 2.0, 3.0, 3.0, np.nan, np.nan], dtype=object)
    train, test = next(ClassDisjointSplit(n_splits=1, test_size=1, random_state=3).split(
        np.zeros((8, 1)), y))
    raise Wrong(f"NaN labels split into train {y[train].tolist()} and test {y[test].tolist()}")


def rank_fingerprint_of_large_ids():
    import torch

    from skdml.metrics._sharded import fingerprint

    B = 2**53
    check(fingerprint(torch.tensor([B, 7])) != fingerprint(torch.tensor([B + 1, 7])),
          "two ranks holding different labels pass the same-input check")


def swapped_cache_file_with_its_old_mtime():
    from skdml.datasets import fetch_file

    source = os.path.join(SHARED, "att_faces_64x64.mat")
    if not os.path.isfile(source):
        raise Missing(f"{source} not found")
    home = tempfile.mkdtemp()
    path = os.path.join(home, "att_faces_64x64.mat")
    shutil.copy(source, path)
    fetch_file("att_faces_64x64.mat", home, download_if_missing=False)
    before = os.stat(path)
    data = bytearray(open(path, "rb").read())
    data[1000] ^= 0xFF
    swapped = os.path.join(home, "swapped")
    with open(swapped, "wb") as f:
        f.write(bytes(data))
    os.utime(swapped, ns=(before.st_atime_ns, before.st_mtime_ns))
    os.replace(swapped, path)
    fetch_file("att_faces_64x64.mat", home, download_if_missing=False)
    raise Wrong("a tampered cache file swapped in with its old mtime was accepted")


def omniglot_zip_naming_a_member_twice():
    from _crafted_files import load_crafted_omniglot, omniglot_zip, png_bytes

    folder = tempfile.mkdtemp()
    root = "images_background_small1"
    name = f"{root}/Alphabet/character01/0001_01.png"
    path = omniglot_zip(os.path.join(folder, f"{root}.zip"), extra=[(name, png_bytes(seed=9))])
    with zipfile.ZipFile(path) as archive:  # the crafted file does name it twice
        names = [info.filename for info in archive.infolist()]
    check(names.count(name) == 2, "the crafted zip does not repeat the member")
    om = load_crafted_omniglot(path, image_size=7)
    raise Wrong(f"{len(om.drawer)} images read from a zip naming one drawing twice")


CASES = [Case(name, group, quiet(fn), budget) for name, group, fn, budget in [
    ("nearest_neighbors on values spanning -1e308 .. 1e308", "silent",
     nearest_neighbours_across_the_float64_range, 30),
    ("few_shot_accuracy on values spanning -1e308 .. 1e308", "silent",
     few_shot_across_the_float64_range, 30),
    ("SUML.partial_fit of a batch 1e40 times the first", "silent", suml_batch_on_another_scale,
     30),
    ("LMNN on a constant X", "silent", lmnn_on_a_constant_X, 30),
    ("MLKR on a constant X", "silent", mlkr_on_a_constant_X, 30),
    ("SDML_Supervised on a constant X", "silent", sdml_on_a_constant_X, 30),
    ("calibrate_threshold f_beta with beta=inf", "silent", f_beta_with_an_infinite_beta, 30),
    ("labeled_pairs(10**12) among 4 samples", "obscure", a_trillion_pairs_among_four_samples,
     30),
    ("a backbone builder returning one kept module", "silent", builder_returning_one_module,
     60),
    ("class-disjoint hold-out among singleton classes", "obscure",
     class_disjoint_hold_out_of_singletons, 60),
    ("ClassDisjointSplit with NaN among object labels", "silent", object_labels_with_nan, 30),
    ("rank check of labels above 2**53", "silent", rank_fingerprint_of_large_ids, 30),
    ("cached data file swapped in with its old mtime", "silent",
     swapped_cache_file_with_its_old_mtime, 30),
    ("Omniglot zip naming a member twice", "silent", omniglot_zip_naming_a_member_twice, 30),
]]

"""The seventh audit's cases: data spanning the float64 range in the scorers, SUML batches
on another scale, constant inputs to the classic learners, extreme F-beta weights, huge
constraint requests, builders that return one module, hold-outs of single samples, missing
labels, swapped or duplicated data files, and (its second round) the retrieval index's
gallery, ids and files, and the losses past float64's range.

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


def gallery_returned_as_a_tensor_view():
    import torch
    from sklearn.preprocessing import FunctionTransformer

    from skdml.retrieval import RetrievalIndex

    G = np.random.RandomState(0).randn(5, 3)
    X = torch.tensor(G.copy())
    index = RetrievalIndex(FunctionTransformer()).fit(X)
    X.zero_()
    check(np.array_equal(index.embeddings_, G), "an edit of the caller's tensor changed the "
          "index's gallery")


def ids_past_int64():
    from skdml.retrieval import RetrievalIndex

    index = RetrievalIndex().fit(np.eye(3), y=[1, 2**63, 2**63 + 1])
    check(index.labels_[1] != index.labels_[2], "ids 2**63 and 2**63 + 1 became one label")


def save_with_overwrite_the_string_false():
    from skdml.retrieval import RetrievalIndex

    path = os.path.join(tempfile.mkdtemp(), "work.npz")
    with open(path, "w") as f:
        f.write("precious work")
    try:
        RetrievalIndex().fit(np.eye(3)).save(path, overwrite="False")
    finally:
        with open(path, "rb") as f:
            kept = f.read() == b"precious work"
    check(kept, "overwrite='False' replaced the file")


def index_member_declaring_two_gib():
    import io
    import json
    import struct

    from skdml.retrieval import RetrievalIndex

    folder = tempfile.mkdtemp()
    plain = os.path.join(folder, "plain.npz")
    RetrievalIndex().fit(np.eye(3)).save(plain)
    meta = json.loads(str(np.load(plain)["meta"]))
    n, dims = 2**16, 2**12
    meta.update(n_items=n, n_dims=dims, embeddings_dtype="<f8", labels_dtype=None)
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f8", "fortran_order": False,
                                                  "shape": (n, dims)})
    emb = header.getvalue() + b"\0" * 64
    meta_npy = io.BytesIO()
    np.save(meta_npy, np.array(json.dumps(meta)))
    path = os.path.join(folder, "huge.npz")
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("meta.npy", meta_npy.getvalue())
        zf.writestr("embeddings.npy", emb)
    raw = bytearray(open(path, "rb").read())
    entry = raw.find(b"PK\x01\x02", raw.find(b"PK\x01\x02") + 4)
    declared = len(emb) - 64 + n * dims * 8
    struct.pack_into("<II", raw, entry + 20, declared, declared)
    with open(path, "wb") as f:
        f.write(bytes(raw))
    RetrievalIndex.load(path)
    raise Wrong("a file declaring a 2 GiB member for 64 bytes was loaded")


def npair_beyond_the_float64_range():
    import torch

    from skdml.losses import NPairLoss

    torch.manual_seed(0)
    x, y = torch.randn(6, 4, dtype=torch.float64), torch.tensor([0, 0, 1, 1, 2, 2])
    value = NPairLoss()(x * 1e160, y).item()
    check(value == float("inf"), f"N-pair loss {value} where the true value exceeds float64")


def energy_confusion_beyond_the_float64_range():
    import math

    import torch

    from skdml.losses import EnergyConfusion

    x = torch.tensor([[0.0], [1.0]], dtype=torch.float64) * 1e160
    value = EnergyConfusion()(x, torch.tensor([0, 1])).item()
    check(math.isclose(value, 2 * math.log(1e160), rel_tol=1e-9),
          f"log-energy {value}, expected {2 * math.log(1e160):.4f}")


def deml_weights_of_float_labels():
    import torch

    from skdml.losses import deml_pair_weights

    w = deml_pair_weights(torch.tensor([0.2, 0.7, 1.0]))
    raise Wrong(f"float labels truncated into classes (weight of (0, 1): {float(w[0, 1])})")


def jrs_beside_am_softmax_on_rescaled_rows():
    import torch

    from skdml.losses import AMSoftmaxLoss, JRSRegularizer, MetricObjective

    torch.manual_seed(0)
    z, y = torch.randn(6, 4), torch.tensor([0, 0, 1, 1, 2, 2])
    z2 = z * torch.tensor([[1.0], [10.0], [0.1], [3.0], [1.0], [5.0]])
    objective = MetricObjective(AMSoftmaxLoss(n_classes=3, embedding_dim=4), JRSRegularizer(), 1.0)
    a = objective(z, y)[1]["regularizer"].item()
    b = objective(z2, y)[1]["regularizer"].item()
    check(abs(a - b) < 1e-5, f"JRS {a:.4f} and {b:.4f} for the same unit rows AM-Softmax sees")


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
    ("RetrievalIndex over a tensor an identity step returns", "silent",
     gallery_returned_as_a_tensor_view, 30),
    ("RetrievalIndex ids 2**63 and 2**63 + 1", "silent", ids_past_int64, 30),
    ("RetrievalIndex.save(overwrite='False') over a file", "silent",
     save_with_overwrite_the_string_false, 30),
    ("RetrievalIndex.load of a member declaring 2 GiB in 1.5 KB", "obscure",
     index_member_declaring_two_gib, 30),
    ("NPairLoss of float64 embeddings at 1e160", "silent", npair_beyond_the_float64_range, 30),
    ("EnergyConfusion(log=True) at 1e160", "silent", energy_confusion_beyond_the_float64_range,
     30),
    ("deml_pair_weights of float labels", "silent", deml_weights_of_float_labels, 30),
    ("JRS beside AM-Softmax on rescaled rows", "silent", jrs_beside_am_softmax_on_rescaled_rows,
     30),
]]

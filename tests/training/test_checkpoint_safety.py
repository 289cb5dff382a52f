"""Checkpoints and lost work: safe loading, unwritable paths, concurrent fits, interrupted fits.

Every test here runs tiny fits on the CPU (a few seconds at most).
"""

from __future__ import annotations

import errno
import hashlib
import io
import os
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
import torch
from sklearn.exceptions import NotFittedError

import skdml
from skdml import ECAML, JRD, SUML, DeepMetricTransformer
from skdml._training import CheckpointError, load_checkpoint, save_checkpoint
from skdml._training import _checkpoint

pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning",
                                        "ignore:.*did not lower the metric loss:UserWarning")


@pytest.fixture(autouse=True)
def _one_torch_thread(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")


@pytest.fixture(scope="module")
def images():
    rng = np.random.RandomState(0)
    y = np.repeat(np.arange(6), 10)
    X = rng.rand(6, 1, 8, 8)[y] + 0.3 * rng.rand(60, 1, 8, 8)
    return X.astype(np.float32), y


class Counting(torch.nn.Module):
    """A tiny backbone that counts its training-mode forward passes (and can run a hook)."""

    def __init__(self, width=16, hook=None):
        super().__init__()
        self.lin = torch.nn.Linear(64, width)
        self.steps = 0
        self.hook = hook

    def forward(self, x):
        if self.training:
            self.steps += 1
            if self.hook is not None:
                self.hook(self)
        return self.lin(x.flatten(1))


def deep(**kw):
    params = dict(backbone=Counting(), n_components=8, max_iter=1, device="cpu",
                  random_state=0, early_stopping=False,
                  optimizer_params={"lr_schedule": "constant"})
    params.update(kw)
    return DeepMetricTransformer(**params)


def write_raw_checkpoint(path, obj):
    """A file with skdml's header and a *valid* digest over ``torch.save(obj)``."""
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    payload = buffer.getvalue()
    with open(path, "wb") as fh:
        fh.write(_checkpoint.MAGIC + hashlib.sha256(payload).digest() + payload)


class MakesAFolder:
    """Unpickling it calls ``os.mkdir(marker)``: what a crafted checkpoint could run."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.mkdir, (self.marker,)


# ---------------------------------------------------------------- safe loading
def test_a_crafted_checkpoint_never_runs_code_in_load_checkpoint(tmp_path):
    marker, path = tmp_path / "ran", tmp_path / "evil.ckpt"
    write_raw_checkpoint(path, {"format": "skdml-deep", "epoch": MakesAFolder(str(marker))})
    with pytest.raises(CheckpointError, match="evil.ckpt"):
        load_checkpoint(path)
    assert not marker.exists(), "loading the checkpoint ran code from it"


def test_a_crafted_checkpoint_never_runs_code_on_a_warm_start_fit(tmp_path, images):
    marker, path = tmp_path / "ran", tmp_path / "evil.ckpt"
    write_raw_checkpoint(path, {"format": "skdml-deep", "model": MakesAFolder(str(marker))})
    est = deep(checkpoint_path=path, warm_start=True)
    with pytest.raises(CheckpointError, match="cannot be loaded safely"):
        est.fit(*images)
    assert not marker.exists(), "a warm_start fit ran code from the checkpoint"
    assert est.backbone.steps == 0 and not hasattr(est, "module_")


def test_checkpoint_state_round_trips_without_the_full_unpickler(tmp_path):
    rs = np.random.RandomState(3)
    rs.randn()
    state = {"numpy_rng": rs.get_state(), "classes": np.array(["cat", "dog"]),
             "mixed": np.array(["a", 1], dtype=object), "n": np.int64(4),
             "split": (np.arange(5), None), "w": torch.ones(2)}
    save_checkpoint(tmp_path / "c.ckpt", state)
    data = (tmp_path / "c.ckpt").read_bytes()[len(_checkpoint.MAGIC) + 32:]
    raw = torch.load(io.BytesIO(data), weights_only=True)  # the strict loader reads it as is
    assert isinstance(raw["numpy_rng"][1]["data"], torch.Tensor)
    back = load_checkpoint(tmp_path / "c.ckpt")
    again = np.random.RandomState()
    again.set_state(back["numpy_rng"])
    assert again.randn() == rs.randn()
    assert back["classes"].tolist() == ["cat", "dog"] and back["mixed"].tolist() == ["a", 1]
    assert back["n"] == 4 and type(back["n"]) is int
    np.testing.assert_array_equal(back["split"][0], np.arange(5))
    assert back["split"][1] is None and torch.equal(back["w"], torch.ones(2))
    assert back["split"][0].flags.writeable


def test_an_unstorable_object_is_refused_when_saving(tmp_path):
    with pytest.raises(CheckpointError, match="MakesAFolder"):
        save_checkpoint(tmp_path / "c.ckpt", {"x": MakesAFolder("never")})


def test_a_checkpoint_in_the_first_unsafe_format_is_refused(tmp_path):
    payload = b"\x80\x04K\x03."  # pickle of 3
    path = tmp_path / "old.ckpt"
    path.write_bytes(_checkpoint.UNSAFE_MAGIC + hashlib.sha256(payload).digest() + payload)
    with pytest.raises(CheckpointError, match="earlier skdml"):
        load_checkpoint(path)


def test_a_deep_checkpoint_resumes_after_the_safe_round_trip(tmp_path, images):
    X, y = images
    path = tmp_path / "ck.pt"
    built = dict(backbone=lambda shape: Counting())  # seeded by random_state inside fit
    whole = deep(max_iter=2, **built).fit(X, y)
    half = deep(checkpoint_path=path, **built).fit(X, y)
    resumed = deep(checkpoint_path=path, warm_start=True, max_iter=2, **built)
    resumed.fit(X, y)  # a new estimator: from the file only
    assert half.n_iter_ == 1 and resumed.n_iter_ == 2
    np.testing.assert_allclose(resumed.transform(X), whole.transform(X), rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------- unwritable paths
def test_a_checkpoint_path_under_a_file_is_refused_before_training(tmp_path, images):
    (tmp_path / "afile").write_text("not a folder")
    est = deep(checkpoint_path=tmp_path / "afile" / "run" / "ck.pt", max_iter=3)
    with pytest.raises(CheckpointError, match="afile.* is a file"):
        est.fit(*images)
    assert est.backbone.steps == 0, "the unwritable path was found only after training"


def test_a_checkpoint_path_that_is_a_folder_is_refused_before_training(tmp_path, images):
    est = deep(checkpoint_path=tmp_path, max_iter=3)
    with pytest.raises(CheckpointError, match="is a folder"):
        est.fit(*images)
    assert est.backbone.steps == 0


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0,
                    reason="root writes into read-only folders")
def test_a_read_only_folder_is_refused_before_training(tmp_path, images):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        est = deep(checkpoint_path=folder / "ck.pt", max_iter=3)
        with pytest.raises(CheckpointError, match="does not accept a new file"):
            est.fit(*images)
        assert est.backbone.steps == 0
    finally:
        folder.chmod(0o755)


def test_a_failed_write_mid_training_warns_and_keeps_the_fit(tmp_path, images, monkeypatch):
    X, y = images
    path = tmp_path / "ck.pt"
    real, calls = _checkpoint.atomic_write_bytes, []

    def disk_fills_after_epoch_1(target, data):
        calls.append(target)
        if len(calls) > 1:
            raise OSError(errno.ENOSPC, "No space left on device")
        real(target, data)

    monkeypatch.setattr(_checkpoint, "atomic_write_bytes", disk_fills_after_epoch_1)
    est = deep(checkpoint_path=path, max_iter=3)
    with pytest.warns(UserWarning, match="(?s)ck.pt.*No space left") as caught:
        est.fit(X, y)
    assert len([w for w in caught if "ck.pt" in str(w.message)]) == 2  # first failure, end
    assert est.n_iter_ == 3 and len(est.history_) == 3
    assert est.transform(X).shape == (len(X), 8)
    assert load_checkpoint(path)["epoch"] == 1  # the file holds the last good write
    monkeypatch.setattr(_checkpoint, "atomic_write_bytes", real)
    first = [dict(r) for r in est.history_]
    est.set_params(warm_start=True, max_iter=4)
    est.fit(X, y)  # resumes from the fit in memory (epoch 3), not from the file (epoch 1)
    assert est.n_iter_ == 4 and est.history_[:3] == first
    assert load_checkpoint(path)["epoch"] == 4


# ---------------------------------------------------------------- one fit per checkpoint path
def test_a_second_fit_on_the_same_path_in_this_process_is_refused(tmp_path, images):
    X, y = images
    path = tmp_path / "ck.pt"
    seen = []

    def second_fit(module):
        if module.steps == 1:
            try:
                deep(checkpoint_path=path).fit(X, y)
            except Exception as exc:  # noqa: BLE001 - the test inspects it below
                seen.append(exc)
            else:
                seen.append(None)

    deep(backbone=Counting(hook=second_fit), checkpoint_path=path).fit(X, y)
    assert len(seen) == 1 and isinstance(seen[0], CheckpointError), seen
    assert "in use by another fit" in str(seen[0]) and f"process {os.getpid()}" in str(seen[0])
    assert not os.path.exists(str(path) + ".lock")


FIRST_FIT = textwrap.dedent("""
    import os, sys, time
    import numpy as np, torch
    from skdml import DeepMetricTransformer
    started, release, path = sys.argv[1:4]

    class Waits(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(64, 16)

        def forward(self, x):
            if self.training and not os.path.exists(started):
                open(started, "w").close()
                deadline = time.monotonic() + 60
                while not os.path.exists(release) and time.monotonic() < deadline:
                    time.sleep(0.05)
            return self.lin(x.flatten(1))

    rng = np.random.RandomState(0)
    y = np.repeat(np.arange(6), 10)
    X = (rng.rand(6, 1, 8, 8)[y] + 0.3 * rng.rand(60, 1, 8, 8)).astype(np.float32)
    DeepMetricTransformer(Waits(), n_components=8, max_iter=1, device="cpu", random_state=0,
                          checkpoint_path=path).fit(X, y)
    print("first fit done")
""")


def test_two_processes_cannot_train_into_one_new_checkpoint(tmp_path, images):
    started, release, path = tmp_path / "started", tmp_path / "release", tmp_path / "ck.pt"
    env = dict(os.environ, OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([os.path.dirname(os.path.dirname(skdml.__file__)),
                                           os.environ.get("PYTHONPATH", "")]))
    first = subprocess.Popen([sys.executable, "-c", FIRST_FIT, str(started), str(release),
                              str(path)], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not started.exists():
            assert first.poll() is None, first.communicate()[1][-2000:]
            assert time.monotonic() < deadline, "the first fit did not start training"
            time.sleep(0.05)
        # the first process is training epoch 1; no checkpoint exists yet
        assert not path.exists()
        with pytest.raises(CheckpointError, match="in use by another fit"):
            deep(checkpoint_path=path).fit(*images)
    finally:
        release.touch()
        out, err = first.communicate(timeout=60)
    assert first.returncode == 0, err[-2000:]
    assert "first fit done" in out
    assert load_checkpoint(path)["epoch"] == 1


def test_a_lock_left_by_a_dead_process_does_not_block(tmp_path, images):
    path = tmp_path / "ck.pt"
    (tmp_path / "ck.pt.lock").write_text("process 999999 on elsewhere\n")
    deep(checkpoint_path=path).fit(*images)
    assert load_checkpoint(path)["epoch"] == 1
    assert not (tmp_path / "ck.pt.lock").exists()


def test_a_users_file_at_the_lock_path_is_neither_overwritten_nor_removed(tmp_path, images):
    # an existing regular file at <path>.lock was truncated, written and then removed
    path = tmp_path / "poetry"
    lock = tmp_path / "poetry.lock"
    lock.write_text("[[package]]\nname = 'numpy'\n")
    with pytest.raises(CheckpointError, match="is not a lock of skdml's"):
        deep(checkpoint_path=path).fit(*images)
    assert lock.read_text() == "[[package]]\nname = 'numpy'\n"
    assert not path.exists()
    lock.write_text("")  # an empty file is taken (and removed, as a fit's own lock is)
    deep(checkpoint_path=path).fit(*images)
    assert load_checkpoint(path)["epoch"] == 1 and not lock.exists()


@pytest.mark.skipif(os.name != "posix", reason="flock")
def test_a_users_lock_path_file_is_kept_where_the_file_system_has_no_locks(tmp_path,
                                                                           monkeypatch):
    from skdml._training import _checkpoint_lock

    def no_locks(fd, operation):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(_checkpoint_lock.fcntl, "flock", no_locks)
    lock = tmp_path / "ck.pt.lock"
    lock.write_text("a user's notes\n")
    with pytest.raises(CheckpointError, match="is not a lock of skdml's"):
        with _checkpoint_lock.claim_checkpoint_path(tmp_path / "ck.pt"):
            pass
    assert lock.read_text() == "a user's notes\n"


def test_a_checkpoint_another_writer_saved_is_a_checkpoint_error(tmp_path, images):
    path = tmp_path / "other.ckpt"
    save_checkpoint(path, {"epoch": 3, "weights": [1.0, 2.0]})
    with pytest.raises(CheckpointError, match="not one DeepMetricTransformer .or DeML. wrote"):
        deep(checkpoint_path=path, warm_start=True).fit(*images)


@pytest.mark.skipif(os.name != "posix", reason="flock")
def test_a_file_system_without_locks_warns_and_trains(tmp_path, images, monkeypatch):
    from skdml._training import _checkpoint_lock

    def no_locks(fd, operation):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(_checkpoint_lock.fcntl, "flock", no_locks)
    path = tmp_path / "ck.pt"
    with pytest.warns(UserWarning, match="does not support locks"):
        deep(checkpoint_path=path).fit(*images)
    assert load_checkpoint(path)["epoch"] == 1 and not os.path.exists(str(path) + ".lock")


def test_the_lock_is_released_when_a_fit_is_interrupted(tmp_path, images):
    path = tmp_path / "ck.pt"

    def interrupt(module):
        if module.steps == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        deep(backbone=Counting(hook=interrupt), checkpoint_path=path, max_iter=3).fit(*images)
    assert not os.path.exists(str(path) + ".lock")
    assert load_checkpoint(path)["epoch"] == 1  # written before the interruption
    deep(checkpoint_path=path, warm_start=True, max_iter=2).fit(*images)  # the path is free
    assert load_checkpoint(path)["epoch"] == 2


# ---------------------------------------------------------------- interrupted fits
def _interrupt(*args, **kwargs):
    raise KeyboardInterrupt


LINEAR = [
    pytest.param(ECAML, "adam", "train_epochs", id="ECAML-minibatch"),
    pytest.param(ECAML, "conjugate_gradient", "run_manopt", id="ECAML-batch"),
    pytest.param(JRD, "adam", "train_epochs", id="JRD-minibatch"),
    pytest.param(JRD, "conjugate_gradient", "run_manopt", id="JRD-batch"),
]


@pytest.mark.parametrize("cls, solver, runner", LINEAR)
def test_an_interrupted_first_linear_fit_leaves_the_estimator_unfitted(cls, solver, runner,
                                                                       monkeypatch):
    from skdml.linear import _supervised

    rng = np.random.RandomState(0)
    y = np.repeat(np.arange(4), 10)
    X = rng.randn(40, 6) + 3 * y[:, None]
    monkeypatch.setattr(_supervised, runner, _interrupt)
    est = cls(n_components=2, solver=solver, max_iter=5, random_state=0)
    with pytest.raises(KeyboardInterrupt):
        est.fit(X, y)
    with pytest.raises(NotFittedError):
        est.transform(X)
    assert not hasattr(est, "n_features_in_")
    monkeypatch.undo()
    fitted = cls(n_components=2, solver=solver, max_iter=5, random_state=0).fit(X, y)
    before = fitted.components_.copy()
    monkeypatch.setattr(_supervised, runner, _interrupt)
    with pytest.raises(KeyboardInterrupt):
        fitted.fit(X[:, :5], y)  # another width: an interrupted refit keeps the old model
    np.testing.assert_array_equal(fitted.components_, before)
    assert fitted.n_features_in_ == 6 and fitted.transform(X).shape == (40, 2)


@pytest.mark.parametrize("method", ["fit", "partial_fit"])
def test_an_interrupted_first_suml_fit_leaves_the_estimator_unfitted(method, monkeypatch):
    from skdml.linear import _suml

    X = np.random.RandomState(0).randn(30, 5)
    monkeypatch.setattr(_suml, "run_manopt", _interrupt)
    est = SUML(n_components=2, max_iter=3, random_state=0)
    with pytest.raises(KeyboardInterrupt):
        getattr(est, method)(X)
    with pytest.raises(NotFittedError):
        est.transform(X)
    assert not hasattr(est, "n_features_in_")


def test_an_interrupted_partial_fit_step_keeps_the_suml_model(monkeypatch):
    from skdml.linear import _suml

    X = np.random.RandomState(0).randn(30, 5)
    est = SUML(n_components=2, max_iter=3, random_state=0).partial_fit(X)
    before = (est.components_.copy(), est._state["runs"], est._state["rng"].get_state()[2])
    monkeypatch.setattr(_suml, "run_manopt", _interrupt)
    with pytest.raises(KeyboardInterrupt):
        est.partial_fit(X)
    np.testing.assert_array_equal(est.components_, before[0])
    assert (est._state["runs"], est._state["rng"].get_state()[2]) == before[1:]


def test_an_interrupted_first_deep_fit_leaves_the_estimator_unfitted(images):
    def interrupt(module):
        if module.steps == 2:
            raise KeyboardInterrupt

    est = deep(backbone=Counting(hook=interrupt), max_iter=3)
    with pytest.raises(KeyboardInterrupt):
        est.fit(*images)
    with pytest.raises(NotFittedError):
        est.transform(images[0])
    assert not hasattr(est, "n_features_in_")


# ---------------------------------------------------------------- warm starts that cannot resume
@pytest.fixture()
def saved_run(tmp_path, images):
    path = tmp_path / "ck.pt"
    deep(checkpoint_path=path).fit(*images)
    return path


def test_warm_start_with_another_n_components_says_so(saved_run, images):
    est = deep(checkpoint_path=saved_run, warm_start=True, max_iter=2, n_components=4)
    with pytest.raises(ValueError, match="n_components=8, and n_components=4 now"):
        est.fit(*images)


def test_warm_start_with_another_backbone_says_so(saved_run, images):
    est = deep(backbone=Counting(width=32), checkpoint_path=saved_run, warm_start=True,
               max_iter=2)
    with pytest.raises(ValueError, match=r"backbone differs.*'backbone.lin.weight' has shape"):
        est.fit(*images)
    assert est.backbone.steps == 0


def test_warm_start_from_the_previous_fit_with_another_n_components_says_so(images):
    est = deep(max_iter=1).fit(*images)
    est.set_params(warm_start=True, max_iter=2, n_components=4)
    with pytest.raises(ValueError, match="from the previous fit: it was trained with"):
        est.fit(*images)
    assert est.n_iter_ == 1 and est.transform(images[0]).shape[1] == 8  # kept


@pytest.mark.parametrize("key", ["optimizer", "numpy_rng", "epoch"])
def test_a_checkpoint_missing_a_key_is_refused_clearly(saved_run, images, key):
    state = load_checkpoint(saved_run)
    del state[key]
    save_checkpoint(saved_run, state)  # a valid digest over an incomplete state
    est = deep(checkpoint_path=saved_run, warm_start=True, max_iter=2)
    with pytest.raises(CheckpointError, match=f"lacks \\['{key}'\\]"):
        est.fit(*images)


def test_a_checkpoint_with_a_broken_entry_is_refused_clearly(saved_run, images):
    state = load_checkpoint(saved_run)
    state["stopper"] = {"best": 0.0}
    save_checkpoint(saved_run, state)
    est = deep(checkpoint_path=saved_run, warm_start=True, max_iter=2)
    with pytest.raises(CheckpointError, match="does not match this fit"):
        est.fit(*images)


# ---------------------------------------------------------------- no positive pair
def test_a_deep_fit_where_no_batch_holds_a_positive_pair_is_refused(images):
    X, y = images
    est = deep()
    with pytest.raises(ValueError, match="every training class has a single sample"):
        est.fit(X[::10], y[::10])
    assert est.backbone.steps == 0
    with pytest.raises(ValueError, match="n_samples_per_class=1"):
        deep(n_samples_per_class=1).fit(X, y)


def test_a_proxy_loss_still_trains_on_single_samples(images):
    X, y = images
    est = deep(loss="amsoftmax").fit(X[::10], y[::10])
    assert est.transform(X[::10]).shape == (6, 8)


@pytest.mark.parametrize("cls", [ECAML, JRD])
def test_linear_learners_refuse_classes_of_one_sample(cls):
    X = np.random.RandomState(0).randn(6, 4)
    with pytest.raises(ValueError, match="positive pair"):
        cls(n_components=2).fit(X, np.arange(6))

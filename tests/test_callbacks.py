"""Public training callbacks: a user callback sees every epoch and step, and can stop training."""

import os
import pickle
import warnings

import numpy as np
import pytest
import torch
from sklearn.datasets import load_digits
from sklearn.exceptions import ConvergenceWarning

from skdml import ECAML, JRD, DeepMetricTransformer
from skdml.callbacks import Callback


class Recorder(Callback):
    """Records every hook call; stops at ``stop_at`` if given."""

    def __init__(self, stop_at=None):
        self.stop_at = stop_at
        self.calls, self.epochs, self.steps, self.losses = [], [], 0, []

    def on_train_begin(self, estimator, info):
        self.calls.append("begin")
        self.max_iter = info.max_iter
        self.model = info.model

    def on_batch_end(self, estimator, info):
        self.steps += 1
        assert info.batch_loss is not None and info.step >= 1

    def on_epoch_end(self, estimator, info):
        self.calls.append("epoch")
        self.epochs.append(info.epoch)
        self.losses.append(info.record["loss"])
        assert info.record is info.history[-1]
        if self.stop_at is not None and info.epoch >= self.stop_at:
            info.stop("custom rule")

    def on_train_end(self, estimator, info):
        self.calls.append("end")
        self.stop_reason = info.stop_reason


@pytest.fixture(scope="module")
def digits():
    X, y = load_digits(return_X_y=True)
    keep = y < 5
    return X[keep][:300].astype(np.float32), y[keep][:300]


def _deep(**params):
    return DeepMetricTransformer(n_components=8, device="cpu", random_state=0,
                                 loader_params={"batches_per_epoch": 3}, **params)


def test_deep_callback_sees_every_epoch_and_step(digits):
    X, y = digits
    rec = Recorder()
    est = _deep(max_iter=4, callbacks=[rec]).fit(X, y)
    assert rec.calls == ["begin"] + ["epoch"] * 4 + ["end"]
    assert rec.epochs == [1, 2, 3, 4] == [r["epoch"] for r in est.history_]
    assert rec.steps == 4 * 3
    assert rec.losses == [r["loss"] for r in est.history_]
    assert rec.stop_reason is None and rec.max_iter == 4
    assert rec.model is not None  # the network being trained


class HalveTheRate(Callback):
    """Halves every rate after the schedule's step: the next step runs at half the rate."""

    def __init__(self):
        self.rates = []

    def on_batch_end(self, estimator, info):
        for group in info.optimizer.param_groups:
            group["lr"] *= 0.5
        self.rates.append(info.optimizer.param_groups[0]["lr"])


def test_a_callback_can_set_the_rate_of_the_next_step(digits):
    X, y = digits
    constant = {"lr_schedule": "constant"}
    halve = HalveTheRate()
    est = _deep(max_iter=1, learning_rate=1e-2, optimizer_params=constant,
                callbacks=[halve]).fit(X, y)
    assert halve.rates == pytest.approx([1e-2 / 2 ** k for k in range(1, 4)])
    plain = _deep(max_iter=1, learning_rate=1e-2, optimizer_params=constant).fit(X, y)
    assert est.history_[0]["loss"] != plain.history_[0]["loss"]  # steps 2-3 ran slower
    assert halve.rates[0] != plain.learning_rate


def test_deep_callback_can_stop_training(digits):
    X, y = digits
    rec = Recorder(stop_at=2)
    est = _deep(max_iter=10, callbacks=[rec]).fit(X, y)
    assert est.n_iter_ == 2 and len(est.history_) == 2
    assert rec.epochs == [1, 2] and rec.stop_reason == "custom rule"
    assert np.isfinite(est.transform(X[:5])).all()


@pytest.mark.parametrize("cls", [ECAML, JRD])
def test_linear_callback_sees_every_epoch_and_can_stop(cls, digits):
    X, y = digits
    rec = Recorder()
    est = cls(n_components=8, max_iter=3, callbacks=[rec], random_state=0).fit(X, y)
    # with early stopping, every validation run calls them (ECAML's loss="auto" trains two
    # candidate losses on the hold-out); history_ holds the chosen run, then its refit
    n_runs = len(getattr(est, "candidate_scores_", [None]))
    assert rec.epochs == [1, 2, 3] * n_runs
    assert [r["epoch"] for r in est.history_ if not r.get("refit")] == [1, 2, 3]
    assert rec.calls[0] == "begin" and rec.calls[-1] == "end" and rec.steps >= 3
    assert rec.calls.count("begin") == n_runs
    rec = Recorder(stop_at=1)
    est = cls(n_components=8, max_iter=10, callbacks=[rec], early_stopping=False,
              random_state=0).fit(X, y)
    assert est.n_iter_ == 1 and rec.epochs == [1] and rec.stop_reason == "custom rule"
    assert len(est.history_) == 1


def test_batch_solver_refuses_callbacks(digits):
    X, y = digits
    with pytest.raises(ValueError, match="adam"):
        ECAML(max_iter=2, solver="conjugate_gradient", callbacks=[Recorder()]).fit(X, y)


def test_callbacks_must_be_callback_instances(digits):
    X, y = digits
    with pytest.raises(TypeError, match="skdml.callbacks.Callback"):
        _deep(max_iter=1, callbacks=[lambda *a: None]).fit(X, y)


def test_callback_error_leaves_estimator_unfitted(digits):
    from sklearn.exceptions import NotFittedError

    class Boom(Callback):
        def on_epoch_end(self, estimator, info):
            raise RuntimeError("boom")

    X, y = digits
    est = _deep(max_iter=3, callbacks=[Boom()])
    with pytest.raises(RuntimeError, match="boom"):
        est.fit(X, y)
    with pytest.raises(NotFittedError):
        est.transform(X[:2])


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("make", [
    lambda cbs: DeepMetricTransformer(n_components=3, max_iter=1, device="cpu",
                                      random_state=0, callbacks=cbs),
    lambda cbs: ECAML(n_components=3, max_iter=1, early_stopping=False, random_state=0,
                      callbacks=cbs),
], ids=["deep", "ecaml"])
def test_a_fitted_model_keeps_its_callbacks_and_loads_where_their_module_is_gone(
        make, monkeypatch):
    """Pickling keeps the callbacks (a cached Pipeline step, a worker's estimator); a model
    whose callback class cannot be imported where it is loaded still loads, and says so."""
    import pickle
    import sys
    import types

    from sklearn.base import clone

    script = types.ModuleType("a_users_script")  # an importable module of the user's
    exec("from skdml.callbacks import Callback\n"
         "class LogAndStop(Callback):\n"
         "    def on_epoch_end(self, estimator, info):\n"
         "        info.stop('seen enough')\n", script.__dict__)
    monkeypatch.setitem(sys.modules, "a_users_script", script)
    rng = np.random.RandomState(0)
    y = np.repeat(np.arange(4), 8)
    X = rng.randn(32, 5) + 2 * y[:, None]
    est = make([script.LogAndStop()])
    unfitted = pickle.dumps(est)  # a clone sent to a worker keeps its callbacks
    est.fit(X, y)
    saved = pickle.dumps(est)
    assert est.callbacks is not None  # the live model keeps them
    assert isinstance(pickle.loads(saved).callbacks[0], script.LogAndStop)  # so does a copy
    monkeypatch.delitem(sys.modules, "a_users_script")  # "elsewhere": the module is gone
    with pytest.warns(UserWarning, match=r"loads with callbacks=None: .*ModuleNotFoundError"):
        loaded = pickle.loads(saved)
    assert loaded.callbacks is None
    np.testing.assert_allclose(loaded.transform(X), est.transform(X), rtol=1e-6)
    clone(loaded)
    monkeypatch.setitem(sys.modules, "a_users_script", script)
    assert isinstance(pickle.loads(unfitted).callbacks[0], script.LogAndStop)


def test_a_callback_class_of_a_script_is_saved_by_value(tmp_path):
    # a class of the script's __main__ loads in a process that never ran the script
    import subprocess
    import sys

    model = tmp_path / "model.pkl"
    script = tmp_path / "train.py"
    script.write_text(
        "import pickle\n"
        "import numpy as np\n"
        "from skdml import ECAML\n"
        "from skdml.callbacks import Callback\n"
        "class StopAt(Callback):\n"
        "    def __init__(self, epoch):\n"
        "        self.epoch = epoch\n"
        "    def on_epoch_end(self, estimator, info):\n"
        "        if info.epoch >= self.epoch:\n"
        "            info.stop('enough')\n"
        "rng = np.random.RandomState(0)\n"
        "y = np.repeat(np.arange(3), 10)\n"
        "X = rng.randn(30, 4) + 2 * y[:, None]\n"
        "est = ECAML(n_components=2, max_iter=5, early_stopping=False, random_state=0,\n"
        "            callbacks=[StopAt(2)]).fit(X, y)\n"
        f"open({str(model)!r}, 'wb').write(pickle.dumps(est))\n")
    env = {**os.environ, "SKDML_NUM_THREADS": "1"}
    subprocess.run([sys.executable, str(script)], check=True, env=env, cwd=tmp_path)
    out = subprocess.run(
        [sys.executable, "-W", "error", "-c",
         f"import pickle; est = pickle.load(open({str(model)!r}, 'rb')); "
         "print(type(est.callbacks[0]).__name__, est.callbacks[0].epoch, est.n_iter_)"],
        check=True, env=env, cwd=tmp_path, capture_output=True, text=True).stdout
    assert out.split() == ["StopAt", "2", "2"]


def _three_blobs():
    """30 samples of 3 separated classes in 4 features."""
    rng = np.random.RandomState(0)
    y = np.repeat(np.arange(3), 10)
    return rng.randn(30, 4) + 2 * y[:, None], y


class _StopAfterOne(Callback):
    def on_epoch_end(self, estimator, info):
        info.stop("one epoch")


class _HoldsALock(Callback):
    def __init__(self):
        import threading

        self.lock = threading.Lock()


def test_a_cached_pipeline_step_refits_with_its_callbacks(tmp_path):
    # Pipeline(memory=...) puts the unpickled fitted step in the user's pipeline: its
    # callbacks were dropped, so the third fit trained 3 epochs where the first trained 1
    from sklearn.neighbors import KNeighborsClassifier
    from sklearn.pipeline import Pipeline

    X, y = _three_blobs()
    pipe = Pipeline([("ecaml", ECAML(n_components=2, max_iter=3, early_stopping=False,
                                     callbacks=[_StopAfterOne()], random_state=0)),
                     ("knn", KNeighborsClassifier(3))], memory=str(tmp_path))
    for _ in range(3):
        pipe.fit(X, y)
        assert pipe[0].n_iter_ == 1
        assert isinstance(pipe.get_params()["ecaml__callbacks"][0], _StopAfterOne)


def test_callbacks_that_cannot_be_pickled_leave_a_fitted_model_savable():
    import pickle

    X, y = _three_blobs()
    est = ECAML(n_components=2, max_iter=2, early_stopping=False, random_state=0,
                callbacks=[_HoldsALock()])
    with pytest.raises(TypeError, match="lock"):  # unfitted: as it is, before any training
        pickle.dumps(est)
    est.fit(X, y)
    with pytest.warns(UserWarning, match="saved with callbacks=None: its callbacks cannot"):
        saved = pickle.dumps(est)
    loaded = pickle.loads(saved)
    assert loaded.callbacks is None
    np.testing.assert_array_equal(loaded.transform(X), est.transform(X))


def test_a_hook_with_the_wrong_signature_is_refused_before_training():
    class OneArgument(Callback):
        def on_epoch_end(self, info):  # the estimator argument forgotten
            pass

    X, y = load_digits(return_X_y=True)
    with pytest.raises(TypeError, match=r"OneArgument.on_epoch_end must take \(estimator, info\)"):
        ECAML(n_components=4, max_iter=2, callbacks=[OneArgument()]).fit(X[:200], y[:200])


class _Runs(Callback):
    """Records which training each on_train_begin opens (``info.run``)."""

    def __init__(self):
        self.runs = []

    def on_train_begin(self, estimator, info):
        self.runs.append(info.run)


def test_each_training_of_a_fit_is_named_to_the_callbacks(digits):
    # a fit may train more than once (candidates on a hold-out, a collapse refit): the
    # hooks saw two trainings and could not tell them apart
    X, y = digits
    runs = _Runs()
    ECAML(n_components=8, max_iter=2, callbacks=[runs], random_state=0).fit(X, y)
    assert runs.runs == ["candidate 'lmnn' on the hold-out",
                         "candidate 'binomial' on the hold-out"]
    runs = _Runs()
    ECAML(n_components=8, max_iter=2, early_stopping=False, callbacks=[runs],
          random_state=0).fit(X, y)
    assert runs.runs == ["fit"]
    # labels unrelated to the data, a rate too small to learn: the fit collapses and is
    # refitted from the same start with its "auto" settings changed
    rng = np.random.RandomState(0)
    runs = _Runs()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        DeepMetricTransformer(backbone=lambda shape: torch.nn.Linear(shape[0], 8),
                              n_components=4, max_iter=10, learning_rate=1e-9, device="cpu",
                              random_state=0, callbacks=[runs]).fit(
            rng.randn(60, 5).astype(np.float32), np.repeat(np.arange(4), 15))
    assert runs.runs[0] == "fit" and len(runs.runs) >= 2
    assert all(run.startswith("collapse refit (") for run in runs.runs[1:])


def test_a_copy_of_a_fitted_learner_keeps_its_callbacks():
    # copy.copy and copy.deepcopy went through the pickling state, which drops them
    import copy

    from sklearn.datasets import load_iris

    from skdml import ECAML
    from skdml.callbacks import Callback

    class Watch(Callback):
        pass

    X, y = load_iris(return_X_y=True)
    watch = Watch()
    est = ECAML(n_components=2, max_iter=2, random_state=0, callbacks=[watch]).fit(X, y)
    deep, shallow = copy.deepcopy(est), copy.copy(est)
    assert isinstance(deep.callbacks[0], Watch) and deep.callbacks[0] is not watch
    assert shallow.callbacks[0] is watch
    np.testing.assert_array_equal(deep.transform(X), est.transform(X))
    assert isinstance(pickle.loads(pickle.dumps(est)).callbacks[0], Watch)  # by value


class _Remember(Callback):
    """Keeps the estimator it watched (to inspect it after the fit)."""

    def on_train_begin(self, estimator, info):
        self.estimator = estimator


def test_a_callback_that_keeps_the_estimator_pickles_one_model():
    # the callbacks' own pickle reached the estimator again: 89 nested copies of the model
    # (153 KB for 1 KB, 80x for a deep learner) and a false "saved with callbacks=None"
    import pickle

    X, y = _three_blobs()
    est = ECAML(n_components=2, max_iter=1, early_stopping=False, random_state=0,
                callbacks=[_Remember()])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(X, y)
    plain = pickle.dumps(ECAML(n_components=2, max_iter=1, early_stopping=False,
                               random_state=0).fit(X, y))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        saved = pickle.dumps(est)
    assert len(saved) < len(plain) + 2000
    loaded = pickle.loads(saved)
    assert loaded.callbacks[0].estimator is loaded
    np.testing.assert_array_equal(loaded.transform(X), est.transform(X))


class _HoldsAFile(Callback):
    def __init__(self, path):
        self.f = open(path)


def test_a_callback_holding_a_file_open_for_reading_is_not_saved(tmp_path):
    # cloudpickle copied the file's contents into the pickle (a StringIO once loaded),
    # silently, where the notes promise callbacks=None and a warning for an open file
    import pickle

    path = tmp_path / "secret.txt"
    path.write_text("contents of the file\n")
    X, y = _three_blobs()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = ECAML(n_components=2, max_iter=1, early_stopping=False, random_state=0).fit(X, y)
    holder = _HoldsAFile(path)
    est.set_params(callbacks=[holder])
    try:
        with pytest.warns(UserWarning, match="an open file cannot be saved"):
            saved = pickle.dumps(est)
    finally:
        holder.f.close()
    assert b"contents of the file" not in saved
    assert pickle.loads(saved).callbacks is None


class _LogsTo(Callback):
    def __init__(self, stream):
        self.stream = stream


def test_a_callback_logging_to_memory_or_a_standard_stream_is_saved():
    # the open-file rule refused every io.IOBase: an in-memory log and sys.stderr were
    # dropped with a warning, where they saved before
    import io
    import pickle

    X, y = _three_blobs()
    for stream in (io.StringIO("log"), io.BytesIO(b"log")):  # (pytest swaps sys.stderr)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            est = ECAML(n_components=2, max_iter=1, early_stopping=False, random_state=0,
                        callbacks=[_LogsTo(stream)]).fit(X, y)
        with warnings.catch_warnings():
            warnings.simplefilter("error", UserWarning)
            loaded = pickle.loads(pickle.dumps(est))
        assert isinstance(loaded.callbacks[0], _LogsTo)


class _Stop(Callback):
    """Asks to stop after every epoch, and records the reason the loop then holds."""

    def __init__(self, reason, seen):
        self.reason, self.seen = reason, seen

    def on_epoch_end(self, estimator, info):
        info.stop(self.reason)
        self.seen.append(info.stop_reason)


def test_the_first_stop_reason_is_kept():
    X, y = load_digits(return_X_y=True)
    seen = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ECAML(n_components=4, max_iter=5, random_state=0,
              callbacks=[_Stop("first", seen), _Stop("second", seen)]).fit(X[:200], y[:200])
    assert seen and set(seen) == {"first"}  # the later callback does not overwrite the reason

"""A deep fit that does not learn says so, does not stop on an initial plateau, and keeps
its start where it can measure that training made things worse (issue 36).

The deep learner's *start* is the network before training: for the default vector
backbone, the input's leading principal axes (``identity_start``); for images, the
initialised ConvNet. With a validation set (``validation_fraction``) the fit scores the
start and every epoch on it and returns the start when no epoch beats it.
"""

import warnings

import numpy as np
import pytest
from _deep_helpers import fast, make, zero_shot_vectors

from skdml._training import EarlyStopping
from skdml.deep._trainer import LEARNING_STARTED_RTOL


def flat_loss(z, y):
    """A metric loss that never moves (no gradient reaches the network through it)."""
    return (z * 0.0).sum() + 1.0


def test_a_flat_metric_loss_warns_even_when_the_preserve_term_falls(blobs):
    """The preserve_input term falls while the metric loss stays flat: not learning."""
    X, y = blobs
    with pytest.warns(UserWarning, match="did not lower the metric loss"):
        est = make(loss=flat_loss, preserve_input=5.0, max_iter=4,
                   learning_rate=1e-2).fit(X, y)
    terms = [r["preserve_input"] for r in est.history_]
    assert terms[-1] < terms[0]  # the total fell: the old rule read it as learning
    assert len({round(r["metric_loss"], 6) for r in est.history_}) == 1


def test_an_initial_plateau_is_not_convergence(blobs):
    """A metric loss flat from the first epoch never counts as converged: the fit runs on."""
    X, y = blobs
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = make(loss=flat_loss, preserve_input=0.0, max_iter=8, n_iter_no_change=2,
                   optimizer_params={"lr_schedule": "constant"}).fit(X, y)
    assert est.n_iter_ == 8  # the old rule stopped at epoch 3 (2 epochs without change)


def test_a_plateau_after_learning_started_still_stops():
    stopper = EarlyStopping(monitor="metric_loss", greater_is_better=False,
                            n_iter_no_change=2, min_progress=LEARNING_STARTED_RTOL)

    class Loop:
        epoch, stop_reason = 0, None

        def stop(self, reason):
            self.stop_reason = reason

    loop = Loop()
    for value in [1.0, 1.0, 1.0, 0.8, 0.6, 0.6, 0.6, 0.6]:
        loop.epoch += 1
        stopper.on_epoch_end(loop, {"metric_loss": value})
        if loop.stop_reason:
            break
    assert loop.epoch == 7  # started at epoch 4; 0.6 at 5, then 2 epochs without change


def test_the_default_fit_monitors_the_metric_loss_once_learning_started(blobs):
    from skdml.deep._trainer import DeepTrainer

    seen = {}
    original = DeepTrainer._optimisation

    def spy(self):
        original(self)
        seen["stopper"] = self.stopper

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(DeepTrainer, "_optimisation", spy)
        fast(max_iter=1).fit(*blobs)
    assert seen["stopper"].monitor == "metric_loss"
    assert seen["stopper"].min_progress == LEARNING_STARTED_RTOL


def test_the_start_is_kept_when_training_does_not_beat_it_on_held_out_classes():
    """Shuffled labels teach nothing that carries over to held-out classes."""
    X, y = zero_shot_vectors(seed=1)
    y_noise = np.random.RandomState(0).permutation(y)
    with pytest.warns(UserWarning, match="untrained network is returned"):
        est = fast(validation_fraction=0.3, early_stopping=False, max_iter=6,
                   learning_rate=3e-3).fit(X, y_noise)
    assert est.best_iteration_ == 0
    scores = [r["validation_score"] for r in est.history_]
    assert scores[-1] < est.best_validation_score_  # the last epoch scored below the start
    start = fast(validation_fraction=0.3, early_stopping=False, max_iter=1,
                 learning_rate=1e-12, optimizer_params={"ema_epochs": None})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        start.fit(X, y_noise)
    np.testing.assert_allclose(est.transform(X), start.transform(X), rtol=1e-4, atol=1e-5)

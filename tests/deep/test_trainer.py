"""skdml/deep/_trainer.py: one fit from its FitConfig (the network built once, seeding,
checkpoints and resuming, early stopping, the weight average, the schedule, the checks of
a fit that does not learn)."""

from __future__ import annotations

import functools
import os
import warnings

import numpy as np
import pytest
import torch
from torch import nn

from skdml.callbacks import Callback
from skdml.deep import NonFiniteLossError
from skdml._training import load_checkpoint

from _deep_helpers import (assert_same_params, fast, make, params_of, tiny_mlp,
                           without_seconds, zero_shot_vectors)

pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")


def test_same_seed_same_history_and_weights(blobs):
    X, y = blobs
    kw = dict(backbone=functools.partial(tiny_mlp, dropout=0.3), validation_fraction=0.34,
              max_iter=3)
    a, b = make(**kw).fit(X, y), make(**kw).fit(X, y)
    assert without_seconds(a.history_) == without_seconds(b.history_)
    assert all("seconds" in rec and "validation_score" in rec for rec in a.history_)
    assert_same_params(params_of(a), params_of(b))
    c = make(**{**kw, "random_state": 1}).fit(X, y)
    assert without_seconds(c.history_) != without_seconds(a.history_)
    # fit leaves the global torch RNG alone
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    make(**kw).fit(X, y)
    assert torch.equal(torch.rand(3), expected)


def test_checkpoint_resume_reaches_same_weights(blobs, tmp_path):
    X, y = blobs
    # a constant rate: the runs below stop at different max_iter (see the next test for the
    # cosine schedule, whose horizon is max_iter)
    kw = dict(backbone=functools.partial(tiny_mlp, dropout=0.3), validation_fraction=0.34,
              optimizer_params={"lr_schedule": "constant"})
    full = make(max_iter=4, **kw).fit(X, y)
    path = tmp_path / "run" / "ckpt.pt"
    make(max_iter=2, checkpoint_path=path, **kw).fit(X, y)
    assert path.exists() and os.listdir(path.parent) == ["ckpt.pt"]  # atomic, no temp left
    state = load_checkpoint(path)
    assert state["epoch"] == 2 and len(state["history"]) == 2
    assert {"model", "optimizer", "scaler", "numpy_rng", "torch_rng"} <= set(state)
    resumed = make(max_iter=4, checkpoint_path=str(path), warm_start=True, **kw).fit(X, y)
    assert resumed.n_iter_ == 4
    assert_same_params(params_of(full), params_of(resumed))
    assert without_seconds(full.history_) == without_seconds(resumed.history_)
    # in-memory warm start (no checkpoint path) is equivalent too
    est = make(max_iter=2, **kw).fit(X, y)
    est.set_params(max_iter=4, warm_start=True).fit(X, y)
    assert_same_params(params_of(full), params_of(est))
    # a checkpoint from other data is refused
    with pytest.raises(ValueError, match="other classes"):
        make(max_iter=4, checkpoint_path=path, warm_start=True, **kw).fit(X[y < 4], y[y < 4])


class _CountingLoss:
    """Multi-similarity loss that counts its calls and raises KeyboardInterrupt at one."""

    def __init__(self, interrupt_at=None):
        from skdml.losses import MultiSimilarityLoss

        self.loss, self.calls, self.interrupt_at = MultiSimilarityLoss(), 0, interrupt_at

    def __call__(self, z, labels):
        self.calls += 1
        if self.calls == self.interrupt_at:
            raise KeyboardInterrupt
        return self.loss(z, labels)


@pytest.mark.parametrize("schedule", ["cosine", "warmup_stable_decay"])
def test_interrupted_scheduled_fit_resumes_exactly(blobs, tmp_path, schedule):
    """Ctrl-C in epoch 3 of 4; resuming the checkpoint (same max_iter) gives the same model."""
    X, y = blobs
    kw = dict(backbone=functools.partial(tiny_mlp, dropout=0.3), validation_fraction=0.34,
              max_iter=4, optimizer_params={"lr_schedule": schedule})
    counting = _CountingLoss()
    full = make(loss=counting, **kw).fit(X, y)
    per_epoch = counting.calls // 4
    rates = [r["learning_rate"] for r in full.history_]
    if schedule == "cosine":
        assert rates[0] > rates[1] > rates[2] > rates[3] == 0.0  # cosine to 0 at max_iter
    else:  # the peak for 80 % of the steps (the cool-down starts in epoch 4), then 0
        assert rates[0] == rates[1] == rates[2] > rates[3] == 0.0
    path = tmp_path / "ckpt.pt"
    est = make(checkpoint_path=path, loss=_CountingLoss(2 * per_epoch + 1), **kw)
    with pytest.raises(KeyboardInterrupt):
        est.fit(X, y)
    assert not hasattr(est, "module_")  # the interrupted fit left no model
    assert load_checkpoint(path)["epoch"] == 2
    resumed = make(checkpoint_path=path, warm_start=True, loss=_CountingLoss(), **kw).fit(X, y)
    assert [r["learning_rate"] for r in resumed.history_] == pytest.approx(rates)
    assert without_seconds(resumed.history_) == without_seconds(full.history_)
    assert_same_params(params_of(full), params_of(resumed))


def test_a_resumed_fit_keeps_the_untrained_start_as_the_uninterrupted_one_does(tmp_path):
    # a run whose hold-out never beats its start returns the start (best_iteration_ = 0);
    # resumed after Ctrl-C, the start was lost (not saved) and epoch 1's network came back
    from skdml.callbacks import Callback

    rng = np.random.RandomState(0)
    y = np.repeat(np.arange(6), 12)
    X = (rng.randn(72, 6) + 2 * y[:, None] * rng.randn(1, 6)).astype(np.float32)
    kw = dict(n_components=3, max_iter=5, validation_fraction=0.34, early_stopping=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # here the start is unbeaten (best_iteration_ 0: held-out MAP@R 0.4632 against epoch
        # 1's 0.4621); another CPU's rounding may let an epoch win, and the resumed fit must
        # then return that epoch: what is compared is the uninterrupted fit's choice
        ref = fast(checkpoint_path=tmp_path / "a.ckpt", **kw).fit(X, y)

        class CtrlC(Callback):
            def on_epoch_end(self, estimator, info):
                if info.epoch == 2:
                    raise KeyboardInterrupt

        est = fast(checkpoint_path=tmp_path / "b.ckpt", callbacks=[CtrlC()], **kw)
        with pytest.raises(KeyboardInterrupt):
            est.fit(X, y)
        est.set_params(warm_start=True, callbacks=None).fit(X, y)
        assert est.best_iteration_ == ref.best_iteration_
        np.testing.assert_array_equal(est.transform(X), ref.transform(X))
        before, best = ref.transform(X), ref.best_iteration_
        ref.set_params(warm_start=True).fit(X, y)  # nothing left to train: nothing changes
        assert ref.best_iteration_ == best
        np.testing.assert_array_equal(ref.transform(X), before)


def test_a_warm_start_without_a_seed_leaves_numpy_global_generator_alone(blobs, tmp_path):
    # random_state=None: the fit's generator was numpy's global one, which a resumed run
    # set to the state read from the file (the same draws after every warm start)
    X, y = blobs
    path = tmp_path / "run.ckpt"
    make(max_iter=1, random_state=None, checkpoint_path=path).fit(X, y)
    draws = []
    for user_seed in (1, 2):
        np.random.seed(user_seed)
        expected = np.random.RandomState(user_seed)
        expected.randint(np.iinfo(np.int32).max)  # the one draw that seeds the fit's own
        make(max_iter=1 + user_seed, random_state=None, checkpoint_path=path,
             warm_start=True).fit(X, y)
        draws.append(np.random.rand(3))
        np.testing.assert_array_equal(draws[-1], expected.rand(3))
    assert not np.array_equal(*draws)


def test_resuming_with_another_optimiser_is_a_checkpoint_error(blobs, tmp_path):
    # torch loaded Adam's state into SGD (the first step failed with KeyError: 'momentum')
    # and into AdamW (silently)
    from skdml._training import CheckpointError, save_checkpoint

    X, y = blobs
    path = tmp_path / "run.ckpt"
    make(max_iter=1, checkpoint_path=path).fit(X, y)
    for other in ("sgd", "adamw"):
        with pytest.raises(CheckpointError, match=r"another optimiser wrote it \(Adam; this "):
            make(max_iter=2, checkpoint_path=path, warm_start=True, optimizer=other).fit(X, y)
    # a state saved before the class was kept: judged by its settings
    state = load_checkpoint(path)
    state.pop("optimizer_class")
    for group in state["optimizer"]["param_groups"]:
        group.pop("decoupled_weight_decay", None)  # what an older torch did not save
    save_checkpoint(path, state)
    with pytest.raises(CheckpointError, match=r"the settings \['amsgrad', 'betas'"):
        make(max_iter=2, checkpoint_path=path, warm_start=True, optimizer="sgd").fit(X, y)
    assert make(max_iter=2, checkpoint_path=path, warm_start=True).fit(X, y).n_iter_ == 2


def test_early_stopping_restores_best_weights(blobs):
    X, _ = blobs
    # noise labels: the validation score wanders (with seed 3 an epoch beats the untrained
    # network, so the best epoch, not the start, is returned; test_not_learning.py covers
    # the start kept when none does)
    y = np.random.RandomState(3).randint(0, 6, len(X))
    kw = dict(validation_fraction=0.34, learning_rate=3e-2, max_iter=12, n_classes_per_batch=3,
              optimizer_params={"lr_schedule": "constant"})  # one schedule whatever max_iter
    est = make(early_stopping=True, n_iter_no_change=1, **kw).fit(X, y)
    scores = [rec["validation_score"] for rec in est.history_]
    assert est.n_iter_ == len(scores) and est.n_iter_ < 12
    assert est.best_iteration_ < est.n_iter_
    assert est.best_validation_score_ == max(scores) == scores[est.best_iteration_ - 1]
    # the same run stopped at the best epoch has exactly the restored weights
    ref = make(**{**kw, "max_iter": est.best_iteration_}).fit(X, y)
    assert_same_params(params_of(ref), params_of(est))


def test_fitted_network_is_the_weight_average(blobs):
    """The average follows training without changing it, and is what fit keeps and validates."""
    X, y = blobs
    kw = dict(backbone=functools.partial(tiny_mlp, dropout=0.3), validation_fraction=0.34,
              max_iter=4)
    last = make(optimizer_params={"ema_epochs": None}, **kw).fit(X, y)
    averaged = make(**kw).fit(X, y)  # ema_epochs=5 by default
    for a, b in zip(last.history_, averaged.history_):
        assert {k: v for k, v in a.items() if k not in ("seconds", "validation_score")} == \
            {k: v for k, v in b.items() if k not in ("seconds", "validation_score")}
    # the trained weights are the same; the fitted network is their average
    raw_last, raw_averaged = (e._resume_state["model"] for e in (last, averaged))
    assert_same_params(raw_last, raw_averaged)
    assert_same_params(params_of(last), raw_last)
    assert_same_params(params_of(averaged), averaged._resume_state["average"]["model"])
    assert not torch.equal(params_of(averaged)["head.weight"], raw_averaged["head.weight"])
    # validation scores the average (not the last weights)
    assert [r["validation_score"] for r in averaged.history_] != \
        [r["validation_score"] for r in last.history_]
    assert not np.allclose(averaged.transform(X), last.transform(X))
    # ema_epochs=0 is the same as None
    assert_same_params(params_of(make(optimizer_params={"ema_epochs": 0}, **kw).fit(X, y)),
                       params_of(last))


def test_validation_splits(blobs):
    X, y = blobs
    # the one rule of every learner: whole classes from 5 classes up, samples of each below
    est = make(validation_fraction=0.3, max_iter=1).fit(X, y)
    train, val = est._resume_state["split"]
    assert not set(y[train]) & set(y[val])
    est = make(validation_fraction=0.3, max_iter=1).fit(X[y < 4], y[y < 4])
    train, val = est._resume_state["split"]
    assert set(y[val]) == set(y[train]) == {0, 1, 2, 3}
    assert 0.0 <= est.history_[0]["validation_score"] <= 1.0
    with pytest.raises(ValueError, match="at least 2 classes for training"):
        make(validation_fraction=0.7).fit(X[y < 5], y[y < 5])


def test_non_finite_loss_stops_with_step(blobs):
    X, y = blobs
    calls = {"n": 0}

    def nan_at_step_3(z, labels):
        calls["n"] += 1
        base = (z[:, 0] ** 2).mean()
        return base * float("nan") if calls["n"] == 3 else base

    est = make(loss=nan_at_step_3, loader_params={"batches_per_epoch": 4})
    with pytest.raises(NonFiniteLossError, match=r"epoch 1, step 3/"):
        est.fit(X, y)
    assert not hasattr(est, "module_")  # a failed fit leaves the estimator unfitted
    with pytest.raises(ValueError, match="Non-finite"):  # also a ValueError
        make(loss=lambda z, labels: z.sum() * float("inf")).fit(X, y)


def test_training_that_does_not_improve_says_so():
    X, y = zero_shot_vectors(per_class=8)
    with pytest.warns(UserWarning, match="did not improve on the untrained network"):
        fast(learning_rate=1e-12, max_iter=2, validation_fraction=0.2).fit(X, y)
    # the default: no validation set, so the epoch metric loss is watched; one batch of every
    # sample per epoch gives the same loss each epoch, up to the order of its sums
    X, y = zero_shot_vectors(n_classes=4, per_class=8)
    with pytest.warns(UserWarning, match="did not lower the metric loss after its first epoch"):
        fast(learning_rate=1e-12, max_iter=3, n_classes_per_batch=4, n_samples_per_class=8,
             loader_params={"batches_per_epoch": 1}).fit(X, y)
    X, y = zero_shot_vectors(per_class=20)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        fast(max_iter=5).fit(X, y)


class _EvalNaN(nn.Module):
    """Fine in training mode, NaN in evaluation mode (e.g. broken running statistics)."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(40, 8)

    def forward(self, x):
        out = self.linear(x)
        return out if self.training else out * float("nan")


class _HalveTheRate(Callback):
    """A hand-made plateau rule: halves every group's rate at each epoch's end."""

    def on_epoch_end(self, estimator, info):
        for group in info.optimizer.param_groups:
            group["lr"] *= 0.5


def test_history_records_the_rate_a_callback_set():
    """The rate the optimiser ran at (read from it), not the schedule's own value."""
    X, y = zero_shot_vectors(per_class=5)
    for params in ({"lr_schedule": "constant"},
                   {"lr_schedule": "constant", "head_lr_mult": 10.0}):
        est = fast(max_iter=3, early_stopping=False, learning_rate=2e-3, optimizer_params=params,
                   callbacks=[_HalveTheRate()]).fit(X, y)
        assert [r["learning_rate"] for r in est.history_] == pytest.approx([2e-3, 1e-3, 5e-4])


def test_backbone_nan_in_eval_mode_only_is_a_clear_error():
    X, y = zero_shot_vectors(per_class=5)
    with pytest.raises(ValueError, match="NaN or infinite embeddings.*evaluation mode"):
        fast(backbone=_EvalNaN(), max_iter=1).fit(X, y)


def test_cosine_schedule_and_constant():
    X, y = zero_shot_vectors(per_class=5)
    est = fast(max_iter=4, early_stopping=False, learning_rate=2e-3).fit(X, y)
    rates = [r["learning_rate"] for r in est.history_]
    assert rates[0] <= 2e-3 and rates == sorted(rates, reverse=True) and rates[-1] == 0.0
    const = fast(max_iter=3, early_stopping=False, learning_rate=2e-3,
                 optimizer_params={"lr_schedule": "constant"}).fit(X, y)
    # recorded at every rate, as history_'s docstring says (it was left out when constant)
    assert [r["learning_rate"] for r in const.history_] == pytest.approx([2e-3] * 3)
    groups = const._resume_state["optimizer"]["param_groups"]
    assert all(g["lr"] == pytest.approx(2e-3) for g in groups)


def test_a_resumed_fit_takes_the_current_rates_from_its_one_optimiser(blobs, monkeypatch):
    """warm_start: the optimiser state is resumed, the current learning_rate, head_lr_mult
    and weight_decay apply, and no second optimiser is built to read them."""
    import skdml.deep._trainer as trainer

    X, y = blobs
    est = make(loss="amsoftmax", max_iter=1, optimizer_params={"lr_schedule": "constant"})
    est.fit(X, y)
    built = []
    real = trainer.build_optimizer
    monkeypatch.setattr(trainer, "build_optimizer",
                        lambda *a, **k: built.append(k) or real(*a, **k))
    est.set_params(warm_start=True, max_iter=2, learning_rate=5e-4,
                   optimizer__weight_decay=0.03, optimizer__head_lr_mult=4.0)
    est.fit(X, y)
    assert len(built) == 1 and est.n_iter_ == 2
    groups = est._resume_state["optimizer"]["param_groups"]
    assert sorted(g["lr"] for g in groups) == pytest.approx([5e-4, 2e-3])
    assert all(g["weight_decay"] == 0.03 for g in groups)
    assert all(s["step"] > 0 for s in est._resume_state["optimizer"]["state"].values())


def test_the_backbone_is_built_once_per_fit_in_the_trainer(blobs):
    X, y = blobs
    calls = []

    def builder(shape):
        calls.append(shape)
        return tiny_mlp(shape)

    make(backbone=builder, max_iter=1).fit(X, y)
    assert calls == [(10,)]
    images = np.random.RandomState(0).rand(24, 1, 8, 8).astype(np.float32)
    est = fast(max_iter=1, n_components=3).fit(images, np.repeat(np.arange(4), 6))
    assert type(est.module_.backbone).__name__ == "ConvNet"  # the default one, built there too


def test_default_schedule_holds_the_peak_rate_then_decays_to_zero(blobs):
    """``warmup_stable_decay``: warm-up in epoch 1, the peak to 80 % of max_iter, then to 0."""
    X, y = blobs
    est = make(max_iter=10, optimizer_params={}).fit(X, y)
    assert est.optimizer_params is None or "lr_schedule" not in est.optimizer_params
    rates = [r["learning_rate"] for r in est.history_]
    # the rate after each epoch: the peak (epoch 1 ends warmed up) until the decay starts
    # after epoch 8 (the last 20 % of the steps), then 1 - sqrt(1/2) of it, then 0
    assert rates[:8] == pytest.approx([1e-3] * 8)
    assert rates[8:] == pytest.approx([1e-3 * (1 - 0.5 ** 0.5), 0.0])


@pytest.mark.parametrize("schedule, warns", [("warmup_stable_decay", False), ("cosine", False),
                                             ("constant", True)])
def test_reaching_max_iter_warns_only_where_the_rate_never_decayed(blobs, schedule, warns):
    """A decaying schedule ends as planned at max_iter; a constant rate is cut short there."""
    from sklearn.exceptions import ConvergenceWarning

    X, y = blobs
    est = make(max_iter=3, learning_rate=1e-2, optimizer_params={"lr_schedule": schedule})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est.fit(X, y)
    assert est.n_iter_ == 3
    cut_short = [w for w in caught if issubclass(w.category, ConvergenceWarning)
                 and "reached max_iter" in str(w.message)]
    assert bool(cut_short) == warns


def test_a_constant_rate_that_learns_nothing_is_not_called_cut_short(blobs):
    # "reached max_iter while still improving" was raised beside "did not lower the metric
    # loss": the two contradicted each other; only the second is true
    from sklearn.exceptions import ConvergenceWarning

    X, y = blobs
    est = make(max_iter=3, learning_rate=1e-12, optimizer_params={"lr_schedule": "constant"})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est.fit(X, y)
    assert not [w for w in caught if issubclass(w.category, ConvergenceWarning)]
    assert [w for w in caught if "did not lower the metric loss" in str(w.message)]


class _StopAt(Callback):
    """A time budget: stops the run after epoch ``epoch``."""

    def __init__(self, epoch):
        self.epoch = epoch

    def on_epoch_end(self, estimator, info):
        if info.epoch == self.epoch:
            info.stop("time budget")


def test_a_warm_start_trains_on_after_a_callback_stop_and_says_when_it_cannot(blobs):
    # a run stopped by a callback (a time budget) was treated as finished: warm_start
    # trained nothing towards the new max_iter, and said nothing
    X, y = blobs
    est = make(max_iter=5, callbacks=[_StopAt(2)]).fit(X, y)
    assert est.n_iter_ == 2
    est.set_params(warm_start=True, callbacks=None, max_iter=4).fit(X, y)
    assert est.n_iter_ == 4 and len(est.history_) == 4
    # early stopping ends a run for good: a warm start says it trains no further
    early = make(max_iter=30, validation_fraction=0.34, early_stopping=True,
                 n_iter_no_change=1, learning_rate=1e-9).fit(X, y)
    assert early.n_iter_ < 30
    with pytest.warns(UserWarning, match="hold-out score stopped improving; it trains no"):
        early.set_params(warm_start=True, max_iter=40).fit(X, y)
    assert early.n_iter_ < 30


def test_a_resume_that_does_not_match_says_what_differs(blobs, tmp_path):
    # one message ("other classes or input shapes") for two causes; a run trained without a
    # validation set, resumed with early stopping, was told to set validation_fraction
    X, y = blobs
    path = tmp_path / "run.ckpt"
    make(max_iter=1, checkpoint_path=path).fit(X, y)
    with pytest.raises(ValueError, match=r"trained on inputs of shape \(10,\).*\(8,\)"):
        make(max_iter=2, checkpoint_path=path, warm_start=True).fit(X[:, :8], y)
    with pytest.raises(ValueError, match=r"other classes \(\d+: 0, 1, 2"):
        make(max_iter=2, checkpoint_path=path, warm_start=True).fit(X[y < 4], y[y < 4])
    with pytest.raises(ValueError, match="was trained without one"):
        make(max_iter=2, checkpoint_path=path, warm_start=True, validation_fraction=0.3,
             early_stopping=True).fit(X, y)


def test_a_warm_start_that_switches_early_stopping_is_refused(blobs):
    # the saved stopper's best was taken for the new one's: switched on, a loss's best (its
    # sign flipped) lost to every score, so the last epoch was called the best; switched off,
    # a MAP@R of 0.77 was taken for the best loss and the run stopped while still learning
    from skdml._training import CheckpointError

    X, y = blobs
    kw = dict(validation_fraction=0.34, max_iter=2, optimizer_params={"lr_schedule": "constant"})
    for before, after in ((False, True), (True, False)):
        est = make(early_stopping=before, **kw).fit(X, y)
        with pytest.raises(CheckpointError, match=r"early stopping watched '(metric_loss|"
                           r"validation_score)'.*early_stopping\)"):
            est.set_params(warm_start=True, early_stopping=after, max_iter=4).fit(X, y)
        assert est.n_iter_ == 2  # the refused fit left the model as it was
    # the same setting resumes
    est.set_params(early_stopping=True).fit(X, y)
    assert est.n_iter_ == 4


def test_a_state_saved_before_the_watched_quantity_was_recorded_is_still_checked(blobs,
                                                                                 tmp_path):
    # a checkpoint of an older skdml has no "monitor": its loss-plateau stopper is told by the
    # first value it records (the review found such a file resumed with early stopping on)
    from skdml._training import CheckpointError, save_checkpoint

    X, y = blobs
    path = tmp_path / "old.ckpt"
    kw = dict(validation_fraction=0.34, optimizer_params={"lr_schedule": "constant"})
    make(max_iter=2, early_stopping=False, checkpoint_path=path, **kw).fit(X, y)
    state = load_checkpoint(path)
    for key in ("monitor", "sign"):
        state["stopper"].pop(key)
    save_checkpoint(path, state)
    with pytest.raises(CheckpointError, match="watched 'metric_loss'"):
        make(max_iter=4, early_stopping=True, checkpoint_path=path, warm_start=True,
             **kw).fit(X, y)
    assert make(max_iter=4, early_stopping=False, checkpoint_path=path, warm_start=True,
                **kw).fit(X, y).n_iter_ == 4


def test_a_warm_start_that_changes_what_the_optimiser_state_holds_is_refused(blobs):
    # RMSprop's centered (a mean gradient) or a momentum switched on failed inside torch at
    # the first step (KeyError: 'grad_avg', 'momentum_buffer')
    from skdml._training import CheckpointError

    X, y = blobs
    for change, key in (({"centered": True}, "centered"), ({"momentum": 0.9}, "momentum")):
        est = make(max_iter=1, optimizer=torch.optim.RMSprop,
                   optimizer_params={"lr_schedule": "constant"}).fit(X, y)
        params = {f"optimizer__{k}": v for k, v in change.items()}
        with pytest.raises(CheckpointError, match=f"{key}="):
            est.set_params(warm_start=True, max_iter=2, **params).fit(X, y)
        assert est.n_iter_ == 1


def test_a_callback_stopped_run_resumes_from_its_last_epoch_not_its_best(blobs):
    # the state kept for a warm start was taken after early stopping put the best epoch's
    # network back: the resumed run trained on from the best epoch's weights with the last
    # epoch's optimiser (unlike a resume from the checkpoint file)
    X, _ = blobs
    y = np.random.RandomState(3).randint(0, 6, len(X))  # a wandering validation score
    kw = dict(validation_fraction=0.34, learning_rate=3e-2, early_stopping=True,
              n_iter_no_change=20, max_iter=5, n_classes_per_batch=3,
              optimizer_params={"lr_schedule": "constant"})
    ref = make(**kw).fit(X, y)
    est = make(callbacks=[_StopAt(3)], **kw).fit(X, y)
    scores = [r["validation_score"] for r in est.history_]
    assert est.n_iter_ == 3 and est.best_iteration_ < 3, scores  # the case: best != last
    est.set_params(callbacks=None, warm_start=True).fit(X, y)
    assert [r["validation_score"] for r in est.history_] == \
        [r["validation_score"] for r in ref.history_]
    assert_same_params(params_of(ref), params_of(est))


def test_a_warm_start_uses_every_current_optimiser_setting(blobs):
    # torch's load_state_dict put the saved group settings back: changed betas and eps were
    # ignored (only lr and weight_decay were re-applied)
    from skdml._training import CheckpointError

    X, y = blobs
    est = make(max_iter=1, optimizer_params={"lr_schedule": "constant"}).fit(X, y)
    est.set_params(warm_start=True, max_iter=2, optimizer__betas=(0.5, 0.6),
                   optimizer__eps=1e-3).fit(X, y)
    groups = est._resume_state["optimizer"]["param_groups"]
    assert all(g["betas"] == (0.5, 0.6) and g["eps"] == 1e-3 for g in groups)
    # amsgrad changes what the state holds: refused by name
    with pytest.raises(CheckpointError, match="amsgrad=False, this fit has amsgrad=True"):
        est.set_params(max_iter=3, optimizer__amsgrad=True).fit(X, y)


@pytest.mark.parametrize("schedule", ["constant", "cosine"])
def test_history_learning_rate_is_the_learning_rate_whatever_the_first_group(schedule):
    # a user group at rate 0 came first in the optimiser: the column read 0.0
    rng = np.random.RandomState(0)
    y = np.repeat(np.arange(4), 10)
    X = rng.rand(40, 1, 8, 8).astype(np.float32)
    params = {"lr_schedule": schedule,
              "param_groups": [("backbone.blocks.0.*", {"lr": 0.0})]}
    plain = make(backbone=None, max_iter=3, learning_rate=1e-3,
                 optimizer_params={"lr_schedule": schedule}).fit(X, y)
    grouped = make(backbone=None, max_iter=3, learning_rate=1e-3,
                   optimizer_params=params).fit(X, y)
    rates = [r["learning_rate"] for r in grouped.history_]
    assert rates == pytest.approx([r["learning_rate"] for r in plain.history_])
    assert rates[0] > 0

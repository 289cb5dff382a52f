"""Callbacks of :func:`~skdml._training.train_epochs`: validation, early stopping, checkpoints, progress.

Each is one implementation shared by every minibatch learner:

* :class:`Validation` scores the model after each epoch (``validation_score``);
* :class:`EarlyStopping` stops when a monitored value has not improved by more
  than ``tol`` for ``n_iter_no_change`` epochs, remembers the best epoch and,
  with ``restore_best=True``, puts the best weights back at the end (the deep
  learner); without it the learner refits for ``best_epoch`` epochs (the
  linear learners, whose small classes cannot spare their held-out samples);
* :class:`Checkpoint` writes the training state after each epoch (a failed write
  warns and training goes on);
* :class:`Progress` shows a tqdm progress bar with an ETA and a per-epoch table.
"""

from __future__ import annotations

import math
import os

from .._utils._warnings import warn_user

__all__ = ["Callback", "Checkpoint", "EarlyStopping", "Progress", "Validation"]


class Callback:
    """Base class: every hook does nothing; ``state_dict`` is what a checkpoint keeps."""

    def on_train_begin(self, loop):
        """Called once before the first epoch."""

    def on_step_end(self, loop):
        """Called after every optimiser step."""

    def on_epoch_end(self, loop, record):
        """Called after every epoch, before ``record`` is stored (add entries to it here)."""

    def after_record(self, loop, record):
        """Called after the epoch's ``record`` is stored in the history."""

    def on_train_end(self, loop):
        """Called once when training ends normally."""

    def close(self):
        """Release resources; called even when training fails."""

    def state_dict(self):
        """The callback's state, saved in checkpoints."""
        return {}

    def load_state_dict(self, state):
        """Restore :meth:`state_dict`."""


class Validation(Callback):
    """Add ``record["validation_score"] = score_fn()`` after each epoch (model in eval mode).

    Parameters
    ----------
    score_fn : callable
        ``score_fn() -> float``, higher is better.
    """

    def __init__(self, score_fn):
        self.score_fn = score_fn

    def on_epoch_end(self, loop, record):
        record["validation_score"] = float(self.score_fn())


class EarlyStopping(Callback):
    """Stop when ``record[monitor]`` has not improved by more than ``tol`` for a while.

    Parameters
    ----------
    monitor : str, default="validation_score"
        The record entry to watch.
    greater_is_better : bool, default=True
        ``True`` for a score, ``False`` for a loss.
    n_iter_no_change : int, default=10
        Epochs without an improvement larger than ``tol`` before stopping.
    tol : float, default=1e-4
        Minimum improvement.
    restore_best : bool, default=False
        Load the state of the best epoch back at the end of training.
    min_progress : float, default=0.0
        A plateau counts only once learning has started: the monitored value
        must first improve on the first epoch's by more than this fraction of
        it (e.g. 0.05: a loss 5 % below its first epoch's). Before that, flat
        epochs are an initial plateau, not convergence, and training goes on
        (to ``max_iter`` if it never starts). 0: every plateau counts.

    Attributes
    ----------
    best_epoch : int or None
        The epoch of the best value; on a tie, the later epoch (trained longer).
    best_value : float
        The best value seen.

    Notes
    -----
    A NaN value (e.g. a validation score on a degenerate embedding) counts as
    no improvement and is never the best.

    Examples
    --------
    A loss flat for 12 epochs, then falling: with ``min_progress`` the flat
    start is not taken for convergence.

    >>> from types import SimpleNamespace
    >>> def run(stopper, losses):
    ...     loop = SimpleNamespace(epoch=0, stop_reason=None)
    ...     loop.stop = lambda reason: setattr(loop, "stop_reason", reason)
    ...     for loss in losses:
    ...         loop.epoch += 1
    ...         stopper.on_epoch_end(loop, {"loss": loss})
    ...         if loop.stop_reason:
    ...             return loop.epoch
    >>> losses = [0.93] * 12 + [0.9, 0.7, 0.5, 0.4, 0.35, 0.3]
    >>> run(EarlyStopping(monitor="loss", greater_is_better=False), losses)
    11
    >>> print(run(EarlyStopping(monitor="loss", greater_is_better=False, min_progress=0.05),
    ...           losses))
    None
    """

    stops_early = True  # the loop's max_iter is an upper bound (see Progress)

    def __init__(self, *, monitor="validation_score", greater_is_better=True,
                 n_iter_no_change=10, tol=1e-4, restore_best=False, min_progress=0.0):
        self.min_progress = float(min_progress)
        self.first = None  # the first epoch's value (min_progress)
        self.started = self.min_progress <= 0
        self.monitor = monitor
        self.sign = 1.0 if greater_is_better else -1.0
        self.n_iter_no_change = int(n_iter_no_change)
        self.tol = float(tol)
        self.restore_best = bool(restore_best)
        self.best = -math.inf
        self.best_epoch = None
        self.no_change = 0
        self.best_state = None

    @property
    def best_value(self):
        return self.sign * self.best if self.best_epoch is not None else math.nan

    def on_epoch_end(self, loop, record):
        value = record.get(self.monitor, math.nan)
        v = self.sign * value if math.isfinite(value) else -math.inf
        if not self.started and math.isfinite(v):
            if self.first is None:
                self.first = v
            self.started = v > self.first + self.min_progress * abs(self.first)
        self.no_change = 0 if v > self.best + self.tol or not self.started \
            else self.no_change + 1
        if math.isfinite(v) and v >= self.best:
            self.best, self.best_epoch = v, loop.epoch
            if self.restore_best:
                self.best_state = loop.trainable.state_dict()
        if self.no_change >= self.n_iter_no_change:
            loop.stop("no_improvement")

    def on_train_end(self, loop):
        if self.restore_best and self.best_state is not None:
            loop.trainable.load_state_dict(self.best_state)

    def state_dict(self):
        return {"best": self.best, "best_epoch": self.best_epoch, "no_change": self.no_change,
                "best_state": self.best_state, "first": self.first, "started": self.started,
                "monitor": self.monitor, "sign": self.sign}

    def load_state_dict(self, state):
        # another quantity's best (a loss's against a score's, or its sign flipped) would be
        # taken for this one's: every epoch would beat it, or none would (a state saved before
        # the quantity was recorded is taken as it is)
        watched = (state.get("monitor", self.monitor), state.get("sign", self.sign))
        if watched != (self.monitor, self.sign):
            def name(monitor, sign):
                return f"{monitor!r} ({'higher' if sign > 0 else 'lower'} is better)"
            raise ValueError(f"its early stopping watched {name(*watched)}, this fit's watches "
                             f"{name(self.monitor, self.sign)}")
        self.best, self.best_epoch = state["best"], state["best_epoch"]
        self.no_change, self.best_state = state["no_change"], state["best_state"]
        # checkpoints written before min_progress existed: learning counts as started
        self.first, self.started = state.get("first"), state.get("started", True)


class Checkpoint(Callback):
    """Write ``state_fn(loop)`` to ``path`` after each epoch (atomically, with a digest).

    A write that fails (disk full, folder removed or made read-only) does not
    stop training, which would lose the network: a
    :class:`~skdml._training.CheckpointWarning` names the path and the error,
    the next epochs try again, and the learner keeps what it learned. A second
    warning at the end says which epoch the file holds when the last write
    failed.

    Parameters
    ----------
    path : path-like
        The checkpoint file.
    state_fn : callable
        ``state_fn(loop) -> dict``, everything needed to resume.
    enabled : bool, default=True
        ``False`` makes it a no-op (e.g. on every rank but the first of a
        distributed job).

    Attributes
    ----------
    saved_epoch : int or None
        The epoch the file holds (``None`` before the first successful write).
    failed_epoch : int or None
        The last epoch whose write failed.
    """

    def __init__(self, path, state_fn, enabled=True):
        self.path, self.state_fn, self.enabled = path, state_fn, enabled
        self.saved_epoch = self.failed_epoch = self.error = None

    def after_record(self, loop, record):
        if not self.enabled:
            return
        from ._checkpoint import CheckpointWarning, save_checkpoint

        try:
            save_checkpoint(self.path, self.state_fn(loop))
        except OSError as exc:
            if self.failed_epoch is None:
                warn_user(
                    f"Could not write the checkpoint {os.fspath(self.path)!r} after epoch "
                    f"{loop.epoch} ({type(exc).__name__}: {exc}). Training goes on and the "
                    "fitted estimator keeps what it learns; the next epochs try the write again.",
                    CheckpointWarning)
            self.failed_epoch, self.error = loop.epoch, exc
        else:
            self.saved_epoch = loop.epoch

    def on_train_end(self, loop):
        if self.enabled and self.failed_epoch is not None and self.failed_epoch == loop.epoch:
            from ._checkpoint import CheckpointWarning

            held = f"epoch {self.saved_epoch}" if self.saved_epoch is not None else "nothing"
            warn_user(
                f"The checkpoint {os.fspath(self.path)!r} holds {held}, not the last epoch "
                f"({loop.epoch}): its last write failed ({type(self.error).__name__}: "
                f"{self.error}). The fitted estimator has every epoch, and "
                "a warm_start fit of it resumes from its last one.",
                CheckpointWarning)


class Progress(Callback):
    """A tqdm progress bar over the steps of the fit (with an ETA) and a per-epoch table.

    Parameters
    ----------
    verbose : int
        0: silent. 1: the bar and one table row per epoch.
    desc : str
        Label of the bar (the estimator's name).
    """

    def __init__(self, verbose, desc):
        self.verbose, self.desc = int(verbose), desc
        self.bar, self.header, self.start = None, None, 0

    def on_train_begin(self, loop):
        if self.verbose:
            from tqdm.auto import tqdm

            self.start = loop.epoch
            # with early stopping the total (max_iter's steps) is an upper bound, and so is
            # the ETA: the label says so
            desc = f"{self.desc} (at most)" if loop.may_stop_early else self.desc
            self.bar = tqdm(desc=desc, unit="step", leave=True, dynamic_ncols=True)

    def on_step_end(self, loop):
        if self.bar is None:
            return
        if self.bar.total is None and loop.n_batches:
            self.bar.total = (loop.max_iter - self.start) * loop.n_batches
            self.bar.refresh()
        self.bar.update(1)

    def after_record(self, loop, record):
        if self.bar is None:
            return
        keys = list(record)
        if self.header != keys:
            self.header = keys
            self.bar.write(" | ".join(f"{k:>16s}" for k in keys))
        self.bar.write(" | ".join(f"{v:16d}" if isinstance(v, int) else f"{v:16.6g}"
                                  for v in record.values()))
        self.bar.set_postfix(epoch=record["epoch"], loss=f"{record['loss']:.4g}")

    def on_train_end(self, loop):
        if self.bar is not None and loop.stop_reason:
            # the total was the most steps max_iter allows: a run that stops earlier ends its
            # bar at the steps it took, so the bar reaches its total
            self.bar.total = self.bar.n
            self.bar.refresh()
            self.bar.write(f"{self.desc}: stopped at epoch {loop.epoch} ({loop.stop_reason}).")

    def close(self):
        if self.bar is not None:
            self.bar.close()
            self.bar = None

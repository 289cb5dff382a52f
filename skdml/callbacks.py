"""Training callbacks: watch a fit, log it, or stop it on your own rule.

Pass a list of :class:`Callback` instances as ``callbacks=`` to a learner that
trains in epochs of minibatches (:class:`~skdml.DeepMetricTransformer`,
:class:`~skdml.ECAML`, :class:`~skdml.JRD`). Each hook receives the estimator
being fitted and a :class:`TrainingInfo`, a live view of the training loop:
the epoch, the step, the history so far, the network, and :meth:`TrainingInfo.stop`.

One ``fit`` may train more than once, and the hooks see every training:
``on_train_begin`` and ``on_train_end`` bracket each, and ``info.run`` names it.
ECAML and JRD with a hold-out train each candidate on it (``"candidate 'lmnn' on
the hold-out"``; the refit on all the data runs without the callbacks); the deep
learner trains again from the same start when a fit leaves the training classes
unseparated (``"collapse refit (...)"``, see ``collapse_refit_``). The fitted
model's record is the estimator's ``history_``.

Hooks run in the training process, between optimiser steps: keep
``on_batch_end`` cheap (``info.batch_loss`` is a tensor still on the training
device; ``float()`` on it waits for the device). A callback is called on every
epoch of the fit, including the epochs of a resumed (``warm_start``) fit, and
never after an error.

A pickled learner keeps its callbacks, like every other parameter, so a
``Pipeline(memory=...)`` cache hit or an estimator returned by a
``cross_validate(n_jobs=2)`` worker refits exactly as the original would. A fitted
learner saves them by value (``cloudpickle``, which scikit-learn's process pool
already uses): a callback class defined in a script (its ``__main__``) loads
without the script. Where the callbacks cannot be saved (they hold an open file,
say) the fitted model is saved with ``callbacks=None`` and a warning says so; where
a saved callback cannot be rebuilt (its class lives in a module that the loading
process cannot import) the model loads with ``callbacks=None`` and a warning names
the error: pass them again with ``set_params(callbacks=[...])`` to watch a refit
or a ``warm_start``. An unfitted learner is pickled as it is (a callback that
cannot be pickled fails there, before any training runs without it).

Examples
--------
Stop when the training loss falls below a threshold, and keep every epoch's record:

>>> import numpy as np
>>> from sklearn.datasets import load_digits
>>> from skdml import ECAML
>>> from skdml.callbacks import Callback
>>> class StopBelow(Callback):
...     def __init__(self, threshold):
...         self.threshold, self.seen = threshold, []
...     def on_epoch_end(self, estimator, info):
...         self.seen.append(info.epoch)
...         if info.record["loss"] < self.threshold:
...             info.stop("loss below threshold")
>>> X, y = load_digits(return_X_y=True)
>>> watcher = StopBelow(threshold=np.inf)   # stops after the first epoch
>>> est = ECAML(n_components=8, max_iter=20, early_stopping=False, callbacks=[watcher],
...             random_state=0).fit(X, y)
>>> watcher.seen, est.n_iter_
([1], 1)
"""

from __future__ import annotations

import contextvars
import copy
import inspect
import io
import pickle
import sys

import cloudpickle

from ._training import Callback as _LoopCallback
from ._utils import warn_user

__all__ = ["Callback", "TrainingInfo"]


#: Set while :meth:`CallbackStateMixin._copy` reads the state: the live callbacks stay in it.
_COPYING = contextvars.ContextVar("skdml_copying_callbacks", default=False)
#: The state's key of a fitted learner's callbacks, saved by value (bytes).
_SAVED = "_callbacks_pickle"


_OWNER = "skdml-callbacks-owner"


def _dump_callbacks(callbacks, owner):
    """``callbacks`` pickled by value; a reference to ``owner`` (a callback that keeps the
    estimator it watched) is a token, not a nested copy of the estimator."""
    buffer = io.BytesIO()

    class Pickler(cloudpickle.Pickler):
        def persistent_id(self, obj):
            return _OWNER if obj is owner else None

        def reducer_override(self, obj):
            # cloudpickle copies a file open for reading into the pickle (a StringIO once
            # loaded): an open file is not saved, as the module's notes say. An in-memory
            # log (StringIO, BytesIO) and the standard streams are no open files: they save
            if (isinstance(obj, io.IOBase) and not isinstance(obj, (io.StringIO, io.BytesIO))
                    and not any(obj is s for s in (sys.stdout, sys.stderr, sys.__stdout__,
                                                   sys.__stderr__))):
                raise pickle.PicklingError(f"an open file cannot be saved ({obj!r})")
            return super().reducer_override(obj)

    Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(callbacks)
    return buffer.getvalue()


def _load_callbacks(saved, owner):
    """The callbacks of :func:`_dump_callbacks`, their references to the estimator on ``owner``."""

    class Unpickler(pickle.Unpickler):
        def persistent_load(self, pid):
            if pid != _OWNER:
                raise pickle.UnpicklingError(f"unknown persistent id {pid!r}")
            return owner

    return Unpickler(io.BytesIO(saved)).load()


class CallbackStateMixin:
    """A fitted estimator pickles its callbacks by value (internal; see the module's notes).

    Fitted means holding a fitted attribute (a public name ending in ``_``), as
    scikit-learn's ``check_is_fitted`` reads it.
    """

    def __getstate__(self):
        state = super().__getstate__()
        callbacks = state.get("callbacks")
        fitted = any(k.endswith("_") and not k.startswith("_") for k in state)
        if callbacks is None or not fitted or _COPYING.get():
            return state
        try:
            saved = _dump_callbacks(callbacks, self)
        except Exception as exc:  # noqa: BLE001 (any pickling failure: the model still saves)
            warn_user(f"{type(self).__name__} is saved with callbacks=None: its callbacks "
                      f"cannot be pickled ({type(exc).__name__}: {exc}).")
            return dict(state, callbacks=None)
        return dict(state, callbacks=None, **{_SAVED: saved})

    def __setstate__(self, state):
        saved = state.get(_SAVED)
        if saved is not None:
            state = {k: v for k, v in state.items() if k != _SAVED}
            try:
                state["callbacks"] = _load_callbacks(saved, self)
            except Exception as exc:  # noqa: BLE001 (a class the loading process lacks)
                warn_user(f"{type(self).__name__} loads with callbacks=None: the callbacks it "
                          f"was saved with cannot be rebuilt here ({type(exc).__name__}: "
                          f"{exc}). Pass them again with set_params(callbacks=[...]) to "
                          "watch or stop a refit.")
        super().__setstate__(state)

    def _copy(self, memo=None):
        """A copy through the state (every ``__getstate__`` of the class), with the live
        callbacks: ``copy.copy`` and ``copy.deepcopy`` are not pickling."""
        new = type(self).__new__(type(self))
        if memo is not None:
            memo[id(self)] = new
        token = _COPYING.set(True)
        try:
            state = self.__getstate__()
        finally:
            _COPYING.reset(token)
        new.__setstate__(state if memo is None else copy.deepcopy(state, memo))
        return new

    def __copy__(self):
        return self._copy()

    def __deepcopy__(self, memo):
        return self._copy(memo)


class Callback:
    """Base class of training callbacks: override the hooks you need.

    Every hook receives ``(estimator, info)``: the estimator being fitted (its
    parameters; its fitted attributes are set only once ``fit`` returns) and
    the :class:`TrainingInfo` of the running fit. A hook's return value is
    ignored; call ``info.stop(reason)`` to end training after the current
    epoch.

    See Also
    --------
    TrainingInfo : What a hook can read, and how it stops training.

    Examples
    --------
    >>> from skdml.callbacks import Callback
    >>> class PrintLoss(Callback):
    ...     def on_epoch_end(self, estimator, info):
    ...         print(f"epoch {info.epoch}: loss {info.record['loss']:.3f}")
    >>> PrintLoss()
    PrintLoss()
    """

    def on_train_begin(self, estimator, info):
        """Called once, before the first epoch (``info.epoch`` is the epoch resumed from)."""

    def on_batch_end(self, estimator, info):
        """Called after every optimiser step (``info.step``, ``info.batch_loss``)."""

    def on_epoch_end(self, estimator, info):
        """Called after every epoch, once its record (``info.record``) is in the history."""

    def on_train_end(self, estimator, info):
        """Called once when training ends: the budget ran out or something stopped it
        (``info.stop_reason``: ``None`` for the budget, else the reason)."""

    def __repr__(self):
        return f"{type(self).__name__}()"


class TrainingInfo:
    """A live, read-only view of a running fit, passed to every :class:`Callback` hook.

    Built by the learners (users never construct one); its attributes are
    read-only.

    Attributes
    ----------
    epoch : int
        Epochs completed (the current epoch's number in ``on_epoch_end``).
    step : int
        Optimiser steps completed in the current epoch.
    n_batches : int or None
        Steps in an epoch, when known.
    max_iter : int
        The epoch budget.
    history : list of dict
        One record per completed epoch (``"epoch"``, ``"loss"``, the loss terms,
        ``"seconds"`` and, with validation, ``"validation_score"``).
    record : dict or None
        The last completed epoch's record.
    batch_loss : torch.Tensor or None
        The last step's training loss (detached, on the training device).
    model : torch.nn.Module or None
        The network being trained (the deep learner), else ``None``.
    optimizer : torch.optim.Optimizer
        The running optimiser. A hook may change its rates between steps
        (``optimizer.param_groups[i]["lr"]``); user hooks run after the
        learner's own schedule, so a rate set in ``on_batch_end`` is the one
        the next step uses. A decaying ``lr_schedule`` (the deep learner's
        default) sets every rate again after each step, so such a rate lasts one
        step; with ``lr_schedule="constant"`` it lasts until a hook changes it
        (a hand-made plateau rule). ``history_`` records the rate read from
        the optimiser.
    stop_reason : str or None
        Why training stopped, once it has (``"no_improvement"`` for early
        stopping, or the reason a callback gave).
    run : str
        Which training of the fit this is: ``"fit"``, a candidate on the
        hold-out, or a collapse refit (see the module's notes).

    Examples
    --------
    >>> from skdml.callbacks import TrainingInfo
    >>> TrainingInfo.stop.__doc__.splitlines()[0]
    'End training after the current epoch.'
    """

    def __init__(self, loop, run="fit"):
        self._loop, self._run = loop, run

    @property
    def run(self):
        return self._run

    @property
    def epoch(self):
        return self._loop.epoch

    @property
    def step(self):
        return self._loop.step + 1 if self._loop.batch_loss is not None else 0

    @property
    def n_batches(self):
        return self._loop.n_batches

    @property
    def max_iter(self):
        return self._loop.max_iter

    @property
    def history(self):
        return self._loop.history

    @property
    def record(self):
        return self._loop.history[-1] if self._loop.history else None

    @property
    def batch_loss(self):
        return self._loop.batch_loss

    @property
    def model(self):
        return getattr(self._loop.trainable, "net", None)

    @property
    def optimizer(self):
        return self._loop.optimizer

    @property
    def stop_reason(self):
        return self._loop.stop_reason

    def stop(self, reason="stopped by a callback"):
        """End training after the current epoch.

        Parameters
        ----------
        reason : str, default="stopped by a callback"
            Recorded as the stop reason (shown by ``verbose``).
        """
        if self._loop.stop_reason is None:
            self._loop.stop(str(reason))


class UserCallbacks(_LoopCallback):
    """Adapts the user's :class:`Callback` list to the training loop's hooks (internal)."""

    def __init__(self, estimator, callbacks, run="fit"):
        self.estimator, self.callbacks, self.run = estimator, list(callbacks or ()), run
        self.info = None

    def on_train_begin(self, loop):
        self.info = TrainingInfo(loop, self.run)
        for cb in self.callbacks:
            cb.on_train_begin(self.estimator, self.info)

    def on_step_end(self, loop):
        for cb in self.callbacks:
            cb.on_batch_end(self.estimator, self.info)

    def after_record(self, loop, record):
        for cb in self.callbacks:
            cb.on_epoch_end(self.estimator, self.info)

    def on_train_end(self, loop):
        for cb in self.callbacks:
            cb.on_train_end(self.estimator, self.info)


#: The hooks of :class:`Callback`, each called with ``(estimator, info)``.
_HOOKS = ("on_train_begin", "on_batch_end", "on_epoch_end", "on_train_end")


def check_callbacks(callbacks):
    """Validate a ``callbacks`` parameter; return a list (internal)."""
    if callbacks is None:
        return []
    if isinstance(callbacks, Callback):
        callbacks = [callbacks]
    callbacks = list(callbacks)
    for cb in callbacks:
        if not isinstance(cb, Callback):
            raise TypeError(
                "callbacks must be a list of skdml.callbacks.Callback instances; got "
                f"{type(cb).__name__} ({cb!r}). Subclass skdml.callbacks.Callback and "
                "override on_epoch_end (or the other hooks).")
        for hook in _HOOKS:  # an overridden hook must take (estimator, info): checked now,
            try:              # not after the first epoch of a fit
                inspect.signature(getattr(cb, hook)).bind(None, None)
            except TypeError as exc:
                raise TypeError(
                    f"{type(cb).__name__}.{hook} must take (estimator, info), as "
                    f"skdml.callbacks.Callback.{hook} does; {exc}.") from None
            except ValueError:  # no signature to read (a builtin): called as it is
                pass
    return callbacks


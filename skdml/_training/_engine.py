"""The one training loop of skdml: epochs of minibatches, for the linear and the deep learners.

:func:`train_epochs` is the only function in the package that steps a torch
optimiser over minibatches. A learner hands it a :class:`Trainable` (how to
compute a batch's loss, what to do after a step, how to save and restore its
state), an optimiser, a source of batches and callbacks
(:mod:`skdml._training._callbacks`: validation, early stopping, checkpoints,
progress). The loop itself owns two things every learner needs:

* the **non-finite guard**: a NaN or infinite objective raises
  :class:`NonFiniteLossError` naming the epoch, the step and the terms, before
  the update is applied. On the CPU the check is made at every step (a read
  of a CPU scalar costs nothing); on an accelerator it is deferred to the end
  of the epoch, so that the loop never waits for the device inside an epoch
  (the estimators discard the failed fit, see ``transactional fits`` in the
  user guide);
* the **per-epoch record** in ``history``: the mean of every loss term over
  the epoch's batches, read back from the device once per epoch, plus what
  the callbacks add (validation score, time).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

__all__ = ["NonFiniteLossError", "Trainable", "TrainingResult", "train_epochs"]


class NonFiniteLossError(ValueError, ArithmeticError):
    """Raised when the training objective becomes NaN or infinite."""


class Trainable:
    """What :func:`train_epochs` trains: subclass it, or duck-type its methods.

    ``batch_loss(batch)`` returns ``(total, terms)``: the scalar tensor to
    minimise and a dict of named scalar tensors logged per epoch (detached by
    the loop). ``after_step()`` runs after each optimiser step (e.g. a
    retraction onto a manifold). ``train(mode)`` switches training behaviour
    (dropout, batch norm). ``state_dict()`` / ``load_state_dict()`` snapshot
    and restore everything that training changes.
    """

    def batch_loss(self, batch):  # pragma: no cover - interface
        raise NotImplementedError

    def after_step(self):
        """Hook run after every optimiser step (default: nothing)."""

    def train(self, mode=True):
        """Switch to training (``True``) or evaluation (``False``) behaviour."""

    def state_dict(self):  # pragma: no cover - interface
        raise NotImplementedError

    def load_state_dict(self, state):  # pragma: no cover - interface
        raise NotImplementedError


@dataclass
class TrainingResult:
    """What a call of :func:`train_epochs` did.

    Attributes
    ----------
    history : list of dict
        One record per epoch (the epochs of earlier runs included when resuming).
    n_iter : int
        Epochs completed in total.
    stop_reason : str
        ``"max_iter"`` (the budget ran out), or the reason a callback stopped
        the loop (``"no_improvement"`` for early stopping).
    """

    history: list = field(default_factory=list)
    n_iter: int = 0
    stop_reason: str = "max_iter"


class _Loop:
    """State shared with the callbacks during :func:`train_epochs`."""

    def __init__(self, trainable, optimizer, max_iter, history, n_batches):
        self.trainable = trainable
        self.optimizer = optimizer
        self.max_iter = max_iter
        self.history = history
        self.n_batches = n_batches
        self.epoch = 0  # epochs completed
        self.step = 0  # steps completed in the current epoch
        self.stop_reason = None
        self.batch_loss = None  # the last step's loss (detached, on the device)
        self.may_stop_early = False

    def stop(self, reason):
        """Ask the loop to stop after the current epoch."""
        self.stop_reason = reason


class _Guard:
    """Non-finite check: immediate on the CPU, once per epoch on an accelerator."""

    def __init__(self, device):
        self.deferred = torch.device(device).type != "cpu"
        self.first_bad = None

    def check(self, total, terms, epoch, step, n_batches):
        finite = torch.isfinite(total.detach())
        if not self.deferred:
            if not bool(finite):
                _raise_non_finite(float(total.detach()), terms, epoch, step + 1, n_batches)
            return
        # device-side bookkeeping only: the step number of the first bad step
        step_t = torch.full_like(finite, step + 1, dtype=torch.int64)
        bad_here = torch.where(finite, torch.zeros_like(step_t), step_t)
        if self.first_bad is None:
            self.first_bad = bad_here
        else:
            self.first_bad = torch.where(self.first_bad > 0, self.first_bad, bad_here)

    def end_epoch(self, epoch, sums, n_done, n_batches):
        if self.first_bad is None:
            return
        bad, self.first_bad = int(self.first_bad), None
        if bad:
            means = {k: float(v) / max(n_done, 1) for k, v in sums.items()}
            _raise_non_finite(float("nan"), means, epoch, bad, n_batches, exact=False)


def _raise_non_finite(value, terms, epoch, step, n_batches, exact=True):
    parts = ", ".join(f"{k}={float(v.detach()) if torch.is_tensor(v) else float(v):.4g}"
                      for k, v in terms.items())
    what = f"({value}) at epoch {epoch}, step {step}/{n_batches}" if exact else \
        f"at epoch {epoch}, first at step {step}/{n_batches} (epoch means: {parts})"
    detail = f" ({parts})" if exact and parts else ""
    raise NonFiniteLossError(
        f"Non-finite training loss {what}{detail}. Training stopped; the fit is discarded "
        "(a checkpoint, if any, holds the last complete epoch). Lower the learning rate, "
        "or check the data and the loss.")


def train_epochs(trainable, optimizer, batches, *, max_iter, callbacks=(), start_epoch=0,
                 history=None, grad_scaler=None, device="cpu"):
    """Train ``trainable`` for epochs ``start_epoch + 1 .. max_iter`` or until a callback stops.

    Parameters
    ----------
    trainable : Trainable
        What to train.
    optimizer : torch.optim.Optimizer
        Steps the trainable's parameters.
    batches : callable
        ``batches(epoch)`` returns the iterable of the epoch's batches (given to
        ``trainable.batch_loss``); ``len()`` of it, when defined, sizes the
        progress bar.
    max_iter : int
        Last epoch (a budget, counted from the first epoch of all runs).
    callbacks : sequence of Callback, default=()
        Called in order (``on_train_begin``, ``on_step_end``, ``on_epoch_end``
        before the epoch's record is stored, ``after_record`` after, and
        ``on_train_end``; ``close`` always, even on an error); a callback stops
        the loop with ``loop.stop(reason)``.
    start_epoch : int, default=0
        Epochs already done (resuming).
    history : list of dict, default=None
        Records of the epochs already done (resuming); appended to.
    grad_scaler : torch.amp.GradScaler, default=None
        For fp16 mixed precision: scale, step and update around the optimiser.
    device : str or torch.device, default="cpu"
        Where the loss lives (decides when the non-finite check reads it back).

    Returns
    -------
    result : TrainingResult

    Raises
    ------
    NonFiniteLossError
        When the objective is NaN or infinite.

    Examples
    --------
    >>> import torch
    >>> class Mean(Trainable):
    ...     def __init__(self):
    ...         self.w = torch.zeros(1, requires_grad=True)
    ...     def batch_loss(self, batch):
    ...         loss = ((batch - self.w) ** 2).mean()
    ...         return loss, {"loss": loss}
    ...     def state_dict(self):
    ...         return {"w": self.w.detach().clone()}
    >>> model = Mean()
    >>> data = torch.tensor([1.0, 2.0, 3.0])
    >>> result = train_epochs(model, torch.optim.SGD([model.w], lr=0.5),
    ...                       lambda epoch: [data], max_iter=30)
    >>> result.n_iter, result.stop_reason, round(model.w.item(), 3)
    (30, 'max_iter', 2.0)
    """
    history = [] if history is None else history
    callbacks = list(callbacks)
    loop = _Loop(trainable, optimizer, max_iter, history, None)
    # a callback that can stop the run before max_iter (the progress bar's total is a bound)
    loop.may_stop_early = any(getattr(cb, "stops_early", False) for cb in callbacks)
    loop.epoch = start_epoch
    guard = _Guard(device)
    for cb in callbacks:
        cb.on_train_begin(loop)
    try:
        for epoch in range(start_epoch + 1, max_iter + 1):
            if loop.stop_reason is not None:
                break
            epoch_batches = batches(epoch)
            loop.n_batches = len(epoch_batches) if hasattr(epoch_batches, "__len__") else None
            trainable.train(True)
            t0 = time.perf_counter()
            sums, n_done = {}, 0
            for step, batch in enumerate(epoch_batches):
                loop.step = step
                total, terms = trainable.batch_loss(batch)
                if not isinstance(total, torch.Tensor) or total.ndim != 0:
                    raise TypeError(
                        "The training objective must be a scalar torch.Tensor (e.g. a loss "
                        "reduced with mean or sum); got "
                        + (f"a tensor of shape {tuple(total.shape)}"
                           if isinstance(total, torch.Tensor) else type(total).__name__)
                        + ". Check the loss callable.")
                guard.check(total, terms, epoch, step, loop.n_batches)
                optimizer.zero_grad(set_to_none=True)
                if grad_scaler is not None and grad_scaler.is_enabled():
                    grad_scaler.scale(total).backward()
                    grad_scaler.step(optimizer)
                    grad_scaler.update()
                else:
                    total.backward()
                    optimizer.step()
                trainable.after_step()
                for key, value in (("loss", total), *terms.items()):
                    value = value.detach()
                    sums[key] = sums[key] + value if key in sums else value.clone()
                n_done += 1
                loop.batch_loss = total.detach()
                for cb in callbacks:
                    cb.on_step_end(loop)
            guard.end_epoch(epoch, sums, n_done, loop.n_batches)
            trainable.train(False)
            record = {"epoch": epoch}
            record.update({k: float(v) / max(n_done, 1) for k, v in sums.items()})
            loop.epoch = epoch
            for cb in callbacks:
                cb.on_epoch_end(loop, record)
            record["seconds"] = time.perf_counter() - t0
            history.append(record)
            for cb in callbacks:
                cb.after_record(loop, record)
        for cb in callbacks:
            cb.on_train_end(loop)
    finally:
        trainable.train(False)
        for cb in callbacks:
            cb.close()
    return TrainingResult(history=history, n_iter=loop.epoch,
                          stop_reason=loop.stop_reason or "max_iter")

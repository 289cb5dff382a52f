"""Learning-rate schedules of the minibatch learners (torch schedulers, stepped per batch)."""

from __future__ import annotations

import math

import torch

from ._callbacks import Callback

__all__ = ["LRSchedule", "warmup_cosine", "warmup_stable_decay"]


def _lambda_lr(optimizer, factor, steps_done):
    """``LambdaLR(optimizer, factor)`` positioned after ``steps_done`` steps (resuming)."""
    if steps_done:
        for group in optimizer.param_groups:
            group["initial_lr"] = group["lr"]
    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor, last_epoch=steps_done - 1)


def warmup_cosine(optimizer, n_steps, n_warmup, steps_done=0):
    """A ``torch.optim.lr_scheduler.LambdaLR``: linear warm-up, then cosine decay to 0.

    The factor of step ``s`` (0-based) is ``(s + 1) / n_warmup`` during the
    warm-up, then ``(1 + cos(pi * t)) / 2`` with ``t`` the fraction of the
    remaining steps done. Each group's base rate is its ``lr`` when the
    schedule is built (``initial_lr`` when resuming after ``steps_done`` steps).

    Parameters
    ----------
    optimizer : torch.optim.Optimizer
    n_steps : int
        Steps of the whole training (the rate reaches 0 there).
    n_warmup : int
        Steps of the warm-up.
    steps_done : int, default=0
        Steps already taken (resuming); the groups' ``lr`` are their base rates.

    Returns
    -------
    scheduler : torch.optim.lr_scheduler.LambdaLR

    Examples
    --------
    >>> import torch
    >>> opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)
    >>> schedule = warmup_cosine(opt, n_steps=10, n_warmup=2)
    >>> opt.param_groups[0]["lr"]  # the rate of step 0 (the training loop steps both)
    0.5
    >>> [round(schedule.lr_lambdas[0](step), 3) for step in range(10)]
    [0.5, 1.0, 1.0, 0.962, 0.854, 0.691, 0.5, 0.309, 0.146, 0.038]
    """
    n_steps, n_warmup = max(int(n_steps), 1), max(int(n_warmup), 0)

    def factor(step):
        if step < n_warmup:
            return (step + 1) / n_warmup
        progress = min((step - n_warmup) / max(n_steps - n_warmup, 1), 1.0)
        return 0.5 * (1.0 + math.cos(math.pi * progress))

    return _lambda_lr(optimizer, factor, steps_done)


def warmup_stable_decay(optimizer, n_steps, n_warmup, n_decay, steps_done=0):
    """A ``torch.optim.lr_scheduler.LambdaLR``: warm-up, a constant rate, then a short decay to 0.

    The warm-up-stable-decay schedule (Hu et al., 2024, "MiniCPM"; Hägele et al., 2024,
    "Scaling laws and compute-optimal training beyond fixed training durations"): the
    factor of step ``s`` (0-based) is ``(s + 1) / n_warmup`` during the warm-up, then 1,
    then ``1 - sqrt(t)`` over the last ``n_decay`` steps, with ``t`` the fraction of them
    done (the "1 - sqrt" cool-down that Hägele et al. found to match a cosine schedule).
    Unlike a cosine decay, the rate stays at its peak until the cool-down, so a run that an
    early-stopping rule ends before the cool-down has trained at the full rate throughout.

    Parameters
    ----------
    optimizer, n_steps, n_warmup, steps_done
        As in :func:`warmup_cosine`.
    n_decay : int
        Steps of the final decay (at most ``n_steps - n_warmup``).

    Returns
    -------
    scheduler : torch.optim.lr_scheduler.LambdaLR

    Examples
    --------
    >>> import torch
    >>> sgd = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)
    >>> schedule = warmup_stable_decay(sgd, n_steps=10, n_warmup=2, n_decay=4)
    >>> [round(schedule.lr_lambdas[0](step), 3) for step in range(10)]
    [0.5, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.5, 0.293, 0.134]
    """
    n_steps, n_warmup = max(int(n_steps), 1), max(int(n_warmup), 0)
    n_decay = min(max(int(n_decay), 0), max(n_steps - n_warmup, 0))
    decay_start = n_steps - n_decay

    def factor(step):
        if step < n_warmup:
            return (step + 1) / n_warmup
        if step < decay_start:
            return 1.0
        return 1.0 - math.sqrt(min((step - decay_start) / max(n_decay, 1), 1.0))

    return _lambda_lr(optimizer, factor, steps_done)


class LRSchedule(Callback):
    """Step a torch learning-rate scheduler after every optimiser step.

    Adds ``learning_rate`` to each epoch's record: the rate the optimiser holds at the end
    of the epoch (after its last scheduler step), read from it, so that a rate a callback
    set is the one recorded. With ``base_rate``, the rate of the parameters that no group
    scales: the first group's rate times ``base_rate`` over that group's peak rate (its rate
    when the schedule was built; with ``param_groups`` or ``head_lr_mult`` it may be
    another); without, the first group's rate. With ``scheduler=None`` (a constant rate)
    it only records it.
    """

    def __init__(self, scheduler=None, base_rate=None):
        self.scheduler = scheduler
        self.base_rate = base_rate

    def on_train_begin(self, loop):
        self._peak = self._peak_of(loop.optimizer.param_groups[0])

    def _peak_of(self, group):
        # LambdaLR keeps the peak as "initial_lr"; a constant rate is its own peak
        return float(group.get("initial_lr", group["lr"]) if self.scheduler is not None
                     else group["lr"])

    def on_step_end(self, loop):
        if self.scheduler is not None:
            self.scheduler.step()

    def on_epoch_end(self, loop, record):
        group = loop.optimizer.param_groups[0]
        rate = float(group["lr"])
        if not hasattr(self, "_peak"):  # stepped without on_train_begin
            self._peak = self._peak_of(group)
        if self.base_rate is not None and self._peak != float(self.base_rate):
            rate = float(self.base_rate) * (rate / self._peak) if self._peak > 0 \
                else float(self.base_rate) * self._scheduled_factor()
        record["learning_rate"] = rate

    def _scheduled_factor(self):
        """The schedule's factor of the next step (1 for a constant rate)."""
        if self.scheduler is None:
            return 1.0
        return float(self.scheduler.lr_lambdas[0](self.scheduler.last_epoch))

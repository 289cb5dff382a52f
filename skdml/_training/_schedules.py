"""Learning-rate schedules of the minibatch learners (torch schedulers, stepped per batch)."""

from __future__ import annotations

import math

import torch

from ._callbacks import Callback

__all__ = ["LRSchedule", "WarmupCosine", "warmup_cosine"]


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
    if steps_done:
        for group in optimizer.param_groups:
            group["initial_lr"] = group["lr"]
    return torch.optim.lr_scheduler.LambdaLR(optimizer, WarmupCosine(n_steps, n_warmup),
                                             last_epoch=steps_done - 1)


def _half_cosine(progress):
    return 0.5 * (1.0 + math.cos(math.pi * min(max(progress, 0.0), 1.0)))


class WarmupCosine:
    """The factor of :func:`warmup_cosine` at a step; :meth:`cool_down` shortens its decay.

    Examples
    --------
    >>> factor = WarmupCosine(n_steps=10, n_warmup=2)
    >>> [round(factor(s), 3) for s in (0, 1, 5, 10)]
    [0.5, 1.0, 0.691, 0.0]
    >>> factor.cool_down(start=5, n_steps=2)  # from step 5, reach 0 at step 7
    >>> [round(factor(s), 3) for s in (4, 5, 6, 7, 9)]
    [0.854, 0.691, 0.346, 0.0, 0.0]
    """

    def __init__(self, n_steps, n_warmup):
        self.n_steps, self.n_warmup = max(int(n_steps), 1), max(int(n_warmup), 0)
        self.cooling = None  # (first step, its factor, steps to 0)

    def planned(self, step):
        """The factor of the warm-up + cosine plan, without a cool-down."""
        if step < self.n_warmup:
            return (step + 1) / self.n_warmup
        return _half_cosine((step - self.n_warmup) / max(self.n_steps - self.n_warmup, 1))

    def cool_down(self, start, n_steps):
        """From step ``start``, decay the factor of that step to 0 over ``n_steps`` steps."""
        start, n_steps = int(start), max(int(n_steps), 1)
        self.cooling = (start, self.planned(start), n_steps)

    def __call__(self, step):
        if self.cooling is not None and step >= self.cooling[0]:
            start, value, n_steps = self.cooling
            return value * _half_cosine((step - start) / n_steps)
        return self.planned(step)


class LRSchedule(Callback):
    """Step a torch learning-rate scheduler after every optimiser step.

    Adds ``learning_rate`` (of the first parameter group, at the end of the
    epoch) to each epoch's record.
    """

    def __init__(self, scheduler):
        self.scheduler = scheduler

    def cool_down(self, start_epoch, n_epochs, n_batches):
        """Decay the rate to 0 over ``n_epochs`` epochs from the end of epoch ``start_epoch``.

        Only a :class:`WarmupCosine` plan can be shortened; the rates of the
        next step are set from the new plan at once. Returns whether it could.
        """
        factors = getattr(self.scheduler, "lr_lambdas", [])
        if not factors or not all(isinstance(f, WarmupCosine) for f in factors):
            return False
        start = int(start_epoch) * int(n_batches)
        for factor in factors:
            factor.cool_down(start, int(n_epochs) * int(n_batches))
        step = self.scheduler.last_epoch  # the index of the next step
        for group, base, factor in zip(self.scheduler.optimizer.param_groups,
                                       self.scheduler.base_lrs, factors):
            group["lr"] = base * factor(step)
        return True

    def on_step_end(self, loop):
        self.scheduler.step()

    def on_epoch_end(self, loop, record):
        record["learning_rate"] = float(loop.optimizer.param_groups[0]["lr"])

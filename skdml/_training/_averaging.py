"""An exponential moving average (EMA) of a network's weights, updated after every step.

The update is the one of PyTorch's ``get_ema_multi_avg_fn`` (one
``torch._foreach_lerp_`` over parameters *and* buffers, so batch-norm statistics
are averaged too). :class:`torch.optim.swa_utils.AveragedModel` itself is not
used: it keeps its step counter in a tensor that every update compares and
copies to the device, a host-device synchronisation per step on a GPU. Here the
counter and the decay stay on the host.
"""

from __future__ import annotations

import copy

import torch

__all__ = ["WeightAverage"]

#: The decay of step ``t`` is at most ``(1 + t) / (WARMUP_OFFSET + t)`` (TensorFlow's
#: ``ExponentialMovingAverage(num_updates=t)`` rule): the average then covers about
#: the last tenth of the steps taken so far, so a short fit is not averaged with its
#: untrained start.
WARMUP_OFFSET = 10


class WeightAverage:
    """EMA of ``module``'s parameters and buffers with a horizon of ``horizon`` steps.

    After step ``t`` (counted from 1) the average ``A`` becomes
    ``decay_t * A + (1 - decay_t) * W`` with
    ``decay_t = min(1 - 1 / horizon, (1 + t) / (10 + t))``; the first update
    copies ``W``. The first term is the steady decay, whose mean age is about
    ``horizon`` steps; the second keeps the early average on recent weights.
    Integer buffers (batch norm's ``num_batches_tracked``) are copied.

    Parameters
    ----------
    module : torch.nn.Module
        The network being trained; it is deep-copied (on its device).
    horizon : float
        Steps; at least 1 (``1`` keeps the last weights).

    Examples
    --------
    >>> import torch
    >>> net = torch.nn.Linear(1, 1, bias=False)
    >>> average = WeightAverage(net, horizon=4)
    >>> for value in (1.0, 2.0, 3.0):
    ...     _ = net.weight.data.fill_(value)
    ...     average.update(net)
    >>> [round(average.decay(t), 4) for t in (2, 3)]  # warm-up: below 1 - 1/4
    [0.25, 0.3077]
    >>> round(average.module.weight.item(), 4)  # 1 (a copy), then 1.75, then 2.6154
    2.6154
    """

    def __init__(self, module, horizon):
        if not horizon >= 1:
            raise ValueError(f"The averaging horizon must be at least 1 step, got {horizon}.")
        self.horizon = float(horizon)
        self.steps = 0
        #: The averaged copy of the network (an ``nn.Module`` like the original).
        self.module = copy.deepcopy(module)
        averaged = self._tensors(self.module)
        # which tensors are averaged and which (integer counters) are copied: fixed, so
        # sorted once here rather than at every step
        self._is_float = [t.is_floating_point() for t in averaged]
        self._floats = [t for t, is_float in zip(averaged, self._is_float) if is_float]
        self._counters = [t for t, is_float in zip(averaged, self._is_float) if not is_float]

    def decay(self, step):
        """The decay applied at ``step`` (counted from 1)."""
        return min(1.0 - 1.0 / self.horizon, (1.0 + step) / (WARMUP_OFFSET + step))

    @staticmethod
    def _tensors(module):
        return [t.detach() for t in (*module.parameters(), *module.buffers())]

    @torch.no_grad()
    def update(self, module):
        """Average in ``module``'s current weights (after an optimiser step)."""
        self.steps += 1
        current = self._tensors(module)
        floats = [c for c, is_float in zip(current, self._is_float) if is_float]
        counters = [c for c, is_float in zip(current, self._is_float) if not is_float]
        if counters:  # num_batches_tracked: the network's own
            torch._foreach_copy_(self._counters, counters)
        if self.steps == 1:
            torch._foreach_copy_(self._floats, floats)
        else:
            torch._foreach_lerp_(self._floats, floats, 1.0 - self.decay(self.steps))

    def state_dict(self):
        return {"model": {k: v.detach().clone() for k, v in self.module.state_dict().items()},
                "steps": self.steps}

    def load_state_dict(self, state):
        self.module.load_state_dict(state["model"])
        self.steps = int(state["steps"])

"""One thread policy for every skdml fit, transform and score.

Three rules, applied by :func:`thread_limits` to both torch's intra-op pool and
the BLAS pools (through threadpoolctl, a scikit-learn dependency):

1. **An explicit override wins.** ``SKDML_NUM_THREADS=n`` in the environment
   fixes the thread count of every skdml computation.
2. **Respect the joblib budget.** Inside a joblib/loky worker
   (``GridSearchCV(n_jobs=2)``, ``cross_val_score``), joblib tells the worker its
   share of the cores through ``OMP_NUM_THREADS`` & co; the budget never
   exceeds it, nor what torch was already told (``torch.set_num_threads``).
3. **Small steps run on one thread.** A step below :data:`SMALL_STEP_FLOPS`
   floating-point operations is over before a second thread pays for its
   start-up; on a loaded 2-core machine, two OpenMP threads spin-waiting on each
   other made tiny steps 10-30x slower than one thread (a default deep fit on
   digits: 97.7 s with 2 threads against 7.2 s with 1).
"""

from __future__ import annotations

import os
from contextlib import contextmanager

import torch
from joblib import cpu_count
from threadpoolctl import threadpool_limits

__all__ = ["ENV_OVERRIDE", "SMALL_STEP_FLOPS", "choose_n_threads", "thread_budget",
           "thread_limits"]

#: Environment variable fixing the thread count of every skdml computation.
ENV_OVERRIDE = "SKDML_NUM_THREADS"
#: Environment variables through which joblib's loky workers get ``cpu_count // n_jobs``.
_THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
#: Floating-point operations per step below which one thread is used (about 10 ms on one core).
SMALL_STEP_FLOPS = 1e9


def _positive_int(value):
    try:
        return max(int(value), 1)
    except (TypeError, ValueError):
        return None


def _override():
    value = os.environ.get(ENV_OVERRIDE)
    if value is None or not value.strip():
        return None
    n = _positive_int(value)
    if n is None:
        raise ValueError(f"{ENV_OVERRIDE}={value!r} is not a positive integer.")
    return n


def thread_budget() -> int:
    """Threads this process may use: the override, else the joblib worker's share.

    Outside a joblib worker the budget is the number of usable cores, capped by
    what torch was already told (``torch.set_num_threads``).

    Returns
    -------
    n_threads : int
        At least 1.

    Examples
    --------
    >>> thread_budget() >= 1
    True
    """
    override = _override()
    if override is not None:
        return override
    budget = min(cpu_count(only_physical_cores=False), torch.get_num_threads())
    for var in _THREAD_VARS:
        value = os.environ.get(var)
        if value:
            n = _positive_int(value)
            if n is not None:
                budget = min(budget, n)
    return max(budget, 1)


def choose_n_threads(flops_per_step=None) -> int:
    """Threads for a computation of ``flops_per_step`` operations per step.

    Parameters
    ----------
    flops_per_step : float, default=None
        Estimated floating-point operations of one step (a batch's forward and
        backward pass, one objective evaluation). ``None``: unknown, use the
        budget.

    Returns
    -------
    n_threads : int
        The override if set; else 1 for a step below :data:`SMALL_STEP_FLOPS`;
        else :func:`thread_budget`.

    Examples
    --------
    >>> choose_n_threads(1e6)
    1
    """
    override = _override()
    if override is not None:
        return override
    if flops_per_step is not None and flops_per_step < SMALL_STEP_FLOPS:
        return 1
    return thread_budget()


@contextmanager
def thread_limits(n_threads=None, *, flops_per_step=None):
    """Limit torch's intra-op threads and the BLAS pools for a block, then restore them.

    Parameters
    ----------
    n_threads : int, default=None
        Threads to use. ``None`` applies :func:`choose_n_threads` to
        ``flops_per_step``.
    flops_per_step : float, default=None
        Work per step, see :func:`choose_n_threads`.

    Yields
    ------
    n_threads : int
        The thread count in force inside the block.

    Examples
    --------
    >>> import torch
    >>> before = torch.get_num_threads()
    >>> with thread_limits(1) as n:
    ...     n, torch.get_num_threads()
    (1, 1)
    >>> torch.get_num_threads() == before
    True
    """
    wanted = choose_n_threads(flops_per_step) if n_threads is None else max(int(n_threads), 1)
    previous = torch.get_num_threads()
    if wanted != previous:
        torch.set_num_threads(wanted)
    try:
        with threadpool_limits(limits=wanted, user_api="blas"):
            yield wanted
    finally:
        if torch.get_num_threads() != previous:
            torch.set_num_threads(previous)

"""Small helpers shared by every torch-based estimator: threads, devices, seeds."""

from __future__ import annotations

import os
from contextlib import contextmanager

import numpy as np
import torch
from joblib import cpu_count

__all__ = ["torch_threads", "thread_budget", "resolve_device", "torch_seed", "as_float_tensor"]

# Environment variables that joblib's loky workers set to cpu_count // n_jobs.
_THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def thread_budget() -> int:
    """Number of threads this process may use for torch's intra-op pool.

    Inside a joblib/loky worker (``GridSearchCV(n_jobs=2)``, ``cross_val_score``)
    joblib sets ``OMP_NUM_THREADS`` to ``cpu_count() // n_jobs``; we honour it so
    that two workers on two cores do not each start two threads (which was
    measured 40x slower than one process). Outside a worker the budget is the
    number of usable cores, capped by whatever torch was already told.
    """
    budget = min(cpu_count(only_physical_cores=False), torch.get_num_threads())
    for var in _THREAD_VARS:
        value = os.environ.get(var)
        if value:
            try:
                budget = min(budget, int(value))
            except ValueError:
                continue
    return max(budget, 1)


@contextmanager
def torch_threads(n_threads: int | None = None):
    """Limit torch's intra-op threads for the duration of a fit, then restore.

    Parameters
    ----------
    n_threads : int, default=None
        Threads to use. ``None`` uses :func:`thread_budget`.
    """
    previous = torch.get_num_threads()
    wanted = thread_budget() if n_threads is None else max(int(n_threads), 1)
    if wanted != previous:
        torch.set_num_threads(wanted)
    try:
        yield wanted
    finally:
        if torch.get_num_threads() != previous:
            torch.set_num_threads(previous)


def resolve_device(device) -> torch.device:
    """Turn ``"auto"``, ``"cpu"``, ``"cuda"``, ``"cuda:1"`` or a device into a device.

    ``"auto"`` picks CUDA when it is available, else the CPU.
    """
    if device is None or device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device={str(device)!r} was requested but CUDA is not available.")
    return device


def torch_seed(random_state: np.random.RandomState) -> int:
    """Draw a torch seed from a resolved numpy ``RandomState`` (done in ``fit``)."""
    return int(random_state.randint(0, 2**31 - 1))


def as_float_tensor(X, device=None, dtype=torch.float32) -> torch.Tensor:
    """Convert an array to a contiguous float tensor on ``device`` (no copy when possible)."""
    return torch.as_tensor(np.ascontiguousarray(X), dtype=dtype, device=device)

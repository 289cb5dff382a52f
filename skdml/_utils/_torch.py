"""Small torch helpers: devices, seeds, tensors."""

from __future__ import annotations

import threading
import warnings
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch

__all__ = ["resolve_device", "torch_seed", "torch_rng_scope", "as_float_tensor",
           "cuda_syncs", "torch_fit_modes", "DEVICE_CONSTRAINT"]

#: torch's default generators are process-wide: seeded sections in threads take turns.
_TORCH_RNG_LOCK = threading.RLock()

_DEVICE_TYPES = ("cpu", "cuda", "mps")
#: The ``device`` parameter's constraint, everywhere: a name, a device, or None ("auto").
DEVICE_CONSTRAINT = [str, torch.device, None]


#: torch's default dtype is process-wide: fits in several threads share one saved value,
#: set by the first to enter and put back by the last to leave.
class ProcessSetting:
    """A process-wide torch setting that skdml's sections hold at one value.

    The first section to enter saves the caller's value, the last of any thread to leave
    puts it back: a section that saved or restored on its own put the caller's value back
    under another thread's running section. A value other than ``wanted`` found at an
    entry or an exit is the caller's, set meanwhile: it is saved, and left in place at
    the end (a caller who sets exactly ``wanted`` meanwhile cannot be told apart).
    Use an instance as a context manager.
    """

    def __init__(self, get, put, wanted):
        self.get, self.put, self.wanted = get, put, wanted
        self.lock, self.sections, self.saved = threading.Lock(), 0, None

    def __enter__(self):
        with self.lock:
            current = self.get()
            if self.sections == 0 or current != self.wanted:
                self.saved = current
            if current != self.wanted:
                self.put(self.wanted)
            self.sections += 1

    def __exit__(self, *exc):
        with self.lock:
            self.sections -= 1
            if self.sections == 0 and self.saved != self.wanted and self.get() == self.wanted:
                self.put(self.saved)
        return False


#: torch's default dtype while fits run (see :func:`torch_fit_modes`).
_FLOAT32_DEFAULT = ProcessSetting(torch.get_default_dtype, torch.set_default_dtype,
                                  torch.float32)


@contextmanager
def torch_fit_modes():
    """torch's global modes as a training fit needs them, whatever the caller set; restored after.

    Autograd on and inference mode off (per thread): a fit called inside the
    user's ``torch.no_grad()`` or ``torch.inference_mode()`` block built its
    losses without a graph ("element 0 of tensors does not require grad").
    float32 as the default dtype: under ``torch.set_default_dtype(torch.float64)``
    the deep learner built a float64 network for its float32 inputs. torch's
    default dtype is process-wide, so it is touched only when the caller's is not
    float32 (torch's own default: then nothing changes): from the first fit to
    enter until the last of any thread leaves, other threads see float32 too.
    Also a decorator.

    Examples
    --------
    >>> with torch.no_grad(), torch_fit_modes():
    ...     torch.is_grad_enabled(), torch.get_default_dtype()
    (True, torch.float32)
    """
    # (a fit entering under the caller's float64 while another thread's ran trained in it)
    with _FLOAT32_DEFAULT, torch.inference_mode(False), torch.enable_grad():
        yield


def resolve_device(device) -> torch.device:
    """Turn ``"auto"``, ``"cpu"``, ``"cuda"``, ``"cuda:1"`` or a device into a device.

    ``"auto"`` (or ``None``) picks CUDA when it is available, else the CPU. A
    device that cannot hold data for computation (``"meta"``) or is not present
    raises a ``ValueError`` naming it.

    Examples
    --------
    >>> resolve_device("cpu")
    device(type='cpu')
    """
    if device is None or (isinstance(device, str) and device == "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"device={device!r} is not a torch device: {exc}") from None
    if device.type not in _DEVICE_TYPES:
        raise ValueError(
            f"device={str(device)!r} cannot run skdml computations; use 'auto', 'cpu' or "
            "'cuda' (a 'meta' tensor holds no data).")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device={str(device)!r} was requested but CUDA is not available.")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"device={str(device)!r} was requested but MPS is not available.")
    return device


def torch_seed(random_state: np.random.RandomState) -> int:
    """Draw a torch seed from a resolved numpy ``RandomState`` (done in ``fit``)."""
    return int(random_state.randint(0, 2**31 - 1))


@contextmanager
def torch_rng_scope(devices=()):
    """Fork torch's global random state for a seeded fit, one thread at a time.

    ``torch.random.fork_rng`` restores the global generators afterwards, but they
    are shared by every thread of the process: two fits seeding them at once in
    threads (a Dask worker with ``nthreads > 1``, joblib's threading backend)
    would interleave their draws and lose reproducibility. The section therefore
    holds a process-wide re-entrant lock, so a fit gives the same result with
    ``n_jobs=1``, in a loky process or in a threaded Dask worker.

    Examples
    --------
    >>> with torch_rng_scope():
    ...     _ = torch.manual_seed(0)
    ...     a = torch.rand(1)
    >>> with torch_rng_scope():
    ...     _ = torch.manual_seed(0)
    ...     bool(torch.rand(1) == a)
    True
    """
    with _TORCH_RNG_LOCK, torch.random.fork_rng(devices=list(devices)):
        yield


def as_float_tensor(X, device=None, dtype=torch.float32) -> torch.Tensor:
    """Convert an array to a contiguous float tensor on ``device`` (no copy when possible)."""
    return torch.as_tensor(np.ascontiguousarray(X), dtype=dtype, device=device)


@contextmanager
def cuda_syncs():
    """Record the host-device synchronisations of the block (CUDA only).

    Runs the block under ``torch.cuda.set_sync_debug_mode("warn")`` and yields a
    list that, when the block ends, holds the ``"file:line"`` of the Python
    frame that caused each synchronisation. Used by the GPU tests and
    ``benchmarks/bench_gpu.py`` to prove that a training step never waits for
    the device.
    """
    where = []
    previous = torch.cuda.get_sync_debug_mode()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            yield where
        finally:
            torch.cuda.set_sync_debug_mode(previous)
    where.extend(f"{Path(w.filename).name}:{w.lineno}" for w in caught
                 if "synchroniz" in str(w.message))

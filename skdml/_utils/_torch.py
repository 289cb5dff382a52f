"""Small torch helpers: devices, seeds, tensors."""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["resolve_device", "torch_seed", "as_float_tensor"]

_DEVICE_TYPES = ("cpu", "cuda", "mps")


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


def as_float_tensor(X, device=None, dtype=torch.float32) -> torch.Tensor:
    """Convert an array to a contiguous float tensor on ``device`` (no copy when possible)."""
    return torch.as_tensor(np.ascontiguousarray(X), dtype=dtype, device=device)

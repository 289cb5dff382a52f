"""Checkpoint files: atomic writes, a SHA-256 digest, and one clear error for a bad file.

Layout: the magic line ``b"SKDML-CHECKPOINT 1\\n"``, the 32-byte SHA-256 of
the payload, then the payload (the state, written by :func:`torch.save`). A
load checks the magic and the digest before unpickling anything, so a
truncated, empty, corrupted or foreign file gets one :class:`CheckpointError`
naming the file instead of ``EOFError`` or ``UnpicklingError``, and a
bit-flipped file is never silently loaded.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import tempfile

import torch

__all__ = ["CheckpointError", "load_checkpoint", "save_checkpoint", "atomic_write_bytes"]

MAGIC = b"SKDML-CHECKPOINT 1\n"


class CheckpointError(ValueError, OSError):
    """A checkpoint file that cannot be used (missing, truncated, corrupted or foreign)."""


def _umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_bytes(path, data):
    """Write ``data`` to ``path`` through a temporary file and ``os.replace``.

    The file gets the permissions of an ordinarily created file (``0o666``
    less the umask), not the ``0o600`` of the temporary file.
    """
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-skdml-", dir=folder)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise


def save_checkpoint(path, state):
    """Write ``state`` to ``path`` atomically, with its SHA-256 digest.

    Examples
    --------
    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "ckpt.pt")
    >>> save_checkpoint(path, {"epoch": 3})
    >>> load_checkpoint(path)
    {'epoch': 3}
    """
    buffer = io.BytesIO()
    torch.save(state, buffer)
    payload = buffer.getvalue()
    atomic_write_bytes(path, MAGIC + hashlib.sha256(payload).digest() + payload)


def load_checkpoint(path):
    """Read a checkpoint written by :func:`save_checkpoint`, after checking its digest.

    Raises
    ------
    CheckpointError
        When the file is missing, empty, truncated, corrupted or not a skdml
        checkpoint; the message names the file.
    """
    path = os.fspath(path)
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise CheckpointError(f"Cannot read the checkpoint {path!r}: {exc}") from exc
    head = len(MAGIC) + 32
    if not data.startswith(MAGIC):
        what = "is empty" if not data else "is not a skdml checkpoint (wrong header)"
        raise CheckpointError(f"The checkpoint {path!r} {what}; remove it or pass another path.")
    if len(data) <= head:
        raise CheckpointError(f"The checkpoint {path!r} is truncated; remove it to start afresh.")
    digest, payload = data[len(MAGIC):head], data[head:]
    if hashlib.sha256(payload).digest() != digest:
        raise CheckpointError(
            f"The checkpoint {path!r} is corrupted (its SHA-256 digest does not match its "
            "content); remove it to start afresh.")
    try:
        # the digest proves the file is the one skdml wrote (it holds numpy RNG states,
        # which need the full unpickler); load only your own checkpoints
        return torch.load(io.BytesIO(payload), map_location="cpu", weights_only=False)
    except Exception as exc:  # pragma: no cover - a valid digest over a bad payload
        raise CheckpointError(f"The checkpoint {path!r} cannot be loaded: {exc}") from exc

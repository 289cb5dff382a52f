"""Checkpoint files: atomic writes, a SHA-256 digest, safe loading, one clear error for a bad file.

Layout: the magic line ``b"SKDML-CHECKPOINT 2\\n"``, the 32-byte SHA-256 of
the payload, then the payload (the state, written by :func:`torch.save`). A
load checks the magic and the digest before reading anything, so a
truncated, empty, corrupted or foreign file gets one :class:`CheckpointError`
naming the file instead of ``EOFError`` or ``UnpicklingError``, and a
bit-flipped file is never silently loaded.

The digest has no key, so it proves integrity, not origin: the payload is read
with ``torch.load(weights_only=True)``, which rebuilds tensors and plain
containers only and never runs code from the file. What else a state holds is
stored in those terms: a numpy array (e.g. the key of a numpy RNG state) as its
bytes in a ``uint8`` tensor with its dtype and shape, a numpy scalar as the
Python number.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import tempfile
from collections import OrderedDict

import numpy as np
import torch

__all__ = ["CheckpointError", "CheckpointWarning", "atomic_write_bytes", "check_output_file",
           "load_checkpoint", "save_checkpoint"]

MAGIC = b"SKDML-CHECKPOINT 2\n"
#: The header of the first format, whose payload needed the full (unsafe) unpickler.
UNSAFE_MAGIC = b"SKDML-CHECKPOINT 1\n"
#: Marks a dict that stands for a numpy array in a stored state.
_ARRAY = "__skdml_ndarray__"
#: Values stored as they are (``torch.load(weights_only=True)`` rebuilds them).
_PLAIN = (type(None), bool, int, float, complex, str, bytes, torch.Tensor, torch.Size,
          torch.device, torch.dtype)


class CheckpointError(ValueError, OSError):
    """A checkpoint file that cannot be used (missing, truncated, corrupted, foreign or unsafe)."""


class CheckpointWarning(UserWarning):
    """A checkpoint could not be written; training went on and the fit keeps what it learned."""


def _umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


def check_output_file(path, *, overwrite, example):
    """``path`` as a string, after refusing a folder, or an existing file unless ``overwrite``.

    The one check before a user-facing save (an exported network, a retrieval
    index): work on disk is never replaced unasked. ``example`` is a file name
    suggested when ``path`` is a folder.
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        raise IsADirectoryError(f"{path!r} is a directory; give a file name, e.g. "
                                f"{example!r}.")
    if os.path.exists(path) and not overwrite:
        raise FileExistsError(f"{path!r} exists; pass overwrite=True to replace it.")
    return path


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


def _to_stored(obj, where):
    """``obj`` in tensors and plain containers only (what ``weights_only=True`` reads)."""
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        if obj.dtype.hasobject:
            return {_ARRAY: "object", "shape": list(obj.shape),
                    "items": [_to_stored(v, where) for v in obj.ravel().tolist()]}
        data = np.frombuffer(np.ascontiguousarray(obj).tobytes(), dtype=np.uint8)
        return {_ARRAY: np.lib.format.dtype_to_descr(obj.dtype), "shape": list(obj.shape),
                "data": torch.from_numpy(data.copy())}
    if type(obj) in (dict, OrderedDict):
        return type(obj)((_to_stored(k, where), _to_stored(v, f"{where}[{k!r}]"))
                         for k, v in obj.items())
    if type(obj) in (list, tuple, set, frozenset):
        return type(obj)(_to_stored(v, f"{where}[{i}]") for i, v in enumerate(obj))
    if isinstance(obj, _PLAIN):
        return obj
    raise CheckpointError(
        f"A checkpoint holds tensors, numpy arrays, numbers, strings and containers of them; "
        f"{where} is a {type(obj).__module__}.{type(obj).__qualname__}, which cannot be stored "
        "safely.")


def _from_stored(obj):
    """Undo :func:`_to_stored`."""
    if type(obj) in (dict, OrderedDict):
        if _ARRAY in obj:
            shape = tuple(obj["shape"])
            if obj[_ARRAY] == "object":
                array = np.empty(len(obj["items"]), dtype=object)
                array[:] = [_from_stored(v) for v in obj["items"]]
                return array.reshape(shape)
            dtype = np.lib.format.descr_to_dtype(obj[_ARRAY])
            data = bytearray(obj["data"].numpy().tobytes())  # a writable array
            return np.frombuffer(data, dtype=dtype).reshape(shape)
        return type(obj)((k, _from_stored(v)) for k, v in obj.items())
    if type(obj) in (list, tuple, set, frozenset):
        return type(obj)(_from_stored(v) for v in obj)
    return obj


def save_checkpoint(path, state):
    """Write ``state`` to ``path`` atomically, with its SHA-256 digest.

    ``state`` may hold tensors, numpy arrays and scalars, Python numbers,
    strings and bytes, and dicts, lists, tuples and sets of them.

    Raises
    ------
    CheckpointError
        When ``state`` holds another kind of object (it could not be loaded
        without running code from the file).
    OSError
        When the file cannot be written.

    Examples
    --------
    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "ckpt.pt")
    >>> save_checkpoint(path, {"epoch": 3})
    >>> load_checkpoint(path)
    {'epoch': 3}
    """
    buffer = io.BytesIO()
    torch.save(_to_stored(state, "the state"), buffer)
    payload = buffer.getvalue()
    atomic_write_bytes(path, MAGIC + hashlib.sha256(payload).digest() + payload)


def load_checkpoint(path):
    """Read a checkpoint written by :func:`save_checkpoint`, after checking its digest.

    The payload is read with ``torch.load(weights_only=True)``: tensors and
    plain containers only, so a crafted file cannot run code.

    Raises
    ------
    CheckpointError
        When the file is missing, empty, truncated, corrupted, not a skdml
        checkpoint, or holds anything but tensors and plain containers; the
        message names the file.
    """
    path = os.fspath(path)
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise CheckpointError(f"Cannot read the checkpoint {path!r}: {exc}") from exc
    head = len(MAGIC) + 32
    if data.startswith(UNSAFE_MAGIC):
        raise CheckpointError(
            f"The checkpoint {path!r} was written by an earlier skdml in a format that can only "
            "be read by unpickling arbitrary objects (which can run code); it is refused. "
            "Remove it to start afresh.")
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
        state = torch.load(io.BytesIO(payload), map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - a valid digest over a payload we refuse to read
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CheckpointError(
            f"The checkpoint {path!r} cannot be loaded safely: it holds something other than "
            f"tensors and plain containers ({first[:200]}). skdml never unpickles arbitrary "
            "objects from a checkpoint; remove the file or pass another path.") from None
    return _from_stored(state)

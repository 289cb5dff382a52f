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

import hashlib
import io
import os
from collections import OrderedDict

import numpy as np
import torch

from .._utils import atomic_write_bytes

__all__ = ["CheckpointError", "CheckpointWarning", "load_checkpoint", "save_checkpoint"]

MAGIC = b"SKDML-CHECKPOINT 2\n"
#: The header of the first format, whose payload needed the full (unsafe) unpickler.
UNSAFE_MAGIC = b"SKDML-CHECKPOINT 1\n"
#: Marks a dict that stands for a numpy array in a stored state.
_ARRAY = "__skdml_ndarray__"
#: The tag of a stored frozenset (torch's ``weights_only`` loader rebuilds sets, not frozensets).
_FROZENSET = "__skdml_frozenset__"
#: Values stored as they are (``torch.load(weights_only=True)`` rebuilds them).
_PLAIN = (type(None), bool, int, float, complex, str, bytes, torch.Tensor, torch.Size,
          torch.device, torch.dtype)


class CheckpointError(ValueError, OSError):
    """A checkpoint file that cannot be used (missing, truncated, corrupted, foreign or unsafe)."""


class CheckpointWarning(UserWarning):
    """A checkpoint could not be written; training went on and the fit keeps what it learned."""


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
        if _ARRAY in obj or _FROZENSET in obj:
            raise CheckpointError(f"{where} has a key skdml reserves for its own records "
                                  f"({_ARRAY!r}, {_FROZENSET!r}): it would load as one.")
        return type(obj)((_to_stored(k, where), _to_stored(v, f"{where}[{k!r}]"))
                         for k, v in obj.items())
    if type(obj) is frozenset:  # torch's safe loader cannot rebuild one: a tagged list
        return {_FROZENSET: [_to_stored(v, f"{where}[{i}]") for i, v in enumerate(obj)]}
    if type(obj) in (list, tuple, set):
        return type(obj)(_to_stored(v, f"{where}[{i}]") for i, v in enumerate(obj))
    if isinstance(obj, _PLAIN):
        return obj
    raise CheckpointError(
        f"A checkpoint holds tensors, numpy arrays, numbers, strings and containers of them; "
        f"{where} is a {type(obj).__module__}.{type(obj).__qualname__}, which cannot be stored "
        "safely.")


#: Deepest nesting of containers a loaded state may have (a fit's state is a few levels deep;
#: a crafted file nesting thousands of lists would exhaust Python's recursion limit).
MAX_DEPTH = 100


class _BadState(ValueError):
    """The payload passed the digest but does not describe a state (a crafted file)."""


def _stored_array(obj):
    """The numpy array a :func:`_to_stored` record stands for, after checking the record."""
    shape = obj.get("shape")
    if not isinstance(shape, (list, tuple)) or not all(
            type(n) is int and n >= 0 for n in shape):
        raise _BadState(f"an array record with shape {shape!r}")
    if obj[_ARRAY] == "object":
        items = obj.get("items")
        if not isinstance(items, list) or len(items) != int(np.prod(shape)):
            raise _BadState(f"an object array record of shape {tuple(shape)} whose items do "
                            "not match it")
        return None  # built by the caller from its converted items
    try:
        dtype = np.lib.format.descr_to_dtype(obj[_ARRAY])
    except Exception as exc:  # noqa: BLE001 - any malformed descriptor
        raise _BadState(f"an array record with dtype {obj[_ARRAY]!r} ({exc})") from None
    if dtype.hasobject:
        raise _BadState(f"an array record declaring the object dtype {obj[_ARRAY]!r} (object "
                        "arrays are stored item by item, never as raw memory)")
    data = obj.get("data")
    if not isinstance(data, torch.Tensor) or data.dtype != torch.uint8 or data.ndim != 1:
        raise _BadState("an array record whose data is not a 1-D uint8 tensor")
    expected = int(np.prod(shape, dtype=object)) * dtype.itemsize
    if data.numel() != expected:
        raise _BadState(f"an array record of dtype {dtype} and shape {tuple(shape)} ({expected} "
                        f"bytes) holding {data.numel()} bytes")
    buffer = bytearray(data.numpy().tobytes())  # a writable array
    return np.frombuffer(buffer, dtype=dtype).reshape(shape)


def _from_stored(obj, depth=0):
    """Undo :func:`_to_stored`; raise :class:`_BadState` on a record it cannot have written."""
    if depth > MAX_DEPTH:
        raise _BadState(f"containers nested more than {MAX_DEPTH} deep")
    if type(obj) in (dict, OrderedDict):
        if _FROZENSET in obj and len(obj) == 1 and type(obj[_FROZENSET]) is list:
            return frozenset(_from_stored(v, depth + 1) for v in obj[_FROZENSET])
        if _ARRAY in obj:
            array = _stored_array(obj)
            if array is None:
                array = np.empty(len(obj["items"]), dtype=object)
                array[:] = [_from_stored(v, depth + 1) for v in obj["items"]]
                array = array.reshape(tuple(obj["shape"]))
            return array
        return type(obj)((k, _from_stored(v, depth + 1)) for k, v in obj.items())
    if type(obj) in (list, tuple, set):
        return type(obj)(_from_stored(v, depth + 1) for v in obj)
    return obj


def save_checkpoint(path, state):
    """Write ``state`` to ``path`` atomically, with its SHA-256 digest.

    ``state`` may hold tensors, numpy arrays and scalars, Python numbers,
    strings and bytes, and dicts, lists, tuples, sets and frozensets of them
    (each loaded back as the same type).

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
    try:
        return _from_stored(state)
    except (_BadState, RecursionError) as exc:
        why = str(exc) if isinstance(exc, _BadState) else "containers nested too deep"
        raise CheckpointError(
            f"The checkpoint {path!r} is not a state skdml wrote: it holds {why}. Remove it "
            "or pass another path.") from None

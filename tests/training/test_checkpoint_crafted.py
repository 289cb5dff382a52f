"""Crafted format-2 checkpoints and a hostile lock file (issue 37): one clear error each."""

import hashlib
import io
import os
import sys

import numpy as np
import pytest
import torch

from skdml._training import (CheckpointError, claim_checkpoint_path, load_checkpoint,
                             save_checkpoint)
from skdml._training._checkpoint import _ARRAY, MAGIC


def _crafted(path, state):
    """A file with a valid header and digest around ``state`` (what an attacker can write)."""
    buffer = io.BytesIO()
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(100_000)  # only to write the deep nesting
    try:
        torch.save(state, buffer)
    finally:
        sys.setrecursionlimit(limit)
    payload = buffer.getvalue()
    path.write_bytes(MAGIC + hashlib.sha256(payload).digest() + payload)
    return path


@pytest.mark.parametrize("record, message", [
    ({_ARRAY: "|O", "shape": [2], "data": torch.zeros(16, dtype=torch.uint8)}, "object dtype"),
    ({_ARRAY: "<f8", "shape": [1000], "data": torch.zeros(16, dtype=torch.uint8)},
     "8000 bytes"),
    ({_ARRAY: "<f8", "shape": [-2], "data": torch.zeros(16, dtype=torch.uint8)}, "shape"),
    ({_ARRAY: "not a dtype", "shape": [2], "data": torch.zeros(16, dtype=torch.uint8)},
     "dtype"),
])
def test_crafted_array_records_are_checkpoint_errors(tmp_path, record, message):
    path = _crafted(tmp_path / "model.ckpt", {"state": record})
    with pytest.raises(CheckpointError, match=message) as info:
        load_checkpoint(path)
    assert str(path) in str(info.value)


def test_deeply_nested_lists_are_a_checkpoint_error(tmp_path):
    nested = []
    for _ in range(5000):
        nested = [nested]
    path = _crafted(tmp_path / "model.ckpt", {"state": nested})
    with pytest.raises(CheckpointError, match="nested") as info:
        load_checkpoint(path)
    assert str(path) in str(info.value)


def test_an_honest_array_record_still_loads(tmp_path):
    import numpy as np
    data = torch.from_numpy(np.frombuffer(np.arange(3.0).tobytes(), dtype=np.uint8).copy())
    path = _crafted(tmp_path / "model.ckpt", {"a": {_ARRAY: "<f8", "shape": [3], "data": data}})
    np.testing.assert_array_equal(load_checkpoint(path)["a"], [0.0, 1.0, 2.0])


@pytest.mark.parametrize("link", ["symlink", "hardlink"])
def test_lock_file_never_writes_through_a_link(tmp_path, link):
    victim = tmp_path / "precious.txt"
    victim.write_text("precious")
    path = tmp_path / "model.ckpt"
    (os.symlink if link == "symlink" else os.link)(victim, str(path) + ".lock")
    with pytest.raises(CheckpointError, match="lock file .* is (a symbolic link|a hard link)"):
        with claim_checkpoint_path(path):
            pass
    assert victim.read_text() == "precious"


def test_lock_file_that_is_a_folder_is_refused(tmp_path):
    path = tmp_path / "model.ckpt"
    os.mkdir(str(path) + ".lock")
    with pytest.raises(CheckpointError, match="lock file"):
        with claim_checkpoint_path(path):
            pass


def test_checkpoint_containers_keep_their_types(tmp_path):
    # a tuple comes back a tuple and a set a set (the docstring's "dicts, lists, tuples and
    # sets of them"); a numpy RNG state round-trips
    path = tmp_path / "c.ckpt"
    state = {"t": (1, 2), "s": {3, 4}, "l": [6], "rng": np.random.RandomState(3).get_state()}
    save_checkpoint(path, state)
    back = load_checkpoint(path)
    assert type(back["t"]) is tuple and back["t"] == (1, 2)
    assert type(back["s"]) is set and back["s"] == {3, 4}
    assert type(back["l"]) is list and type(back["rng"]) is tuple
    rng = np.random.RandomState()
    rng.set_state(back["rng"])
    assert rng.randint(1 << 30) == np.random.RandomState(3).randint(1 << 30)


def test_bit_flips_and_crafted_array_records_are_checkpoint_errors(tmp_path):
    # a bit flipped inside a tensor's data is "corrupted" (torch.load alone reads other values
    # back silently); array records with negative dimensions whose product fits the data,
    # with fewer items than their shape or more bytes than it describes are CheckpointErrors
    # (not numpy's ValueError)
    path = tmp_path / "run.ckpt"
    save_checkpoint(path, {"w": torch.arange(256, dtype=torch.float32) + 1000.0})
    data = bytearray(path.read_bytes())
    at = bytes(data).rfind(np.float32(1100.0).tobytes())  # one of the stored values
    assert at > len(MAGIC) + 32
    data[at + 3] ^= 0x01  # one bit of that float
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="corrupted"):
        load_checkpoint(path)

    def crafted(state):
        buffer = io.BytesIO()
        torch.save(state, buffer)
        payload = buffer.getvalue()
        out = tmp_path / "crafted.ckpt"
        out.write_bytes(MAGIC + hashlib.sha256(payload).digest() + payload)
        return out

    sixteen_bytes = torch.zeros(16, dtype=torch.uint8)
    for record, reason in [
            ({_ARRAY: "<f8", "shape": [-1, -2], "data": sixteen_bytes}, "shape"),
            ({_ARRAY: "object", "shape": [3], "items": ["x", "y"]}, "items do not match"),
            ({_ARRAY: "<f8", "shape": [1], "data": sixteen_bytes}, "holding 16 bytes")]:
        with pytest.raises(CheckpointError, match=reason):
            load_checkpoint(crafted({"a": record}))


def test_a_frozenset_saved_in_a_checkpoint_loads_back(tmp_path):
    # save_checkpoint wrote it, and torch's weights_only loader then refused the file
    path = tmp_path / "run.ckpt"
    save_checkpoint(path, {"classes": frozenset({1, 2}), "nested": [frozenset({"a"})]})
    back = load_checkpoint(path)
    assert back == {"classes": frozenset({1, 2}), "nested": [frozenset({"a"})]}
    assert type(back["classes"]) is frozenset


def test_a_dict_with_a_reserved_key_is_refused_when_saving(tmp_path):
    # it loaded back as the record the key stands for (a frozenset, an array)
    with pytest.raises(CheckpointError, match="reserves for its own records"):
        save_checkpoint(tmp_path / "c.ckpt", {"user": {"__skdml_frozenset__": [1, 2]}})

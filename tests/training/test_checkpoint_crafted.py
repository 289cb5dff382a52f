"""Crafted format-2 checkpoints and a hostile lock file (issue 37): one clear error each."""

import hashlib
import io
import os
import sys

import pytest
import torch

from skdml._training import CheckpointError, claim_checkpoint_path, load_checkpoint
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

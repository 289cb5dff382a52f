"""skdml/_utils/_files.py: atomic writes that never lose a file and never replace one
unasked (the guarantees the index, export and checkpoint savers rely on)."""

import os
import stat

import pytest

from skdml._utils._files import atomic_write_bytes, check_output_file


def test_atomic_write_mode_fsync_no_leftovers_and_no_link_fallback(tmp_path, monkeypatch):
    path = tmp_path / "a.bin"
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd))[1])
    mask = os.umask(0o022)
    try:
        atomic_write_bytes(path, b"new", overwrite=False)
    finally:
        os.umask(mask)
    assert synced, "the data must reach the disk before the rename"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644  # 0o666 less the umask, not 0o600
    assert sorted(os.listdir(tmp_path)) == ["a.bin"]  # no temporary file left beside it
    # a file system without hard links: an existing file is still never replaced unasked
    def no_link(src, dst):
        raise PermissionError("no hard links here")
    monkeypatch.setattr(os, "link", no_link)
    with pytest.raises(FileExistsError):
        atomic_write_bytes(path, b"other", overwrite=False)
    assert path.read_bytes() == b"new"
    assert sorted(os.listdir(tmp_path)) == ["a.bin"]
    # a file where a folder should be is named
    with pytest.raises(NotADirectoryError, match="a.bin"):
        atomic_write_bytes(path / "x.bin", b"x")


def test_an_empty_existing_file_is_not_replaced_unasked(tmp_path):
    path = tmp_path / "empty.npz"
    path.write_bytes(b"")
    with pytest.raises(FileExistsError):
        check_output_file(path, overwrite=False, example="index.npz")

"""Writing user-facing files: the check before a save, and the atomic write itself.

Shared by every writer of skdml (checkpoints, exported networks, retrieval
indexes): work on disk is never replaced unasked, a path that cannot hold a
file is refused with one error naming it, and a crash leaves either the old
file or the new one.
"""

from __future__ import annotations

import contextlib
import os
import tempfile

__all__ = ["atomic_write_bytes", "check_output_file"]


def _umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _file_in_the_way(path):
    """The first existing ancestor folder of ``path`` when it is not a folder, else None."""
    parent = os.path.dirname(os.path.abspath(path))
    while parent and not os.path.exists(parent):
        up = os.path.dirname(parent)
        if up == parent:
            return None
        parent = up
    return parent if parent and not os.path.isdir(parent) else None


def check_output_file(path, *, overwrite, example):
    """``path`` as a string, after refusing a folder, or an existing file unless ``overwrite``.

    The one check before a user-facing save (an exported network, a retrieval
    index): work on disk is never replaced unasked. ``example`` is a file name
    suggested when ``path`` is a folder. A path under a *file* (``a.txt/x.npz``)
    is refused here with a ``NotADirectoryError`` naming that file.

    Examples
    --------
    >>> import os, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> check_output_file(os.path.join(folder, "index.npz"), overwrite=False,
    ...                   example="index.npz").endswith("index.npz")
    True
    >>> check_output_file(folder, overwrite=False, example="index.npz")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    IsADirectoryError: '...' is a directory; give a file name, e.g. 'index.npz'.
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        raise IsADirectoryError(f"{path!r} is a directory; give a file name, e.g. "
                                f"{example!r}.")
    blocker = _file_in_the_way(path)
    if blocker is not None:
        raise NotADirectoryError(
            f"Cannot write {path!r}: {blocker!r} is a file, not a folder. Choose a path in a "
            "folder (or remove that file).")
    if os.path.exists(path) and not overwrite:
        raise FileExistsError(f"{path!r} exists; pass overwrite=True to replace it.")
    return path


def atomic_write_bytes(path, data, *, overwrite=True):
    """Write ``data`` to ``path`` through a temporary file and ``os.replace``.

    With ``overwrite=False`` the temporary file is hard-linked to ``path``
    instead, which fails if ``path`` exists, even one created since the caller
    checked (a ``FileExistsError``); where the file system has no hard links,
    ``path`` is checked just before the replace.

    The file gets the permissions of an ordinarily created file (``0o666``
    less the umask), not the ``0o600`` of the temporary file. Missing folders
    are created; a file where a folder should be is refused with a
    ``NotADirectoryError`` naming it.

    Examples
    --------
    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "sub", "data.bin")
    >>> atomic_write_bytes(path, b"abc")
    >>> open(path, "rb").read()
    b'abc'
    """
    path = os.fspath(path)
    blocker = _file_in_the_way(path)
    if blocker is not None:
        raise NotADirectoryError(
            f"Cannot write {path!r}: {blocker!r} is a file, not a folder.")
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-skdml-", dir=folder)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        if overwrite:
            os.replace(tmp, path)
        else:
            _link_new(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise


def _link_new(tmp, path):
    """Move ``tmp`` to ``path`` only if ``path`` does not exist (never replacing a file)."""
    try:
        os.link(tmp, path)
    except FileExistsError:
        raise FileExistsError(f"{path!r} exists (created while writing); pass overwrite=True "
                              "to replace it.") from None
    except OSError:  # no hard links here: the check and the replace are not one step
        if os.path.exists(path):
            raise FileExistsError(f"{path!r} exists; pass overwrite=True to replace it.") \
                from None
        os.replace(tmp, path)
        return
    os.remove(tmp)

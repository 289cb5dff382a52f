"""One fit per checkpoint file: a check that the path can be written, and a lock, at fit start.

:func:`claim_checkpoint_path` runs before a fit trains anything:

* it refuses a path that cannot be written (its folder is a file, cannot be
  created or does not accept a new file, or the path is a folder) with one
  :class:`~skdml._training.CheckpointError` naming the path, instead of an
  error after the first epoch;
* it locks ``<path>.lock`` (an advisory ``flock``, which the operating system
  releases when the process dies, so a crashed fit leaves no stale lock) for
  the whole fit, so that a second fit with the same ``checkpoint_path``, in
  this process or another, is refused instead of silently overwriting the
  first one's checkpoint. The lock file names its holder (process id and
  host) and is removed when the fit ends, normally or not. It is opened
  without following symbolic links, and anything but a regular file of its
  own (a link, a folder, a FIFO, a hard link to another file) is refused: a
  fit never writes through ``<path>.lock`` into another file. An existing
  regular file is taken only when it is empty or holds a lock line of skdml's
  (left by a fit that was killed); a file with other content is the user's,
  and is refused rather than overwritten and removed.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import socket
import stat
import tempfile

from .._utils._warnings import warn_user
from ._checkpoint import CheckpointError

try:  # POSIX
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None
    import msvcrt

__all__ = ["claim_checkpoint_path", "lock_path_of"]

#: Open the lock file without following a symbolic link (``O_NOFOLLOW``; 0 where absent).
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def lock_path_of(path):
    """The lock file of the checkpoint ``path``: ``<path>.lock``."""
    return os.path.abspath(os.fspath(path)) + ".lock"


def _check_writable(path):
    """Raise :class:`CheckpointError` unless a checkpoint can be written at ``path``."""
    if os.path.isdir(path):
        raise CheckpointError(
            f"checkpoint_path={path!r} is a folder; pass the path of a file in it "
            f"(e.g. {os.path.join(path, 'model.ckpt')!r}).")
    folder = os.path.dirname(path)
    parent = folder
    while parent and not os.path.exists(parent):
        parent = os.path.dirname(parent) if os.path.dirname(parent) != parent else ""
    if parent and not os.path.isdir(parent):
        raise CheckpointError(
            f"checkpoint_path={path!r} cannot be written: {parent!r} is a file, not a folder. "
            "Choose another checkpoint_path.")
    try:
        os.makedirs(folder, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".tmp-skdml-", dir=folder)
        os.close(fd)
        os.remove(probe)
    except OSError as exc:
        raise CheckpointError(
            f"checkpoint_path={path!r} cannot be written: the folder {folder!r} does not accept "
            f"a new file ({exc.strerror or exc}). Choose a writable folder, or free space, "
            "before training.") from exc


def _try_lock(fd):
    """Lock ``fd`` without waiting: ``True``, ``False`` when another fit holds it, or the
    ``OSError`` of a file system that cannot lock (e.g. an NFS mount without a lock
    service)."""
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        else:  # pragma: no cover - Windows
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
    except OSError as exc:
        if isinstance(exc, (BlockingIOError, PermissionError)) or fcntl is None or \
                exc.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
            return False
        return exc
    return True


def _holder(lock):
    with contextlib.suppress(OSError), open(lock, encoding="utf-8", errors="replace") as fh:
        text = fh.read(200).strip()
        if text:
            return text
    return "another fit"


def _acquire(path):
    lock = lock_path_of(path)
    for _ in range(10):  # retried only when the lock file was replaced while we opened it
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | _NOFOLLOW, 0o666)
        except OSError as exc:
            if os.path.islink(lock):
                raise CheckpointError(_not_regular(lock, path, "a symbolic link")) from None
            raise CheckpointError(f"Cannot create the lock file {lock!r} of checkpoint_path="
                                  f"{path!r}: {exc.strerror or exc}.") from exc
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_nlink > 1:
            os.close(fd)
            kind = "not a regular file" if not stat.S_ISREG(info.st_mode) else \
                "a hard link to another file"
            raise CheckpointError(_not_regular(lock, path, kind))
        locked = _try_lock(fd)
        if locked is not False and not _ours(fd):  # locked, or no locks on this file system
            os.close(fd)
            raise CheckpointError(
                f"The lock file {lock!r} of checkpoint_path={path!r} exists and is not a "
                "lock of skdml's (it holds other content): a fit would overwrite and then "
                "remove it. Move it away, or choose another checkpoint_path.")
        if isinstance(locked, OSError):
            warn_user(
                f"Cannot lock {lock!r} ({locked.strerror or locked}): this file system does not "
                f"support locks, so a second fit on checkpoint_path={path!r} would not be "
                "detected. Do not start two fits with one checkpoint_path.")
            return fd, lock
        if not locked:
            os.close(fd)
            raise CheckpointError(
                f"checkpoint_path={path!r} is in use by another fit ({_holder(lock)}, lock file "
                f"{lock!r}): two fits writing one checkpoint would overwrite each other's work. "
                "Wait for that fit to end, or choose another checkpoint_path.")
        try:
            same = os.path.samestat(os.fstat(fd), os.stat(lock))
        except OSError:
            same = False
        if same:
            os.ftruncate(fd, 0)
            os.write(fd, f"process {os.getpid()} on {socket.gethostname()}\n".encode())
            return fd, lock
        os.close(fd)  # the holder before us removed the file between our open and lock
    raise CheckpointError(f"Cannot lock {lock!r} (it keeps being replaced).")  # pragma: no cover


def _ours(fd):
    """Whether the locked file is empty (just created) or a lock line of skdml's (left by a
    fit that was killed): anything else is a user's file, which is never overwritten."""
    size = os.fstat(fd).st_size
    if size == 0:
        return True
    if size > 512:
        return False
    os.lseek(fd, 0, os.SEEK_SET)
    text = os.read(fd, 512).decode("utf-8", errors="replace")
    return re.fullmatch(r"process \d+ on [^\n]*\n?", text) is not None


def _not_regular(lock, path, kind):
    return (f"The lock file {lock!r} of checkpoint_path={path!r} is {kind}: a fit writes its "
            "lock only to a regular file of its own (writing through a link would overwrite "
            "the file it points to). Remove it, or choose another checkpoint_path.")


def _release(fd, lock):
    with contextlib.suppress(OSError):
        os.remove(lock)  # while still locked: a waiting fit then locks a fresh file
    with contextlib.suppress(OSError):
        os.close(fd)


@contextlib.contextmanager
def claim_checkpoint_path(path):
    """Check that ``path`` can be written, and hold it against other fits for the block.

    Parameters
    ----------
    path : path-like
        The checkpoint file (it need not exist).

    Raises
    ------
    CheckpointError
        When ``path`` cannot be written, or another fit holds it.

    Examples
    --------
    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "run", "model.ckpt")
    >>> with claim_checkpoint_path(path):  # doctest: +ELLIPSIS
    ...     with claim_checkpoint_path(path):
    ...         pass
    Traceback (most recent call last):
    ...
    skdml._training._checkpoint.CheckpointError: checkpoint_path=... is in use by another fit...
    >>> os.path.exists(path + ".lock")
    False
    """
    path = os.path.abspath(os.fspath(path))
    _check_writable(path)
    fd, lock = _acquire(path)
    try:
        yield path
    finally:
        _release(fd, lock)

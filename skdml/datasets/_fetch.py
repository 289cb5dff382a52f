"""Where data files live, and how a missing one is downloaded safely.

One function, :func:`fetch_file`, serves every loader:

* the data home is the ``data_home`` argument, else ``SKDML_DATA`` (which
  must be absolute), else ``$XDG_CACHE_HOME/skdml`` (a relative
  ``XDG_CACHE_HOME`` is ignored, as the XDG specification says), else
  ``~/.cache/skdml``, see :func:`get_data_home`; a data home that is an
  existing *file* is refused with a clear error;
* a missing file is downloaded into a temporary file *in the data home*
  (created with ``0o666 & ~umask``, the permissions of any file the user
  creates, so a shared cache stays readable by the group), its SHA-256 is
  checked, and only then is it renamed into place (``os.replace``, atomic);
  a failed, corrupted, interrupted or late download leaves nothing behind;
* every file has a known size (:data:`SIZES`): a download stops as soon as
  it passes that size (or announces a larger ``Content-Length``), and one
  that ends short is refused;
* a file already in the data home is checked on every load: its size each
  time, its SHA-256 once per process (the verified ``(path, size, mtime)``
  are remembered), so a truncated or tampered cache file is refused with a
  message saying to delete it;
* the download has a per-read ``timeout`` *and* an overall ``deadline``: the
  transfer runs in a background thread that the caller waits for at most
  ``deadline`` seconds, so a server that trickles a byte a second (in the
  headers or in the body) cannot hold the loader;
* every failure says where to put the file by hand (its name, its SHA-256,
  ``data_home`` and ``SKDML_DATA``), for machines without internet access.

pooch was considered and not used; see ``doc/datasets.md`` for why.
"""

from __future__ import annotations

import hashlib
import numbers
import os
import secrets
import threading
import time
import urllib.request
from pathlib import Path

from sklearn.utils._param_validation import validate_params

__all__ = ["DEFAULT_DEADLINE", "DEFAULT_TIMEOUT", "SHA256", "SIZES", "URLS", "fetch_file",
           "get_data_home"]

#: SHA-256 of each data file (the file names are the names of the cache files).
SHA256 = {
    "att_faces_64x64.mat": "b1988d02c72fe5b8ee82b5ef3bb7982eafc74f1e1ff0ae0ade35061ad0af534d",
    "coil20_32x32.mat": "4595ebdda07f47b0eb014fcfaddc22b452f9aed9c1d9261a0d5bc336c1ee1344",
    "usps_16x16.mat": "9f09eec7eba5872888b3e78373595cd7fd97d32e28b996be8c65eab068c874f2",
    "images_background_small1.zip":
        "f38eb80f801274ac2b4dff5b24289016bfaba4a7d5bb50deebf27104ad6cb8a4",
    "images_background_small2.zip":
        "3ccaa407515a8778e5d0861875af38b17e418f301ad5bb3b5a6b65d901a41c7f",
}

#: Size in bytes of each data file: a download stops as soon as it passes it, and a
#: cached file of another size is refused.
SIZES = {
    "att_faces_64x64.mat": 1_432_511,
    "coil20_32x32.mat": 3_024_549,
    "usps_16x16.mat": 1_576_274,
    "images_background_small1.zip": 1_319_022,
    "images_background_small2.zip": 1_580_917,
}

_OMNIGLOT = ("https://raw.githubusercontent.com/brendenlake/omniglot/"
             "057f034baf2ecb8530bc5710e5a23584d2a519cc/python/")

#: Default download URL of each data file. Edit an entry (or pass ``url=`` to a
#: loader) to fetch from a mirror; the SHA-256 is still enforced.
URLS = {
    "att_faces_64x64.mat": (
        "https://raw.githubusercontent.com/sjgershm/DBM/"
        "a30d9abb523aab874a299b8b1aa21e7df2023f60/olivettifaces.mat"
    ),
    "coil20_32x32.mat": (
        "https://raw.githubusercontent.com/farhadabedinzadeh/AutoUFSTool/"
        "8e3231a12cfe7cd3782c5dc895f59257bbea427b/COIL20.mat"
    ),
    "usps_16x16.mat": (
        "https://raw.githubusercontent.com/se2/cis602-01-a3/"
        "009320fc3ab432b50d1f578c5a714fc48dd2f7d3/USPS.mat"
    ),
    "images_background_small1.zip": _OMNIGLOT + "images_background_small1.zip",
    "images_background_small2.zip": _OMNIGLOT + "images_background_small2.zip",
}

#: Seconds a single network operation (connect, one read) may wait.
DEFAULT_TIMEOUT = 30.0
#: Seconds a whole download may take (the files are 1-3 MB).
DEFAULT_DEADLINE = 300.0

_CHUNK = 1 << 16

#: ``(path, size, mtime_ns, expected SHA-256)`` of the cached files whose digest was
#: checked in this process: each file is hashed once per process, its size every time.
_VERIFIED = set()
_VERIFIED_LOCK = threading.Lock()


#: The parameter constraints every loader shares.
LOADER_PARAMS = {
    "data_home": [str, os.PathLike, None],
    "download_if_missing": ["boolean"],
    "return_X_y": ["boolean"],
    "url": [str, None],
    "timeout": "no_validation",  # checked by _seconds first, on every call
    "deadline": "no_validation",
}


@validate_params({"data_home": [str, os.PathLike, None]}, prefer_skip_nested_validation=True)
def get_data_home(data_home=None) -> Path:
    """Return the directory where skdml keeps its data files.

    The first of these that is set wins: the ``data_home`` argument, the
    ``SKDML_DATA`` environment variable, ``$XDG_CACHE_HOME/skdml``, and
    ``~/.cache/skdml``. ``~`` is expanded. The directory is not created here
    (only a download creates it).

    Environment variables must hold absolute paths, so that where the data go
    does not depend on the current directory: a relative ``XDG_CACHE_HOME`` is
    ignored (the XDG Base Directory specification says such a value is
    invalid), and a relative ``SKDML_DATA``, skdml's own variable, is refused
    with a :class:`ValueError`. A relative ``data_home`` argument is used as
    given (relative to the current directory), like any path argument.

    Parameters
    ----------
    data_home : str or path-like, default=None
        Explicit data directory.

    Returns
    -------
    path : pathlib.Path
        The data directory.

    Raises
    ------
    ValueError
        ``SKDML_DATA`` is set to a relative path.

    Examples
    --------
    >>> from skdml.datasets import get_data_home
    >>> get_data_home("/tmp/my_data").as_posix()
    '/tmp/my_data'
    """
    if data_home is not None:
        if isinstance(os.fspath(data_home), bytes):
            raise TypeError(f"data_home must be a str or a str path, not bytes; got {data_home!r}.")
        if not os.fspath(data_home):
            raise ValueError("data_home is empty; pass a directory (or None for the default).")
        return Path(os.fspath(data_home)).expanduser()
    env = os.environ.get("SKDML_DATA")
    if env:
        path = Path(env).expanduser()
        if not path.is_absolute():
            raise ValueError(
                f"The SKDML_DATA environment variable must be an absolute path, got {env!r} "
                "(a relative one would depend on the current directory). Set it to an absolute "
                "path, or pass data_home= to the loader.")
        return path
    cache = Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache").expanduser()
    if not cache.is_absolute():  # the XDG specification: relative paths are invalid, ignore them
        cache = Path("~/.cache").expanduser()
    return cache / "skdml"


def sha256_of(path) -> str:
    """The SHA-256 hex digest of a file, read in blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(_CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def _by_hand(filename, home):
    """How to place ``filename`` by hand (the hint of every failure)."""
    return (f"To install it by hand, download {filename!r} on a machine with internet access "
            f"(from {URLS[filename]}), check that its SHA-256 is {SHA256[filename]}, and copy "
            f"it to {str(home / filename)!r}; or put it in any directory and pass that "
            "directory as data_home= or set the SKDML_DATA environment variable to it.")


def _check_home(home):
    if home.exists() and not home.is_dir():
        raise NotADirectoryError(
            f"The data home {str(home)!r} is an existing file, not a directory. Pass a "
            "directory as data_home= (or in SKDML_DATA); skdml keeps one file per data set "
            "in it.")


@validate_params({"filename": [str], **{k: v for k, v in LOADER_PARAMS.items()
                                       if k != "return_X_y"}},
                 prefer_skip_nested_validation=True)
def fetch_file(filename, data_home=None, *, download_if_missing=True, url=None,
               timeout=DEFAULT_TIMEOUT, deadline=DEFAULT_DEADLINE) -> Path:
    """Return the path of a data file, downloading and checking it if needed.

    Parameters
    ----------
    filename : str
        One of the keys of :data:`SHA256`, e.g. ``"usps_16x16.mat"``.
    data_home : str or path-like, default=None
        Data directory; see :func:`get_data_home`.
    download_if_missing : bool, default=True
        If False and the file is not in the data directory, raise
        :class:`FileNotFoundError` instead of downloading.
    url : str, default=None
        Where to download from; ``None`` uses ``URLS[filename]``.
    timeout : float, default=30.0
        Seconds one network operation (connecting, one read) may wait.
    deadline : float, default=300.0
        Seconds the whole download may take, however slowly the server
        answers.

    Returns
    -------
    path : pathlib.Path
        Path of the (checked, if downloaded) file in the data directory.

    Raises
    ------
    FileNotFoundError
        The file is missing and ``download_if_missing`` is False.
    NotADirectoryError
        The data home is an existing file.
    OSError
        The download failed, passed its deadline (:class:`TimeoutError`),
        went past or fell short of the file's size (:data:`SIZES`) or its
        SHA-256 did not match; no file is left behind. The message says
        where to put the file by hand. Also raised when the file already in
        the data directory has the wrong size or SHA-256 (truncated or
        tampered); the message says to delete it.

    Examples
    --------
    >>> from skdml.datasets import fetch_file
    >>> try:
    ...     fetch_file("usps_16x16.mat", "/nonexistent/dir", download_if_missing=False)
    ... except FileNotFoundError as exc:
    ...     print("usps_16x16.mat" in str(exc), "SKDML_DATA" in str(exc))
    True True
    """
    if filename not in SHA256 or filename not in SIZES:
        raise ValueError(f"Unknown data file {filename!r}; expected one of {sorted(SHA256)} "
                         "(a file needs an entry in both SHA256 and SIZES).")
    # checked on every call, not only when a download needs them: a bad value is not hidden
    # until the cache is missing
    timeout, deadline = _seconds(timeout, "timeout"), _seconds(deadline, "deadline")
    home = get_data_home(data_home)
    _check_home(home)
    path = home / filename
    if path.is_file():
        _verify_cached(path, filename, home)
        return path
    if path.exists():  # not a file: a directory (say) would stop the download at its end
        raise OSError(f"{str(path)!r} exists but is not a file: skdml keeps {filename!r} "
                      "there. Move it away and load again. " + _by_hand(filename, home))
    if not download_if_missing:
        raise FileNotFoundError(
            f"Data file {filename!r} not found in {str(home)!r} and download_if_missing=False. "
            + _by_hand(filename, home))
    source = URLS[filename] if url is None else url
    tmp = home / f".{filename}.{secrets.token_hex(6)}.part"
    try:
        home.mkdir(parents=True, exist_ok=True)
        digest = _download(source, tmp, timeout, deadline, SIZES[filename])
        if digest != SHA256[filename]:
            raise _Reported(
                f"The file {filename!r} downloaded from {source!r} is corrupted: its SHA-256 "
                f"is {digest}, expected {SHA256[filename]}. Nothing was saved. "
                + _by_hand(filename, home))
        os.replace(tmp, path)
        _remember_verified(path, SHA256[filename])
    except TimeoutError as exc:
        raise TimeoutError(f"Downloading {filename!r} from {source!r} failed: {exc}. "
                           + _by_hand(filename, home)) from None
    except _Reported:
        raise
    except OSError as exc:
        if exc.filename is not None and Path(exc.filename) in (home, tmp, path, *home.parents):
            # the data home, not the download: a directory that cannot be created or written
            raise OSError(f"Cannot write {filename!r} into the data home {str(home)!r} "
                          f"({exc.strerror or exc}: {exc.filename!r}). "
                          + _by_hand(filename, home)) from exc
        raise OSError(f"Downloading {filename!r} from {source!r} failed: {exc}. "
                      + _by_hand(filename, home)) from exc
    finally:
        _remove(tmp)
    return path


class _Reported(OSError):
    """A failure already explained (named file, hint): re-raised as it is."""


def _seconds(value, name):
    """A positive, finite number of seconds (``timeout``, ``deadline``), checked before any
    network access."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or \
            not 0.0 < float(value) < float("inf"):
        raise ValueError(f"{name} must be a positive, finite number of seconds; got {value!r}.")
    return float(value)


def _verify_cached(path, filename, home):
    """Refuse a cached file whose size or SHA-256 is not the registered one.

    The size is checked on every call; the SHA-256 once per process for a given
    ``(path, size, mtime)``: a file replaced or touched since is hashed again.
    """
    stat = path.stat()
    expected_size, expected_digest = SIZES[filename], SHA256[filename]
    delete = (f"Delete it (rm {str(path)!r}) and load again to download a fresh copy, or "
              "replace it by hand. ")
    if stat.st_size != expected_size:
        raise OSError(
            f"The cached data file {str(path)!r} is {stat.st_size} bytes, expected "
            f"{expected_size}: it is truncated, tampered with or not the right file. "
            + delete + _by_hand(filename, home))
    key = _verified_key(path, stat, expected_digest)
    with _VERIFIED_LOCK:
        if key in _VERIFIED:
            return
    digest = sha256_of(path)
    if digest != expected_digest:
        raise OSError(
            f"The cached data file {str(path)!r} is tampered with or corrupted: its SHA-256 "
            f"is {digest}, expected {expected_digest}. " + delete + _by_hand(filename, home))
    with _VERIFIED_LOCK:
        _VERIFIED.add(key)


def _verified_key(path, stat, digest):
    """What a verified file is remembered by: its path, size, mtime, and also its inode,
    device and change time (a same-size file swapped in with its old mtime restored, by
    ``cp -p``, ``rsync -t`` or ``os.utime``, is hashed again: ctime cannot be set back)."""
    return (str(path.resolve()), stat.st_size, stat.st_mtime_ns, stat.st_ino, stat.st_dev,
            stat.st_ctime_ns, digest)


def _remember_verified(path, digest):
    """Record a file just downloaded and checked, so that its first load does not hash it."""
    key = _verified_key(path, path.stat(), digest)
    with _VERIFIED_LOCK:
        _VERIFIED.add(key)


def _remove(path):
    """Remove a temporary file if it is there; a cleanup never masks the error it follows."""
    try:
        os.remove(path)
    except OSError:  # absent, or its directory is not one (the error being reported)
        pass


def _download(source, tmp, timeout, deadline, size):
    """Download ``source`` into the new file ``tmp`` within ``deadline`` seconds; its SHA-256.

    The transfer runs in a daemon thread; the caller waits for it at most
    ``deadline`` seconds (Ctrl-C still works), then tells it to stop and
    raises :class:`TimeoutError`. The thread reads with ``read1`` (whatever
    has arrived, so the cancel flag is seen after every packet) and gives up
    by itself at the deadline too. It also stops, with an :class:`OSError`,
    as soon as the body would pass ``size`` bytes (or the server announces a
    larger ``Content-Length``), and refuses a body that ends short of it.
    """
    # O_EXCL: never follow or reuse a name planted in a shared directory; mode 0o666 is
    # reduced by the umask, like any file the user creates (not mkstemp's 0600).
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    stop_at = time.monotonic() + deadline
    cancel = threading.Event()
    outcome = {}

    def work():
        digest = hashlib.sha256()
        written = 0
        try:
            with os.fdopen(fd, "wb") as out, urllib.request.urlopen(
                    source, timeout=min(timeout, deadline)) as response:
                announced = response.headers.get("Content-Length")
                if announced is not None and announced.strip().isdigit() \
                        and int(announced) > size:
                    raise OSError(f"the server announces {int(announced)} bytes, more than the "
                                  f"file's {size} bytes; nothing was read")
                while not cancel.is_set():
                    if time.monotonic() > stop_at:
                        raise TimeoutError("deadline passed")
                    block = response.read1(_CHUNK)
                    if not block:
                        break
                    written += len(block)
                    if written > size:
                        raise OSError(f"the download passed the file's size of {size} bytes; "
                                      "stopped there")
                    digest.update(block)
                    out.write(block)
            if not cancel.is_set() and written < size:
                raise OSError(f"the download ended after {written} bytes, short of the "
                              f"file's {size} bytes (incomplete)")
            outcome["digest"] = digest.hexdigest()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            outcome["error"] = exc

    worker = threading.Thread(target=work, name="skdml-download", daemon=True)
    worker.start()
    worker.join(max(stop_at - time.monotonic(), 0.0))
    if worker.is_alive():
        cancel.set()
        raise TimeoutError(f"no complete answer within the deadline of {deadline:g} s "
                           f"(timeout={timeout:g} s per read)")
    if "error" in outcome:
        error = outcome["error"]
        if isinstance(error, TimeoutError) or "timed out" in str(error):
            raise TimeoutError(f"no complete answer within the deadline of {deadline:g} s "
                               f"or timeout of {timeout:g} s per read ({error})")
        if isinstance(error, OSError):  # URLError, HTTPError, socket errors
            raise error
        raise OSError(repr(error)) from error
    return outcome["digest"]

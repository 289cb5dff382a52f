"""Loaders for the small image data sets used in the metric-learning literature.

Three data sets, each one MATLAB ``.mat`` file, fetched on first use into a
cache directory and checked against a SHA-256 digest:

- :func:`load_att_faces`: AT&T (ORL) faces, 400 images of 64x64, 40 people x 10;
- :func:`load_coil20`: COIL-20 objects, 1440 images of 32x32, 20 objects x 72 poses;
- :func:`load_usps`: USPS digits, 11000 images of 16x16, 10 digits x 1100.

Every loader returns a :class:`~sklearn.utils.Bunch` like scikit-learn's
loaders: ``data`` (float64 in [0, 1], one upright image per row, flattened
row-major), ``target`` (0-based ``int64``), ``images`` (upright, shape
``(n_samples, height, width)``, a view of ``data``), ``target_names``,
``DESCR`` and ``filename``.

Where the files live
--------------------
The data home is the first of: the ``data_home`` argument, the ``SKDML_DATA``
environment variable, ``$XDG_CACHE_HOME/skdml`` (``~/.cache/skdml`` when
``XDG_CACHE_HOME`` is unset). See :func:`get_data_home`. A file that is not
there is downloaded from :data:`URLS` (or the loader's ``url=``) to a temporary
file in the same directory, its SHA-256 is checked against :data:`SHA256`, and
only then is it renamed into place; a download that fails or does not match
leaves nothing behind.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import urllib.request
from pathlib import Path

import numpy as np
from scipy.io import loadmat
from sklearn.utils import Bunch

__all__ = [
    "load_att_faces",
    "load_coil20",
    "load_usps",
    "get_data_home",
    "fetch_file",
    "URLS",
    "SHA256",
]

#: SHA-256 of each data file (the file names are the names of the cache files).
SHA256 = {
    "att_faces_64x64.mat": "b1988d02c72fe5b8ee82b5ef3bb7982eafc74f1e1ff0ae0ade35061ad0af534d",
    "coil20_32x32.mat": "4595ebdda07f47b0eb014fcfaddc22b452f9aed9c1d9261a0d5bc336c1ee1344",
    "usps_16x16.mat": "9f09eec7eba5872888b3e78373595cd7fd97d32e28b996be8c65eab068c874f2",
}

#: Default download URL of each data file. Edit an entry (or pass ``url=`` to a
#: loader) to fetch from a mirror.
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
}

_CHUNK = 1 << 16


def get_data_home(data_home=None) -> Path:
    """Return the directory where skdml keeps its data files.

    The first of these that is set wins: the ``data_home`` argument, the
    ``SKDML_DATA`` environment variable, ``$XDG_CACHE_HOME/skdml``, and
    ``~/.cache/skdml``. ``~`` is expanded. The directory is not created here
    (only a download creates it).

    Parameters
    ----------
    data_home : str or path-like, default=None
        Explicit data directory.

    Returns
    -------
    path : pathlib.Path
        The data directory.

    Examples
    --------
    >>> from skdml.datasets import get_data_home
    >>> get_data_home("/tmp/my_data").as_posix()
    '/tmp/my_data'
    """
    if data_home is None:
        data_home = os.environ.get("SKDML_DATA") or None
    if data_home is None:
        cache = os.environ.get("XDG_CACHE_HOME") or os.path.join("~", ".cache")
        data_home = os.path.join(cache, "skdml")
    return Path(os.fspath(data_home)).expanduser()


def _sha256(path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(_CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch_file(filename, data_home=None, *, download_if_missing=True, url=None,
               timeout=60.0) -> Path:
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
    timeout : float, default=60.0
        Socket timeout of the download, in seconds.

    Returns
    -------
    path : pathlib.Path
        Path of the (checked, if downloaded) file in the data directory.

    Raises
    ------
    FileNotFoundError
        The file is missing and ``download_if_missing`` is False.
    OSError
        The download failed or its SHA-256 did not match; no file is left
        behind in either case.

    Examples
    --------
    >>> from skdml.datasets import fetch_file
    >>> try:
    ...     fetch_file("usps_16x16.mat", "/nonexistent/dir", download_if_missing=False)
    ... except FileNotFoundError as exc:
    ...     print("usps_16x16.mat" in str(exc))
    True
    """
    if filename not in SHA256:
        raise ValueError(f"Unknown data file {filename!r}; expected one of {sorted(SHA256)}.")
    home = get_data_home(data_home)
    path = home / filename
    if path.is_file():
        return path
    if not download_if_missing:
        raise FileNotFoundError(
            f"Data file {filename!r} not found in {str(home)!r} and download_if_missing=False. "
            f"Put a copy of {filename!r} (SHA-256 {SHA256[filename]}) at {str(path)!r}, "
            "pass data_home= or set the SKDML_DATA environment variable to the directory "
            "holding it, or allow the download."
        )
    source = URLS[filename] if url is None else url
    home.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{filename}.", suffix=".part", dir=home)
    try:
        digest = hashlib.sha256()
        with os.fdopen(fd, "wb") as out:
            try:
                with urllib.request.urlopen(source, timeout=timeout) as response:
                    for block in iter(lambda: response.read(_CHUNK), b""):
                        digest.update(block)
                        out.write(block)
            except OSError as exc:  # URLError, HTTPError, timeouts are OSErrors
                raise OSError(f"Downloading {filename!r} from {source!r} failed: {exc}") from exc
        if digest.hexdigest() != SHA256[filename]:
            raise OSError(
                f"The file {filename!r} downloaded from {source!r} is corrupted: its SHA-256 "
                f"is {digest.hexdigest()}, expected {SHA256[filename]}. Nothing was saved."
            )
        os.replace(tmp_name, path)
    except BaseException:
        try:
            os.remove(tmp_name)
        except FileNotFoundError:
            pass
        raise
    return path


def _loadmat(path, keys):
    try:
        mat = loadmat(path)
    except Exception as exc:  # scipy raises several types for unreadable files
        raise OSError(f"Could not read {str(path)!r} as a MATLAB file: {exc}") from exc
    missing = [k for k in keys if k not in mat]
    if missing:
        raise OSError(f"{str(path)!r} has no array(s) {missing}; is it the right file?")
    return mat


def _bunch(images, target, descr, path, return_X_y):
    images = np.ascontiguousarray(images, dtype=np.float64)
    n_samples = images.shape[0]
    data = images.reshape(n_samples, -1)
    images = data.reshape(images.shape)  # a view of data, like one array
    target = np.asarray(target, dtype=np.int64).ravel()
    if return_X_y:
        return data, target
    return Bunch(
        data=data,
        target=target,
        images=images,
        target_names=np.unique(target),
        DESCR=descr,
        filename=str(path),
    )


_ATT_DESCR = """\
AT&T (ORL / Olivetti) faces
---------------------------

400 grey images of 40 people, 10 images each (varying lighting, expression,
glasses), 64x64 pixels. ``target[i] = i // 10`` is the person (0..39).
``data`` is float64 in [0, 1] (the stored uint8 divided by 255), each row an
upright image flattened row-major; ``images`` has shape (400, 64, 64).

Stored in ``att_faces_64x64.mat`` (array ``faces``, uint8, one column-major
image per column).
"""

_COIL_DESCR = """\
COIL-20 (Columbia Object Image Library)
---------------------------------------

1440 grey images of 20 objects, each photographed at 72 poses (every 5
degrees on a turntable), 32x32 pixels. ``target`` is the object, 0..19 (the
file's labels 1..20 minus one). ``data`` is float64 in [0, 1], each row an
upright image flattened row-major; ``images`` has shape (1440, 32, 32).

Stored in ``coil20_32x32.mat`` (arrays ``X`` with one column-major image per
row and ``Y``).
"""

_USPS_DESCR = """\
USPS handwritten digits
-----------------------

11000 grey images of handwritten digits, 1100 per digit, 16x16 pixels.
``target`` is the digit itself, 0..9 (the file's labels 1..10 minus one).
``data`` is float64 in [0, 1] (the stored uint8 divided by 255), each row an
upright image flattened row-major; ``images`` has shape (11000, 16, 16).

Stored in ``usps_16x16.mat`` (arrays ``fea``, row-major images, and ``gnd``).
"""



def load_att_faces(data_home=None, *, download_if_missing=True, return_X_y=False, url=None):
    """Load the AT&T (ORL) faces: 40 people x 10 images of 64x64 pixels.

    Parameters
    ----------
    data_home : str or path-like, default=None
        Directory holding (or receiving) the data file. ``None`` uses the
        ``SKDML_DATA`` environment variable, else ``~/.cache/skdml``; see
        :func:`get_data_home`.
    download_if_missing : bool, default=True
        If False, raise :class:`FileNotFoundError` when the file is not in the
        data directory instead of downloading it.
    return_X_y : bool, default=False
        If True, return ``(data, target)`` instead of a Bunch.
    url : str, default=None
        Download from this URL instead of the default in :data:`URLS`.

    Returns
    -------
    data : :class:`~sklearn.utils.Bunch`
        ``data`` (400, 4096) float64 in [0, 1]; ``target`` (400,) int64 in
        0..39; ``images`` (400, 64, 64), upright; ``target_names``; ``DESCR``;
        ``filename``.
    (X, y) : tuple of ndarray
        If ``return_X_y`` is True.

    Examples
    --------
    >>> from skdml.datasets import load_att_faces
    >>> faces = load_att_faces()  # doctest: +SKIP
    >>> faces.data.shape, faces.images.shape  # doctest: +SKIP
    ((400, 4096), (400, 64, 64))
    """
    path = fetch_file("att_faces_64x64.mat", data_home,
                      download_if_missing=download_if_missing, url=url)
    faces = _loadmat(path, ["faces"])["faces"]
    if faces.shape != (4096, 400):
        raise OSError(f"{str(path)!r}: expected 'faces' of shape (4096, 400), got {faces.shape}.")
    # One column-major image per column: column i reshaped (64, 64) then transposed is upright.
    images = faces.T.reshape(400, 64, 64).transpose(0, 2, 1) / 255.0
    target = np.arange(400) // 10
    return _bunch(images, target, _ATT_DESCR, path, return_X_y)


def load_coil20(data_home=None, *, download_if_missing=True, return_X_y=False, url=None):
    """Load COIL-20: 20 objects x 72 poses, 32x32 pixels.

    Parameters
    ----------
    data_home : str or path-like, default=None
        Directory holding (or receiving) the data file. ``None`` uses the
        ``SKDML_DATA`` environment variable, else ``~/.cache/skdml``; see
        :func:`get_data_home`.
    download_if_missing : bool, default=True
        If False, raise :class:`FileNotFoundError` when the file is not in the
        data directory instead of downloading it.
    return_X_y : bool, default=False
        If True, return ``(data, target)`` instead of a Bunch.
    url : str, default=None
        Download from this URL instead of the default in :data:`URLS`.

    Returns
    -------
    data : :class:`~sklearn.utils.Bunch`
        ``data`` (1440, 1024) float64 in [0, 1]; ``target`` (1440,) int64 in
        0..19; ``images`` (1440, 32, 32), upright; ``target_names``;
        ``DESCR``; ``filename``.
    (X, y) : tuple of ndarray
        If ``return_X_y`` is True.

    Examples
    --------
    >>> from skdml.datasets import load_coil20
    >>> X, y = load_coil20(return_X_y=True)  # doctest: +SKIP
    >>> X.shape, y.max()  # doctest: +SKIP
    ((1440, 1024), 19)
    """
    path = fetch_file("coil20_32x32.mat", data_home,
                      download_if_missing=download_if_missing, url=url)
    mat = _loadmat(path, ["X", "Y"])
    X, Y = mat["X"], mat["Y"]
    if X.shape != (1440, 1024) or Y.size != 1440:
        raise OSError(f"{str(path)!r}: expected X (1440, 1024) and Y (1440, 1), "
                      f"got {X.shape} and {Y.shape}.")
    # Rows are column-major images: X[i].reshape(32, 32).T is upright.
    images = np.clip(X.reshape(1440, 32, 32).transpose(0, 2, 1), 0.0, 1.0)
    target = Y.ravel().astype(np.int64) - 1
    return _bunch(images, target, _COIL_DESCR, path, return_X_y)


def load_usps(data_home=None, *, download_if_missing=True, return_X_y=False, url=None):
    """Load the USPS handwritten digits: 10 digits x 1100, 16x16 pixels.

    Parameters
    ----------
    data_home : str or path-like, default=None
        Directory holding (or receiving) the data file. ``None`` uses the
        ``SKDML_DATA`` environment variable, else ``~/.cache/skdml``; see
        :func:`get_data_home`.
    download_if_missing : bool, default=True
        If False, raise :class:`FileNotFoundError` when the file is not in the
        data directory instead of downloading it.
    return_X_y : bool, default=False
        If True, return ``(data, target)`` instead of a Bunch.
    url : str, default=None
        Download from this URL instead of the default in :data:`URLS`.

    Returns
    -------
    data : :class:`~sklearn.utils.Bunch`
        ``data`` (11000, 256) float64 in [0, 1]; ``target`` (11000,) int64,
        the digit 0..9; ``images`` (11000, 16, 16), upright;
        ``target_names``; ``DESCR``; ``filename``.
    (X, y) : tuple of ndarray
        If ``return_X_y`` is True.

    Examples
    --------
    >>> from skdml.datasets import load_usps
    >>> X, y = load_usps(return_X_y=True)  # doctest: +SKIP
    >>> X.shape, sorted(set(y.tolist())) == list(range(10))  # doctest: +SKIP
    ((11000, 256), True)
    """
    path = fetch_file("usps_16x16.mat", data_home,
                      download_if_missing=download_if_missing, url=url)
    mat = _loadmat(path, ["fea", "gnd"])
    fea, gnd = mat["fea"], mat["gnd"]
    if fea.shape != (11000, 256) or gnd.size != 11000:
        raise OSError(f"{str(path)!r}: expected fea (11000, 256) and gnd (11000, 1), "
                      f"got {fea.shape} and {gnd.shape}.")
    # Rows are row-major: fea[i].reshape(16, 16) is upright. Label c is digit c - 1.
    images = fea.reshape(11000, 16, 16) / 255.0
    target = gnd.ravel().astype(np.int64) - 1
    return _bunch(images, target, _USPS_DESCR, path, return_X_y)


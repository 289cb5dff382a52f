"""The three MATLAB-file data sets: AT&T faces, COIL-20 and USPS.

Each is one ``.mat`` file fetched by :func:`~skdml.datasets.fetch_file`; each
loader undoes the file's layout (column-major images, 1-based labels) and
returns upright images in [0, 1].
"""

from __future__ import annotations

import numpy as np
from scipy.io import loadmat
from sklearn.utils import Bunch
from sklearn.utils._param_validation import validate_params

from ._fetch import DEFAULT_DEADLINE, DEFAULT_TIMEOUT, LOADER_PARAMS, fetch_file

__all__ = ["load_att_faces", "load_coil20", "load_usps"]


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

Source: AT&T Laboratories Cambridge (formerly the Olivetti Research
Laboratory), taken 1992-1994; this 64x64 copy is Sam Roweis'
``olivettifaces.mat`` (the same images as scikit-learn's
``fetch_olivetti_faces``).

Licence: no formal licence. AT&T Laboratories Cambridge made the database
freely available for research and asks that work using it acknowledge the
laboratory and cite the paper below.

Citation: F. S. Samaria and A. C. Harter, "Parameterisation of a stochastic
model for human face identification", Proceedings of the 2nd IEEE Workshop
on Applications of Computer Vision, Sarasota, 1994, pp. 138-142.
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

Source: Columbia University's Computer Vision Laboratory (CAVE); this copy,
downsampled to 32x32, is the one common in the feature-selection literature
(taken from a public repository, see ``skdml.datasets.URLS``).

Licence: free for non-commercial research use, on condition that
publications using it cite the technical report below (the terms of the
CAVE download page).

Citation: S. A. Nene, S. K. Nayar and H. Murase, "Columbia Object Image
Library (COIL-20)", Technical Report CUCS-005-96, Columbia University, 1996.
"""

_USPS_DESCR = """\
USPS handwritten digits
-----------------------

11000 grey images of handwritten digits, 1100 per digit, 16x16 pixels.
``target`` is the digit itself, 0..9 (the file's labels 1..10 minus one).
``data`` is float64 in [0, 1] (the stored uint8 divided by 255), each row an
upright image flattened row-major; ``images`` has shape (11000, 16, 16).

Stored in ``usps_16x16.mat`` (arrays ``fea``, row-major images, and ``gnd``).

Source: zip codes scanned from envelopes by the U.S. Postal Service, collected
at CEDAR, SUNY Buffalo; this copy holds 1100 images per digit (the size of
Sam Roweis' ``usps_all.mat``; taken from a public repository, see
``skdml.datasets.URLS``).

Licence: no formal licence; the data set has been redistributed for research
since its publication. Cite the paper below.

Citation: J. J. Hull, "A database for handwritten text recognition
research", IEEE Transactions on Pattern Analysis and Machine Intelligence
16(5):550-554, 1994.
"""


@validate_params(LOADER_PARAMS, prefer_skip_nested_validation=True)
def load_att_faces(data_home=None, *, download_if_missing=True, return_X_y=False, url=None,
                   timeout=DEFAULT_TIMEOUT, deadline=DEFAULT_DEADLINE):
    """Load the AT&T (ORL) faces: 40 people x 10 images of 64x64 pixels.

    Parameters
    ----------
    data_home : str or path-like, default=None
        Directory holding (or receiving) the data file. ``None`` uses the
        ``SKDML_DATA`` environment variable, else ``$XDG_CACHE_HOME/skdml``, else
        ``~/.cache/skdml``; see
        :func:`get_data_home`.
    download_if_missing : bool, default=True
        If False, raise :class:`FileNotFoundError` when the file is not in the
        data directory instead of downloading it.
    return_X_y : bool, default=False
        If True, return ``(data, target)`` instead of a Bunch.
    url : str, default=None
        Download from this URL instead of the default in :data:`URLS`.
    timeout, deadline : float, default=30.0, 300.0
        Seconds one network operation, and the whole download, may take
        (see :func:`fetch_file`).

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
                      download_if_missing=download_if_missing, url=url,
                      timeout=timeout, deadline=deadline)
    faces = _loadmat(path, ["faces"])["faces"]
    if faces.shape != (4096, 400):
        raise OSError(f"{str(path)!r}: expected 'faces' of shape (4096, 400), got {faces.shape}.")
    # One column-major image per column: column i reshaped (64, 64) then transposed is upright.
    images = faces.T.reshape(400, 64, 64).transpose(0, 2, 1) / 255.0
    target = np.arange(400) // 10
    return _bunch(images, target, _ATT_DESCR, path, return_X_y)


@validate_params(LOADER_PARAMS, prefer_skip_nested_validation=True)
def load_coil20(data_home=None, *, download_if_missing=True, return_X_y=False, url=None,
                   timeout=DEFAULT_TIMEOUT, deadline=DEFAULT_DEADLINE):
    """Load COIL-20: 20 objects x 72 poses, 32x32 pixels.

    Parameters
    ----------
    data_home : str or path-like, default=None
        Directory holding (or receiving) the data file. ``None`` uses the
        ``SKDML_DATA`` environment variable, else ``$XDG_CACHE_HOME/skdml``, else
        ``~/.cache/skdml``; see
        :func:`get_data_home`.
    download_if_missing : bool, default=True
        If False, raise :class:`FileNotFoundError` when the file is not in the
        data directory instead of downloading it.
    return_X_y : bool, default=False
        If True, return ``(data, target)`` instead of a Bunch.
    url : str, default=None
        Download from this URL instead of the default in :data:`URLS`.
    timeout, deadline : float, default=30.0, 300.0
        Seconds one network operation, and the whole download, may take
        (see :func:`fetch_file`).

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
                      download_if_missing=download_if_missing, url=url,
                      timeout=timeout, deadline=deadline)
    mat = _loadmat(path, ["X", "Y"])
    X, Y = mat["X"], mat["Y"]
    if X.shape != (1440, 1024) or Y.size != 1440:
        raise OSError(f"{str(path)!r}: expected X (1440, 1024) and Y (1440, 1), "
                      f"got {X.shape} and {Y.shape}.")
    # Rows are column-major images: X[i].reshape(32, 32).T is upright.
    images = np.clip(X.reshape(1440, 32, 32).transpose(0, 2, 1), 0.0, 1.0)
    target = Y.ravel().astype(np.int64) - 1
    return _bunch(images, target, _COIL_DESCR, path, return_X_y)


@validate_params(LOADER_PARAMS, prefer_skip_nested_validation=True)
def load_usps(data_home=None, *, download_if_missing=True, return_X_y=False, url=None,
                   timeout=DEFAULT_TIMEOUT, deadline=DEFAULT_DEADLINE):
    """Load the USPS handwritten digits: 10 digits x 1100, 16x16 pixels.

    Parameters
    ----------
    data_home : str or path-like, default=None
        Directory holding (or receiving) the data file. ``None`` uses the
        ``SKDML_DATA`` environment variable, else ``$XDG_CACHE_HOME/skdml``, else
        ``~/.cache/skdml``; see
        :func:`get_data_home`.
    download_if_missing : bool, default=True
        If False, raise :class:`FileNotFoundError` when the file is not in the
        data directory instead of downloading it.
    return_X_y : bool, default=False
        If True, return ``(data, target)`` instead of a Bunch.
    url : str, default=None
        Download from this URL instead of the default in :data:`URLS`.
    timeout, deadline : float, default=30.0, 300.0
        Seconds one network operation, and the whole download, may take
        (see :func:`fetch_file`).

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
                      download_if_missing=download_if_missing, url=url,
                      timeout=timeout, deadline=deadline)
    mat = _loadmat(path, ["fea", "gnd"])
    fea, gnd = mat["fea"], mat["gnd"]
    if fea.shape != (11000, 256) or gnd.size != 11000:
        raise OSError(f"{str(path)!r}: expected fea (11000, 256) and gnd (11000, 1), "
                      f"got {fea.shape} and {gnd.shape}.")
    # Rows are row-major: fea[i].reshape(16, 16) is upright. Label c is digit c - 1.
    images = fea.reshape(11000, 16, 16) / 255.0
    target = gnd.ravel().astype(np.int64) - 1
    return _bunch(images, target, _USPS_DESCR, path, return_X_y)


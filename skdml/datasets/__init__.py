"""Loaders for the small image data sets used in the metric-learning literature.

Four data sets, each one file fetched on first use into a cache directory and
checked against a SHA-256 digest:

- :func:`load_att_faces`: AT&T (ORL) faces, 400 images of 64x64, 40 people x 10;
- :func:`load_coil20`: COIL-20 objects, 1440 images of 32x32, 20 objects x 72 poses;
- :func:`load_usps`: USPS digits, 11000 images of 16x16, 10 digits x 1100;
- :func:`load_omniglot`: Omniglot characters, the two "minimal" background
  splits (136 and 156 characters x 20 drawings), 28x28 by default.

Every loader returns a :class:`~sklearn.utils.Bunch` like scikit-learn's
loaders: ``data`` (in [0, 1], one upright image per row, flattened
row-major), ``target`` (0-based ``int64``), ``images`` (upright, shape
``(n_samples, height, width)``, a view of ``data``), ``target_names``,
``DESCR`` (what the data are, their source, licence and citation) and
``filename``.

Where the files live
--------------------
The data home is the first of: the ``data_home`` argument, the ``SKDML_DATA``
environment variable (an absolute path), ``$XDG_CACHE_HOME/skdml``
(``~/.cache/skdml`` when ``XDG_CACHE_HOME`` is unset or relative). See
:func:`get_data_home`. A file that is not there is downloaded from :data:`URLS`
(or the loader's ``url=``) to a temporary file in the same directory, within a
per-read ``timeout`` and an overall ``deadline`` and never past its size in
:data:`SIZES`; its SHA-256 is checked against :data:`SHA256`, and only then is
it renamed into place. A download that fails, is late, too long, short or
does not match leaves nothing behind and says where to put the file by hand.
A file already there is checked too (its size on every load, its SHA-256 once
per process), so a truncated or tampered cache file is refused.

Modules: ``_fetch`` (data home, downloads), ``_matlab`` (AT&T, COIL-20,
USPS), ``_omniglot``.
"""

from ._fetch import (
    DEFAULT_DEADLINE,
    DEFAULT_TIMEOUT,
    SHA256,
    SIZES,
    URLS,
    fetch_file,
    get_data_home,
)
from ._matlab import load_att_faces, load_coil20, load_usps
from ._omniglot import OMNIGLOT_SUBSETS, load_omniglot

__all__ = [
    "load_att_faces",
    "load_coil20",
    "load_usps",
    "load_omniglot",
    "get_data_home",
    "fetch_file",
    "URLS",
    "SHA256",
    "SIZES",
    "OMNIGLOT_SUBSETS",
    "DEFAULT_TIMEOUT",
    "DEFAULT_DEADLINE",
]

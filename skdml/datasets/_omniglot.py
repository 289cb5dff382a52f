"""Omniglot, read from its original zip of PNG files."""

from __future__ import annotations

import io
import zipfile
from pathlib import PurePosixPath

import numpy as np
from sklearn.utils import Bunch

from ._fetch import DEFAULT_DEADLINE, DEFAULT_TIMEOUT, fetch_file

__all__ = ["OMNIGLOT_SUBSETS", "load_omniglot"]

#: ``subset`` -> file name of its zip (the names of the original repository).
OMNIGLOT_SUBSETS = {
    "small1": "images_background_small1.zip",
    "small2": "images_background_small2.zip",
}

#: Side of the original drawings, in pixels.
ORIGINAL_SIZE = 105

_DESCR = """\
Omniglot, "minimal" background split {subset}
----------------------------------------------

Handwritten characters of {n_alphabets} alphabets ({n_classes} characters,
{n_samples} images): every character was drawn once by each of 20 people on
Amazon Mechanical Turk. The original images are 105x105 binary PNGs; here
``images`` are {side}x{side}, ink = 1 on a background of 0 ({resize}).
``target`` is the character (0..{last}, in the order alphabet / character of
the zip), ``alphabet`` the index of its alphabet in ``alphabet_names``,
``drawer`` the person (1..20), ``target_names`` "Alphabet/characterNN".

small1 holds Balinese, Early Aramaic, Greek, Korean and Latin; small2 Greek,
Japanese (katakana), Latin, Sanskrit and Tagalog. The two splits therefore
share two alphabets, Greek and Latin: 50 characters whose 1000 images are
identical in both zips. For a zero-shot (class-disjoint) protocol, train on
one split and retrieve among the alphabets of the other that it lacks, e.g.
``~np.isin(b.alphabet_names[b.alphabet], a.alphabet_names)``.

Source: the original repository of the data set,
https://github.com/brendenlake/omniglot (file python/{filename}).

Licence: MIT (Brenden Lake).

Citation: B. M. Lake, R. Salakhutdinov and J. B. Tenenbaum, "Human-level
concept learning through probabilistic program induction", Science
350(6266):1332-1338, 2015.
"""


def _pil():
    try:
        from PIL import Image
    except ImportError as exc:  # pragma: no cover - Pillow ships with matplotlib
        raise ImportError(
            "load_omniglot needs Pillow to decode the PNG files of the Omniglot zip: "
            "pip install pillow (or pip install 'skdml[datasets]').") from exc
    return Image


def _decode(Image, data, image_size):
    """One PNG (black ink on white) -> float32 ink image in [0, 1] of side ``image_size``."""
    with Image.open(io.BytesIO(data)) as im:
        ink = 1.0 - np.asarray(im.convert("L"), dtype=np.float32) / 255.0
    if image_size != ink.shape[0]:
        # BOX: each output pixel is the exact mean of the input area it covers (anti-aliased)
        ink = np.asarray(Image.fromarray(ink, mode="F").resize(
            (image_size, image_size), Image.Resampling.BOX), dtype=np.float32)
    return np.clip(ink, 0.0, 1.0)


def load_omniglot(subset="small1", *, image_size=28, data_home=None, download_if_missing=True,
                  return_X_y=False, url=None, timeout=DEFAULT_TIMEOUT,
                  deadline=DEFAULT_DEADLINE):
    """Load one of the two "minimal" Omniglot background splits (20 drawings per character).

    Reads the original zip of PNG files (fetched once into the data home and
    checked against its SHA-256, like every loader of :mod:`skdml.datasets`)
    and decodes it with Pillow.

    Parameters
    ----------
    subset : {"small1", "small2"}, default="small1"
        ``"small1"``: 5 alphabets, 136 characters, 2720 images;
        ``"small2"``: 5 other alphabets, 156 characters, 3120 images.
    image_size : int or None, default=28
        Side of the returned images: the 105x105 drawings are reduced by area
        averaging (28 is the size of the few-shot and metric-learning
        literature). ``None`` keeps the original 105x105 binary images.
    data_home : str or path-like, default=None
        Directory holding (or receiving) the zip; see
        :func:`~skdml.datasets.get_data_home`.
    download_if_missing : bool, default=True
        If False, raise :class:`FileNotFoundError` when the zip is not in the
        data directory instead of downloading it.
    return_X_y : bool, default=False
        If True, return ``(data, target)`` instead of a Bunch.
    url : str, default=None
        Download from this URL instead of the default in
        :data:`~skdml.datasets.URLS`.
    timeout, deadline : float, default=30.0, 300.0
        Seconds one network operation, and the whole download, may take.

    Returns
    -------
    data : :class:`~sklearn.utils.Bunch`
        ``data`` (n_samples, image_size ** 2) float32 in [0, 1] (ink = 1; float32
        like scikit-learn's ``fetch_lfw_people``: the 105x105 images take 4
        bytes a pixel); ``images`` (n_samples, image_size, image_size), a view
        of ``data``; ``target`` int64 character codes; ``target_names``;
        ``alphabet`` and ``alphabet_names``; ``drawer`` (1..20); ``DESCR``;
        ``filename``.
    (X, y) : tuple of ndarray
        If ``return_X_y`` is True.

    Examples
    --------
    >>> from skdml.datasets import load_omniglot
    >>> omniglot = load_omniglot("small2")  # doctest: +SKIP
    >>> omniglot.images.shape, len(omniglot.target_names)  # doctest: +SKIP
    ((3120, 28, 28), 156)
    """
    if subset not in OMNIGLOT_SUBSETS:
        raise ValueError(f"subset must be one of {sorted(OMNIGLOT_SUBSETS)}, got {subset!r}.")
    if image_size is None:
        image_size = ORIGINAL_SIZE
    if isinstance(image_size, bool) or not isinstance(image_size, (int, np.integer)) \
            or not 1 <= image_size <= ORIGINAL_SIZE:
        raise ValueError(f"image_size must be an integer in [1, {ORIGINAL_SIZE}] or None, got "
                         f"{image_size!r}.")
    filename = OMNIGLOT_SUBSETS[subset]
    path = fetch_file(filename, data_home, download_if_missing=download_if_missing, url=url,
                      timeout=timeout, deadline=deadline)
    Image = _pil()
    try:
        archive = zipfile.ZipFile(path)
    except zipfile.BadZipFile as exc:
        raise OSError(f"Could not read {str(path)!r} as a zip file: {exc}") from exc
    with archive:
        members = sorted(n for n in archive.namelist() if n.lower().endswith(".png"))
        parts = [PurePosixPath(n).parts[-3:] for n in members]
        if not members or any(len(p) != 3 for p in parts):
            raise OSError(f"{str(path)!r} does not hold <alphabet>/<character>/<image>.png "
                          "files; is it an Omniglot zip?")
        images = np.empty((len(members), image_size, image_size), dtype=np.float32)
        for i, name in enumerate(members):
            images[i] = _decode(Image, archive.read(name), int(image_size))
    characters = [f"{alphabet}/{character}" for alphabet, character, _ in parts]
    target_names, target = np.unique(characters, return_inverse=True)
    alphabet_names, alphabet = np.unique([p[0] for p in parts], return_inverse=True)
    drawer = np.array([int(PurePosixPath(p[2]).stem.rsplit("_", 1)[-1]) for p in parts])
    data = images.reshape(len(images), -1)
    target = target.astype(np.int64)
    if return_X_y:
        return data, target
    descr = _DESCR.format(subset=subset, n_alphabets=len(alphabet_names),
                          n_classes=len(target_names), n_samples=len(target), side=image_size,
                          last=len(target_names) - 1, filename=filename,
                          resize="original size" if image_size == ORIGINAL_SIZE else
                          "reduced from 105x105 by area averaging")
    return Bunch(data=data, images=data.reshape(images.shape), target=target,
                 target_names=target_names, alphabet=alphabet.astype(np.int64),
                 alphabet_names=alphabet_names, drawer=drawer.astype(np.int64), DESCR=descr,
                 filename=str(path))

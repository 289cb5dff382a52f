"""Omniglot, read from its original zip of PNG files, and its class-disjoint protocol.

The zip is opened without trusting it (:mod:`._safe_zip`: names, links and
declared sizes are checked before anything is decompressed); every member must
be ``<zip stem>/<alphabet>/<character>/<id>_<drawer>.png`` and a 105x105 PNG.
"""

from __future__ import annotations

import io
import re
import zipfile
from pathlib import Path, PurePosixPath

import numpy as np
from sklearn.utils import Bunch
from sklearn.utils._param_validation import validate_params

from ._fetch import DEFAULT_DEADLINE, DEFAULT_TIMEOUT, LOADER_PARAMS, fetch_file
from ._safe_zip import checked_members, read_member

__all__ = ["OMNIGLOT_SUBSETS", "load_omniglot"]

#: ``subset`` -> file name of its zip (the names of the original repository). ``"train"``
#: and ``"test"`` are the class-disjoint protocol: all of small1, and small2 without the
#: alphabets small1 holds (see :func:`load_omniglot`).
OMNIGLOT_SUBSETS = {
    "small1": "images_background_small1.zip",
    "small2": "images_background_small2.zip",
    "train": "images_background_small1.zip",
    "test": "images_background_small2.zip",
}

#: The alphabets of each zip (fixed by its SHA-256). Greek and Latin are in both.
OMNIGLOT_ALPHABETS = {
    "images_background_small1.zip": ("Balinese", "Early_Aramaic", "Greek", "Korean", "Latin"),
    "images_background_small2.zip": ("Greek", "Japanese_(katakana)", "Latin", "Sanskrit",
                                     "Tagalog"),
}

#: ``subset`` -> the alphabets left out of it: the test side of the protocol drops every
#: alphabet of the training side, so that it scores only characters never trained on.
_EXCLUDED = {"test": OMNIGLOT_ALPHABETS[OMNIGLOT_SUBSETS["train"]]}

_IMAGE_NAME = re.compile(r"[0-9]+_([0-9]+)\.png")
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

#: Side of the original drawings, in pixels.
ORIGINAL_SIZE = 105

_DESCR = """\
Omniglot, "minimal" background splits: subset {subset}
-------------------------------------------------------

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
identical in both zips, so small1 -> small2 is *not* zero-shot. The
class-disjoint protocol is ``subset="train"`` (all of small1) and
``subset="test"`` (small2 without Greek and Latin: 106 characters of 3
alphabets, 2120 images, none trained on).{protocol}

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


def _drawings(archive, path):
    """``(member, (alphabet, character, image name))`` of every drawing, layout checked."""
    root = Path(path).name.removesuffix(".zip")
    drawings = []
    for info in checked_members(archive, path):
        name = info.filename
        parts = PurePosixPath(name).parts
        if not name.lower().endswith(".png"):
            raise OSError(f"Refusing the zip file {str(path)!r}: member {name!r} is not a PNG "
                          "file; an Omniglot zip holds only <alphabet>/<character>/<image>.png.")
        if len(parts) != 4 or parts[0] != root or not _IMAGE_NAME.fullmatch(parts[3]):
            raise OSError(f"Refusing the zip file {str(path)!r}: member {name!r} is not "
                          f"{root}/<alphabet>/<character>/<id>_<drawer>.png, the layout of "
                          "the Omniglot zips; is it an Omniglot zip?")
        drawings.append((info, parts[1:]))
    if not drawings:
        raise OSError(f"{str(path)!r} holds no <alphabet>/<character>/<image>.png files; is it "
                      "an Omniglot zip?")
    return sorted(drawings, key=lambda d: d[0].filename)


def _decode(Image, data, image_size, path, member):
    """One PNG (black ink on white) -> float32 ink image in [0, 1] of side ``image_size``.

    The drawing must be a 105x105 PNG (checked on its header, before decoding):
    a drawing of another size or shape is refused, never stretched or padded.
    """
    where = f"member {member!r} of the zip file {str(path)!r}"
    if not data.startswith(_PNG_SIGNATURE):
        raise OSError(f"The {where} is not a PNG file (it does not start with the PNG "
                      "signature); is it an Omniglot zip?")
    broken = (OSError, SyntaxError, ValueError, EOFError)  # Pillow's errors for a bad file
    try:
        im = Image.open(io.BytesIO(data), formats=["PNG"])
    except broken as exc:
        raise OSError(f"The {where} could not be decoded as a PNG: {exc}") from exc
    with im:
        if im.size != (ORIGINAL_SIZE, ORIGINAL_SIZE):
            raise OSError(
                f"The {where} is {im.size[0]}x{im.size[1]} pixels (width x height); every "
                f"Omniglot drawing is {ORIGINAL_SIZE}x{ORIGINAL_SIZE}. A drawing of another "
                "size is refused rather than stretched or padded; is it an Omniglot zip?")
        try:
            ink = 1.0 - np.asarray(im.convert("L"), dtype=np.float32) / 255.0
        except broken as exc:
            raise OSError(f"The {where} could not be decoded as a PNG: {exc}") from exc
    if image_size != ink.shape[0]:
        # BOX: each output pixel is the exact mean of the input area it covers (anti-aliased)
        ink = np.asarray(Image.fromarray(ink, mode="F").resize(
            (image_size, image_size), Image.Resampling.BOX), dtype=np.float32)
    return np.clip(ink, 0.0, 1.0)


@validate_params({**LOADER_PARAMS, "subset": "no_validation", "image_size": "no_validation"},
                 prefer_skip_nested_validation=True)
def load_omniglot(subset="small1", *, image_size=28, data_home=None, download_if_missing=True,
                  return_X_y=False, url=None, timeout=DEFAULT_TIMEOUT,
                  deadline=DEFAULT_DEADLINE):
    """Load the "minimal" Omniglot background splits (20 drawings per character).

    Reads the original zip of PNG files (fetched once into the data home and
    checked against its SHA-256, like every loader of :mod:`skdml.datasets`)
    and decodes it with Pillow.

    The two zips share two alphabets (Greek and Latin: 50 characters, 1000
    byte-identical images), so training on ``"small1"`` and scoring on
    ``"small2"`` is *not* class-disjoint. For zero-shot retrieval, train on
    ``subset="train"`` and score on ``subset="test"``: the test side is small2
    without every alphabet of the training side, so it scores only characters
    never seen in training.

    Parameters
    ----------
    subset : {"small1", "small2", "train", "test"}, default="small1"
        ``"small1"``: 5 alphabets, 136 characters, 2720 images;
        ``"small2"``: 5 other alphabets (2 of them also in small1), 156
        characters, 3120 images. The class-disjoint protocol: ``"train"`` is
        all of small1; ``"test"`` is small2 without the alphabets of small1
        (Greek and Latin dropped): 3 alphabets, 106 characters, 2120 images.
    image_size : int or None, default=28
        Side of the returned images: the 105x105 drawings are reduced by area
        averaging (28 is the size of the few-shot and metric-learning
        literature). ``None`` keeps the original 105x105 binary images. Every
        Omniglot drawing is 105x105; a drawing of another size (a zip that is
        not the original) is refused, never stretched or padded.
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
        of ``data``; ``target`` int64 character codes (0-based within the
        subset); ``target_names``; ``alphabet`` and ``alphabet_names``;
        ``drawer`` (1..20); ``DESCR``; ``filename``.
    (X, y) : tuple of ndarray
        If ``return_X_y`` is True.

    Raises
    ------
    OSError
        The zip is not an Omniglot zip: a member with an unsafe name
        (absolute, ``..``), a symbolic link, a member declaring more than
        1 MiB (or 100 times its compressed size, a zip bomb), a file that is
        not ``<alphabet>/<character>/<id>_<drawer>.png``, not a PNG, or not
        105x105. The message names the zip file and the member; nothing
        over the limits is decompressed.

    Examples
    --------
    >>> from skdml.datasets import load_omniglot
    >>> train = load_omniglot("train")  # doctest: +SKIP
    >>> test = load_omniglot("test")  # doctest: +SKIP
    >>> len(train.target_names), len(test.target_names)  # doctest: +SKIP
    (136, 106)
    >>> set(train.target_names) & set(test.target_names)  # doctest: +SKIP
    set()
    """
    image_size = _check_arguments(subset, image_size)
    filename = OMNIGLOT_SUBSETS[subset]
    path = fetch_file(filename, data_home, download_if_missing=download_if_missing, url=url,
                      timeout=timeout, deadline=deadline)
    images, parts, dropped = _read_drawings(path, _EXCLUDED.get(subset, ()), image_size)
    characters = [f"{alphabet}/{character}" for alphabet, character, _ in parts]
    target_names, target = np.unique(characters, return_inverse=True)
    alphabet_names, alphabet = np.unique([p[0] for p in parts], return_inverse=True)
    drawer = np.array([int(_IMAGE_NAME.fullmatch(p[2]).group(1)) for p in parts])
    data = images.reshape(len(images), -1)
    target = target.astype(np.int64)
    if return_X_y:
        return data, target
    descr = _describe(subset, filename, dropped, image_size, n_alphabets=len(alphabet_names),
                      n_classes=len(target_names), n_samples=len(target))
    return Bunch(data=data, images=data.reshape(images.shape), target=target,
                 target_names=target_names, alphabet=alphabet.astype(np.int64),
                 alphabet_names=alphabet_names, drawer=drawer.astype(np.int64), DESCR=descr,
                 filename=str(path))


def _check_arguments(subset, image_size):
    """The checked ``image_size`` (``None``: the original 105); a bad argument raises."""
    if not isinstance(subset, str) or subset not in OMNIGLOT_SUBSETS:
        raise ValueError(f"subset must be one of {sorted(OMNIGLOT_SUBSETS)}, got {subset!r}.")
    if image_size is None:
        image_size = ORIGINAL_SIZE
    if isinstance(image_size, bool) or not isinstance(image_size, (int, np.integer)) \
            or not 1 <= image_size <= ORIGINAL_SIZE:
        raise ValueError(f"image_size must be an integer in [1, {ORIGINAL_SIZE}] or None, got "
                         f"{image_size!r}.")
    return int(image_size)


def _read_drawings(path, excluded, image_size):
    """``(images, parts, dropped)`` of the zip at ``path``, without the ``excluded`` alphabets.

    ``images`` (n, image_size, image_size) float32; ``parts`` the
    ``(alphabet, character, file)`` of each image; ``dropped`` the excluded
    alphabets that the zip holds.
    """
    Image = _pil()
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, zipfile.LargeZipFile) as exc:
        raise OSError(f"Could not read {str(path)!r} as a zip file: {exc}") from exc
    with archive:
        every = _drawings(archive, path)
        drawings = [(info, parts) for info, parts in every if parts[0] not in excluded]
        dropped = sorted({parts[0] for _, parts in every if parts[0] in excluded})
        images = np.empty((len(drawings), image_size, image_size), dtype=np.float32)
        for i, (info, _) in enumerate(drawings):
            images[i] = _decode(Image, read_member(archive, info, path), image_size, path,
                                info.filename)
    return images, [p for _, p in drawings], dropped


def _describe(subset, filename, dropped, image_size, **counts):
    """The ``DESCR`` of a loaded subset."""
    protocol = {
        "train": "\n\nThis is the training side of that protocol: all of small1.",
        "test": "\n\nThis is the test side of that protocol: small2 without the alphabets\n"
                f"it shares with small1 ({' and '.join(dropped)} dropped).",
    }.get(subset, "")
    return _DESCR.format(subset=subset, side=image_size, last=counts["n_classes"] - 1,
                         filename=filename, protocol=protocol,
                         resize="original size" if image_size == ORIGINAL_SIZE else
                         "reduced from 105x105 by area averaging", **counts)

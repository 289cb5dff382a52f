"""Audit cases of the security family (data files): see tests/_robustness_cases.py.

Crafted Omniglot zips, an endless download, a tampered cache file and a
relative ``XDG_CACHE_HOME``; the crafted files come from ``_crafted_files``.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import numpy as np
from _crafted_files import (
    BOMB_MEMBER,
    SHARED,
    SLACK,
    SYMLINK_ATTR,
    EndlessServer,
    deflated_zeros,
    load_crafted_omniglot,
    omniglot_zip,
    png_bytes,
)

from _robustness_cases import Case, Missing, Refused, Wrong, check  # noqa: F401


def omniglot_zip_bomb():
    """A 1 MB zip whose one member inflates to 1 GiB (2.6 GB of RSS before the fix)."""
    with tempfile.TemporaryDirectory() as tmp:
        stream, crc = deflated_zeros(1024)
        path = omniglot_zip(Path(tmp) / "images_background_small1.zip",
                            extra=[(BOMB_MEMBER, (stream, crc, 1 << 30))])
        del stream
        load_crafted_omniglot(path)
    check(False, "a zip holding a 1 GiB member was loaded")


def omniglot_symlink_member():
    with tempfile.TemporaryDirectory() as tmp:
        path = omniglot_zip(Path(tmp) / "images_background_small1.zip", extra=[
            ("images_background_small1/Alphabet/character03/0005_01.png", b"/etc/passwd",
             SYMLINK_ATTR)])
        load_crafted_omniglot(path)
    check(False, "a zip with a symbolic-link member was loaded")


def omniglot_non_square():
    """A 105-wide, 80-high drawing with ``image_size=None``: stretched before the fix."""
    with tempfile.TemporaryDirectory() as tmp:
        path = omniglot_zip(Path(tmp) / "images_background_small1.zip",
                            first=png_bytes(width=105, height=80))
        bunch = load_crafted_omniglot(path, image_size=None)
    check(False, f"a 105x80 drawing was returned as {bunch.images.shape[1:]}, stretched")


def download_endless_body():
    """A server that never stops: the download must stop at the file's size."""
    from skdml.datasets import fetch_file

    server = EndlessServer(64 << 20)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            try:
                fetch_file("usps_16x16.mat", tmp, url=server.url, timeout=10, deadline=60)
            except OSError:
                time.sleep(0.2)  # let the server notice the closed connection
                check(server.sent < 1_576_274 + SLACK,
                      f"{server.sent / 2**20:.0f} MiB were downloaded for a 1.5 MB file "
                      "before it was refused")
                raise
    finally:
        server.close()
    check(False, "an endless download was accepted")


def tampered_cache():
    """A cached USPS file replaced by a readable one with other labels: loaded before the fix."""
    from scipy.io import loadmat, savemat

    from skdml.datasets import load_usps

    source = SHARED / "usps_16x16.mat"
    if not source.is_file():
        raise Missing(f"{source} (the cached file to tamper with)")
    with tempfile.TemporaryDirectory() as tmp:
        mat = loadmat(source)
        gnd = mat["gnd"] % 10 + 1  # every digit relabelled as the next one
        savemat(Path(tmp) / "usps_16x16.mat", {"fea": mat["fea"], "gnd": gnd},
                do_compression=True)
        y = load_usps(data_home=tmp, download_if_missing=False, return_X_y=True)[1]
    check(False, f"a tampered cache file was loaded (labels {np.bincount(y)[:3]}...)")


def relative_xdg_cache_home():
    """``XDG_CACHE_HOME=relative/cache``: invalid per the XDG spec, must not be used."""
    from skdml.datasets import get_data_home

    saved = {k: os.environ.get(k) for k in ("XDG_CACHE_HOME", "SKDML_DATA")}
    os.environ["XDG_CACHE_HOME"] = os.path.join("relative", "cache")
    os.environ.pop("SKDML_DATA", None)
    try:
        home = get_data_home()
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    check(home.is_absolute(), f"the data home is the relative {str(home)!r}")


CASES = [
    Case("omniglot, 1 GiB zip-bomb member", "insecure", omniglot_zip_bomb, budget=60.0),
    Case("omniglot, symbolic-link member", "insecure", omniglot_symlink_member),
    Case("omniglot, non-square drawing, image_size=None", "silent", omniglot_non_square),
    Case("download, endless body", "insecure", download_endless_body, budget=60.0),
    Case("cache, tampered file", "insecure", tampered_cache),
    Case("data home, relative XDG_CACHE_HOME", "silent", relative_xdg_cache_home),
]

"""Tests of skdml.datasets: the real shared files, uprightness, and the download path.

The real data files are read from ``../shared/datasets`` beside the checkout and
are never copied into the repository; the download tests copy one into
pytest's ``tmp_path`` and serve it from a local HTTP server on 127.0.0.1.
"""

import functools
import hashlib
import http.server
import os
import shutil
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from scipy.io import loadmat

from skdml import datasets
from skdml.datasets import _omniglot as omniglot_module
from skdml.datasets import (
    SHA256,
    URLS,
    fetch_file,
    get_data_home,
    load_att_faces,
    load_coil20,
    load_omniglot,
    load_usps,
)

SHARED = Path(__file__).resolve().parents[2] / "shared" / "datasets"

needs_shared = pytest.mark.skipif(
    not SHARED.is_dir(), reason=f"shared data sets not found at {SHARED}"
)
needs_omniglot = pytest.mark.skipif(
    not (SHARED / "images_background_small1.zip").is_file(),
    reason=f"the Omniglot zips are not in {SHARED}")

# loader, file name, n_samples, (height, width), n_classes, samples per class
CASES = [
    (load_att_faces, "att_faces_64x64.mat", 400, (64, 64), 40, 10),
    (load_coil20, "coil20_32x32.mat", 1440, (32, 32), 20, 72),
    (load_usps, "usps_16x16.mat", 11000, (16, 16), 10, 1100),
]
IDS = ["att", "coil20", "usps"]


@functools.lru_cache(maxsize=None)
def _load(loader):
    return loader(SHARED, download_if_missing=False)


# --------------------------------------------------------------------------- real files


@needs_shared
@pytest.mark.parametrize("loader, filename, n, shape, n_classes, per_class", CASES, ids=IDS)
def test_real_file_contents(loader, filename, n, shape, n_classes, per_class):
    bunch = _load(loader)
    assert set(bunch) >= {"data", "target", "images", "target_names", "DESCR", "filename"}
    assert bunch.data.shape == (n, shape[0] * shape[1])
    assert bunch.data.dtype == np.float64
    assert bunch.images.shape == (n, *shape)
    assert bunch.target.shape == (n,)
    assert bunch.target.dtype == np.int64
    assert np.isfinite(bunch.data).all()
    assert bunch.data.min() >= 0.0 and bunch.data.max() <= 1.0
    assert bunch.data.max() > 0.9  # scaled to [0, 1], not left in [0, 1/255]
    np.testing.assert_array_equal(bunch.target_names, np.arange(n_classes))
    np.testing.assert_array_equal(np.bincount(bunch.target), np.full(n_classes, per_class))
    # images and data describe the same pixels: data rows are flattened images
    np.testing.assert_array_equal(bunch.images.reshape(n, -1), bunch.data)
    assert Path(bunch.filename) == SHARED / filename
    assert isinstance(bunch.DESCR, str) and len(bunch.DESCR) > 100


@needs_shared
@pytest.mark.parametrize("loader", [c[0] for c in CASES], ids=IDS)
def test_return_X_y(loader):
    X, y = loader(SHARED, download_if_missing=False, return_X_y=True)
    bunch = _load(loader)
    np.testing.assert_array_equal(X, bunch.data)
    np.testing.assert_array_equal(y, bunch.target)


@needs_shared
def test_layouts_follow_readme():
    """Each loader applies exactly the README's reshaping and label rules."""
    faces = loadmat(SHARED / "att_faces_64x64.mat")["faces"]
    att = _load(load_att_faces)
    for i in (0, 17, 399):
        np.testing.assert_allclose(att.images[i], faces[:, i].reshape(64, 64).T / 255.0)
    np.testing.assert_array_equal(att.target, np.arange(400) // 10)

    coil = loadmat(SHARED / "coil20_32x32.mat")
    c = _load(load_coil20)
    for i in (0, 500, 1439):
        np.testing.assert_allclose(c.images[i], coil["X"][i].reshape(32, 32).T)
    np.testing.assert_array_equal(c.target, coil["Y"].ravel().astype(int) - 1)

    usps = loadmat(SHARED / "usps_16x16.mat")
    u = _load(load_usps)
    for i in (0, 5000, 10999):
        np.testing.assert_allclose(u.images[i], usps["fea"][i].reshape(16, 16) / 255.0)
    np.testing.assert_array_equal(u.target, usps["gnd"].ravel().astype(int) - 1)


@needs_shared
def test_usps_digits_are_upright_and_labelled_by_digit():
    u = _load(load_usps)
    one = u.images[u.target == 1].mean(axis=0)
    seven = u.images[u.target == 7].mean(axis=0)
    # "1" is a vertical stroke: ink concentrated in a few columns, spread over all rows.
    # (A transposed image would swap the two.)
    assert one.sum(axis=0).var() > 3 * one.sum(axis=1).var()
    # "7" has its bar at the top (an upside-down image would have it at the bottom) ...
    assert seven[:4].sum() > 2 * seven[-4:].sum()
    # ... and its stroke descends to the left (a mirrored 7 would descend to the right).
    cols = np.arange(16)
    top, bottom = seven[:8].sum(axis=0), seven[8:].sum(axis=0)
    assert (top * cols).sum() / top.sum() > (bottom * cols).sum() / bottom.sum() + 1.0
    # "0" is a ring: the mean centre pixel is darker than the ring around it.
    zero = u.images[u.target == 0].mean(axis=0)
    assert zero[6:10, 6:10].mean() < 0.5 * zero[2:14, 2:14].max()


@needs_shared
def test_att_faces_are_upright():
    att = _load(load_att_faces)
    mean_face = att.images.mean(axis=0)
    # Faces are left-right symmetric, not top-bottom symmetric (catches a transpose).
    lr = np.abs(mean_face - mean_face[:, ::-1]).mean()
    ud = np.abs(mean_face - mean_face[::-1]).mean()
    assert lr < 0.5 * ud
    # Bright forehead at the top, darker mouth/chin region near the bottom (catches a flip).
    centre = mean_face[:, 20:44]
    assert centre[:8].mean() > centre[-16:].mean() + 0.1


# --------------------------------------------------------------------------- data home


def test_get_data_home_order(monkeypatch, tmp_path):
    monkeypatch.setenv("SKDML_DATA", str(tmp_path / "env"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert get_data_home(tmp_path / "arg") == tmp_path / "arg"
    assert get_data_home() == tmp_path / "env"
    monkeypatch.delenv("SKDML_DATA")
    assert get_data_home() == tmp_path / "xdg" / "skdml"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert get_data_home() == Path("~/.cache/skdml").expanduser()
    assert not (tmp_path / "env").exists()  # looking up never creates directories


@needs_shared
def test_env_var_is_used(monkeypatch):
    monkeypatch.setenv("SKDML_DATA", str(SHARED))
    X, y = load_coil20(download_if_missing=False, return_X_y=True)
    assert X.shape == (1440, 1024)


def test_missing_file_without_download(tmp_path):
    with pytest.raises(FileNotFoundError) as info:
        load_usps(tmp_path, download_if_missing=False)
    message = str(info.value)
    assert "usps_16x16.mat" in message and str(tmp_path) in message and "SKDML_DATA" in message
    assert list(tmp_path.iterdir()) == []


def test_unknown_file_name(tmp_path):
    with pytest.raises(ValueError, match="Unknown data file"):
        fetch_file("mnist.mat", tmp_path)


@needs_shared
def test_wrong_file_in_place(tmp_path, monkeypatch):
    shutil.copy(SHARED / "coil20_32x32.mat", tmp_path / "usps_16x16.mat")
    # the cached file is checked first: its size is not USPS's
    with pytest.raises(OSError, match="is 3024549 bytes, expected 1576274.*Delete it"):
        load_usps(tmp_path, download_if_missing=False)
    (tmp_path / "att_faces_64x64.mat").write_bytes(b"not a mat file")
    with pytest.raises(OSError, match="att_faces_64x64.mat"):
        load_att_faces(tmp_path, download_if_missing=False)
    # past the checksum (a registry edited to this file), the reader still checks the arrays
    monkeypatch.setitem(SHA256, "usps_16x16.mat", SHA256["coil20_32x32.mat"])
    monkeypatch.setitem(datasets.SIZES, "usps_16x16.mat", datasets.SIZES["coil20_32x32.mat"])
    with pytest.raises(OSError, match="fea"):
        load_usps(tmp_path, download_if_missing=False)


# --------------------------------------------------------------------------- downloads


class _Server:
    """A quiet HTTP server on 127.0.0.1 serving a directory, counting requests."""

    def __init__(self, directory):
        self.requests = []
        outer = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            def __init__(self, *args, **kwargs):
                super().__init__(*args, directory=str(directory), **kwargs)

            def do_GET(self):  # noqa: N802
                outer.requests.append(self.path)
                super().do_GET()

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()


@pytest.fixture
def served(tmp_path):
    """Serve a temp directory holding a copy of the (small) AT&T file and a corrupt one."""
    root = tmp_path / "www"
    root.mkdir()
    shutil.copy(SHARED / "att_faces_64x64.mat", root / "olivettifaces.mat")
    data = (root / "olivettifaces.mat").read_bytes()
    corrupt = bytearray(data)
    corrupt[len(corrupt) // 2] ^= 0xFF  # one flipped byte
    (root / "corrupt.mat").write_bytes(bytes(corrupt))
    with _Server(root) as server:
        yield server


@needs_shared
def test_download_checks_and_caches(served, tmp_path):
    cache = tmp_path / "cache" / "nested"  # created by the download
    faces = load_att_faces(cache, url=served.url + "/olivettifaces.mat")
    assert sorted(p.name for p in cache.iterdir()) == ["att_faces_64x64.mat"]  # no temp left
    path = cache / "att_faces_64x64.mat"
    assert hashlib.sha256(path.read_bytes()).hexdigest() == SHA256["att_faces_64x64.mat"]
    np.testing.assert_array_equal(faces.data, _load(load_att_faces).data)
    assert served.requests == ["/olivettifaces.mat"]
    # A second load reads the cache, no new request, even with downloads off.
    X, _ = load_att_faces(cache, download_if_missing=False, return_X_y=True)
    assert X.shape == (400, 4096)
    load_att_faces(cache, url=served.url + "/olivettifaces.mat")
    assert len(served.requests) == 1


@needs_shared
def test_download_uses_url_table(served, tmp_path, monkeypatch):
    monkeypatch.setitem(URLS, "att_faces_64x64.mat", served.url + "/olivettifaces.mat")
    monkeypatch.setenv("SKDML_DATA", str(tmp_path / "envcache"))
    X, y = load_att_faces(return_X_y=True)
    assert X.shape == (400, 4096) and y.max() == 39
    assert (tmp_path / "envcache" / "att_faces_64x64.mat").is_file()


@needs_shared
def test_corrupted_download_leaves_nothing(served, tmp_path):
    cache = tmp_path / "cache"
    with pytest.raises(OSError, match="att_faces_64x64.mat") as info:
        load_att_faces(cache, url=served.url + "/corrupt.mat")
    assert "SHA-256" in str(info.value)
    assert list(cache.iterdir()) == []  # no partial file, no final file
    # The failure is not cached: a good URL afterwards works.
    load_att_faces(cache, url=served.url + "/olivettifaces.mat")
    assert [p.name for p in cache.iterdir()] == ["att_faces_64x64.mat"]


@needs_shared
def test_failed_download_leaves_nothing(served, tmp_path):
    cache = tmp_path / "cache"
    with pytest.raises(OSError, match="att_faces_64x64.mat"):
        load_att_faces(cache, url=served.url + "/does_not_exist.mat")
    assert list(cache.iterdir()) == []


def test_unreachable_url_leaves_nothing(tmp_path):
    # Port 9 (discard) on localhost: nothing listens, the connection is refused.
    with pytest.raises(OSError, match="usps_16x16.mat"):
        fetch_file("usps_16x16.mat", tmp_path, url="http://127.0.0.1:9/usps.mat", timeout=5)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("option, value", [("timeout", None), ("timeout", 0),
                                           ("deadline", -1), ("deadline", float("inf"))])
def test_timeout_and_deadline_are_checked_before_any_download(tmp_path, option, value):
    # None reached float() (a TypeError), -1 and 0 a download error from inside urllib
    with pytest.raises(ValueError, match=f"{option} must be a positive, finite number"):
        fetch_file("usps_16x16.mat", tmp_path, url="http://127.0.0.1:9/usps.mat",
                   **{option: value})
    assert list(tmp_path.iterdir()) == []


def test_a_data_home_that_cannot_be_created_is_named_with_the_hint(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    home = blocker / "home"  # below a file: mkdir fails (was a bare NotADirectoryError)
    with pytest.raises(OSError, match="Cannot write 'usps_16x16.mat' into the data home") as info:
        fetch_file("usps_16x16.mat", home, url="http://127.0.0.1:9/usps.mat", timeout=5)
    assert "SKDML_DATA" in str(info.value)


def test_a_directory_where_the_file_goes_is_refused_before_downloading(tmp_path):
    (tmp_path / "usps_16x16.mat").mkdir()  # was downloaded whole, then IsADirectoryError
    with pytest.raises(OSError, match="exists but is not a file"):
        fetch_file("usps_16x16.mat", tmp_path, url="http://127.0.0.1:9/usps.mat", timeout=5)


def test_module_tables_agree():
    files = set(datasets.OMNIGLOT_SUBSETS.values()) | {
        "att_faces_64x64.mat", "coil20_32x32.mat", "usps_16x16.mat"}
    assert set(URLS) == set(SHA256) == set(datasets.SIZES) == files
    assert all(len(h) == 64 and int(h, 16) >= 0 for h in SHA256.values())
    assert datasets.__all__ and all(hasattr(datasets, name) for name in datasets.__all__)
    assert os.sep not in "".join(SHA256)  # plain file names


# --------------------------------------------------------------------------- Omniglot


@functools.lru_cache(maxsize=None)
def _omniglot(subset, image_size=28):
    return load_omniglot(subset, image_size=image_size, data_home=SHARED,
                         download_if_missing=False)


@needs_omniglot
@pytest.mark.parametrize("subset, n_classes, n_alphabets", [("small1", 136, 5),
                                                            ("small2", 156, 5)])
def test_omniglot_contents(subset, n_classes, n_alphabets):
    om = _omniglot(subset)
    n = 20 * n_classes
    assert om.data.shape == (n, 28 * 28) and om.data.dtype == np.float32
    assert om.images.shape == (n, 28, 28)
    np.testing.assert_array_equal(om.images.reshape(n, -1), om.data)
    np.testing.assert_array_equal(np.bincount(om.target), np.full(n_classes, 20))
    assert len(om.target_names) == n_classes and len(om.alphabet_names) == n_alphabets
    assert om.alphabet.shape == (n,) and om.alphabet.max() == n_alphabets - 1
    # each character is drawn once by each of the 20 drawers
    for c in (0, n_classes - 1):
        assert sorted(om.drawer[om.target == c].tolist()) == list(range(1, 21))
    assert 0.0 <= om.data.min() and om.data.max() <= 1.0
    # ink = 1 on a background of 0: most pixels are background, corners are empty
    assert 0.03 < om.data.mean() < 0.2
    assert om.images[:, 0, 0].mean() < 0.01
    assert om.target_names[0].count("/") == 1
    for word in ("MIT", "Lake", "Science", "Source"):
        assert word in om.DESCR
    assert Path(om.filename) == SHARED / datasets.OMNIGLOT_SUBSETS[subset]


@needs_omniglot
def test_omniglot_sizes_and_no_shared_alphabet():
    full = load_omniglot("small1", image_size=None, data_home=SHARED,
                         download_if_missing=False)
    small = _omniglot("small1")
    assert full.images.shape == (2720, 105, 105)
    assert set(np.unique(full.data)) <= {0.0, 1.0}  # the original binary drawings
    # area averaging keeps the amount of ink (up to the 105 -> 28 border rounding)
    ink_full = full.images.reshape(2720, -1).mean(axis=1)
    ink_small = small.images.reshape(2720, -1).mean(axis=1)
    np.testing.assert_allclose(ink_small, ink_full, rtol=0.1, atol=5e-3)
    X, y = load_omniglot("small1", image_size=12, data_home=SHARED,
                         download_if_missing=False, return_X_y=True)
    assert X.shape == (2720, 144) and y.max() == 135
    # the two minimal splits share Greek and Latin: the same 50 characters, identical images
    other = _omniglot("small2")
    shared = set(small.alphabet_names) & set(other.alphabet_names)
    assert shared == {"Greek", "Latin"}
    in_both = np.isin(small.alphabet_names[small.alphabet], list(shared))
    in_other = np.isin(other.alphabet_names[other.alphabet], list(shared))
    assert in_both.sum() == in_other.sum() == 1000
    np.testing.assert_array_equal(small.data[in_both], other.data[in_other])
    assert "Greek and Latin" in small.DESCR


@needs_omniglot
def test_omniglot_protocol_is_class_disjoint():
    """subset="train" / "test": no character, alphabet or image of the test side is trained on."""
    train = load_omniglot("train", image_size=None, data_home=SHARED, download_if_missing=False)
    test = load_omniglot("test", image_size=None, data_home=SHARED, download_if_missing=False)
    assert train.images.shape == (2720, 105, 105) and len(train.target_names) == 136
    assert test.images.shape == (2120, 105, 105) and len(test.target_names) == 106
    assert set(train.target_names).isdisjoint(test.target_names)
    assert set(train.alphabet_names).isdisjoint(test.alphabet_names)
    assert list(test.alphabet_names) == ["Japanese_(katakana)", "Sanskrit", "Tagalog"]
    train_bytes = {row.tobytes() for row in train.data}
    assert not any(row.tobytes() in train_bytes for row in test.data)
    np.testing.assert_array_equal(np.bincount(test.target), np.full(106, 20))
    # the training side is small1, the test side small2 minus the alphabets of small1
    small2 = _omniglot("small2")
    kept = ~np.isin(small2.alphabet_names[small2.alphabet], train.alphabet_names)
    np.testing.assert_array_equal(load_omniglot("test", data_home=SHARED,
                                                download_if_missing=False).data,
                                  small2.data[kept])
    np.testing.assert_array_equal(load_omniglot("train", data_home=SHARED,
                                                download_if_missing=False).data,
                                  _omniglot("small1").data)
    # the table of alphabets per zip is the zips' own
    for subset in ("small1", "small2"):
        filename = datasets.OMNIGLOT_SUBSETS[subset]
        assert tuple(_omniglot(subset).alphabet_names) == \
            omniglot_module.OMNIGLOT_ALPHABETS[filename]
    assert "Greek and Latin dropped" in test.DESCR


@pytest.mark.parametrize("kwargs, match", [(dict(subset="background"), "subset"),
                                           (dict(subset=["train"]), "subset"),
                                           (dict(image_size=0), "image_size"),
                                           (dict(image_size=106), "image_size"),
                                           (dict(image_size=2.5), "image_size")])
def test_omniglot_bad_arguments(tmp_path, kwargs, match):
    with pytest.raises(ValueError, match=match):
        load_omniglot(data_home=tmp_path, download_if_missing=False, **kwargs)


@needs_omniglot
def test_omniglot_download_and_bad_zip(tmp_path):
    root = tmp_path / "www"
    root.mkdir()
    shutil.copy(SHARED / "images_background_small2.zip", root / "s2.zip")
    with _Server(root) as server:
        X, y = load_omniglot("small2", data_home=tmp_path / "cache", url=server.url + "/s2.zip",
                             return_X_y=True)
    np.testing.assert_array_equal(X, _omniglot("small2").data)
    assert [p.name for p in (tmp_path / "cache").iterdir()] == ["images_background_small2.zip"]
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "images_background_small1.zip").write_bytes(b"not a zip")
    with pytest.raises(OSError, match="zip"):
        load_omniglot("small1", data_home=tmp_path / "bad", download_if_missing=False)


# --------------------------------------------------------------------------- hardening


def test_every_description_names_source_licence_and_citation():
    from skdml.datasets import _matlab

    for descr in (_matlab._ATT_DESCR, _matlab._COIL_DESCR, _matlab._USPS_DESCR,
                  omniglot_module._DESCR):
        for word in ("Source:", "Licence:", "Citation:"):
            assert word in descr


def test_data_home_that_is_a_file(tmp_path):
    home = tmp_path / "data"
    home.write_text("I am a file")
    with pytest.raises(NotADirectoryError, match="is an existing file"):
        load_usps(home)
    with pytest.raises(NotADirectoryError, match="is an existing file"):
        fetch_file("usps_16x16.mat", home, download_if_missing=False)


class _Trickle(http.server.BaseHTTPRequestHandler):
    """Answers every request one byte a second (in the headers or in the body)."""

    in_headers = False

    def do_GET(self):  # noqa: N802
        try:
            if self.in_headers:
                for byte in b"HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n":
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
                    time.sleep(1.0)
            else:
                self.send_response(200)
                self.send_header("Content-Length", "1000000")
                self.end_headers()
            for _ in range(1000):
                self.wfile.write(b"x")
                self.wfile.flush()
                time.sleep(1.0)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def log_message(self, *args):
        pass


@pytest.mark.parametrize("in_headers", [False, True], ids=["body", "headers"])
def test_download_deadline_against_a_trickling_server(tmp_path, in_headers):
    handler = type("Handler", (_Trickle,), {"in_headers": in_headers})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        t0 = time.monotonic()
        with pytest.raises(TimeoutError) as info:
            fetch_file("usps_16x16.mat", tmp_path / "cache",
                       url=f"http://127.0.0.1:{httpd.server_address[1]}/usps.mat",
                       timeout=5, deadline=2)
        elapsed = time.monotonic() - t0
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert elapsed < 4.5  # the deadline decides, not the per-read timeout nor the server
    message = str(info.value)
    for part in ("usps_16x16.mat", SHA256["usps_16x16.mat"], "SKDML_DATA", "data_home",
                 str(tmp_path / "cache" / "usps_16x16.mat"), "deadline"):
        assert part in message
    assert list((tmp_path / "cache").iterdir()) == []  # the partial file is gone


def test_offline_error_says_where_to_put_the_file(tmp_path):
    with pytest.raises(OSError) as info:
        fetch_file("images_background_small1.zip", tmp_path,
                   url="http://127.0.0.1:9/small1.zip", timeout=5)
    message = str(info.value)
    for part in ("images_background_small1.zip", SHA256["images_background_small1.zip"],
                 "SKDML_DATA", "data_home", str(tmp_path / "images_background_small1.zip"),
                 URLS["images_background_small1.zip"]):
        assert part in message
    assert list(tmp_path.iterdir()) == []


@needs_shared
@pytest.mark.skipif(os.name != "posix", reason="POSIX file modes")
def test_downloaded_file_has_ordinary_permissions(served, tmp_path):
    old = os.umask(0o002)  # a group-shared cache
    try:
        load_att_faces(tmp_path / "shared", url=served.url + "/olivettifaces.mat")
    finally:
        os.umask(old)
    mode = (tmp_path / "shared" / "att_faces_64x64.mat").stat().st_mode & 0o777
    assert mode == 0o664  # 0o666 & ~umask, not mkstemp's 0o600


def test_a_bad_timeout_is_refused_even_when_the_file_is_cached():
    # checked only on the download path before: a cached load accepted timeout=-1
    with pytest.raises(ValueError, match="timeout must be a positive"):
        load_usps(SHARED, download_if_missing=False, timeout=-1)
    with pytest.raises(ValueError, match="deadline must be a positive"):
        load_usps(SHARED, download_if_missing=False, deadline="soon")

"""Crafted data files for the dataset-loader tests and audit cases (no skdml needed to build).

Hand-written Omniglot-like zips (bad names, symbolic links, a 1 GiB member in a
1 MB zip, non-square drawings), an HTTP server streaming an endless body, and
:func:`registered`, which puts a crafted file's SHA-256 (and size) in skdml's
tables for the time of a test so that it reaches the reader behind the
checksum. Used by ``tests/test_datasets_security.py`` and
``tests/_robustness_cases_security.py``.
"""

from __future__ import annotations

import contextlib
import io
import struct
import zlib
from pathlib import Path

import numpy as np

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "datasets"

#: ``external_attr`` of a Unix symbolic link member (mode 0o120777 in the high 16 bits).
SYMLINK_ATTR = 0o120777 << 16
_FILE_ATTR = 0o100644 << 16


# ------------------------------------------------------------------ zip builders
def png_bytes(width=105, height=105, seed=0):
    """A binary (mode "1") PNG like Omniglot's: black ink strokes on white."""
    from PIL import Image

    rng = np.random.RandomState(seed)
    ink = np.zeros((height, width), dtype=bool)
    r = rng.randint(10, height - 10)
    ink[r:r + 4, 10:width - 10] = True
    im = Image.fromarray(~ink)
    buf = io.BytesIO()
    im.save(buf, format="PNG")
    return buf.getvalue()


def deflated_zeros(n_mib):
    """``(raw deflate stream, crc32)`` of ``n_mib`` MiB of zeros, in well under a second.

    Each MiB is compressed on its own (``Z_FULL_FLUSH`` resets the compressor),
    so the stream is one compressed MiB repeated: a 1 GiB member takes 1 MB.
    """
    chunk = bytes(1 << 20)
    comp = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = comp.compress(chunk) + comp.flush(zlib.Z_FULL_FLUSH)
    stream = block * n_mib + comp.flush()
    crc = 0
    for _ in range(n_mib):
        crc = zlib.crc32(chunk, crc)
    return stream, crc


def write_zip(path, entries):
    """Write a zip by hand; ``entries``: ``(name, data)`` or ``(name, data, attr)``.

    ``data`` is bytes (stored) or a ``(deflate stream, crc, size)`` triple
    (deflated, as is). Names are written exactly as given (``../x``, ``/x``).
    """
    out, central = bytearray(), bytearray()
    for entry in entries:
        name, data = entry[0], entry[1]
        attr = entry[2] if len(entry) > 2 else (0o40755 << 16 | 0x10 if name.endswith("/")
                                                else _FILE_ATTR)
        if isinstance(data, tuple):
            method, (payload, crc, size) = 8, data
        else:
            method, payload, crc, size = 0, data, zlib.crc32(data), len(data)
        raw = name.encode()
        offset = len(out)
        out += struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, method, 0, 0x21, crc,
                           len(payload), size, len(raw), 0) + raw + payload
        central += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 3 << 8 | 20, 20, 0, method, 0,
                               0x21, crc, len(payload), size, len(raw), 0, 0, 0, 0, attr,
                               offset) + raw
    start = len(out)
    out += central + struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(entries), len(entries),
                                 len(central), start, 0)
    Path(path).write_bytes(bytes(out))
    return Path(path)


def omniglot_zip(path, extra=(), first=None):
    """A small valid Omniglot-like zip (2 characters x 2 drawers), plus ``extra`` entries.

    ``first``: the bytes of the first drawing (e.g. a non-square PNG). The root
    folder is the zip's own stem, like the original zips.
    """
    root = Path(path).name[:-len(".zip")]
    entries = [(root + "/", b"")]
    k = 0
    for character in ("character01", "character02"):
        for drawer in (1, 2):
            data = png_bytes(seed=k) if k or first is None else first
            entries.append((f"{root}/Alphabet/{character}/0{k + 1:03d}_{drawer:02d}.png", data))
            k += 1
    return write_zip(path, entries + list(extra))


@contextlib.contextmanager
def registered(path):
    """Make ``path`` pass skdml's checksum (and size) check for its file name, then restore."""
    from skdml.datasets import _fetch

    path = Path(path)
    digest = _fetch.sha256_of(path)
    tables = [(_fetch.SHA256, digest)]
    if hasattr(_fetch, "SIZES"):
        tables.append((_fetch.SIZES, path.stat().st_size))
    saved = [(table, table.get(path.name)) for table, _ in tables]
    for table, value in tables:
        table[path.name] = value
    try:
        yield path
    finally:
        for table, value in saved:
            table[path.name] = value


def load_crafted_omniglot(path, **kwargs):
    """``load_omniglot`` of the crafted zip ``path`` (named like small1), registered."""
    from skdml.datasets import load_omniglot

    with registered(path):
        return load_omniglot("small1", data_home=Path(path).parent, download_if_missing=False,
                             **kwargs)


#: A drawing's member name in the crafted zips, used for extra members.
BOMB_MEMBER = "images_background_small1/Alphabet/character03/0005_01.png"


class EndlessServer:
    """An HTTP server on 127.0.0.1 that streams ``n_bytes`` of junk without a length."""

    def __init__(self, n_bytes):
        import http.server
        import threading

        outer = self
        self.sent = 0

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"  # the body ends when the connection closes

            def do_GET(self):  # noqa: N802
                self.send_response(200)
                self.end_headers()
                block = b"x" * (1 << 16)
                try:
                    while outer.sent < n_bytes:
                        self.wfile.write(block)
                        outer.sent += len(block)
                except OSError:
                    pass

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/file"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


#: What an endless body may push past the file's size (socket buffers on loopback).
SLACK = 16 << 20

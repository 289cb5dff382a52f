"""Reading a zip archive without trusting it: names, links and sizes are checked first.

:func:`checked_members` looks at the central directory only (no member is
decompressed) and refuses, naming the zip file and the member:

* a name that is absolute (``/x``, ``C:x``), holds ``..``, ``.``, an empty part
  or a backslash;
* a symbolic link (Unix mode in the member's external attributes);
* a member that declares more than ``max_member_bytes`` uncompressed bytes, or
  more than ``max_ratio`` times its compressed size (a zip bomb), or an archive
  whose members declare more than ``max_total_bytes`` together or number more
  than ``max_members``.

:func:`read_member` then reads one member, never more than its declared size
(:mod:`zipfile` stops at the declared size and checks the CRC), so memory stays
bounded by ``max_member_bytes`` however the archive was crafted.
"""

from __future__ import annotations

import stat
import zipfile
import zlib
from pathlib import PurePosixPath

__all__ = ["checked_members", "read_member"]

#: Largest declared uncompressed size of one member (a 105x105 Omniglot PNG is under 1 KiB).
MAX_MEMBER_BYTES = 1 << 20
#: Largest declared uncompressed size of all members together (Omniglot's zips: under 1 MiB).
MAX_TOTAL_BYTES = 64 << 20
#: Largest uncompressed / compressed ratio of a member over 1 KiB (PNGs hardly compress: ~1.1).
MAX_RATIO = 100
#: Most members in one archive (Omniglot's zips: about 3300).
MAX_MEMBERS = 20_000


def _refuse(path, message):
    raise OSError(f"Refusing the zip file {str(path)!r}: {message}")


def checked_members(archive, path, *, max_member_bytes=MAX_MEMBER_BYTES,
                    max_total_bytes=MAX_TOTAL_BYTES, max_ratio=MAX_RATIO,
                    max_members=MAX_MEMBERS):
    """The :class:`zipfile.ZipInfo` of every file member (directories left out), checked.

    Parameters
    ----------
    archive : zipfile.ZipFile
        The open archive.
    path : path-like
        Its path, for the error messages.

    Returns
    -------
    members : list of zipfile.ZipInfo
        The file members, in the archive's order.

    Raises
    ------
    OSError
        A member has an unsafe name, is a symbolic link, or declares too many
        bytes; the message names the zip file, the member and the limit.
    """
    infos = archive.infolist()
    if len(infos) > max_members:
        _refuse(path, f"it holds {len(infos)} members, more than the limit of {max_members}.")
    total, members, seen = 0, [], set()
    for info in infos:
        name = info.filename
        if name in seen:
            _refuse(path, f"member {name!r} appears twice; an archive names each file once.")
        seen.add(name)
        parts = PurePosixPath(name).parts
        if (name.startswith("/") or "\\" in name or (len(name) > 1 and name[1] == ":")
                or any(p in ("..", ".") for p in name.rstrip("/").split("/"))
                or "" in name.rstrip("/").split("/") or not parts):
            _refuse(path, f"member {name!r} has an unsafe name (an absolute path, '..', '.', "
                          "an empty part or a backslash).")
        if stat.S_ISLNK(info.external_attr >> 16):
            _refuse(path, f"member {name!r} is a symbolic link; links are never followed.")
        if info.is_dir():
            continue
        if info.file_size > max_member_bytes:
            _refuse(path, f"member {name!r} declares {info.file_size} uncompressed bytes, more "
                          f"than the limit of {max_member_bytes} for one member (a zip bomb?); "
                          "it was not decompressed.")
        if info.file_size > 1024 and info.file_size > max_ratio * max(info.compress_size, 1):
            _refuse(path, f"member {name!r} declares {info.file_size} uncompressed bytes for "
                          f"{info.compress_size} compressed, a ratio over the limit of "
                          f"{max_ratio} (a zip bomb?); it was not decompressed.")
        total += info.file_size
        if total > max_total_bytes:
            _refuse(path, f"its members declare more than {max_total_bytes} uncompressed bytes "
                          "together (a zip bomb?); nothing was decompressed.")
        members.append(info)
    return members


def read_member(archive, info, path, max_member_bytes=MAX_MEMBER_BYTES):
    """The bytes of one checked member, reading at most ``max_member_bytes + 1`` of them."""
    try:
        with archive.open(info) as fh:
            data = fh.read(max_member_bytes + 1)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, NotImplementedError,
            EOFError, ValueError, RuntimeError) as exc:  # bad CRC, unknown method, password
        _refuse(path, f"member {info.filename!r} could not be read: {exc}")
    if len(data) > max_member_bytes:
        _refuse(path, f"member {info.filename!r} holds more than {max_member_bytes} bytes.")
    return data

"""The user's cache folder for lookahead-lsp (cost models, saved workspace indexes) and the atomic
writes that put files there (safe_reads.py reads them back).

Every file the package writes goes through atomic_writer(); the native cache writers
(build-cache, save_upstream) follow the same rules in native/atomic_file.cpp."""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from secrets import token_hex
from typing import BinaryIO

# Created exclusively and never through a symbolic link: a file or link planted at the name
# makes the open fail instead of being written through.
_TEMPORARY_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
# A taken name is skipped for another; this many taken in a row means something else is wrong.
_NAME_ATTEMPTS = 16
# The temporaries of atomic_writer (NAME.<16 hex>.tmp) and of native/atomic_file.cpp
# (NAME.tmp.<16 hex>; native/scratch_file.cpp's scratch.tmp.<16 hex> where O_TMPFILE is
# missing): a process killed while writing (SIGKILL, a crash, a power cut) leaves its own
# behind, gigabytes for a large folder's index.
_TEMPORARY_NAME = re.compile(r".+\.(?:[0-9a-f]{16}\.tmp|tmp\.[0-9a-f]{16})")
# A temporary not written to for this long belongs to no live writer: each writes its file
# continuously, a folder table's builder pass by pass (minutes apart at most on the
# largest folders measured).
STALE_TEMPORARY_S = 3600.0


def default_cache_dir() -> Path:
    """$XDG_CACHE_HOME/lookahead-lsp, or ~/.cache/lookahead-lsp (the XDG base directory spec
    says to ignore a relative XDG_CACHE_HOME)."""
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".cache"
    return base / "lookahead-lsp"


@contextlib.contextmanager
def atomic_writer(path: Path) -> Iterator[BinaryIO]:
    """A file to write that replaces `path` only once complete: a temporary file in the same
    folder (a random name, created exclusively with mode 0600, never through a planted file or
    symbolic link), fsync'd, renamed over `path`, the rename itself made durable. On an error
    the temporary file is removed and the old `path`, if any, stays. OSError when the folder
    cannot be written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temporary = _create_temporary(path)
    try:
        with os.fdopen(descriptor, "wb") as file:
            yield file
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    _fsync_folder(path.parent)


def sweep_temporaries(folder: Path, stale_s: float = STALE_TEMPORARY_S) -> int:
    """Removes the temporaries that writers killed mid-write left in folder (its top level): the
    regular files of this user named as atomic writers name them and not modified for stale_s.
    Links, folders and other users' files are left alone. Returns how many were removed."""
    removed = 0
    now = time.time()
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return 0
    for entry in entries:
        if not _TEMPORARY_NAME.fullmatch(entry.name):
            continue
        try:
            info = entry.stat(follow_symlinks=False)
            if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid() or now - info.st_mtime < stale_s:
                continue
            os.unlink(entry.path)
            removed += 1
        except OSError:
            continue  # gone meanwhile, or not ours to remove
    return removed


def _create_temporary(path: Path) -> tuple[int, Path]:
    for _ in range(_NAME_ATTEMPTS):
        temporary = path.with_name(f"{path.name}.{token_hex(8)}.tmp")
        try:
            return os.open(temporary, _TEMPORARY_FLAGS, 0o600), temporary
        except FileExistsError:
            continue
    raise FileExistsError(
        errno.EEXIST, f"no free temporary name after {_NAME_ATTEMPTS} tries", str(path)
    )


def _fsync_folder(folder: Path) -> None:
    # Makes the rename itself durable; some systems cannot open a folder for that.
    try:
        descriptor = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)

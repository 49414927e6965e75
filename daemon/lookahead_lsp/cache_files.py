"""The user's cache folder for lookahead-lsp (cost models, saved workspace indexes), the atomic
writes that put files there and the guarded reads that take them back.

Every file the package writes goes through atomic_writer(); the native cache writers
(build-cache, save_upstream) follow the same rules in native/atomic_file.cpp."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from secrets import token_hex
from typing import BinaryIO

# Created exclusively and never through a symbolic link: a file or link planted at the name
# makes the open fail instead of being written through.
_TEMPORARY_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: opening a FIFO would otherwise wait for a writer; regular files read the same.
_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC
# A taken name is skipped for another; this many taken in a row means something else is wrong.
_NAME_ATTEMPTS = 16


class NotRegularFileError(OSError):
    """A file to read is a folder, a symbolic link, a FIFO, a device or a socket."""


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


def read_regular_file(path: Path, max_bytes: int) -> bytes:
    """The whole content of `path`, a copy that nothing done to the file later can change.
    FileNotFoundError when nothing is there; NotRegularFileError for anything but a regular
    file (a symbolic link is not followed, a FIFO is refused without waiting for a writer);
    OSError (EFBIG) for a file above max_bytes, which is not read."""
    descriptor = _open_for_reading(path)
    try:
        status = os.fstat(descriptor)
        _raise_if_not_regular(status.st_mode)
        if status.st_size > max_bytes:
            raise _too_large(max_bytes)
        with open(descriptor, "rb", closefd=False) as file:
            data = file.read(max_bytes + 1)
    finally:
        os.close(descriptor)
    if len(data) > max_bytes:  # it grew while being read
        raise _too_large(max_bytes)
    return data


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


def _open_for_reading(path: Path) -> int:
    try:
        return os.open(path, _READ_FLAGS)
    except OSError as error:
        failure = error
    # A symbolic link or a socket fails to open (ELOOP, ENXIO): say what is there instead.
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        raise failure from None
    _raise_if_not_regular(mode)
    raise failure


def _raise_if_not_regular(mode: int) -> None:
    if stat.S_ISREG(mode):
        return
    kinds = [
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISLNK, "a symbolic link, which is not followed"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ]
    kind = next((name for test, name in kinds if test(mode)), "of an unknown kind")
    raise NotRegularFileError(f"not a regular file ({kind})")


def _too_large(max_bytes: int) -> OSError:
    return OSError(errno.EFBIG, f"larger than {max_bytes} bytes, not read")


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

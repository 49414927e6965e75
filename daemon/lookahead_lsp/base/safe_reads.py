"""Reading files the package does not control (a repository's sources and .gitignore files, its
own cache files, which anyone with access to the folder could replace): one opener for them all.

A file is read only when it is a regular file. Anything else is turned away before it is opened
(a FIFO would wait for a writer forever, a device could never end), and the file is opened
non-blocking, so that one swapped for a FIFO in between is never waited on either: the status of
what was actually opened decides. Sizes are capped before reading and again after, as a file can
grow while it is read."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


class NotRegularFileError(OSError):
    """A file to read is a folder, a symbolic link, a FIFO, a device or a socket."""


class FileTooLargeError(OSError):
    """A file above the size its reader accepts; it is not read (EFBIG)."""

    def __init__(self, max_bytes: int) -> None:
        super().__init__(errno.EFBIG, f"larger than {max_bytes} bytes, not read")


@contextlib.contextmanager
def open_regular_file(path: Path, follow_symlinks: bool = True) -> Iterator[tuple[BinaryIO, os.stat_result]]:
    """`path` opened for reading, with the status of the file opened, when it is a regular file
    (with follow_symlinks=False, not a symbolic link either). FileNotFoundError when nothing is
    there (or a broken symbolic link); NotRegularFileError for anything but a regular file;
    OSError when it cannot be opened."""
    _raise_if_not_regular((os.stat if follow_symlinks else os.lstat)(path).st_mode)
    descriptor = _open(path, _READ_FLAGS if follow_symlinks else _READ_FLAGS | os.O_NOFOLLOW)
    with open(descriptor, "rb", closefd=True) as file:
        status = os.fstat(descriptor)
        _raise_if_not_regular(status.st_mode)
        yield file, status


def read_capped(file: BinaryIO, status: os.stat_result, max_bytes: int, limit: int | None = None) -> bytes:
    """The first `limit` bytes (all when None) of a file open_regular_file opened, whose status
    it gave; FileTooLargeError when the file holds more than max_bytes."""
    if status.st_size > max_bytes:
        raise FileTooLargeError(max_bytes)
    data = file.read(max_bytes + 1 if limit is None else min(limit, max_bytes + 1))
    if len(data) > max_bytes:  # it grew since the status was taken
        raise FileTooLargeError(max_bytes)
    return data


def read_regular_file(path: Path, max_bytes: int) -> bytes:
    """The whole content of `path`, a copy that nothing done to the file later can change. As
    open_regular_file(path, follow_symlinks=False), and FileTooLargeError above max_bytes."""
    with open_regular_file(path, follow_symlinks=False) as (file, status):
        return read_capped(file, status, max_bytes)


def is_inside(real_path: str, real_root: str) -> bool:
    """Whether a real path (no symlinks, as os.path.realpath gives) is real_root or under it."""
    return real_path == real_root or real_path.startswith(real_root.rstrip(os.sep) + os.sep)


def _open(path: Path, flags: int) -> int:
    try:
        return os.open(path, flags)
    except OSError as error:
        failure = error
    # Replaced since its status was taken (a symbolic link fails with ELOOP, a socket with
    # ENXIO): say what is there now.
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        raise failure from None
    if not stat.S_ISLNK(mode) or flags & os.O_NOFOLLOW:
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

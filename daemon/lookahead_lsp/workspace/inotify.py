"""Linux's inotify through ctypes: one instance, a watch on each folder chosen, events read by
one thread.

watchdog watches either a whole tree (a watch on every folder in it, node_modules and .git
included) or one folder per observed path, each with its own thread and its own inotify
instance (a user has 128 instances by default, for every program together). The workspace
watcher needs one instance holding watches on a chosen set of folders, which is what the
kernel offers directly."""

from __future__ import annotations

import ctypes
import errno
import os
import select
import struct
import sys
from dataclasses import dataclass
from pathlib import Path

# Event bits, from linux/inotify.h.
IN_MODIFY = 0x00000002
IN_CLOSE_WRITE = 0x00000008
IN_MOVED_FROM = 0x00000040
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_DELETE_SELF = 0x00000400
IN_MOVE_SELF = 0x00000800
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
IN_ONLYDIR = 0x01000000
IN_DONT_FOLLOW = 0x02000000
IN_EXCL_UNLINK = 0x04000000
IN_ISDIR = 0x40000000

# struct inotify_event: wd, mask, cookie, len, then len bytes of NUL-padded name.
_HEADER = struct.Struct("iIII")
# Room for a few hundred events per read.
_READ_BYTES = 64 * 1024


def _load_libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    try:
        libc.inotify_init1.argtypes = [ctypes.c_int]
        libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        libc.inotify_rm_watch.argtypes = [ctypes.c_int, ctypes.c_int]
    except AttributeError:  # a C library without inotify
        return None
    return libc


_libc = _load_libc()


def available() -> bool:
    """Whether this system has inotify."""
    return _libc is not None


@dataclass(frozen=True)
class Event:
    """One inotify event: the watch it came from, its bits, and the name of the entry in the
    watched folder it concerns (empty for the folder itself)."""

    wd: int
    mask: int
    name: bytes


class Inotify:
    """An inotify instance. One thread calls read(); wake() makes it return None, from any
    thread; close() once that thread is done."""

    def __init__(self) -> None:
        """OSError when no instance can be had (EMFILE: the user's instance limit)."""
        if _libc is None:
            raise OSError(errno.ENOSYS, "inotify is not available on this system")
        fd = _libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            raise _last_error("inotify_init1")
        self._fd = fd
        self._wake_read, self._wake_write = os.pipe()
        self._poll = select.poll()
        self._poll.register(self._fd, select.POLLIN)
        self._poll.register(self._wake_read, select.POLLIN)

    def add_watch(self, folder: Path, mask: int) -> int:
        """The watch descriptor of folder (the same one again for a folder watched already);
        OSError when it cannot be watched (ENOSPC: the user's watch limit is reached)."""
        assert _libc is not None
        wd: int = _libc.inotify_add_watch(self._fd, os.fsencode(folder), mask)
        if wd < 0:
            raise _last_error(str(folder))
        return wd

    def remove_watch(self, wd: int) -> None:
        """Ends a watch; one the kernel ended already (its folder was deleted) is no error."""
        assert _libc is not None
        _libc.inotify_rm_watch(self._fd, wd)

    def read(self) -> list[Event] | None:
        """The next events, waiting for them; None once wake() was called."""
        while True:
            ready = {fd for fd, _ in self._poll.poll()}
            if self._wake_read in ready:
                return None
            try:
                data = os.read(self._fd, _READ_BYTES)
            except BlockingIOError:
                continue
            return list(_parse(data))

    def wake(self) -> None:
        os.write(self._wake_write, b"\0")

    def close(self) -> None:
        """Ends every watch and the instance."""
        for fd in (self._fd, self._wake_read, self._wake_write):
            os.close(fd)


def _parse(data: bytes) -> list[Event]:
    events = []
    offset = 0
    while offset + _HEADER.size <= len(data):
        wd, mask, _cookie, length = _HEADER.unpack_from(data, offset)
        start = offset + _HEADER.size
        events.append(Event(wd, mask, data[start : start + length].rstrip(b"\0")))
        offset = start + length
    return events


def _last_error(subject: str) -> OSError:
    code = ctypes.get_errno()
    return OSError(code, os.strerror(code), subject)

"""The entries of a git index file (versions 2, 3 and 4), read as data in one linear pass.

The file comes from the repository, so it is parsed as an attacker's: every name is bounded
by PATH_MAX, and the bytes of all names together by a multiple of the file's size, since
version 4 lets each entry say "the previous name and one more byte" and a few megabytes would
otherwise spell gigabytes of names. Entries are yielded one at a time, each name built once.
Anything this reader would have to guess about (a sparse or split index, an extension it must
understand, a damaged entry, a name over a bound) raises IndexRefused, and the caller walks the
folder instead."""

from __future__ import annotations

import stat
import struct
from collections.abc import Iterator
from dataclasses import dataclass

# Linux's PATH_MAX: git refuses longer names on every platform it checks out on.
NAME_MAX_BYTES = 4096
# Honest indexes hold fewer name bytes than index bytes (a version 4 entry still costs 62 bytes
# besides its name); a deep tree of long, shared names stays far below this.
NAMES_PER_INDEX_BYTE = 4
NAMES_SLACK_BYTES = 1 << 20

_SIGNATURE = b"DIRC"
_HEADER = struct.Struct(">4sII")
# ctime, mtime (seconds and nanoseconds each), dev, ino, mode, uid, gid, size, object id, flags.
_ENTRY = struct.Struct(">IIIIIIIIII20sH")
_EXTENDED = 0x4000
_NAME_LENGTH_MASK = 0x0FFF
_TRAILER_BYTES = 20  # the SHA-1 of what precedes it
_GITLINK = 0o160000


class IndexRefused(ValueError):
    """An index this reader will not list; the message says why, in a few words."""


@dataclass(frozen=True)
class IndexEntry:
    """One tracked path (relative to the checkout's top, as git stores it) and its mode."""

    name: bytes
    mode: int

    @property
    def is_submodule(self) -> bool:
        return self.mode == _GITLINK


def index_entries(data: bytes) -> Iterator[IndexEntry]:
    """The entries of the index file whose bytes are data, in order, conflicted paths once.
    Raises IndexRefused (possibly after yielding some entries) for an index git would have to
    expand first, a damaged one, or one over the bounds in the module docstring."""
    if len(data) < _HEADER.size + _TRAILER_BYTES:
        raise IndexRefused("shorter than a header")
    signature, version, count = _HEADER.unpack_from(data, 0)
    if signature != _SIGNATURE or version not in (2, 3, 4):
        raise IndexRefused(f"not an index of version 2, 3 or 4 (version {version})")
    end = len(data) - _TRAILER_BYTES
    names_budget = NAMES_PER_INDEX_BYTE * len(data) + NAMES_SLACK_BYTES
    offset = _HEADER.size
    previous = b""
    for _ in range(count):
        start = offset
        if offset + _ENTRY.size > end:
            raise IndexRefused("an entry runs past the end")
        fields = _ENTRY.unpack_from(data, offset)
        mode, flags = fields[6], fields[11]
        offset += _ENTRY.size
        if flags & _EXTENDED:
            if version < 3 or offset + 2 > end:
                raise IndexRefused("a damaged entry")
            offset += 2  # skip-worktree and intent-to-add: the path is tracked all the same
        if version == 4:
            drop, offset = _varint(data, offset, end)
            if drop > len(previous):
                raise IndexRefused("a name drops more than the name before it")
            stem = previous[: len(previous) - drop]
            nul = data.find(b"\0", offset, min(end, offset + NAME_MAX_BYTES - len(stem) + 1))
            if nul < 0:
                raise IndexRefused("a name longer than PATH_MAX")
            name = stem + data[offset:nul]
            offset = nul + 1
        else:
            nul = data.find(b"\0", offset, min(end, offset + NAME_MAX_BYTES + 1))
            if nul < 0:
                raise IndexRefused("a name longer than PATH_MAX")
            name = data[offset:nul]
            # Entries are padded with 1 to 8 NULs to a multiple of 8 bytes.
            offset = start + ((nul - start) // 8 + 1) * 8
            if offset > end:
                raise IndexRefused("an entry runs past the end")
        if not name or (flags & _NAME_LENGTH_MASK) not in (len(name), _NAME_LENGTH_MASK):
            raise IndexRefused("a damaged entry")
        if stat.S_ISDIR(mode):
            raise IndexRefused("a sparse index")
        names_budget -= len(name)
        if names_budget < 0:
            raise IndexRefused("names out of proportion to the index's size")
        if name != previous:  # a conflicted path has an entry for each side
            yield IndexEntry(name, mode)
        previous = name
    _check_extensions(data, offset, end)


def _varint(data: bytes, offset: int, end: int) -> tuple[int, int]:
    """Git's offset encoding (each continuation adds one before shifting), and the offset
    after it. A name can drop at most PATH_MAX bytes, so a longer number is damage."""
    value = -1
    while True:
        if offset >= end:
            raise IndexRefused("an entry runs past the end")
        byte = data[offset]
        offset += 1
        value = (value + 1) << 7 | (byte & 0x7F)
        if value > NAME_MAX_BYTES:
            raise IndexRefused("a damaged entry")
        if not byte & 0x80:
            return value, offset


def _check_extensions(data: bytes, offset: int, end: int) -> None:
    """Raise IndexRefused when an extension that changes what the entries mean follows them
    at offset: git names those in lowercase ("link": a split index whose entries lie in
    another file, "sdir": a sparse index). A malformed tail counts as one."""
    while offset < end:
        if offset + 8 > end:
            raise IndexRefused("a damaged extension")
        signature = data[offset : offset + 4]
        size = int.from_bytes(data[offset + 4 : offset + 8], "big")
        if not 65 <= signature[0] <= 90:  # optional ones start with an uppercase letter
            raise IndexRefused(f"an extension only git can apply ({signature!r})")
        offset += 8 + size
    if offset != end:
        raise IndexRefused("a damaged extension")

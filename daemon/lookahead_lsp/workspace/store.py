"""Persistence of a workspace index: every file's tokens and the stamp they were read at, in one
file per workspace folder, so that a restart re-tokenizes only the files that changed. When the
index keeps its bulk on disk, this file is also where the folder table's files' tokens live
(mapped, not read): `generation` names the table built from exactly these tokens.

File layout (all integers little-endian):

    header, 64 bytes:
        magic (8 bytes), format version (u32), reserved (u32, 0), tokenizer fingerprint (u64),
        n_files (u64), n_tokens (u64), names_bytes (u64), generation (u64: 0 when no table
        goes with the file), checksum (u64: CRC-32 of the first 56 header bytes and the body)
    body:
        tokens       int32[n_tokens]     the files' tokens, written as they came (padded to 8 bytes)
        sizes        int64[n_files]      file size at reading, -1 when the stamp is not trusted
        mtimes       int64[n_files]      st_mtime_ns at reading (0 when not trusted)
        token_starts int64[n_files]      each file's tokens are tokens[start:end]
        token_ends   int64[n_files]
        name_ends    int64[n_files]      end of each file's name in `names`
        digests      uint8[n_files, 16]  BLAKE2b-128 of the content, all zero when unknown
        names        bytes[names_bytes]  relative POSIX paths (file system encoding), concatenated

Tokens come first so that a writer streams them to disk as files are tokenized (StoreWriter):
a folder larger than the memory budget never holds all its tokens in memory.

A file that is missing loads as empty; one that cannot be used (truncated, corrupt, another
format version or tokenizer, not this user's) is logged, discarded and rebuilt, never raised."""

from __future__ import annotations

import logging
import mmap
import os
import secrets
import struct
import zlib
from dataclasses import dataclass, field
from hashlib import sha256
from pathlib import Path, PurePosixPath
from typing import BinaryIO, Mapping

import numpy as np
import numpy.typing as npt

from lookahead_lsp.base.cache_files import atomic_writer, default_cache_dir
from lookahead_lsp.base.safe_reads import open_regular_file
from lookahead_lsp.base.tokenizer import TokenArray

MAGIC = b"LKAWSIX\n"
FORMAT_VERSION = 2
DIGEST_BYTES = 16

_log = logging.getLogger(__name__)

# magic, version, reserved, fingerprint, n_files, n_tokens, names_bytes, generation | checksum
_HEADER_START = struct.Struct("<8sIIQQQQQ")
_HEADER_END = struct.Struct("<Q")
HEADER_BYTES = _HEADER_START.size + _HEADER_END.size
_COLUMNS = 5
# the five columns (8 bytes each) and the digest, per file
_BYTES_PER_FILE = _COLUMNS * 8 + DIGEST_BYTES
_NO_DIGEST = bytes(DIGEST_BYTES)
_UNTRUSTED_SIZE = -1
# Far above any index this daemon writes (tens of billions of tokens), below what a corrupt
# header could make the loader map.
MAX_FILE_BYTES = 1 << 40
_CRC_CHUNK = 64 << 20


@dataclass(frozen=True)
class FileRecord:
    """One file's tokens and what they were made from: `stamp` is (size, st_mtime_ns) of the
    file when it was read, or None when it cannot vouch for the content (editor text, or a file
    modified too recently for its timestamp to tell later changes apart); `digest` is the
    BLAKE2b-128 of the bytes tokenized, or None when unknown."""

    tokens: TokenArray
    stamp: tuple[int, int] | None
    digest: bytes | None


@dataclass
class LoadedStore:
    """What a store file held: its records (token arrays are read-only views of the mapped
    file, which they keep mapped) and the generation of the folder table built from them."""

    records: dict[PurePosixPath, FileRecord] = field(default_factory=dict)
    generation: int = 0
    mapping: mmap.mmap | None = None

    def release_pages(self) -> None:
        """Drops the pages read so far from this process's memory (a pass over every token,
        as a table build makes, would otherwise count all of them); the views read them again
        from the page cache when used."""
        if self.mapping is not None and len(self.mapping) and hasattr(mmap, "MADV_DONTNEED"):
            self.mapping.madvise(mmap.MADV_DONTNEED)


class _Unusable(Exception):
    """An index file that cannot be used; the message says why."""


def store_path_for(root: Path, cache_dir: Path | None = None) -> Path:
    """Where the index of workspace folder `root` is kept: index-<hash of its resolved path>.bin
    in cache_dir (default_cache_dir() by default)."""
    digest = sha256(os.fsencode(Path(root).resolve())).hexdigest()[:16]
    return (cache_dir or default_cache_dir()) / f"index-{digest}.bin"


def table_path_for(store_path: Path, generation: int) -> Path:
    """The folder table that goes with the store at store_path written with `generation`."""
    return store_path.with_name(f"{store_path.stem}.{generation:016x}.table")


def new_generation() -> int:
    return secrets.randbits(63) | 1


class StoreWriter:
    """Writes a store file file by file: each file's tokens go to disk as they are added, the
    columns and the header when commit() ends the write (atomically: a temporary file renamed
    over `path`). abandon() instead leaves the old file, if any."""

    def __init__(self, path: Path, fingerprint: int, generation: int = 0) -> None:
        self.path = path
        self.generation = generation
        self._fingerprint = fingerprint
        self._writer = atomic_writer(path)
        self._file: BinaryIO = self._writer.__enter__()
        self._open = True
        self._file.write(bytes(HEADER_BYTES))
        self._crc = 0
        self._n_tokens = 0
        self._names: list[bytes] = []
        self._stamps: list[tuple[int, int]] = []
        self._ranges: list[tuple[int, int]] = []
        self._digests: list[bytes] = []

    @property
    def n_files(self) -> int:
        return len(self._names)

    def add(self, relative: PurePosixPath, record: FileRecord) -> None:
        if record.digest is not None and len(record.digest) != DIGEST_BYTES:
            raise ValueError(f"digests must be {DIGEST_BYTES} bytes")
        tokens = np.ascontiguousarray(record.tokens, dtype="<i4")
        self._put(tokens.data)
        self._ranges.append((self._n_tokens, self._n_tokens + len(tokens)))
        self._n_tokens += len(tokens)
        self._names.append(os.fsencode(relative.as_posix()))
        self._stamps.append(record.stamp or (_UNTRUSTED_SIZE, 0))
        self._digests.append(record.digest or _NO_DIGEST)

    def commit(self) -> None:
        """Writes the columns and the header and renames the file into place. OSError when it
        cannot (the old file stays)."""
        try:
            self._put(bytes(4 * (self._n_tokens % 2)))
            n = len(self._names)
            columns = np.zeros((_COLUMNS, n), dtype="<i8")
            if n:
                columns[0], columns[1] = np.array(self._stamps, dtype=np.int64).T
                columns[2], columns[3] = np.array(self._ranges, dtype=np.int64).T
                columns[4] = np.cumsum([len(name) for name in self._names])
            self._put(columns.tobytes())
            self._put(b"".join(self._digests))
            self._put(b"".join(self._names))
            start = _HEADER_START.pack(
                MAGIC, FORMAT_VERSION, 0, self._fingerprint, n, self._n_tokens,
                sum(map(len, self._names)), self.generation,
            )
            self._file.seek(0)
            self._file.write(start + _HEADER_END.pack(_checksum(start, self._crc)))
        except BaseException:
            self.abandon()
            raise
        self._open = False
        self._writer.__exit__(None, None, None)

    def abandon(self) -> None:
        """Drops an uncommitted write: its temporary file is removed."""
        if self._open:
            self._open = False
            self._writer.__exit__(OSError, OSError("abandoned"), None)

    def _put(self, chunk: bytes | memoryview) -> None:
        self._file.write(chunk)
        self._crc = zlib.crc32(chunk, self._crc)


def _checksum(start: bytes, body_crc: int) -> int:
    # The body is streamed before the header is known, so each has its own CRC.
    return (zlib.crc32(start) << 32) | body_crc


def save_records(path: Path, fingerprint: int, records: Mapping[PurePosixPath, FileRecord]) -> None:
    """Writes the records (in path order, no folder table) atomically. OSError when the folder
    cannot be written (the old file, if any, is kept)."""
    writer = StoreWriter(path, fingerprint)
    try:
        for relative, record in sorted(records.items()):
            writer.add(relative, record)
    except BaseException:
        writer.abandon()
        raise
    writer.commit()


def load_records(path: Path, fingerprint: int, n_vocab: int) -> dict[PurePosixPath, FileRecord]:
    """load_store's records."""
    return load_store(path, fingerprint, n_vocab).records


def load_store(path: Path, fingerprint: int, n_vocab: int) -> LoadedStore:
    """The records saved at `path` for this tokenizer: empty when there is no such file, and
    empty with a warning logged when the file cannot be used (not a regular file of this user,
    above MAX_FILE_BYTES, corrupt). The file is mapped, not read: token arrays are read-only
    views of it. Only this user's own file is mapped, and the daemon replaces it by renaming a
    new one over it, never by writing into it, so a mapping cannot change under its reader."""
    try:
        mapped = _map(path)
    except FileNotFoundError:
        return LoadedStore()
    except (OSError, _Unusable) as error:
        _log.warning("cannot read the workspace index %s (%s); rebuilding it", path, error)
        return LoadedStore()
    try:
        loaded = _parse(mapped, fingerprint, n_vocab)
    except _Unusable as error:
        _log.warning("discarding the workspace index %s: %s; rebuilding it", path, error)
        return LoadedStore()
    loaded.release_pages()  # what was read to check it
    return loaded


def peek_generation(path: Path, fingerprint: int) -> int:
    """The generation in the header of the store at path (0 when none goes with it, or the file
    is missing or not a store of this tokenizer): a read of 64 bytes, before load_store checks
    the whole file."""
    try:
        with open_regular_file(path, follow_symlinks=False) as (file, status):
            header = file.read(HEADER_BYTES) if status.st_uid == os.geteuid() else b""
    except OSError:
        return 0
    if len(header) < HEADER_BYTES:
        return 0
    magic, version, _, stored_fingerprint, _, _, _, generation = _HEADER_START.unpack_from(header)
    if magic != MAGIC or version != FORMAT_VERSION or stored_fingerprint != fingerprint:
        return 0
    return int(generation)


def _map(path: Path) -> mmap.mmap:
    with open_regular_file(path, follow_symlinks=False) as (file, status):
        if status.st_uid != os.geteuid():
            raise _Unusable("not owned by this user")
        if status.st_size > MAX_FILE_BYTES:
            raise _Unusable(f"{status.st_size} bytes, above {MAX_FILE_BYTES}")
        if status.st_size < HEADER_BYTES:
            raise _Unusable(f"truncated ({status.st_size} bytes)")
        return mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)


def _release(data: mmap.mmap, offset: int, size: int) -> None:
    """Drops the pages wholly inside [offset, offset + size) from this process's memory: a check
    reads a store of any size, and what it has read would otherwise stay resident all at once."""
    first = -(-offset // mmap.PAGESIZE) * mmap.PAGESIZE
    end = min(offset + size, len(data)) // mmap.PAGESIZE * mmap.PAGESIZE
    if end > first and hasattr(mmap, "MADV_DONTNEED"):
        data.madvise(mmap.MADV_DONTNEED, first, end - first)


def _parse(data: mmap.mmap, fingerprint: int, n_vocab: int) -> LoadedStore:
    magic, version, reserved, stored_fingerprint, n_files, n_tokens, names_bytes, generation = (
        _HEADER_START.unpack_from(data)
    )
    (checksum,) = _HEADER_END.unpack_from(data, _HEADER_START.size)
    if magic != MAGIC:
        raise _Unusable("not a workspace index file")
    if version != FORMAT_VERSION:
        raise _Unusable(f"format version {version}, expected {FORMAT_VERSION}")
    if reserved:
        raise _Unusable("reserved header fields are not zero")
    if stored_fingerprint != fingerprint:
        raise _Unusable("made with another tokenizer")
    token_bytes = 4 * (n_tokens + n_tokens % 2)
    expected = HEADER_BYTES + token_bytes + n_files * _BYTES_PER_FILE + names_bytes
    if len(data) != expected:
        raise _Unusable(f"{len(data)} bytes where the header announces {expected}")
    view = memoryview(data)
    tokens = np.frombuffer(data, dtype="<i4", count=n_tokens, offset=HEADER_BYTES)
    # One read of each chunk for the checksum and the token range (chunks start a multiple of
    # 4 bytes into the tokens); a bad checksum is reported before bad tokens.
    crc = 0
    tokens_in_range = True
    for offset in range(HEADER_BYTES, len(data), _CRC_CHUNK):
        crc = zlib.crc32(view[offset : offset + _CRC_CHUNK], crc)
        chunk = tokens[(offset - HEADER_BYTES) // 4 : (offset - HEADER_BYTES + _CRC_CHUNK) // 4]
        if len(chunk) and (int(chunk.min()) < 0 or int(chunk.max()) >= n_vocab):
            tokens_in_range = False
        _release(data, offset, _CRC_CHUNK)
    if _checksum(bytes(view[: _HEADER_START.size]), crc) != checksum:
        raise _Unusable("checksum mismatch")
    if not tokens_in_range:
        raise _Unusable(f"token ids outside [0, {n_vocab})")
    offset = HEADER_BYTES + token_bytes
    columns = np.frombuffer(data, dtype="<i8", count=_COLUMNS * n_files, offset=offset).reshape(_COLUMNS, n_files)
    offset += 8 * _COLUMNS * n_files
    digests = bytes(view[offset : offset + DIGEST_BYTES * n_files])
    names = bytes(view[offset + DIGEST_BYTES * n_files :])
    return LoadedStore(_records(columns, digests, names, tokens), generation, data)


def _records(
    columns: npt.NDArray[np.int64], digests: bytes, names: bytes, tokens: npt.NDArray[np.int32]
) -> dict[PurePosixPath, FileRecord]:
    sizes, mtimes, starts, ends, name_ends = columns
    n_files = len(sizes)
    if n_files and (
        int(starts.min()) < 0 or bool(np.any(ends < starts)) or int(ends.max()) > len(tokens)
    ):
        raise _Unusable("token ranges out of bounds")
    _check_ends(name_ends, len(names), "name")
    if n_files and int(sizes.min()) < _UNTRUSTED_SIZE:
        raise _Unusable("negative file size")
    records: dict[PurePosixPath, FileRecord] = {}
    name_start = 0
    for i in range(n_files):
        name_end = int(name_ends[i])
        relative = _relative_path(names[name_start:name_end])
        if relative in records:
            raise _Unusable(f"{relative} appears twice")
        digest = digests[DIGEST_BYTES * i : DIGEST_BYTES * (i + 1)]
        size = int(sizes[i])
        records[relative] = FileRecord(
            tokens=tokens[int(starts[i]) : int(ends[i])],
            stamp=None if size == _UNTRUSTED_SIZE else (size, int(mtimes[i])),
            digest=None if digest == _NO_DIGEST else digest,
        )
        name_start = name_end
    return records


def _check_ends(ends: npt.NDArray[np.int64], total: int, what: str) -> None:
    if len(ends) == 0:
        if total:
            raise _Unusable(f"{what} data without files")
        return
    if int(ends[0]) < 0 or bool(np.any(np.diff(ends) < 0)) or int(ends[-1]) != total:
        raise _Unusable(f"{what} offsets out of order")


def _relative_path(name: bytes) -> PurePosixPath:
    text = os.fsdecode(name)
    relative = PurePosixPath(text)
    # Only what save_records writes: normalized relative paths that stay inside the folder.
    if (
        not relative.parts
        or relative.is_absolute()
        or relative.as_posix() != text
        or ".." in relative.parts
    ):
        raise _Unusable(f"bad file name {text!r}")
    return relative

"""Persistence of a workspace index: every file's tokens and the stamp they were read at, in one
file per workspace folder, so that a restart re-tokenizes only the files that changed.

File layout (all integers little-endian):

    header, 64 bytes:
        magic (8 bytes), format version (u32), reserved (u32, 0), tokenizer fingerprint (u64),
        n_files (u64), n_tokens (u64), names_bytes (u64), checksum (u64: CRC-32 of the first
        56 header bytes and the body), reserved (u64, 0)
    body:
        sizes      int64[n_files]      file size at reading, -1 when the stamp is not trusted
        mtimes     int64[n_files]      st_mtime_ns at reading (0 when not trusted)
        token_ends int64[n_files]      end of each file's tokens in `tokens`
        name_ends  int64[n_files]      end of each file's name in `names`
        digests    uint8[n_files, 16]  BLAKE2b-128 of the content, all zero when unknown
        tokens     int32[n_tokens]     every file's tokens, concatenated
        names      bytes[names_bytes]  relative POSIX paths (file system encoding), concatenated

A file that is missing loads as empty; one that cannot be used (truncated, corrupt, another
format version or tokenizer) is logged, discarded and rebuilt, never raised."""

from __future__ import annotations

import logging
import os
import struct
import zlib
from dataclasses import dataclass
from hashlib import sha256
from pathlib import Path, PurePosixPath
from typing import BinaryIO, Mapping

import numpy as np
import numpy.typing as npt

from lookahead_lsp.base.cache_files import atomic_writer, default_cache_dir
from lookahead_lsp.base.safe_reads import read_regular_file
from lookahead_lsp.base.tokenizer import TokenArray

MAGIC = b"LKAWSIX\n"
FORMAT_VERSION = 1
DIGEST_BYTES = 16

_log = logging.getLogger(__name__)

# magic, version, reserved, fingerprint, n_files, n_tokens, names_bytes | checksum, reserved
_HEADER_START = struct.Struct("<8sIIQQQQ")
_HEADER_END = struct.Struct("<QQ")
HEADER_BYTES = _HEADER_START.size + _HEADER_END.size
# sizes, mtimes, token_ends and name_ends (8 bytes each) and the digest, per file
_BYTES_PER_FILE = 4 * 8 + DIGEST_BYTES
_NO_DIGEST = bytes(DIGEST_BYTES)
_UNTRUSTED_SIZE = -1
# Far above any index this daemon writes (a billion tokens), below what would exhaust memory
# on reading a file put in the cache folder by something else.
MAX_FILE_BYTES = 1 << 32


@dataclass(frozen=True)
class FileRecord:
    """One file's tokens and what they were made from: `stamp` is (size, st_mtime_ns) of the
    file when it was read, or None when it cannot vouch for the content (editor text, or a file
    modified too recently for its timestamp to tell later changes apart); `digest` is the
    BLAKE2b-128 of the bytes tokenized, or None when unknown."""

    tokens: TokenArray
    stamp: tuple[int, int] | None
    digest: bytes | None


class _Unusable(Exception):
    """An index file that cannot be used; the message says why."""


def store_path_for(root: Path, cache_dir: Path | None = None) -> Path:
    """Where the index of workspace folder `root` is kept: index-<hash of its resolved path>.bin
    in cache_dir (default_cache_dir() by default)."""
    digest = sha256(os.fsencode(Path(root).resolve())).hexdigest()[:16]
    return (cache_dir or default_cache_dir()) / f"index-{digest}.bin"


def save_records(path: Path, fingerprint: int, records: Mapping[PurePosixPath, FileRecord]) -> None:
    """Writes the records (in path order) atomically: a temporary file in the same folder,
    fsync'd, then renamed over `path`. OSError when the folder cannot be written (the old file,
    if any, is kept)."""
    items = sorted(records.items())
    with atomic_writer(path) as file:
        _write(file, fingerprint, items)


def load_records(path: Path, fingerprint: int, n_vocab: int) -> dict[PurePosixPath, FileRecord]:
    """The records saved at `path` for this tokenizer: empty when there is no such file, and
    empty with a warning logged when the file cannot be used (not a regular file, above
    MAX_FILE_BYTES, corrupt). Token arrays are read-only views into one private buffer holding
    the whole file, so nothing done to the file later reaches them."""
    try:
        data = read_regular_file(path, MAX_FILE_BYTES)
    except FileNotFoundError:
        return {}
    except OSError as error:
        _log.warning("cannot read the workspace index %s (%s); rebuilding it", path, error)
        return {}
    try:
        return _parse(data, fingerprint, n_vocab)
    except _Unusable as error:
        _log.warning("discarding the workspace index %s: %s; rebuilding it", path, error)
        return {}


def _write(file: BinaryIO, fingerprint: int, items: list[tuple[PurePosixPath, FileRecord]]) -> None:
    names = [os.fsencode(relative.as_posix()) for relative, _ in items]
    records = [record for _, record in items]
    tokens = [np.ascontiguousarray(record.tokens, dtype="<i4") for record in records]
    n_tokens = sum(len(array) for array in tokens)
    start = _HEADER_START.pack(
        MAGIC, FORMAT_VERSION, 0, fingerprint, len(items), n_tokens, sum(map(len, names))
    )
    stamps = [record.stamp or (_UNTRUSTED_SIZE, 0) for record in records]
    columns = [
        np.array([size for size, _ in stamps], dtype="<i8"),
        np.array([mtime for _, mtime in stamps], dtype="<i8"),
        np.cumsum([len(array) for array in tokens], dtype="<i8"),
        np.cumsum([len(name) for name in names], dtype="<i8"),
    ]
    if any(record.digest is not None and len(record.digest) != DIGEST_BYTES for record in records):
        raise ValueError(f"digests must be {DIGEST_BYTES} bytes")
    digests = b"".join(record.digest or _NO_DIGEST for record in records)
    chunks: list[bytes | memoryview] = [column.tobytes() for column in columns]
    chunks += [digests, *(array.data for array in tokens), *names]
    # The checksum covers the body, so the header is written last, once it is known.
    file.write(bytes(HEADER_BYTES))
    checksum = zlib.crc32(start)
    for chunk in chunks:
        file.write(chunk)
        checksum = zlib.crc32(chunk, checksum)
    file.seek(0)
    file.write(start + _HEADER_END.pack(checksum, 0))


def _parse(data: bytes, fingerprint: int, n_vocab: int) -> dict[PurePosixPath, FileRecord]:
    if len(data) < HEADER_BYTES:
        raise _Unusable(f"truncated ({len(data)} bytes)")
    magic, version, reserved, stored_fingerprint, n_files, n_tokens, names_bytes = (
        _HEADER_START.unpack_from(data)
    )
    checksum, reserved_end = _HEADER_END.unpack_from(data, _HEADER_START.size)
    if magic != MAGIC:
        raise _Unusable("not a workspace index file")
    if version != FORMAT_VERSION:
        raise _Unusable(f"format version {version}, expected {FORMAT_VERSION}")
    if reserved or reserved_end:
        raise _Unusable("reserved header fields are not zero")
    if stored_fingerprint != fingerprint:
        raise _Unusable("made with another tokenizer")
    expected = HEADER_BYTES + n_files * _BYTES_PER_FILE + 4 * n_tokens + names_bytes
    if len(data) != expected:
        raise _Unusable(f"{len(data)} bytes where the header announces {expected}")
    body = memoryview(data)[HEADER_BYTES:]
    if zlib.crc32(body, zlib.crc32(data[: _HEADER_START.size])) != checksum:
        raise _Unusable("checksum mismatch")
    return _records(body, n_files, n_tokens, n_vocab)


def _records(
    body: memoryview, n_files: int, n_tokens: int, n_vocab: int
) -> dict[PurePosixPath, FileRecord]:
    columns = np.frombuffer(body, dtype="<i8", count=4 * n_files).reshape(4, n_files)
    sizes, mtimes, token_ends, name_ends = columns
    offset = 4 * 8 * n_files
    digests = body[offset : offset + DIGEST_BYTES * n_files]
    offset += DIGEST_BYTES * n_files
    tokens = np.frombuffer(body, dtype="<i4", count=n_tokens, offset=offset)
    names = body[offset + 4 * n_tokens :]
    _check_ends(token_ends, n_tokens, "token")
    _check_ends(name_ends, len(names), "name")
    if n_tokens and (int(tokens.min()) < 0 or int(tokens.max()) >= n_vocab):
        raise _Unusable(f"token ids outside [0, {n_vocab})")
    if n_files and int(sizes.min()) < _UNTRUSTED_SIZE:
        raise _Unusable("negative file size")
    records: dict[PurePosixPath, FileRecord] = {}
    token_start = name_start = 0
    for i in range(n_files):
        token_end, name_end = int(token_ends[i]), int(name_ends[i])
        relative = _relative_path(bytes(names[name_start:name_end]))
        if relative in records:
            raise _Unusable(f"{relative} appears twice")
        digest = bytes(digests[DIGEST_BYTES * i : DIGEST_BYTES * (i + 1)])
        size = int(sizes[i])
        records[relative] = FileRecord(
            tokens=tokens[token_start:token_end],
            stamp=None if size == _UNTRUSTED_SIZE else (size, int(mtimes[i])),
            digest=None if digest == _NO_DIGEST else digest,
        )
        token_start, name_start = token_end, name_end
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

"""The metadata of a GGUF file, read in pure Python with every length checked against the file:
a truncated or corrupt file gives a GgufError, never a read outside the file or a huge
allocation. Tensor data and tensor descriptions are not read."""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass, field
from pathlib import Path

MAGIC = b"GGUF"
# Version 1 used 32-bit counts and is no longer written by anyone; llama.cpp refuses it too.
_VERSIONS = (2, 3)
_MAX_KEYS = 1 << 20
_MAX_NESTING = 4

_STRING, _ARRAY = 8, 9
# Fixed-size value types: GGUF type id -> struct format (little-endian).
_SCALARS = {
    0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q",
    12: "<d",
}

Scalar = int | float | bool | str


class GgufError(ValueError):
    """The file is not a well-formed GGUF file; str() is one line for the user."""


@dataclass
class GgufHeader:
    version: int
    tensor_count: int
    values: dict[str, Scalar] = field(default_factory=dict)  # scalar and string values
    array_lengths: dict[str, int] = field(default_factory=dict)  # arrays: their length only

    def text(self, key: str) -> str | None:
        value = self.values.get(key)
        return value if isinstance(value, str) else None

    def integer(self, key: str) -> int | None:
        value = self.values.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else None


def read_header(path: Path) -> GgufHeader:
    """The metadata key-value section of the GGUF file at path. GgufError if it is malformed,
    OSError if it cannot be read."""
    with path.open("rb") as file:
        size = file.seek(0, 2)
        if size < 24:
            raise GgufError(f"{path} is not a GGUF file: {size} bytes")
        with mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
            return _Reader(data, path).header()


class _Reader:
    def __init__(self, data: mmap.mmap, path: Path) -> None:
        self.data = data
        self.path = path
        self.offset = 0

    def header(self) -> GgufHeader:
        if self.take(4) != MAGIC:
            raise GgufError(f"{self.path} is not a GGUF file (no GGUF magic)")
        version = self.unpack("<I")
        if version not in _VERSIONS:
            raise GgufError(f"{self.path}: unsupported GGUF version {version}")
        tensor_count, key_count = self.unpack("<Q"), self.unpack("<Q")
        if key_count > _MAX_KEYS:
            raise GgufError(f"{self.path} is corrupt: {key_count} metadata keys")
        header = GgufHeader(version, tensor_count)
        for _ in range(key_count):
            key = self.string()
            kind = self.unpack("<I")
            if kind == _ARRAY:
                header.array_lengths[key] = self.skip_array(0)
            else:
                header.values[key] = self.scalar(kind)
        return header

    def take(self, count: int) -> bytes:
        end = self.offset + count
        if count < 0 or end > len(self.data):
            raise GgufError(
                f"{self.path} is truncated or corrupt: a value runs past the end at byte {self.offset}"
            )
        chunk = self.data[self.offset : end]
        self.offset = end
        return chunk

    def unpack(self, fmt: str) -> int:
        value: int = struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]
        return value

    def string(self) -> str:
        return self.take(self.unpack("<Q")).decode("utf-8", "replace")

    def scalar(self, kind: int) -> Scalar:
        if kind == _STRING:
            return self.string()
        fmt = _SCALARS.get(kind)
        if fmt is None:
            raise GgufError(f"{self.path} is corrupt: unknown value type {kind} at byte {self.offset}")
        value: Scalar = struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]
        return value

    def skip_array(self, depth: int) -> int:
        if depth >= _MAX_NESTING:
            raise GgufError(f"{self.path} is corrupt: arrays nested {depth} deep")
        kind, count = self.unpack("<I"), self.unpack("<Q")
        # Every element takes at least 8 bytes (a string's length, an array's type and count),
        # so a count the rest of the file cannot hold is refused before looping over it.
        if kind in (_STRING, _ARRAY) and count > (len(self.data) - self.offset) // 8:
            raise GgufError(f"{self.path} is truncated or corrupt: an array of {count} values")
        fmt = _SCALARS.get(kind)
        if fmt is not None:
            self.take(count * struct.calcsize(fmt))
        elif kind == _STRING:
            for _ in range(count):
                self.take(self.unpack("<Q"))
        elif kind == _ARRAY:
            for _ in range(count):
                self.skip_array(depth + 1)
        else:
            raise GgufError(f"{self.path} is corrupt: unknown array type {kind} at byte {self.offset}")
        return count

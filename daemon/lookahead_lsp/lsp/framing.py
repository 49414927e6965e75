"""The LSP base protocol's framing: a header section (`Content-Length: N`, optionally
`Content-Type`, each line ending in CRLF, an empty line to close it), then N bytes of JSON.

A peer's bytes are untrusted, so reading is bounded and recovers instead of ending the session:
- a body above max_bytes is never allocated: the frame is dropped (one log line) and reading
  skips to the next `Content-Length:` header;
- a header section that is not one (no Content-Length, a line that is not `Name: value`, more
  than MAX_HEADER_BYTES without the empty line) is dropped the same way;
- a body that is not JSON but holds a `Content-Length: N` CRLF header (its declared length ran
  into the next frame) is cut there: the bytes from that header on are read again as the next
  frame, and the part before it is parsed on its own. Valid JSON can never hold such a header
  (a raw CR or LF is not allowed inside a JSON string), so a well-formed body is never cut.
  A Content-Length larger than everything the peer sent is not detectable until more bytes
  arrive: the frame completes, and is cut as above, when the next message comes.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

# The largest message a client sends is a whole document (didOpen, a full-text didChange);
# documents this big are far past what is worth completing, and the cap bounds what one
# connection can make the daemon hold to one body plus one read.
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
# Clients send one or two short header lines; a longer section is not a client of ours.
MAX_HEADER_BYTES = 8 * 1024
# The most a single read asks the transport for.
READ_CHUNK = 64 * 1024

_HEADER_LINE = re.compile(rb"([A-Za-z][A-Za-z0-9-]*):[ \t]*([^\r\n]*)")
_NEXT_HEADER = re.compile(rb"content-length:[ \t]{0,8}[0-9]{1,20}\r\n", re.IGNORECASE)
# While skipping, the bytes kept at the end of the buffer: a header split across two reads
# (at most 15 + 8 + 20 + 2 bytes long) is still found once its rest arrives.
_SKIP_KEEP = 64
_LOG = logging.getLogger(__name__)


class FrameError(Exception):
    """A header section that is not LSP framing; str(error) says why in one line."""


@dataclass(frozen=True)
class Frame:
    """One message as received: its parsed JSON body, or `error` (one line) when the body is not
    JSON; `message` is None then."""

    message: Any
    error: str | None = None


class FrameReader:
    """Frames from a byte stream. `read` returns the next bytes available (at most READ_CHUNK),
    b"" at the end of the stream."""

    def __init__(self, read: Callable[[], Awaitable[bytes]]) -> None:
        self._read = read
        self._buffer = bytearray()
        self._skipping = False

    async def next(self, max_bytes: int = MAX_MESSAGE_BYTES, strict: bool = False) -> Frame | None:
        """The next frame; None at the end of the stream. A bad header section or a body above
        max_bytes is logged and skipped (see the module's docstring); with strict, FrameError is
        raised instead, for a caller that closes the connection."""
        while True:
            try:
                length = await self._header(max_bytes)
            except FrameError as error:
                if strict:
                    raise
                _LOG.warning("bad frame skipped: %s", error)
                continue
            if length is None:
                return None
            body = await self._take(length)
            return None if body is None else self._parse(body)

    async def _fill(self) -> bool:
        chunk = await self._read()
        self._buffer += chunk
        return bool(chunk)

    async def _header(self, max_bytes: int) -> int | None:
        """The Content-Length of the next header section, which is consumed; None at the end of
        the stream. On FrameError, reading is already set to skip to the next header."""
        while self._skipping:
            found = _NEXT_HEADER.search(self._buffer)
            if found is not None:
                del self._buffer[: found.start()]
                self._skipping = False
            else:
                del self._buffer[: max(0, len(self._buffer) - _SKIP_KEEP)]
                if not await self._fill():
                    return None
        while (end := self._buffer.find(b"\r\n\r\n", 0, MAX_HEADER_BYTES + 4)) < 0:
            if len(self._buffer) >= MAX_HEADER_BYTES + 4:
                self._skip_from(1)
                raise FrameError(f"no end of the header section in its first {MAX_HEADER_BYTES} bytes")
            if not await self._fill():
                return None
        try:
            length = content_length(bytes(self._buffer[:end]))
        except FrameError:
            self._skip_from(1)  # past this section's own first byte: it may begin with a header
            raise
        if length > max_bytes:
            self._skip_from(end + 4)
            raise FrameError(f"Content-Length {length} is above the {max_bytes}-byte cap; body not read")
        del self._buffer[: end + 4]
        return length

    def _skip_from(self, start: int) -> None:
        del self._buffer[:start]
        self._skipping = True

    async def _take(self, length: int) -> bytes | None:
        while len(self._buffer) < length:
            if not await self._fill():
                return None
        body = bytes(self._buffer[:length])
        del self._buffer[:length]
        return body

    def _parse(self, body: bytes) -> Frame:
        try:
            return Frame(json.loads(body))
        except (ValueError, RecursionError) as error:
            failure = error
        header = _NEXT_HEADER.search(body)
        if header is None:
            return Frame(None, f"body is not JSON: {_first_line(failure)}")
        # The declared length ran into the next frame: read that frame again from its header.
        self._buffer[:0] = body[header.start() :]
        _LOG.warning("Content-Length ran into the next frame; reading from its header again")
        return self._parse(body[: header.start()])


def content_length(section: bytes) -> int:
    """The Content-Length of a header section (without its closing empty line)."""
    length: int | None = None
    for line in section.split(b"\r\n"):
        header = _HEADER_LINE.fullmatch(line)
        if header is None:
            raise FrameError(f"not a header line: {line[:40]!r}")
        if header[1].lower() != b"content-length":
            continue
        value = header[2].strip()
        if length is not None or not value.isdigit() or len(value) > 20:
            raise FrameError(f"bad Content-Length header: {line[:40]!r}")
        length = int(value)
    if length is None:
        raise FrameError("no Content-Length header")
    return length


def _first_line(error: BaseException) -> str:
    return (str(error) or type(error).__name__).splitlines()[0]

"""The LSP framing reader on byte streams cut at every place: well-formed frames, a length above
the cap that is skipped without being read, garbage and bad headers resynchronised at the next
`Content-Length:`, and a Content-Length larger than its body that gives back the next frames."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable
from typing import Any

import pytest

from lookahead_lsp.lsp.framing import Frame, FrameError, FrameReader


def _frame(message: Any, extra: int = 0) -> bytes:
    body = json.dumps(message).encode()
    return b"Content-Length: %d\r\n\r\n" % (len(body) + extra) + body


def _frames(chunks: Iterable[bytes], max_bytes: int = 1 << 20, strict: bool = False) -> list[Frame]:
    """Every frame of a stream delivered in these chunks."""
    pending = list(chunks)

    async def read() -> bytes:
        return pending.pop(0) if pending else b""

    async def collect() -> list[Frame]:
        reader = FrameReader(read)
        found = []
        while (frame := await reader.next(max_bytes, strict)) is not None:
            found.append(frame)
        return found

    return asyncio.run(collect())


def _messages(chunks: Iterable[bytes], max_bytes: int = 1 << 20) -> list[Any]:
    return [frame.message if frame.error is None else "error" for frame in _frames(chunks, max_bytes)]


def _bytewise(data: bytes) -> list[bytes]:
    return [data[i : i + 1] for i in range(len(data))]


A, B, C = {"id": 1, "method": "a"}, {"id": 2, "method": "b", "params": {"text": "Content-Length: 3\\r\\n"}}, {"id": 3}


def test_frames_arrive_whole_whatever_the_reads() -> None:
    stream = _frame(A) + b"content-length: %d\r\nContent-Type: application/vscode-jsonrpc; charset=utf-8\r\n\r\n" % len(
        json.dumps(B)
    ) + json.dumps(B).encode() + _frame(C)
    assert _messages([stream]) == [A, B, C]
    assert _messages(_bytewise(stream)) == [A, B, C]


def test_a_length_above_the_cap_is_skipped_without_reading_it() -> None:
    huge = b"Content-Length: 1000000000000\r\n\r\n"
    assert _messages([huge + _frame(A)]) == [A]
    assert _messages(_bytewise(huge + b"some of a body" + _frame(A))) == [A]
    # Just above a small cap: that frame goes, the next one is read.
    assert _messages([_frame(B) + _frame(A)], max_bytes=len(json.dumps(A))) == [A]


@pytest.mark.parametrize(
    "garbage",
    [
        b"POST / HTTP/1.1\r\nHost: localhost\r\n\r\n",
        b"no headers at all\r\n\r\n",
        b"Content-Length: twelve\r\n\r\n",
        b"Content-Type: text/plain\r\n\r\n",
        b"x" * 10_000,  # no end of headers
    ],
)
def test_garbage_is_skipped_to_the_next_header(garbage: bytes) -> None:
    assert _messages([garbage + _frame(A) + _frame(C)]) == [A, C]
    assert _messages(_bytewise(garbage + _frame(A)))[-1:] == [A]


def test_a_header_inside_garbage_costs_at_most_the_next_frame() -> None:
    # Its second Content-Length looks like a frame of its own: read as one, it takes A's header
    # with it; C is read whole.
    assert _messages([b"Content-Length: 5\r\nContent-Length: 6\r\n\r\n" + _frame(A) + _frame(C)])[-1] == C


@pytest.mark.parametrize("garbage", [b"POST / HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}", b"x" * 10_000])
def test_strict_reading_refuses_garbage(garbage: bytes) -> None:
    with pytest.raises(FrameError):
        _frames([garbage + _frame(A)], strict=True)


def test_a_body_that_is_not_json_is_an_error_frame() -> None:
    assert _messages([b"Content-Length: 9\r\n\r\nnot json!" + _frame(A)]) == ["error", A]
    assert _messages([b"Content-Length: 4\r\n\r\n[[[[" + _frame(A)]) == ["error", A]
    deep = b"[" * 100_000
    assert _messages([b"Content-Length: %d\r\n\r\n" % len(deep) + deep + _frame(A)]) == ["error", A]


def test_a_length_larger_than_its_body_gives_back_the_next_frames() -> None:
    # The first frame says 40 bytes more than it has: its read runs 40 bytes into B's frame.
    stream = _frame(A, extra=40) + _frame(B) + _frame(C)
    assert _messages([stream]) == [A, B, C]
    assert _messages(_bytewise(stream)) == [A, B, C]
    # Running past several frames gives them all back.
    assert _messages([_frame(A, extra=len(_frame(B)) + 10) + _frame(B) + _frame(C)]) == [A, B, C]


def test_a_length_smaller_than_its_body_loses_only_that_frame() -> None:
    assert _messages([_frame(A, extra=-3) + _frame(B) + _frame(C)]) == ["error", B, C]


def test_a_header_inside_a_json_string_is_not_cut() -> None:
    # B's text holds "Content-Length: 3\r\n" as JSON escapes, the only way a string can.
    assert _messages([_frame(B)]) == [B]


def test_the_end_of_the_stream_ends_reading() -> None:
    assert _messages([]) == []
    assert _messages([_frame(A)[:-1]]) == []
    assert _messages([b"Content-Length: 1000000000000\r\n\r\n"]) == []

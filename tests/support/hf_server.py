"""A local HTTP server that answers the Hugging Face Hub requests huggingface_hub makes to
download one file: HEAD and GET of /{repo_id}/resolve/{revision}/{filename}, with the
X-Repo-Commit, ETag and Content-Length headers it requires and byte ranges for resuming.
Tests point huggingface_hub at it with HF_ENDPOINT.

A file may be served with an ETag other than its sha256 (a lying or broken Hub), its first
GET may stop after a number of bytes until the test releases it (a download cut short), and a
GET may send more bytes than the HEAD announced (a hostile server)."""

from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

COMMIT = "0123456789abcdef0123456789abcdef01234567"
_RESOLVE = re.compile(r"/(?P<repo>[^/]+/[^/]+)/resolve/(?P<revision>[^/]+)/(?P<filename>.+)")
_RANGE = re.compile(r"bytes=(\d+)-$")
_STALL_LIMIT_S = 60
_PAD_PIECE = 1 << 20


@dataclass
class ServedFile:
    content: bytes
    etag: str | None = None  # None: the content's sha256, as the Hub does for large files
    stall_after: int | None = None  # the first GET sends this many bytes, then waits
    padding: int = 0  # a GET sends this many zero bytes more than the HEAD announces

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.content).hexdigest()


@dataclass
class Request:
    method: str
    path: str
    range: str | None


@dataclass
class FakeHub:
    files: dict[str, ServedFile] = field(default_factory=dict)  # "repo/filename" -> file
    requests: list[Request] = field(default_factory=list)
    # Set once a stalling GET has sent its first bytes; release is set by the test to end it.
    stalled: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    endpoint: str = ""
    sent: int = 0  # body bytes the GETs got onto the wire, the last one's partly perhaps

    def gets(self) -> list[Request]:
        """The downloads asked for (huggingface_hub may also ask for other things)."""
        return [r for r in self.requests if r.method == "GET" and "/resolve/" in r.path]


def _handler(hub: FakeHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_HEAD(self) -> None:
            self._answer(with_body=False)

        def do_GET(self) -> None:
            self._answer(with_body=True)

        def log_message(self, format: str, *args: object) -> None:
            pass  # keeps the test output clean

        def _answer(self, with_body: bool) -> None:
            hub.requests.append(Request(self.command, self.path, self.headers.get("Range")))
            match = _RESOLVE.fullmatch(self.path.split("?")[0])
            served = hub.files.get(f"{match['repo']}/{match['filename']}") if match else None
            if served is None:
                self.send_response(404)
                self.send_header("X-Error-Code", "EntryNotFound")
                self.send_header("X-Error-Message", "Entry not found")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            start = self._range_start(len(served.content))
            body = served.content[start:]
            padding = served.padding if with_body else 0
            self.send_response(206 if start else 200)
            self.send_header("X-Repo-Commit", COMMIT)
            self.send_header("ETag", f'"{served.etag or served.sha256}"')
            self.send_header("Accept-Ranges", "bytes")
            self.send_header("Content-Length", str(len(body) + padding))
            if start:
                self.send_header("Content-Range", f"bytes {start}-{len(served.content) - 1}/{len(served.content)}")
            self.end_headers()
            if with_body:
                self._send(served, body)

        def _range_start(self, size: int) -> int:
            match = _RANGE.fullmatch(self.headers.get("Range") or "")
            return min(int(match[1]), size) if match else 0

        def _send(self, served: ServedFile, body: bytes) -> None:
            if served.padding:
                self._send_padded(body, served.padding)
                return
            if served.stall_after is None:
                self.wfile.write(body)
                return
            cut, served.stall_after = served.stall_after, None  # the first GET only
            self.wfile.write(body[:cut])
            self.wfile.flush()
            hub.stalled.set()
            hub.release.wait(_STALL_LIMIT_S)
            self.close_connection = True

        def _send_padded(self, body: bytes, padding: int) -> None:
            # Counted piece by piece, until the client stops reading.
            self.close_connection = True
            zeros = bytes(_PAD_PIECE)
            try:
                self.wfile.write(body)
                hub.sent += len(body)
                while padding:
                    piece = zeros[: min(padding, _PAD_PIECE)]
                    self.wfile.write(piece)
                    hub.sent += len(piece)
                    padding -= len(piece)
            except OSError:  # the client hung up
                pass

    return Handler


@contextmanager
def fake_hub() -> Iterator[FakeHub]:
    hub = FakeHub()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(hub))
    server.daemon_threads = True
    hub.endpoint = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield hub
    finally:
        hub.release.set()
        server.shutdown()
        server.server_close()

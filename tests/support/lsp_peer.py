"""A bare LSP peer for the tests that talk to `lookahead-lsp serve` byte by byte: over a socket or
a process's pipes, every read bounded by a timeout so that a server that never answers fails the
test instead of hanging it."""

from __future__ import annotations

import json
import os
import re
import select
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

TIMEOUT_S = 30.0
_HEADER = re.compile(rb"Content-Length: (\d+)\r\n(?:[^\r\n]+\r\n)*\r\n", re.IGNORECASE)


def frame(message: Any, extra: int = 0) -> bytes:
    """message framed; extra bytes more (or fewer) in the Content-Length than the body has."""
    body = json.dumps(message).encode()
    return b"Content-Length: %d\r\n\r\n" % (len(body) + extra) + body


def request(request_id: int, method: str, params: Any = None) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}


def initialize(request_id: int = 1, options: Any = None) -> dict[str, Any]:
    return request(request_id, "initialize", {"processId": None, "capabilities": {}, "initializationOptions": options})


class Peer:
    def __init__(self, receive: Callable[[float], bytes], send: Callable[[bytes], None]) -> None:
        self._receive = receive
        self._send = send
        self._buffer = b""
        self._ended = False

    @classmethod
    def over_socket(cls, sock: socket.socket) -> Peer:
        def receive(timeout: float) -> bytes:
            sock.settimeout(timeout)
            try:
                return sock.recv(65536)
            except ConnectionResetError:
                return b""

        return cls(receive, sock.sendall)

    @classmethod
    def over_pipes(cls, process: subprocess.Popen[bytes]) -> Peer:
        assert process.stdin is not None and process.stdout is not None
        stdin, stdout = process.stdin, process.stdout.fileno()

        def receive(timeout: float) -> bytes:
            ready, _, _ = select.select([stdout], [], [], timeout)
            if not ready:
                raise TimeoutError
            return os.read(stdout, 65536)

        def send(data: bytes) -> None:
            stdin.write(data)
            stdin.flush()

        return cls(receive, send)

    def send(self, message: Any) -> None:
        self._send(message if isinstance(message, bytes) else frame(message))

    def message(self, timeout: float = TIMEOUT_S) -> dict[str, Any] | None:
        """The next message from the server; None once it closed the connection."""
        deadline = time.monotonic() + timeout
        while True:
            header = _HEADER.match(self._buffer)
            if header is not None and len(self._buffer) >= header.end() + int(header[1]):
                end = header.end() + int(header[1])
                body, self._buffer = self._buffer[header.end() : end], self._buffer[end:]
                message: dict[str, Any] = json.loads(body)
                return message
            if self._ended:
                return None
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no message from the server in {timeout} s")
            try:
                chunk = self._receive(left)
            except (TimeoutError, socket.timeout):
                continue
            self._ended = not chunk
            self._buffer += chunk

    def response(self, request_id: Any, timeout: float = TIMEOUT_S) -> dict[str, Any]:
        """The answer to request_id, skipping the notifications and requests before it."""
        while True:
            message = self.message(timeout)
            assert message is not None, f"the server closed the connection before answering {request_id}"
            if "method" not in message and message.get("id") == request_id:
                return message

    def closed_without_answer(self, timeout: float = TIMEOUT_S) -> bool:
        """Whether the server closes the connection without sending anything."""
        return self.message(timeout) is None


def serve_command(cache: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "lookahead_lsp", "serve", "--cache-dir", str(cache), *extra]


def no_model_env(folder: Path) -> dict[str, str]:
    """The environment for a server that must not load a model (its answers here need none)."""
    return {**os.environ, "LOOKAHEAD_LSP_MODEL": str(folder / "no-model.gguf")}


def wait_for_line(log: Path, pattern: str, process: subprocess.Popen[bytes], timeout: float = 60.0) -> re.Match[str]:
    """The first match of pattern in the server's log, waiting for it to be written."""
    deadline = time.monotonic() + timeout
    while True:
        found = re.search(pattern, log.read_text(errors="replace"))
        if found is not None:
            return found
        if process.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"{pattern!r} never in the log:\n{log.read_text(errors='replace')}")
        time.sleep(0.05)

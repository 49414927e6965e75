"""build-cache --dask's progress: each worker reports its shard's files, bytes and tokens
through the scheduler's event log now and then, and the client draws the cluster's sum on a
terminal."""

# distributed's get_worker has an untyped signature.
# mypy: disallow-untyped-calls=False

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, TextIO

from distributed import get_worker

_MB = 1e6
# A worker reports a shard's progress at most this often.
_REPORT_SECONDS = 0.5
PROGRESS_TOPIC = "lookahead-lsp-build-cache"


class ShardReporter:
    """Sends a shard's progress to the client (through the scheduler's event log) now and then."""

    def __init__(self, build: str, shard: int) -> None:
        self._build = build
        self._shard = shard
        self._files = 0
        self._bytes = 0
        self._tokens = 0
        self._last = time.monotonic()

    def file_done(self, n_bytes: int, tokens: int) -> None:
        self._files += 1
        self._bytes += n_bytes
        self._tokens = tokens
        if time.monotonic() - self._last >= _REPORT_SECONDS:
            self.send()

    def send(self) -> None:
        self._last = time.monotonic()
        message = {"build": self._build, "shard": self._shard, "files": self._files,
                   "bytes": self._bytes, "tokens": self._tokens}  # fmt: skip
        get_worker().log_event(PROGRESS_TOPIC, message)


@dataclass
class ClusterProgress:
    """The cluster's progress from the workers' reports, drawn on a terminal. A shard retried
    after a lost worker starts again from zero; the furthest report of each shard counts."""

    build: str
    workers: int
    total_files: int
    total_bytes: int
    stream: TextIO
    started: float = field(default_factory=time.monotonic)
    _shards: dict[int, tuple[int, int, int]] = field(default_factory=dict)
    _width: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def on_event(self, event: tuple[float, Any]) -> None:
        """A subscriber of the event topic: called on the client's event loop thread."""
        message = event[1]
        if not isinstance(message, dict) or message.get("build") != self.build:
            return
        try:
            shard = int(message["shard"])
            seen = (int(message["files"]), int(message["bytes"]), int(message["tokens"]))
        except (KeyError, TypeError, ValueError):
            return
        with self._lock:
            self._shards[shard] = max(self._shards.get(shard, seen), seen)
            self._draw()

    def _draw(self) -> None:
        files = sum(s[0] for s in self._shards.values())
        n_bytes = sum(s[1] for s in self._shards.values())
        tokens = sum(s[2] for s in self._shards.values())
        seconds = max(time.monotonic() - self.started, 1e-9)
        line = (
            f"{files}/{self.total_files} files  {n_bytes / _MB:.1f}/{self.total_bytes / _MB:.1f} MB"
            f"  {tokens / seconds:,.0f} tokens/s on {self.workers} workers"
        )
        self._width = max(self._width, len(line))
        self.stream.write("\r" + line.ljust(self._width))
        self.stream.flush()

    def clear(self) -> None:
        with self._lock:
            if self._width:
                self.stream.write("\r" + " " * self._width + "\r")
                self.stream.flush()
            self._width = 0

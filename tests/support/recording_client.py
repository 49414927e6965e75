"""An Editor (base/editor.py) that records what the user would have been shown or told in the
editor."""

from __future__ import annotations

import threading


class RecordingClient:
    def __init__(self) -> None:
        self.lines: list[tuple[int, str]] = []
        self.status_changes = 0
        self._lock = threading.Lock()

    def log(self, level: int, message: str) -> None:
        with self._lock:
            self.lines.append((level, message))

    def show(self, level: int, message: str) -> None:
        self.log(level, message)

    def progress(self, token: str, title: str, message: str, percent: int | None, done: bool) -> None:
        pass

    def status_changed(self) -> None:
        with self._lock:
            self.status_changes += 1

    def matching(self, text: str) -> list[str]:
        with self._lock:
            return [message for _, message in self.lines if text in message]

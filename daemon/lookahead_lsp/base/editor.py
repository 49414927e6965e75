"""How the daemon talks back to the editor of a session, the one channel that the service, its
folders and its documents use: the editor's log, a message shown to the user, work-done progress
and a note that the status changed. The protocol layer implements it (server.py); the layers
below only call it, from any thread."""

from __future__ import annotations

from typing import Protocol


class Editor(Protocol):
    def log(self, level: int, message: str) -> None:
        """A line in the editor's log (logging's levels)."""

    def show(self, level: int, message: str) -> None:
        """A message shown to the user, and logged."""

    def progress(self, token: str, title: str, message: str, percent: int | None, done: bool) -> None:
        """Work-done progress `token`: begun by its first report, ended by one with done."""

    def status_changed(self) -> None:
        """What the status answers changed (the editor is told, at most a few times a second)."""

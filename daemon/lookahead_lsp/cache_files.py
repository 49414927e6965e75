"""The user's cache folder for lookahead-lsp (cost models, saved workspace indexes) and the
atomic writes that put files there."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO


def default_cache_dir() -> Path:
    """$XDG_CACHE_HOME/lookahead-lsp, or ~/.cache/lookahead-lsp (the XDG base directory spec
    says to ignore a relative XDG_CACHE_HOME)."""
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".cache"
    return base / "lookahead-lsp"


@contextlib.contextmanager
def atomic_writer(path: Path) -> Iterator[BinaryIO]:
    """A file to write that replaces `path` only once complete: a temporary file in the same
    folder, fsync'd, renamed over `path`, the rename itself made durable. On an error the
    temporary file is removed and the old `path`, if any, stays. OSError when the folder cannot
    be written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(descriptor, "wb") as file:
            yield file
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    _fsync_folder(path.parent)


def _fsync_folder(folder: Path) -> None:
    # Makes the rename itself durable; some systems cannot open a folder for that.
    try:
        descriptor = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)

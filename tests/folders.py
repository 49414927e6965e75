"""Folders and checkouts the workspace tests build: files written with their parents, git run
without the user's identity or signing, listings relative to a root."""

from __future__ import annotations

import subprocess
from pathlib import Path


def write_file(root: Path, relative: str, content: bytes | str = "x = 1\n") -> Path:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    return path


def git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=test", "-c", "user.email=test@example.com",
         "-c", "commit.gpgsign=false", *args],
        cwd=repo, check=True, capture_output=True,
    )  # fmt: skip


def relative_names(root: Path, files: list[Path]) -> list[str]:
    return [path.relative_to(root).as_posix() for path in files]

"""Folders and checkouts the workspace tests build: files written with their parents, git run
without the user's identity or signing, listings relative to a root, a folder of real source
the size a test needs (the running interpreter's standard library)."""

from __future__ import annotations

import json
import os
import shutil
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


def stdlib_folder(target: Path, min_bytes: int) -> dict[str, str]:
    """Copies standard library modules (in a fixed order) into target until min_bytes; returns
    their texts by relative path."""
    library = Path(json.__file__).parent.parent
    texts: dict[str, str] = {}
    total = 0
    for path in sorted(library.rglob("*.py")):
        relative = path.relative_to(library).as_posix()
        try:
            text = path.read_text(encoding="utf-8", errors="strict")
        except (UnicodeDecodeError, OSError):
            continue
        if len(text.encode()) > 100_000 or "generated" in text[:300].lower() or "site-packages" in relative:
            continue  # beyond files.py's rules for source files
        (target / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target / relative)
        os.utime(target / relative, ns=(1_700_000_000_000_000_000,) * 2)
        texts[relative] = text
        total += len(text.encode())
        if total >= min_bytes:
            break
    return texts

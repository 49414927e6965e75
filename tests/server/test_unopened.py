"""What the daemon reads of a document the editor did not open: files of its workspace folders
(real paths), regular, not above the cap; nothing else, and never a wait on a FIFO."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from lookahead_lsp.service.unopened import read_unopened

SECRET = "API_TOKEN = 'zebra-quasar-4471'\n"


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    (root / "app.py").write_text("def main():\n    return 1\n")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.py").write_text(SECRET)
    return root


def _read(path: Path, root: Path, max_bytes: int = 1 << 20) -> str | None:
    return read_unopened(path, [root.resolve()], max_bytes)


def test_a_file_of_the_folder_is_read(folder: Path) -> None:
    assert _read(folder / "app.py", folder) == "def main():\n    return 1\n"
    (folder / "alias.py").symlink_to(folder / "app.py")  # a symlink that stays inside
    assert _read(folder / "alias.py", folder) == "def main():\n    return 1\n"


def test_nothing_outside_the_folder_is_read(folder: Path) -> None:
    outside = folder.parent / "outside"
    assert _read(outside / "secret.py", folder) is None
    assert _read(outside / "missing.py", folder) is None  # the same answer: existence not shown
    assert _read(Path("/etc/passwd"), folder) is None
    assert _read(folder / ".." / "outside" / "secret.py", folder) is None
    assert _read(folder / "nul\0.py", folder) is None


def test_a_symlink_out_of_the_folder_is_refused(folder: Path) -> None:
    (folder / "link.py").symlink_to(folder.parent / "outside" / "secret.py")
    (folder / "linked").symlink_to(folder.parent / "outside", target_is_directory=True)
    assert _read(folder / "link.py", folder) is None
    assert _read(folder / "linked" / "secret.py", folder) is None


def test_a_folder_opened_through_a_symlink_is_read(folder: Path) -> None:
    alias = folder.parent / "alias"
    alias.symlink_to(folder, target_is_directory=True)
    assert _read(alias / "app.py", alias) == "def main():\n    return 1\n"


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_is_refused_without_waiting(folder: Path) -> None:
    os.mkfifo(folder / "pipe.py")
    result: list[str | None] = []
    reader = threading.Thread(target=lambda: result.append(_read(folder / "pipe.py", folder)), daemon=True)
    reader.start()
    reader.join(timeout=10)
    assert not reader.is_alive() and result == [None]


def test_directories_and_files_above_the_cap_are_refused(folder: Path) -> None:
    (folder / "package").mkdir()
    assert _read(folder / "package", folder) is None
    (folder / "big.py").write_text("x = 1\n" * 200)
    assert _read(folder / "big.py", folder, max_bytes=1000) is None
    assert _read(folder / "big.py", folder, max_bytes=1200) == "x = 1\n" * 200

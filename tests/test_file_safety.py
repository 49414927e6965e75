"""The Python side's file writes and reads (cache_files.atomic_writer,
safe_reads.read_regular_file, and the saved workspace index that uses them) against files, links
and FIFOs planted beside or at their paths."""

from __future__ import annotations

import logging
import os
import stat
import threading
from collections.abc import Callable
from pathlib import Path, PurePosixPath

import numpy as np
import pytest

from lookahead_lsp.base import cache_files
from lookahead_lsp.base.cache_files import atomic_writer
from lookahead_lsp.base.safe_reads import NotRegularFileError, read_regular_file
from lookahead_lsp.workspace.store import FileRecord, load_records, save_records

needs_symlinks = pytest.mark.skipif(not hasattr(os, "symlink"), reason="no symbolic links")
needs_fifos = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs")


def names_from(first: list[str], then: Callable[[int], str]) -> Callable[[int], str]:
    """A stand-in for secrets.token_hex that yields `first`, then what `then` makes: the
    random names the writer would pick, made known in advance as an attacker would wish."""
    queue = iter(first)
    return lambda n: next(queue, None) or then(n)


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    path = tmp_path / "victim.txt"
    path.write_bytes(b"precious\n")
    return path


@needs_symlinks
def test_writer_skips_a_link_planted_at_its_temporary_name(
    tmp_path: Path, victim: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "model.json"
    planted = tmp_path / "model.json.known.tmp"
    planted.symlink_to(victim)
    monkeypatch.setattr(cache_files, "token_hex", names_from(["known"], lambda n: "f" * (2 * n)))
    with atomic_writer(out) as file:
        file.write(b"new content")
    assert out.read_bytes() == b"new content"
    assert victim.read_bytes() == b"precious\n"
    assert planted.is_symlink() and os.readlink(planted) == str(victim)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.json", "model.json.known.tmp", "victim.txt"]


def test_writer_fails_loudly_when_every_name_is_taken(
    tmp_path: Path, victim: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "index.bin"
    out.write_bytes(b"old index")
    taken = tmp_path / "index.bin.known.tmp"
    taken.write_bytes(b"someone else's")
    monkeypatch.setattr(cache_files, "token_hex", lambda n: "known")
    with pytest.raises(FileExistsError) as error:
        with atomic_writer(out) as file:
            file.write(b"never written")
    assert str(out) in str(error.value) and "temporary name" in str(error.value)
    assert out.read_bytes() == b"old index"
    assert taken.read_bytes() == b"someone else's", "a file at the temporary name is not ours to remove"


def test_writer_names_are_unpredictable_and_private(tmp_path: Path) -> None:
    out = tmp_path / "cost.json"
    seen: list[tuple[str, int]] = []
    for _ in range(2):
        with atomic_writer(out) as file:
            (temporary,) = [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
            seen.append((temporary.name, stat.S_IMODE(temporary.stat().st_mode)))
            file.write(b"{}")
    assert seen[0][0] != seen[1][0]
    assert str(os.getpid()) not in seen[0][0]
    assert [mode for _, mode in seen] == [0o600, 0o600]
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["cost.json"]


def test_the_temporaries_of_interrupted_writes_are_swept_and_nothing_else(tmp_path: Path) -> None:
    """A daemon killed while it saved a large folder's index leaves gigabytes behind; the next
    start removes what no live writer can still be writing, and nothing that is not its own."""
    old = 2 * cache_files.STALE_TEMPORARY_S
    names = {
        "index-0123456789abcdef.bin.0123456789abcdef.tmp": True,  # atomic_writer's
        "index-0123456789abcdef.7.table.tmp.89abcdef01234567": True,  # native/atomic_file.cpp's
        "index-0123456789abcdef.bin": False,  # the index itself
        "cost-0123456789abcdef.json": False,
        "notes.tmp": False,  # not a name a writer gives
    }
    for name in names:
        (tmp_path / name).write_bytes(b"x")
        os.utime(tmp_path / name, (os.path.getmtime(tmp_path / name) - old,) * 2)
    busy = tmp_path / "index-fedcba9876543210.bin.fedcba9876543210.tmp"  # being written now
    busy.write_bytes(b"x")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "kept").write_bytes(b"x")
    link = tmp_path / "cost-1.json.aaaaaaaaaaaaaaaa.tmp"
    link.symlink_to(outside / "kept")
    os.utime(link, (os.path.getmtime(outside / "kept") - old,) * 2, follow_symlinks=False)
    folder = tmp_path / "x.0000000000000000.tmp"
    folder.mkdir()
    os.utime(folder, (os.path.getmtime(folder) - old,) * 2)

    assert cache_files.sweep_temporaries(tmp_path) == 2
    left = {path.name for path in tmp_path.iterdir()}
    assert left == {name for name, swept in names.items() if not swept} | {busy.name, "elsewhere", link.name, folder.name}
    assert (outside / "kept").exists()
    assert cache_files.sweep_temporaries(tmp_path / "missing") == 0


def test_writer_error_keeps_the_old_file(tmp_path: Path) -> None:
    out = tmp_path / "cost.json"
    out.write_bytes(b"old")
    with pytest.raises(RuntimeError):
        with atomic_writer(out) as file:
            file.write(b"half")
            raise RuntimeError("interrupted")
    assert out.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["cost.json"]


# ---------------------------------------------------------------------------------------------
# Reads


def outcome(call: Callable[[], object]) -> object:
    try:
        return call()
    except Exception as error:  # the test looks at which
        return error


def finishes_promptly(call: Callable[[], object], fifo: Path, seconds: float = 1.0) -> object:
    """What call() returns or raises, on a thread. If it is still running after `seconds`
    (waiting for a writer to open the FIFO), the FIFO is opened for writing so that the thread
    ends, and the test fails."""
    result: list[object] = []
    thread = threading.Thread(target=lambda: result.append(outcome(call)))
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        thread.join()
        pytest.fail(f"reading {fifo} blocked for more than {seconds} s")
    return result[0]


def saved_index(path: Path) -> None:
    tokens = np.array([1, 2, 3], dtype=np.int32)
    save_records(path, 7, {PurePosixPath("a.py"): FileRecord(tokens=tokens, stamp=(3, 4), digest=None)})
    assert set(load_records(path, 7, 10)) == {PurePosixPath("a.py")}


@needs_fifos
def test_a_fifo_is_refused_without_waiting(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    fifo = tmp_path / "index-0123.bin"
    os.mkfifo(fifo)
    error = finishes_promptly(lambda: read_regular_file(fifo, 1 << 20), fifo)
    assert isinstance(error, NotRegularFileError) and str(error) == "not a regular file (a FIFO)"
    with caplog.at_level(logging.WARNING, logger="lookahead_lsp.workspace.store"):
        assert finishes_promptly(lambda: load_records(fifo, 7, 10), fifo) == {}
    assert any("not a regular file (a FIFO)" in r.getMessage() for r in caplog.records)


@needs_symlinks
def test_links_directories_and_devices_are_refused(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    real = tmp_path / "real.bin"
    saved_index(real)
    link = tmp_path / "index-0123.bin"
    link.symlink_to(real)
    cases = {
        link: "a symbolic link, which is not followed",
        tmp_path: "a directory",
        Path(os.devnull): "a character device",
    }
    for path, kind in cases.items():
        with pytest.raises(NotRegularFileError, match=f"^not a regular file \\({kind}\\)$"):
            read_regular_file(path, 1 << 20)
    with caplog.at_level(logging.WARNING, logger="lookahead_lsp.workspace.store"):
        assert load_records(link, 7, 10) == {}
    assert any("symbolic link" in r.getMessage() and str(link) in r.getMessage() for r in caplog.records)
    # The file the link names is read as ever.
    assert set(load_records(real, 7, 10)) == {PurePosixPath("a.py")}


def test_files_above_the_limit_are_not_read(tmp_path: Path) -> None:
    path = tmp_path / "big.bin"
    path.write_bytes(b"x" * 11)
    assert read_regular_file(path, 11) == b"x" * 11
    with pytest.raises(OSError, match="larger than 10 bytes"):
        read_regular_file(path, 10)
    with pytest.raises(FileNotFoundError):
        read_regular_file(tmp_path / "missing.bin", 10)


def test_a_saved_index_rewritten_in_place_is_refused(tmp_path: Path) -> None:
    # The saved index is mapped, not copied (a large folder's tokens stay on disk): the daemon
    # replaces it only by renaming a new file over it, and a file changed otherwise fails its
    # checksum at the next load.
    path = tmp_path / "index.bin"
    saved_index(path)
    records = load_records(path, 7, 10)
    assert records[PurePosixPath("a.py")].tokens.tolist() == [1, 2, 3]
    assert not records[PurePosixPath("a.py")].tokens.flags.writeable
    with open(path, "r+b") as file:  # rewritten in place, same inode
        file.write(b"\xff" * path.stat().st_size)
    assert load_records(path, 7, 10) == {}

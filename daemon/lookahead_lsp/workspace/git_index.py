"""The files a git checkout tracks, read from its index file: no git process runs.

A repository's own config (.git/config and what it includes) is written by whoever made the
folder, and git has many ways to run a program from it while it only lists files: an fsmonitor
hook, a lazy fetch of a missing object in a partial clone (which runs `core.sshCommand` or a
remote helper), hooks, pagers, filters. Overriding them one by one never ends, so git is not
run at all: the index is parsed by dulwich, a library that reads bytes and executes nothing,
and the repository's config is never read. What git would need to repair or expand first (a
sparse index, a split index, an index this reader does not know, a checkout of another owner)
gives None, and the folder is walked as a plain folder instead."""

from __future__ import annotations

import io
import os
import stat
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from dulwich.index import read_index

from lookahead_lsp.base.safe_reads import read_regular_file

# An index holds ~70-100 bytes a file: a million files fit well below this.
_INDEX_MAX_BYTES = 256 << 20
# A .git file (worktrees, submodules) is one "gitdir: <path>" line.
_GITDIR_FILE_MAX_BYTES = 4096
_GITLINK = 0o160000
_TRAILER_BYTES = 20  # the SHA-1 of what precedes it
_HEADER_BYTES = 12


@dataclass(frozen=True)
class Checkout:
    """A git checkout found at or above a folder: its top, its git folder, and the tracked
    files under the folder (relative to the folder)."""

    top: Path
    git_dir: Path
    files: list[PurePosixPath]


def find_checkout(root: Path) -> Checkout | None:
    """The checkout that holds root and its tracked files under root, or None when root is in
    no checkout this reader can trust and read (see the module docstring), or nothing under
    root is tracked."""
    real_root = Path(os.path.realpath(root))
    # As git: the user's GIT_CEILING_DIRECTORIES are folders the search does not go up into.
    ceilings = {os.path.realpath(c) for c in os.environ.get("GIT_CEILING_DIRECTORIES", "").split(os.pathsep) if c}
    for top in (real_root, *real_root.parents):
        if top != real_root and str(top) in ceilings:
            return None
        if not os.path.lexists(top / ".git"):
            continue
        git_dir = _git_dir(top)
        if git_dir is None:
            return None  # a .git this reader cannot follow (a symlink, a FIFO, a bad pointer)
        if not (_owned_by_us(top) and _owned_by_us(git_dir)):
            return None  # as git's safe.directory: another user's checkout is not opened
        names = _tracked_names(git_dir / "index")
        if names is None:
            return None
        prefix = real_root.relative_to(top).as_posix()
        files = _under(names, "" if prefix == "." else prefix + "/")
        return Checkout(top, git_dir, files) if files else None
    return None


def _git_dir(top: Path) -> Path | None:
    """top/.git when it is a folder, or the folder a .git file ("gitdir: path") names."""
    dot_git = top / ".git"
    try:
        mode = os.lstat(dot_git).st_mode
    except OSError:
        return None
    if stat.S_ISDIR(mode):
        return dot_git
    if not stat.S_ISREG(mode):
        return None
    try:
        line = read_regular_file(dot_git, _GITDIR_FILE_MAX_BYTES).decode("utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    if not line.startswith("gitdir:"):
        return None
    target = Path(line[len("gitdir:"):].strip())
    target = target if target.is_absolute() else top / target
    try:
        return target if stat.S_ISDIR(os.stat(target).st_mode) else None
    except OSError:
        return None


def _owned_by_us(path: Path) -> bool:
    try:
        return os.lstat(path).st_uid == os.geteuid()
    except OSError:
        return False


def _tracked_names(index: Path) -> list[bytes] | None:
    """The paths the index at `index` lists (relative to the checkout's top), or None when it
    is missing, damaged, or of a shape only git itself can expand."""
    try:
        data = read_regular_file(index, _INDEX_MAX_BYTES)
    except OSError:
        return None
    stream = io.BytesIO(data)
    names: list[bytes] = []
    # dulwich raises what its parser meets (struct.error, AssertionError, ValueError, ...): a
    # damaged index is no index, whatever the exception.
    try:
        for entry in read_index(stream):
            if entry.is_sparse_dir() or stat.S_ISDIR(entry.mode):
                return None  # a sparse index: folders whose files only git can list
            if entry.mode != _GITLINK:  # a submodule's folder holds no file of this index
                names.append(entry.name)
    except Exception:
        return None
    if _has_required_extension(data, stream.tell()):
        return None
    return names


def _has_required_extension(data: bytes, offset: int) -> bool:
    """Whether an extension that changes what the entries mean follows them at offset: git
    names those in lowercase ("link": a split index whose entries lie in another file,
    "sdir": a sparse index). A malformed tail counts as one."""
    end = len(data) - _TRAILER_BYTES
    if offset < _HEADER_BYTES or offset > end:
        return True
    while offset < end:
        if offset + 8 > end:
            return True
        signature = data[offset : offset + 4]
        size = int.from_bytes(data[offset + 4 : offset + 8], "big")
        if not (65 <= signature[0] <= 90):  # not an optional (uppercase) one
            return True
        offset += 8 + size
    return offset != end


def _under(names: list[bytes], prefix: str) -> list[PurePosixPath]:
    """The names below prefix, relative to it; names that could leave the folder ("..", an
    absolute path) or enter a .git folder are not paths git would check out, and are dropped."""
    files = []
    for raw in names:
        name = os.fsdecode(raw)
        if not name.startswith(prefix):
            continue
        relative = name[len(prefix):]
        parts = relative.split("/")
        if any(part in ("", ".", "..") or part.lower() == ".git" for part in parts):
            continue
        files.append(PurePosixPath(relative))
    return files

"""The files a git checkout tracks, read from its index file: no git process runs.

A repository's own config (.git/config and what it includes) is written by whoever made the
folder, and git has many ways to run a program from it while it only lists files: an fsmonitor
hook, a lazy fetch of a missing object in a partial clone (which runs `core.sshCommand` or a
remote helper), hooks, pagers, filters. Overriding them one by one never ends, so git is not
run at all: the index is parsed as data (git_index_file.py) and the repository's config is
never read. What git would need to repair or expand first (a sparse index, a split index, an
index this reader does not know), an index out of proportion to its size, and a checkout of
another owner give None, and the folder is walked as a plain folder instead."""

from __future__ import annotations

import logging
import os
import stat
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from lookahead_lsp.base.safe_reads import read_regular_file
from lookahead_lsp.workspace.git_index_file import IndexRefused, index_entries

_log = logging.getLogger(__name__)

# An index holds ~70-100 bytes a file: a million files fit well below this.
_INDEX_MAX_BYTES = 256 << 20
# A .git file (worktrees, submodules) is one "gitdir: <path>" line.
_GITDIR_FILE_MAX_BYTES = 4096


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
        prefix = real_root.relative_to(top).as_posix()
        files = _tracked_files(git_dir / "index", "" if prefix == "." else prefix + "/")
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


def _tracked_files(index: Path, prefix: str) -> list[PurePosixPath] | None:
    """The files the index at `index` lists under prefix (a folder of the checkout's top, with
    its trailing slash, or ""), relative to prefix; None when it is missing, or refused (said in
    one line): damaged, crafted, or of a shape only git itself can expand."""
    try:
        data = read_regular_file(index, _INDEX_MAX_BYTES)
    except OSError:
        return None
    try:
        files = [
            path
            for entry in index_entries(data)
            if not entry.is_submodule  # a submodule's folder holds no file of this index
            and (path := _checked_out_path(entry.name, prefix)) is not None
        ]
    except IndexRefused as refused:
        _log.info("not using the git index %s (%s); walking the folder instead", index, refused)
        return None
    return files


def _checked_out_path(raw: bytes, prefix: str) -> PurePosixPath | None:
    """The name relative to prefix when it lies below it; a name that could leave the folder
    ("..", an absolute path) or enter a .git folder is not a path git would check out: None."""
    name = os.fsdecode(raw)
    if not name.startswith(prefix):
        return None
    relative = name[len(prefix):]
    if any(part in ("", ".", "..") or part.lower() == ".git" for part in relative.split("/")):
        return None
    return PurePosixPath(relative)

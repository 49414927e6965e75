""".gitignore files as git reads them: each one's patterns apply below its folder, a deeper
file's rules take precedence over a shallower one's, and a folder a rule excludes hides what it
holds. A .gitignore that is a symbolic link, not a regular file or over 1 MiB is not read.

GitignoreCache keeps a folder tree's parsed files, so that judging one file event costs a few
lstat calls instead of reading and parsing every .gitignore between the root and the file; a
file whose status changed is parsed again, so an edit applies to the next judgement."""

from __future__ import annotations

import os
import threading
from pathlib import Path, PurePosixPath
from typing import Callable

import pathspec

from lookahead_lsp.safe_reads import open_regular_file, read_capped

# Git itself gives up on .gitignore files over 100 MiB; real ones are a few KiB.
_GITIGNORE_MAX_BYTES = 1 << 20
# Folders whose parsed .gitignore (or its absence) a cache keeps before it starts over.
_CACHE_MAX_FOLDERS = 16384

# The patterns of the .gitignore in a folder (relative to the root), None when it has none.
SpecOf = Callable[[PurePosixPath], "pathspec.GitIgnoreSpec | None"]


def parse_gitignore(path: Path) -> pathspec.GitIgnoreSpec | None:
    """The patterns of the .gitignore at path, None when there is none that may be read."""
    try:
        with open_regular_file(path, follow_symlinks=False) as (file, status):
            data = read_capped(file, status, _GITIGNORE_MAX_BYTES)
    except OSError:
        return None
    return pathspec.GitIgnoreSpec.from_lines(data.decode("utf-8", errors="replace").splitlines())


def spec_reader(root: Path) -> SpecOf:
    """Reads each folder's .gitignore from disk at every call."""
    return lambda folder: parse_gitignore(root / folder / ".gitignore")


class IgnoreRules:
    """The .gitignore files that apply in one folder: its own and its ancestors' up to the
    root."""

    def __init__(self, layers: tuple[tuple[PurePosixPath, pathspec.GitIgnoreSpec], ...] = ()):
        self._layers = layers

    @staticmethod
    def above(spec_of: SpecOf, relative: PurePosixPath) -> IgnoreRules:
        """The rules of the .gitignore files of the root and of each folder down to
        relative's parent: those that apply to relative itself."""
        rules, folder = IgnoreRules(), PurePosixPath()
        for part in relative.parts:
            rules = rules.with_folder(spec_of, folder)
            folder = folder / part
        return rules

    def with_folder(self, spec_of: SpecOf, relative: PurePosixPath) -> IgnoreRules:
        """These rules and those of the .gitignore in the folder at relative."""
        spec = spec_of(relative)
        return self if spec is None else IgnoreRules(self._layers + ((relative, spec),))

    def ignores(self, relative: PurePosixPath, is_dir: bool) -> bool:
        for base, spec in reversed(self._layers):
            # Patterns are relative to their .gitignore's folder; a trailing slash lets
            # "name/" patterns match folders only.
            inner = relative.relative_to(base).as_posix() if base.parts else relative.as_posix()
            decision = spec.check_file(inner + "/" if is_dir else inner).include
            if decision is not None:
                return decision
        return False


def gitignored(spec_of: SpecOf, relative: PurePosixPath, is_dir: bool = False) -> bool:
    """Whether the .gitignore files from the root down to relative's folder exclude it or one of
    the folders it lies in, as a walk of the tree that honours them would."""
    rules, folder = IgnoreRules(), PurePosixPath()
    for part in relative.parts[:-1]:
        rules = rules.with_folder(spec_of, folder)
        folder = folder / part
        if rules.ignores(folder, is_dir=True):
            return True
    return rules.with_folder(spec_of, folder).ignores(relative, is_dir)


class GitignoreCache:
    """The parsed .gitignore files of the tree at root, by folder; any thread may call spec()."""

    def __init__(self, root: Path) -> None:
        self._root = root
        self._lock = threading.Lock()
        self._specs: dict[PurePosixPath, tuple[tuple[int, ...] | None, pathspec.GitIgnoreSpec | None]] = {}

    def spec(self, folder: PurePosixPath) -> pathspec.GitIgnoreSpec | None:
        """The patterns of the .gitignore in folder (relative to the root), parsed again only
        when its status (inode, size, modification and change times) changed."""
        path = self._root / folder / ".gitignore"
        stamp = _stamp(path)
        with self._lock:
            cached = self._specs.get(folder)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        spec = parse_gitignore(path) if stamp is not None else None
        with self._lock:
            if len(self._specs) >= _CACHE_MAX_FOLDERS:
                self._specs.clear()
            self._specs[folder] = (stamp, spec)
        return spec


def _stamp(path: Path) -> tuple[int, ...] | None:
    try:
        status = os.lstat(path)
    except OSError:
        return None
    return status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns

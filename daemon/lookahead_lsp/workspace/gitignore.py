""".gitignore files as git reads them: each one's patterns apply below its folder, a deeper
file's rules take precedence over a shallower one's, and a folder a rule excludes hides what it
holds. A .gitignore that is a symbolic link, not a regular file or over 64 KiB is not read.

GitignoreCache keeps a folder tree's parsed files, so that judging one file event costs a few
lstat calls instead of reading and parsing every .gitignore between the root and the file; a
file whose status changed is parsed again, so an edit applies to the next judgement.

The patterns come from the folder, so matching them must not cost what the folder's author
likes: they run on RE2 (pathspec's re2 backend), whose time is linear in the path whatever the
pattern (`*a*a*a...*b` backtracks for minutes in Python's `re`), and their number is bounded per
file, per path and per cache."""

from __future__ import annotations

import io
import os
import threading
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import Callable

import pathspec
from dulwich.config import ConfigFile

from lookahead_lsp.base.safe_reads import is_inside, open_regular_file, read_capped, read_regular_file

# Git itself gives up on .gitignore files over 100 MiB; real ones are a few KiB and a few
# hundred patterns. What lies beyond these bounds is not applied.
_GITIGNORE_MAX_BYTES = 64 << 10
MAX_PATTERNS_PER_FILE = 1000
# Patterns of all the .gitignore files that apply to one path: each adds a match per path.
_MAX_PATTERNS_PER_PATH = 10_000
# Folders, and patterns, whose parsed .gitignore (or its absence) a cache keeps before it starts
# over: each pattern is a compiled automaton.
_CACHE_MAX_FOLDERS = 16384
_CACHE_MAX_PATTERNS = 50_000
_BACKEND = "re2"

# The patterns of the .gitignore in a folder (relative to the root), None when it has none.
SpecOf = Callable[[PurePosixPath], "pathspec.GitIgnoreSpec | None"]


def compile_patterns(lines: Sequence[str]) -> pathspec.GitIgnoreSpec:
    """gitignore-style patterns compiled for matching in linear time; ValueError naming the
    first pattern that is not one (e.g. "!"), or when they cannot be compiled together."""
    try:
        return pathspec.GitIgnoreSpec.from_lines(list(lines), backend=_BACKEND)
    except ValueError:
        raise
    except Exception as error:  # re2's own error: the automaton would exceed its memory
        raise ValueError(f"the patterns cannot be compiled together ({error})") from None


def parse_lines(lines: Sequence[str]) -> pathspec.GitIgnoreSpec | None:
    """The patterns of a .gitignore's lines: lines that are not patterns are skipped, as git
    skips them, and only the first MAX_PATTERNS_PER_FILE patterns apply. None when nothing
    usable is left."""
    candidates = [line for line in lines if line.strip() and not line.startswith("#")][:MAX_PATTERNS_PER_FILE]
    if not candidates:
        return None
    try:
        return compile_patterns(candidates)
    except ValueError:
        pass
    kept = [line for line in candidates if _is_pattern(line)]
    try:
        return compile_patterns(kept) if kept else None
    except ValueError:
        return None


def _is_pattern(line: str) -> bool:
    try:
        compile_patterns([line])
    except ValueError:
        return False
    return True


def pattern_count(spec: pathspec.GitIgnoreSpec) -> int:
    return sum(1 for pattern in spec.patterns if pattern.include is not None)


def parse_gitignore(path: Path) -> pathspec.GitIgnoreSpec | None:
    """The patterns of the .gitignore at path, None when there is none that may be read."""
    try:
        with open_regular_file(path, follow_symlinks=False) as (file, status):
            data = read_capped(file, status, _GITIGNORE_MAX_BYTES)
    except OSError:
        return None
    return parse_lines(data.decode("utf-8", errors="replace").splitlines())


def spec_reader(root: Path) -> SpecOf:
    """Reads each folder's .gitignore from disk at every call; not inside the folder's real
    path (a folder symlink on the way), there is none."""
    real_root = os.path.realpath(root)

    def spec_of(folder: PurePosixPath) -> pathspec.GitIgnoreSpec | None:
        if not _inside(root, real_root, folder):
            return None
        return parse_gitignore(root / folder / ".gitignore")

    return spec_of


def _inside(root: Path, real_root: str, folder: PurePosixPath) -> bool:
    """Whether the folder at root/folder really lies in the root: not reached through a folder
    symlink out of it, whose .gitignore is not the folder's."""
    return is_inside(os.path.realpath(root / folder), real_root)


def user_excludes(git_dir: Path | None) -> IgnoreRules:
    """The rules below every .gitignore when listing a checkout's untracked files, as git's
    --exclude-standard: the user's excludes file (core.excludesFile of the user's own git
    config, else ~/.config/git/ignore) and, given the checkout's git folder, its info/exclude.
    The checkout's config is not read: it is the repository's, not the user's."""
    specs = [parse_gitignore(path) for path in (_user_excludes_file(), git_dir and git_dir / "info" / "exclude") if path]
    return IgnoreRules(tuple((PurePosixPath(), spec) for spec in specs if spec is not None))


def _user_excludes_file() -> Path | None:
    xdg = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "git"
    for config in (Path(os.environ.get("GIT_CONFIG_GLOBAL") or Path.home() / ".gitconfig"), xdg / "config"):
        try:
            parsed = ConfigFile.from_file(io.BytesIO(read_regular_file(config, _GITIGNORE_MAX_BYTES)))
            return Path(os.path.expanduser(os.fsdecode(parsed.get((b"core",), b"excludesFile"))))
        except Exception:  # none, unreadable, no such key, or a config dulwich cannot parse
            continue
    return xdg / "ignore"


class IgnoreRules:
    """The .gitignore files that apply in one folder: its own and its ancestors' up to the
    root."""

    def __init__(self, layers: tuple[tuple[PurePosixPath, pathspec.GitIgnoreSpec], ...] = ()):
        self._layers = layers
        self._patterns = sum(pattern_count(spec) for _, spec in layers)

    @staticmethod
    def above(spec_of: SpecOf, relative: PurePosixPath, base: IgnoreRules | None = None) -> IgnoreRules:
        """The rules of the .gitignore files of the root and of each folder down to
        relative's parent (over base): those that apply to relative itself."""
        rules, folder = base or IgnoreRules(), PurePosixPath()
        for part in relative.parts:
            rules = rules.with_folder(spec_of, folder)
            folder = folder / part
        return rules

    def with_folder(self, spec_of: SpecOf, relative: PurePosixPath) -> IgnoreRules:
        """These rules and those of the .gitignore in the folder at relative, unless the
        patterns on the path would exceed their bound."""
        spec = spec_of(relative)
        if spec is None or self._patterns + pattern_count(spec) > _MAX_PATTERNS_PER_PATH:
            return self
        return IgnoreRules(self._layers + ((relative, spec),))

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
        self._real_root = os.path.realpath(root)
        self._lock = threading.Lock()
        self._specs: dict[PurePosixPath, tuple[tuple[int, ...] | None, pathspec.GitIgnoreSpec | None]] = {}
        self._patterns = 0

    def spec(self, folder: PurePosixPath) -> pathspec.GitIgnoreSpec | None:
        """The patterns of the .gitignore in folder (relative to the root), parsed again only
        when its status (inode, size, modification and change times) changed."""
        path = self._root / folder / ".gitignore"
        stamp = _stamp(path)
        with self._lock:
            cached = self._specs.get(folder)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        # Checked on a miss only: a hit is the same file (device and inode) judged before, and
        # a folder replaced by a symlink out of the root gives another stamp.
        inside = stamp is not None and _inside(self._root, self._real_root, folder)
        spec = parse_gitignore(path) if inside else None
        count = 0 if spec is None else pattern_count(spec)
        with self._lock:
            if len(self._specs) >= _CACHE_MAX_FOLDERS or self._patterns + count > _CACHE_MAX_PATTERNS:
                self._specs.clear()
                self._patterns = 0
            previous = self._specs.get(folder)
            if previous is not None and previous[1] is not None:
                self._patterns -= pattern_count(previous[1])
            self._specs[folder] = (stamp, spec)
            self._patterns += count
        return spec


def _stamp(path: Path) -> tuple[int, ...] | None:
    try:
        status = os.lstat(path)
    except OSError:
        return None
    return status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns

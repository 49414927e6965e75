"""The symbol table of one folder: the files that define each name, and what each file defines
and imports (read by symbols.py), within a memory budget.

Kept in columns, for the memory's sake: a large folder defines hundreds of thousands of names,
and an object per definition made the table several times larger (docs/benchmarks.md, "The
symbol table in columns"). A file's definitions are a tuple of names sorted (a definition
found by bisection) beside arrays of their lines, snippet ends and whether each is at the top
level; each name is one string, shared by every file that defines it; a name's files are one
file's number or a tuple of them (only how many past MANY_DEFINERS): numbers, which the garbage
collector does not walk on each of its full passes, as it walked paths. The table counts what
it holds (an estimate from the objects' sizes) and, once at its budget, leaves further files
out (`left_out`), so that no folder makes it grow without bound; a file left out gives no
definitions until it changes and fits again.

Not thread-safe: its owner (retrieval.py) holds its lock around every call."""

from __future__ import annotations

import bisect
import sys
from array import array
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from lookahead_lsp.workspace.symbols import Definition

# The table's part of the folder's memory budget (the index has the rest).
_SHARE = 8
# What a file and a name cost beyond their own objects: their entries in the table's dicts (and
# a file's Path, shared with the index's listing but counted here).
_FILE_BYTES = 400
_NAME_BYTES = 100
# A name defined in more files than this (a macro every header of a platform defines) names
# none of them usefully: only their number is kept, so no name holds more than this many numbers,
# and adding a file costs at most as much. Once past it, a name counts as that common until
# all its files are gone (which of them stay is not known).
MANY_DEFINERS = 16


def table_budget(folder_budget: int) -> int:
    """The symbol table's part of a folder's memory budget, in bytes."""
    return folder_budget // _SHARE


@dataclass(frozen=True)
class _FileSymbols:
    names: tuple[str, ...]  # sorted; a name defined twice is here twice
    lines: array[int]  # of each name's definition (0-based)
    ends: array[int]  # where its snippet ends
    tops: bytes  # 1: at the file's top level
    imports: frozenset[str]
    cost: int  # bytes counted for the file's own objects
    id: int  # what the names it defines hold for it


@dataclass(frozen=True)
class SymbolTableStatus:
    files: int
    memory_bytes: int
    budget_bytes: int
    left_out: int  # files not held: the table was at its budget


class SymbolTable:
    def __init__(self, budget_bytes: int) -> None:
        self.budget_bytes = budget_bytes
        self._memory = 0
        self._files: dict[Path, _FileSymbols] = {}
        self._names: dict[str, str] = {}  # each name's one string
        # A name's files by id, as _set_definers keeps them: numbers, not paths, so that the
        # garbage collector does not walk the table's largest dict at each full pass.
        self._definers: dict[str, int | tuple[int, ...]] = {}
        self._paths: list[Path | None] = []  # by id
        self._free: list[int] = []  # ids of files dropped
        self._by_stem: dict[str, set[Path]] = {}
        self._by_directory: dict[Path, list[Path]] = {}  # each sorted
        self._left_out: set[Path] = set()

    def __len__(self) -> int:
        return len(self._files)

    def status(self) -> SymbolTableStatus:
        return SymbolTableStatus(len(self._files), self._memory, self.budget_bytes, len(self._left_out))

    def put(self, path: Path, found: Iterable[Definition], imports: Iterable[str]) -> bool:
        """Holds path's definitions and imports (path not held: drop it first); False when the
        table is at its budget and leaves it out."""
        ordered = sorted(found, key=lambda d: (d.name, d.line))
        fresh: dict[str, str] = {}
        names = tuple(self._names.get(d.name) or fresh.setdefault(d.name, d.name) for d in ordered)
        lines, ends = array("I", (d.line for d in ordered)), array("I", (d.end for d in ordered))
        tops, imported = bytes(d.top for d in ordered), frozenset(imports)
        cost = _FILE_BYTES + sum(map(sys.getsizeof, (names, lines, ends, tops, imported)))
        named = sum(sys.getsizeof(name) + _NAME_BYTES for name in fresh)
        if self._memory + cost + named > self.budget_bytes:
            self._left_out.add(path)
            return False
        self._left_out.discard(path)
        if self._free:
            ident = self._free.pop()
            self._paths[ident] = path
        else:
            ident = len(self._paths)
            self._paths.append(path)
        self._files[path] = _FileSymbols(names, lines, ends, tops, imported, cost, ident)
        self._memory += cost + named
        for name in dict.fromkeys(names):
            held = self._definers.get(name)
            if held is None:
                self._names[name] = name
                self._definers[name] = ident
            elif isinstance(held, int) and held < 0:
                self._definers[name] = held - 1
            else:
                self._set_definers(name, held, [*_ids(held), ident])
        self._by_stem.setdefault(_stem(path), set()).add(path)
        bisect.insort(self._by_directory.setdefault(path.parent, []), path)
        return True

    def drop(self, path: Path) -> None:
        self._left_out.discard(path)
        old = self._files.pop(path, None)
        if old is None:
            return
        self._memory -= old.cost
        self._paths[old.id] = None
        self._free.append(old.id)
        for name in dict.fromkeys(old.names):
            held = self._definers[name]
            if isinstance(held, int) and held < -1:
                self._definers[name] = held + 1
            elif isinstance(held, tuple):
                self._set_definers(name, held, [i for i in held if i != old.id])
            else:
                del self._definers[name]
                del self._names[name]
                self._memory -= sys.getsizeof(name) + _NAME_BYTES
        stems = self._by_stem.get(_stem(path))
        if stems is not None:
            stems.discard(path)
            if not stems:
                del self._by_stem[_stem(path)]
        listed = self._by_directory.get(path.parent)
        if listed is not None:
            listed.remove(path)
            if not listed:
                del self._by_directory[path.parent]

    def _set_definers(self, name: str, held: int | tuple[int, ...], ids: list[int]) -> None:
        """A name's files (held before) by id: one alone, a few as a tuple, more only counted
        (as minus their number)."""
        value: int | tuple[int, ...]
        if len(ids) == 1:
            value = ids[0]
        elif len(ids) <= MANY_DEFINERS:
            value = tuple(ids)
        else:
            value = -len(ids)
        if isinstance(held, tuple):
            self._memory -= sys.getsizeof(held)
        if isinstance(value, tuple):
            self._memory += sys.getsizeof(value)
        self._definers[name] = value

    def defined_in(self, path: Path | None) -> frozenset[str]:
        held = self._files.get(path) if path is not None else None
        return frozenset(held.names) if held is not None else frozenset()

    def imports_of(self, path: Path) -> frozenset[str]:
        held = self._files.get(path)
        return held.imports if held is not None else frozenset()

    def definitions_of(self, name: str) -> list[tuple[Path, Definition]]:
        """Where name is defined: each file's definitions of it, in line order; none for a name
        defined in more than MANY_DEFINERS files."""
        out: list[tuple[Path, Definition]] = []
        for ident in _ids(self._definers.get(name)):
            path = self._paths[ident]
            assert path is not None
            held = self._files[path]
            at = bisect.bisect_left(held.names, name)
            while at < len(held.names) and held.names[at] == name:
                out.append((path, Definition(name, held.lines[at], held.ends[at], bool(held.tops[at]))))
                at += 1
        return out

    def files_with_stem(self, stem: str) -> Iterable[Path]:
        """The files named stem (before the first dot): what an import of stem may name."""
        return self._by_stem.get(stem, ())

    def listed_beside(self, path: Path) -> list[Path]:
        """The files held in path's folder, sorted (the caller must not change it)."""
        return self._by_directory.get(path.parent, [])


def _ids(held: int | tuple[int, ...] | None) -> tuple[int, ...]:
    """The ids a name's entry holds: none for a name too common (or none)."""
    if isinstance(held, tuple):
        return held
    return (held,) if held is not None and held >= 0 else ()


def _stem(path: Path) -> str:
    return path.name.split(".", 1)[0]

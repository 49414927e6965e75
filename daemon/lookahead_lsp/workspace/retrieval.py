"""Context for a prompt chosen from the folder's own files: the definitions of the names the code
near the cursor uses, then code that looks like it (the retrieval of CrossCodeEval and RepoCoder,
on the daemon's own index).

What is read: only the files the folder's index holds (listed as indexed, so .gitignore,
`ignoreGlobs`, the size cap and the inside-the-folder check all applied), as they are on disk,
read again through workspace/files.read_source. Never an editor's unsaved text (that belongs to
a window, and a shared folder serves several), never another folder's file, never the file the
request is for.

The symbol table (symbol_table.py, from what symbols.py reads) maps each defined name to the
files that define it, within its part of the folder's memory budget, and is kept current file
by file (update / remove, from the index's changes); a file's lines and the
terms of its windows are read when a request needs them and kept for a few files, and
those of the files an open document's requests will search whatever the cursor (its
neighbours, the files it imports) are read ahead by `prepare`, on the folder's thread, so that
the first request in a file does not wait for them (the chunks are the same either way). The
query is the text above the cursor's block of _QUERY_BLOCK lines (the current function, the
file's imports; in a file's first block the lines above the cursor's), never the lines being
typed, so the chosen chunks stay the same from keystroke to keystroke and from line to line
within a block, and the prompt (whose chunks come first) keeps its KV state: each change of the
chunks evaluates the whole prompt again. For the same reason a document's chunks outlive its
block: as long as they still serve the new block's query (each definition's name still used
above, each similar window still like the lines above, and the new choice's similar code not
clearly more alike), they stay, and a new choice is taken only when they no longer do.

Order: definitions of the names used nearest the cursor first (in files the current file
imports, then nearest in the tree), then windows of those files, of the imported ones and of
the file's neighbours in its folder's listing (same language, nearest name first: the module's
other files, where the calls a line is about to make are made too) ranked by Jaccard
similarity of their identifiers' terms (native/text_windows.h: tick_init_highres is tick, init
and highres) to those of the last lines above the cursor, skipping what overlaps a
definition already chosen."""

from __future__ import annotations

import bisect
import os
import re
import threading
from collections import OrderedDict
from itertools import zip_longest
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from lookahead_lsp._lookup import TextWindows, query_terms
from lookahead_lsp.workspace.files import DEFAULT_MAX_BYTES, Unindexable, read_source
from lookahead_lsp.workspace.index import default_memory_budget
from lookahead_lsp.workspace.symbol_table import SymbolTable, SymbolTableStatus, table_budget
from lookahead_lsp.workspace.symbols import Definition, definitions, imported_names, language_of

DEFINITIONS = "definitions"
SIMILAR = "similar"
SOURCES = (DEFINITIONS, SIMILAR)

# A linear pattern (an optional literal, then one class and another): Python's `re` is safe here.
_ATTRIBUTE_OR_NAME = re.compile(r"(\.|->|::)?([A-Za-z_][A-Za-z0-9_]*)")
# The query is the text above the cursor's block of this many lines: the chunks change at most
# once a block as the user writes on (a query up to the cursor's line changed them on many new
# lines), at the price of the names used in the block's own lines above the cursor.
_QUERY_BLOCK = 6
# The names looked up: those of this many lines above, nearest first.
_QUERY_LINES = 40
# A file's imports are looked for in its first lines only (a request must not scan the file).
_HEAD_LINES = 200
# The similarity query: the terms of this many lines above the cursor's.
_SIMILAR_QUERY_LINES = 12
# A window is two blocks of _WINDOW_STEP lines (native/text_windows.h), one block apart from the next.
_WINDOW_STEP = 6
_WINDOW_LINES = 2 * _WINDOW_STEP
# Terms make windows more alike than whole identifiers did (0.15 then): at 0.2 the chunks change
# on no more new lines than before.
_MIN_SIMILARITY = 0.2
_MAX_DEFINITIONS = 6
_MAX_SIMILAR = 3
# Files an imported name may resolve to; files searched for similar code: those defining
# the names chosen and the imported ones, then the file's neighbours up to _SEARCHED_FILES.
_PER_STEM = 2
_SIMILAR_FILES = 4
_SEARCHED_FILES = 8
# Larger files (bundles, generated tables) give definitions but are not searched for similar
# code: their many windows outscore the module's own code more often than they help.
_SIMILAR_MAX_BYTES = 64 * 1024
# Files whose lines (up to the index's size cap each) and windows (of files up to
# _SIMILAR_MAX_BYTES) are kept between requests: a request searches up to _SEARCHED_FILES
# files, and a few documents are open at once.
_CACHED_FILES = 32
_CACHED_WINDOWS = 64
# Results kept per document: the last query's answer, reused while the text above the line is
# unchanged.
_CACHED_ANSWERS = 64
# The previous chunks still serve a new query while each definition's name is used in this many
# lines above (twice the lines a name is looked up in: a name leaving the lookup window does not
# end its definition's use at once), each similar window has at least this share of the
# similarity a window needs to be chosen, and the new choice's similar code is not more alike
# by more than this factor (hysteresis: without it, two near windows take turns).
_KEPT_NAME_LINES = 2 * _QUERY_LINES
_KEPT_SIMILARITY = 0.5
_BETTER_BY = 1.25
# A name defined in more files than this says little about which one is meant.
_MAX_DEFINERS = 8
# Keywords and the builtins of the languages retrieval knows: names no file of a folder is the
# definition of that matters.
_COMMON = frozenset(
    "self cls this None True False null undefined true false return if else for while in is not and or "
    "def class function const let var int char void static struct unsigned long import from export "
    "new typeof sizeof case break continue default print len str int float list dict set tuple range "
    "next iter open type object super isinstance getattr setattr hasattr min max sum sorted any all "
    "enumerate zip map filter repr bool bytes format id hash callable vars dir exec eval input "
    "console require module exports Object Array String Number Promise Error JSON Math Date "
    "size_t uint8_t uint16_t uint32_t uint64_t int8_t int16_t int32_t int64_t bool NULL".split()
)
# Their terms, as the native windows know them (hashes): left out of windows and queries.
_COMMON_TERMS = query_terms(" ".join(sorted(_COMMON)).encode(), np.zeros(0, np.uint64))


@dataclass(frozen=True)
class RetrievedChunk:
    """Lines [start, end) (0-based) of path, chosen because of `why` (DEFINITIONS, SIMILAR)."""

    path: Path
    start: int
    end: int
    why: str
    text: str
    name: str = ""  # for a definition, the name it defines


@dataclass(frozen=True)
class _FileLines:
    stamp: tuple[int, int]
    lines: tuple[str, ...]


@dataclass(frozen=True)
class _FileWindows:
    """The windows of a file searched for similar code: window w is lines [w * _WINDOW_STEP,
    + _WINDOW_LINES), blocks w and w + 1 of _WINDOW_STEP lines, each known by its words
    (native: one pass over the text to build, one over its blocks to score a query)."""

    stamp: tuple[int, int]
    lines: tuple[str, ...]  # the file's (small: _SIMILAR_MAX_BYTES), for the chunks' text
    index: TextWindows


class FolderRetrieval:
    """Context from one folder's files (its symbol table within memory_budget bytes; 0: the
    table's part of the default folder budget). Any thread may call any method."""

    def __init__(self, root: Path, max_bytes: int = DEFAULT_MAX_BYTES, memory_budget: int = 0) -> None:
        self.root = root
        self._real_root = os.path.realpath(root)
        self._max_bytes = max_bytes
        self._lock = threading.Lock()
        self._table = SymbolTable(memory_budget or table_budget(default_memory_budget()))
        self._lines: OrderedDict[Path, _FileLines] = OrderedDict()
        self._windows: OrderedDict[Path, _FileWindows] = OrderedDict()
        self._answers: OrderedDict[tuple[Path, str, tuple[str, ...]], tuple[RetrievedChunk, ...]] = OrderedDict()
        # Each document's (and source list's) last chunks, kept while they serve (the module doc),
        # with the files they come from: a change of the table asks which hold a file, and the
        # folder's thread makes thousands of changes in a row (a checkout).
        self._last: OrderedDict[
            tuple[Path, tuple[str, ...]], tuple[tuple[RetrievedChunk, ...], frozenset[Path]]
        ] = OrderedDict()

    # -- the table -----------------------------------------------------------------------------

    def rebuild(self, paths: Iterable[Path], stopping: Callable[[], bool] = lambda: False) -> None:
        """Reads every file of paths (the index's) into the table."""
        for path in paths:
            if stopping():
                return
            self.update(path)

    def update(self, path: Path) -> None:
        """The file as it is on disk now (gone or unreadable: removed)."""
        text = self._read(path)
        if text is None:
            self.remove(path)
            return
        language = language_of(path.suffix)
        found, imports = definitions(text, language), imported_names(text, language)[0]
        with self._lock:
            self._table.drop(path)
            self._table.put(path, found, imports)
            self._changed(path)

    def remove(self, path: Path) -> None:
        with self._lock:
            self._table.drop(path)
            self._changed(path)

    @property
    def files(self) -> int:
        with self._lock:
            return len(self._table)

    def status(self) -> SymbolTableStatus:
        with self._lock:
            return self._table.status()

    def set_memory_budget(self, budget: int) -> None:
        """The table's new budget: files that change after it are held or left out by it."""
        with self._lock:
            self._table.budget_bytes = budget

    def _changed(self, path: Path) -> None:
        """Drops what path's old text was read into (the lock held): its lines and windows,
        every answer (a name it defines may now be defined elsewhere), and the documents' last
        chunks that hold its text."""
        self._lines.pop(path, None)
        self._windows.pop(path, None)
        self._answers.clear()
        for key in [key for key, (_, held) in self._last.items() if path in held]:
            del self._last[key]

    def _read(self, path: Path) -> str | None:
        try:
            data, _ = read_source(path, self._real_root, self._max_bytes)
        except (Unindexable, OSError):
            return None
        if b"\0" in data[:8192]:
            return None
        return data.decode("utf-8", "replace")

    # -- a request's context -------------------------------------------------------------------

    def retrieve(self, path: Path | None, prefix: str, sources: Sequence[str] = SOURCES) -> tuple[RetrievedChunk, ...]:
        """The chunks for a request on path (None: a document of no file) whose text before the
        cursor is prefix: definitions, then similar code, as sources asks, best first. The
        same for every prefix that differs only in the lines of the cursor's block, and the
        document's last chunks for as long as they still serve its query (_still_serve)."""
        path = Path(os.path.abspath(path)) if path is not None else None  # as the index keys files
        above = _above_block(prefix)
        start = _line_start_before(above, _QUERY_LINES)
        # The lines above the cursor's, and the file's imports (at its head): the query.
        head = _import_lines(above[: min(start, _nth_line_end(above, _HEAD_LINES))])
        query = head + above[start:]
        document = (path or Path(), tuple(sources))
        key = (document[0], query, document[1])
        with self._lock:
            chunks = self._answers.get(key)
            if chunks is not None:
                self._answers.move_to_end(key)
            kept = self._last.get(document)
        if chunks is None:
            # The terms similar code is looked for with: its last lines'.
            like = _terms(query[_line_start_before(query, _SIMILAR_QUERY_LINES) :])
            chunks, similarity = self._choose(path, query, len(head), like, sources)
            if kept is not None and kept[0] != chunks and self._still_serve(kept[0], similarity, above, like):
                chunks = kept[0]
            with self._lock:
                self._answers[key] = chunks
                while len(self._answers) > _CACHED_ANSWERS:
                    self._answers.popitem(last=False)
        with self._lock:
            self._last[document] = (chunks, frozenset(c.path for c in chunks))
            self._last.move_to_end(document)
            while len(self._last) > _CACHED_ANSWERS:
                self._last.popitem(last=False)
        return chunks

    def _still_serve(
        self, last: tuple[RetrievedChunk, ...], similarity: float, above: str, like: npt.NDArray[np.uint64]
    ) -> bool:
        """Whether a document's last chunks still serve a new query (the module doc): above the
        text above the cursor's block, like the terms similar code is looked for with,
        similarity what the similar code chosen for it now scores in all."""
        used = set(_names_nearest_first(above[_line_start_before(above, _KEPT_NAME_LINES) :])[0])
        kept = 0.0
        for chunk in last:
            if chunk.why == DEFINITIONS:
                if chunk.name not in used:
                    return False
                continue
            windows = self._windows_of(chunk.path)
            score = _similarity(windows, chunk.start // _WINDOW_STEP, like) if windows is not None else 0.0
            if score < _KEPT_SIMILARITY * _MIN_SIMILARITY:
                return False
            kept += score
        return kept * _BETTER_BY >= similarity

    def _choose(
        self, path: Path | None, query: str, start: int, like: npt.NDArray[np.uint64], sources: Sequence[str]
    ) -> tuple[tuple[RetrievedChunk, ...], float]:
        """The chunks for query (the file's import lines, then from start the lines above the
        cursor's block; like: the terms similar code is looked for with), and the
        similarity of their similar code in all."""
        language = language_of(path.suffix) if path is not None else "other"
        imported, imported_symbols = imported_names(query, language)
        with self._lock:
            saved = self._table.defined_in(path)
        own = {d.name for d in definitions(query[start:], language)} | saved
        nearby, attributes = _names_nearest_first(query[start:])
        # Names the file imports by name first, then the rest, each group nearest first.
        used = [n for n in nearby if n not in own and n not in _COMMON and len(n) > 2]
        names = [n for n in used if n in imported_symbols] + [n for n in used if n not in imported_symbols]
        with self._lock:
            imported_files = self._files_named(imported, path)
            picked: list[tuple[Path, Definition]] = []
            for name in names:
                found = [
                    (holder, d)
                    for holder, d in self._table.definitions_of(name)
                    if holder != path and (d.top or name in attributes)
                ]
                holders = {holder for holder, _ in found}
                # A method name (`.get`) defined in several files says nothing of which is meant.
                limit = _MAX_DEFINERS if any(d.top for _, d in found) else 2
                if not found or len(holders) > limit:
                    continue
                picked.append(min(found, key=lambda f: (f[0] not in imported_files, not f[1].top, _distance(f[0], path), str(f[0]), f[1].line)))
                if len(picked) >= _MAX_DEFINITIONS:
                    break
        chunks: dict[str, list[RetrievedChunk]] = {DEFINITIONS: [], SIMILAR: []}
        for holder, definition in picked:
            lines = self._lines_of(holder)
            if lines is not None and definition.line < len(lines.lines):
                text = "\n".join(lines.lines[definition.line : definition.end]).rstrip() + "\n"
                chunks[DEFINITIONS].append(
                    RetrievedChunk(holder, definition.line, definition.end, DEFINITIONS, text, definition.name)
                )
        similarity = 0.0
        if SIMILAR in sources:
            definers = list(dict.fromkeys(holder for holder, _ in picked))
            nearest = _nearest_first(imported_files - set(definers), path)
            candidates = (definers + nearest)[:_SIMILAR_FILES]
            if path is not None:
                candidates += self._neighbours(path, set(candidates), _SEARCHED_FILES - len(candidates))
            chunks[SIMILAR], similarity = self._similar(candidates, like, chunks[DEFINITIONS] if DEFINITIONS in sources else [])
        return tuple(chunk for source in sources for chunk in chunks.get(source, ())), similarity

    def prepare(self, path: Path) -> None:
        """Reads ahead the windows that requests on path search whatever the cursor: those of
        the files it imports and of its neighbours (see _choose)."""
        path = Path(os.path.abspath(path))
        with self._lock:
            imported = self._files_named(self._table.imports_of(path), path)
        nearest = _nearest_first(imported, path)[:_SIMILAR_FILES]
        for candidate in nearest + self._neighbours(path, imported, _SEARCHED_FILES):
            self._windows_of(candidate)

    def _files_named(self, stems: Iterable[str], path: Path | None) -> set[Path]:
        """The files an import of each stem names, from path (the lock held): a stem many
        files share (types.h) names the nearest ones."""
        return {
            p
            for stem in stems
            for p in _nearest_first(self._table.files_with_stem(stem), path)[:_PER_STEM]
            if p != path
        }

    def _neighbours(self, path: Path, taken: set[Path], most: int) -> list[Path]:
        """Up to `most` files of path's folder in its language, not in taken, nearest to it in
        the listing first."""
        language = language_of(path.suffix)
        with self._lock:
            listed = self._table.listed_beside(path)
            at = bisect.bisect_left(listed, path)
            before, after = reversed(listed[max(0, at - 2 * most) : at]), listed[at : at + 2 * most + 1]
            out: list[Path] = []
            for near in _alternate(before, after):
                if len(out) >= most:
                    break
                same = language_of(near.suffix) == language and (language != "other" or near.suffix == path.suffix)
                if same and near != path and near not in taken:
                    out.append(near)
        return out

    def _similar(
        self, candidates: list[Path], query: npt.NDArray[np.uint64], chosen: list[RetrievedChunk]
    ) -> tuple[list[RetrievedChunk], float]:
        """The windows of candidates whose terms are most like query's, not overlapping
        chosen, and their similarity in all."""
        if not len(query):
            return [], 0.0
        scored: list[tuple[float, str, int, Path]] = []
        searched: dict[Path, _FileWindows] = {}
        for candidate in candidates:
            windows = self._windows_of(candidate)
            if windows is None:
                continue
            searched[candidate] = windows
            scores = windows.index.similarities(query)
            for window in np.flatnonzero(scores >= _MIN_SIMILARITY).tolist():
                scored.append((-float(scores[window]), str(candidate), window, candidate))
        scored.sort()
        out: list[RetrievedChunk] = []
        similarity = 0.0
        for negated, _, index, candidate in scored:
            first = index * _WINDOW_STEP
            last = first + _WINDOW_LINES
            if any(c.path == candidate and c.start < last and first < c.end for c in [*chosen, *out]):
                continue
            lines = searched[candidate].lines
            last = min(last, len(lines))
            text = "\n".join(lines[first:last]).rstrip() + "\n"
            out.append(RetrievedChunk(candidate, first, last, SIMILAR, text))
            similarity -= negated
            if len(out) >= _MAX_SIMILAR:
                break
        return out, similarity

    def _lines_of(self, path: Path) -> _FileLines | None:
        """The file's lines, read again when it changed on disk."""
        stamp = _stamp(path)
        if stamp is None:
            return None
        with self._lock:
            kept = self._lines.get(path)
            if kept is not None and kept.stamp == stamp:
                self._lines.move_to_end(path)
                return kept
        text = self._read(path)
        if text is None:
            return None
        found = _FileLines(stamp, tuple(text.split("\n")))
        with self._lock:
            self._lines[path] = found
            while len(self._lines) > _CACHED_FILES:
                self._lines.popitem(last=False)
        return found

    def _windows_of(self, path: Path) -> _FileWindows | None:
        """The file's windows (None for a file too large to search), made again when it changed."""
        stamp = _stamp(path)
        if stamp is None or stamp[1] > _SIMILAR_MAX_BYTES:
            return None
        with self._lock:
            kept = self._windows.get(path)
            if kept is not None and kept.stamp == stamp:
                self._windows.move_to_end(path)
                return kept
            read = self._lines.get(path)
        # Not kept among the lines for definitions (files up to the index's cap), which the
        # read-ahead of a document's neighbours would otherwise push out.
        if read is not None and read.stamp == stamp:
            lines, text = read.lines, "\n".join(read.lines)
        else:
            found = self._read(path)
            if found is None:
                return None
            lines, text = tuple(found.split("\n")), found
        # Numbers' terms stay among a block's: the query has none, so they only count in a
        # window's size.
        index = TextWindows(text.encode("utf-8", "surrogatepass"), _WINDOW_STEP, _COMMON_TERMS)
        windows = _FileWindows(stamp, lines, index)
        with self._lock:
            self._windows[path] = windows
            while len(self._windows) > _CACHED_WINDOWS:
                self._windows.popitem(last=False)
        return windows


def _similarity(windows: _FileWindows, window: int, query: npt.NDArray[np.uint64]) -> float:
    """The Jaccard similarity of window's terms and query's (as _similar scores it)."""
    if window >= windows.index.windows:
        return 0.0
    return float(windows.index.similarities(query)[window])


def _alternate(a: Iterable[Path], b: Iterable[Path]) -> Iterable[Path]:
    """a's and b's items taken in turn, the rest of the longer after."""
    for pair in zip_longest(a, b):
        yield from (item for item in pair if item is not None)


def _terms(text: str) -> npt.NDArray[np.uint64]:
    """The terms of text's identifiers (native/text_windows.h) but those of keywords and
    builtins, as sorted hashes."""
    return query_terms(text.encode("utf-8", "surrogatepass"), _COMMON_TERMS)


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        status = os.stat(path)
    except OSError:
        return None
    return (status.st_mtime_ns, status.st_size)


def _above_block(prefix: str) -> str:
    """The text above the cursor's block of _QUERY_BLOCK lines (lines 0 to 5, 6 to 11, ... of
    the file), the same for every cursor in the block; in the first block, where there is none,
    the lines above the cursor's."""
    above = prefix[: prefix.rfind("\n") + 1]
    lines = above.count("\n")
    if lines < _QUERY_BLOCK:
        return above
    end = len(above)
    for _ in range(lines % _QUERY_BLOCK):
        end = above.rfind("\n", 0, end - 1) + 1
    return above[:end]


def _line_start_before(text: str, lines: int) -> int:
    """Where the last `lines` lines of text (which ends with a newline, or is empty) start."""
    at = len(text)
    for _ in range(lines + 1):
        at = text.rfind("\n", 0, max(at - 1, 0))
        if at < 0:
            return 0
    return at + 1


def _nth_line_end(text: str, n: int) -> int:
    at = 0
    for _ in range(n):
        at = text.find("\n", at) + 1
        if at == 0:
            return len(text)
    return at


def _import_lines(text: str) -> str:
    return "".join(line for line in text.splitlines(keepends=True) if "import" in line or "include" in line or "require" in line)


def _names_nearest_first(text: str) -> tuple[list[str], set[str]]:
    """The identifiers of text, last used first, and those used as attributes (after a dot)."""
    seen: dict[str, None] = {}
    attributes: set[str] = set()
    for match in reversed(list(_ATTRIBUTE_OR_NAME.finditer(text))):
        name = match.group(2)
        seen.setdefault(name, None)
        if match.group(1):
            attributes.add(name)
    return list(seen), attributes


def _nearest_first(paths: Iterable[Path], to: Path | None) -> list[Path]:
    """paths, the nearest to `to` in the tree first (by name among equals)."""
    return sorted(paths, key=lambda p: (_distance(p, to), str(p)))


def _distance(a: Path, b: Path | None) -> int:
    """How far apart two files are in the tree: folders to go up plus folders to go down."""
    if b is None:
        return len(a.parts)
    shared = 0
    for x, y in zip(a.parent.parts, b.parent.parts):
        if x != y:
            break
        shared += 1
    return len(a.parent.parts) + len(b.parent.parts) - 2 * shared

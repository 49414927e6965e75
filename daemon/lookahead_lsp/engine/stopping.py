"""Code-aware stopping rules for inline completions.

The engine generates a completion token by token after the cursor. After every forward pass it
asks a `Stopper` whether the text so far is a finished completion (`check`), and once generation
has ended, for whatever reason, what to show (`finish`).

The cursor's line picks one of three modes:

* line: the text after the cursor on its line is not blank (the cursor sits inside code). The
  completion is one line: it ends at its first newline, so a completion that starts with a
  newline is empty.
* end of line: code before the cursor, only whitespace after it. If the completion's first line
  holds code, it ends at that line's end, as in line mode. If the first line is blank (the model
  broke the line, as after `def f():`), the completion is a block whose indentation is that of
  its first non-blank line.
* block: only whitespace before and after the cursor on its line. The block indentation is the
  width of the whitespace before the cursor. The completion's first line continues the cursor's
  line, so it is never indented less than the block.

The `multiline` setting changes the choice: "auto" is the above; "never" makes every completion
one line (line mode whatever the cursor's line holds); "always" lets an end-of-line completion
whose first line holds code go on as a block at the indentation of the cursor's line, and
treats a cursor inside code as at the end of its line.

A block completion may span several lines. It ends before the first line that

* holds code indented less than the block. A line is judged as soon as its first
  non-whitespace character is seen, as its indentation cannot change after that; a line of
  whitespace alone is undecided until it is complete;
* is blank and complete (followed by a newline) once a line with code has been generated: a
  blank line closes the block;
* is complete and, stripped, equals the first non-blank line of the suffix: the model has
  started to re-emit the code after the cursor.

A cut keeps no trailing whitespace. Because every rule judges a line only on what can no longer
change, a cut, once found, stays the same however the text grows.

Indentation widths count tab stops every `TAB_WIDTH` columns, so a tab is one level in a
tab-indented file and mixed tabs and spaces compare by the column they reach. Lines end at
"\\n"; a "\\r" before it is whitespace at the line's end, so CRLF documents behave like LF ones.

`finish` cuts the final text by the same rules, treating its last line as complete, and strips
trailing whitespace. An unfinished last line is kept: `finish` cannot tell an end-of-generation
token (the line is complete) from a token or time budget (it may not be), so a caller that knows
the text was truncated should pass it up to its last newline. The result is "" when what is
left is blank or merely repeats the start of the suffix, compared line by line on stripped
non-blank lines (so `x = ` + `comp` before `compute(a)` is ""). Otherwise, in line mode, when
the completion ends with the code that follows the cursor on its line (say ")" after `print(`),
that repeated tail is dropped so accepting does not double it, unless dropping it would
unbalance the brackets of a line that is balanced as generated (`x = [` + `a[0]`, before "]",
keeps its "]").
"""

from __future__ import annotations

import enum
import itertools
from dataclasses import dataclass, replace
from typing import Iterator

TAB_WIDTH = 4
# When a completion may span several lines (the module docstring says how each works).
MULTILINE_MODES = ("auto", "always", "never")
OPENING_BRACKETS = "([{"
CLOSING_BRACKETS = ")]}"


class _Mode(enum.Enum):
    LINE = enum.auto()
    END_OF_LINE = enum.auto()
    BLOCK = enum.auto()


@dataclass(frozen=True)
class _Scan:
    """How far a scan of a completion got: the lines before `pos` are complete and judged."""

    mode: _Mode
    # None until an end-of-line completion that became a block shows its first line of code.
    block_indent: int | None
    pos: int = 0
    line_no: int = 0
    seen_code: bool = False


class Stopper:
    """Decides where a completion ends, from the document around the cursor."""

    def __init__(self, prefix: str, suffix: str, enabled: bool = True, multiline: str = "auto") -> None:
        """prefix: the document text before the cursor; suffix: the text after it.
        enabled=False: no code-aware rule (check() always None, finish() returns text
        unchanged, used for benchmarks that want exactly N tokens). multiline: one of
        MULTILINE_MODES."""
        if multiline not in MULTILINE_MODES:
            raise ValueError(f"multiline must be one of {', '.join(MULTILINE_MODES)}, not {multiline!r}")
        self._enabled = enabled
        self._always_block = multiline == "always"
        self._suffix = suffix
        self._before_cursor = prefix.rpartition("\n")[2]
        self._rest_of_line = suffix.partition("\n")[0].strip()
        self._next_code_line = next(_code_lines(suffix), "")
        self._start = _first_scan(self._before_cursor, self._rest_of_line, multiline)
        # check() resumes after the lines it has judged while the text keeps growing.
        self._resume = self._start
        self._judged = ""

    @property
    def enabled(self) -> bool:
        return self._enabled

    @property
    def mid_line(self) -> bool:
        """Whether the cursor's line holds code, before or after the cursor."""
        return bool(self._before_cursor.strip() or self._rest_of_line)

    def check(self, text: str) -> int | None:
        """Called with the whole completion generated so far (it only grows between calls; the
        last character may be part of a token still to come). None: keep generating. An int:
        the completion is complete; keep text[:n] (n <= len(text))."""
        if not self._enabled:
            return None
        if not text.startswith(self._judged):
            self._resume = self._start
        cut, self._resume = self._scan(text, self._resume, final=False)
        self._judged = text[: self._resume.pos]
        return cut

    def finish(self, text: str) -> str:
        """The text to show once generation has ended: the final text cut by the same rules,
        without a repeated tail or trailing whitespace; "" when nothing new is left."""
        if not self._enabled:
            return text
        cut, _ = self._scan(text, self._start, final=True)
        kept = (text if cut is None else text[:cut]).rstrip()
        # Judged before the tail goes, so that "))" after `f(g(x` and before ")" keeps one.
        if _repeats(kept, self._suffix):
            return ""
        return self._drop_repeated_tail(kept).rstrip()

    def _scan(self, text: str, scan: _Scan, final: bool) -> tuple[int | None, _Scan]:
        """Judge text's lines from scan on. Returns the cut (None: none yet) and the scan at the
        start of the line that ended the completion, or of the last, incomplete line."""
        while True:
            end = text.find("\n", scan.pos)
            line = text[scan.pos :] if end < 0 else text[scan.pos : end]
            if self._ends_before(line, end >= 0 or final, scan):
                return len(text[: scan.pos].rstrip()), scan
            if end < 0:
                return None, scan
            scan = self._after_line(line, scan, end + 1)

    def _ends_before(self, line: str, complete: bool, scan: _Scan) -> bool:
        """Whether the completion ends before line."""
        if scan.mode is _Mode.LINE:
            return scan.line_no > 0
        if scan.mode is _Mode.END_OF_LINE:
            # Whether the first line is a line or opens a block is known only at its end.
            return False
        return self._ends_block_before(line, complete, scan)

    def _ends_block_before(self, line: str, complete: bool, scan: _Scan) -> bool:
        code = line.strip()
        if not code:
            return complete and scan.seen_code
        # The first line continues the cursor's line, at or right of the block: never a dedent.
        dedented = (scan.line_no > 0 and scan.block_indent is not None
                    and _indent(line) < scan.block_indent)
        return dedented or (complete and code == self._next_code_line)

    def _after_line(self, line: str, scan: _Scan, next_pos: int) -> _Scan:
        """The scan once the complete line has been judged and kept."""
        has_code = bool(line.strip())
        mode = scan.mode
        block_indent = scan.block_indent
        if mode is _Mode.END_OF_LINE and has_code and self._always_block:
            mode, block_indent = _Mode.BLOCK, _indent(self._before_cursor)
        elif mode is _Mode.END_OF_LINE:
            mode = _Mode.LINE if has_code else _Mode.BLOCK
        if mode is _Mode.BLOCK and block_indent is None and has_code:
            block_indent = _indent(line)
        return replace(scan, mode=mode, block_indent=block_indent, pos=next_pos,
                       line_no=scan.line_no + 1, seen_code=scan.seen_code or has_code)

    def _drop_repeated_tail(self, kept: str) -> str:
        """kept without the code after the cursor on its line, when it ends with that code."""
        tail = self._rest_of_line
        if not tail or not kept.endswith(tail):
            return kept
        dropped = kept[: -len(tail)]
        balanced_as_generated = bracket_depth(self._before_cursor + kept + tail) == 0
        if balanced_as_generated and bracket_depth(self._before_cursor + dropped + tail) != 0:
            return kept
        return dropped


def _first_scan(before_cursor: str, rest_of_line: str, multiline: str) -> _Scan:
    if multiline == "never" or (rest_of_line and multiline == "auto"):
        return _Scan(_Mode.LINE, None)
    if before_cursor.strip() or rest_of_line:
        return _Scan(_Mode.END_OF_LINE, None)
    return _Scan(_Mode.BLOCK, _width(before_cursor))


def _width(whitespace: str) -> int:
    return len(whitespace.expandtabs(TAB_WIDTH))


def _indent(line: str) -> int:
    return _width(line[: len(line) - len(line.lstrip())])


def bracket_depth(line: str) -> int:
    """Opening minus closing brackets: 0 when they balance, ignoring order and strings."""
    opened = sum(line.count(bracket) for bracket in OPENING_BRACKETS)
    return opened - sum(line.count(bracket) for bracket in CLOSING_BRACKETS)


def _code_lines(text: str) -> Iterator[str]:
    """text's non-blank lines, stripped. Lazy, as the suffix can be the rest of a long file."""
    start = 0
    while start <= len(text):
        end = text.find("\n", start)
        if end < 0:
            end = len(text)
        line = text[start:end].strip()
        if line:
            yield line
        start = end + 1


def _repeats(completion: str, suffix: str) -> bool:
    """Whether completion is blank or, on its stripped non-blank lines, the start of suffix."""
    lines = list(_code_lines(completion))
    if not lines:
        return True
    ahead = list(itertools.islice(_code_lines(suffix), len(lines)))
    if len(ahead) < len(lines):
        return False
    return lines[:-1] == ahead[:-1] and ahead[-1].startswith(lines[-1])


def shown_text(stopper: Stopper, text: str, stop_at: int | None, cut_short: bool) -> str:
    """What a completion shows once generation ended: `text` is everything generated, stop_at
    where a stop rule cut it (check()), cut_short whether a token or time budget ended it (its
    last line may be unfinished: only complete lines are kept, unless there is but one)."""
    if stop_at is not None:
        text = text[:stop_at]
    elif cut_short and stopper.enabled and "\n" in text.strip():
        text = text[: text.rstrip().rfind("\n")]
    return stopper.finish(text)


def shown_from_continuation(stopper: Stopper, text: str, ended: bool, same_budget: bool) -> str | None:
    """What a completion at the stopper's cursor shows, given the model's own continuation
    there, generated without stop rules: `text`, which the model ended (end of generation) if
    `ended`, else a token budget did, the request's own if `same_budget`. None when the text
    stops too soon to tell (the request's completion would go on past it)."""
    cut = stopper.check(text)
    if cut is not None or ended:
        return shown_text(stopper, text, cut, cut_short=False)
    if same_budget:
        return shown_text(stopper, text, None, cut_short=True)
    return None

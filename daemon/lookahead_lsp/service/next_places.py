"""Where the user goes after a suggestion is shown, in the order work ahead prepares them: the
end of the accepted text (Tab, and the request that follows at once there), then, when the
suggestion ends its line, the start of the next line after Enter, indented as editors indent it
(the line's indentation, one level more after a line that opens a block, one less in Python
after a line that ends one: `return`, `raise`, `pass`, `break`, `continue`, as VS Code's
Python support outdents there). A word accept needs nothing prepared: the rest of the shown
suggestion answers it from the suggestion cache.

Which of them are prepared follows what the session's user does (NextPlaceCounts): the end of
the accepted text always (Tab asks there at once, and one computed on the request costs a
whole completion), the next line after Enter while the user presses Enter after accepting a
suggestion that ends its line often enough."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

from lookahead_lsp.engine.stopping import bracket_depth

# A line ending with one of these opens a block (Python's `:`, braces and brackets elsewhere):
# Enter indents the next line one level more.
_OPENS_BLOCK = (":", "{", "(", "[")
# The file's indentation unit is looked for in this many characters before the cursor.
_UNIT_WINDOW = 16_384
_DEFAULT_UNIT = "    "
# Python statements after which nothing more runs in their block.
_ENDS_BLOCK = ("return", "raise", "pass", "break", "continue")
# The next line after Enter stays prepared while at least one accept in ten of a suggestion that
# ends its line is followed by Enter, counting one Enter of two accepts before the first. Its
# cost is one completion of model time that no request waits for, once per such accept; what it
# saves is that completion's wait at the next key, so it pays even when Enter follows rarely. A
# new session prepares it; one whose user never presses Enter there stops computing that line
# once nine such accepts went without it.
_WORTH_PREPARING = 0.1

PlaceKind = Literal["accept", "enter"]


class Place(NamedTuple):
    kind: PlaceKind  # "accept": the end of the accepted text; "enter": the next line after Enter
    prefix: str  # the text before the cursor there


@dataclass
class PlaceCount:
    offered: int = 0
    taken: int = 0


@dataclass
class NextPlaceCounts:
    """Where one session's user went after suggestions. accept: suggestions offered (each once,
    however many keys type through it) and accepted (a request came at the end of the accepted
    text); enter: accepted suggestions that ended their line (or empty ones at a line's end),
    and how many of them Enter followed (a request came at the next line's start)."""

    accept: PlaceCount = field(default_factory=PlaceCount)
    enter: PlaceCount = field(default_factory=PlaceCount)

    def of(self, kind: PlaceKind) -> PlaceCount:
        return self.accept if kind == "accept" else self.enter

    def prepares(self, kind: PlaceKind) -> bool:
        """Whether places of this kind are prepared now."""
        if kind == "accept":
            return True
        return (self.enter.taken + 1) / (self.enter.offered + 2) >= _WORTH_PREPARING


def next_places(prefix: str, shown: str, suffix: str, language: str = "") -> list[Place]:
    """The places to prepare after `shown` (maybe nothing) was suggested at (prefix, suffix) in
    a document of `language`, most likely first."""
    accepted = prefix + shown
    places = [Place("accept", accepted)] if shown else []
    rest_of_line = suffix[: suffix.find("\n")] if "\n" in suffix else suffix
    if not rest_of_line.strip():
        places.append(Place("enter", accepted + after_enter(accepted, language)))
    return places


def after_enter(before: str, language: str = "") -> str:
    """What Enter inserts at the end of `before` in a document of `language`."""
    line = before[before.rfind("\n") + 1 :]
    indent = line[: len(line) - len(line.lstrip(" \t"))]
    code = line.rstrip()
    if code.endswith(_OPENS_BLOCK):
        return "\n" + indent + _unit(indent, before)
    if language == "python" and indent and _ends_python_block(code.strip()):
        unit = _unit(indent, before)
        return "\n" + (indent[: -len(unit)] if indent.endswith(unit) else "")
    return "\n" + indent


def _unit(indent: str, before: str) -> str:
    """One level of indentation: a tab where the line is tab-indented, else the file's step."""
    return "\t" if indent.startswith("\t") else _indent_unit(before[-_UNIT_WINDOW:])


def _ends_python_block(statement: str) -> bool:
    """Whether nothing can follow this statement in its block (the next line outdents), its
    brackets closed: a `return (` still to be continued does not."""
    word = statement.split(None, 1)[0].rstrip(";") if statement else ""
    return word in _ENDS_BLOCK and bracket_depth(statement) == 0


def _indent_unit(text: str) -> str:
    """The file's indentation step, guessed as editors guess it: tabs where more lines start
    with one than with a space, else the change in indentation between one line and the next
    seen most often (the smaller where two tie). Lines of a block comment's middle (` * `)
    are left out: their one extra space is alignment, not a level."""
    tabbed = spaced = 0
    steps: Counter[int] = Counter()
    previous = 0  # the text starts at a line's start, or a step counted wrong is outvoted
    for line in text.split("\n")[1:]:
        code = line.lstrip(" \t")
        if not code or code.startswith("*"):
            continue
        tabbed += line.startswith("\t")
        spaced += line.startswith(" ")
        width = len(line) - len(line.lstrip(" "))
        if width != previous and not line.startswith("\t"):
            steps[abs(width - previous)] += 1
        previous = width
    if tabbed > spaced:
        return "\t"
    if not steps:
        return _DEFAULT_UNIT
    return " " * min(steps, key=lambda step: (-steps[step], step))

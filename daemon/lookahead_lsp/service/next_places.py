"""Where the user goes after a suggestion is shown, in the order work ahead prepares them: the
end of the accepted text (Tab, and the request that follows at once there), then, when the
suggestion ends its line, the start of the next line after Enter, indented as editors indent it
(the line's indentation, one level more after a line that opens a block). A word accept needs
nothing prepared: the rest of the shown suggestion answers it from the suggestion cache."""

from __future__ import annotations

# A line ending with one of these opens a block (Python's `:`, braces and brackets elsewhere):
# Enter indents the next line one level more.
_OPENS_BLOCK = (":", "{", "(", "[")
# The file's indentation unit is looked for in this many characters before the cursor.
_UNIT_WINDOW = 16_384
_DEFAULT_UNIT = "    "


def next_places(prefix: str, shown: str, suffix: str) -> list[str]:
    """The texts before the cursor of the places to prepare after `shown` (maybe nothing) was
    suggested at (prefix, suffix), most likely first."""
    accepted = prefix + shown
    places = [accepted] if shown else []
    rest_of_line = suffix[: suffix.find("\n")] if "\n" in suffix else suffix
    if not rest_of_line.strip():
        places.append(accepted + after_enter(accepted))
    return places


def after_enter(before: str) -> str:
    """What Enter inserts at the end of `before`."""
    line = before[before.rfind("\n") + 1 :]
    indent = line[: len(line) - len(line.lstrip(" \t"))]
    if line.rstrip().endswith(_OPENS_BLOCK):
        indent += "\t" if indent.startswith("\t") else _indent_unit(before[-_UNIT_WINDOW:])
    return "\n" + indent


def _indent_unit(text: str) -> str:
    """The file's indentation step: tabs if its lines start with one, else the smallest
    indentation in spaces that some line has."""
    widths = set()
    for line in text.split("\n")[1:]:
        if line.startswith("\t"):
            return "\t"
        width = len(line) - len(line.lstrip(" "))
        if width and line.strip():
            widths.add(width)
    return " " * min(widths) if widths else _DEFAULT_UNIT

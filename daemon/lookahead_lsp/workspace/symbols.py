"""What a source file defines and imports, read from its text by per-language patterns: the
symbol table that retrieval resolves names near the cursor against (retrieval.py).

Definitions are the names a reader of the file would look up: top-level functions, classes,
constants and exported names, methods (Python, JavaScript/TypeScript), macros, types and
function definitions (C, C++); other languages get a fallback that knows the common
definition keywords (fn, func, def, class, struct, interface, type, enum, trait). Patterns, not
parsers: a name missed costs a retrieval, a name too many costs a chunk the model ignores.

No file can make them slow: each pattern is a run of disjoint classes and literals, so it
matches a line in time linear in it (Python's `re`, which is ~10x faster per line here than
RE2's binding), on lines of at most _MAX_LINE characters; what a pattern would need to search
backwards for (C's function name before its parenthesis, a typedef's name before its
semicolon) is found with string operations.

Imports name other files of the folder: Python's `import a.b` / `from .a import b`, JavaScript's
`import ... from './a'` / `require('./a')`, C's `#include "a.h"`: each as the base name it would
have on disk (resolved against the folder's files by the caller)."""

from __future__ import annotations

import re
from dataclasses import dataclass

# Lines longer than this are data, not definitions worth showing.
_MAX_LINE = 400
# A definition's snippet: its line and what follows while indented deeper (a docstring, the
# first statements), cut at a blank line after the first few.
SNIPPET_LINES = 8
_SNIPPET_CHARS = 600

_PY = re.compile(r"[ \t]*(?:async[ \t]+)?(?:def|class)[ \t]+(\w+)|([A-Za-z_]\w*)[ \t]*(?::[^=\n]*)?=(?!=)")
_JS = re.compile(
    r"[ \t]*(?:(?:export|default|declare|abstract|async)[ \t]+)*"
    r"(?:function\*?|class|interface|type|enum|const|let|var|namespace)[ \t]+([A-Za-z_$][\w$]*)"
    r"|[ \t]+(?:(?:public|private|protected|static|async|get|set|readonly)[ \t]+)*"
    r"([A-Za-z_$][\w$]*)[ \t]*\([^)\n]*\)[ \t]*(?::[^{\n]*)?\{[ \t]*$"
    r"|[ \t]*(?:module\.)?exports\.([A-Za-z_$][\w$]*)[ \t]*="
)
_C = re.compile(
    r"[ \t]*#[ \t]*define[ \t]+(\w+)"
    r"|(?:typedef[ \t]+)?(?:struct|union|enum|class)[ \t]+(\w+)[ \t]*(?::[^{;\n]*)?\{?[ \t]*$"
)
_GENERIC = re.compile(
    r"[ \t]*(?:(?:pub(?:\([^)\n]*\))?|export|public|private|static)[ \t]+)*"
    r"(?:fn|func|def|function|class|struct|interface|type|enum|trait|object|module)[ \t]+([A-Za-z_]\w*)"
)
_PATTERNS = {"python": _PY, "javascript": _JS, "c": _C}
# A C line at column 0 that starts with one of these and has a parenthesis is a statement.
_NOT_TYPES = frozenset({"return", "else", "if", "for", "while", "switch", "case", "do", "goto", "sizeof"})
_WORD = re.compile(r"\w+")
_LANGUAGES = {
    ".py": "python", ".pyi": "python",
    ".js": "javascript", ".mjs": "javascript", ".cjs": "javascript", ".jsx": "javascript",
    ".ts": "javascript", ".tsx": "javascript", ".mts": "javascript", ".cts": "javascript",
    ".c": "c", ".h": "c", ".cc": "c", ".cpp": "c", ".cxx": "c", ".hh": "c", ".hpp": "c", ".hxx": "c",
}  # fmt: skip
_IMPORTS = {
    "python": re.compile(r"[ \t]*(?:from[ \t]+([.\w]+)[ \t]+import[ \t]+([\w, \t()]+)|import[ \t]+([\w., \t]+))"),
    "javascript": re.compile(r"""(?:\bfrom[ \t]+|\brequire\(|\bimport\()[ \t]*['"](\.{1,2}/[^'"\n]+)['"]"""),
    "c": re.compile(r"""[ \t]*#[ \t]*include[ \t]*"([^"\n]+)\""""),
}


@dataclass(frozen=True)
class Definition:
    """A name the file defines, at line `line` (0-based), its snippet lines [line, end); top:
    at the file's top level (not a method or a nested function)."""

    name: str
    line: int
    end: int
    top: bool = True


def language_of(suffix: str) -> str:
    return _LANGUAGES.get(suffix.lower(), "other")


def definitions(text: str, language: str) -> list[Definition]:
    """The names text defines, in order, each with the lines that show it (signature, then
    docstring or the first lines of the body)."""
    lines = text.split("\n")
    out: list[Definition] = []
    for number, line in enumerate(lines):
        if len(line) > _MAX_LINE or not line.strip():
            continue
        name = _defined_name(line, language)
        if name:
            out.append(Definition(name, number, _snippet_end(lines, number), not line[:1].isspace()))
    return out


def _defined_name(line: str, language: str) -> str | None:
    match = _PATTERNS.get(language, _GENERIC).match(line)
    if match is not None:
        return next((group for group in match.groups() if group), None)
    if language == "c" and (line[:1].isalpha() or line[:1] == "_"):
        return _c_declared(line)
    return None


def _c_declared(line: str) -> str | None:
    """The name a C line at column 0 declares: a typedef's last word before its semicolon, or
    a function definition's name before its parenthesis (no semicolon after it)."""
    if line.startswith("typedef"):
        end = line.find(";")
        return _last_word(line[:end]) if end > 0 else None
    paren = line.find("(")
    if paren <= 0 or ";" in line[paren:] or line.split(None, 1)[0] in _NOT_TYPES:
        return None
    name = _last_word(line[:paren])
    return name if name and name != line[:paren].strip() else None  # a type before the name


def _last_word(text: str) -> str | None:
    text = text.rstrip()
    start = len(text)
    while start > 0 and (text[start - 1].isalnum() or text[start - 1] == "_"):
        start -= 1
    word = text[start:]
    return word if word and not word[0].isdigit() else None


def _snippet_end(lines: list[str], start: int) -> int:
    """Where the definition at start stops being shown: after the lines indented deeper than
    it (or a C-like body up to its closing line), SNIPPET_LINES at most, and fewer at a
    blank line once the signature is complete."""
    indent = len(lines[start]) - len(lines[start].lstrip())
    end, chars = start + 1, len(lines[start])
    while end < len(lines) and end - start < SNIPPET_LINES and chars < _SNIPPET_CHARS:
        line = lines[end]
        if not line.strip():
            if end - start > 2:
                break
        elif len(line) - len(line.lstrip()) <= indent and not line.lstrip().startswith((")", "}", "]")):
            break
        chars += len(line)
        end += 1
    return end


def imported_names(text: str, language: str) -> tuple[set[str], set[str]]:
    """(base names of the files text imports, without extension; the names it imports from
    them), for the caller to resolve against the folder's files."""
    pattern = _IMPORTS.get(language)
    files: set[str] = set()
    names: set[str] = set()
    if pattern is None:
        return files, names
    for line in text.split("\n"):
        if len(line) > _MAX_LINE:
            continue
        matches = pattern.finditer(line) if language == "javascript" else filter(None, [pattern.match(line)])
        for match in matches:
            if language == "python":
                _python_import(match.groups(), files, names)
            elif language == "javascript":
                files.add(match.group(1).rstrip("/").rsplit("/", 1)[-1].split(".", 1)[0])
            else:
                files.add(match.group(1).rsplit("/", 1)[-1].rsplit(".", 1)[0])
    return files, names


def _python_import(groups: tuple[str | None, ...], files: set[str], names: set[str]) -> None:
    source, imported, modules = groups
    if source is not None:
        module = source.strip(".")
        if module:
            files.add(module.rsplit(".", 1)[-1])
        for name in _WORD.findall(imported or ""):
            if name != "as":
                names.add(name)
                files.add(name)  # `from . import module`
    for module in (modules or "").split(","):
        module = module.strip().split(" ")[0]
        if module:
            files.add(module.rsplit(".", 1)[-1])

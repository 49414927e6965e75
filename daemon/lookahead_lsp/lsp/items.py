"""The LSP items the server answers with, built from the document and a suggestion: pure
functions, so that what an editor shows is tested without a model or a server."""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

from lsprotocol import types
from pygls.workspace import TextDocument

# The completion list's label: the suggestion's first line with text, cut to this many characters.
_LABEL_CHARS = 80
# The major and minor version at the start of a clientInfo.version ("0.7.2", "0.12.0-dev-fbb1caf").
_VERSION = re.compile(r"(\d+)\.(\d+)")
# What a snippet's text must escape to stand for itself.
_SNIPPET_SPECIAL = re.compile(r"([\\$}])")


@dataclass(frozen=True)
class CursorText:
    """What to complete: the text, the offset the suggestion goes at, and where the item's
    replacement starts in the document (the cursor, or the start of the item the editor's
    completion list has selected)."""

    text: str
    offset: int
    replace_start: int


def cursor_offset(document: TextDocument, position: types.Position) -> int:
    """The character offset of an LSP position, clamped into the document: a line past the end
    means the end, a character past its line's end (or inside a UTF-16 surrogate pair) the
    nearest valid place."""
    lines = document.lines
    if position.line >= len(lines):
        return len(document.source)
    line = lines[position.line]
    body = len(line.rstrip("\r\n"))
    try:
        server = document.position_codec.position_from_client_units(lines, position)
        column = min(server.character, body)
    except (ValueError, IndexError):
        column = body
    return sum(len(x) for x in lines[: position.line]) + column


def inline_cursor(
    document: TextDocument, position: types.Position, selected: types.SelectedCompletionInfo | None
) -> CursorText:
    """The text to complete for an inline request: the document's, or, while the editor's
    completion list has an item selected, the text as if that item were accepted (the
    suggestion then continues it)."""
    text = document.source
    offset = cursor_offset(document, position)
    if selected is None:
        return CursorText(text, offset, offset)
    start = cursor_offset(document, selected.range.start)
    end = max(start, cursor_offset(document, selected.range.end))
    text = text[:start] + selected.text + text[end:]
    return CursorText(text, start + len(selected.text), start)


def inline_list(
    document: TextDocument, position: types.Position, at: CursorText, suggestion: str
) -> types.InlineCompletionList:
    """The inline answer: nothing for an empty suggestion, else one item that replaces the
    cursor's line up to the cursor, so that the editor keeps showing it while the user types
    the beginning of it."""
    if not suggestion:
        return types.InlineCompletionList(items=[])
    line_start = at.text.rfind("\n", 0, at.replace_start) + 1
    typed = at.text[line_start : at.offset]
    start = document.client_position_at_offset(line_start) if line_start <= len(document.source) else position
    item = types.InlineCompletionItem(
        insert_text=typed + suggestion,
        filter_text=typed,
        range=types.Range(start=start, end=position),
    )
    return types.InlineCompletionList(items=[item])


class Insertion(enum.Enum):
    """How a client's completion menu writes an accepted item into the document."""

    # It applies the item's text edit, newlines included, as the protocol says.
    TEXT_EDIT = "text edit"
    # It types the edit's text with Vim's complete(), which writes a newline into the line as a
    # NUL byte (Neovim before 0.11, its own omnifunc): the item holds the first line only.
    FIRST_LINE = "first line"
    # It inserts a plain text edit only up to its first space but a snippet whole, each line
    # after the first prefixed with the cursor line's indentation (Neovim 0.11 and later, its own
    # completion and vim.snippet): the item is a snippet indented relative to that line.
    SNIPPET = "snippet"


@dataclass(frozen=True)
class MenuClient:
    """What the client's completion menu does with an item, from its initialize request
    (menu_client: a text edit for every client but Neovim's own menu, a client not known
    included, as the protocol says). Before initialize has said which client it is, the default
    is the item every client inserts correctly: one line."""

    insertion: Insertion = Insertion.FIRST_LINE
    # It lists InsertTextMode.asIs, so it can be told not to re-indent the item's later lines
    # (lsp-mode and Sublime's LSP re-indent them otherwise).
    as_is: bool = False


def menu_client(params: types.InitializeParams) -> MenuClient:
    """The menu client an initialize request describes. Neovim's own menu is told apart from a
    completion plugin (nvim-cmp, blink.cmp) by insertReplaceSupport, which the plugins announce
    and Neovim does not."""
    text_document = params.capabilities.text_document
    completion = text_document.completion if text_document else None
    item = completion.completion_item if completion else None
    modes = item.insert_text_mode_support.value_set if item and item.insert_text_mode_support else []
    as_is = types.InsertTextMode.AsIs in modes
    info = params.client_info
    if info is None or info.name != "Neovim" or (item and item.insert_replace_support):
        return MenuClient(Insertion.TEXT_EDIT, as_is)
    version = _VERSION.match(info.version or "")
    if version and (int(version[1]), int(version[2])) >= (0, 11) and item and item.snippet_support:
        return MenuClient(Insertion.SNIPPET, as_is)
    return MenuClient(Insertion.FIRST_LINE, as_is)


def completion_list(
    document: TextDocument,
    position: types.Position,
    offset: int,
    suggestion: str,
    client: MenuClient = MenuClient(),
) -> types.CompletionList:
    """The completion-list answer, for editors without inline completion: nothing for an empty
    suggestion, else one item that replaces the word before the cursor with that word and the
    suggestion (as much of it as the client inserts correctly), labelled with its first line
    that has text. Incomplete, so the editor asks again as the user types.

    Always a TextEdit, never an InsertReplaceEdit: the suggestion was made for the text after
    the cursor, so replacing any of it would be wrong, and the two ranges would be the same."""
    if not suggestion:
        return types.CompletionList(is_incomplete=True, items=[])
    text = document.source
    word_start = offset
    while word_start > 0 and (text[word_start - 1].isalnum() or text[word_start - 1] == "_"):
        word_start -= 1
    new_text = text[word_start:offset] + suggestion
    lines = new_text.split("\n")
    label = next((line.strip() for line in lines if line.strip()), "")
    if client.insertion is Insertion.FIRST_LINE:
        new_text = lines[0].rstrip("\r")
    elif client.insertion is Insertion.SNIPPET:
        new_text = _relative_snippet(lines, _indentation_at(text, word_start, offset))
    if not label or not new_text.strip():
        return types.CompletionList(is_incomplete=True, items=[])
    snippet = client.insertion is Insertion.SNIPPET
    item = types.CompletionItem(
        label=label[:_LABEL_CHARS],
        kind=types.CompletionItemKind.Text,
        detail="lookahead-lsp",
        # Said even for plain text: Neovim 0.10 reads a missing format as a snippet.
        insert_text_format=types.InsertTextFormat.Snippet if snippet else types.InsertTextFormat.PlainText,
        insert_text_mode=types.InsertTextMode.AsIs if client.as_is and "\n" in new_text else None,
        text_edit=types.TextEdit(
            range=types.Range(start=document.client_position_at_offset(word_start), end=position),
            new_text=new_text,
        ),
    )
    return types.CompletionList(is_incomplete=True, items=[item])


def _indentation_at(text: str, word_start: int, offset: int) -> str:
    """The indentation a snippet client gives the lines after an item's first: the leading
    blanks of the cursor's line once the word the item replaces is removed."""
    line_start = text.rfind("\n", 0, word_start) + 1
    line_end = text.find("\n", offset)
    line = text[line_start:word_start] + text[offset : len(text) if line_end < 0 else line_end]
    return line[: len(line) - len(line.lstrip(" \t"))]


def _relative_snippet(lines: list[str], indentation: str) -> str:
    """The lines as a snippet whose later lines the client indents by `indentation`: that much
    is taken off each, and the suggestion ends before the first line indented less (it leaves
    the block, which a relative indentation cannot say); blank lines stay blank."""
    kept = [lines[0]]
    for line in lines[1:]:
        if not line.strip():
            kept.append("")
        elif line.startswith(indentation):
            kept.append(line[len(indentation) :])
        else:
            break
    while len(kept) > 1 and not kept[-1]:
        kept.pop()
    return _SNIPPET_SPECIAL.sub(r"\\\1", "\n".join(kept))

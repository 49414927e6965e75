"""The LSP items the server answers with, built from the document and a suggestion: pure
functions, so that what an editor shows is tested without a model or a server."""

from __future__ import annotations

from dataclasses import dataclass

from lsprotocol import types
from pygls.workspace import TextDocument

# The completion list's label: the suggestion's first line, cut to this many characters.
_LABEL_CHARS = 80


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


def completion_list(
    document: TextDocument, position: types.Position, offset: int, suggestion: str
) -> types.CompletionList:
    """The completion-list answer, for editors without inline completion: nothing for an empty
    suggestion, else one item that replaces the word before the cursor with that word and the
    suggestion, labelled with its first line. Incomplete, so the editor asks again as the user
    types."""
    if not suggestion:
        return types.CompletionList(is_incomplete=True, items=[])
    text = document.source
    word_start = offset
    while word_start > 0 and (text[word_start - 1].isalnum() or text[word_start - 1] == "_"):
        word_start -= 1
    new_text = text[word_start:offset] + suggestion
    label = new_text.splitlines()[0] if new_text.strip() else new_text
    item = types.CompletionItem(
        label=label[:_LABEL_CHARS] or new_text[:_LABEL_CHARS],
        kind=types.CompletionItemKind.Text,
        detail="lookahead-lsp",
        filter_text=new_text,
        text_edit=types.TextEdit(
            range=types.Range(start=document.client_position_at_offset(word_start), end=position),
            new_text=new_text,
        ),
    )
    return types.CompletionList(is_incomplete=True, items=[item])

"""The LSP items built from a suggestion: what the editor shows and what accepting it writes."""

from __future__ import annotations

from lsprotocol import types
from pygls.workspace import TextDocument

from lookahead_lsp.lsp_items import completion_list, cursor_offset, inline_cursor, inline_list

TEXT = "def total(items):\n    retu\n"


def _at(line: int, character: int) -> types.Position:
    return types.Position(line=line, character=character)


def _accept(document: TextDocument, edit_range: types.Range, new_text: str) -> str:
    """The document's text once the editor applied an item's edit."""
    start, end = cursor_offset(document, edit_range.start), cursor_offset(document, edit_range.end)
    return document.source[:start] + new_text + document.source[end:]


def test_the_inline_item_replaces_the_line_up_to_the_cursor() -> None:
    document = TextDocument("file:///t.py", source=TEXT)
    at = inline_cursor(document, _at(1, 8), None)
    [item] = inline_list(document, _at(1, 8), at, "rn sum(items)").items
    assert item.insert_text == "    return sum(items)" and item.filter_text == "    retu"
    assert item.range == types.Range(start=_at(1, 0), end=_at(1, 8))
    assert _accept(document, item.range, item.insert_text) == "def total(items):\n    return sum(items)\n"


def test_an_empty_suggestion_is_no_item() -> None:
    document = TextDocument("file:///t.py", source=TEXT)
    assert inline_list(document, _at(1, 8), inline_cursor(document, _at(1, 8), None), "").items == []
    answer = completion_list(document, _at(1, 8), 26, "")
    assert answer.items == [] and answer.is_incomplete


def test_a_selected_completion_item_is_continued() -> None:
    # The editor's list has `return` selected over the typed `retu`: the suggestion continues
    # it, and the inline item writes both.
    document = TextDocument("file:///t.py", source=TEXT)
    selected = types.SelectedCompletionInfo(range=types.Range(start=_at(1, 4), end=_at(1, 8)), text="return")
    at = inline_cursor(document, _at(1, 8), selected)
    assert at.text == "def total(items):\n    return\n" and at.text[: at.offset].endswith("return")
    [item] = inline_list(document, _at(1, 8), at, " sum(items)").items
    assert item.range is not None
    assert _accept(document, item.range, str(item.insert_text)) == "def total(items):\n    return sum(items)\n"


def test_positions_past_the_end_are_clamped() -> None:
    document = TextDocument("file:///t.py", source=TEXT)
    assert cursor_offset(document, _at(99, 0)) == len(TEXT)
    assert cursor_offset(document, _at(1, 999)) == TEXT.index("retu") + 4
    # A character inside a surrogate pair (UTF-16 units) lands on a valid place.
    emoji = TextDocument("file:///e.py", source="x = '\U0001f600'\n")
    assert 0 <= cursor_offset(emoji, _at(0, 6)) <= len("x = '\U0001f600'")


def test_the_completion_item_replaces_the_word_and_is_labelled_by_its_first_line() -> None:
    document = TextDocument("file:///t.py", source=TEXT)
    offset = cursor_offset(document, _at(1, 8))
    answer = completion_list(document, _at(1, 8), offset, "rn sum(items)\n# done")
    [item] = answer.items
    assert answer.is_incomplete and item.label == "return sum(items)"
    assert isinstance(item.text_edit, types.TextEdit)
    assert item.text_edit.range.start == _at(1, 4)
    assert _accept(document, item.text_edit.range, item.text_edit.new_text) == (
        "def total(items):\n    return sum(items)\n# done\n"
    )

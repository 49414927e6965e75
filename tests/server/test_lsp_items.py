"""The LSP items built from a suggestion: what the editor shows and what accepting it writes."""

from __future__ import annotations

import re
from typing import Any

import pytest
from lsprotocol import types
from lsprotocol.converters import get_converter
from pygls.workspace import TextDocument

from lookahead_lsp.lsp.items import (
    Insertion,
    MenuClient,
    completion_list,
    cursor_offset,
    inline_cursor,
    inline_list,
    menu_client,
)

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
    client = MenuClient(Insertion.TEXT_EDIT)
    answer = completion_list(document, _at(1, 8), offset, "rn sum(items)\n# done", client)
    [item] = answer.items
    assert answer.is_incomplete and item.label == "return sum(items)"
    assert isinstance(item.text_edit, types.TextEdit)
    assert item.text_edit.range.start == _at(1, 4)
    assert _accept(document, item.text_edit.range, item.text_edit.new_text) == (
        "def total(items):\n    return sum(items)\n# done\n"
    )


# The menu clients, as their initialize requests describe them (the completion capabilities and
# clientInfo they send).
def _initialize(client_info: dict[str, str] | None, completion_item: dict[str, Any]) -> types.InitializeParams:
    message: dict[str, Any] = {
        "processId": None,
        "rootUri": None,
        "capabilities": {"textDocument": {"completion": {"completionItem": completion_item}}},
    }
    if client_info is not None:
        message["clientInfo"] = client_info
    return get_converter().structure(message, types.InitializeParams)


NEOVIM_0_7 = _initialize({"name": "Neovim", "version": "0.7.2"}, {"snippetSupport": False})
NEOVIM_0_10 = _initialize({"name": "Neovim", "version": "0.10.4"}, {"snippetSupport": True})
NEOVIM_0_12 = _initialize(
    {"name": "Neovim", "version": "0.12.0-dev-fbb1caf"},
    {"snippetSupport": True, "resolveSupport": {"properties": ["additionalTextEdits", "command"]}},
)
# nvim-cmp's capabilities (cmp_nvim_lsp.default_capabilities()), on a Neovim 0.7.
NEOVIM_CMP = _initialize(
    {"name": "Neovim", "version": "0.7.2"},
    {"snippetSupport": True, "insertReplaceSupport": True, "insertTextModeSupport": {"valueSet": [1, 2]}},
)
EGLOT = _initialize(None, {"snippetSupport": False, "deprecatedSupport": True})
LSP_MODE = _initialize(
    {"name": "emacs", "version": "GNU Emacs 28.2"},
    {"snippetSupport": False, "insertReplaceSupport": True, "insertTextModeSupport": {"valueSet": [1, 2]}},
)
HELIX = _initialize({"name": "helix", "version": "25.1"}, {"snippetSupport": True, "insertReplaceSupport": True})
# An editor this daemon knows nothing of, with the least capabilities a client can send.
UNKNOWN = _initialize({"name": "some-new-editor", "version": "1.0"}, {})

# The blank line of a method body, and a suggestion of three lines: one in the block, one blank,
# one at the next method's indentation.
BODY = "class A:\n    def f(self, x):\n        \n    def g(self):\n        pass\n"
SUGGESTION = "if x:\n            return {'$': x}\n\n    def h(self):"


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        (NEOVIM_0_7, MenuClient(Insertion.FIRST_LINE)),
        (NEOVIM_0_10, MenuClient(Insertion.FIRST_LINE)),
        (NEOVIM_0_12, MenuClient(Insertion.SNIPPET)),
        (NEOVIM_CMP, MenuClient(Insertion.TEXT_EDIT, as_is=True)),
        (EGLOT, MenuClient(Insertion.TEXT_EDIT)),
        (LSP_MODE, MenuClient(Insertion.TEXT_EDIT, as_is=True)),
        (HELIX, MenuClient(Insertion.TEXT_EDIT)),
        (UNKNOWN, MenuClient(Insertion.TEXT_EDIT)),
    ],
    ids=["neovim-0.7", "neovim-0.10", "neovim-0.12", "neovim-cmp", "eglot", "lsp-mode", "helix", "unknown"],
)
def test_each_client_is_known_by_its_initialize_request(
    params: types.InitializeParams, expected: MenuClient
) -> None:
    assert menu_client(params) == expected


def _body_item(client: MenuClient, suggestion: str = SUGGESTION) -> types.CompletionItem | None:
    document = TextDocument("file:///a.py", source=BODY)
    answer = completion_list(document, _at(2, 8), cursor_offset(document, _at(2, 8)), suggestion, client)
    assert answer.is_incomplete
    for item in answer.items:
        # Safe in every menu: a one-line label with text, an edit any client applies, a format
        # the client reads.
        assert item.label.strip() and item.label == item.label.strip() and "\n" not in item.label
        assert isinstance(item.text_edit, types.TextEdit) and "\0" not in item.text_edit.new_text
        snippet = client.insertion is Insertion.SNIPPET
        formats = types.InsertTextFormat
        assert item.insert_text_format == (formats.Snippet if snippet else formats.PlainText)
    return answer.items[0] if answer.items else None


def test_a_client_that_applies_text_edits_gets_the_whole_suggestion_as_plain_text() -> None:
    for client in (MenuClient(Insertion.TEXT_EDIT), MenuClient(Insertion.TEXT_EDIT, as_is=True)):
        item = _body_item(client)
        assert item is not None and isinstance(item.text_edit, types.TextEdit)
        assert item.label == "if x:"
        assert item.text_edit.new_text == SUGGESTION
        # Told not to re-indent the later lines when it can be (lsp-mode otherwise indents each).
        assert item.insert_text_mode == (types.InsertTextMode.AsIs if client.as_is else None)
        document = TextDocument("file:///a.py", source=BODY)
        assert _accept(document, item.text_edit.range, item.text_edit.new_text) == BODY.replace(
            "        \n", "        " + SUGGESTION + "\n", 1
        )


def test_neovim_before_0_11_gets_one_line_it_cannot_write_as_nul_bytes() -> None:
    # Neovim 0.7-0.10 type the edit's text with Vim's complete(), which puts a newline into the
    # buffer line as a NUL byte: that client gets the first line only, and nothing when the
    # suggestion starts on the next line.
    item = _body_item(MenuClient(Insertion.FIRST_LINE))
    assert item is not None and isinstance(item.text_edit, types.TextEdit)
    assert item.text_edit.new_text == "if x:" == item.label
    assert item.insert_text_mode is None
    assert _body_item(MenuClient(Insertion.FIRST_LINE), "\n        return x") is None
    # The default, for a client not known, is that same one-line item.
    assert _body_item(MenuClient()) == item


def test_neovim_0_11_gets_a_snippet_indented_from_the_cursor_line() -> None:
    # Neovim 0.11+ write a plain edit only up to its first space, and a snippet whole, prefixing
    # each later line with the cursor line's indentation: the snippet's later lines say only
    # what comes on top of it, `$` and `}` are escaped, and the suggestion ends where it leaves
    # the block (the `def h` at the class's indentation).
    item = _body_item(MenuClient(Insertion.SNIPPET))
    assert item is not None and isinstance(item.text_edit, types.TextEdit)
    assert item.text_edit.new_text == "if x:\n    return {'\\$': x\\}"
    expanded = re.sub(r"\\(.)", r"\1", item.text_edit.new_text).replace("\n", "\n        ")
    document = TextDocument("file:///a.py", source=BODY)
    assert _accept(document, item.text_edit.range, expanded) == BODY.replace(
        "        \n", "        if x:\n            return {'$': x}\n", 1
    )


def test_the_label_never_starts_with_a_newline() -> None:
    # A suggestion that starts on the next line: lsp-mode showed the label's newline.
    for insertion in (Insertion.TEXT_EDIT, Insertion.SNIPPET):
        item = _body_item(MenuClient(insertion), "\n        return x")
        assert item is not None and item.label == "return x"
    # Blank suggestions are no item at all.
    assert _body_item(MenuClient(Insertion.TEXT_EDIT), " \n  \n") is None

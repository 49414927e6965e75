"""Editors that send every change as the whole document and never say where the cursor is (a
plain LSP client with TextDocumentSyncKind.Full, asking textDocument/completion): through the
real server and the real default model, the place a pause in typing leaves the user is found from
the difference between the texts, its completion is computed while the model is idle, and the
request there is answered with what the model itself gives for that text. Where texts differ is
checked against its definition on generated edits."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from lsprotocol import types
from pytest_lsp import LanguageClient

from lookahead_lsp.service.documents import edit_end
from support.daemon import daemon_client, end_of, open_document, plain, status_of, until, until_ready

WAIT_S = 120.0  # a loaded machine shared with other work
SETTINGS = {"maxTokens": 12, "debounceMs": 0, "draft": "none", "timeBudgetMs": None, "coldPromptMs": None}
BEFORE = '''import json


def load(path):
    with open(path) as f:
        return json.load(f)


def save(path, data):
'''
AFTER = "\n\ndef main():\n    print(load('a.json'))\n"


def _reference_end(before: str, after: str) -> int | None:
    """edit_end by its definition, one character at a time."""
    if before == after:
        return None
    start = 0
    while start < min(len(before), len(after)) and before[start] == after[start]:
        start += 1
    end = 0
    while end < min(len(before), len(after)) - start and before[-1 - end] == after[-1 - end]:
        end += 1
    return len(after) - end


# Long texts of few letters: repeats make the start and end overlap, blocks of 4,096 are crossed.
_TEXT = st.text(alphabet="ab\n", max_size=9000)


@given(_TEXT, st.integers(min_value=0), st.integers(min_value=0, max_value=40), _TEXT.map(lambda t: t[:30]))
def test_where_a_whole_document_change_ended_is_where_the_texts_stop_agreeing(
    before: str, at: int, removed: int, typed: str
) -> None:
    at = at % (len(before) + 1)
    after = before[:at] + typed + before[at + removed :]
    found = edit_end(before, after)
    assert found == _reference_end(before, after)
    if found is not None:
        # Everything after it is the old text's end: what the user did lies before it.
        assert after[found:] == before[len(before) - (len(after) - found) :]


def test_a_letter_typed_is_found_just_after_it() -> None:
    before = "x" * 10_000 + "def f():\n" + "y" * 10_000
    at = 10_000 + len("def f(")
    assert edit_end(before, before[:at] + "a" + before[at:]) == at + 1
    assert edit_end(before, before[:at] + before[at + 1 :]) == at
    assert edit_end(before, before) is None


client = daemon_client()


def _send_whole(client: LanguageClient, uri: str, version: int, text: str) -> None:
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
            content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)],
        )
    )


async def _menu(client: LanguageClient, uri: str, at: types.Position) -> object:
    answer = await client.text_document_completion_async(
        types.CompletionParams(text_document=types.TextDocumentIdentifier(uri=uri), position=at)
    )
    return plain(answer)


@pytest.mark.asyncio
async def test_a_whole_document_client_finds_its_next_completion_ready(client: LanguageClient, tmp_path: Path) -> None:
    root = tmp_path / "project"
    root.mkdir()
    await client.initialize_session(
        types.InitializeParams(
            capabilities=types.ClientCapabilities(),
            workspace_folders=[types.WorkspaceFolder(uri=root.as_uri(), name=root.name)],
            initialization_options=SETTINGS,
        )
    )
    assert (await until_ready(client, WAIT_S))["model_state"] == "ready"
    uri = (root / "store.py").as_uri()
    open_document(client, uri, "python", BEFORE + AFTER)
    # Typed in the middle of the file, each key sent as the whole text; no cursor report.
    typed = "    with open(path, 'w') as f:\n        "
    for version, end in enumerate(range(1, len(typed) + 1), start=2):
        _send_whole(client, uri, version, BEFORE + typed[:end] + AFTER)
    at = end_of(BEFORE + typed)

    async def prepared() -> bool:
        return int((await status_of(client))["ahead"]["runs"]) >= 1

    await until(prepared, WAIT_S)
    served = (await status_of(client))["ahead"]["served"]
    ready = await _menu(client, uri, at)
    assert (await status_of(client))["ahead"]["served"] == served + 1, "the model ran again for the place prepared"
    # Lossless: reopened (its suggestion forgotten), the same request asks the model.
    client.text_document_did_close(types.DidCloseTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri)))
    open_document(client, uri, "python", BEFORE + typed + AFTER)
    assert await _menu(client, uri, at) == ready
    assert (await status_of(client))["ahead"]["served"] == served + 1

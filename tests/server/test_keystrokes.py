"""Typing in a large document through the real server (`lookahead-lsp serve` over stdio, the
real default model): the edits are only recorded on the event loop, so the server keeps
answering at once, and the edited text reaches the index once the folder's debounce passed."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from lsprotocol import types
from pytest_lsp import LanguageClient

from lookahead_lsp.base.tokenizer import Tokenizer, tokenize_file_text
from support.daemon import daemon_client, status_of, until_ready

EDITS = 10
# What a user notices as the editor hanging: the status request stands for any request.
ANSWER_S = 0.2
WAIT_S = 120.0  # a loaded machine shared with other work


client = daemon_client()


async def _until_tokens(client: LanguageClient, tokens: int) -> None:
    deadline = time.monotonic() + WAIT_S
    while (await status_of(client))["index"]["tokens"] != tokens:
        assert time.monotonic() < deadline, f"the index never held {tokens} tokens"
        await asyncio.sleep(0.05)


def _large_module() -> str:
    """About 0.9 MB of plausible Python."""
    lines = [f"value_{i} = compute({i}, {i + 1})  # step {i}\n" for i in range(19_000)]
    return "".join(lines)


@pytest.mark.asyncio
async def test_edits_of_a_large_document_leave_the_server_answering(
    client: LanguageClient, tokenizer: Tokenizer, tmp_path: Path
) -> None:
    root = tmp_path / "project"
    root.mkdir()
    (root / "small.py").write_text("def main():\n    return 1\n")
    await client.initialize_session(
        types.InitializeParams(
            capabilities=types.ClientCapabilities(),
            workspace_folders=[types.WorkspaceFolder(uri=root.as_uri(), name=root.name)],
        )
    )
    status = await until_ready(client, WAIT_S)
    assert status["model_state"] == "ready"
    disk_tokens = status["index"]["tokens"]

    def tokens_of(text: str) -> int:
        return len(tokenize_file_text(tokenizer, text.encode()))

    # Not on disk: only the editor's text can bring it into the index.
    uri = (root / "large.py").as_uri()
    text = _large_module()
    assert 850_000 < len(text) < 1_000_000
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(uri=uri, language_id="python", version=1, text=text)
        )
    )
    await _until_tokens(client, disk_tokens + tokens_of(text))

    start = types.Position(line=0, character=0)
    for edit in range(EDITS):
        inserted = f"edited_{edit} = {edit}\n"
        client.text_document_did_change(
            types.DidChangeTextDocumentParams(
                text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2 + edit),
                content_changes=[
                    types.TextDocumentContentChangePartial(range=types.Range(start=start, end=start), text=inserted)
                ],
            )
        )
        text = inserted + text
    began = time.monotonic()
    await status_of(client)
    waited = time.monotonic() - began
    assert waited < ANSWER_S, f"the status waited {waited:.3f} s behind {EDITS} edits"

    await _until_tokens(client, disk_tokens + tokens_of(text))

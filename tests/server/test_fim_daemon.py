"""Fill-in-the-middle through the whole daemon: a real LSP client (pytest-lsp) drives
`lookahead-lsp serve` with the tiny GGUF of tiny_gguf.py as its modelPath, and the code after
the cursor must reach the model. The same prefix with two different suffixes gets two different
inline completions, from prompts that differ by the suffixes' tokens. The controls, a model
written without FIM tokens and a FIM model with `suffixTokens` 0, see only the prefix: there
the two suffixes give the same completion, which is what the first test would see if the
daemon dropped the suffix."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest
from lsprotocol import types
from pytest_lsp import LanguageClient

from lookahead_lsp.base.tokenizer import Tokenizer
from support.daemon import daemon_client, status_of, until_ready
from support.tiny_gguf import write_tiny_gguf

# A cache folder of these tests' own: the cost model of the tiny model is measured once.
CACHE = Path(tempfile.gettempdir()) / "lookahead-lsp-fim-test-cache"
CAPABILITIES = types.ClientCapabilities(
    text_document=types.TextDocumentClientCapabilities(
        inline_completion=types.InlineCompletionClientCapabilities(dynamic_registration=False),
        synchronization=types.TextDocumentSyncClientCapabilities(),
    ),
    workspace=types.WorkspaceClientCapabilities(workspace_folders=True, configuration=False),
)

# The cursor ends the prefix's last line; only what follows it differs.
PREFIX = "def area(width, height):\n    return "
SUFFIXES = ("\n\nprint(area(2, 3))\n", "\n\nfor x in range(9):\n    print(x * x)\n")


client = daemon_client(CACHE)


async def _start(client: LanguageClient, root: Path, settings: dict[str, Any]) -> None:
    # No time budget: a completion's length must not depend on the machine's speed.
    options = {"maxTokens": 8, "timeBudgetMs": None, "debounceMs": 0, **settings}
    await client.initialize_session(
        types.InitializeParams(
            capabilities=CAPABILITIES,
            workspace_folders=[types.WorkspaceFolder(uri=root.as_uri(), name=root.name)],
            initialization_options=options,
        )
    )
    status = await until_ready(client)
    assert status["model_state"] == "ready", status["model_error"]


async def _completions(client: LanguageClient, root: Path) -> list[dict[str, Any]]:
    """The inline completion at the end of PREFIX with each suffix in turn, as the status's
    "last" reports it (its text and prompt length). One document, its whole text replaced
    between the requests: another open document would add context of its own to the prompt."""
    uri = (root / "area.py").as_uri()
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(uri=uri, language_id="python", version=1, text=PREFIX + SUFFIXES[0])
        )
    )
    lines = PREFIX.split("\n")
    cursor = types.Position(line=len(lines) - 1, character=len(lines[-1]))
    answers = []
    for version, suffix in enumerate(SUFFIXES, start=1):
        if version > 1:
            client.text_document_did_change(
                types.DidChangeTextDocumentParams(
                    text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
                    content_changes=[types.TextDocumentContentChangeWholeDocument(text=PREFIX + suffix)],
                )
            )
        result = await client.text_document_inline_completion_async(
            types.InlineCompletionParams(
                text_document=types.TextDocumentIdentifier(uri=uri),
                position=cursor,
                context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Invoked),
            )
        )
        assert isinstance(result, types.InlineCompletionList) and len(result.items) == 1
        last = (await status_of(client))["last"]
        # What the editor shows is what the model computed: its line, completed.
        assert result.items[0].insert_text == lines[-1] + last["text"]
        answers.append(last)
    return answers


def _suffix_tokens(model: Path) -> list[int]:
    with Tokenizer(model) as tokenizer:
        return [len(tokenizer.tokenize(suffix)) for suffix in SUFFIXES]


@pytest.mark.asyncio
async def test_the_suffix_reaches_a_fim_model(client: LanguageClient, tmp_path: Path) -> None:
    model = write_tiny_gguf(tmp_path / "tiny-fim.gguf", fim=True).path
    root = tmp_path / "project"
    root.mkdir()
    await _start(client, root, {"modelPath": str(model)})
    first, second = await _completions(client, root)

    # Each suffix's tokens went into the prompt, between the FIM tokens...
    short, long = _suffix_tokens(model)
    assert short != long
    assert second["prompt_tokens"] - first["prompt_tokens"] == long - short
    # ...and the model completes the same prefix differently.
    assert first["text"] and second["text"]
    assert first["text"] != second["text"]


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("fim", "options"),
    [(False, {}), (True, {"suffixTokens": 0})],
    ids=["model-without-fim", "suffix-window-0"],
)
async def test_without_the_suffix_the_completion_is_the_same(
    client: LanguageClient, tmp_path: Path, fim: bool, options: dict[str, Any]
) -> None:
    # The controls: a model without FIM tokens, and a FIM model with no room for the suffix,
    # see only the prefix, so the two suffixes give the same prompt and the same completion.
    model = write_tiny_gguf(tmp_path / "tiny.gguf", fim=fim).path
    root = tmp_path / "project"
    root.mkdir()
    await _start(client, root, {"modelPath": str(model), **options})
    first, second = await _completions(client, root)

    assert first["prompt_tokens"] == second["prompt_tokens"]
    assert first["text"] and first["text"] == second["text"]

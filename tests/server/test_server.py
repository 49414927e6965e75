"""The language server end to end: a real LSP client (pytest-lsp) drives `lookahead-lsp serve`
over stdio with the real default model: a workspace folder indexed with progress, inline
completions while typing, the fallback completion, superseded requests, configuration,
the file watcher, bad input, shutdown."""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from lsprotocol import types
from pytest_lsp import LanguageClient

from support.daemon import daemon_client, inline, insert, open_document, plain, status_of, until, until_ready
from support.folders import stdlib_folder

SAMPLE = Path(__file__).parents[2] / "examples" / "sample-project"
# pygls leaves send_request_async and client.feature unannotated, pytest-lsp its fixture
# decorator: the lines that use them carry a targeted type: ignore.

ORDERS = "shop/orders.py"
# The client capabilities a 3.18 editor declares; pytest-lsp's bundled profiles predate inline
# completion.
CAPABILITIES = types.ClientCapabilities(
    text_document=types.TextDocumentClientCapabilities(
        inline_completion=types.InlineCompletionClientCapabilities(dynamic_registration=False),
        completion=types.CompletionClientCapabilities(),
        synchronization=types.TextDocumentSyncClientCapabilities(),
    ),
    window=types.WindowClientCapabilities(work_done_progress=True),
    workspace=types.WorkspaceClientCapabilities(workspace_folders=True, configuration=False),
)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    shutil.copytree(SAMPLE, root)
    return root


async def _start(client: LanguageClient, root: Path, options: dict[str, Any] | None = None) -> None:
    await client.initialize_session(
        types.InitializeParams(
            capabilities=CAPABILITIES,
            workspace_folders=[types.WorkspaceFolder(uri=root.as_uri(), name=root.name)],
            initialization_options=options,
        )
    )


def _open(client: LanguageClient, path: Path, text: str | None = None) -> str:
    """Opens path as Python, with its file's text unless text is given."""
    uri = path.as_uri()
    open_document(client, uri, "python", path.read_text() if text is None else text)
    return uri


def _insert(client: LanguageClient, uri: str, version: int, line: int, character: int, text: str) -> None:
    insert(client, uri, version, types.Position(line=line, character=character), text)


def _inline(client: LanguageClient, uri: str, line: int, character: int) -> Awaitable[Any]:
    return inline(client, uri, types.Position(line=line, character=character))


client = daemon_client()


@pytest.mark.asyncio
async def test_inline_completions_while_typing(client: LanguageClient, workspace: Path) -> None:
    await _start(client, workspace)
    status = await until_ready(client)
    assert status["model_state"] == "ready" and status["model"].endswith(".gguf")
    assert status["index"]["files"] == 2 and status["index"]["tokens"] > 0
    # Preparing the model and indexing reported work-done progress, begin to end.
    ended: list[types.WorkDoneProgressBegin] = []
    for reports in client.progress_reports.values():
        if reports and isinstance(reports[0], types.WorkDoneProgressBegin) and isinstance(reports[-1], types.WorkDoneProgressEnd):
            ended.append(reports[0])
    model = "Lookahead: preparing the model"
    assert any(b.title == model and (b.message or "").startswith("loading the model") for b in ended)
    assert any(b.title != model for b in ended)
    uri = _open(client, workspace / ORDERS)
    result = await _inline(client, uri, 17, 8)
    assert result is not None and len(result.items) == 1
    item = result.items[0]
    assert item.insert_text.strip() and item.range is not None
    assert item.range.end == types.Position(line=17, character=8)
    # The status shows the suggestion the model computed last: this one, after the typed line.
    suggestion = (await status_of(client))["last"]["text"]
    assert item.insert_text == " " * 8 + suggestion
    # Type the first characters of the suggestion (on its first line, leaving some of it): the
    # suggestion cache answers the rest, and the editor shows the same line as before.
    first = suggestion.split("\n")[0][: min(2, len(suggestion) - 1)]
    _insert(client, uri, 2, 17, 8, first)
    again = await _inline(client, uri, 17, 8 + len(first))
    assert again is not None and len(again.items) == 1
    assert again.items[0].insert_text == " " * 8 + suggestion
    status = await status_of(client)
    assert status["completions"]["from_cache"] == 1
    assert status["last"]["tokens"] > 0 and "tokens_per_s" in status["last"]


@pytest.mark.asyncio
async def test_rebuild_index_tokenizes_every_file_again(client: LanguageClient, workspace: Path) -> None:
    await _start(client, workspace)
    await until_ready(client)
    (workspace / "shop" / "extra.py").write_text("VALUE = 1\n")
    await until(lambda: _files_indexed(client, 3))
    client.log_messages.clear()
    assert await client.protocol.send_request_async("lookahead/rebuildIndex", {}) is None  # type: ignore[no-untyped-call]
    status = await until_ready(client)
    assert status["index"]["files"] == 3
    indexed = [m.message for m in client.log_messages if m.message.startswith("indexed ")]
    assert indexed and "3 files (3 tokenized, 0 unchanged)" in indexed[-1]


async def _files_indexed(client: LanguageClient, files: int) -> bool:
    return bool((await status_of(client))["index"]["files"] == files)


@pytest.mark.asyncio
async def test_completion_fallback_item(client: LanguageClient, workspace: Path) -> None:
    await _start(client, workspace)
    await until_ready(client)
    uri = _open(client, workspace / ORDERS)
    result = await client.text_document_completion_async(
        types.CompletionParams(text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(line=17, character=8))
    )
    assert isinstance(result, types.CompletionList) and len(result.items) == 1
    edit = result.items[0].text_edit
    assert isinstance(edit, types.TextEdit) and edit.new_text.strip()


@pytest.mark.asyncio
async def test_unsaved_document_gets_completions(client: LanguageClient, workspace: Path) -> None:
    await _start(client, workspace)
    await until_ready(client)
    uri = "untitled:Untitled-1"  # a new editor tab, never saved: no path, no workspace folder
    text = (workspace / ORDERS).read_text()
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(uri=uri, language_id="python", version=1, text=text)
        )
    )
    result = await _inline(client, uri, 17, 8)
    assert result is not None and len(result.items) == 1 and result.items[0].insert_text.strip()
    assert (await status_of(client))["index"]["files"] == 2  # nothing of it entered the index


@pytest.mark.asyncio
async def test_newer_request_supersedes_older(client: LanguageClient, workspace: Path) -> None:
    await _start(client, workspace, {"maxTokens": 128, "timeBudgetMs": None})
    await until_ready(client)
    uri = _open(client, workspace / ORDERS)
    # The order is the order of sending: one turn of the loop lets the older request's task
    # write it (pytest-lsp sends from a coroutine) before the edit. The daemon supersedes it
    # wherever it is, waiting or on the model (128 tokens take it seconds).
    older = asyncio.ensure_future(_inline(client, uri, 17, 8))
    await asyncio.sleep(0)
    _insert(client, uri, 2, 17, 8, "i")
    newer = await _inline(client, uri, 17, 9)
    superseded = await older
    assert superseded is not None and not superseded.items
    assert newer is not None
    status = await status_of(client)
    assert status["completions"]["cancelled"] >= 1


@pytest.mark.asyncio
async def test_configuration_is_validated(client: LanguageClient, workspace: Path) -> None:
    await _start(client, workspace, {"draft": "lookup", "noSuchKey": 1})
    await until_ready(client)
    assert (await status_of(client))["draft"] == "lookup"
    client.workspace_did_change_configuration(
        types.DidChangeConfigurationParams(settings={"lookahead": {"draft": "sideways", "maxTokens": 16}})
    )
    await until(lambda: _async(any("sideways" in m.message for m in client.messages)))
    assert any("noSuchKey" in m.message for m in client.messages)
    assert (await status_of(client))["draft"] == "lookup"  # the bad value was refused


@pytest.mark.asyncio
async def test_hostile_ignore_patterns_neither_freeze_nor_stop_the_folder(client: LanguageClient, workspace: Path) -> None:
    # A .gitignore pattern that backtracks for minutes in a regex engine that can, a file name
    # that makes it, and an ignoreGlobs value that is not a pattern.
    (workspace / ".gitignore").write_text("*a" * 14 + "*b\n")
    (workspace / ("a" * 60 + ".py")).write_text("x = 1\n")
    await _start(client, workspace, {"ignoreGlobs": ["!"]})
    status = await until_ready(client)
    assert status["index"]["state"] == "ready"
    [refused] = [m.message for m in client.messages if "lookahead.ignoreGlobs" in m.message]
    assert '["!"] refused' in refused and "\n" not in refused
    await client.protocol.send_request_async("lookahead/rebuildIndex", None)  # type: ignore[no-untyped-call]
    assert (await until_ready(client))["index"]["state"] == "ready"


async def _async(value: bool) -> bool:
    return value


@pytest.mark.asyncio
async def test_watcher_follows_the_disk(client: LanguageClient, workspace: Path) -> None:
    await _start(client, workspace)
    status = await until_ready(client)
    before = status["index"]
    # Each folder says how its changes are followed: events, or polling and why.
    [folder] = status["folders"]
    assert folder["root"] == str(workspace.resolve()) and folder["static_cache"] is None
    watcher = folder["watcher"]
    assert watcher["mode"] == "watching" or (watcher["mode"] == "polling" and watcher["reason"])

    async def index() -> dict[str, Any]:
        return dict((await status_of(client))["index"])

    new = workspace / "shop" / "payments.py"
    new.write_text("def pay(order, amount):\n    return order.total_cents() - amount\n")
    await until(lambda: _has(index, lambda i: i["files"] == before["files"] + 1))
    grown = await index()
    new.write_text(new.read_text() * 3)
    await until(lambda: _has(index, lambda i: i["tokens"] > grown["tokens"]))
    new.rename(workspace / "shop" / "billing.py")
    await until(lambda: _has(index, lambda i: i["files"] == before["files"] + 1))
    (workspace / "shop" / "billing.py").unlink()
    await until(lambda: _has(index, lambda i: i["files"] == before["files"] and i["tokens"] == before["tokens"]))


async def _has(get: Callable[[], Awaitable[dict[str, Any]]], test: Callable[[dict[str, Any]], bool]) -> bool:
    return test(await get())


@pytest.mark.asyncio
async def test_bad_requests_leave_the_server_answering(client: LanguageClient, workspace: Path) -> None:
    await _start(client, workspace)
    await until_ready(client)
    # A document never opened and not on disk, a position far past the end, a character in
    # the middle of nowhere: answered, not crashed.
    missing = await _inline(client, (workspace / "nope.py").as_uri(), 0, 0)
    assert missing is not None and not missing.items
    uri = _open(client, workspace / ORDERS)
    past = await _inline(client, uri, 10_000, 5)
    assert past is not None
    wide = await _inline(client, uri, 3, 10_000)
    assert wide is not None
    with pytest.raises(Exception):
        await client.protocol.send_request_async("lookahead/no-such-method", None)  # type: ignore[no-untyped-call]
    # A binary file opened in the editor does not enter the index.
    binary = workspace / "blob.py"
    binary.write_bytes(b"\x00\x01\x02" * 100)
    _open(client, binary, text="\x00\x01\x02" * 100)
    status = await status_of(client)
    assert status["index"]["files"] == 2
    result = await _inline(client, uri, 17, 8)
    assert result is not None and len(result.items) == 1


SECRET = "API_TOKEN = 'zebra-quasar-4471'"


@pytest.mark.asyncio
async def test_unopened_documents_are_read_only_inside_the_workspace(
    client: LanguageClient, workspace: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = outside / "secret.py"
    secret.write_text(SECRET + "\n")
    await _start(client, workspace)
    await until_ready(client)
    link = workspace / "shop" / "link.py"
    link.symlink_to(secret)
    pipe = workspace / "shop" / "pipe.py"
    os.mkfifo(pipe)  # opened for reading, it would wait for a writer
    # A file of the folder the editor did not open is read and completed.
    inside = await _inline(client, (workspace / ORDERS).as_uri(), 17, 8)
    assert inside is not None and len(inside.items) == 1
    # Anything else answers an empty list, the same whether the file exists or not.
    names = ["file:///etc/passwd", secret.as_uri(), (outside / "missing.py").as_uri(), link.as_uri(), pipe.as_uri()]
    refused = [await _inline(client, uri, 0, len(SECRET)) for uri in names]
    assert [len(reply.items) if reply is not None else None for reply in refused] == [0] * len(names)
    listed = await client.text_document_completion_async(
        types.CompletionParams(text_document=types.TextDocumentIdentifier(uri=secret.as_uri()),
                               position=types.Position(line=0, character=len(SECRET)))
    )  # fmt: skip
    assert isinstance(listed, types.CompletionList) and len(listed.items) == 0
    assert (await status_of(client))["model_state"] == "ready"  # answering after the FIFO
    seen = repr([inside, *refused, listed]) + repr(client.log_messages) + repr(client.messages)
    assert "zebra-quasar" not in seen


@pytest.mark.asyncio
async def test_missing_model_is_reported_once_and_answers_nothing(client: LanguageClient, workspace: Path) -> None:
    await _start(client, workspace, {"modelPath": str(workspace / "missing.gguf")})
    status = await until_ready(client)
    assert status["model_state"] == "error" and "missing.gguf" in status["model_error"]
    uri = _open(client, workspace / ORDERS)
    for _ in range(2):
        result = await _inline(client, uri, 17, 8)
        assert result is not None and not result.items
    errors = [m for m in client.messages if m.type == types.MessageType.Error]
    assert len(errors) == 1 and "missing.gguf" in errors[0].message


@pytest.mark.asyncio
async def test_cancel_request_stops_the_model(client: LanguageClient, workspace: Path) -> None:
    await _start(client, workspace, {"maxTokens": 64, "timeBudgetMs": None, "debounceMs": 0})
    await until_ready(client)
    busy_uri = _open(client, workspace / ORDERS)
    other_uri = _open(client, workspace / "shop" / "inventory.py")

    def params(uri: str, line: int) -> types.InlineCompletionParams:
        return types.InlineCompletionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            position=types.Position(line=line, character=8),
            context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Invoked),
        )

    # The model is busy with the first request; the second waits for it and is cancelled there.
    busy = asyncio.ensure_future(
        client.protocol.send_request_async(types.TEXT_DOCUMENT_INLINE_COMPLETION, params(busy_uri, 17))  # type: ignore[no-untyped-call]
    )
    waiting = asyncio.ensure_future(
        client.protocol.send_request_async(  # type: ignore[no-untyped-call]
            types.TEXT_DOCUMENT_INLINE_COMPLETION, params(other_uri, 20), msg_id="cancel-me"
        )
    )
    await asyncio.sleep(0.05)  # both sent
    client.protocol.notify(types.CANCEL_REQUEST, types.CancelParams(id="cancel-me"))
    with pytest.raises(Exception, match="cancel"):
        await waiting
    assert await busy is not None
    await until(lambda: _has(lambda: status_of(client), lambda s: s["completions"]["cancelled"] >= 1))
    after = await _inline(client, other_uri, 20, 8)
    assert after is not None


async def _status_notifications(client: LanguageClient) -> list[tuple[float, dict[str, Any]]]:
    """The lookahead/statusChanged notifications the server sends from now on, with the time
    each arrived."""
    received: list[tuple[float, dict[str, Any]]] = []

    @client.feature("lookahead/statusChanged")  # type: ignore[untyped-decorator]
    def on_status(params: Any) -> None:
        received.append((time.monotonic(), plain(params)))

    return received


@pytest.mark.asyncio
async def test_status_is_pushed_when_it_changes(client: LanguageClient, workspace: Path) -> None:
    received = await _status_notifications(client)
    await _start(client, workspace)
    # Right after initialize: the folder is known, the model not loaded yet.
    await until(lambda: _async(bool(received)))
    first = received[0][1]
    assert first["folders"][0]["root"] == str(workspace.resolve()) and first["index"]["state"] == "indexing"
    # Once the folder is indexed (after the model, whose tokenizer it needs), without asking.
    await until(lambda: _async(received[-1][1]["index"] == {**received[-1][1]["index"], "state": "ready", "files": 2}))
    assert received[-1][1]["model_state"] == "ready"
    assert received[-1][1] == await status_of(client)
    # A completion changes the figures: pushed too.
    uri = _open(client, workspace / ORDERS)
    count = len(received)
    await _inline(client, uri, 17, 8)
    await until(lambda: _async(len(received) > count and received[-1][1]["last"] is not None))
    # A burst of changes goes out as at most one notification per 250 ms.
    await asyncio.sleep(0.5)
    count = len(received)
    for tokens in range(10):
        client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings={"maxTokens": 16 + tokens}))
    await asyncio.sleep(1.0)
    burst = received[count:]
    assert 1 <= len(burst) <= 3
    assert all(later - earlier > 0.15 for (earlier, _), (later, _) in zip(burst, burst[1:]))


@pytest.mark.asyncio
async def test_debounce_ms_is_the_daemons_wait(client: LanguageClient, workspace: Path) -> None:
    await _start(client, workspace, {"debounceMs": 1500})
    await until_ready(client)
    uri = _open(client, workspace / ORDERS)
    # An automatic request (a keystroke) waits debounceMs before the model starts on it...
    started = time.monotonic()
    typed = await _inline(client, uri, 17, 8)
    assert typed is not None and len(typed.items) == 1
    assert time.monotonic() - started >= 1.5
    # ...and one superseded within that wait never reaches the model.
    served = (await status_of(client))["completions"]["served"]
    older = asyncio.ensure_future(_inline(client, uri, 19, 8))
    await asyncio.sleep(0)  # one turn of the loop: the older request's task writes it
    newer = await _inline(client, uri, 14, 8)
    superseded = await older
    assert superseded is not None and not superseded.items and newer is not None
    assert (await status_of(client))["completions"]["served"] == served + 1


def _close(client: LanguageClient, uri: str) -> None:
    client.text_document_did_close(types.DidCloseTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri)))


async def _suggestions(client: LanguageClient, path: Path, spots: list[tuple[int, int]]) -> list[str]:
    """The inline item's text at each spot (the line up to the cursor, then the suggestion);
    the document is closed afterwards, which drops its cached suggestions."""
    uri = _open(client, path)
    shown = []
    for line, character in spots:
        result = await _inline(client, uri, line, character)
        shown.append(result.items[0].insert_text if result is not None and result.items else "")
    _close(client, uri)
    return shown


@pytest.mark.asyncio
async def test_multiline_setting(client: LanguageClient, workspace: Path) -> None:
    # A blank line in a function body, and three places inside code: before `lines: ...`, before
    # `if quantity <= 0:` and before `raise ...`.
    blank, in_code = (17, 8), [(9, 4), (12, 0), (13, 8)]
    await _start(client, workspace, {"multiline": "never", "maxTokens": 48, "timeBudgetMs": None})
    await until_ready(client)
    never = await _suggestions(client, workspace / ORDERS, [blank, *in_code])
    assert all(text.strip() and "\n" not in text for text in never), never

    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings={"lookahead": {"multiline": "auto"}}))
    auto = await _suggestions(client, workspace / ORDERS, [blank, *in_code])
    assert len(auto[0].splitlines()) > 1, auto  # a block from the blank line
    assert all("\n" not in text for text in auto[1:]), auto  # inside code: one line
    assert auto[0].startswith(never[0]) and auto[1:] == never[1:]

    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings={"lookahead": {"multiline": "always"}}))
    always = await _suggestions(client, workspace / ORDERS, in_code)
    # The same first line, and where the model goes on at the line's indentation, more lines.
    assert [text.split("\n")[0] for text in always] == auto[1:]
    assert any(len(text.splitlines()) > 1 for text in always), always


@pytest.mark.asyncio
async def test_where_the_cursor_rests_the_daemon_computes_ahead(client: LanguageClient, workspace: Path) -> None:
    await _start(client, workspace, {"maxTokens": 8})
    await until_ready(client)
    uri = _open(client, workspace / ORDERS)
    # Malformed: dropped with one line in the log; the daemon goes on.
    client.protocol.notify("lookahead/cursor", {"textDocument": {"uri": uri}, "position": {"line": "x"}})
    client.protocol.notify(
        "lookahead/cursor", {"textDocument": {"uri": uri}, "position": {"line": 17, "character": 8}}
    )

    async def computed() -> bool:
        return bool((await status_of(client))["ahead"]["runs"] >= 1)

    await until(computed, timeout=120)
    result = await _inline(client, uri, 17, 8)
    assert result is not None and len(result.items) == 1
    status = await status_of(client)
    assert status["completions"]["from_cache"] == 1, "the rest's completion did not answer"
    assert status["ahead"]["served"] == 1


@pytest.mark.asyncio
async def test_a_folder_over_its_memory_budget_keeps_its_bulk_on_disk(client: LanguageClient, workspace: Path) -> None:
    # The smallest budget the setting allows, and a folder that outgrows it in memory.
    stdlib_folder(workspace / "lib", 3_000_000)
    await _start(client, workspace, {"indexMemoryMib": 16})
    status = await until_ready(client)
    [folder] = status["folders"]
    index, symbols = folder["index"], folder["symbols"]
    assert index["budget_bytes"] + symbols["budget_bytes"] == 16 << 20 and index["memory_bytes"] <= index["budget_bytes"]
    assert symbols["files"] == index["files"] and symbols["memory_bytes"] <= symbols["budget_bytes"]
    assert index["table_files"] == index["files"] == status["index"]["files"] and index["table_bytes"] > 0
    uri = _open(client, workspace / ORDERS)
    result = await _inline(client, uri, 17, 8)
    assert result is not None and len(result.items) == 1 and result.items[0].insert_text.strip()

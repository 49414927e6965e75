"""The editor side that the LSP tests and benchmarks share: what an editor sends (open, insert,
close, inline completion requests) and asks (`lookahead/status`, waiting until the model is
loaded and the folders are indexed), as functions of any pygls client (pytest-lsp's included),
`Daemon`, a real pygls client that starts `lookahead-lsp serve` as an editor does, waits
until it is ready and stops it, and daemon_client, the LSP tests' fixture."""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, Sequence, Union

import pytest_lsp
from lsprotocol import types
from pygls.lsp.client import LanguageClient
from pytest_lsp import ClientServerConfig
from pytest_lsp import LanguageClient as PytestLspClient

Answer = Union[types.InlineCompletionList, Sequence[types.InlineCompletionItem], None]
# Shared by every daemon the tests start: the cost model is measured once.
TEST_CACHE = Path(tempfile.gettempdir()) / "lookahead-lsp-test-cache"


def standalone_serve(cache: Path = TEST_CACHE) -> list[str]:
    """A daemon of the test's own (not the user's shared one), over stdio, logging what it does."""
    return [sys.executable, "-m", "lookahead_lsp", "serve", "--standalone", "--log-level", "info", "--cache-dir", str(cache)]


def daemon_client(cache: Path = TEST_CACHE) -> Any:
    """The fixture by which an LSP test gets a daemon: `lookahead-lsp serve --standalone` on
    the cache folder, started as an editor starts it and driven by pytest-lsp's client, shut
    down cleanly after the test (unless the test saw it fail). A module names it `client`:
    `client = daemon_client()`. The other ways tests reach the daemon are each for what this one
    cannot do: support/lsp_peer.py's Peer writes raw bytes (framing, transport, the relay and
    the shared daemon), support/hosts.py's hosts run the service in-process (its threads and
    state)."""
    config = ClientServerConfig(server_command=standalone_serve(cache), server_env=dict(os.environ))

    @pytest_lsp.fixture(config=config)  # type: ignore[untyped-decorator]  # pytest-lsp leaves it unannotated
    async def client(lsp_client: PytestLspClient) -> AsyncIterator[PytestLspClient]:
        yield lsp_client
        if not lsp_client.error:
            await lsp_client.shutdown_session()

    return client


class Daemon:
    """One `lookahead-lsp serve` and the client talking to it."""

    def __init__(self, name: str, shared: bool = False) -> None:
        """shared: `serve` as editors start it, relayed to the user's shared daemon; else a
        daemon of its own (--standalone), whose process `pid` is."""
        self.shared = shared
        self.client = LanguageClient(name, "1")
        # The daemon pushes its status to the extension; a benchmark asks for it instead.
        self.client.feature("lookahead/statusChanged")(_ignore)
        self.client.feature(types.WINDOW_LOG_MESSAGE)(_print_log)

    async def start(
        self,
        folders: list[Path],
        cache: Path,
        settings: dict[str, Any] | None = None,
        model: Path | None = None,
        wait_index: bool = True,
        wait_model: bool = True,
    ) -> None:
        """Returns once the model is loaded and (wait_index) every folder indexed; SystemExit
        when the model cannot be loaded (a benchmark has nothing to measure then). Without
        wait_index the folders may still be indexing: what an editor can do meanwhile is what
        a benchmark of indexing measures."""
        args = ["-m", "lookahead_lsp", "serve", "--cache-dir", str(cache)]
        if not self.shared:
            args.append("--standalone")
        if model is not None:
            args += ["--model", str(model)]
        await self.client.start_io(sys.executable, *args)
        await self.client.initialize_async(
            types.InitializeParams(
                capabilities=types.ClientCapabilities(
                    text_document=types.TextDocumentClientCapabilities(
                        inline_completion=types.InlineCompletionClientCapabilities()
                    ),
                    window=types.WindowClientCapabilities(work_done_progress=False),
                ),
                workspace_folders=[types.WorkspaceFolder(uri=f.as_uri(), name=f.name) for f in folders],
                initialization_options=settings or {},
            )
        )
        self.client.initialized(types.InitializedParams())
        while wait_model:
            status = await self.status()
            if status.model_state == "error":
                raise SystemExit(f"the daemon could not load the model: {status.model_error}")
            if status.model_state != "loading" and (not wait_index or status.index.state == "ready"):
                return
            await asyncio.sleep(0.2)

    @property
    def pid(self) -> int:
        """The daemon's process, for what /proc says of it."""
        server = self.client._server
        assert server is not None, "the daemon is not started"
        return server.pid

    @property
    def process_id(self) -> int | None:
        """As pid, but None until the process is started: a sampler started alongside start()
        waits on it."""
        server = self.client._server
        return server.pid if server is not None else None

    async def copy_stderr(self, path: Path) -> None:
        """Copies what the daemon writes to stderr into path until it exits. pygls pipes the
        daemon's stderr and reads none of it: a long run that logs warnings would fill the pipe
        and block the daemon. Run it as a task once start() began."""
        while self.client._server is None:
            await asyncio.sleep(0.01)
        stream = self.client._server.stderr
        if stream is None:
            return
        with path.open("ab") as sink:
            while chunk := await stream.read(1 << 16):
                sink.write(chunk)
                sink.flush()

    async def status(self) -> Any:
        """The status as pygls hands it back (named tuples); plain() makes dicts of it."""
        return await self.client.protocol.send_request_async("lookahead/status", None)

    def open(self, uri: str, language: str, text: str) -> None:
        open_document(self.client, uri, language, text)

    def insert(self, uri: str, version: int, at: types.Position, text: str) -> None:
        insert(self.client, uri, version, at, text)

    def close(self, uri: str) -> None:
        self.client.text_document_did_close(
            types.DidCloseTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri))
        )

    async def complete(
        self, uri: str, at: types.Position, invoked: bool = False
    ) -> tuple[Answer, float]:
        """The answer to an inline completion request and how long it took, in ms."""
        start = time.perf_counter()
        answer = await inline(self.client, uri, at, invoked)
        return answer, (time.perf_counter() - start) * 1000

    async def stop(self) -> None:
        await self.client.shutdown_async(None)
        self.client.exit(None)
        await self.client.stop()  # type: ignore[no-untyped-call]


def _ignore(params: Any) -> None:
    pass


def _print_log(params: types.LogMessageParams) -> None:
    print(f"daemon: {params.message}", file=sys.stderr)


def end_of(text: str) -> types.Position:
    """The position just after text, as an editor counts it (UTF-16 code units per line)."""
    line = text.count("\n")
    last = text[text.rfind("\n") + 1 :]
    return types.Position(line=line, character=len(last.encode("utf-16-le")) // 2)


def items_of(answer: Answer) -> Sequence[types.InlineCompletionItem]:
    if answer is None:
        return []
    return answer.items if isinstance(answer, types.InlineCompletionList) else answer


def plain(value: Any) -> Any:
    """pygls hands back custom responses as named tuples: plain dicts and lists."""
    if hasattr(value, "_asdict"):
        return {k: plain(v) for k, v in value._asdict().items()}
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


# -- what an editor sends and asks, with any pygls client ------------------------------------


async def status_of(client: LanguageClient) -> dict[str, Any]:
    """lookahead/status, as plain dicts."""
    status: dict[str, Any] = plain(await client.protocol.send_request_async("lookahead/status", None))
    return status


async def until(check: Callable[[], Awaitable[bool]], timeout: float = 60.0) -> None:
    """Returns once check() holds; AssertionError after timeout seconds."""
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.05)


async def until_ready(client: LanguageClient, timeout: float = 60.0) -> dict[str, Any]:
    """The status once the model is no longer loading and every folder is indexed."""

    async def ready() -> bool:
        status = await status_of(client)
        return bool(status["model_state"] != "loading" and status["index"]["state"] == "ready")

    await until(ready, timeout)
    return await status_of(client)


def open_document(client: LanguageClient, uri: str, language: str, text: str) -> None:
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(uri=uri, language_id=language, version=1, text=text)
        )
    )


def insert(client: LanguageClient, uri: str, version: int, at: types.Position, text: str) -> None:
    """text typed (or pasted) at `at`, as an incremental change."""
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
            content_changes=[types.TextDocumentContentChangePartial(range=types.Range(start=at, end=at), text=text)],
        )
    )


def inline(client: LanguageClient, uri: str, at: types.Position, invoked: bool = False) -> Awaitable[Answer]:
    """An inline completion request, automatic (as typing triggers it) unless invoked."""
    trigger = types.InlineCompletionTriggerKind.Invoked if invoked else types.InlineCompletionTriggerKind.Automatic
    return client.text_document_inline_completion_async(
        types.InlineCompletionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            position=at,
            context=types.InlineCompletionContext(trigger_kind=trigger),
        )
    )

"""The language server: LSP messages in, calls of LookaheadService out. Handlers stay thin; the
service holds the model, the workspace indexes and the completion worker.

Features: textDocument/inlineCompletion (LSP 3.18), textDocument/completion (one item, for
editors without inline completion), incremental document sync, workspace folders,
didChangeConfiguration, didChangeWatchedFiles, the requests lookahead/status and
lookahead/rebuildIndex, the notification lookahead/cursor (where the editor's cursor rests, for
work done ahead), and the notification lookahead/statusChanged (the status, sent when it
changes). The items themselves are built in lsp_items.py."""

from __future__ import annotations

import asyncio
import logging
import math
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from lsprotocol import types
from pygls.lsp.server import LanguageServer
from pygls.workspace import TextDocument

from lookahead_lsp import __version__
from lookahead_lsp.base.cache_files import default_cache_dir, sweep_temporaries
from lookahead_lsp.lsp.items import (
    MenuClient,
    completion_list,
    cursor_offset,
    inline_cursor,
    inline_list,
    menu_client,
)
from lookahead_lsp.lsp.rpc import CURSOR_NOTIFICATION, LookaheadProtocol
from lookahead_lsp.service.folder_host import FolderHost
from lookahead_lsp.service.model_host import ModelHost
from lookahead_lsp.service.model_work import Computed
from lookahead_lsp.service.service import Answer, LookaheadService
from lookahead_lsp.lsp.listeners import Listener
from lookahead_lsp.lsp.transport import Session, serve_socket, serve_stdio

STATUS_REQUEST = "lookahead/status"
STATUS_CHANGED_NOTIFICATION = "lookahead/statusChanged"
REBUILD_INDEX_REQUEST = "lookahead/rebuildIndex"
# At most one lookahead/statusChanged per this many seconds: a burst of changes (keystrokes'
# completions, a folder's progress) goes out as one, with the status as it is when sent.
STATUS_INTERVAL_S = 0.25
_LOG = logging.getLogger(__name__)
_LEVELS = (
    (logging.ERROR, types.MessageType.Error),
    (logging.WARNING, types.MessageType.Warning),
    (logging.INFO, types.MessageType.Info),
)


def _message_type(level: int) -> types.MessageType:
    return next((kind for at, kind in _LEVELS if level >= at), types.MessageType.Log)


def uri_to_path(uri: str) -> Path | None:
    parsed = urlparse(uri)
    if parsed.scheme != "file":
        return None
    return Path(unquote(parsed.path))


class _StatusNotifier:
    """Tells the editor the status changed: lookahead/statusChanged with the lookahead/status
    answer, at most one per STATUS_INTERVAL_S, so that it need not poll. On the event loop."""

    def __init__(self, server: LookaheadServer) -> None:
        self.server = server
        self._scheduled = False
        self._last_sent = -math.inf

    def changed(self) -> None:
        loop = self.server.event_loop
        if loop is None or self._scheduled:  # before initialize, or one is on its way
            return
        self._scheduled = True
        loop.call_at(max(loop.time(), self._last_sent + STATUS_INTERVAL_S), self._send, loop)

    def _send(self, loop: asyncio.AbstractEventLoop) -> None:
        self._scheduled = False
        if not self.server.protocol.session_initialized():  # no client, or one not ready for it
            return
        self._last_sent = loop.time()
        self.server.protocol.notify(STATUS_CHANGED_NOTIFICATION, self.server.service.status())


class _EditorChannel:
    """The service's way back to the editor, from any thread: everything is handed to the
    server's event loop."""

    def __init__(self, server: LookaheadServer) -> None:
        self.server = server
        self._progress_started: set[str] = set()

    def _call(self, fn: Callable[[], None]) -> None:
        loop = self.server.event_loop
        if loop is None or loop.is_closed():
            return
        try:
            loop.call_soon_threadsafe(fn)
        except RuntimeError:  # the loop closed meanwhile
            pass

    def log(self, level: int, message: str) -> None:
        _LOG.log(level, "%s", message)
        self._call(lambda: self.server.window_log_message(
            types.LogMessageParams(type=_message_type(level), message=message)))

    def show(self, level: int, message: str) -> None:
        _LOG.log(level, "%s", message)
        self._call(lambda: self.server.window_show_message(
            types.ShowMessageParams(type=_message_type(level), message=message)))

    def progress(self, token: str, title: str, message: str, percent: int | None, done: bool) -> None:
        self._call(lambda: self._progress(token, title, message, percent, done))

    def status_changed(self) -> None:
        self._call(self.server.status_notifier.changed)

    def _progress(self, token: str, title: str, message: str, percent: int | None, done: bool) -> None:
        if not self.server.supports_progress:
            return  # the client did not declare window.workDoneProgress
        progress = self.server.work_done_progress
        if token not in self._progress_started:
            if done:
                return
            self._progress_started.add(token)
            progress.create(token)
            progress.begin(token, types.WorkDoneProgressBegin(title=title, message=message, percentage=percent))
        elif done:
            self._progress_started.discard(token)
            progress.end(token, types.WorkDoneProgressEnd(message=message))
        else:
            progress.report(token, types.WorkDoneProgressReport(message=message, percentage=percent))


class LookaheadServer(LanguageServer):
    # Every message goes through LookaheadProtocol.receive: every request gets an answer.
    protocol: LookaheadProtocol

    def __init__(
        self, cache_dir: Path | None = None, host: ModelHost[Computed] | None = None, folders: FolderHost | None = None
    ) -> None:
        super().__init__(
            "lookahead-lsp",
            __version__,
            text_document_sync_kind=types.TextDocumentSyncKind.Incremental,
            protocol_cls=LookaheadProtocol,
        )
        self.status_notifier = _StatusNotifier(self)
        self.service = LookaheadService(_EditorChannel(self), cache_dir, host, folders)
        self.supports_progress = False
        # What the editor's completion menu inserts correctly, known from initialize.
        self.menu_client = MenuClient()
        # The loop the server runs on, known from the first message: other threads hand their
        # messages for the editor to it.
        self.event_loop: asyncio.AbstractEventLoop | None = None

    def report_server_error(self, error: Exception, source: Any) -> None:
        """Malformed messages and handler failures: one line in the log, not a pop-up per
        occurrence; the server goes on with the next message."""
        message = f"{type(error).__name__}: {error}".splitlines()[0]
        _LOG.warning("%s", message)
        try:
            self.window_log_message(types.LogMessageParams(type=types.MessageType.Warning, message=message))
        except Exception:  # the connection itself may be what failed
            pass


def initialize(ls: LookaheadServer, params: types.InitializeParams) -> None:
    ls.event_loop = asyncio.get_running_loop()
    window = params.capabilities.window
    ls.supports_progress = bool(window and window.work_done_progress)
    ls.menu_client = menu_client(params)
    ls.service.configure(params.initialization_options)
    folders = params.workspace_folders or []
    roots = [uri_to_path(f.uri) for f in folders]
    if not folders and params.root_uri:
        roots = [uri_to_path(params.root_uri)]
    for root in roots:
        if root is not None and root.is_dir():
            ls.service.add_folder(root)
    ls.status_notifier.changed()


def initialized(ls: LookaheadServer, params: types.InitializedParams) -> None:
    ls.service.start_model()


def shutdown(ls: LookaheadServer, params: None) -> None:
    ls.service.shutdown()


def did_change_configuration(ls: LookaheadServer, params: types.DidChangeConfigurationParams) -> None:
    ls.service.configure(params.settings)
    ls.status_notifier.changed()


def did_change_folders(ls: LookaheadServer, params: types.DidChangeWorkspaceFoldersParams) -> None:
    for folder in params.event.removed:
        if (path := uri_to_path(folder.uri)) is not None:
            ls.service.remove_folder(path)
    for folder in params.event.added:
        if (path := uri_to_path(folder.uri)) is not None and path.is_dir():
            ls.service.add_folder(path)
    ls.status_notifier.changed()


_FILE_CHANGES = {
    types.FileChangeType.Created: "created",
    types.FileChangeType.Changed: "changed",
    types.FileChangeType.Deleted: "deleted",
}


def did_change_watched_files(ls: LookaheadServer, params: types.DidChangeWatchedFilesParams) -> None:
    for change in params.changes:
        if (path := uri_to_path(change.uri)) is not None:
            ls.service.disk_event(path, _FILE_CHANGES.get(change.type, "changed"))


def did_open(ls: LookaheadServer, params: types.DidOpenTextDocumentParams) -> None:
    doc = params.text_document
    ls.service.open_document(doc.uri, uri_to_path(doc.uri), doc.text)


def did_change(ls: LookaheadServer, params: types.DidChangeTextDocumentParams) -> None:
    uri = params.text_document.uri
    document = ls.workspace.get_text_document(uri)
    last = params.content_changes[-1] if params.content_changes else None
    # A ranged change says where it ended; the service finds where a whole-document one did.
    offset: int | None = None
    if isinstance(last, types.TextDocumentContentChangePartial):
        offset = cursor_offset(document, last.range.start) + len(last.text)
    offset = ls.service.change_document(uri, uri_to_path(uri), document.source, offset)
    if offset is not None:
        ls.service.edited(uri, uri_to_path(uri), document.source, offset, document.language_id or "")


def did_close(ls: LookaheadServer, params: types.DidCloseTextDocumentParams) -> None:
    uri = params.text_document.uri
    ls.service.close_document(uri, uri_to_path(uri))


async def inline_completion(ls: LookaheadServer, params: types.InlineCompletionParams) -> types.InlineCompletionList:
    uri = params.text_document.uri
    document = await _document(ls, uri)
    if document is None:
        return types.InlineCompletionList(items=[])
    at = inline_cursor(document, params.position, params.context.selected_completion_info)
    invoked = params.context.trigger_kind == types.InlineCompletionTriggerKind.Invoked
    answer = await _answer(ls, uri, document, at.text, at.offset, invoked)
    return inline_list(document, params.position, at, answer.text if answer is not None else "")


async def completion(ls: LookaheadServer, params: types.CompletionParams) -> types.CompletionList:
    uri = params.text_document.uri
    document = await _document(ls, uri)
    if document is None:
        return types.CompletionList(is_incomplete=False, items=[])
    offset = cursor_offset(document, params.position)
    answer = await _answer(ls, uri, document, document.source, offset, invoked=True)
    return completion_list(document, params.position, offset, answer.text if answer is not None else "", ls.menu_client)


def cursor(ls: LookaheadServer, params: types.TextDocumentPositionParams) -> None:
    uri = params.text_document.uri
    document = ls.workspace.text_documents.get(uri)
    if document is None:  # only open documents: a rest is no reason to read a file
        return
    offset = cursor_offset(document, params.position)
    ls.service.cursor_rests(uri, uri_to_path(uri), document.source, offset, document.language_id or "")


def status(ls: LookaheadServer, params: Any) -> dict[str, Any]:
    return ls.service.status()


def rebuild_index(ls: LookaheadServer, params: Any) -> None:
    # The answer comes once the old indexes are dropped; indexing goes on in the background
    # and reports $/progress like the first time.
    ls.service.rebuild_indexes()
    ls.status_notifier.changed()


def build_server(
    cache_dir: Path | None = None, host: ModelHost[Computed] | None = None, folders: FolderHost | None = None
) -> LookaheadServer:
    server = LookaheadServer(cache_dir, host, folders)
    handlers: list[tuple[str, Callable[..., Any], Any]] = [
        (types.INITIALIZE, initialize, None),
        (types.INITIALIZED, initialized, None),
        (types.SHUTDOWN, shutdown, None),
        (types.WORKSPACE_DID_CHANGE_CONFIGURATION, did_change_configuration, None),
        (types.WORKSPACE_DID_CHANGE_WORKSPACE_FOLDERS, did_change_folders, None),
        (types.WORKSPACE_DID_CHANGE_WATCHED_FILES, did_change_watched_files, None),
        (types.TEXT_DOCUMENT_DID_OPEN, did_open, None),
        (types.TEXT_DOCUMENT_DID_CHANGE, did_change, None),
        (types.TEXT_DOCUMENT_DID_CLOSE, did_close, None),
        (types.TEXT_DOCUMENT_INLINE_COMPLETION, inline_completion, types.InlineCompletionOptions()),
        (types.TEXT_DOCUMENT_COMPLETION, completion, None),
        (CURSOR_NOTIFICATION, cursor, None),
        (STATUS_REQUEST, status, None),
        (REBUILD_INDEX_REQUEST, rebuild_index, None),
    ]
    for method, handler, options in handlers:
        server.feature(method, options)(handler)
    return server


async def _document(ls: LookaheadServer, uri: str) -> TextDocument | None:
    """The open document, else a file of a workspace folder the daemon may read (read on a
    thread); None for anything else, which the handlers answer with an empty list whether or
    not such a file exists."""
    document: TextDocument | None = ls.workspace.text_documents.get(uri)
    if document is not None:
        return document
    text = await asyncio.to_thread(ls.service.read_unopened, uri_to_path(uri))
    return None if text is None else TextDocument(uri, source=text)


async def _answer(
    ls: LookaheadServer, uri: str, document: TextDocument, text: str, offset: int, invoked: bool
) -> Answer | None:
    future = ls.service.complete(uri, uri_to_path(uri), text, offset, document.language_id or "", invoked)
    try:
        answer = await asyncio.wrap_future(future)
    except asyncio.CancelledError:
        # $/cancelRequest, or the client went away: stop the model's work for it too.
        ls.service.cancel(future)
        raise
    except Exception as error:  # a failed completion answers nothing; the daemon goes on
        _LOG.error("completion failed: %s", error)
        answer = None
    # The counters changed, and the status's last completion when the model answered.
    ls.status_notifier.changed()
    return answer


def serve(listener: Listener | None, cache_dir: Path | None = None, idle_exit_s: float | None = None) -> int:
    """Runs the server on stdio until exit or a closed stdin, or on listener (a socket) until
    SIGINT or SIGTERM (or idle_exit_s without a client), a session per client, the models
    shared; saves the indexes on the way out. The exit code LSP asks for."""
    swept = sweep_temporaries(cache_dir or default_cache_dir())
    if swept:
        _LOG.info("removed %d temporary files that interrupted writes left in the cache folder", swept)
    host: ModelHost[Computed] = ModelHost(cache_dir)
    folders = FolderHost()
    servers: set[LookaheadServer] = set()

    def shut_down() -> None:
        for server in list(servers):
            server.service.shutdown()
        host.close()
        folders.close()

    def on_sigterm(signum: int, frame: object) -> None:
        # The stdin reader thread stays blocked after a SIGTERM and nothing could join it: save,
        # then leave at once.
        shut_down()
        if listener is not None:
            listener.close()
        logging.shutdown()
        os._exit(0)

    def new_session() -> Session:
        server = build_server(cache_dir, host, folders)
        servers.add(server)

        def close() -> None:
            server.service.shutdown()
            servers.discard(server)

        return Session(server.protocol, close)

    signal.signal(signal.SIGTERM, on_sigterm)
    try:
        if listener is None:
            return serve_stdio(new_session().protocol, sys.stdin.buffer, sys.stdout.buffer)
        serve_socket(new_session, listener, idle_exit_s)
        return 0
    finally:
        shut_down()

"""JSON-RPC 2.0 on top of pygls, with an answer for every request that cannot be served.

pygls 2.1 turns params into lsprotocol types inside json.loads and, when that fails (a negative
line, a missing field), only logs: the client waits forever for its answer. Here each frame is
parsed first, its envelope checked, its params structured, and a failure that concerns a
request is answered with the error JSON-RPC 2.0 and LSP name:
- a body that is not JSON: ParseError (-32700), id null;
- neither request, notification nor response: InvalidRequest (-32600), with the message's id
  when it has a usable one, else null;
- params that fail validation: InvalidParams (-32602), one line that says which field;
- a request before initialize: ServerNotInitialized (-32002); after shutdown: InvalidRequest.
Notifications are never answered (JSON-RPC): a bad one costs one log line. Responses are never
answered either, so two peers cannot trade error messages forever.

A session is one client's connection. Over a socket the daemon outlives its clients
(keeps_serving): shutdown and exit end the client's session, not the daemon, and the next
client finds the model and the indexes loaded."""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import attrs
import cattrs
from cattrs import Converter
from cattrs.v import format_exception
from lsprotocol import types
from pygls.lsp.server import LanguageServer
from pygls.protocol import JsonRPCNotification, JsonRPCRequestMessage, JsonRPCResponseMessage, LanguageServerProtocol
from pygls.protocol.json_rpc import MsgId

from lookahead_lsp.lsp.framing import Frame

# An error message is one line of at most this many characters.
_MESSAGE_CHARS = 300
_LOG = logging.getLogger(__name__)


class InvalidMessageError(Exception):
    """A message that is no JSON-RPC request, notification or response; str(error) says why."""

    def __init__(self, request_id: MsgId | None, text: str) -> None:
        super().__init__(text)
        self.request_id = request_id


class _NoClient:
    """The writer while no client is connected: what the daemon says is dropped (the log on
    stderr has it)."""

    def write(self, data: bytes) -> None:
        pass

    def close(self) -> None:
        pass


def _nothing() -> None:
    pass


# The editor tells where its cursor rests (the daemon may evaluate the prompt there while the
# model is idle): a notification whose params are checked like any LSP message's.
CURSOR_NOTIFICATION = "lookahead/cursor"


@attrs.define
class CursorNotification:
    params: types.TextDocumentPositionParams
    method: str = CURSOR_NOTIFICATION
    jsonrpc: str = "2.0"


_OWN_MESSAGES: dict[str, type] = {CURSOR_NOTIFICATION: CursorNotification}


class LookaheadProtocol(LanguageServerProtocol):
    def __init__(self, server: LanguageServer, converter: Converter) -> None:
        super().__init__(server, converter)
        self.keeps_serving = False
        # Ends the current client's connection (its `exit` over a socket).
        self.end_connection: Callable[[], None] = _nothing
        self._initialize_received = False
        self._model_started = False
        # Requests of the current session whose answer is still to come.
        self._session_requests: set[MsgId] = set()
        # Requests of a session that ended: their answers are dropped, never sent to the next
        # client, whose request ids may well be the same.
        self._orphans: set[Future[Any]] = set()

    def receive(self, frame: Frame) -> None:
        """Handles one frame from the client: answered, dispatched, or refused as above."""
        if frame.error is not None:
            self._refuse(None, types.ErrorCodes.ParseError, frame.error)
            return
        try:
            fields = envelope(frame.message)
        except InvalidMessageError as error:
            self._refuse(error.request_id, types.ErrorCodes.InvalidRequest, str(error))
            return
        if "method" in fields and not self._admit(fields):
            return
        try:
            message = self._structure(fields)
        except Exception as error:  # cattrs' validation errors and TypeError alike
            what = f"params for {fields['method']}" if "method" in fields else f"response {fields['id']}"
            text = f"invalid {what}: {_validation_text(error)}"
            if "method" in fields and "id" in fields:
                self._refuse(fields["id"], types.ErrorCodes.InvalidParams, text)
            else:
                _LOG.warning("message dropped: %s", _one_line(text))
            return
        if fields.get("method") == types.INITIALIZE:
            self._initialize_received = True
        elif fields.get("method") == types.INITIALIZED:
            self._model_started = True
        self.handle_message(message)

    def session_initialized(self) -> bool:
        """Whether the current client sent initialize: the daemon may speak to it unasked."""
        return self._initialize_received and not self._shutdown

    def begin_session(self, writer: Any, end_connection: Callable[[], None]) -> None:
        """A new client: what the daemon says goes to `writer` from now on."""
        self.set_writer(writer)
        self.end_connection = end_connection

    def end_session(self) -> None:
        """The client is gone: its pending requests are cancelled and their answers dropped;
        the next client starts again from initialize."""
        for request_id in list(self._session_requests):
            future = self._request_futures.pop(request_id, None)
            if future is not None:
                self._orphans.add(future)
                future.cancel()
        self._session_requests.clear()
        self._shutdown = False
        self._initialize_received = False
        self.set_writer(_NoClient())
        self.end_connection = _nothing

    def _admit(self, fields: dict[str, Any]) -> bool:
        """Whether a request or notification goes on to its handler now; answers it if not."""
        method = fields["method"]
        request_id = fields.get("id")
        if self._shutdown and method != types.EXIT:
            return self._turn_away(request_id, types.ErrorCodes.InvalidRequest, f"{method}: the server is shutting down")
        if not self._initialize_received and method not in (types.INITIALIZE, types.EXIT):
            return self._turn_away(request_id, types.ErrorCodes.ServerNotInitialized, f"{method} before initialize")
        if not self.keeps_serving:
            return True
        if method == types.SHUTDOWN and request_id is not None:
            # The daemon stays, its state loaded for the next client: only this session ends.
            self._cancel_session_requests()
            self._shutdown = True
            self._send_data({"jsonrpc": "2.0", "id": request_id, "result": None})
            return False
        if method == types.EXIT:
            self.end_connection()
            return False
        # The model is loaded once per daemon; a later client's settings reload what changed.
        return not (method == types.INITIALIZED and self._model_started)

    def _turn_away(self, request_id: MsgId | None, code: types.ErrorCodes, text: str) -> bool:
        if request_id is None:  # a notification: dropped
            _LOG.info("notification dropped: %s", text)
        else:
            self._refuse(request_id, code, text)
        return False

    def _cancel_session_requests(self) -> None:
        # A copy: cancelling may answer a request at once, which takes it out of the set.
        for request_id in list(self._session_requests):
            future = self._request_futures.get(request_id)
            if future is not None:
                future.cancel()

    def _structure(self, fields: dict[str, Any]) -> Any:
        """The message as pygls's handlers take it (what structure_message does, without its
        multi-line log)."""
        kind: Any
        if "method" in fields:
            fallback = JsonRPCRequestMessage if "id" in fields else JsonRPCNotification
            method = fields["method"]
            kind = _OWN_MESSAGES.get(method) or self.get_message_type(method) or fallback
        elif "error" in fields:
            kind = types.ResponseErrorMessage
        else:
            kind = self._result_types.pop(fields["id"], None) or JsonRPCResponseMessage
        return self._converter.structure(fields, kind)

    def _refuse(self, request_id: MsgId | None, code: types.ErrorCodes, text: str) -> None:
        text = _one_line(text)
        _LOG.warning("%s: %s", code.name, text)
        error = {"code": int(code), "message": text}
        self._send_data({"jsonrpc": "2.0", "id": request_id, "error": error})

    def _handle_request(self, msg_id: MsgId, method_name: str, params: Any) -> None:
        self._session_requests.add(msg_id)
        super()._handle_request(msg_id, method_name, params)

    def _send_handler_result(self, future: Future[Any], *, msg_id: MsgId) -> None:
        if future in self._orphans:
            self._orphans.discard(future)
            return
        self._session_requests.discard(msg_id)
        super()._send_handler_result(future, msg_id=msg_id)


def envelope(message: Any) -> dict[str, Any]:
    """The JSON-RPC fields of a message, params null when absent; InvalidMessageError when it is
    neither request, notification nor response."""
    if isinstance(message, list):
        raise InvalidMessageError(None, "batches are not supported")
    if not isinstance(message, dict):
        raise InvalidMessageError(None, "a message must be a JSON object")
    has_id = "id" in message
    request_id = message.get("id") if _usable_id(message.get("id")) else None
    if message.get("jsonrpc") != "2.0":
        raise InvalidMessageError(request_id, 'jsonrpc must be "2.0"')
    if "method" in message:
        method = message["method"]
        if not isinstance(method, str):
            raise InvalidMessageError(request_id, "method must be a string")
        if has_id and request_id is None:
            raise InvalidMessageError(None, f"{method}: id must be an integer or a string")
        params = message.get("params")
        if params is not None and not isinstance(params, (dict, list)):
            raise InvalidMessageError(request_id, f"{method}: params must be an object or an array")
        fields = {"jsonrpc": "2.0", "method": method, "params": params}
        return {**fields, "id": request_id} if has_id else fields
    if request_id is not None and ("result" in message) != ("error" in message):
        outcome = "result" if "result" in message else "error"
        return {"jsonrpc": "2.0", "id": request_id, outcome: message[outcome]}
    raise InvalidMessageError(None, "neither a request, a notification nor a response")


def _usable_id(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def _validation_text(error: Exception) -> str:
    if isinstance(error, cattrs.BaseValidationError):
        return "; ".join(cattrs.transform_error(error, format_exception=_cattrs_detail))
    return str(error) or type(error).__name__


def _cattrs_detail(error: BaseException, expected: Any) -> str:
    # lsprotocol's validators say what was wrong ("Position.line should be in range ...");
    # cattrs' own wording covers the rest (a missing field, a wrong type).
    if isinstance(error, ValueError) and str(error):
        return str(error)
    return format_exception(error, expected)


def _one_line(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= _MESSAGE_CHARS else line[: _MESSAGE_CHARS - 3] + "..."

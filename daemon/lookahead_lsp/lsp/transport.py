"""Where the daemon meets its clients: stdio (the editor started it), a Unix socket, or TCP.

Over a socket the daemon outlives its clients and serves up to MAX_SESSIONS at once, each in a
session of its own (its documents, folders and settings; the model is shared where the
settings agree, see service/model_host.py), which ends with its connection:
- a Unix socket is created with mode 0600 in a folder no other user can write, and only
  processes of the same user are served (their uid checked where the system says it);
- over TCP any local process can connect, so a client presents a token first: the first
  message must be an `initialize` request whose initializationOptions.token is the content of
  the token file (created at random, readable by the user only). The token is removed from the
  options before the server sees them.
A connection is refused (closed, one log line) when MAX_SESSIONS clients are connected, when its
peer runs as another user (a Unix socket's peer credentials; on Linux the owner of a local TCP
peer's socket, looked up before a byte is read), when its first message is not a framed
initialize request (an HTTP request, garbage, a port scan) or comes later than
HANDSHAKE_TIMEOUT_S, or when its token is missing or wrong. At most MAX_WAITING connections wait
to be decided, and a new one drops the oldest: connections that say nothing cannot keep the
token holder out, who sends the token at once. A refused, dropped or broken connection never
ends the daemon: it goes on listening, its model and indexes loaded. A refused connection gets
no byte back, which tells a relay (relay.py) to serve its editor in its own process."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, BinaryIO

from pygls.io_ import StdoutWriter

from lookahead_lsp.lsp.framing import READ_CHUNK, Frame, FrameError, FrameReader
from lookahead_lsp.lsp.listeners import TOKEN_OPTION, Listener, token_matches, unix_peer_uid
from lookahead_lsp.lsp.rpc import LookaheadProtocol
from lookahead_lsp.lsp.tcp_peers import PeerOwners, tcp_connection

# An editor's first act on a connection is its initialize request; silence this long is not an
# editor, and a waiting connection holds memory.
HANDSHAKE_TIMEOUT_S = 10.0
# An initialize request is a few kilobytes (capabilities, folders, settings).
HANDSHAKE_MAX_BYTES = 1024 * 1024
# Connections still to send their initialize; a new one drops the oldest of them.
MAX_WAITING = 8
# Clients served at once (each holds its open documents and its folders' indexes).
MAX_SESSIONS = 16
_LOG = logging.getLogger(__name__)


def serve_stdio(protocol: LookaheadProtocol, stdin: BinaryIO, stdout: BinaryIO) -> int:
    """Serves the client on stdin/stdout until stdin ends or the client sends exit; the exit
    code LSP asks for (0 after shutdown, 1 without)."""
    try:
        asyncio.run(_serve_stdio(protocol, stdin.fileno(), stdout))
    except SystemExit as done:  # pygls leaves through sys.exit on `exit`
        return 0 if done.code is None else done.code if isinstance(done.code, int) else 1
    except BrokenPipeError:
        _LOG.warning("the client closed stdout; leaving")
    return 0


async def _serve_stdio(protocol: LookaheadProtocol, stdin: int, stdout: BinaryIO) -> None:
    loop = asyncio.get_running_loop()
    # A thread of its own blocks on stdin; it is never waited for (the process leaves with
    # os._exit, see serve_command).
    reader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lookahead-stdin")
    frames = FrameReader(lambda: loop.run_in_executor(reader, os.read, stdin, READ_CHUNK))
    protocol.set_writer(StdoutWriter(stdout))
    while (frame := await frames.next()) is not None:
        protocol.receive(frame)


@dataclass(frozen=True)
class Session:
    """One client's language server: its protocol, and what ends it (saves, frees its share)."""

    protocol: LookaheadProtocol
    close: Callable[[], None]


def serve_socket(new_session: Callable[[], Session], listener: Listener, idle_exit_s: float | None = None) -> None:
    """Serves clients on listener, each in a session of its own, until SIGINT (SIGTERM is the
    caller's) or, with idle_exit_s, until no connection has been open for that long (one still
    to send its initialize counts: a relay connecting then is not dropped)."""
    try:
        asyncio.run(_Gate(new_session, listener, idle_exit_s).serve())
    except KeyboardInterrupt:
        pass
    finally:
        listener.close()


class _Refused(Exception):
    """A connection that is not let in; str(error) says why."""


@dataclass(eq=False)
class _Connection:
    """A connection not yet let in."""

    writer: asyncio.StreamWriter
    peer: str  # as messages show it
    dropped: bool = False  # closed to make room for a newer one (and logged then)


class _Gate:
    """Lets in authenticated clients, at most MAX_SESSIONS at once."""

    def __init__(self, new_session: Callable[[], Session], listener: Listener, idle_exit_s: float | None) -> None:
        self._new_session = new_session
        self._listener = listener
        self._sessions = 0
        # Open connections, from their accept on: one still to send its initialize (a relay
        # started a moment before the idle exit) keeps the daemon as a client does.
        self._connections = 0
        self._idle_exit_s = idle_exit_s
        self._idle_timer: asyncio.TimerHandle | None = None
        self._done = asyncio.Event()
        self._waiting: list[_Connection] = []  # reading their first message, oldest first
        self._owners = PeerOwners.of(listener.sock) if listener.unix_folder is None else None

    async def serve(self) -> None:
        if self._listener.unix_folder is not None:
            server = await asyncio.start_unix_server(self._connected, sock=self._listener.sock)
        else:
            server = await asyncio.start_server(self._connected, sock=self._listener.sock)
        self._idle()
        async with server:
            await self._done.wait()

    def _idle(self) -> None:
        """No connection is open: the daemon leaves if none comes within idle_exit_s."""
        if self._idle_exit_s is not None:
            loop = asyncio.get_running_loop()
            self._idle_timer = loop.call_later(self._idle_exit_s, self._leave_if_idle)

    def _leave_if_idle(self) -> None:
        if self._connections == 0:
            _LOG.info("no client for %g s: leaving", self._idle_exit_s)
            self._done.set()

    def _opened(self) -> None:
        self._connections += 1
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None

    def _closed(self) -> None:
        self._connections -= 1
        if self._connections == 0:
            self._idle()

    def _full(self) -> bool:
        return self._sessions >= MAX_SESSIONS

    async def _connected(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connection = _Connection(writer, _peer_name(writer))
        self._opened()
        try:
            frames = FrameReader(lambda: reader.read(READ_CHUNK))
            first = await self._admitted(frames, connection)
            if first is not None:
                await self._session(frames, writer, first, connection.peer)
        except OSError as error:
            _LOG.info("%s: connection lost (%s)", connection.peer, error)
        finally:
            self._closed()
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    async def _admitted(self, frames: FrameReader, connection: _Connection) -> Frame | None:
        """The client's initialize request once it is let in; None, after one log line, when
        it is refused or the connection ends first. Nothing a peer sends before it is let in
        raises out of here: a failure is a refusal, never a traceback."""
        try:
            first = await self._handshake(frames, connection)
        except Exception as error:
            if not connection.dropped:
                _log_refusal(connection.peer, error)
            return None
        if connection.dropped:
            return None
        if first is None:
            _LOG.info("%s closed the connection before initialize", connection.peer)
        return first

    async def _handshake(self, frames: FrameReader, connection: _Connection) -> Frame | None:
        """The client's initialize request (_Refused if it is not let in); None when the
        connection ends first."""
        if self._full():
            raise _Refused(f"{MAX_SESSIONS} clients are connected already")
        other_user = await self._other_user(connection.writer)
        if other_user is not None:
            raise _Refused(other_user)
        frame = await self._first_frame(frames, connection)
        if frame is None:
            return None
        message = frame.message
        if not (isinstance(message, dict) and message.get("method") == "initialize" and "id" in message):
            raise _Refused("the first message is not an initialize request")
        token = self._listener.token
        if token is not None and not token_matches(message, token):
            raise _Refused("missing or wrong token")
        if self._full():  # others got in while this one was sending
            raise _Refused(f"{MAX_SESSIONS} clients are connected already")
        return Frame(_without_token(message))

    async def _first_frame(self, frames: FrameReader, connection: _Connection) -> Frame | None:
        """The connection's first frame, read as one of at most MAX_WAITING connections. A new
        connection drops the oldest, so silent ones cannot keep out a client that sends its
        initialize at once, however many the peer opens or reopens."""
        if len(self._waiting) >= MAX_WAITING:
            self._drop(self._waiting[0])
        self._waiting.append(connection)
        try:
            return await asyncio.wait_for(frames.next(HANDSHAKE_MAX_BYTES, strict=True), HANDSHAKE_TIMEOUT_S)
        except asyncio.TimeoutError:
            raise _Refused(f"no initialize request within {HANDSHAKE_TIMEOUT_S:g} s") from None
        except FrameError as error:
            raise _Refused(f"not LSP: {error}") from None
        finally:
            if connection in self._waiting:
                self._waiting.remove(connection)

    def _drop(self, connection: _Connection) -> None:
        self._waiting.remove(connection)
        connection.dropped = True
        connection.writer.transport.abort()  # its reader sees the end of the stream
        _LOG.warning(
            "refused %s: dropped for a newer connection (%d were waiting to initialize)",
            connection.peer, MAX_WAITING,
        )

    async def _other_user(self, writer: asyncio.StreamWriter) -> str | None:
        """Why the peer is not served (it runs as another user), else None; None too where the
        system does not say (a Unix socket's mode keeps others out there, the token over TCP)."""
        sock = writer.get_extra_info("socket")
        if sock is not None and sock.family == socket.AF_UNIX:
            return _unix_peer_other_user(sock)
        connection = tcp_connection(writer)
        if self._owners is None or connection is None:
            return None
        uid = await self._owners.uid(connection)
        if uid is None or uid == os.getuid():
            return None
        return f"its socket belongs to uid {uid}, not to this user"

    async def _session(
        self, frames: FrameReader, writer: asyncio.StreamWriter, first: Frame, peer: str
    ) -> None:
        self._sessions += 1
        _LOG.info("%s connected (%d clients)", peer, self._sessions)
        session = self._new_session()
        protocol = session.protocol
        protocol.keeps_serving = True
        protocol.begin_session(writer, writer.close)
        try:
            protocol.receive(first)
            while (frame := await frames.next()) is not None:
                protocol.receive(frame)
        finally:
            protocol.end_session()
            # Its documents close and its indexes are saved, off the loop other clients use.
            await asyncio.to_thread(session.close)
            self._sessions -= 1
            _LOG.info("%s disconnected (%d clients)", peer, self._sessions)


def _log_refusal(peer: str, error: Exception) -> None:
    if isinstance(error, _Refused):
        _LOG.warning("refused %s: %s", peer, error)
    elif isinstance(error, OSError):
        _LOG.info("%s: connection lost (%s)", peer, error)
    else:  # a fault of ours, met on a peer's bytes: still one line, and the next one is served
        first_line = (str(error).strip().splitlines() or [""])[0]
        _LOG.warning("refused %s: %s while reading its first message: %s", peer, type(error).__name__, first_line)


def _without_token(message: dict[str, Any]) -> dict[str, Any]:
    params = message.get("params")
    options = params.get("initializationOptions") if isinstance(params, dict) else None
    if not isinstance(params, dict) or not isinstance(options, dict) or TOKEN_OPTION not in options:
        return message
    rest = {key: value for key, value in options.items() if key != TOKEN_OPTION}
    return {**message, "params": {**params, "initializationOptions": rest or None}}


def _peer_name(writer: asyncio.StreamWriter) -> str:
    peer = writer.get_extra_info("peername")
    if isinstance(peer, tuple) and len(peer) >= 2:
        return f"{peer[0]}:{peer[1]}"
    return "a local process"


def _unix_peer_other_user(sock: Any) -> str | None:
    """Why a Unix socket's peer is not served (it runs as another user), else None; None too
    where the system does not say (the socket's mode keeps others out there)."""
    uid = unix_peer_uid(sock)
    if uid is None or uid == os.getuid():
        return None
    return f"its process runs as uid {uid}, not as this user"



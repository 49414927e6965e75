"""`lookahead-lsp serve --tcp` and `--socket` as an attacker finds them, over real sockets: a
client without the token, a client beyond MAX_SESSIONS, a port scan, an HTTP request, garbage,
a token that is not text, silent connections held open and (as root) another user's connection
are each refused, and the daemon goes on serving the next client; clients at once are each
served in a session of their own."""

from __future__ import annotations

import ipaddress
import json
import os
import re
import signal
import socket
import stat
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from support.lsp_peer import Peer, frame, initialize, no_model_env, request, serve_command, wait_for_line

from lookahead_lsp.lsp.tcp_peers import Connection, tcp_owners
from lookahead_lsp.lsp.transport import HANDSHAKE_TIMEOUT_S, MAX_SESSIONS, MAX_WAITING


@dataclass
class Daemon:
    process: subprocess.Popen[bytes]
    log: Path
    port: int
    token: str

    def connect(self) -> socket.socket:
        return socket.create_connection(("127.0.0.1", self.port), timeout=30)

    def client(self) -> tuple[socket.socket, Peer]:
        """A connected client that presented the token; initialize answered."""
        sock = self.connect()
        try:
            peer = Peer.over_socket(sock)
            peer.send(initialize(1, {"token": self.token}))
            assert "capabilities" in peer.response(1)["result"]
        except BaseException:
            sock.close()
            raise
        return sock, peer

    def refusals(self) -> int:
        return self.log.read_text(errors="replace").count(" refused ")

    def assert_serving(self) -> None:
        """A new client with the token gets in and is answered."""
        sock, peer = self.client()
        with sock:
            peer.send(request(2, "lookahead/status"))
            assert "index" in _status(peer, 2)


TCP_LISTENING = r"listening on 127\.0\.0\.1:(\d+)"


@contextmanager
def _serving(
    tmp_path: Path, *where: str, listening: str = "listening on"
) -> Iterator[tuple[subprocess.Popen[bytes], Path, re.Match[str]]]:
    """`lookahead-lsp serve` without a model, listening where `where` says, its stderr in
    tmp_path/serve.log: the process, the log and the match of `listening` in it once it
    listens. Stopped (SIGTERM) and waited for at the end."""
    log = tmp_path / "serve.log"
    with log.open("wb") as log_file, subprocess.Popen(
        serve_command(tmp_path / "cache", *where),
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log_file, env=no_model_env(tmp_path),
    ) as process:
        try:
            yield process, log, wait_for_line(log, listening, process)
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=60)


def _serve_refused(tmp_path: Path, *where: str) -> subprocess.CompletedProcess[str]:
    """A `serve` expected to give up at once: its exit status and output."""
    return subprocess.run(
        serve_command(tmp_path / "cache", *where), capture_output=True, text=True, timeout=60, env=no_model_env(tmp_path)
    )


def _private_socket(tmp_path: Path) -> Path:
    """A socket path in a folder only the user can write, as the daemon requires."""
    folder = tmp_path / "run"
    folder.mkdir(mode=0o700)
    return folder / "lookahead.sock"


def _connect_unix(path: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.settimeout(30)
        sock.connect(str(path))
    except OSError:
        sock.close()
        raise
    return sock


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    token_file = tmp_path / "private" / "token"
    where = ("--tcp", "127.0.0.1:0", "--token-file", str(token_file))
    with _serving(tmp_path, *where, listening=TCP_LISTENING) as (process, log, address):
        yield Daemon(process, log, int(address[1]), token_file.read_text().strip())
        assert process.poll() is None, "the daemon ended"


def _status(peer: Peer, request_id: int) -> dict[str, object]:
    result: dict[str, object] = peer.response(request_id)["result"]
    return result


def test_the_token_file_is_private_and_kept(daemon: Daemon, tmp_path: Path) -> None:
    token_file = tmp_path / "private" / "token"
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(token_file.parent.stat().st_mode) == 0o700
    assert re.fullmatch(r"[A-Za-z0-9_-]{43}", daemon.token)
    # A second daemon with the same file uses the same token (a client's config stays right).
    again = _serve_refused(tmp_path, "--tcp", f"127.0.0.1:{daemon.port}", "--token-file", str(token_file))
    assert again.returncode == 2 and "cannot listen" in again.stderr  # the port is taken
    assert token_file.read_text().strip() == daemon.token


@pytest.mark.parametrize(
    "first",
    [
        initialize(1),  # no token
        initialize(1, {"token": "x" * 43}),  # a wrong one
        initialize(1, {"token": ["not", "a", "string"]}),
        initialize(1, {"lookahead": {"token": "misplaced"}}),
        request(1, "lookahead/status"),  # not initialize
    ],
)
def test_a_client_without_the_token_is_refused(daemon: Daemon, first: dict[str, object]) -> None:
    with daemon.connect() as sock:
        peer = Peer.over_socket(sock)
        peer.send(first)
        peer.send(request(2, "lookahead/status"))
        assert peer.closed_without_answer()
    assert daemon.refusals() == 1
    # The right token lets the next client in; the settings never see it: an unknown setting
    # is reported to the client, the token is not.
    with daemon.connect() as sock:
        peer = Peer.over_socket(sock)
        peer.send(initialize(1, {"token": daemon.token, "noSuchSetting": 1}))
        said: list[dict[str, object]] = []
        while "noSuchSetting" not in str(said):
            message = peer.message()
            assert message is not None
            said.append(message)
        assert "'token'" not in str(said)


def test_clients_at_once_each_in_a_session_of_its_own(daemon: Daemon) -> None:
    first, peer = daemon.client()
    with first:
        second, other = daemon.client()
        with second:
            # The same request id on both connections: each answer comes to its own client.
            peer.send(request(7, "lookahead/status"))
            other.send(request(7, "lookahead/status"))
            assert "index" in _status(peer, 7) and "index" in _status(other, 7)
            other.send(request(8, "shutdown"))
            assert other.response(8)["result"] is None
        # The second one's shutdown ended its session only.
        peer.send(request(9, "lookahead/status"))
        assert "index" in _status(peer, 9)
    assert daemon.refusals() == 0
    daemon.assert_serving()


def test_beyond_max_sessions_a_client_is_refused(daemon: Daemon) -> None:
    clients = [daemon.client() for _ in range(MAX_SESSIONS)]
    try:
        with daemon.connect() as extra:
            intruder = Peer.over_socket(extra)
            intruder.send(initialize(1, {"token": daemon.token}))
            assert intruder.closed_without_answer()
        assert daemon.refusals() == 1
    finally:
        for sock, _ in clients:
            sock.close()
    # A slot is free once the daemon has read the end of a connection, not when the client closes it.
    wait_for_line(daemon.log, r"disconnected \(0 clients\)", daemon.process)
    daemon.assert_serving()


def test_a_client_that_leaves_mid_request_does_not_answer_the_next(daemon: Daemon, tmp_path: Path) -> None:
    sock, peer = daemon.client()
    uri = (tmp_path / "a.py").as_uri()
    peer.send({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {
        "textDocument": {"uri": uri, "languageId": "python", "version": 1, "text": "def f():\n    "}}})
    # No model was started: this request waits for one, and its client leaves meanwhile.
    peer.send(request(5, "textDocument/inlineCompletion", {
        "textDocument": {"uri": uri}, "position": {"line": 1, "character": 4}, "context": {"triggerKind": 1}}))
    peer.send(b"Content-Length: 100\r\n\r\n{")  # half a message, then gone
    sock.close()
    sock, peer = daemon.client()
    with sock:
        # The same request id: the answer is to this client's request.
        peer.send(request(5, "lookahead/status"))
        assert "index" in peer.response(5)["result"]


def test_scans_http_and_garbage_never_end_the_daemon(daemon: Daemon) -> None:
    for _ in range(3):  # a port scan: connect, close
        daemon.connect().close()
    probes = [
        b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
        b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
        bytes(range(256)) * 40,
        b"Content-Length: 9\r\n\r\nnot json!",
        b"Content-Length: 1000000000000\r\n\r\n",
    ]
    for probe in probes:
        with daemon.connect() as sock:
            peer = Peer.over_socket(sock)
            peer.send(probe)
            assert peer.closed_without_answer(), probe[:20]
    assert daemon.refusals() == len(probes)
    daemon.assert_serving()


def test_a_silent_connection_neither_blocks_a_client_nor_stays(daemon: Daemon) -> None:
    with daemon.connect() as silent:
        # Connected, saying nothing: the editor still gets in meanwhile.
        daemon.assert_serving()
        started = time.monotonic()
        assert Peer.over_socket(silent).closed_without_answer(timeout=60)
        assert time.monotonic() - started < 30
    assert "no initialize request within" in daemon.log.read_text()


def test_silent_connections_cannot_keep_the_token_holder_out(daemon: Daemon) -> None:
    # More connections than may wait, held open and saying nothing (another user would reopen
    # each one the moment it is dropped): the token holder still gets in, at once.
    silent = [daemon.connect() for _ in range(MAX_WAITING + 4)]
    try:
        started = time.monotonic()
        daemon.assert_serving()
        assert time.monotonic() - started < HANDSHAKE_TIMEOUT_S / 2  # not once silent ones time out
        # Each newcomer, the token holder last, dropped the oldest silent one.
        dropped = len(silent) + 1 - MAX_WAITING
        assert daemon.log.read_text().count("dropped for a newer connection") == dropped
        for sock in silent[:dropped]:
            assert Peer.over_socket(sock).closed_without_answer(timeout=5)
    finally:
        for sock in silent:
            sock.close()
    assert "Traceback" not in daemon.log.read_text()


def _framed(body: bytes) -> bytes:
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


def _initialize_with_token(raw_token: bytes) -> bytes:
    return _framed(
        b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"processId":null,"capabilities":{},'
        b'"initializationOptions":{"token":"' + raw_token + b'"}}}'
    )


@pytest.mark.parametrize(
    "first",
    [
        _initialize_with_token(b"\\ud800" + b"A" * 42),  # a lone surrogate, as JSON escapes it
        _initialize_with_token(b"\\udfff\\ud800" * 22),
        _initialize_with_token(b"\xed\xa0\x80" * 43),  # the same surrogate as raw bytes (not UTF-8)
        _initialize_with_token(b"\xff\xfe" + b"A" * 41),  # not UTF-8 at all
        _initialize_with_token(b"\xc3\xa9" * 43),  # UTF-8, not ASCII
        _initialize_with_token(b"\\u0000" * 43),
        frame(initialize(1, {"token": 1e308})),
    ],
    ids=["lone-surrogate", "reversed-pair", "raw-surrogate", "not-utf8", "non-ascii", "nul", "number"],
)
def test_any_bytes_as_a_token_are_one_refusal(daemon: Daemon, first: bytes) -> None:
    with daemon.connect() as sock:
        peer = Peer.over_socket(sock)
        peer.send(first)
        assert peer.closed_without_answer()
    daemon.assert_serving()
    log = daemon.log.read_text(errors="replace")
    assert daemon.refusals() == 1, log
    assert "Traceback" not in log and "Unhandled exception" not in log, log


def _connect_as(uid: int, port: int, data: bytes) -> int:
    """Connects to port as uid (a forked child, since only root may), sends data and reads
    until the connection ends: the child's exit status, 0 when nothing came back."""
    "127.0.0.1".encode("idna")  # the child can no longer read the codec's module
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads (3.12)
        pid = os.fork()
    if pid == 0:
        status = 2
        try:
            os.setgid(uid)
            os.setuid(uid)
            with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
                try:
                    sock.sendall(data)
                    status = 1 if sock.recv(65536) else 0
                except ConnectionError:  # reset: closed unread while this was sending
                    status = 0
        finally:
            os._exit(status)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or os.geteuid() != 0, reason="Linux, and root to connect as another user"
)
def test_another_users_connection_is_refused_before_it_is_read(daemon: Daemon) -> None:
    # Even with the token (leaked, say): nobody's socket is refused unread.
    nobody = 65534
    assert _connect_as(nobody, daemon.port, frame(initialize(1, {"token": daemon.token}))) == 0
    log = daemon.log.read_text()
    assert f"its socket belongs to uid {nobody}, not to this user" in log
    assert daemon.refusals() == 1 and "Traceback" not in log
    daemon.assert_serving()


def _kernel_endpoint(address: str, port: int) -> str:
    # As Linux prints it: 32-bit words of the address in the machine's byte order, then the port.
    packed = ipaddress.ip_address(address).packed
    words = (int.from_bytes(packed[i : i + 4], sys.byteorder) for i in range(0, len(packed), 4))
    return "".join(f"{word:08X}" for word in words) + f":{port:04X}"


def _table_line(local: tuple[str, int], remote: tuple[str, int], uid: int, inode: int = 4242) -> str:
    return (
        f"   3: {_kernel_endpoint(*local)} {_kernel_endpoint(*remote)} 01 00000000:00000000 "
        f"00:00000000 00000000 {uid:5d}        0 {inode} 1 0000000000000000 20 4 30 10 -1\n"
    )


def _connection(peer: tuple[str, int], local: tuple[str, int]) -> Connection:
    return (ipaddress.ip_address(peer[0]), peer[1]), (ipaddress.ip_address(local[0]), local[1])


def test_tcp_owners_reads_the_kernels_tables(tmp_path: Path) -> None:
    header = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
    daemon_end, peer_end, v6_daemon, v6_peer = ("127.0.0.1", 7777), ("127.0.0.1", 40000), ("::1", 7777), ("::1", 40001)
    (tmp_path / "tcp").write_text(
        header
        + _table_line(daemon_end, peer_end, 0)  # the daemon's own end: not the peer's
        + _table_line(peer_end, daemon_end, 1234)
        + _table_line(("127.0.0.1", 40002), daemon_end, 99, inode=0)  # closed: no process holds it
        + "   9: garbage\n"
    )
    (tmp_path / "tcp6").write_text(header + _table_line(v6_peer, v6_daemon, 5678))
    tables = [tmp_path / "tcp", tmp_path / "tcp6", tmp_path / "absent"]
    wanted = [
        _connection(peer_end, daemon_end),
        _connection(v6_peer, v6_daemon),
        _connection(("127.0.0.1", 40002), daemon_end),
        _connection(("127.0.0.1", 40003), daemon_end),
    ]
    assert tcp_owners(wanted, tables) == {wanted[0]: 1234, wanted[1]: 5678}


@pytest.mark.skipif(not os.path.exists("/proc/net/tcp"), reason="Linux lists TCP sockets in /proc/net")
@pytest.mark.parametrize("host,connect_to", [("127.0.0.1", "127.0.0.1"), ("::1", "::1"), ("::", "127.0.0.1")])
def test_tcp_owners_finds_a_local_peer(host: str, connect_to: str) -> None:
    # ("::", "127.0.0.1"): a dual-stack listener, whose IPv4 peer shows as ::ffff:127.0.0.1.
    try:
        server = socket.create_server(
            (host, 0), family=socket.AF_INET6 if ":" in host else socket.AF_INET, dualstack_ipv6=host == "::"
        )
    except (OSError, ValueError):
        pytest.skip(f"no {host} here")
    with server, socket.create_connection((connect_to, server.getsockname()[1])) as client:
        accepted, _ = server.accept()
        with accepted:
            seen = _connection(accepted.getpeername()[:2], accepted.getsockname()[:2])
            assert tcp_owners([seen]) == {seen: os.getuid()}
        assert tcp_owners([_connection(client.getsockname()[:2], ("127.0.0.9", 1))]) == {}


def test_exit_ends_the_session_not_the_daemon(daemon: Daemon) -> None:
    sock, peer = daemon.client()
    with sock:
        peer.send(request(2, "shutdown"))
        assert peer.response(2)["result"] is None
        peer.send(request(3, "lookahead/status"))
        assert peer.response(3)["error"]["code"] == -32600  # after shutdown
        peer.send({"jsonrpc": "2.0", "method": "exit"})
        assert peer.message() is None  # the connection closes
    daemon.assert_serving()


def test_unix_socket(tmp_path: Path) -> None:
    path = _private_socket(tmp_path)
    with _serving(tmp_path, "--socket", str(path)) as (process, _log, _listening):
        mode = path.lstat().st_mode
        assert stat.S_ISSOCK(mode) and stat.S_IMODE(mode) == 0o600
        for _ in range(2):  # a connection that closes, then one that is served
            _connect_unix(path).close()
            with _connect_unix(path) as sock:
                peer = Peer.over_socket(sock)
                peer.send(initialize(1))  # no token: the socket's mode is the guard
                assert "capabilities" in peer.response(1)["result"]
                peer.send(request(2, "lookahead/status"))
                assert "index" in _status(peer, 2)
        # A second daemon on the same socket is refused, the first one's socket kept.
        again = _serve_refused(tmp_path, "--socket", str(path))
        assert again.returncode == 2 and "another server is listening" in again.stderr
        assert process.poll() is None
    assert not path.exists()  # removed on the way out


def test_a_socket_left_by_a_dead_daemon_is_replaced(tmp_path: Path) -> None:
    path = _private_socket(tmp_path)
    with socket.socket(socket.AF_UNIX) as dead:
        dead.bind(str(path))  # closed without removing it, as a killed daemon leaves it
    with _serving(tmp_path, "--socket", str(path)), _connect_unix(path) as sock:
        peer = Peer.over_socket(sock)
        peer.send(initialize(1))
        assert "capabilities" in peer.response(1)["result"]


@pytest.mark.parametrize("mode", [0o777, 0o1777, 0o770])
def test_a_socket_in_a_folder_others_can_write_is_refused(tmp_path: Path, mode: int) -> None:
    folder = tmp_path / "shared"
    folder.mkdir()
    os.chmod(folder, mode)
    done = _serve_refused(tmp_path, "--socket", str(folder / "s.sock"))
    assert done.returncode == 2 and "can be written by other users" in done.stderr
    assert not (folder / "s.sock").exists()


def test_a_token_file_others_can_read_is_refused(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("A" * 43)
    os.chmod(token_file, 0o644)
    done = _serve_refused(tmp_path, "--tcp", "127.0.0.1:0", "--token-file", str(token_file))
    assert done.returncode == 2 and "can be read by others" in done.stderr
    assert token_file.read_text() == "A" * 43  # neither used nor replaced


# Neovim 0.11 and later, configured as the README tells (vim.lsp.rpc.connect for the transport,
# the token read from its file into init_options): the client asks for the status, then quits
# (shutdown, exit), which ends its session and not the daemon.
NEOVIM_INIT = r"""
local env = vim.env
local cmd, init_options
if env.LOOKAHEAD_PORT then
  cmd = vim.lsp.rpc.connect('127.0.0.1', tonumber(env.LOOKAHEAD_PORT))
  init_options = { token = vim.fn.readfile(env.LOOKAHEAD_TOKEN_FILE)[1] }
else
  cmd = vim.lsp.rpc.connect(env.LOOKAHEAD_SOCKET)
end
vim.lsp.config('lookahead', { cmd = cmd, filetypes = { 'python' }, root_markers = { '.git' }, init_options = init_options })
vim.lsp.enable('lookahead')
vim.api.nvim_create_autocmd('VimEnter', { once = true, nested = true, callback = function()
  vim.cmd('edit ' .. env.LOOKAHEAD_FILE)
  local buf = vim.api.nvim_get_current_buf()
  vim.wait(30000, function() return #vim.lsp.get_clients({ bufnr = buf, name = 'lookahead' }) > 0 end, 50)
  local client = vim.lsp.get_clients({ bufnr = buf, name = 'lookahead' })[1]
  local response = client and client:request_sync('lookahead/status', {}, 30000, buf)
  local out = io.open(env.LOOKAHEAD_OUT, 'w')
  out:write(vim.fn.json_encode({ status = response and response.result or vim.NIL }))
  out:close()
  vim.cmd('qa!')
end })
"""


def _current_neovims() -> list[Path]:
    from test_neovim import _neovims, _version

    return [nvim for nvim in _neovims() if _version(nvim) >= (0, 11)]


@pytest.mark.parametrize("transport", ["tcp", "socket"])
@pytest.mark.parametrize("nvim", _current_neovims() or [None], ids=lambda path: str(path))
def test_neovim_connects_over_a_socket(nvim: Path | None, transport: str, tmp_path: Path) -> None:
    if nvim is None:
        pytest.skip("no Neovim 0.11 or later (make test installs one)")
    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)
    (project / "a.py").write_text("def f():\n    return 1\n")
    (tmp_path / "init.lua").write_text(NEOVIM_INIT)
    socket_path = _private_socket(tmp_path)
    token_file = socket_path.parent / "token"
    env = {**os.environ, "LOOKAHEAD_FILE": str(project / "a.py"), "LOOKAHEAD_OUT": str(tmp_path / "out.json"),
           "XDG_STATE_HOME": str(tmp_path / "state")}
    if transport == "tcp":
        where = ["--tcp", "127.0.0.1:0", "--token-file", str(token_file)]
    else:
        where = ["--socket", str(socket_path)]
        env["LOOKAHEAD_SOCKET"] = str(socket_path)
    listening = TCP_LISTENING + "|listening on /"
    with _serving(tmp_path, *where, listening=listening) as (process, log, address):
        if transport == "tcp":
            env |= {"LOOKAHEAD_PORT": address[1], "LOOKAHEAD_TOKEN_FILE": str(token_file)}
        for _ in range(2):  # the second Neovim finds the daemon its first one left
            done = subprocess.run(
                [nvim, "--headless", "-n", "-i", "NONE", "--noplugin", "-u", str(tmp_path / "init.lua")],
                env=env, capture_output=True, text=True, timeout=120, check=False,
            )
            answer = json.loads((tmp_path / "out.json").read_text())
            assert "index" in answer["status"], (answer, done.stderr)
            (tmp_path / "out.json").unlink()
        assert process.poll() is None and " refused " not in log.read_text()

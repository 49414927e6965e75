"""`lookahead-lsp serve --tcp` and `--socket` as an attacker finds them, over real sockets: a
client without the token, a second client while one is served, a port scan, an HTTP request and
garbage are each refused, and the daemon goes on serving the next client."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import stat
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from lsp_peer import Peer, initialize, no_model_env, request, serve_command, wait_for_line


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
        peer = Peer.over_socket(sock)
        peer.send(initialize(1, {"token": self.token}))
        assert "capabilities" in peer.response(1)["result"]
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


def test_one_client_at_a_time(daemon: Daemon) -> None:
    first, peer = daemon.client()
    with first:
        with daemon.connect() as second:
            intruder = Peer.over_socket(second)
            intruder.send(initialize(1, {"token": daemon.token}))
            assert intruder.closed_without_answer()
        # The first client's answers still come to it, and only to it.
        peer.send(request(7, "lookahead/status"))
        assert "index" in _status(peer, 7)
    assert daemon.refusals() == 1
    # The first client gone, the next one is served by the same daemon.
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

"""The runtime folder where an editor's relay meets the user's shared daemon, as another local
user attacks it: an XDG_RUNTIME_DIR others can write (/tmp), a link where the daemon's folder
should be, a socket another user listens on, a package planted where the daemon used to run.
Each is refused in one line, the editor is still served and the other user gets nothing; the
folder itself is made and checked on its descriptor, never through a link."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
import socket
import stat
import subprocess
import sys
import threading
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from support.lsp_peer import Peer, initialize, no_model_env, request, serve_command, wait_for_line
from test_shared_daemon import daemon_pid, editor, runtime, runtime_env, stopped_at_the_end  # noqa: F401

from lookahead_lsp.base.errors import UserError
from lookahead_lsp.lsp.listeners import open_runtime_folder
from lookahead_lsp.lsp.relay import shared_socket_name

NOBODY = 65534
as_root = pytest.mark.skipif(
    not sys.platform.startswith("linux") or os.geteuid() != 0, reason="Linux, and root to act as another user"
)


def _env(runtime: Path, tmp_path: Path) -> dict[str, str]:
    """An editor's environment: XDG_RUNTIME_DIR a private folder of runtime, the cache folder
    (where the fallback runtime folder is) another."""
    (runtime / "xdg").mkdir(mode=0o700)
    return runtime_env(runtime / "xdg", no_model_env(tmp_path)) | {"XDG_CACHE_HOME": str(runtime / "cache-home")}


def _name(tmp_path: Path, env: dict[str, str]) -> str:
    return shared_socket_name(tmp_path / "cache", env["LOOKAHEAD_LSP_MODEL"])


def _fallback(runtime: Path) -> Path:
    return runtime / "cache-home" / "lookahead-lsp" / "run"


def _served(peer: Peer) -> None:
    """The editor's initialize and a request are answered."""
    peer.send(initialize(1))
    assert "capabilities" in peer.response(1)["result"]
    peer.send(request(2, "lookahead/status"))
    assert "index" in peer.response(2)["result"]


@contextmanager
def _listening_as_another_user(path: Path) -> Iterator[Callable[[], bytes]]:
    """A socket at path that another user (nobody) listens on, as an attacker's would: what
    its connections sent, once asked. Bound here as root (the folder may be root's alone), then
    listened on by a child that became nobody: the kernel gives a peer the listener's uid."""
    read_end, write_end = os.pipe()
    bound = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    bound.bind(str(path))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads (3.12)
        pid = os.fork()
    if pid == 0:
        try:
            os.close(read_end)
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            bound.listen()
            while True:
                connection, _ = bound.accept()
                with connection, contextlib.suppress(OSError):
                    while data := connection.recv(65536):
                        os.write(write_end, data)
        finally:
            os._exit(0)
    os.close(write_end)
    bound.close()
    received = b""

    def read() -> bytes:
        nonlocal received
        os.set_blocking(read_end, False)
        with contextlib.suppress(BlockingIOError):
            while chunk := os.read(read_end, 65536):
                received += chunk
        return received

    try:
        yield read
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        read()
        os.close(read_end)


def test_a_runtime_folder_others_can_write_is_not_used(tmp_path: Path, runtime: Path) -> None:
    # XDG_RUNTIME_DIR=/tmp, as systems without a runtime folder of the user's have it.
    env = _env(runtime, tmp_path)
    xdg = Path(env["XDG_RUNTIME_DIR"])
    xdg.chmod(0o1777)
    path = _fallback(runtime) / _name(tmp_path, env)
    log = tmp_path / "serve.log"
    with stopped_at_the_end(path), editor(tmp_path / "cache", env, log) as (process, peer):
        _served(peer)
        assert daemon_pid(path) != process.pid  # a shared daemon, in the cache folder's runtime folder
    assert list(xdg.iterdir()) == []
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    said = log.read_text()
    assert f"XDG_RUNTIME_DIR {xdg} can be written by other users (mode 1777)" in said
    assert f"the shared daemon's folder is {path.parent} instead" in said


@as_root
def test_a_link_for_the_runtime_folder_is_not_followed(tmp_path: Path, runtime: Path) -> None:
    # A link to a folder that passed the old check (root's, private) where another user listens:
    # the editor's stream, documents included, went to that user. A link that flips between
    # such a folder and the attacker's is a link at every moment: refused the same way.
    env = _env(runtime, tmp_path)
    elsewhere = runtime / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    (Path(env["XDG_RUNTIME_DIR"]) / "lookahead-lsp").symlink_to(elsewhere)
    name = _name(tmp_path, env)
    log = tmp_path / "serve.log"
    with _listening_as_another_user(elsewhere / name) as received, stopped_at_the_end(_fallback(runtime) / name):
        with editor(tmp_path / "cache", env, log) as (_, peer):
            _served(peer)
        assert received() == b""
    # Neither the relay's lock nor the daemon's log was made through the link.
    assert [entry.name for entry in elsewhere.iterdir()] == [name]
    assert "lookahead-lsp is a symbolic link, which is not followed" in log.read_text()


@as_root
def test_a_socket_another_user_listens_on_gets_nothing(tmp_path: Path, runtime: Path) -> None:
    env = _env(runtime, tmp_path)
    folder = Path(env["XDG_RUNTIME_DIR"]) / "lookahead-lsp"
    folder.mkdir(mode=0o700)
    path = folder / _name(tmp_path, env)
    log = tmp_path / "serve.log"
    with _listening_as_another_user(path) as received, editor(tmp_path / "cache", env, log) as (_, peer):
        _served(peer)
        assert received() == b""
    assert f"{path} is served by uid {NOBODY}, not by this user: serving in this process" in log.read_text()


def test_a_package_planted_in_the_runtime_folder_is_not_imported(tmp_path: Path, runtime: Path) -> None:
    # The daemon ran in the runtime folder, and `python -m` imports from its working folder first.
    env = _env(runtime, tmp_path)
    folder = Path(env["XDG_RUNTIME_DIR"]) / "lookahead-lsp"
    planted = folder / "lookahead_lsp"
    planted.mkdir(parents=True)
    folder.chmod(0o700)
    ran = tmp_path / "planted-code-ran"
    (planted / "__init__.py").write_text(f"open({str(ran)!r}, 'w').close()\nraise SystemExit(3)\n")
    path = folder / _name(tmp_path, env)
    with stopped_at_the_end(path), editor(tmp_path / "cache", env, tmp_path / "serve.log") as (process, peer):
        _served(peer)
        assert daemon_pid(path) != process.pid
    assert not ran.exists()


def test_the_tcp_token_is_not_made_in_a_runtime_folder_others_can_write(tmp_path: Path, runtime: Path) -> None:
    env = _env(runtime, tmp_path)
    xdg = Path(env["XDG_RUNTIME_DIR"])
    xdg.chmod(0o1777)
    log = tmp_path / "serve.log"
    with log.open("wb") as log_file, subprocess.Popen(
        serve_command(tmp_path / "cache", "--tcp", "127.0.0.1:0"),
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log_file, env=env,
    ) as process:
        try:
            wait_for_line(log, "listening on", process)
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=60)
    token = _fallback(runtime) / "tcp-token"
    assert stat.S_IMODE(token.stat().st_mode) == 0o600 and str(token) in log.read_text()
    assert list(xdg.iterdir()) == []


def _spoil_world_writable(folder: Path) -> None:
    folder.mkdir(mode=0o700)
    folder.chmod(0o777)


def _spoil_open_to_others(folder: Path) -> None:
    folder.mkdir(mode=0o700)
    folder.chmod(0o755)


def _spoil_link(folder: Path) -> None:
    (folder.parent / "target").mkdir(mode=0o700)
    folder.symlink_to(folder.parent / "target")


def _spoil_another_users(folder: Path) -> None:
    folder.mkdir(mode=0o700)
    os.chown(folder, NOBODY, NOBODY)


def _spoil_file(folder: Path) -> None:
    folder.write_text("")


SPOILERS = [_spoil_world_writable, _spoil_link, _spoil_file] + ([_spoil_another_users] if os.geteuid() == 0 else [])
# XDG_RUNTIME_DIR may be open to others (nobody else can write it); the daemon's own folder not.
CASES = [("runtime", spoil) for spoil in SPOILERS] + [("its-folder", spoil) for spoil in [*SPOILERS, _spoil_open_to_others]]


@pytest.mark.parametrize(
    "where,spoil", CASES, ids=[f"{where}-{spoil.__name__.removeprefix('_spoil_')}" for where, spoil in CASES]
)
def test_a_runtime_folder_not_of_this_user_alone_is_not_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
    where: str, spoil: Callable[[Path], None],
) -> None:
    runtime = tmp_path / "xdg"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache-home"))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    if where == "runtime":
        spoil(runtime)
    else:
        runtime.mkdir(mode=0o700)
        spoil(runtime / "lookahead-lsp")
    with caplog.at_level(logging.INFO), open_runtime_folder() as folder:
        assert folder.path == _fallback(tmp_path)
        assert os.path.samestat(os.fstat(folder.fd), os.stat(folder.path))
    assert stat.S_IMODE(folder.path.stat().st_mode) == 0o700
    said = [record.getMessage() for record in caplog.records]
    assert len(said) == 1 and said[0].endswith(f"the shared daemon's folder is {folder.path} instead"), said


def test_a_private_runtime_folder_is_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runtime = tmp_path / "xdg"
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    with open_runtime_folder() as folder:
        assert folder.path == runtime / "lookahead-lsp"
        assert stat.S_IMODE(folder.path.stat().st_mode) == 0o700
        with socket.socket(socket.AF_UNIX) as sock:  # a socket's address in the folder held
            sock.bind(folder.address("s.sock"))
        assert (folder.path / "s.sock").exists()


@pytest.mark.parametrize("spoil", [_spoil_link, _spoil_world_writable], ids=["link", "world-writable"])
def test_without_any_private_runtime_folder_the_reason_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spoil: Callable[[Path], None]
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache-home"))
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    (tmp_path / "cache-home" / "lookahead-lsp").mkdir(parents=True)
    spoil(_fallback(tmp_path))
    with pytest.raises(UserError, match=f"^{re.escape(str(_fallback(tmp_path)))} (is a symbolic link|is not a private folder)"):
        open_runtime_folder()


def test_a_link_that_flips_never_redirects_the_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A link that flips between a private folder and the attacker's while the relay opens and
    uses it passed a check made once, then a connect by path: now it is refused at every open,
    and the lock, log and socket are made in the private folder the relay holds instead."""
    runtime = tmp_path / "xdg"
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache-home"))
    real, attackers = runtime / "real", tmp_path / "attackers"
    real.mkdir(mode=0o700)
    attackers.mkdir(mode=0o700)
    name = runtime / "lookahead-lsp"
    stop = threading.Event()

    name.symlink_to(real)

    def flip() -> None:  # atomically, as an attacker would: the name is a link at every moment
        while not stop.is_set():
            for target in (attackers, real):
                (runtime / "next").symlink_to(target)
                os.replace(runtime / "next", name)

    flipper = threading.Thread(target=flip)
    flipper.start()
    try:
        for attempt in range(200):
            with open_runtime_folder() as folder:
                os.close(os.open(f"made-{attempt}", os.O_CREAT | os.O_WRONLY, 0o600, dir_fd=folder.fd))
                with socket.socket(socket.AF_UNIX) as sock:
                    sock.bind(folder.address(f"s-{attempt}.sock"))
    finally:
        stop.set()
        flipper.join()
    assert list(attackers.iterdir()) == [] and list(real.iterdir()) == []
    made = {entry.name for entry in _fallback(tmp_path).iterdir()}
    assert {f"made-{attempt}" for attempt in range(200)} <= made

"""`lookahead-lsp serve` over stdio as a relay to the user's shared daemon: the editor still
starts one command and talks LSP on its stdin and stdout, but the model runs once per user.

The shared daemon listens on a Unix socket in the user's private runtime folder (listeners.py
checks the folder, transport.py every peer's uid). Its name holds the package's version, the Python that
runs it, the cache folder and the model named by the environment, so a relay never talks to a
daemon of another version, cache or default model. When no daemon answers, the relay starts one (`serve --socket PATH --idle-exit`, in a
session of its own, its log in PATH.log) and connects once it listens; the daemon leaves when
no client has been connected for IDLE_EXIT_S. The bytes go through unchanged both ways: each
connection is a session of its own in the daemon, whose documents close when it ends. Where no
shared daemon can be had (no private folder, a daemon that does not come up), the relay says
why in one line on stderr and the caller serves in this process, as before."""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import BinaryIO

from lookahead_lsp import __version__
from lookahead_lsp.base.cache_files import default_cache_dir
from lookahead_lsp.base.errors import UserError
from lookahead_lsp.lsp.listeners import check_private_folder, make_private_folder, runtime_folder

# The shared daemon stays this long after its last client left (an editor restarting, a second
# window opening a little later find the model loaded).
IDLE_EXIT_S = 300.0
# How long a relay waits for the daemon it started to listen (an import and a bind: seconds).
_START_WAIT_S = 60.0
_CHUNK = 65536
_LOG = logging.getLogger(__name__)


def shared_socket(cache_dir: Path | None, default_model: str) -> Path:
    """Where the user's shared daemon for this version, Python, cache folder and default model
    (as the environment names it) listens."""
    cache = (cache_dir or default_cache_dir()).resolve()
    identity = f"{__version__}\0{sys.executable}\0{cache}\0{default_model}"
    key = hashlib.blake2b(identity.encode("utf-8", "surrogateescape"), digest_size=8).hexdigest()
    return runtime_folder() / f"shared-{key}.sock"


def relay(
    stdin: BinaryIO, stdout: BinaryIO, cache_dir: Path | None, default_model: str, log_level: str | None
) -> int | None:
    """Relays stdin and stdout to the shared daemon until either side ends; 0 then. None when
    no shared daemon can be had (the reason logged): the caller serves in this process."""
    path = shared_socket(cache_dir, default_model)
    try:
        make_private_folder(path.parent)
        check_private_folder(path.parent)
    except UserError as error:
        _LOG.warning("no shared daemon (%s): serving in this process", error)
        return None
    sock = _connected_or_started(path, cache_dir, log_level)
    if sock is None:
        _LOG.warning("the shared daemon did not start (see %s.log): serving in this process", path)
        return None
    with sock:
        _pump(stdin, stdout, sock)
    return 0


def _connected_or_started(path: Path, cache_dir: Path | None, log_level: str | None) -> socket.socket | None:
    """A connection to the daemon, started first if none answers. Relays starting at once take
    turns (a lock file beside the socket): the second finds the first one's daemon instead of
    starting another, whose start would replace the first one's socket before it listens."""
    lock = os.open(f"{path}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        sock = _connect(path)
        if sock is None:
            sock = _wait_for(path, _start_daemon(path, cache_dir, log_level))
        return sock
    finally:
        os.close(lock)  # and the lock with it


def _connect(path: Path) -> socket.socket | None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(str(path))
    except OSError:
        sock.close()
        return None
    return sock


def interpreter_flags() -> list[str]:
    """This interpreter's isolation, for the daemon it starts: an editor that runs the relay
    with -I (no PYTHON* variables, no user site, no script folder on sys.path) gets a daemon
    that runs so too."""
    if sys.flags.isolated:
        return ["-I"]
    flags = ["-E"] if sys.flags.ignore_environment else []
    flags += ["-s"] if sys.flags.no_user_site else []
    return flags + (["-P"] if getattr(sys.flags, "safe_path", False) else [])


def _start_daemon(path: Path, cache_dir: Path | None, log_level: str | None) -> subprocess.Popen[bytes]:
    command = [sys.executable, *interpreter_flags(), "-m", "lookahead_lsp", "serve", "--socket", str(path)]
    command += ["--idle-exit", str(IDLE_EXIT_S)]
    if cache_dir is not None:
        command += ["--cache-dir", str(cache_dir)]
    if log_level is not None:
        command += ["--log-level", log_level]
    # Appended, never through a link, readable by the user alone.
    log = os.open(f"{path}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        return subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log,
            start_new_session=True,  # not the editor's: it outlives this relay
            cwd=path.parent,
        )
    finally:
        os.close(log)


def _wait_for(path: Path, daemon: subprocess.Popen[bytes]) -> socket.socket | None:
    """A connection to the daemon once it listens; None if it ended first or never listened.
    Another relay's daemon may win the race for the socket: this one then ends, and the
    connection is to the winner."""
    deadline = time.monotonic() + _START_WAIT_S
    while time.monotonic() < deadline:
        sock = _connect(path)
        if sock is not None:
            return sock
        if daemon.poll() is not None and not path.exists():
            return None
        time.sleep(0.05)
    return None


def _pump(stdin: BinaryIO, stdout: BinaryIO, sock: socket.socket) -> None:
    """Copies stdin to the socket and the socket to stdout until either ends."""
    done = threading.Event()

    def upstream() -> None:
        try:
            while chunk := os.read(stdin.fileno(), _CHUNK):
                sock.sendall(chunk)
        except OSError:
            pass
        finally:
            # The editor is gone: the daemon ends the session when it reads the end.
            try:
                sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass
            done.set()

    def downstream() -> None:
        try:
            while chunk := sock.recv(_CHUNK):
                stdout.write(chunk)
                stdout.flush()
        except (OSError, ValueError):
            pass
        finally:
            done.set()

    for target in (upstream, downstream):
        threading.Thread(target=target, daemon=True, name=f"lookahead-relay-{target.__name__}").start()
    done.wait()

"""`lookahead-lsp serve` over stdio as a relay to the user's shared daemon: the editor still
starts one command and talks LSP on its stdin and stdout, but the model runs once per user.

The shared daemon listens on a Unix socket in the user's private runtime folder, opened and
checked once by listeners.open_runtime_folder (this user's, nobody else may enter, never
through a link) and used through that descriptor only: the lock, the daemon's log and the
socket's address. Whoever listens there must run as this user (its uid, as the kernel gives
it, checked before a byte is sent), and transport.py checks every peer's uid the other way.
The socket's name holds the package's version, the Python that runs it, the cache folder and
the model named by the environment, so a relay never talks to a daemon of another version,
cache or default model. When no daemon answers, the relay starts one (`serve --socket PATH
--idle-exit`, in a session of its own, in "/" with the working folder off sys.path, its log in
PATH.log) and connects once it listens; the daemon leaves when no connection has been open for
IDLE_EXIT_S. The bytes go through unchanged both ways: each connection is a session of its own
in the daemon, whose documents close when it ends. Where no shared daemon can be had (no
private folder, a daemon that does not come up or is not this user's), or where the daemon
closes the connection before answering (full, or leaving at its idle time), the relay says why
in one line on stderr and the caller serves in this process, as before, what the editor sent
meanwhile included."""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import queue
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
from lookahead_lsp.lsp.listeners import PrivateFolder, open_runtime_folder, unix_peer_uid

# The shared daemon stays this long after its last client left (an editor restarting, a second
# window opening a little later find the model loaded).
IDLE_EXIT_S = 300.0
# How long a relay waits for the daemon it started to listen (an import and a bind: seconds).
_START_WAIT_S = 60.0
_CHUNK = 65536
# What the editor sent before the daemon's first byte, kept to be replayed in this process if
# the daemon closes unanswered; past this the relay reads no more until the daemon answers or
# closes. An editor sends its initialize request (kilobytes) and waits for the answer.
_KEEP_MAX_BYTES = 4 * 1024 * 1024
_LOG = logging.getLogger(__name__)


def shared_socket_name(cache_dir: Path | None, default_model: str) -> str:
    """The name, in the runtime folder, of the socket of the user's shared daemon for this
    version, Python, cache folder and default model (as the environment names it)."""
    cache = (cache_dir or default_cache_dir()).resolve()
    identity = f"{__version__}\0{sys.executable}\0{cache}\0{default_model}"
    key = hashlib.blake2b(identity.encode("utf-8", "surrogateescape"), digest_size=8).hexdigest()
    return f"shared-{key}.sock"


def relay(
    stdin: BinaryIO, stdout: BinaryIO, cache_dir: Path | None, default_model: str, log_level: str | None
) -> int | None:
    """Relays stdin and stdout to the shared daemon until either side ends; 0 then. None when
    no shared daemon can be had or it closed the connection before answering (the reason
    logged): the caller serves in this process, its stdin then replaying first what the editor
    sent to the daemon."""
    name = shared_socket_name(cache_dir, default_model)
    try:
        sock, log = _shared_daemon(name, cache_dir, log_level)
    except UserError as error:
        _LOG.warning("%s: serving in this process", error)
        return None
    with sock:
        if _Pump(stdin, stdout, sock).run():
            return 0
    _LOG.warning(
        "the shared daemon closed the connection before answering (it is full or was leaving, see %s): "
        "serving in this process", log,
    )
    return None


def _shared_daemon(name: str, cache_dir: Path | None, log_level: str | None) -> tuple[socket.socket, Path]:
    """A connection to this user's shared daemon (started first if none answers) and its log;
    UserError saying why there is none."""
    try:
        folder = open_runtime_folder()
    except UserError as error:
        raise UserError(f"no shared daemon ({error})") from None
    with folder:
        log = folder.path / f"{name}.log"
        try:
            sock = _connected_or_started(folder, name, cache_dir, log_level)
        except OSError as error:
            raise UserError(f"no shared daemon ({folder.path}: {error.strerror or error})") from None
    if sock is None:
        raise UserError(f"the shared daemon did not start (see {log})")
    return sock, log


def _connected_or_started(
    folder: PrivateFolder, name: str, cache_dir: Path | None, log_level: str | None
) -> socket.socket | None:
    """A connection to the daemon, started first if none answers. Relays starting at once take
    turns (a lock file beside the socket): the second finds the first one's daemon instead of
    starting another, whose start would replace the first one's socket before it listens."""
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    lock = os.open(f"{name}.lock", flags, 0o600, dir_fd=folder.fd)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        sock = _connect(folder, name)
        if sock is None:
            sock = _wait_for(folder, name, _start_daemon(folder, name, cache_dir, log_level))
        return sock
    finally:
        os.close(lock)  # and the lock with it


def _connect(folder: PrivateFolder, name: str) -> socket.socket | None:
    """A connection to the socket name of folder, None where nothing listens; UserError when
    what listens is not this user's (the editor's stream, documents included, would be its)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(folder.address(name))
    except OSError:
        sock.close()
        return None
    try:
        uid = unix_peer_uid(sock)
    except OSError as error:
        sock.close()
        raise UserError(f"who listens on {folder.path / name} is unknown: {error.strerror or error}") from None
    if uid != os.getuid():
        sock.close()
        who = "an unknown user (this system does not say)" if uid is None else f"uid {uid}"
        raise UserError(f"{folder.path / name} is served by {who}, not by this user")
    return sock


def interpreter_flags() -> list[str]:
    """This interpreter's isolation, for the daemon it starts: an editor that runs the relay
    with -I (no PYTHON* variables, no user site, no script folder on sys.path) gets a daemon
    that runs so too. The working folder stays off the daemon's sys.path in any case (-P),
    where Python has the flag (3.11)."""
    if sys.flags.isolated:
        return ["-I"]
    flags = ["-E"] if sys.flags.ignore_environment else []
    flags += ["-s"] if sys.flags.no_user_site else []
    return flags + (["-P"] if sys.version_info >= (3, 11) else [])


def _daemon_environment() -> dict[str, str] | None:
    """The daemon's environment: this one, with PYTHONPATH's relative entries made absolute
    (they name folders of the relay's working folder, and the daemon runs in another) and its
    empty ones (the working folder, whatever -P says) left out. None to inherit it as it is."""
    entries = os.environ.get("PYTHONPATH")
    if entries is None or sys.flags.ignore_environment:
        return None
    absolute = [os.path.abspath(entry) for entry in entries.split(os.pathsep) if entry]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(absolute)}


def _start_daemon(
    folder: PrivateFolder, name: str, cache_dir: Path | None, log_level: str | None
) -> subprocess.Popen[bytes]:
    command = [sys.executable, *interpreter_flags(), "-m", "lookahead_lsp", "serve", "--socket", str(folder.path / name)]
    command += ["--idle-exit", str(IDLE_EXIT_S)]
    if cache_dir is not None:
        command += ["--cache-dir", str(cache_dir.absolute())]
    if log_level is not None:
        command += ["--log-level", log_level]
    # Appended, never through a link, readable by the user alone.
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
    log = os.open(f"{name}.log", flags, 0o600, dir_fd=folder.fd)
    try:
        return subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log,
            start_new_session=True,  # not the editor's: it outlives this relay
            # Where only root can write: `python -m` on Python 3.10 imports from its working
            # folder first, and a package planted in the runtime folder used to run there.
            cwd="/",
            env=_daemon_environment(),
        )
    finally:
        os.close(log)


def _wait_for(folder: PrivateFolder, name: str, daemon: subprocess.Popen[bytes]) -> socket.socket | None:
    """A connection to the daemon once it listens; None if it ended first or never listened.
    Another relay's daemon may win the race for the socket: this one then ends, and the
    connection is to the winner."""
    deadline = time.monotonic() + _START_WAIT_S
    while time.monotonic() < deadline:
        sock = _connect(folder, name)
        if sock is not None:
            return sock
        if daemon.poll() is not None and not _exists(folder, name):
            return None
        time.sleep(0.05)
    return None


def _exists(folder: PrivateFolder, name: str) -> bool:
    try:
        os.stat(name, dir_fd=folder.fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


class _Pump:
    """Copies the editor's stdin to the daemon and the daemon's bytes to stdout until either
    ends. Until the daemon's first byte what the editor sent is kept as well: a daemon that
    closes before answering lost it, and stdin is then replaced by a pipe that gives it again,
    followed by the rest of what the editor sends, to a server of this process."""

    def __init__(self, stdin: BinaryIO, stdout: BinaryIO, sock: socket.socket) -> None:
        self._stdin = stdin
        # The editor's end, read by a thread that may be blocked on it when stdin is replaced.
        self._editor = os.dup(stdin.fileno())
        self._stdout = stdout
        self._sock = sock
        self._changed = threading.Condition()
        self._kept: list[bytes] | None = []  # None once the daemon answered
        self._kept_bytes = 0
        self._editor_ended = False
        self._replay: queue.Queue[bytes | None] | None = None  # set once serving in this process
        self._done = threading.Event()

    def run(self) -> bool:
        """Whether the relay is over (either side ended); False when the daemon closed the
        connection before answering and stdin now replays what the editor sent."""
        for target in (self._upstream, self._downstream):
            threading.Thread(target=target, daemon=True, name=f"lookahead-relay-{target.__name__[1:]}").start()
        self._done.wait()
        with self._changed:
            if self._kept is None or self._editor_ended:
                return True
            self._replay = queue.Queue(maxsize=16)  # the editor waits while this process reads
            self._replay.put(b"".join(self._kept))
            self._kept = None
            self._changed.notify_all()
        read_end, write_end = os.pipe()
        threading.Thread(target=self._feed, args=(self._replay, write_end), daemon=True, name="lookahead-relay-replay").start()
        os.dup2(read_end, self._stdin.fileno())
        os.close(read_end)
        return False

    def _upstream(self) -> None:
        try:
            while (chunk := self._read_editor()) and self._forward(chunk):
                pass
        except OSError:
            pass
        finally:
            self._editor_end()

    def _read_editor(self) -> bytes:
        with self._changed:
            while self._replay is None and self._kept is not None and self._kept_bytes >= _KEEP_MAX_BYTES:
                self._changed.wait()
        return os.read(self._editor, _CHUNK)

    def _forward(self, chunk: bytes) -> bool:
        """Sends chunk on (to the daemon, or to this process's server); whether to go on."""
        with self._changed:
            replay, unanswered = self._replay, self._kept is not None
            if self._kept is not None:
                self._kept.append(chunk)
                self._kept_bytes += len(chunk)
        if replay is not None:
            replay.put(chunk)
            return True
        try:
            self._sock.sendall(chunk)
        except OSError:
            return unanswered  # kept, for the server of this process if the daemon never answers
        return True

    def _editor_end(self) -> None:
        with self._changed:
            self._editor_ended = True
            replay = self._replay
        if replay is not None:
            replay.put(None)  # this process's server reads the end of its stdin
            return
        # The editor is gone: the daemon ends the session when it reads the end.
        try:
            self._sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        self._done.set()

    def _downstream(self) -> None:
        try:
            while chunk := self._sock.recv(_CHUNK):
                if self._kept is not None:
                    with self._changed:
                        self._kept = None
                        self._changed.notify_all()
                self._stdout.write(chunk)
                self._stdout.flush()
        except (OSError, ValueError):
            pass
        finally:
            self._done.set()

    @staticmethod
    def _feed(replay: queue.Queue[bytes | None], pipe: int) -> None:
        """Writes what the editor sent into the pipe that is now stdin, until the editor ends."""
        try:
            with os.fdopen(pipe, "wb") as stdin:
                while (chunk := replay.get()) is not None:
                    stdin.write(chunk)
                    stdin.flush()
        except OSError:  # this process's server stopped reading: it is leaving
            pass

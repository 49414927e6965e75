"""Where the daemon listens, and what its socket clients present: a Unix socket with mode 0600
in a folder no other user can write, or a TCP port whose clients present the token of a file of
mode 0600, created at random, never through a link, and refused when another user could read it.
transport.py serves what connects.

Every folder here is checked once, on an open descriptor (PrivateFolder), and everything made or
opened in it afterwards (the socket, the token, the relay's lock and log) goes through that
descriptor: a path checked and then used again could name another folder by then (a link that
flips, a parent folder renamed by whoever can write it)."""

from __future__ import annotations

import contextlib
import errno
import hmac
import logging
import os
import re
import secrets
import socket
import stat
import struct
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from lookahead_lsp.base.cache_files import default_cache_dir
from lookahead_lsp.base.errors import UserError
from lookahead_lsp.base.private_folders import FOLDER_FLAGS, open_private_subfolder, unopenable

# The key of initializationOptions that carries the token.
TOKEN_OPTION = "token"
_TOKEN = re.compile(r"[A-Za-z0-9_-]{32,256}")
_TOKEN_FILE_NAME = "tcp-token"
_SOCKET_NAME = "lookahead-lsp.sock"
_RUNTIME_NAME = "lookahead-lsp"
# Where Linux names each open descriptor as a path (bind and connect take no descriptor).
_PROC_FD = Path("/proc/self/fd")
_LOG = logging.getLogger(__name__)


class PrivateFolder:
    """An open folder that only this user (or root) can change, checked on its descriptor. What
    is made or opened in it goes through fd (os.open(name, dir_fd=fd), address(name)), never
    through path again, which only names it in messages."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self.fd = fd
        self._open = True

    def address(self, name: str) -> str:
        """A path to name in this very folder, for a socket's bind or connect: through the held
        descriptor where the system names it (also short, whatever the folder's path), else the
        folder's path (where the peer's uid, checked after connecting, is what protects)."""
        if _PROC_FD.is_dir():
            return f"{_PROC_FD}/{self.fd}/{name}"
        return str(self.path / name)

    def close(self) -> None:
        if self._open:
            self._open = False
            os.close(self.fd)

    def __enter__(self) -> PrivateFolder:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None) -> None:
        self.close()


@dataclass(frozen=True)
class Listener:
    """A bound, listening socket and what its clients must present."""

    sock: socket.socket
    address: str  # as messages show it
    token: str | None = None  # what a TCP client presents
    token_path: Path | None = None
    unix_folder: PrivateFolder | None = None  # a Unix socket's, held while it listens
    unix_name: str = ""
    unix_inode: int = 0

    def describe(self) -> str:
        """One line for stderr: where to connect and how."""
        if self.token_path is None:
            return f"listening on {self.address}"
        return (
            f"listening on {self.address}; the first message must be "
            f"initialize with initializationOptions.{TOKEN_OPTION} = the content of {self.token_path}"
        )

    def close(self) -> None:
        """Stops listening; removes the Unix socket if it is still the one this daemon made."""
        self.sock.close()
        folder = self.unix_folder
        if folder is None:
            return
        with contextlib.suppress(OSError):
            if os.stat(self.unix_name, dir_fd=folder.fd, follow_symlinks=False).st_ino == self.unix_inode:
                os.unlink(self.unix_name, dir_fd=folder.fd)
        folder.close()


def open_runtime_folder() -> PrivateFolder:
    """$XDG_RUNTIME_DIR/lookahead-lsp (a per-user folder, emptied at logout) where the system has
    one that only this user can write, else the folder `run` of the cache folder. Either is
    created with mode 0700, never through a link, and used only as this user's folder that
    nobody else may enter. Where XDG_RUNTIME_DIR cannot be used (another user's, writable by
    others as /tmp is, a link) one info line says why."""
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    if os.path.isabs(runtime):
        try:
            return _runtime_subfolder(Path(runtime))
        except UserError as why:
            _LOG.info("%s: the shared daemon's folder is %s instead", why, _fallback_runtime_path())
    return _cache_runtime_folder()


def _fallback_runtime_path() -> Path:
    # Not the cache folder itself: a umask of 002 leaves that one writable by the user's group.
    return default_cache_dir() / "run"


def _runtime_subfolder(runtime: Path) -> PrivateFolder:
    """runtime/lookahead-lsp, when runtime itself is this user's and nobody else can write it
    (else another user could have made, or could rename, what is in it)."""
    try:
        runtime_fd = os.open(runtime, FOLDER_FLAGS | os.O_NOFOLLOW)
    except OSError as error:
        raise UserError(f"XDG_RUNTIME_DIR {runtime} {unopenable(error, str(runtime))}") from None
    try:
        status = os.fstat(runtime_fd)
        if status.st_uid != os.getuid():
            raise UserError(f"XDG_RUNTIME_DIR {runtime} belongs to uid {status.st_uid}, not to this user")
        if status.st_mode & 0o022:
            raise UserError(
                f"XDG_RUNTIME_DIR {runtime} can be written by other users (mode {stat.S_IMODE(status.st_mode):o})"
            )
        return _private_subfolder(runtime_fd, runtime / _RUNTIME_NAME)
    finally:
        os.close(runtime_fd)


def _cache_runtime_folder() -> PrivateFolder:
    path = _fallback_runtime_path()
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        cache_fd = os.open(path.parent, FOLDER_FLAGS)
    except OSError as error:
        raise UserError(f"cannot create {path.parent}: {error.strerror or error}") from None
    try:
        return _private_subfolder(cache_fd, path)
    finally:
        os.close(cache_fd)


def _private_subfolder(parent_fd: int, path: Path) -> PrivateFolder:
    return PrivateFolder(path, open_private_subfolder(parent_fd, path))


def open_private_folder(folder: Path, create: bool) -> PrivateFolder:
    """folder (created with mode 0700, parents too, where missing and create), open, when it is
    a directory of this user (or root) that no other user can write: anyone who can write it
    could replace what the daemon puts there. UserError otherwise."""
    try:
        if create:
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(folder, FOLDER_FLAGS)
    except OSError as error:
        if error.errno == errno.ENOTDIR:
            raise UserError(f"{folder} is not a directory") from None
        raise UserError(f"{folder}: {error.strerror or error}") from None
    status = os.fstat(fd)
    why = None
    if status.st_uid not in (os.getuid(), 0):
        why = f"{folder} belongs to another user: choose a folder of your own"
    elif status.st_mode & 0o022:
        why = (
            f"{folder} can be written by other users (mode {stat.S_IMODE(status.st_mode):o}): "
            "choose a folder only you can write, such as $XDG_RUNTIME_DIR"
        )
    if why is not None:
        os.close(fd)
        raise UserError(why)
    return PrivateFolder(folder, fd)


def unix_peer_uid(sock: socket.socket) -> int | None:
    """The uid of the process at the other end of a connected Unix socket (a listener's: the
    one that made it listen); None where the system does not say."""
    if hasattr(socket, "SO_PEERCRED"):  # Linux: struct ucred {pid, uid, gid}
        credentials = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        return int(struct.unpack("3i", credentials)[1])
    local_peercred = getattr(socket, "LOCAL_PEERCRED", None)
    if local_peercred is not None:  # macOS, FreeBSD: struct xucred {cr_version, cr_uid, ...}
        credentials = sock.getsockopt(getattr(socket, "SOL_LOCAL", 0), local_peercred, struct.calcsize("2I"))
        return int(struct.unpack("2I", credentials)[1])
    return None


def listen_tcp(host: str, port: int, token_path: Path | None) -> Listener:
    """A TCP listener whose clients must present the token of token_path (by default tcp-token
    in the runtime folder), created when that file does not exist."""
    if token_path is None:
        folder, name = open_runtime_folder(), _TOKEN_FILE_NAME
    else:
        folder, name = open_private_folder(token_path.parent, create=True), token_path.name
    with folder:
        token = load_token(folder, name)
    try:
        # "localhost" may stand for both loopbacks: IPv4 first, as most clients try it first.
        families = [info[0] for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)]
        family = socket.AF_INET if socket.AF_INET in families else families[0]
        sock = socket.create_server((host, port), family=family)
    except OSError as error:
        raise UserError(f"cannot listen on {host}:{port}: {error.strerror or error}") from None
    bound_host, bound_port = sock.getsockname()[:2]
    address = f"[{bound_host}]:{bound_port}" if ":" in bound_host else f"{bound_host}:{bound_port}"
    return Listener(sock, address, token=token, token_path=folder.path / name)


def listen_unix(path: Path | None) -> Listener:
    """A Unix socket with mode 0600 at path (by default lookahead-lsp.sock in the runtime
    folder), in a folder no other user can write. A socket left there by a daemon that is gone
    is replaced; one where a daemon still answers, or anything else at the path, is refused."""
    if path is None:
        folder, name = open_runtime_folder(), _SOCKET_NAME
    else:
        path = path.absolute()
        folder, name = open_private_folder(path.parent, create=False), path.name
    try:
        return _listen_in(folder, name)
    except BaseException:
        folder.close()
        raise


def _listen_in(folder: PrivateFolder, name: str) -> Listener:
    shown = folder.path / name
    try:
        _clear_stale_socket(folder, name)
    except OSError as error:
        raise UserError(f"cannot use {shown}: {error.strerror or error}") from None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        previous = os.umask(0o177)  # no moment when the socket is open to others
        try:
            sock.bind(folder.address(name))
        finally:
            os.umask(previous)
        os.chmod(name, 0o600, dir_fd=folder.fd)
        sock.listen()
        inode = os.stat(name, dir_fd=folder.fd, follow_symlinks=False).st_ino
    except OSError as error:
        sock.close()
        raise UserError(f"cannot listen on {shown}: {error.strerror or error}") from None
    return Listener(sock, str(shown), unix_folder=folder, unix_name=name, unix_inode=inode)


def load_token(folder: PrivateFolder, name: str) -> str:
    """The token in the file name of folder; a new random one, in a new file of mode 0600, when
    there is none. A file that is not a regular file of this user, can be read by others or
    holds no token is refused rather than used or replaced."""
    shown = folder.path / name
    try:
        try:
            return _read_token(folder, name)
        except FileNotFoundError:
            pass
        with contextlib.suppress(FileExistsError):  # another daemon made one meanwhile: use it
            _create_token(folder, name, secrets.token_urlsafe(32))
        return _read_token(folder, name)
    except OSError as error:
        raise UserError(f"token file {shown}: {error.strerror or error}") from None


def token_matches(message: Any, token: str) -> bool:
    """Whether an initialize request carries token in initializationOptions (compared in
    constant time)."""
    params = message.get("params") if isinstance(message, dict) else None
    options = params.get("initializationOptions") if isinstance(params, dict) else None
    presented = options.get(TOKEN_OPTION) if isinstance(options, dict) else None
    # A token is ASCII; any other string (a lone surrogate included) is wrong without comparing.
    return isinstance(presented, str) and presented.isascii() and hmac.compare_digest(presented, token)


def _clear_stale_socket(folder: PrivateFolder, name: str) -> None:
    shown = folder.path / name
    try:
        mode = os.stat(name, dir_fd=folder.fd, follow_symlinks=False).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise UserError(f"{shown} exists and is not a socket: choose another path")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        try:
            probe.connect(folder.address(name))
        except ConnectionRefusedError:
            os.unlink(name, dir_fd=folder.fd)  # nobody answers: left by a daemon that did not exit cleanly
            return
    raise UserError(f"another server is listening on {shown}")


def _read_token(folder: PrivateFolder, name: str) -> str:
    shown = folder.path / name
    # O_NONBLOCK: a FIFO planted at the path fails the regular-file check instead of blocking.
    try:
        descriptor = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=folder.fd)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise UserError(f"token file {shown} is a symbolic link, which is not followed") from None
        raise
    with os.fdopen(descriptor, "rb") as file:
        status = os.fstat(descriptor)
        if not stat.S_ISREG(status.st_mode) or status.st_uid != os.getuid():
            raise UserError(f"token file {shown} is not a regular file of yours")
        if status.st_mode & 0o077:
            raise UserError(f"token file {shown} can be read by others: chmod 600 it, or delete it for a new one")
        text = file.read(512).decode("ascii", errors="replace").strip()
    if not _TOKEN.fullmatch(text):
        raise UserError(f"token file {shown} holds no token (32 to 256 of A-Z a-z 0-9 _ -): delete it for a new one")
    return text


def _create_token(folder: PrivateFolder, name: str, token: str) -> None:
    """Writes token to the file name of folder, which must not exist: a temporary file (random
    name, created exclusively with mode 0600, never through a link), fsync'd, then hard-linked
    to name, which fails instead of replacing a token another daemon wrote meanwhile."""
    temporary = f".{name}.{secrets.token_hex(8)}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    descriptor = os.open(temporary, flags, 0o600, dir_fd=folder.fd)
    try:
        with os.fdopen(descriptor, "wb") as file:
            file.write(token.encode() + b"\n")
            file.flush()
            os.fsync(file.fileno())
        os.link(temporary, name, src_dir_fd=folder.fd, dst_dir_fd=folder.fd)
    finally:
        os.unlink(temporary, dir_fd=folder.fd)
    os.fsync(folder.fd)

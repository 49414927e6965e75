"""Where the daemon listens, and what its socket clients present: a Unix socket with mode 0600
in a folder no other user can write (runtime_folder(), checked by check_private_folder), or a
TCP port whose clients present the token of a file of mode 0600, created at random, never
through a link, and refused when another user could read it. transport.py serves what connects."""

from __future__ import annotations

import contextlib
import errno
import hmac
import os
import re
import secrets
import socket
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lookahead_lsp.base.cache_files import default_cache_dir
from lookahead_lsp.base.errors import UserError

# The key of initializationOptions that carries the token.
TOKEN_OPTION = "token"
_TOKEN = re.compile(r"[A-Za-z0-9_-]{32,256}")
_TOKEN_FILE_NAME = "tcp-token"
_SOCKET_NAME = "lookahead-lsp.sock"


@dataclass(frozen=True)
class Listener:
    """A bound, listening socket and what its clients must present."""

    sock: socket.socket
    address: str  # as messages show it
    token: str | None = None  # what a TCP client presents
    token_path: Path | None = None
    unix_path: Path | None = None
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
        if self.unix_path is None:
            return
        with contextlib.suppress(OSError):
            if os.lstat(self.unix_path).st_ino == self.unix_inode:
                os.unlink(self.unix_path)


def runtime_folder() -> Path:
    """$XDG_RUNTIME_DIR/lookahead-lsp (a per-user folder, emptied at logout) where the system
    has one, else a folder of the cache folder; either created with mode 0700."""
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    if os.path.isabs(runtime) and os.path.isdir(runtime):
        return Path(runtime) / "lookahead-lsp"
    # Not the cache folder itself: a umask of 002 leaves that one writable by the user's group.
    return default_cache_dir() / "run"


def listen_tcp(host: str, port: int, token_path: Path | None) -> Listener:
    """A TCP listener whose clients must present the token of token_path (by default
    runtime_folder()/tcp-token), created when that file does not exist."""
    token_path = token_path or runtime_folder() / _TOKEN_FILE_NAME
    token = load_token(token_path)
    try:
        # "localhost" may stand for both loopbacks: IPv4 first, as most clients try it first.
        families = [info[0] for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)]
        family = socket.AF_INET if socket.AF_INET in families else families[0]
        sock = socket.create_server((host, port), family=family)
    except OSError as error:
        raise UserError(f"cannot listen on {host}:{port}: {error.strerror or error}") from None
    bound_host, bound_port = sock.getsockname()[:2]
    address = f"[{bound_host}]:{bound_port}" if ":" in bound_host else f"{bound_host}:{bound_port}"
    return Listener(sock, address, token=token, token_path=token_path)


def listen_unix(path: Path | None) -> Listener:
    """A Unix socket with mode 0600 at path (by default runtime_folder()/lookahead-lsp.sock), in a
    folder no other user can write. A socket left there by a daemon that is gone is replaced;
    one where a daemon still answers, or anything else at the path, is refused."""
    if path is None:
        path = runtime_folder() / _SOCKET_NAME
        make_private_folder(path.parent)
    path = path.absolute()
    check_private_folder(path.parent)
    try:
        _clear_stale_socket(path)
    except OSError as error:
        raise UserError(f"cannot use {path}: {error.strerror or error}") from None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        previous = os.umask(0o177)  # no moment when the socket is open to others
        try:
            sock.bind(str(path))
        finally:
            os.umask(previous)
        os.chmod(path, 0o600)
        sock.listen()
        inode = os.lstat(path).st_ino
    except OSError as error:
        sock.close()
        raise UserError(f"cannot listen on {path}: {error.strerror or error}") from None
    return Listener(sock, str(path), unix_path=path, unix_inode=inode)


def check_private_folder(folder: Path) -> None:
    """UserError unless folder is a directory of this user (or root) that no other user can
    write: anyone who can write it could replace what the daemon puts there."""
    try:
        status = os.stat(folder)
    except OSError as error:
        raise UserError(f"{folder}: {error.strerror or error}") from None
    if not stat.S_ISDIR(status.st_mode):
        raise UserError(f"{folder} is not a directory")
    if status.st_uid not in (os.getuid(), 0):
        raise UserError(f"{folder} belongs to another user: choose a folder of your own")
    if status.st_mode & 0o022:
        raise UserError(
            f"{folder} can be written by other users (mode {stat.S_IMODE(status.st_mode):o}): "
            "choose a folder only you can write, such as $XDG_RUNTIME_DIR"
        )


def load_token(path: Path) -> str:
    """The token in path; a new random one, in a new file of mode 0600, when there is none. A
    file that is not a regular file of this user, can be read by others or holds no token is
    refused rather than used or replaced."""
    try:
        make_private_folder(path.parent)
        check_private_folder(path.parent)
        try:
            return _read_token(path)
        except FileNotFoundError:
            pass
        with contextlib.suppress(FileExistsError):  # another daemon made one meanwhile: use it
            _create_token(path, secrets.token_urlsafe(32))
        return _read_token(path)
    except OSError as error:
        raise UserError(f"token file {path}: {error.strerror or error}") from None


def token_matches(message: Any, token: str) -> bool:
    """Whether an initialize request carries token in initializationOptions (compared in
    constant time)."""
    params = message.get("params") if isinstance(message, dict) else None
    options = params.get("initializationOptions") if isinstance(params, dict) else None
    presented = options.get(TOKEN_OPTION) if isinstance(options, dict) else None
    # A token is ASCII; any other string (a lone surrogate included) is wrong without comparing.
    return isinstance(presented, str) and presented.isascii() and hmac.compare_digest(presented, token)


def make_private_folder(folder: Path) -> None:
    """Creates folder (mode 0700) and its parents where missing; UserError if it cannot."""
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as error:
        raise UserError(f"cannot create {folder}: {error.strerror or error}") from None


def _clear_stale_socket(path: Path) -> None:
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise UserError(f"{path} exists and is not a socket: choose another path")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        try:
            probe.connect(str(path))
        except ConnectionRefusedError:
            os.unlink(path)  # nobody answers: left by a daemon that did not exit cleanly
            return
    raise UserError(f"another server is listening on {path}")


def _read_token(path: Path) -> str:
    # O_NONBLOCK: a FIFO planted at the path fails the regular-file check instead of blocking.
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise UserError(f"token file {path} is a symbolic link, which is not followed") from None
        raise
    with os.fdopen(descriptor, "rb") as file:
        status = os.fstat(descriptor)
        if not stat.S_ISREG(status.st_mode) or status.st_uid != os.getuid():
            raise UserError(f"token file {path} is not a regular file of yours")
        if status.st_mode & 0o077:
            raise UserError(f"token file {path} can be read by others: chmod 600 it, or delete it for a new one")
        text = file.read(512).decode("ascii", errors="replace").strip()
    if not _TOKEN.fullmatch(text):
        raise UserError(f"token file {path} holds no token (32 to 256 of A-Z a-z 0-9 _ -): delete it for a new one")
    return text


def _create_token(path: Path, token: str) -> None:
    """Writes token to path, which must not exist: a temporary file (random name, created
    exclusively with mode 0600, never through a link), fsync'd, then hard-linked to path, which
    fails instead of replacing a token another daemon wrote meanwhile."""
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    descriptor = os.open(temporary, flags, 0o600)
    try:
        with os.fdopen(descriptor, "wb") as file:
            file.write(token.encode() + b"\n")
            file.flush()
            os.fsync(file.fileno())
        os.link(temporary, path)
    finally:
        os.unlink(temporary)
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)

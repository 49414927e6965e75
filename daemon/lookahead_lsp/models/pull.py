"""`lookahead-lsp models pull`: one GGUF file from the Hugging Face Hub into the user's cache.

huggingface_hub does the talking to the Hub (the endpoint, HF_ENDPOINT and the user's token,
redirects, retries, the progress bar). The download goes to a partial file that survives an
interrupted pull, so the next pull asks only for the missing bytes; it is put in place by a
rename once its sha256 matches. (Its own hf_hub_download keeps no partial file between runs in
recent versions, hence http_get.)

The partial file is one the next run trusts and writes to, so it never lies where anyone else
could plant a file or a link: it sits in `.partial/` beside the target, a folder of this user
that no one else may enter (checked on its open descriptor, every later step relative to it),
and is created exclusively, never through a link, and reused only as a regular file of this
user with one link. Nothing is written past the size the Hub announced (or the pinned one): the
write that would pass it stops the download, and the partial file is deleted, as it is when its
checksum is wrong."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import re
import shutil
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import urlsplit

from lookahead_lsp import __version__
from lookahead_lsp.models.catalogue import ModelSource, Pin, pulled_path
from lookahead_lsp.base.errors import UserError
from lookahead_lsp.base.private_folders import FOLDER_FLAGS, open_private_subfolder

_SHA256 = re.compile(r"[0-9a-f]{64}")
_HASH_BLOCK = 1 << 20
_PARTIAL_FOLDER = ".partial"
# Reopening a partial file: never through a link, never blocking on a FIFO.
_REOPEN_FLAGS = os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_CREATE_FLAGS = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC

Say = Callable[[str], None]


class _TooLong(UserError):
    """The server sent more bytes than it announced."""


def pull(
    source: ModelSource, expected: Pin | None, say: Say, folder: Path | None = None
) -> Path:
    """The pulled file of source, downloaded unless already there. `expected` pins its sha256
    and size; without it the Hub's own sha256 of the file (its ETag) is checked. UserError for
    anything the user should hear about in one line; the partial download is kept on errors
    and interrupts (pull again to resume), except when the server sent more than announced or
    the checksum is wrong."""
    target = pulled_path(source, folder)
    if target.is_file():
        say(f"{source.spec} is already downloaded")
        return target
    hub = _hub()
    url, size, sha256, headers = _metadata(hub, source)
    if expected is not None:
        _check_against_pin(source, expected, size, sha256)
        sha256, size = expected.sha256, expected.size if expected.size is not None else size
    if sha256 is None:
        raise UserError(
            f"the Hub gives no sha256 for {source.spec} and none is pinned: pass --sha256"
        )
    if size is None:
        raise UserError(f"the Hub gives no size for {source.spec}: not downloading")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with _partial(target, f"{target.name}.{sha256[:16]}.part", source, say) as partial:
            _fetch(hub, url, headers, partial, size, source, say)
            say("checking its sha256")
            _verify(partial, sha256, source)
            partial.put_in_place()
    except OSError as error:
        raise UserError(f"cannot write the download into {target.parent}: {error.strerror or error}") from None
    return target


def _fetch(
    hub: Any, url: str, headers: dict[str, str], partial: _Partial, size: int, source: ModelSource, say: Say
) -> None:
    """Downloads what the partial file lacks of the file's `size` bytes, and no more."""
    done = partial.file.seek(0, os.SEEK_END)
    if done > size:
        partial.file.truncate(0)  # not a prefix of this file, whatever it is
        done = partial.file.seek(0)
    _check_free_space(partial.folder, size - done)
    say(
        f"downloading {source.spec} ({_megabytes(size)})"
        + (f", resuming after {_megabytes(done)}" if done else "")
    )
    try:
        _download(hub, url, _CappedFile(partial.file, size, source), done, size, headers, source)
    except _TooLong:
        partial.discard()
        raise
    os.fsync(partial.file.fileno())


def _hub() -> Any:
    try:
        import huggingface_hub
        import huggingface_hub.file_download
        import huggingface_hub.utils
    except ImportError as error:
        raise UserError(
            "models pull needs huggingface_hub: pip install 'lookahead-lsp[hf]' "
            "(or pip install huggingface_hub)"
        ) from error
    return huggingface_hub


def _metadata(hub: Any, source: ModelSource) -> tuple[str, int | None, str | None, dict[str, str]]:
    """The URL to download, the size, the sha256 the Hub states, and the request headers."""
    url = hub.hf_hub_url(source.repo_id, source.filename, revision=source.revision)
    headers: dict[str, str] = hub.utils.build_hf_headers(
        library_name="lookahead-lsp", library_version=__version__
    )
    with _network_errors(source):
        metadata = hub.get_hf_file_metadata(url, headers=headers)
    location: str = metadata.location or url
    if urlsplit(location).netloc != urlsplit(url).netloc:
        # A signed address on a download host: the Hub token is for the Hub only.
        headers.pop("authorization", None)
    etag = (metadata.etag or "").lower()
    return location, metadata.size, etag if _SHA256.fullmatch(etag) else None, headers


def _check_against_pin(source: ModelSource, pin: Pin, size: int | None, sha256: str | None) -> None:
    # Refused before downloading: the repository no longer holds the pinned file.
    if size is not None and pin.size is not None and size != pin.size:
        raise UserError(
            f"{source.spec} on the Hub is {size} bytes, not the pinned {pin.size}: not downloading"
        )
    if sha256 is not None and sha256 != pin.sha256:
        raise UserError(
            f"{source.spec} on the Hub has sha256 {sha256}, not the pinned {pin.sha256}: "
            "not downloading"
        )


@dataclass
class _Partial:
    """A download in progress: `file` (unbuffered, locked), named `name` in the private folder
    `folder_fd`, which lies in the target's folder `target_fd`."""

    file: BinaryIO
    name: str
    folder: Path  # as messages show it
    folder_fd: int
    target_fd: int
    target_name: str

    def discard(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.name, dir_fd=self.folder_fd)
        self._remove_folder()

    def put_in_place(self) -> None:
        os.replace(self.name, self.target_name, src_dir_fd=self.folder_fd, dst_dir_fd=self.target_fd)
        with contextlib.suppress(OSError):  # makes the rename durable, where the system can
            os.fsync(self.target_fd)
        self._remove_folder()

    def _remove_folder(self) -> None:
        with contextlib.suppress(OSError):  # another download may still be partial in it
            os.rmdir(_PARTIAL_FOLDER, dir_fd=self.target_fd)


@contextlib.contextmanager
def _partial(target: Path, name: str, source: ModelSource, say: Say) -> Iterator[_Partial]:
    """The partial file `name` for target, reopened to resume or created empty."""
    folder = target.parent / _PARTIAL_FOLDER
    target_fd = os.open(target.parent, FOLDER_FLAGS)
    try:
        folder_fd = _private_folder(target_fd, folder)
        try:
            with _open_partial(folder_fd, name, say) as file:
                _lock(file, folder_fd, name, source)
                yield _Partial(file, name, folder, folder_fd, target_fd, target.name)
        finally:
            os.close(folder_fd)
    finally:
        os.close(target_fd)


def _private_folder(parent_fd: int, path: Path) -> int:
    try:
        return open_private_subfolder(parent_fd, path)
    except UserError as error:
        raise UserError(f"{error}: delete it") from None


@contextlib.contextmanager
def _open_partial(folder_fd: int, name: str, say: Say) -> Iterator[BinaryIO]:
    """The partial file to resume: a regular file of this user with no other link; anything
    else at the name is deleted and the download starts over in a new file."""
    try:
        descriptor = os.open(name, _REOPEN_FLAGS, dir_fd=folder_fd)
    except FileNotFoundError:
        descriptor = os.open(name, _CREATE_FLAGS, 0o600, dir_fd=folder_fd)
    except OSError as error:
        if error.errno != errno.ELOOP:
            raise
        descriptor = _start_over(folder_fd, name, "a symbolic link", say)
    # Unbuffered, so that what was received before an interrupt is on disk to resume from.
    with os.fdopen(descriptor, "r+b", buffering=0) as file:
        status = os.fstat(descriptor)
        if stat.S_ISREG(status.st_mode) and status.st_uid == os.getuid() and status.st_nlink == 1:
            os.set_blocking(descriptor, True)
            yield file
            return
    why = "not a regular file of yours with one link"
    with os.fdopen(_start_over(folder_fd, name, why, say), "r+b", buffering=0) as file:
        yield file


def _start_over(folder_fd: int, name: str, why: str, say: Say) -> int:
    say(f"the partial download {name} is {why}: starting over")
    os.unlink(name, dir_fd=folder_fd)
    return os.open(name, _CREATE_FLAGS, 0o600, dir_fd=folder_fd)


def _lock(file: BinaryIO, folder_fd: int, name: str, source: ModelSource) -> None:
    busy = UserError(f"another pull of {source.spec} is running")
    try:
        fcntl.flock(file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise busy from None
    # The pull that held the lock may have put this very file in place meanwhile.
    try:
        named = os.stat(name, dir_fd=folder_fd, follow_symlinks=False)
    except FileNotFoundError:
        raise busy from None
    if not os.path.samestat(named, os.fstat(file.fileno())):
        raise busy


class _CappedFile:
    """The partial file as huggingface_hub writes it, never longer than `cap` bytes: the write
    that would pass the cap writes nothing and raises _TooLong, which ends the download."""

    def __init__(self, file: BinaryIO, cap: int, source: ModelSource) -> None:
        self._file = file
        self._cap = cap
        self._source = source

    def write(self, data: bytes) -> int:
        if self._file.tell() + len(data) > self._cap:
            raise _TooLong(
                f"the server sent more of {self._source.spec} than the {self._cap} bytes "
                "announced: the download was deleted"
            )
        view = memoryview(data)
        while view:  # an unbuffered write may write less than it was given
            view = view[self._file.write(view) :]
        return len(data)

    def tell(self) -> int:
        return self._file.tell()

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        return self._file.seek(offset, whence)

    def truncate(self, size: int | None = None) -> int:
        return self._file.truncate(size)


def _check_free_space(folder: Path, needed: int) -> None:
    free = shutil.disk_usage(folder).free
    if needed > free:
        raise UserError(f"{folder} has {_megabytes(free)} free, the download needs {_megabytes(needed)}")


def _download(
    hub: Any,
    url: str,
    file: _CappedFile,
    done: int,
    size: int,
    headers: dict[str, str],
    source: ModelSource,
) -> None:
    # Older huggingface_hub hands the download to hf_transfer when enabled, which writes by the
    # file's name (past the cap): it stays in Python.
    if getattr(hub.constants, "HF_HUB_ENABLE_HF_TRANSFER", False):
        hub.constants.HF_HUB_ENABLE_HF_TRANSFER = False
    with _network_errors(source):
        hub.file_download.http_get(
            url,
            file,
            resume_size=done,
            headers=headers,
            expected_size=size,
            displayed_filename=Path(source.filename).name,
        )


@contextlib.contextmanager
def _network_errors(source: ModelSource) -> Iterator[None]:
    """Failures of the Hub, the network or the disk as one line. The exception classes differ
    between huggingface_hub versions (requests before 1.0, httpx after), hence Exception."""
    try:
        yield
    except UserError:
        raise
    except Exception as error:
        first_line = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise UserError(f"cannot download {source.spec}: {first_line}") from error


def _verify(partial: _Partial, sha256: str, source: ModelSource) -> None:
    digest = hashlib.sha256()
    partial.file.seek(0)
    while block := partial.file.read(_HASH_BLOCK):
        digest.update(block)
    if digest.hexdigest() != sha256:
        partial.discard()
        raise UserError(
            f"{source.spec} downloaded with sha256 {digest.hexdigest()}, expected {sha256}: "
            "the download was deleted"
        )


def _megabytes(count: int) -> str:
    return f"{count / 1e6:.1f} MB"

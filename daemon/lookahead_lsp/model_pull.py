"""`lookahead-lsp models pull`: one GGUF file from the Hugging Face Hub into the user's cache.

huggingface_hub does the talking to the Hub (the endpoint, HF_ENDPOINT and the user's token,
redirects, retries, the progress bar). The download goes to a `.part` file beside the target
that survives an interrupted pull, so the next pull asks only for the missing bytes; the file
is put in place by a rename once its sha256 matches, and deleted when it does not. (Its own
hf_hub_download keeps no partial file between runs in recent versions, hence http_get.)"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import urlsplit

from lookahead_lsp import __version__
from lookahead_lsp.catalogue import ModelSource, Pin, pulled_path
from lookahead_lsp.errors import UserError

_SHA256 = re.compile(r"[0-9a-f]{64}")
_HASH_BLOCK = 1 << 20

Say = Callable[[str], None]


def pull(
    source: ModelSource, expected: Pin | None, say: Say, folder: Path | None = None
) -> Path:
    """The pulled file of source, downloaded unless already there. `expected` pins its sha256
    and size; without it the Hub's own sha256 of the file (its ETag) is checked. UserError for
    anything the user should hear about in one line; the partial download is kept on errors
    and interrupts (pull again to resume), except when its checksum is wrong."""
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
    target.parent.mkdir(parents=True, exist_ok=True)
    part = target.with_name(f".{target.name}.{sha256[:16]}.part")
    with _locked_append(part, source) as file:
        done = file.tell()
        if size is not None and done > size:
            file.truncate(0)  # not a prefix of this file, whatever it is
            done = 0
        _check_free_space(part.parent, (size or 0) - done)
        say(
            f"downloading {source.spec}"
            + (f" ({_megabytes(size)})" if size else "")
            + (f", resuming after {_megabytes(done)}" if done else "")
        )
        _download(hub, url, file, done, size, headers, source)
        file.flush()
        os.fsync(file.fileno())
    say("checking its sha256")
    _verify(part, sha256, source)
    os.replace(part, target)
    _fsync_folder(target.parent)
    return target


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


@contextlib.contextmanager
def _locked_append(part: Path, source: ModelSource) -> Iterator[BinaryIO]:
    # Unbuffered, so that what was received before an interrupt is on disk to resume from.
    with open(part, "ab", buffering=0) as file:
        try:
            fcntl.flock(file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as error:
            raise UserError(f"another pull of {source.spec} is running") from error
        yield file


def _check_free_space(folder: Path, needed: int) -> None:
    free = shutil.disk_usage(folder).free
    if needed > free:
        raise UserError(f"{folder} has {_megabytes(free)} free, the download needs {_megabytes(needed)}")


def _download(
    hub: Any,
    url: str,
    file: BinaryIO,
    done: int,
    size: int | None,
    headers: dict[str, str],
    source: ModelSource,
) -> None:
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


def _verify(part: Path, sha256: str, source: ModelSource) -> None:
    digest = hashlib.sha256()
    with open(part, "rb") as file:
        while block := file.read(_HASH_BLOCK):
            digest.update(block)
    if digest.hexdigest() != sha256:
        part.unlink()
        raise UserError(
            f"{source.spec} downloaded with sha256 {digest.hexdigest()}, expected {sha256}: "
            "the download was deleted"
        )


def _fsync_folder(folder: Path) -> None:
    # Makes the rename durable; some systems cannot open a folder for that.
    with contextlib.suppress(OSError):
        descriptor = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)


def _megabytes(count: int) -> str:
    return f"{count / 1e6:.1f} MB"

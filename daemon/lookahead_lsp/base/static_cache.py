"""The repository draft source: a static cache file (built by build-cache) opened for drafting.
The daemon's folders, `complete` and `lookup-stats` all open theirs here, so each is checked the
same way: against the model's tokenizer, then whole (drafting refuses an unverified cache).

Each is served from the user's store of verified private copies (native/static_cache_store.h):
the first use checks the file, copies it there and verifies the copy, later uses map that copy
in O(1).
The file itself is never mapped, so rewriting or truncating it underneath changes nothing."""

from __future__ import annotations

import contextlib
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from lookahead_lsp._lookup import STATIC_MAGIC, CacheError, NgramCache, StaticCache, StaticCacheBuilder
from lookahead_lsp.base.cache_files import default_cache_dir
from lookahead_lsp.base.safe_reads import open_regular_file


@dataclass(frozen=True)
class OpenedStaticCache:
    """An opened, verified cache, and how long opening (converting, checking and copying
    included) and verifying took."""

    cache: StaticCache
    open_ms: float
    verify_ms: float


def default_store(cache_dir: Path | None = None) -> Path:
    """The store of verified private copies: static-caches/ in the cache folder (the user's
    by default)."""
    return (cache_dir or default_cache_dir()) / "static-caches"


def open_static_cache(
    path: Path, n_vocab: int, fingerprint: int, accept_upstream: bool = False, store: Path | None = None
) -> OpenedStaticCache:
    """Opens the static cache at path for a tokenizer (its vocabulary size and fingerprint) and
    verifies it, through the store (default_store() unless given). accept_upstream: a
    llama.cpp lookup cache is taken too, converted to ours in a temporary file first.
    CacheError, one line naming the file, when it cannot be used: missing, not a regular file
    (never waited on), damaged, built for another tokenizer, or refused by a store that cannot
    take it (another owner, writable by others, a full disk). A file is never read into private
    memory instead: one of holes behind a plausible header would cost its apparent size."""
    started = time.perf_counter()
    if accept_upstream and not _is_ours(path):
        cache = _converted(path, n_vocab, fingerprint)
    else:
        folder = store or default_store()
        with contextlib.suppress(OSError):  # the native store says why it cannot be used
            folder.parent.mkdir(parents=True, exist_ok=True)
        cache = StaticCache.open(str(path), n_vocab, fingerprint, store=str(folder))
    opened = time.perf_counter()
    cache.verify()
    return OpenedStaticCache(cache, (opened - started) * 1000.0, (time.perf_counter() - opened) * 1000.0)


def _is_ours(path: Path) -> bool:
    try:
        with open_regular_file(path) as (file, _):
            return file.read(len(STATIC_MAGIC)) == STATIC_MAGIC
    except OSError as error:
        raise CacheError(f"{path}: {error.strerror or error}") from None


def _converted(path: Path, n_vocab: int, fingerprint: int) -> StaticCache:
    """A llama.cpp lookup cache as ours; the temporary file goes once it is read into memory."""
    builder = StaticCacheBuilder(n_vocab)
    builder.add_cache(NgramCache.load_upstream(str(path), n_vocab))
    with tempfile.TemporaryDirectory() as folder:
        converted = str(Path(folder) / "static.cache")
        builder.write(converted, fingerprint)
        return StaticCache.open(converted, n_vocab, fingerprint)

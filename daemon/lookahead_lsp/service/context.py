"""The prompt's context from other files, assembled from the sources the `contextSources`
setting names, in its order: `definitions` and `similar` from the request's own workspace
folder (workspace/retrieval.py, the files on disk), `recent` from the session's other open
documents of that folder (documents.recent_chunks). The prompt builder takes them in this order
until `extraContextTokens` runs out."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from lookahead_lsp.engine import ContextChunk
from lookahead_lsp.service.documents import Document, recent_chunks
from lookahead_lsp.workspace.retrieval import SOURCES as RETRIEVED
from lookahead_lsp.workspace.retrieval import FolderRetrieval

RECENT = "recent"


def context_chunks(
    sources: Sequence[str],
    retrieval: FolderRetrieval | None,
    path: Path | None,
    prefix: str,
    recent: list[tuple[str, Document]],
    relative: Callable[[Path | None, str], str],
) -> tuple[ContextChunk, ...]:
    """The chunks for a request on path with prefix before the cursor: retrieval, its
    workspace folder's (None outside every one); recent: the session's other documents of the
    same folder, latest first; relative names a file in a prompt. Reads files: call it on the
    worker."""
    retrieved = [source for source in sources if source in RETRIEVED]
    found = retrieval.retrieve(path, prefix, retrieved) if retrieval is not None and retrieved else ()
    by_source: dict[str, list[ContextChunk]] = {source: [] for source in sources}
    for chunk in found:
        name = relative(chunk.path, chunk.path.as_uri())
        by_source[chunk.why].append(ContextChunk(name, chunk.text, (chunk.start, chunk.end), chunk.why))
    if RECENT in by_source:
        by_source[RECENT] = list(recent_chunks(recent, relative))
    return tuple(chunk for source in sources for chunk in by_source[source])

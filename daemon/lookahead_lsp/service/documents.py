"""The documents open in the editor, as the service keeps them: each one's latest text (a frozen
snapshot, so that a completion on the model's worker reads the one it was handed while the
editor goes on), the size cap (maxDocumentKb, decided here for the editor's documents and for
files read unopened), and the lines of recently edited ones that join a prompt.

The text is one string shared by reference: the protocol layer's document (which applies the
editor's incremental changes), the Document kept here and the edit waiting in its folder's
queue are the same object until the next change replaces it; the index keeps tokens only."""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from lookahead_lsp.base.editor import Editor
from lookahead_lsp.engine import ContextChunk

# Extra context for the prompt: this many recently edited other documents, this many lines
# around their last edit.
_RECENT_DOCUMENTS = 3
_CONTEXT_LINES = 12
# Texts are compared this many characters at a time (a slice comparison is one memcmp), so
# finding where a whole-document change differs costs microseconds per 100 KB on the event loop.
_COMPARED_BLOCK = 4096


@dataclass(frozen=True)
class Document:
    """An open document's editor text; replaced, never changed."""

    path: Path | None
    text: str  # empty for a document above the size cap
    edited_line: int = 0
    oversized: bool = False


class OpenDocuments:
    """The open documents by URI, most recently edited last. Not locked: the caller's lock
    guards it."""

    def __init__(self, client: Editor, max_document_kb: int) -> None:
        self._client = client
        self.max_document_kb = max_document_kb  # the cap, from the settings
        self._documents: OrderedDict[str, Document] = OrderedDict()
        self._oversized_reported: set[str] = set()  # URIs whose size was reported, until closed

    def all(self) -> list[Document]:
        return list(self._documents.values())

    def uris(self) -> list[str]:
        return list(self._documents)

    def record(self, uri: str, document: Document) -> Document | None:
        """The document's new text, now the most recently edited; returns the one before."""
        before = self._documents.pop(uri, None)
        self._documents[uri] = document
        return before

    def text(self, uri: str) -> str | None:
        """The editor's text of an open document (empty above the size cap); None if not open."""
        document = self._documents.get(uri)
        return None if document is None else document.text

    def close(self, uri: str) -> None:
        self._documents.pop(uri, None)
        self._oversized_reported.discard(uri)

    def others(self, uri: str) -> list[tuple[str, Document]]:
        """The documents other than uri that are not above the size cap, latest edit first."""
        return [(other, doc) for other, doc in reversed(self._documents.items()) if other != uri and not doc.oversized]

    @property
    def cap(self) -> int:
        """The cap: characters of an editor's text, bytes of a file read unopened."""
        return self.max_document_kb * 1024

    def too_large(self, uri: str, text: str) -> bool:
        """Whether the text is above the cap; said once per document in the log."""
        limit_kb = self.max_document_kb
        if len(text) <= self.cap:
            self._oversized_reported.discard(uri)
            return False
        if uri not in self._oversized_reported:
            self._oversized_reported.add(uri)
            self._client.log(
                logging.INFO,
                f"not completed nor indexed from the editor: {uri} ({len(text) // 1024} KiB, maxDocumentKb {limit_kb})",
            )
        return True


def recent_chunks(
    recent: list[tuple[str, Document]], relative: Callable[[Path | None, str], str]
) -> tuple[ContextChunk, ...]:
    """Lines around the last edit of the most recently edited documents (`recent`, latest
    first, as OpenDocuments.others), each named by relative(path, uri). Splits whole
    documents: call it on the worker, not the event loop."""
    chunks: list[ContextChunk] = []
    for uri, doc in recent:
        if len(chunks) >= _RECENT_DOCUMENTS:
            break
        lines = doc.text.splitlines(keepends=True)
        start = max(0, doc.edited_line - _CONTEXT_LINES)
        text = "".join(lines[start : doc.edited_line + _CONTEXT_LINES])
        if text.strip():
            chunks.append(ContextChunk(relative(doc.path, uri), text))
    return tuple(chunks)


def edit_end(before: str, after: str) -> int | None:
    """Where in `after` the change from `before` ends, the cursor of a user who just typed or
    deleted there: after the longest common start and before the longest common end (which
    may not overlap it, so a letter typed after the same letter ends after the second). None
    when the texts are the same. For editors that send whole documents, whose changes say
    nothing of where they were made."""
    if before == after:
        return None
    shortest = min(len(before), len(after))
    start = _common_length(before, after, shortest, from_end=False)
    end = _common_length(before, after, shortest - start, from_end=True)
    return len(after) - end


def _common_length(a: str, b: str, limit: int, from_end: bool) -> int:
    """How many characters a and b share at their start (or end), at most limit: block by
    block, then halving within the first block that differs."""

    def same(lo: int, hi: int) -> bool:  # characters [lo, hi) counted from the start (or end)
        if from_end:
            return a[len(a) - hi : len(a) - lo] == b[len(b) - hi : len(b) - lo]
        return a[lo:hi] == b[lo:hi]

    shared = 0
    while shared < limit and same(shared, min(shared + _COMPARED_BLOCK, limit)):
        shared = min(shared + _COMPARED_BLOCK, limit)
    if shared == limit:
        return limit
    low, high = shared, min(shared + _COMPARED_BLOCK, limit)  # [shared, low) same; [low, high) not
    while high - low > 1:
        middle = (low + high) // 2
        if same(low, middle):
            low = middle
        else:
            high = middle
    return low

"""The last few suggestions shown or decoded ahead, any documents, so that typing the beginning
of a suggestion is answered without the model; and the key that identifies a request's answer.
Bounded memory whatever the documents' sizes and number."""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from dataclasses import dataclass

# How much of the text after the cursor must match for a cached suggestion to apply.
_SUFFIX_KEY_CHARS = 200
# A suggestion keeps this much of the text before the cursor (compared first, cheaply) and a
# digest of all of it: an entry costs a few KiB whatever the document's size.
PREFIX_TAIL_CHARS = 4096


@dataclass(frozen=True)
class CacheHit:
    text: str
    # A continuation the model decoded ahead, without stop rules (what follows the typed part of
    # it): the caller cuts it for the request, see stopping.shown_from_continuation.
    continuation: bool = False
    ended: bool = False  # that continuation ended at the model's end of generation
    typed: bool = False  # some of it was typed since


def answer_key(uri: str, prefix: str, suffix: str) -> tuple[str, int, bytes, str]:
    """What identifies the answer to a request (an idle job computing it, a request taking it over)."""
    return (uri, len(prefix), _digest(prefix), suffix[:_SUFFIX_KEY_CHARS])


@dataclass(frozen=True)
class _Suggestion:
    uri: str
    prefix_chars: int  # the length of the text before the cursor it was computed for
    prefix_tail: str  # that text's last PREFIX_TAIL_CHARS characters
    prefix_digest: bytes  # and a digest of all of it
    suffix_key: str
    text: str
    continuation: bool  # decoded ahead without stop rules, to be cut for each request
    ended: bool  # a continuation the model ended

    @property
    def retained_chars(self) -> int:
        return len(self.uri) + len(self.prefix_tail) + len(self.prefix_digest) + len(self.suffix_key) + len(self.text)


class SuggestionCache:
    """The last few suggestions, any documents. A request whose text before the cursor extends a
    cached suggestion's by characters that begin that suggestion (the user typed them) is
    answered with the rest of it. Stored by the model's worker and read by the server: every
    method takes the lock."""

    def __init__(self, size: int = 64) -> None:
        self.size = size
        self._entries: OrderedDict[tuple[str, int, bytes], _Suggestion] = OrderedDict()
        self._lock = threading.Lock()

    def store(
        self, uri: str, prefix: str, suffix: str, text: str, continuation: bool = False, ended: bool = False
    ) -> None:
        """A suggestion shown at (prefix, suffix); or, continuation=True, what the model decoded
        there without stop rules (ended: it ended it), which also answers the requests whose
        text before the cursor has all of it typed."""
        if not text:
            return
        entry = _Suggestion(
            uri,
            len(prefix),
            prefix[-PREFIX_TAIL_CHARS:],
            _digest(prefix),
            suffix[:_SUFFIX_KEY_CHARS],
            text,
            continuation,
            ended,
        )
        key = (uri, entry.prefix_chars, entry.prefix_digest)
        with self._lock:
            self._entries[key] = entry
            self._entries.move_to_end(key)
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)

    def lookup(self, uri: str, prefix: str, suffix: str) -> CacheHit | None:
        suffix_key = suffix[:_SUFFIX_KEY_CHARS]
        with self._lock:
            candidates = [e for e in reversed(self._entries.values()) if e.uri == uri and e.suffix_key == suffix_key]
        for entry in candidates:
            if len(prefix) < entry.prefix_chars:
                continue
            typed = prefix[entry.prefix_chars :]
            room = len(entry.text) + entry.continuation  # a continuation may be typed in full
            if len(typed) >= room or not entry.text.startswith(typed):
                continue
            # The cheap check first; the digest only for a candidate that passed it.
            if prefix.endswith(entry.prefix_tail, 0, entry.prefix_chars) and (
                _digest(prefix[: entry.prefix_chars]) == entry.prefix_digest
            ):
                return CacheHit(entry.text[len(typed) :], entry.continuation, entry.ended, bool(typed))
        return None

    def drop(self, uri: str) -> None:
        """Forgets the document's suggestions (it was closed)."""
        with self._lock:
            for key in [key for key in self._entries if key[0] == uri]:
                del self._entries[key]

    def clear(self) -> None:
        """Forgets every suggestion (the settings that shaped them changed)."""
        with self._lock:
            self._entries.clear()

    def retained_chars(self) -> int:
        """Characters (and digest bytes) the entries hold: bounded by size entries of a few
        KiB plus their suggestion and URI, whatever the documents' sizes."""
        with self._lock:
            return sum(entry.retained_chars for entry in self._entries.values())


def _digest(text: str) -> bytes:
    # surrogatepass: the editor's text may hold a lone surrogate, which plain UTF-8 refuses.
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()

"""The model's prompt for one completion: fill-in-the-middle when the model's GGUF declares FIM
tokens, the text before the cursor alone otherwise, within token budgets.

The prompt's start must stay put while the user types, or the KV cache could not be reused:
the window over the text before the cursor starts at a line boundary chosen from a coarse grid,
so it moves only every quarter window."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import PurePosixPath

import numpy as np

from lookahead_lsp.base.tokenizer import TokenArray, Tokenizer

# Characters of code per token are about 3-4 for this kind of tokenizer; the character window
# is cut generously and the token budget decides.
_CHARS_PER_TOKEN = 4
_HASH_COMMENT = frozenset(
    {".py", ".pyi", ".sh", ".bash", ".rb", ".pl", ".r", ".yaml", ".yml", ".toml", ".cmake", ".mk"}
)
_DASH_COMMENT = frozenset({".lua", ".sql", ".hs", ".elm", ".ada"})


@dataclass(frozen=True)
class ContextChunk:
    """Text from another file that may help: lines [start, end) (0-based; (0, 0) when not
    known) of path, and why it was chosen (the daemon's context sources: definitions, similar,
    recent)."""

    path: str
    text: str
    lines: tuple[int, int] = (0, 0)
    why: str = "recent"

    def described(self, tokens: int) -> dict[str, object]:
        """As status and `complete --json` show it: 1-based lines, the tokens it took."""
        start, end = self.lines
        return {"path": self.path, "lines": [start + 1, end] if end else None, "why": self.why, "tokens": tokens}


@dataclass(frozen=True)
class CompletionRequest:
    """What to complete: the document's text before and after the cursor."""

    prefix: str
    suffix: str = ""
    path: str = ""  # the document's path, relative to its workspace where possible
    extra_context: tuple[ContextChunk, ...] = ()
    repository: str = ""  # the workspace's name, for models with a repository token
    # Who the document is, across every session and folder the engine serves (the session and
    # the document's absolute URI): what the engine keeps of one request for the next (saved
    # KV states' contexts, a short prompt's start, the previous completion) serves only
    # requests of the same owner, never another window's file of the same relative name.
    # Empty: the path stands for it, for a caller that serves one folder of one user (the
    # command line, the benchmarks); the daemon always names it.
    owner: str = ""

    @property
    def identity(self) -> str:
        """The owner what the engine keeps for the next request is kept under ("" for none)."""
        return self.owner or self.path


@dataclass(frozen=True)
class PromptWindows:
    """Token budgets of the prompt's parts."""

    prefix_tokens: int = 1536
    suffix_tokens: int = 256
    extra_tokens: int = 512


@dataclass(frozen=True)
class FimTokens:
    prefix: int
    suffix: int
    middle: int
    repository: int | None = None
    file_separator: int | None = None


@dataclass
class Prompt:
    tokens: list[int]
    # The document's own tokens around the cursor and those of the extra chunks, each a separate
    # sequence: the request's context cache is built from them (never across their seams).
    sources: list[TokenArray] = field(default_factory=list)
    fill_in_the_middle: bool = False
    # With healing: the prefix's last token, left out of the prompt for the model to redo.
    healed_token: int | None = None
    # Where in the request's prefix the prompt's part of it starts (None: not at a known
    # character, its front having been cut by tokens).
    prefix_start: int | None = None
    # The extra chunks that fit, each with the tokens it took (its header and separator included).
    chunks: list[tuple[ContextChunk, int]] = field(default_factory=list)


def comment_marker(path: str) -> str:
    suffix = PurePosixPath(path).suffix.lower()
    if suffix in _HASH_COMMENT:
        return "#"
    if suffix in _DASH_COMMENT:
        return "--"
    return "//"


def stable_prefix_start(prefix: str, window_chars: int) -> int:
    """Where the prompt's window over `prefix` starts: the first line start at or after a point
    on a grid of quarter windows, at least window_chars before the end (0 if it all fits)."""
    if len(prefix) <= window_chars:
        return 0
    quantum = max(1, window_chars // 4)
    anchor = ((len(prefix) - window_chars) // quantum) * quantum
    newline = prefix.find("\n", anchor - 1 if anchor else 0)
    return newline + 1 if 0 <= newline < len(prefix) - 1 else anchor


def _head(tokens: TokenArray, n: int) -> TokenArray:
    return tokens[: max(0, n)]


def _tail(tokens: TokenArray, n: int) -> TokenArray:
    # Drop whole quarter-budgets from the front so the start moves rarely (see the module doc).
    excess = len(tokens) - n
    if excess <= 0:
        return tokens
    quantum = max(1, n // 4)
    return tokens[-(-excess // quantum) * quantum :] if n > 0 else tokens[:0]


class PromptBuilder:
    """Builds prompts for one model (its tokenizer, BOS and FIM tokens)."""

    def __init__(self, tokenizer: Tokenizer, bos: int | None, fim: FimTokens | None) -> None:
        self.tokenizer = tokenizer
        self.bos = bos
        self.fim = fim
        # What follows each extra chunk in a prompt without FIM tokens.
        self._plain_separator = tokenizer.tokenize("\n\n").tolist()

    def build(
        self,
        request: CompletionRequest,
        windows: PromptWindows,
        max_tokens: int,
        heal: bool = False,
        prefix_start: int | None = None,
        locate: bool = False,
    ) -> Prompt:
        """A prompt of at most max_tokens tokens: the extra chunks and the prefix share the
        prefix's budget (the chunks, within their own, take the prefix's far end), and the
        suffix is cut where max_tokens leaves no room for all. heal: the prefix's last token is
        left out (see healing.py). prefix_start: the prefix's part starts there if all of it
        from there fits (a short prompt kept where its KV state starts), else where the grid
        puts it. locate: where tokens were cut from the front of the prefix's part, find the
        character they start at (a tokenization more: short prompts only)."""
        fixed = (1 if self.bos is not None else 0) + (8 if self.fim else 0)
        budget = max(0, max_tokens - fixed)
        # The chunks take their tokens from the prefix's budget, at its far end, up to half of
        # it: a prompt with context from other files is no longer, so no slower to evaluate
        # and to decode over, than one without.
        text_budget = min(windows.prefix_tokens, budget)
        chunks = self._chunks(request, min(windows.extra_tokens, text_budget // 2))
        sizes = [len(header) + len(body) + self._between_chunks() for header, body in chunks]
        taken = sum(sizes)
        prefix_budget = text_budget - taken
        prefix_tokens, start = self._prefix_tokens(request.prefix, prefix_budget, prefix_start, locate)
        healed = int(prefix_tokens[-1]) if heal and len(prefix_tokens) else None
        if healed is not None:
            prefix_tokens = prefix_tokens[:-1]
        suffix_tokens = self._suffix_tokens(request.suffix, windows.suffix_tokens)
        used_suffix = suffix_tokens if self.fim else suffix_tokens[:0]
        left = budget - taken - len(prefix_tokens) - len(used_suffix)
        if left < 0:
            used_suffix = _head(used_suffix, len(used_suffix) + left)
        if self.fim:
            tokens = self._fim_layout(request, chunks, prefix_tokens, used_suffix)
        else:
            tokens = self._plain_layout(chunks, prefix_tokens)
        sources = [prefix_tokens, suffix_tokens, *(c for _, c in chunks)]
        used = list(zip(request.extra_context, sizes))
        return Prompt(tokens, [s for s in sources if len(s)], self.fim is not None, healed, start, used)

    def _between_chunks(self) -> int:
        """The tokens that separate one extra chunk from the next."""
        if self.fim is None:
            return len(self._plain_separator)
        return 1 if self.fim.file_separator is not None else 0

    def _prefix_tokens(
        self, prefix: str, budget: int, start: int | None, locate: bool
    ) -> tuple[TokenArray, int | None]:
        """The prefix's tokens in the prompt, and the character they start at (None where
        tokens were cut from their front and `locate` is off or finds none)."""
        if start is not None and 0 <= start <= len(prefix):
            tokens = self.tokenizer.tokenize(prefix[start:])
            if len(tokens) <= budget:
                return tokens, start
        start = stable_prefix_start(prefix, budget * _CHARS_PER_TOKEN)
        tokens = self.tokenizer.tokenize(prefix[start:])
        kept = _tail(tokens, budget)
        if len(kept) == len(tokens) or not locate:
            return kept, start if len(kept) == len(tokens) else None
        # Cut by tokens: the character they start at, where the text from there tokenizes to
        # exactly these tokens (else unknown).
        dropped = self.tokenizer.detokenize(tokens[: len(tokens) - len(kept)]).decode("utf-8", "replace")
        if not prefix.startswith(dropped, start):
            return kept, None
        at = start + len(dropped)
        return kept, at if np.array_equal(self.tokenizer.tokenize(prefix[at:]), kept) else None

    def _suffix_tokens(self, suffix: str, budget: int) -> TokenArray:
        window = budget * _CHARS_PER_TOKEN
        end = suffix.rfind("\n", 0, window) + 1 if len(suffix) > window else len(suffix)
        return _head(self.tokenizer.tokenize(suffix[: end or window]), budget)

    def _chunks(self, request: CompletionRequest, budget: int) -> list[tuple[TokenArray, TokenArray]]:
        """(header, text) tokens of each extra chunk that fits, in the order given."""
        out: list[tuple[TokenArray, TokenArray]] = []
        for chunk in request.extra_context:
            header = self.tokenizer.tokenize(self._chunk_header(request, chunk.path))
            body = self.tokenizer.tokenize(chunk.text)
            room = budget - len(header) - self._between_chunks()
            if room <= 16:
                break
            body = _head(body, room)
            out.append((header, body))
            budget = room - len(body)
        return out

    def _chunk_header(self, request: CompletionRequest, path: str) -> bytes:
        if self.fim and self.fim.file_separator is not None:
            return f"{path}\n".encode()
        return f"{comment_marker(request.path or path)} {path}\n".encode()

    def _plain_layout(self, chunks: list[tuple[TokenArray, TokenArray]], prefix: TokenArray) -> list[int]:
        tokens: list[int] = [] if self.bos is None else [self.bos]
        for header, body in chunks:
            tokens += header.tolist() + body.tolist() + self._plain_separator
        return tokens + [int(t) for t in prefix]

    def _fim_layout(
        self,
        request: CompletionRequest,
        chunks: list[tuple[TokenArray, TokenArray]],
        prefix: TokenArray,
        suffix: TokenArray,
    ) -> list[int]:
        fim = self.fim
        assert fim is not None
        tokens: list[int] = [] if self.bos is None else [self.bos]
        if fim.repository is not None and request.repository:
            tokens += [fim.repository, *self.tokenizer.tokenize(request.repository + "\n").tolist()]
        for header, body in chunks:
            if fim.file_separator is not None:
                tokens.append(fim.file_separator)
            tokens += header.tolist() + body.tolist()
        if fim.file_separator is not None and (chunks or request.path):
            tokens.append(fim.file_separator)
            tokens += self.tokenizer.tokenize(f"{request.path or 'untitled'}\n").tolist()
        tokens += [fim.prefix, *prefix.tolist(), fim.suffix, *suffix.tolist(), fim.middle]
        return tokens


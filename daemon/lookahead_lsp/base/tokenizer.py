"""A GGUF model's tokenizer, through llama-cpp-python's low-level API (llama.cpp loads the
vocabulary only, no weights), and bulk tokenization of files on several cores."""

from __future__ import annotations

import ctypes
import hashlib
import multiprocessing
import os
import signal
import struct
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from pathlib import Path
from types import TracebackType
from typing import Generator, Iterable, Iterator, Mapping

import llama_cpp
import numpy as np
import numpy.typing as npt

from lookahead_lsp._lookup import token_pieces, vocabulary_record
from lookahead_lsp.base.errors import UserError
from lookahead_lsp.base.priority import lower_this_process
from lookahead_lsp.base.llama_log import interrupts_held_back, route_llama_log
from lookahead_lsp.base.safe_reads import open_regular_file

TokenArray = npt.NDArray[np.int32]

# llama.cpp's tokenizer slows down super-linearly with the length of one call's input (ten
# times slower per byte at 1 MB than at 10 KB), so big texts are tokenized in pieces of about
# this size, cut at line ends.
PIECE_BYTES = 16384
# Below this many bytes of input, tokenizing in one process beats starting worker processes
# (each loads its own vocabulary: 1-2 s).
POOL_MIN_BYTES = 4_000_000

_PARENT_POLL_SECONDS = 1.0
_NEWLINE = 0x0A
_INT32_MIN = -(2**31)
_INT32_MAX = 2**31 - 1
class Tokenizer:
    """The vocabulary of one GGUF model. Not thread-safe; one per process or thread."""

    def __init__(
        self, model_path: Path | str, loaded_model: llama_cpp.llama_model_p | None = None
    ) -> None:
        """Loads model_path's vocabulary, or borrows the vocabulary of loaded_model (that file,
        already loaded with its weights by the caller, who keeps ownership of it)."""
        self.model_path = Path(model_path)
        self._owns_model = loaded_model is None
        model = loaded_model if loaded_model is not None else self._load_vocab_only()
        vocab = llama_cpp.llama_model_get_vocab(model)
        if not vocab:
            if self._owns_model:
                with interrupts_held_back():
                    llama_cpp.llama_model_free(model)
            raise UserError(f"{self.model_path} has no vocabulary")
        self._model: llama_cpp.llama_model_p | None = model
        self._vocab: llama_cpp.llama_vocab_p = vocab
        self.n_vocab: int = llama_cpp.llama_vocab_n_tokens(self._vocab)
        self._fingerprint: int | None = None

    def _load_vocab_only(self) -> llama_cpp.llama_model_p:
        route_llama_log()
        params = llama_cpp.llama_model_default_params()
        params.vocab_only = True
        with interrupts_held_back():
            model: llama_cpp.llama_model_p = llama_cpp.llama_model_load_from_file(
                os.fsencode(self.model_path), params
            )
        if not model:
            raise UserError(f"cannot load a vocabulary from {self.model_path} (not a GGUF model?)")
        return model

    def tokenize(
        self, text: str | bytes, add_special: bool = False, parse_special: bool = False
    ) -> TokenArray:
        """Token ids of text (str as UTF-8; bytes need not be valid UTF-8). add_special adds the
        model's BOS/EOS if it wants them; parse_special turns control-token texts such as
        "<start_of_turn>" into those tokens instead of plain text. Prefer tokenize_file_text
        for inputs much longer than PIECE_BYTES."""
        data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        if len(data) > _INT32_MAX:
            raise ValueError("text too long to tokenize in one call")
        # Rarely more tokens than bytes, plus room for BOS/EOS; a negative result says how many.
        capacity = len(data) + 8
        while True:
            tokens = np.empty(capacity, dtype=np.int32)
            count: int = llama_cpp.llama_tokenize(
                self._open_vocab(),
                data,
                len(data),
                tokens.ctypes.data_as(ctypes.POINTER(llama_cpp.llama_token)),
                capacity,
                add_special,
                parse_special,
            )
            if count >= 0:
                return np.array(tokens[:count], dtype=np.int32)  # a copy: frees the spare room
            if count == _INT32_MIN:
                raise ValueError("text has too many tokens to tokenize in one call")
            capacity = -count

    def detokenize(self, tokens: npt.ArrayLike, special: bool = False) -> bytes:
        """The text of token ids: the inverse of tokenize for plain text. special renders
        control tokens as their texts (otherwise they render as nothing)."""
        ids = np.ascontiguousarray(tokens, dtype=np.int32).ravel()
        if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= self.n_vocab):
            raise ValueError(f"token ids must be in [0, {self.n_vocab})")
        capacity = 8 * len(ids) + 16
        while True:
            text = ctypes.create_string_buffer(capacity)
            length: int = llama_cpp.llama_detokenize(
                self._open_vocab(),
                ids.ctypes.data_as(ctypes.POINTER(llama_cpp.llama_token)),
                len(ids),
                text,
                capacity,
                False,
                special,
            )
            if length >= 0:
                return text.raw[:length]
            capacity = -length

    def piece(self, token: int, buffer: ctypes.Array[ctypes.c_char] | None = None) -> bytes:
        """The text of one token as the model writes it, leading space included (control
        tokens: empty). A caller asking for many may lend a buffer of 256 bytes or more."""
        buffer = buffer if buffer is not None else ctypes.create_string_buffer(256)
        length: int = llama_cpp.llama_token_to_piece(self._open_vocab(), token, buffer, len(buffer), 0, False)
        if length < 0:  # longer than the buffer
            buffer = ctypes.create_string_buffer(-length)
            length = llama_cpp.llama_token_to_piece(self._open_vocab(), token, buffer, len(buffer), 0, False)
        return buffer.raw[: max(0, length)]

    def pieces(self) -> tuple[bytes, npt.NDArray[np.uint32]]:
        """Every token's text as piece() gives it, read in one native loop: token i is
        bytes[offsets[i]:offsets[i + 1]]."""
        return token_pieces(_address_of("llama_token_to_piece"), self._open_vocab(), self.n_vocab)

    @property
    def fingerprint(self) -> int:
        """An identity of the vocabulary in [0, 2**64), stored in static cache headers so that a
        cache is refused with another tokenizer: the first 8 bytes, little-endian, of the
        SHA-256 of n_vocab (int64 LE) followed, for each token id in order, by the length of
        its text (uint32 LE), its attribute bits (int32 LE) and its text bytes."""
        if self._fingerprint is None:
            record = vocabulary_record(
                _address_of("llama_vocab_get_text"), _address_of("llama_vocab_get_attr"), self._open_vocab(), self.n_vocab
            )
            digest = hashlib.sha256(struct.pack("<q", self.n_vocab) + record)
            self._fingerprint = int.from_bytes(digest.digest()[:8], "little")
        return self._fingerprint

    def close(self) -> None:
        if self._model is not None and self._owns_model:
            with interrupts_held_back():
                llama_cpp.llama_model_free(self._model)
        self._model = None

    def __enter__(self) -> Tokenizer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def _open_vocab(self) -> llama_cpp.llama_vocab_p:
        if self._model is None:
            raise ValueError("tokenizer is closed")
        return self._vocab


def _address_of(function: str) -> int:
    """The address of one of llama.cpp's functions, for the native loops that call it."""
    address: int | None = ctypes.cast(getattr(llama_cpp.llama_cpp._lib, function), ctypes.c_void_p).value
    if not address:
        raise UserError(f"llama.cpp has no {function}")
    return address


def split_at_lines(data: bytes, piece_bytes: int = PIECE_BYTES) -> list[bytes]:
    """data cut after line ends into pieces of at most piece_bytes; a single line longer than
    that is a piece of its own. The pieces join back to data; empty data has no pieces.

    Where a piece ends is chosen by the text around the cut, not by where the piece began: the
    line, among those ending in the piece's second half, whose bytes hash highest. An edit then
    moves only the cuts near it, and the pieces before and after it stay the same bytes, which
    tokenize_edited_text relies on."""
    if len(data) <= piece_bytes:
        return [data] if data else []
    ends = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == _NEWLINE)
    marks = _line_marks(data, ends)
    pieces = []
    start = 0
    while len(data) - start > piece_bytes:
        low, high = np.searchsorted(ends, [start + piece_bytes // 2, start + piece_bytes])
        if high > low:
            cut = int(ends[low + int(np.argmax(marks[low:high]))])
        elif high > 0 and ends[high - 1] >= start:
            cut = int(ends[high - 1])  # no line ends in the second half: the piece's last one
        elif high < len(ends):
            cut = int(ends[high])  # a line longer than a piece
        else:
            break
        pieces.append(data[start : cut + 1])
        start = cut + 1
    if start < len(data):
        pieces.append(data[start:])
    return pieces


def _line_marks(data: bytes, ends: npt.NDArray[np.intp]) -> npt.NDArray[np.uint64]:
    """A hash of each line's bytes, its newline included (ends: the newlines' offsets): the
    sum of a weight per pair of adjacent bytes, then mixed, so that it is computed for all
    lines at once and depends on the line alone."""
    if len(ends) == 0:
        return np.empty(0, dtype=np.uint64)
    text = np.frombuffer(data, dtype=np.uint8, count=int(ends[-1]) + 1).astype(np.uint16)
    pairs = np.empty_like(text)
    pairs[0] = _NEWLINE << 8  # a line's first pair is (newline, first byte) wherever it sits
    pairs[1:] = text[:-1] << 8
    pairs |= text
    running = np.cumsum(_PAIR_WEIGHTS[pairs])[ends]  # uint64: wraps around, as wanted
    return _mixed(np.diff(running, prepend=np.uint64(0)))


def _mixed(values: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """SplitMix64's finalizer: every input bit moves every output bit."""
    z: npt.NDArray[np.uint64] = values + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z ^= z >> np.uint64(31)
    return z


# The line hash's weight of each pair of adjacent bytes. Fixed in effect: where pieces end
# decides a few tokens at each cut, and so the bytes of every cache built.
_PAIR_WEIGHTS = _mixed(np.arange(1 << 16, dtype=np.uint64))


def tokenize_file_text(
    tokenizer: Tokenizer, data: bytes, add_special: bool = False, parse_special: bool = False
) -> TokenArray:
    """The tokens of a whole file's text, tokenized in line-aligned pieces (see PIECE_BYTES).
    By default no BOS/EOS and control-token texts stay plain text; add_special applies to the
    first piece only (the start of the text), parse_special to every piece."""
    pieces = [
        tokenizer.tokenize(piece, add_special=add_special and i == 0, parse_special=parse_special)
        for i, piece in enumerate(split_at_lines(data))
    ]
    return _joined(pieces)


def tokenize_edited_text(
    tokenizer: Tokenizer, data: bytes, known: Mapping[bytes, TokenArray]
) -> tuple[TokenArray, dict[bytes, TokenArray]]:
    """tokenize_file_text's tokens of data, reusing those of the pieces in `known` (an earlier
    version's pieces): a piece's tokens depend on its bytes alone, and an edit leaves the pieces
    before it, and usually those after it, the same bytes, so a keystroke in a large document
    tokenizes one piece or two. Also returns data's pieces with their tokens, the `known` of
    the next version."""
    pieces: dict[bytes, TokenArray] = {}
    parts = []
    for piece in split_at_lines(data):
        tokens = pieces.get(piece)
        if tokens is None:
            tokens = known.get(piece)
        if tokens is None:
            tokens = tokenizer.tokenize(piece, add_special=False, parse_special=False)
        pieces[piece] = tokens
        parts.append(tokens)
    return _joined(parts), pieces


def _joined(parts: list[TokenArray]) -> TokenArray:
    if not parts:
        return np.empty(0, dtype=np.int32)
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _read_and_tokenize(tokenizer: Tokenizer, path: Path) -> tuple[TokenArray | None, int]:
    data = _read_listed_file(path)
    if data is None:
        return None, 0
    return tokenize_file_text(tokenizer, data), len(data)


def _read_listed_file(path: Path) -> bytes | None:
    """The bytes of a file the listing accepted, or None when it is no longer a regular file
    (swapped for a FIFO or a device since it was listed: never waited on, never read),
    vanished or unreadable."""
    try:
        with open_regular_file(path) as (file, _):
            return file.read()
    except OSError:
        return None


# The tokenizer of a tokenize_files() worker process, loaded by the pool's initializer: a
# module global is the only place a pool worker can keep state between tasks.
_worker_tokenizer: Tokenizer | None = None


def _start_worker(model_path: str, parent: int) -> None:
    global _worker_tokenizer
    # Ctrl-C reaches the whole process group; the parent alone handles it (it stops the pool).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # A completion asked for while a large folder is tokenized would otherwise wait for these.
    lower_this_process()
    threading.Thread(target=_exit_with_parent, args=(parent,), daemon=True).start()
    _worker_tokenizer = Tokenizer(model_path)


def _exit_with_parent(parent: int) -> None:
    # A parent killed outright (kill -9, the OOM killer) cannot stop its pool, and an idle
    # worker would wait for its next file forever.
    while os.getppid() == parent:
        time.sleep(_PARENT_POLL_SECONDS)
    os._exit(1)


def _tokenize_in_worker(path: str) -> tuple[TokenArray | None, int]:
    assert _worker_tokenizer is not None, "worker started without its initializer"
    return _read_and_tokenize(_worker_tokenizer, Path(path))


def tokenize_files(
    model_path: Path,
    paths: Iterable[Path],
    jobs: int = 2,
    tokenizer: Tokenizer | None = None,
) -> Generator[tuple[Path, TokenArray | None, int], None, None]:
    """(path, tokens, bytes read) for each file, as files complete (not in input order);
    tokens None when the file vanished or cannot be read. Each file is tokenized by
    tokenize_file_text. jobs > 1 uses that many worker processes, each loading its own
    tokenizer; jobs == 1 tokenizes in this process, with `tokenizer` if given (it must be
    model_path's). Close the iterator (or exhaust it) to stop the workers."""
    if jobs <= 1:
        if tokenizer is not None:
            yield from _tokenize_here(tokenizer, paths)
        else:
            with Tokenizer(model_path) as own:
                yield from _tokenize_here(own, paths)
        return
    # spawn, not fork: the parent may hold llama.cpp state and threads that a fork would copy.
    pool = ProcessPoolExecutor(
        max_workers=jobs,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=_start_worker,
        initargs=(str(model_path), os.getpid()),
    )
    try:
        yield from _completed_in_pool(pool, iter(paths), in_flight=4 * jobs)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _tokenize_here(
    tokenizer: Tokenizer, paths: Iterable[Path]
) -> Iterator[tuple[Path, TokenArray | None, int]]:
    for path in paths:
        yield (path, *_read_and_tokenize(tokenizer, path))


def _completed_in_pool(
    pool: ProcessPoolExecutor, paths: Iterator[Path], in_flight: int
) -> Iterator[tuple[Path, TokenArray | None, int]]:
    # A bounded window of submitted files keeps memory flat on huge repositories while giving
    # every worker a queue to take its next file from.
    pending: dict[Future[tuple[TokenArray | None, int]], Path] = {}

    def refill() -> None:
        while len(pending) < in_flight:
            path = next(paths, None)
            if path is None:
                return
            pending[pool.submit(_tokenize_in_worker, str(path))] = path

    refill()
    while pending:
        done, _ = wait(pending, return_when=FIRST_COMPLETED)
        finished = [(pending.pop(future), *future.result()) for future in done]
        refill()
        yield from finished

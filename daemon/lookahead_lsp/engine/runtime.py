"""One GGUF model and one llama.cpp context, driven through llama-cpp-python's low-level API:
batches whose tokens may belong to several KV-cache sequences at once, per-position logits,
and the KV cache kept between requests so that a new prompt only evaluates what changed."""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import llama_cpp
import numpy as np
import numpy.typing as npt

from lookahead_lsp.errors import UserError
from lookahead_lsp.llama_log import interrupts_held_back, route_llama_log
from lookahead_lsp.tokenizer import Tokenizer

Logits = npt.NDArray[np.float32]

# Sequence 0 holds the accepted tokens; the others exist only during one decoding step.
MAIN_SEQ = 0


class EngineError(RuntimeError):
    """llama.cpp refused a batch (no room left in the KV cache, or an internal failure)."""


class Cancelled(Exception):
    """The request was cancelled between two model passes."""


@dataclass(frozen=True)
class RuntimeSettings:
    model_path: Path
    n_ctx: int = 4096
    # None: every core llama.cpp sees (os.cpu_count()).
    n_threads: int | None = None
    # -1: every layer on the GPU when llama.cpp was built with one; no effect on a CPU build.
    n_gpu_layers: int = -1
    # Upper bound on the sequences of one step: draft branches plus lookahead window columns.
    n_seq_max: int = 32
    # The largest batch one llama_decode may carry (prompt chunks and speculative steps).
    n_batch: int = 512

    @property
    def threads(self) -> int:
        return self.n_threads or os.cpu_count() or 1


class Batch:
    """A reusable llama_batch of up to `capacity` tokens, filled token by token."""

    def __init__(self, capacity: int, n_seq_max: int) -> None:
        self.capacity = capacity
        self.n_seq_max = n_seq_max
        self._batch = llama_cpp.llama_batch_init(capacity, 0, n_seq_max)
        b = self._batch
        self._token = np.ctypeslib.as_array(b.token, shape=(capacity,))
        self._pos = np.ctypeslib.as_array(b.pos, shape=(capacity,))
        self._n_seq_id = np.ctypeslib.as_array(b.n_seq_id, shape=(capacity,))
        self._logits = np.ctypeslib.as_array(b.logits, shape=(capacity,))
        self._seq_ids = [np.ctypeslib.as_array(b.seq_id[i], shape=(n_seq_max,)) for i in range(capacity)]
        self.size = 0
        self.n_outputs = 0

    def clear(self) -> None:
        self.size = 0
        self.n_outputs = 0

    def add(self, token: int, pos: int, seqs: Sequence[int], logits: bool) -> int:
        """Appends a token; returns its output row (or -1 without logits)."""
        if self.size >= self.capacity:
            raise EngineError(f"batch full ({self.capacity} tokens)")
        if not seqs or len(seqs) > self.n_seq_max:
            raise EngineError(f"a token needs 1..{self.n_seq_max} sequences, got {len(seqs)}")
        i = self.size
        self._token[i] = token
        self._pos[i] = pos
        self._n_seq_id[i] = len(seqs)
        self._seq_ids[i][: len(seqs)] = seqs
        self._logits[i] = logits
        self.size += 1
        if not logits:
            return -1
        self.n_outputs += 1
        return self.n_outputs - 1

    @property
    def native(self) -> llama_cpp.llama_batch:
        self._batch.n_tokens = self.size
        batch: llama_cpp.llama_batch = self._batch
        return batch

    def free(self) -> None:
        if self.capacity:
            llama_cpp.llama_batch_free(self._batch)
            self.capacity = 0


class ModelRuntime:
    """The model, its context and the KV cache's bookkeeping. `kv_tokens` lists exactly the
    tokens that sequence 0 holds, at positions 0..len - 1. Not thread-safe: one request at a time."""

    def __init__(self, settings: RuntimeSettings) -> None:
        self.settings = settings
        path = settings.model_path
        if not path.is_file():
            raise UserError(f"model file not found: {path}")
        route_llama_log()
        model_params = llama_cpp.llama_model_default_params()
        model_params.n_gpu_layers = settings.n_gpu_layers
        with interrupts_held_back():
            model = llama_cpp.llama_model_load_from_file(os.fsencode(path), model_params)
        if not model:
            raise UserError(f"cannot load the model {path} (not a GGUF model llama.cpp can read?)")
        self._model: llama_cpp.llama_model_p | None = model
        ctx_params = llama_cpp.llama_context_default_params()
        ctx_params.n_ctx = settings.n_ctx
        ctx_params.n_batch = settings.n_batch
        ctx_params.n_ubatch = settings.n_batch
        ctx_params.n_seq_max = settings.n_seq_max
        # One cell pool for all sequences: otherwise each gets n_ctx / n_seq_max cells.
        ctx_params.kv_unified = True
        # Sliding-window layers keep every cell, so rejected drafts can be removed from the end.
        ctx_params.swa_full = True
        ctx_params.n_threads = settings.threads
        ctx_params.n_threads_batch = settings.threads
        ctx_params.no_perf = True
        with interrupts_held_back():
            ctx = llama_cpp.llama_init_from_model(model, ctx_params)
        if not ctx:
            llama_cpp.llama_model_free(model)
            self._model = None
            raise UserError(f"cannot create a llama.cpp context for {path} (n_ctx {settings.n_ctx})")
        self._ctx: llama_cpp.llama_context_p | None = ctx
        self._memory = llama_cpp.llama_get_memory(ctx)
        self.tokenizer = Tokenizer(path, loaded_model=model)
        self.vocab = llama_cpp.llama_model_get_vocab(model)
        self.n_vocab = self.tokenizer.n_vocab
        self.n_ctx = llama_cpp.llama_n_ctx(ctx)
        self.batch = Batch(settings.n_batch, settings.n_seq_max)
        self.kv_tokens: list[int] = []

    @property
    def gpu_offload(self) -> bool:
        return bool(llama_cpp.llama_supports_gpu_offload()) and self.settings.n_gpu_layers != 0

    def is_end_of_generation(self, token: int) -> bool:
        return bool(llama_cpp.llama_vocab_is_eog(self.vocab, token))

    def special_token(self, getter: Callable[[llama_cpp.llama_vocab_p], int]) -> int | None:
        """A special token id from llama_vocab_* (e.g. llama_vocab_fim_pre), None if absent."""
        token = int(getter(self.vocab))
        return token if 0 <= token < self.n_vocab else None

    def metadata(self, key: str) -> str | None:
        size = 256
        while True:
            buffer = ctypes.create_string_buffer(size)
            n = llama_cpp.llama_model_meta_val_str(self._open_model(), key.encode(), buffer, size)
            if n < 0:
                return None
            if n < size:
                return buffer.value.decode("utf-8", "replace")
            size = n + 1

    # -- the KV cache ------------------------------------------------------------------------

    def keep_prefix(self, tokens: Sequence[int]) -> int:
        """Drops every cell after the longest common prefix of the cache and `tokens`; returns
        its length (the number of tokens that need no evaluation)."""
        n = self.common_prefix(tokens)
        self.truncate(n)
        return n

    def common_prefix(self, tokens: Sequence[int]) -> int:
        """How many leading tokens of `tokens` the cache holds already."""
        n = 0
        limit = min(len(self.kv_tokens), len(tokens))
        kv = self.kv_tokens
        while n < limit and kv[n] == tokens[n]:
            n += 1
        return n

    def truncate(self, n_keep: int) -> None:
        """Keeps the first n_keep accepted tokens, in every sequence; drops every other cell,
        including those of a step whose tokens were never accepted."""
        if not llama_cpp.llama_memory_seq_rm(self._memory, -1, n_keep, -1):
            self.clear()
            if n_keep:
                raise EngineError("the KV cache could not drop its tail")
        del self.kv_tokens[n_keep:]

    def clear(self) -> None:
        llama_cpp.llama_memory_clear(self._memory, True)
        self.kv_tokens.clear()

    def mirror_main(self, seq: int) -> None:
        """Makes `seq` see every accepted token (the cells are shared, not copied)."""
        llama_cpp.llama_memory_seq_cp(self._memory, MAIN_SEQ, seq, -1, -1)

    def accept_branch(self, seq: int, accepted: Sequence[int], multi_seq: bool) -> None:
        """After a step: keeps the accepted tokens, which sit in sequence `seq` right after the
        known ones, as the new end of sequence 0, and drops every other cell of the step.
        multi_seq says whether the step used sequences other than 0."""
        n_keep = len(self.kv_tokens) + len(accepted)
        mem = self._memory
        if multi_seq:
            llama_cpp.llama_memory_seq_keep(mem, seq)
        if not llama_cpp.llama_memory_seq_rm(mem, seq, n_keep, -1):
            self.clear()
            raise EngineError("the KV cache could not drop rejected tokens")
        if seq != MAIN_SEQ:
            llama_cpp.llama_memory_seq_cp(mem, seq, MAIN_SEQ, -1, -1)
            llama_cpp.llama_memory_seq_rm(mem, seq, -1, -1)
        self.kv_tokens.extend(accepted)

    # -- evaluation --------------------------------------------------------------------------

    def prefill(self, tokens: Sequence[int], chunk: int, cancelled: Callable[[], bool]) -> int:
        """Makes sequence 0 hold exactly `tokens`, evaluating only those after the common prefix,
        in chunks of at most `chunk` tokens (no logits). Raises Cancelled between chunks, leaving
        the cache consistent with what was evaluated. Returns the number of tokens evaluated."""
        if len(tokens) > self.n_ctx:
            raise EngineError(f"{len(tokens)} prompt tokens do not fit a context of {self.n_ctx}")
        start = self.keep_prefix(tokens)
        chunk = max(1, min(chunk, self.batch.capacity))
        for begin in range(start, len(tokens), chunk):
            if cancelled():
                raise Cancelled
            self.batch.clear()
            piece = tokens[begin : begin + chunk]
            for offset, token in enumerate(piece):
                self.batch.add(token, begin + offset, (MAIN_SEQ,), False)
            self._decode()
            self.kv_tokens.extend(piece)
        return len(tokens) - start

    def decode_batch(self) -> Logits:
        """Evaluates the filled batch; returns its logits, one row per output (in batch order).
        The rows are a view, valid until the next decode."""
        self._decode()
        n_out = self.batch.n_outputs
        if n_out == 0:
            return np.empty((0, self.n_vocab), dtype=np.float32)
        pointer = llama_cpp.llama_get_logits(self._open_ctx())
        return np.ctypeslib.as_array(pointer, shape=(n_out, self.n_vocab))

    def _decode(self) -> None:
        status = llama_cpp.llama_decode(self._open_ctx(), self.batch.native)
        if status != 0:
            # The cells of a failed batch may be partly written: start from a clean cache.
            self.clear()
            reason = "no room left in the KV cache" if status == 1 else f"status {status}"
            raise EngineError(f"llama_decode failed: {reason}")

    # -- lifetime ----------------------------------------------------------------------------

    def close(self) -> None:
        self.batch.free()
        self.tokenizer.close()
        if self._ctx is not None:
            llama_cpp.llama_free(self._ctx)
            self._ctx = None
        if self._model is not None:
            with interrupts_held_back():
                llama_cpp.llama_model_free(self._model)
            self._model = None

    def _open_ctx(self) -> llama_cpp.llama_context_p:
        if self._ctx is None:
            raise EngineError("the model runtime is closed")
        return self._ctx

    def _open_model(self) -> llama_cpp.llama_model_p:
        if self._model is None:
            raise EngineError("the model runtime is closed")
        return self._model

"""One GGUF model and one llama.cpp context, driven through llama-cpp-python's low-level API:
batches whose tokens may belong to several KV-cache sequences at once, the model's choice at
each position that asks for one, and the KV cache kept between requests so that a new prompt
only evaluates what changed.

The model's choice is the argmax of the position's logits row (262,144 floats with the default
model). With backend sampling, a greedy sampler in llama.cpp's graph takes it where the model
runs and only the token id comes back; with host sampling the whole row is copied back and numpy
takes it. Both give the same token (ties aside: both are an argmax)."""

from __future__ import annotations

import ctypes
import logging
import os
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import llama_cpp
import numpy as np
import numpy.typing as npt

from lookahead_lsp._lookup import PASS_INTERRUPT_CALLBACK, PassInterrupt
from lookahead_lsp.engine.batch import Batch
from lookahead_lsp.engine.batch import EngineError as EngineError  # callers catch it from here
from lookahead_lsp.base.errors import UserError
from lookahead_lsp.base.llama_log import interrupts_held_back, route_llama_log
from lookahead_lsp.base.tokenizer import Tokenizer

Logits = npt.NDArray[np.float32]
_LOG = logging.getLogger(__name__)

# Sequence 0 holds the accepted tokens; the others exist only during one decoding step.
MAIN_SEQ = 0
# Where each position's argmax is taken (module docstring). "auto": on the backend where the
# model runs on a GPU, where the row's copy is what a pass waits for; on the host on a CPU,
# where numpy's vectorised argmax beats ggml's one-thread scalar loop.
SAMPLING_MODES = ("auto", "backend", "host")
_GGML_DEVICE_GPU, _GGML_DEVICE_IGPU = 1, 2
# A prompt evaluated in passes of a given time: its first pass (its cost per token is not known
# yet; small, so that a request arriving at once waits little), and the step chunks are rounded
# down to (a cost per token that varies by a few tokens would change the size at every pass).
_FIRST_TIMED_CHUNK = 32
# What a prompt token costs is learnt from prompt passes of at least this many tokens (a smaller
# one is mostly the pass's fixed cost), each moving the estimate this far towards its own.
_COSTED_PASS = 32
_COST_WEIGHT = 0.3
_TIMED_CHUNK_STEP = 16
# What llama_decode returns for a pass its abort callback ended.
_DECODE_ABORTED = 2


class Cancelled(Exception):
    """The request was cancelled between two model passes, or during one that its interrupt
    ended (the cache then holds what it held before that pass)."""


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
    sampling: str = "auto"  # one of SAMPLING_MODES

    def __post_init__(self) -> None:
        if self.sampling not in SAMPLING_MODES:
            raise ValueError(f"sampling must be one of {', '.join(SAMPLING_MODES)}, not {self.sampling!r}")

    @property
    def threads(self) -> int:
        return self.n_threads or os.cpu_count() or 1


@dataclass(frozen=True)
class KvState:
    """Sequence 0's cells copied to host memory (llama.cpp's sequence state), with the tokens
    they hold: put back, they spare those tokens' evaluation."""

    tokens: tuple[int, ...]
    data: ctypes.Array[ctypes.c_uint8]

    @property
    def nbytes(self) -> int:
        return len(self.data)


@dataclass
class PassOutput:
    """What one llama_decode gave back, one entry per output position in batch order."""

    tokens: list[int]  # the model's choice (argmax) at each output position
    logits: Logits | None  # the rows themselves, when they came to the host (a view, valid
    # until the next decode)


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
        self.backend = _model_device(self.gpu_offload)
        wanted = settings.sampling if settings.sampling != "auto" else ("host" if self.backend == "CPU" else "backend")
        # One greedy chain per sequence the engine uses. The extra sequence after them has none:
        # a batch with a token in it brings every output's logits row to the host as well.
        self._samplers = [_greedy_chain() for _ in range(settings.n_seq_max)] if wanted == "backend" else []
        self.sampling = wanted
        ctx_params = llama_cpp.llama_context_default_params()
        ctx_params.n_ctx = settings.n_ctx
        ctx_params.n_batch = settings.n_batch
        ctx_params.n_ubatch = settings.n_batch
        ctx_params.n_seq_max = settings.n_seq_max + 1
        # A step verifies a whole branch of one sequence in one pass.
        ctx_params.n_outputs_max_per_seq = settings.n_batch
        if self._samplers:
            configs = (llama_cpp.llama_sampler_seq_config * len(self._samplers))()
            for seq, chain in enumerate(self._samplers):
                configs[seq].seq_id = seq
                configs[seq].sampler = ctypes.cast(chain, ctypes.c_void_p)
            ctx_params.samplers = configs
            ctx_params.n_samplers = len(configs)
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
            self._free_samplers()
            llama_cpp.llama_model_free(model)
            self._model = None
            raise UserError(f"cannot create a llama.cpp context for {path} (n_ctx {settings.n_ctx})")
        self._ctx: llama_cpp.llama_context_p | None = ctx
        self._memory = llama_cpp.llama_get_memory(ctx)
        self.tokenizer = Tokenizer(path, loaded_model=model)
        self.vocab = llama_cpp.llama_model_get_vocab(model)
        self.n_vocab = self.tokenizer.n_vocab
        self.n_ctx = llama_cpp.llama_n_ctx(ctx)
        self.batch = Batch(settings.n_batch, settings.n_seq_max + 1)
        self.kv_tokens: list[int] = []
        # What evaluating a prompt token costs now, in ms (None until a prompt pass was timed).
        self.prompt_token_ms: float | None = None
        # Passes whose every choice came from the backend samplers (what tests check).
        self.backend_passes = 0
        self._abort_callback = llama_cpp.ggml_abort_callback(PASS_INTERRUPT_CALLBACK)
        # The interrupt llama.cpp reads during passes, kept alive while it may read it.
        self._interrupt: PassInterrupt | None = None

    @property
    def gpu_offload(self) -> bool:
        return bool(llama_cpp.llama_supports_gpu_offload()) and self.settings.n_gpu_layers != 0

    @property
    def logits_seq(self) -> int | None:
        """A sequence without a backend sampler, None when every output's row comes to the host
        anyway. A step that needs logits (token healing, a trace) puts one of its tokens in it
        too; the sequence holds nothing between steps."""
        return self.settings.n_seq_max if self.sampling == "backend" else None

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

    def save_state(self) -> KvState:
        """A copy of what sequence 0 holds (a few MiB per thousand tokens with the default
        model; milliseconds)."""
        ctx = self._open_ctx()
        size = llama_cpp.llama_state_seq_get_size(ctx, MAIN_SEQ)
        data = (ctypes.c_uint8 * size)()
        if llama_cpp.llama_state_seq_get_data(ctx, data, size, MAIN_SEQ) != size:
            raise EngineError("the KV cache's state could not be copied")
        return KvState(tuple(self.kv_tokens), data)

    def load_state(self, state: KvState) -> None:
        """Makes sequence 0 hold exactly what `state` was saved with; every other cell goes."""
        self.clear()
        if llama_cpp.llama_state_seq_set_data(self._open_ctx(), state.data, len(state.data), MAIN_SEQ) == 0:
            self.clear()
            raise EngineError("the KV cache's state could not be restored")
        self.kv_tokens = list(state.tokens)

    def set_threads(self, n: int) -> None:
        """The threads of the next passes (llama.cpp takes the change at the next decode)."""
        llama_cpp.llama_set_n_threads(self._open_ctx(), n, n)

    @contextmanager
    def interrupted_by(self, interrupt: PassInterrupt) -> Iterator[None]:
        """Within: once `interrupt` is raised, the pass under way ends after the graph node it is
        computing (CPU backend; others finish the pass) and raises Cancelled."""
        ctx = self._open_ctx()
        self._interrupt = interrupt
        llama_cpp.llama_set_abort_callback(ctx, self._abort_callback, ctypes.c_void_p(interrupt.address))
        try:
            yield
        finally:
            llama_cpp.llama_set_abort_callback(ctx, llama_cpp.ggml_abort_callback(), None)
            self._interrupt = None

    # -- evaluation --------------------------------------------------------------------------

    def prefill(
        self, tokens: Sequence[int], chunk: int, cancelled: Callable[[], bool], pass_ms: float | None = None
    ) -> int:
        """Makes sequence 0 hold exactly `tokens`, evaluating only those after the common prefix,
        in chunks of at most `chunk` tokens (no logits); with pass_ms, each chunk is sized to take
        about that long from the last one's time per token (the first is small: its time is not
        known yet). Raises Cancelled between chunks (or within one, see interrupted_by), leaving
        the cache consistent with what was evaluated. Returns the number of tokens evaluated."""
        if len(tokens) > self.n_ctx:
            raise EngineError(f"{len(tokens)} prompt tokens do not fit a context of {self.n_ctx}")
        start = begin = self.keep_prefix(tokens)
        chunk = max(1, min(chunk, self.batch.capacity))
        size = chunk if pass_ms is None else min(chunk, _FIRST_TIMED_CHUNK)
        while begin < len(tokens):
            if cancelled():
                raise Cancelled
            self.batch.clear()
            piece = tokens[begin : begin + size]
            self.batch.add_run(piece, begin, MAIN_SEQ)
            began = time.perf_counter()
            self._decode()
            self.kv_tokens.extend(piece)
            begin += len(piece)
            per_token_ms = max(1e-6, (time.perf_counter() - began) * 1000 / len(piece))
            if len(piece) >= _COSTED_PASS:
                known = self.prompt_token_ms
                self.prompt_token_ms = per_token_ms if known is None else known + _COST_WEIGHT * (per_token_ms - known)
            if pass_ms is not None:
                fits = int(pass_ms / per_token_ms) // _TIMED_CHUNK_STEP * _TIMED_CHUNK_STEP
                size = max(min(_TIMED_CHUNK_STEP, chunk), min(chunk, fits))
        return len(tokens) - start

    def decode_batch(self) -> PassOutput:
        """Evaluates the filled batch; returns the model's choice at each output position and,
        on the host path or when a token of the batch is in `logits_seq`, the logits rows."""
        self._decode()
        batch = self.batch
        if batch.n_outputs == 0:
            return PassOutput([], None)
        # A token in logits_seq brings every row to the host and takes its own row off the
        # backend samplers: the whole pass is then taken on the host.
        if self.sampling == "backend" and not batch.has_seq(self.logits_seq):
            ctx = self._open_ctx()
            tokens = [llama_cpp.llama_get_sampled_token_ith(ctx, int(i)) for i in batch.output_positions()]
            if llama_cpp.LLAMA_TOKEN_NULL not in tokens:
                self.backend_passes += 1
                return PassOutput(tokens, None)
            self._stop_backend_sampling()
            # The batch's cells come off again (none of its tokens is accepted yet): evaluated
            # once more, its rows come to the host.
            self.truncate(len(self.kv_tokens))
            self._decode()
        rows = self._logits_rows()
        return PassOutput(np.argmax(rows, axis=1).tolist(), rows)

    def _logits_rows(self) -> Logits:
        pointer = llama_cpp.llama_get_logits(self._open_ctx())
        return np.ctypeslib.as_array(pointer, shape=(self.batch.n_outputs, self.n_vocab))

    def _stop_backend_sampling(self) -> None:
        _LOG.warning("backend sampling gave no token on %s: taking the argmax on the host", self.backend)
        ctx = self._open_ctx()
        for seq in range(len(self._samplers)):
            llama_cpp.llama_set_sampler(ctx, seq, None)
        self.sampling = "host"

    def _decode(self) -> None:
        status = llama_cpp.llama_decode(self._open_ctx(), self.batch.native)
        if status == _DECODE_ABORTED:
            # llama.cpp took the pass's cells back from each token's first sequence; cells the
            # other sequences of a step shared go here.
            self.truncate(len(self.kv_tokens))
            raise Cancelled
        if status != 0:
            # The cells of a failed batch may be partly written: start from a clean cache.
            self.clear()
            reason = "no room left in the KV cache" if status == 1 else f"status {status}"
            raise EngineError(f"llama_decode failed: {reason}")

    # -- lifetime ----------------------------------------------------------------------------

    def close(self) -> None:
        self.tokenizer.close()
        if self._ctx is not None:
            llama_cpp.llama_free(self._ctx)
            self._ctx = None
        self._free_samplers()
        if self._model is not None:
            with interrupts_held_back():
                llama_cpp.llama_model_free(self._model)
            self._model = None

    def _free_samplers(self) -> None:
        # After the context: it refers to them until freed.
        for chain in self._samplers:
            llama_cpp.llama_sampler_free(chain)
        self._samplers = []

    def _open_ctx(self) -> llama_cpp.llama_context_p:
        if self._ctx is None:
            raise EngineError("the model runtime is closed")
        return self._ctx

    def _open_model(self) -> llama_cpp.llama_model_p:
        if self._model is None:
            raise EngineError("the model runtime is closed")
        return self._model


def _greedy_chain() -> llama_cpp.llama_sampler_p:
    chain: llama_cpp.llama_sampler_p = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
    llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_greedy())
    return chain


def _model_device(gpu_offload: bool) -> str:
    """The device that runs the model, as ggml names it ("CPU", "CUDA0", "Metal"...): the GPUs
    llama.cpp offloads to by default (dedicated ones, else integrated ones), joined by "+"."""
    if not gpu_offload:
        return "CPU"
    ggml = _ggml_device_api()
    devices = [ggml.ggml_backend_dev_get(i) for i in range(ggml.ggml_backend_dev_count())]
    for kind in (_GGML_DEVICE_GPU, _GGML_DEVICE_IGPU):
        names = [ggml.ggml_backend_dev_name(d).decode() for d in devices if ggml.ggml_backend_dev_type(d) == kind]
        if names:
            return "+".join(names)
    return "CPU"


def _ggml_device_api() -> ctypes.CDLL:
    """ggml's device registry, which llama-cpp-python does not bind: looked up through the
    llama library it loaded (its dependencies included), never by loading a libggml of our own,
    which could be a second copy from another folder (LLAMA_CPP_LIB_PATH)."""
    lib: ctypes.CDLL = llama_cpp.llama_cpp._lib
    lib.ggml_backend_dev_count.restype = ctypes.c_size_t
    lib.ggml_backend_dev_count.argtypes = []
    lib.ggml_backend_dev_get.restype = ctypes.c_void_p
    lib.ggml_backend_dev_get.argtypes = [ctypes.c_size_t]
    lib.ggml_backend_dev_name.restype = ctypes.c_char_p
    lib.ggml_backend_dev_name.argtypes = [ctypes.c_void_p]
    lib.ggml_backend_dev_type.restype = ctypes.c_int
    lib.ggml_backend_dev_type.argtypes = [ctypes.c_void_p]
    return lib

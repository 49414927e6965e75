"""The speculative completion engine: one model, one KV cache, one completion at a time.

Modes (planning.py) differ only in what a pass proposes; one step verifies it (completion.py).
Every pass is timed, loop work included, and the timings keep the cost curve current; what auto
learns is saved per model in the cache folder (calibration.py) and loaded by the next Engine."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable

import llama_cpp

from lookahead_lsp.base.cache_files import default_cache_dir
from lookahead_lsp.engine import calibration, cost_model
from lookahead_lsp.engine.cold_prompt import GROWTH, WHOLE_OVER_SHORT, ShortLengths
from lookahead_lsp.engine.completion import CompletionRun, RunInputs
from lookahead_lsp.engine.cost_model import CostModel, OnlineCost
from lookahead_lsp.engine.healing import TokenPrefixes, mid_word
from lookahead_lsp.engine.kv_states import MIN_GAIN_TOKENS, KvStates
from lookahead_lsp.engine.options import CancelToken, DecodeOptions, DraftCaches, EngineSettings, step_room
from lookahead_lsp.engine.policy import AutoPolicy
from lookahead_lsp.engine.prompt import CompletionRequest, ContextChunk, FimTokens, Prompt, PromptBuilder
from lookahead_lsp.engine.results import Completion
from lookahead_lsp.engine.runtime import Cancelled, ModelRuntime, RuntimeSettings
from lookahead_lsp.engine.stages import INDEXING_VOCABULARY
from lookahead_lsp.engine.threads import ThreadChooser
from lookahead_lsp.engine.threads import sample as cpu_sample

# The calibration is saved after a completion at most this often (and when the engine closes).
_SAVE_EVERY_S = 60.0


class Engine:
    """One model, one KV cache, one completion at a time (callers serialise requests)."""

    def __init__(self, settings: EngineSettings) -> None:
        self.settings = settings
        started = cpu_sample()  # loading the model is the first look at the machine's load
        self.runtime = ModelRuntime(
            RuntimeSettings(
                settings.model_path,
                settings.n_ctx,
                settings.n_threads,
                settings.n_gpu_layers,
                sampling=settings.sampling,
            )
        )
        self.tokenizer = self.runtime.tokenizer
        self.prompts = PromptBuilder(self.tokenizer, self._bos(), self._fim_tokens())
        self._token_prefixes: TokenPrefixes | None = None
        # The last request's owner, its text before the cursor and everything it generated: the
        # "previous" draft source, for the next request of the same owner.
        self.previous: tuple[str, str, str] | None = None
        self.kv_states = KvStates(settings.kv_state_mib * 2**20)
        # The owner of the KV cache's prompt (its state is saved under that name),
        # and the extra context that prompt was built with.
        self._kv_owner: str | None = None
        self._kv_context: tuple[ContextChunk, ...] = ()
        self._short = ShortLengths()
        self.threads = ThreadChooser(settings.n_threads, self.runtime.settings.threads, since=started)
        self._cache_dir = settings.cache_dir or default_cache_dir()
        self._model_identity = calibration.model_identity(settings.model_path)
        self._machine = cost_model.machine_key(self.runtime)
        self._calibration_path = calibration.calibration_path(self._cache_dir, self._model_identity)
        self._calibration = calibration.load(self._calibration_path, self._model_identity, self._machine)
        self._policy: AutoPolicy | None = None
        self._saved_at = time.monotonic()
        self._saver: threading.Thread | None = None

    @property
    def backend(self) -> str:
        """The device that runs the model, as ggml names it: "CPU", "CUDA0", "Metal"..."""
        return self.runtime.backend

    @property
    def sampling(self) -> str:
        """Where each verified position's argmax is taken: "backend" or "host"."""
        return self.runtime.sampling

    def prepare(self, report: Callable[[str], None] | None = None) -> None:
        """Does now what the first completion would otherwise wait for: measures this machine's
        pass cost curve (once per machine and model; a few seconds) and builds the vocabulary
        index token healing looks in (a second or two). report(stage) is told of each step
        that takes seconds before it starts."""
        self.auto_policy(report)
        if self._token_prefixes is None and report is not None:
            report(INDEXING_VOCABULARY)
        self.token_prefixes()

    def auto_policy(self, report: Callable[[str], None] | None = None) -> AutoPolicy:
        """auto's state, from the saved calibration; the first call measures the seed cost
        curve if this machine has none yet (a few seconds, said to report first)."""
        if self._policy is None:
            seed = cost_model.load_or_measure(self.runtime, self._cache_dir, report)
            cal = self._calibration
            cost = OnlineCost(seed, cal.level, cal.offsets)
            self._policy = AutoPolicy(cal.acceptance, cost, cal.guard)
        return self._policy

    def cost_curve(self) -> CostModel:
        """Today's pass cost curve (measured first if need be, see auto_policy)."""
        return self.auto_policy().cost.curve

    def save_calibration(self) -> None:
        """Writes what auto has learnt to the cache folder now (atomically)."""
        self._join_saver()
        data = self._encoded_calibration()
        if data is not None:
            calibration.save(self._calibration_path, data)

    def _encoded_calibration(self) -> bytes | None:
        if self._policy is None:
            return None  # nothing learnt since the load
        p = self._policy
        state = calibration.Calibration(p.acceptance, p.guard, p.cost.level, dict(p.cost.offsets))
        self._saved_at = time.monotonic()
        return calibration.encode(state, self._model_identity, self._machine)

    def _save_now_and_then(self) -> None:
        """In the background, so that no completion waits for a disk."""
        if time.monotonic() - self._saved_at < _SAVE_EVERY_S or (self._saver and self._saver.is_alive()):
            return
        data = self._encoded_calibration()
        if data is not None:
            path = self._calibration_path
            self._saver = threading.Thread(target=calibration.save, args=(path, data), daemon=True)
            self._saver.start()

    def _join_saver(self) -> None:
        if self._saver is not None:
            self._saver.join()
            self._saver = None

    def token_prefixes(self) -> TokenPrefixes:
        """The sorted vocabulary token healing looks in: built by the first call (a second or
        two)."""
        if self._token_prefixes is None:
            self._token_prefixes = TokenPrefixes(self.tokenizer)
        return self._token_prefixes

    @property
    def fill_in_the_middle(self) -> bool:
        return self.prompts.fim is not None

    def forget_kv(self) -> None:
        """Empties the KV cache and drops the KV states: the next prompt is evaluated whole
        (what a cold start costs)."""
        self.runtime.clear()
        self.kv_states.clear()

    def close(self) -> None:
        self.save_calibration()
        self.runtime.close()

    def complete(
        self,
        request: CompletionRequest,
        options: DecodeOptions = DecodeOptions(),
        caches: DraftCaches = DraftCaches(),
        cancel: CancelToken | None = None,
        awaited: threading.Event | None = None,
    ) -> Completion:
        """awaited: set (from any thread) once a request waits for this work done ahead (no stop
        rules): it then stops as soon as that request's answer is known (stop reason
        `answered`) instead of decoding on while the request waits."""
        policy = self._policy
        if options.mode.uses_policy:
            # A first use measures the seed curve: before this completion's clock starts.
            policy = self.auto_policy()
            policy.begin()
        start = time.perf_counter()
        request, prompt = self._prompt_that_reuses(request, options)
        short = self._short_prompt(request, prompt, options)
        if short is not None:
            prompt, length = short
            self._short.used(request.identity or None, length, request.prefix, prompt.prefix_start)
        heal_ids = None
        if prompt.healed_token is not None:
            heal_ids = self.token_prefixes().starting_with(self.tokenizer.piece(prompt.healed_token))
        rest = self.previous_continuation(request.identity, request.prefix)
        self._take_kv(prompt, request)
        threads = self.threads.choose()
        self.runtime.set_threads(threads)
        inputs = RunInputs(self.runtime, self.tokenizer, prompt, heal_ids, rest, policy)
        cancel = cancel or CancelToken()
        run = CompletionRun(inputs, request, options, caches, cancel, start, awaited)
        with self.runtime.interrupted_by(cancel.interrupt):
            result = run.execute()
        result.stats.threads = threads
        result.stats.short_prompt = short is not None
        self.previous = (request.identity, request.prefix, run.generated_text())
        self._save_now_and_then()
        return result

    def _prompt_that_reuses(
        self, request: CompletionRequest, options: DecodeOptions
    ) -> tuple[CompletionRequest, Prompt]:
        """The request's prompt; or, coming back to a file whose KV state was saved, the prompt
        with the extra context that state was built with, when that spares evaluating it
        (kv_states.py)."""
        prompt = self.build_prompt(request, options)
        kept = self.kv_states.context_of(request.identity) if request.identity else None
        if kept is None or kept == request.extra_context:
            return request, prompt
        again = dataclasses.replace(request, extra_context=kept)
        other = self.build_prompt(again, options)
        reach = self.kv_states.reach
        if reach(self.runtime, other.tokens) >= reach(self.runtime, prompt.tokens) + MIN_GAIN_TOKENS:
            return again, other
        return request, prompt

    def _short_prompt(
        self, request: CompletionRequest, prompt: Prompt, options: DecodeOptions
    ) -> tuple[Prompt, int] | None:
        """The short prompt to evaluate instead of `prompt`, and its length, or None for
        `prompt` itself (cold_prompt.py): `prompt` serves where the cache lacks at most
        WHOLE_OVER_SHORT tokens more of it than of the best short prompt, or where no short
        prompt's state is at hand and what it lacks is evaluated within options.cold_prompt_ms."""
        token_ms = self._prompt_token_ms()
        if options.cold_prompt_ms is None or token_ms is None:
            return None
        reach = self.kv_states.reach
        missing = len(prompt.tokens) - reach(self.runtime, prompt.tokens)
        if missing <= WHOLE_OVER_SHORT:
            return None
        # Without the other files' context: cut to what the text before the cursor leaves, its
        # length, and with it the start of that text, would change at every key.
        alone = dataclasses.replace(options, windows=dataclasses.replace(options.windows, extra_tokens=0))
        kept_start = self._short.start(request.identity or None, request.prefix)
        best: tuple[Prompt, int, int] | None = None
        for length in self._short.candidates(request.identity or None, options.cold_prompt_ms, token_ms):
            if length >= len(prompt.tokens):
                continue
            shorts = [self.build_prompt(request, alone, length, locate=True)]
            if kept_start is not None:
                kept = self.build_prompt(request, alone, length * GROWTH, kept_start)
                if kept.prefix_start == kept_start and len(kept.tokens) < len(prompt.tokens):
                    shorts.append(kept)
            for short in shorts:
                lacks = len(short.tokens) - reach(self.runtime, short.tokens)
                if best is None or lacks < best[2]:
                    best = (short, length, lacks)
        if best is None or missing <= best[2] + WHOLE_OVER_SHORT:
            return None
        short, length, lacks = best
        at_hand = lacks + WHOLE_OVER_SHORT < len(short.tokens)
        if not at_hand and missing * token_ms <= options.cold_prompt_ms:
            return None
        return short, length

    def _prompt_token_ms(self) -> float | None:
        """What evaluating a prompt token costs: as the last prompt passes took; before any,
        a verified position of the widest pass measured (more: it pays the output layer)."""
        if self.runtime.prompt_token_ms is not None:
            return self.runtime.prompt_token_ms
        if self._policy is None:
            return None
        curve = self._policy.cost.curve
        return curve.ms[-1] / curve.sizes[-1]

    def warm(self, request: CompletionRequest, options: DecodeOptions, cancel: CancelToken) -> int:
        """Evaluates the prompt complete() gives `request` once its state is at hand, never a
        short one (cold_prompt.py), in passes sized by options.prefill_pass_ms, stopping between
        passes once `cancel` is set; what was evaluated stays and serves the next completions.
        Returns how many of its tokens were evaluated."""
        request, prompt = self._prompt_that_reuses(request, options)
        self._take_kv(prompt, request)
        self.runtime.set_threads(self.threads.choose())
        tokens = prompt.tokens
        start = self.runtime.common_prefix(tokens)
        try:
            with self.runtime.interrupted_by(cancel.interrupt):
                self.runtime.prefill(tokens, options.prefill_chunk, lambda: cancel.cancelled, options.prefill_pass_ms)
        except Cancelled:
            pass
        return len(self.runtime.kv_tokens) - start

    def _take_kv(self, prompt: Prompt, request: CompletionRequest) -> None:
        """Before `prompt` is evaluated: the state it replaces is saved, and a saved one that
        serves it better is put back (kv_states.py); the cache is labelled as its."""
        self.kv_states.prepare(self.runtime, prompt.tokens, self._kv_owner, self._kv_context)
        self._kv_owner, self._kv_context = request.identity or None, request.extra_context

    def build_prompt(
        self,
        request: CompletionRequest,
        options: DecodeOptions,
        max_prompt: int | None = None,
        prefix_start: int | None = None,
        locate: bool = False,
    ) -> Prompt:
        """The prompt complete() evaluates for this request (healed where it ends mid-word),
        within max_prompt tokens if given, its prefix's part from prefix_start if that fits
        (PromptBuilder.build says what `locate` does)."""
        room = self.runtime.n_ctx - options.max_tokens - step_room(options)
        if room < 16:
            n_ctx = self.runtime.n_ctx
            raise ValueError(f"max_tokens {options.max_tokens} leaves no room for a prompt in n_ctx {n_ctx}")
        heal = options.heal and mid_word(request.prefix, request.suffix)
        budget = room if max_prompt is None else min(room, max_prompt)
        return self.prompts.build(request, options.windows, budget, heal, prefix_start, locate)

    def previous_continuation(self, owner: str, prefix: str) -> str:
        """What the last completion of `owner` predicted after `prefix`, when the user typed
        the beginning of it since: its remaining text (else "")."""
        if self.previous is None:
            return ""
        last_owner, last_prefix, last_text = self.previous
        if not owner or owner != last_owner or not prefix.startswith(last_prefix):
            return ""
        typed = prefix[len(last_prefix) :]
        return last_text[len(typed) :] if last_text.startswith(typed) else ""

    def _bos(self) -> int | None:
        runtime = self.runtime
        return runtime.special_token(llama_cpp.llama_vocab_bos) if llama_cpp.llama_vocab_get_add_bos(runtime.vocab) else None

    def _fim_tokens(self) -> FimTokens | None:
        runtime = self.runtime
        pre, suf, mid = (
            runtime.special_token(llama_cpp.llama_vocab_fim_pre),
            runtime.special_token(llama_cpp.llama_vocab_fim_suf),
            runtime.special_token(llama_cpp.llama_vocab_fim_mid),
        )
        if pre is None or suf is None or mid is None:
            return None
        return FimTokens(
            pre,
            suf,
            mid,
            runtime.special_token(llama_cpp.llama_vocab_fim_rep),
            runtime.special_token(llama_cpp.llama_vocab_fim_sep),
        )

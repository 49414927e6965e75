"""Completions: prompt -> KV cache (reused) -> decoding steps that verify drafted candidates in
one pass each -> code-aware stop -> text and statistics.

One code path serves every draft mode; the modes differ only in what a step proposes:
  none       nothing: one token per pass (the baseline);
  lookup     the lookup core's token tree (context, workspace and repository caches);
  lookahead  the lookup tree plus the Jacobi window's pooled n-grams, and the window itself;
  auto       the lookup core's draft cut to the length that pays by today's pass costs and the
             running acceptance (policy.py), the window only where wide passes are cheap, and
             no speculation where it has been losing to plain passes (the guard).
Every emitted token is the model's argmax at the position that verified it.

Every pass is timed, loop work included, and the timings keep the cost curve current; what auto
learns is saved per model in the cache folder (calibration.py) and loaded by the next Engine."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import llama_cpp
import numpy as np

from lookahead_lsp._lookup import NgramCache, StaticCache, draft_tree, draft_with_evidence
from lookahead_lsp.cache_files import default_cache_dir
from lookahead_lsp.engine import calibration, cost_model
from lookahead_lsp.engine.cost_model import CostModel, OnlineCost
from lookahead_lsp.engine.healing import TokenPrefixes, mid_word
from lookahead_lsp.engine.policy import AUTO_MAX_DRAFT, AutoPolicy
from lookahead_lsp.engine.prompt import CompletionRequest, FimTokens, Prompt, PromptBuilder, PromptWindows
from lookahead_lsp.engine.runtime import MAIN_SEQ, Cancelled, EngineError, Logits, ModelRuntime, PassOutput, RuntimeSettings
from lookahead_lsp.engine.stopping import MULTILINE_MODES, Stopper
from lookahead_lsp.engine.tree import PREVIOUS, SOURCES, WINDOW, DraftTree
from lookahead_lsp.engine.window import LookaheadShape, LookaheadWindow

DRAFT_MODES = ("none", "lookup", "lookahead", "auto")
# Prompt tokens per llama_decode call: the granularity of cancelling a cold prompt (~0.2 s here).
PREFILL_CHUNK = 128
# A prompt tail this short that the KV cache lacks is evaluated in the first step's pass rather
# than in a pass of its own: the next keystroke then costs one pass less.
_MAX_LEAD = 8
# auto: the pass cost at which a lookahead window is "free".
_AUTO_WINDOW_SHAPES = (LookaheadShape(8, 4, 8), LookaheadShape(4, 4, 4), LookaheadShape(2, 3, 2))
_FREE_WINDOW_COST = 1.10
# The calibration is saved after a completion at most this often (and when the engine closes).
_SAVE_EVERY_S = 60.0


@dataclass(frozen=True)
class EngineSettings:
    model_path: Path
    n_ctx: int = 4096
    n_threads: int | None = None  # None: all cores
    n_gpu_layers: int = -1  # -1: all, on a GPU build of llama-cpp-python
    cache_dir: Path | None = None  # cost model and calibration (default ~/.cache/lookahead-lsp)
    sampling: str = "auto"  # where each position's argmax is taken (runtime.SAMPLING_MODES)


@dataclass(frozen=True)
class DecodeOptions:
    draft: str = "auto"
    max_tokens: int = 64
    time_budget_ms: float | None = None
    stop_rules: bool = True
    multiline: str = "auto"  # when a completion may span several lines (stopping.MULTILINE_MODES)
    windows: PromptWindows = PromptWindows()
    lookup_draft: int = 8  # lookup / lookahead: tokens per drafted branch
    lookup_branches: int = 3  # lookup / lookahead: branches of the token tree
    lookahead: LookaheadShape = LookaheadShape()
    trace: bool = False  # record, per emitted token, the verifying pass's top two logits
    heal: bool = True  # token healing at the end of a partly typed word (healing.py)
    # auto: whose record the guard keeps (a document, a language); default: the file extension.
    speculation_key: str | None = None

    def __post_init__(self) -> None:
        if self.draft not in DRAFT_MODES:
            raise ValueError(f"draft must be one of {', '.join(DRAFT_MODES)}, not {self.draft!r}")
        if self.max_tokens < 1:
            raise ValueError("max_tokens must be >= 1")
        if self.multiline not in MULTILINE_MODES:
            raise ValueError(f"multiline must be one of {', '.join(MULTILINE_MODES)}, not {self.multiline!r}")
        if not 0 <= self.lookup_branches <= 16 or self.lookup_draft < 0:
            raise ValueError("lookup_branches must be in [0, 16] and lookup_draft >= 0")


@dataclass(frozen=True)
class DraftCaches:
    """The lookup core's long-lived sources; the request's context cache is the engine's own.
    A static cache must be verified before it is handed over."""

    dynamic: NgramCache | None = None
    static: StaticCache | None = None


@dataclass
class CompletionStats:
    tokens: int = 0
    passes: int = 0
    accepted_by_source: dict[str, int] = field(default_factory=lambda: {s: 0 for s in SOURCES})
    drafted: int = 0  # candidate tokens sent to the model
    lookahead_window: str | None = None  # the Jacobi window's shape, "W4 N4 G4", when one ran
    prompt_tokens: int = 0
    prompt_evaluated: int = 0  # of which not found in the KV cache
    ms_prompt: float = 0.0
    ms_draft: float = 0.0
    ms_model: float = 0.0
    ms_total: float = 0.0

    @property
    def tokens_per_pass(self) -> float:
        return self.tokens / self.passes if self.passes else 0.0

    @property
    def tokens_per_s(self) -> float:
        """Generation speed: tokens over the time after the prompt was evaluated."""
        seconds = (self.ms_total - self.ms_prompt) / 1000
        return self.tokens / seconds if seconds > 0 else 0.0

    def as_dict(self) -> dict[str, object]:
        return {
            "tokens": self.tokens,
            "passes": self.passes,
            "tokens_per_pass": round(self.tokens_per_pass, 3),
            "accepted_by_source": dict(self.accepted_by_source),
            "drafted": self.drafted,
            "lookahead_window": self.lookahead_window,
            "prompt_tokens": self.prompt_tokens,
            "prompt_evaluated": self.prompt_evaluated,
            "ms_prompt": round(self.ms_prompt, 2),
            "ms_draft": round(self.ms_draft, 2),
            "ms_model": round(self.ms_model, 2),
            "ms_total": round(self.ms_total, 2),
            "tokens_per_s": round(self.tokens_per_s, 2),
        }


@dataclass(frozen=True)
class TokenTrace:
    """An emitted token and the logits row that verified it (its pass, top two ids and values)."""

    token: int
    pass_index: int
    top1: int
    top2: int
    margin: float  # top-1 logit minus top-2 logit


@dataclass
class Completion:
    text: str
    tokens: list[int]
    stats: CompletionStats
    stop_reason: str  # stop-rule, max-tokens, end-of-generation, time-budget, context-full, cancelled
    trace: list[TokenTrace] = field(default_factory=list)


class CancelToken:
    """Set from any thread; the engine checks it between model passes and prompt chunks."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def cancel(self) -> None:
        self._event.set()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()


@dataclass
class _Step:
    """One pass's candidates and where they sit in the batch."""

    tree: DraftTree
    evidence: np.ndarray | None = None  # auto: the drafted tokens' evidence (for learning)
    offered: np.ndarray | None = None  # auto: evidence of tokens offered but not drafted
    window: LookaheadWindow | None = None
    # After the pass: the tokens it produced (before any cut) and, when every position of the
    # batch had logits and no prompt tokens rode along, its size on the cost curve's scale.
    produced: int = 0
    positions: int | None = None


class Engine:
    """One model, one KV cache, one completion at a time (callers serialise requests)."""

    def __init__(self, settings: EngineSettings) -> None:
        self.settings = settings
        self.runtime = ModelRuntime(
            RuntimeSettings(
                settings.model_path,
                settings.n_ctx,
                settings.n_threads,
                settings.n_gpu_layers,
                sampling=settings.sampling,
            )
        )
        rt = self.runtime
        self.tokenizer = rt.tokenizer
        self.prompts = PromptBuilder(self.tokenizer, self._bos(), self._fim_tokens())
        self._token_prefixes: TokenPrefixes | None = None
        # The last request's text before the cursor and everything it generated.
        self.last: tuple[str, str] | None = None
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

    @property
    def policy(self) -> AutoPolicy:
        """auto's state, from the saved calibration; its first use measures the seed cost curve
        if this machine has none yet (a few seconds)."""
        if self._policy is None:
            seed = cost_model.load_or_measure(self.runtime, self._cache_dir)
            cal = self._calibration
            cost = OnlineCost(seed, cal.level, cal.offsets)
            self._policy = AutoPolicy(cal.acceptance, cost, cal.guard)
        return self._policy

    @property
    def cost_model(self) -> CostModel:
        """Today's pass cost curve."""
        return self.policy.cost.curve

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

    @property
    def token_prefixes(self) -> TokenPrefixes:
        """The sorted vocabulary token healing looks in: built on first use (a second or two)."""
        if self._token_prefixes is None:
            self._token_prefixes = TokenPrefixes(self.tokenizer)
        return self._token_prefixes

    @property
    def fill_in_the_middle(self) -> bool:
        return self.prompts.fim is not None

    def close(self) -> None:
        self.save_calibration()
        self.runtime.close()

    def complete(
        self,
        request: CompletionRequest,
        options: DecodeOptions = DecodeOptions(),
        caches: DraftCaches = DraftCaches(),
        cancel: CancelToken | None = None,
    ) -> Completion:
        start = time.perf_counter()
        cancelled: Callable[[], bool] = (lambda: cancel.cancelled) if cancel else (lambda: False)
        if options.draft in ("auto", "lookahead"):
            # A first use measures the seed curve: before this completion's clock starts.
            self.policy.begin()
            start = time.perf_counter()
        run = _Run(self, request, options, caches, cancelled, start)
        result = run.execute()
        self.last = (request.prefix, run.generated_text())
        self._save_now_and_then()
        return result

    def build_prompt(self, request: CompletionRequest, options: DecodeOptions) -> Prompt:
        """The prompt complete() evaluates for this request (healed where it ends mid-word)."""
        max_prompt = self.runtime.n_ctx - options.max_tokens - _step_room(options)
        if max_prompt < 16:
            n_ctx = self.runtime.n_ctx
            raise ValueError(f"max_tokens {options.max_tokens} leaves no room for a prompt in n_ctx {n_ctx}")
        heal = options.heal and mid_word(request.prefix, request.suffix)
        return self.prompts.build(request, options.windows, max_prompt, heal)

    def previous_continuation(self, prefix: str) -> str:
        """What the last completion predicted after `prefix`, when the user typed the beginning
        of it since: its remaining text (else "")."""
        if self.last is None:
            return ""
        last_prefix, last_text = self.last
        if not prefix.startswith(last_prefix):
            return ""
        typed = prefix[len(last_prefix) :]
        return last_text[len(typed) :] if last_text.startswith(typed) else ""

    def _bos(self) -> int | None:
        rt = self.runtime
        return rt.special_token(llama_cpp.llama_vocab_bos) if llama_cpp.llama_vocab_get_add_bos(rt.vocab) else None

    def _fim_tokens(self) -> FimTokens | None:
        rt = self.runtime
        pre, suf, mid = (
            rt.special_token(llama_cpp.llama_vocab_fim_pre),
            rt.special_token(llama_cpp.llama_vocab_fim_suf),
            rt.special_token(llama_cpp.llama_vocab_fim_mid),
        )
        if pre is None or suf is None or mid is None:
            return None
        return FimTokens(
            pre,
            suf,
            mid,
            rt.special_token(llama_cpp.llama_vocab_fim_rep),
            rt.special_token(llama_cpp.llama_vocab_fim_sep),
        )


def _step_room(options: DecodeOptions) -> int:
    """Positions one step may use beyond the current token."""
    o = options
    lookup = o.lookup_draft if o.draft != "auto" else AUTO_MAX_DRAFT
    window = max(s.positions for s in _AUTO_WINDOW_SHAPES) if o.draft == "auto" else o.lookahead.positions
    return lookup + window + 8


class _Run:
    """The state of one completion."""

    def __init__(
        self,
        engine: Engine,
        request: CompletionRequest,
        options: DecodeOptions,
        caches: DraftCaches,
        cancelled: Callable[[], bool],
        start: float,
    ) -> None:
        self.engine = engine
        self.rt = engine.runtime
        self.request = request
        self.options = options
        self.caches = caches
        self.cancelled = cancelled
        self.start = start
        self.stats = CompletionStats()
        self.stopper = Stopper(request.prefix, request.suffix, options.stop_rules, options.multiline)
        self.generated: list[int] = []
        self.trace: list[TokenTrace] = []
        self.window: LookaheadWindow | None = None
        self.history: list[int] = []
        self.context = NgramCache(self.rt.n_vocab)
        self.cut: int | None = None
        self.lead: list[int] = []  # prompt tokens still to evaluate, in the first step's pass
        self.previous: list[int] = []  # the rest of the last completion, drafted first
        self.healed = ""  # the text of the prompt token given up for healing
        self.heal_ids: np.ndarray | None = None  # the first token's choices while healing
        self.key = options.speculation_key or language_key(request.path)

    def execute(self) -> Completion:
        o, rt = self.options, self.rt
        prompt = self.engine.build_prompt(self.request, o)
        if prompt.healed_token is not None:
            self.healed = self.engine.tokenizer.piece(prompt.healed_token).decode("utf-8", "replace")
            self.heal_ids = self.engine.token_prefixes.starting_with(self.healed)
        self.stats.prompt_tokens = len(prompt.tokens)
        if not prompt.tokens:
            return self._finish("end-of-generation")
        known = prompt.tokens[:-1]
        cached = rt.common_prefix(known)
        if 0 < len(known) - cached <= _MAX_LEAD:
            self.lead = known[cached:]
            known = known[:cached]
        try:
            self.stats.prompt_evaluated = rt.prefill(known, PREFILL_CHUNK, self.cancelled) + len(self.lead)
        except Cancelled:
            self.stats.ms_prompt = self._elapsed_ms()
            return self._finish("cancelled")
        self.stats.ms_prompt = self._elapsed_ms()
        t = time.perf_counter()
        for source in prompt.sources:
            self.context.add(source)
        self.history = list(prompt.tokens)
        rest = self.engine.previous_continuation(self.request.prefix)
        if rest:
            self.previous = self.engine.tokenizer.tokenize(self.healed + rest).tolist()
        if o.draft == "lookahead":
            self.window = LookaheadWindow(o.lookahead, prompt.tokens)
        elif o.draft == "auto":
            self.window = self._auto_window(prompt.tokens)
        if self.window is not None:
            shape = self.window.shape
            self.stats.lookahead_window = f"W{shape.width} N{shape.ngram} G{shape.candidates}"
        self.stats.ms_draft += (time.perf_counter() - t) * 1000
        return self._finish(self._decode_loop())

    def _decode_loop(self) -> str:
        o, rt = self.options, self.rt
        while True:
            if self.cancelled():
                return "cancelled"
            # The budget is for generating: it starts once the prompt is in, and the first pass
            # always runs. A slow prompt (a loaded machine, a cold cache) that used the budget up
            # would otherwise have been evaluated for an empty answer.
            spent = self._elapsed_ms() - self.stats.ms_prompt
            if o.time_budget_ms is not None and self.stats.passes > 0 and spent >= o.time_budget_ms:
                return "time-budget"
            remaining = o.max_tokens - len(self.generated)
            if len(rt.kv_tokens) + _step_room(o) + 1 >= rt.n_ctx:
                return "context-full"
            t = time.perf_counter()
            step = self._plan(remaining)
            self.stats.ms_draft += (time.perf_counter() - t) * 1000
            had_lead = bool(self.lead)
            reason = self._run_step(step, remaining)
            if not had_lead:
                self._record_pass(step, (time.perf_counter() - t) * 1000)
            if reason is not None:
                return reason
            if len(self.generated) >= o.max_tokens:
                return "max-tokens"

    def _record_pass(self, step: _Step, ms: float) -> None:
        """The pass's time, drafting to bookkeeping, for the cost curve (any mode, once auto's
        state exists) and, for auto's speculative passes, the guard."""
        policy = self.engine._policy
        if policy is None:
            return
        speculative = self.options.draft == "auto" and (len(step.tree) > 0 or step.window is not None)
        policy.record_pass(self.key, step.positions, ms, step.produced, speculative)

    # -- planning ----------------------------------------------------------------------------

    def _plan(self, remaining: int) -> _Step:
        o = self.options
        tail = np.asarray(self.history[-4:], dtype=np.int32)
        room = max(0, remaining - 1)  # the pass adds one token of its own
        tree = DraftTree()
        step = _Step(tree, window=self.window)
        dynamic, static = self.caches.dynamic, self.caches.static
        if self.previous and room and o.draft != "none":
            previous = self.previous[:room]
            if o.draft == "auto":
                evidence = np.array([[PREVIOUS, 0, 1, 1]] * len(previous), dtype=np.int64)
                k = self.engine.policy.choose(evidence, self.key).length
                previous, step.evidence = previous[:k], evidence[:k]
            tree.add_path(previous, [PREVIOUS] * len(previous), len(previous))
        elif o.draft in ("lookup", "lookahead") and room and o.lookup_branches:
            n = min(o.lookup_draft, room)
            tokens, parents, evidence = draft_tree(tail, n, o.lookup_branches, self.context, dynamic, static)
            tree.add_tree(tokens.tolist(), parents.tolist(), evidence[:, 0].tolist(), n * o.lookup_branches)
        elif o.draft == "auto" and room:
            tokens, evidence = draft_with_evidence(tail, min(AUTO_MAX_DRAFT, room), self.context, dynamic, static)
            if len(tokens):
                choice = self.engine.policy.choose(evidence, self.key)
                k = choice.length
                tree.add_path(tokens[:k].tolist(), evidence[:k, 0].tolist(), k)
                step.evidence = evidence[:k]
                # Held back by the guard, the offer says nothing about the evidence.
                step.offered = None if choice.held_back else evidence[k : k + 1]
        if self.window is not None and room:
            for gram in self.window.candidates(self.history[-1]):
                tree.add_path(gram[:room], [WINDOW] * len(gram[:room]), len(tree) + room)
        return step

    def _auto_window(self, seed: list[int]) -> LookaheadWindow | None:
        """A Jacobi window only where the measured cost says wide passes are nearly free (a GPU,
        typically): the widest shape whose positions cost at most 10 % more than a plain pass,
        unless the guard holds speculation back here."""
        if not self.engine.policy.guard.allows(self.key):
            return None
        cost = self.engine.cost_model
        for shape in _AUTO_WINDOW_SHAPES:
            extra = shape.positions + shape.candidates * (shape.ngram - 1)
            if cost.relative(1 + extra) <= _FREE_WINDOW_COST:
                return LookaheadWindow(shape, seed)
        return None

    # -- one pass ----------------------------------------------------------------------------

    def _run_step(self, step: _Step, remaining: int) -> str | None:
        rt, tree = self.rt, step.tree
        batch = rt.batch
        branches = tree.branches()
        n_branch_seqs = max(1, branches.shape[1])
        n_past = len(rt.kv_tokens)
        pending = self.history[-1]
        batch.clear()
        # Every branch and window column sees the accepted tokens, the lead and the pending one.
        root_seqs = list(range(n_branch_seqs))
        if step.window is not None:
            root_seqs += [n_branch_seqs + i for i in range(step.window.shape.width)]
        needs_logits = self.options.trace or self.heal_ids is not None
        if needs_logits and rt.logits_seq is not None:
            root_seqs.append(rt.logits_seq)
        lead, self.lead = self.lead, []
        for i, token in enumerate(lead):
            batch.add(token, n_past + i, root_seqs, False)
        n_past += len(lead)
        root_row = batch.add(pending, n_past, root_seqs, True)
        positions = np.asarray(tree.depths, dtype=np.int32) + (n_past + 1)
        first_row = batch.add_outputs(tree.tokens, positions, branches, MAIN_SEQ)
        if step.window is not None:
            step.window.add_to_batch(batch, n_past, n_branch_seqs)
        # llama.cpp wants the sequences of one token to hold the same cells before it.
        for seq in root_seqs[1:]:
            rt.mirror_main(seq)
        t = time.perf_counter()
        out = rt.decode_batch()
        choices = out.tokens
        if self.heal_ids is not None:
            # The first token redoes the healed one: the best that starts with its text.
            ids, self.heal_ids = self.heal_ids, None
            choices[root_row] = int(ids[np.argmax(_rows(out)[root_row, ids])])
        self.stats.ms_model += (time.perf_counter() - t) * 1000
        self.stats.passes += 1
        self.stats.drafted += len(tree)

        t = time.perf_counter()
        path = tree.accepted_path(choices[root_row], choices[first_row : first_row + len(tree)])
        accepted = [tree.tokens[node] for node in path]
        bonus_row = first_row + path[-1] if path else root_row
        keep_seq = int(np.argmax(branches[path[-1]])) if path else MAIN_SEQ
        rt.accept_branch(keep_seq, [*lead, pending, *accepted], len(root_seqs) > 1)
        if step.window is not None:
            step.window.update([choices[r] for r in step.window.output_rows])
        if step.evidence is not None or step.offered is not None:
            # The drafted path's accepted tokens: the accepted path's nodes up to the first
            # that only the window proposed.
            lookup = next((i for i, node in enumerate(path) if tree.sources[node] == WINDOW), len(path))
            self.engine.policy.learn(step.evidence, lookup, step.offered)
        step.produced = len(path) + 1
        step.positions = batch.size if batch.n_outputs == batch.size and not lead else None

        new = [*accepted, choices[bonus_row]]
        # The last completion's rest stays a draft only while the model keeps agreeing with it.
        self.previous = self.previous[len(new) :] if self.previous[: len(new)] == new else []
        verifying_rows = [root_row, *(first_row + node for node in path)]
        reason = None
        for i, token in enumerate(new):
            if self.rt.is_end_of_generation(token):
                new, verifying_rows, reason = new[:i], verifying_rows[:i], "end-of-generation"
                break
        if len(new) > remaining:
            new, verifying_rows = new[:remaining], verifying_rows[:remaining]
        for node in path[: len(new)]:
            self.stats.accepted_by_source[SOURCES[tree.sources[node]]] += 1
        if self.options.trace:
            self._record(new, verifying_rows, _rows(out))
        self.history += new
        self.generated += new
        # The new tokens' n-grams, whose keys reach back up to 3 tokens before them.
        tail = self.history[-(len(new) + 3) :]
        self.context.add(np.asarray(tail, dtype=np.int32), first=len(tail) - len(new))
        self.stats.ms_draft += (time.perf_counter() - t) * 1000
        if reason is None and self.options.stop_rules:
            self.cut = self.stopper.check(self.generated_text())
            if self.cut is not None:
                reason = "stop-rule"
        return reason

    def _record(self, tokens: list[int], rows: list[int], logits: np.ndarray) -> None:
        for token, row in zip(tokens, rows):
            values = logits[row]
            top = np.argpartition(values, -2)[-2:]
            hi, lo = (top[1], top[0]) if values[top[1]] >= values[top[0]] else (top[0], top[1])
            self.trace.append(
                TokenTrace(token, self.stats.passes - 1, int(hi), int(lo), float(values[hi] - values[lo]))
            )

    # -- the result --------------------------------------------------------------------------

    def generated_text(self) -> str:
        text = self.engine.tokenizer.detokenize(self.generated).decode("utf-8", "ignore")
        # The healed token's text was typed already; the completion is what follows it.
        return text[len(self.healed) :] if self.healed and text.startswith(self.healed) else text

    def _finish(self, reason: str) -> Completion:
        text = self.generated_text()
        if self.cut is not None:
            text = text[: self.cut]
        elif reason in ("max-tokens", "time-budget") and self.options.stop_rules and "\n" in text.strip():
            # Cut off by a budget: keep the complete lines, not half of the last one.
            text = text[: text.rstrip().rfind("\n")]
        text = self.stopper.finish(text)
        self.stats.tokens = len(self.generated)
        self.stats.ms_total = self._elapsed_ms()
        return Completion(text, list(self.generated), self.stats, reason, self.trace)

    def _elapsed_ms(self) -> float:
        return (time.perf_counter() - self.start) * 1000


def language_key(path: str) -> str:
    """The guard's default key: the document's extension (its language), "" without one."""
    return PurePosixPath(path.replace("\\", "/")).suffix.lower()


def _rows(out: PassOutput) -> Logits:
    """The pass's logits rows, which a step asks for (token healing, a trace) by putting its
    first token in the runtime's logits_seq."""
    if out.logits is None:
        raise EngineError("the pass brought no logits back")
    return out.logits

"""One completion: prompt -> KV cache (reused) -> steps that each verify the planned candidates
in one model pass -> code-aware stop -> text and statistics.

A step: put the pending token, the token tree (one KV sequence per branch) and the lookahead
window in one batch; one pass gives the model's choice at every position; follow the tree from
the root while the model agrees with it; keep that branch's cells and the model's choice after
it (the bonus token). Every emitted token is the model's argmax at the position that verified it."""

from __future__ import annotations

import functools
import threading
import time
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from lookahead_lsp._lookup import NgramCache
from lookahead_lsp.engine.options import CancelToken, DecodeOptions, DraftCaches, step_room
from lookahead_lsp.engine.planning import Planner, StepPlan, auto_window
from lookahead_lsp.engine.prompt import CompletionRequest, Prompt
from lookahead_lsp.engine.results import Completion, CompletionStats, TokenTrace
from lookahead_lsp.engine.runtime import MAIN_SEQ, Cancelled, EngineError, Logits, PassOutput
from lookahead_lsp.engine.stopping import Stopper, shown_from_continuation, shown_text
from lookahead_lsp.engine.sources import SOURCES, WINDOW
from lookahead_lsp.engine.window import LookaheadWindow

if TYPE_CHECKING:
    from lookahead_lsp.engine.policy import AutoPolicy
    from lookahead_lsp.engine.runtime import ModelRuntime
    from lookahead_lsp.base.tokenizer import Tokenizer

# A prompt tail this short that the KV cache lacks is evaluated in the first step's pass rather
# than in a pass of its own: the next keystroke then costs one pass less.
_MAX_PROMPT_TAIL = 8


@dataclass(frozen=True)
class RunInputs:
    """What a completion needs from the engine that runs it, decided before it starts."""

    runtime: ModelRuntime
    tokenizer: Tokenizer
    prompt: Prompt
    # The first token's choices while healing (the vocabulary tokens that start with the
    # healed token's text), None when the prompt was not healed.
    heal_ids: npt.NDArray[np.int32] | None
    # What the last completion predicted after this request's prefix and the user did not type
    # yet: drafted first.
    previous_rest: str
    # auto's state: loaded for the modes that plan with it, else whatever an earlier
    # completion loaded (it then still learns the pass costs), or None.
    policy: AutoPolicy | None


class CompletionRun:
    """The state of one completion."""

    def __init__(
        self,
        inputs: RunInputs,
        request: CompletionRequest,
        options: DecodeOptions,
        caches: DraftCaches,
        cancel: CancelToken,
        start: float,
        awaited: threading.Event | None = None,
    ) -> None:
        self.inputs = inputs
        self.runtime = inputs.runtime
        self.tokenizer = inputs.tokenizer
        self.request = request
        self.options = options
        self.caches = caches
        self.cancel = cancel
        self.awaited = awaited
        self.start = start
        self.stats = CompletionStats()
        self.stopper = Stopper(request.prefix, request.suffix, options.stop_rules, options.multiline)
        self.generated: list[int] = []
        self.trace: list[TokenTrace] = []
        self.history: list[int] = []  # the prompt and every accepted token
        self.context = NgramCache(self.runtime.n_vocab)
        self.stop_at: int | None = None  # where a stop rule cut the generated text
        self.prompt_tail: list[int] = []  # prompt tokens still to evaluate, in the first pass
        self.previous: list[int] = []  # the rest of the last completion, drafted first
        self.healed = ""  # the text of the prompt token given up for healing
        self.heal_ids: npt.NDArray[np.int32] | None = None  # the first token's choices while healing
        self.key = options.speculation_key or language_key(request.path)
        self.planner: Planner | None = None

    def execute(self) -> Completion:
        runtime, prompt = self.runtime, self.inputs.prompt
        if prompt.healed_token is not None:
            self.healed = self.tokenizer.piece(prompt.healed_token).decode("utf-8", "replace")
            self.heal_ids = self.inputs.heal_ids
        self.stats.prompt_tokens = len(prompt.tokens)
        self.stats.context = [chunk.described(tokens) for chunk, tokens in prompt.chunks]
        if not prompt.tokens:
            return self._finish("end-of-generation")
        known = prompt.tokens[:-1]
        cached = runtime.common_prefix(known)
        if 0 < len(known) - cached <= _MAX_PROMPT_TAIL:
            self.prompt_tail = known[cached:]
            known = known[:cached]
        try:
            evaluated = runtime.prefill(known, self.options.prefill_chunk, lambda: self.cancel.cancelled, self.options.prefill_pass_ms)
            self.stats.prompt_evaluated = evaluated + len(self.prompt_tail)
        except Cancelled:
            self.stats.ms_prompt = self._elapsed_ms()
            return self._finish("cancelled")
        self.stats.ms_prompt = self._elapsed_ms()
        t = time.perf_counter()
        for source in prompt.sources:
            self.context.add(source)
        self.history = list(prompt.tokens)
        rest = self.inputs.previous_rest
        if rest:
            self.previous = self.tokenizer.tokenize(self.healed + rest).tolist()
        window = self._window(prompt.tokens)
        if window is not None:
            shape = window.shape
            self.stats.lookahead_window = f"W{shape.width} N{shape.ngram} G{shape.candidates}"
        self.planner = Planner(self.options, self.caches, self.context, self._policy, self.key, window)
        self.stats.ms_draft += (time.perf_counter() - t) * 1000
        return self._finish(self._decode_loop(self.planner))

    def _policy(self) -> AutoPolicy:
        policy = self.inputs.policy
        if policy is None:
            raise EngineError(f"draft mode {self.options.draft} needs auto's state, which the engine did not load")
        return policy

    def _window(self, seed: list[int]) -> LookaheadWindow | None:
        mode = self.options.mode
        if mode.fixed_window:
            return LookaheadWindow(self.options.lookahead, seed)
        if mode.adaptive:
            policy = self._policy()
            return auto_window(policy, policy.cost.curve, self.key, seed)
        return None

    def _decode_loop(self, planner: Planner) -> str:
        options, runtime = self.options, self.runtime
        while True:
            if self.cancel.cancelled:
                return "cancelled"
            # The budget is for generating: it starts once the prompt is in, and the first pass
            # always runs. A slow prompt (a loaded machine, a cold cache) that used the budget up
            # would otherwise have been evaluated for an empty answer.
            spent = self._elapsed_ms() - self.stats.ms_prompt
            if options.time_budget_ms is not None and self.stats.passes > 0 and spent >= options.time_budget_ms:
                return "time-budget"
            remaining = options.max_tokens - len(self.generated)
            if len(runtime.kv_tokens) + step_room(options) + 1 >= runtime.n_ctx:
                return "context-full"
            t = time.perf_counter()
            step = planner.plan(self.history, self.previous, remaining)
            self.stats.ms_draft += (time.perf_counter() - t) * 1000
            with_prompt_tail = bool(self.prompt_tail)
            try:
                reason = self._step(step, remaining)
            except Cancelled:  # its interrupt ended the pass
                return "cancelled"
            if not with_prompt_tail:
                self._record_pass(step, (time.perf_counter() - t) * 1000)
            if reason is not None:
                return reason
            if len(self.generated) >= options.max_tokens:
                return "max-tokens"

    def _record_pass(self, step: StepPlan, ms: float) -> None:
        """The pass's time, drafting to bookkeeping, for the cost curve (any mode, once auto's
        state exists) and, for auto's speculative passes, the guard."""
        policy = self.inputs.policy
        if policy is None:
            return
        speculative = self.options.mode.adaptive and (len(step.tree) > 0 or step.window is not None)
        policy.record_pass(self.key, step.positions, ms, step.produced, speculative)

    # -- one step ----------------------------------------------------------------------------

    def _step(self, step: StepPlan, remaining: int) -> str | None:
        """Verifies the plan in one pass, keeps what the model agreed with; returns why the
        completion ends here, if it does."""
        runtime, tree = self.runtime, step.tree
        batch = runtime.batch
        branches = tree.branches()
        n_branch_seqs = max(1, branches.shape[1])
        n_past = len(runtime.kv_tokens)
        pending = self.history[-1]
        batch.clear()
        # Every branch and window column sees the accepted tokens, the prompt tail and the
        # pending token.
        root_seqs = list(range(n_branch_seqs))
        if step.window is not None:
            root_seqs += [n_branch_seqs + i for i in range(step.window.shape.width)]
        needs_logits = self.options.trace or self.heal_ids is not None
        if needs_logits and runtime.logits_seq is not None:
            root_seqs.append(runtime.logits_seq)
        prompt_tail, self.prompt_tail = self.prompt_tail, []
        for i, token in enumerate(prompt_tail):
            batch.add(token, n_past + i, root_seqs, False)
        n_past += len(prompt_tail)
        root_row = batch.add(pending, n_past, root_seqs, True)
        positions = np.asarray(tree.depths, dtype=np.int32) + (n_past + 1)
        first_row = batch.add_outputs(tree.tokens, positions, branches, MAIN_SEQ)
        if step.window is not None:
            step.window.add_to_batch(batch, n_past, n_branch_seqs)
        # llama.cpp wants the sequences of one token to hold the same cells before it.
        for seq in root_seqs[1:]:
            runtime.mirror_main(seq)
        t = time.perf_counter()
        out = runtime.decode_batch()
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
        runtime.accept_branch(keep_seq, [*prompt_tail, pending, *accepted], len(root_seqs) > 1)
        if step.window is not None:
            step.window.update([choices[row] for row in step.window.output_rows])
        if step.evidence is not None or step.offered is not None:
            # The drafted path's accepted tokens: the accepted path's nodes up to the first
            # that only the window proposed.
            drafted = next((i for i, node in enumerate(path) if tree.sources[node] == WINDOW), len(path))
            self._policy().learn(step.evidence, drafted, step.offered)
        step.produced = len(path) + 1
        step.positions = batch.size if batch.n_outputs == batch.size and not prompt_tail else None

        new = [*accepted, choices[bonus_row]]
        # The last completion's rest stays a draft only while the model keeps agreeing with it.
        self.previous = self.previous[len(new) :] if self.previous[: len(new)] == new else []
        verifying_rows = [root_row, *(first_row + node for node in path)]
        reason = None
        for i, token in enumerate(new):
            if runtime.is_end_of_generation(token):
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
            self.stop_at = self.stopper.check(self.generated_text())
            if self.stop_at is not None:
                reason = "stop-rule"
        elif reason is None and self._until_answered() and self._request_stopper.check(self.generated_text()) is not None:
            # The continuation holds the answer of the request waiting for it, or of the one its
            # next place's work will continue from: the rest would only make that request wait
            # longer (the text stays uncut, as work done ahead keeps it).
            reason = "answered"
        return reason

    def _until_answered(self) -> bool:
        return self.options.until_answered or (self.awaited is not None and self.awaited.is_set())

    @functools.cached_property
    def _request_stopper(self) -> Stopper:
        """The stop rules of a request at this run's cursor, which cut its continuation."""
        return Stopper(self.request.prefix, self.request.suffix, True, self.options.multiline)

    def _record(self, tokens: list[int], rows: list[int], logits: Logits) -> None:
        for token, row in zip(tokens, rows):
            values = logits[row]
            top = np.argpartition(values, -2)[-2:]
            hi, lo = (top[1], top[0]) if values[top[1]] >= values[top[0]] else (top[0], top[1])
            self.trace.append(
                TokenTrace(token, self.stats.passes - 1, int(hi), int(lo), float(values[hi] - values[lo]))
            )

    # -- the result --------------------------------------------------------------------------

    def generated_text(self) -> str:
        text = self.tokenizer.detokenize(self.generated).decode("utf-8", "ignore")
        # The healed token's text was typed already; the completion is what follows it.
        return text[len(self.healed) :] if self.healed and text.startswith(self.healed) else text

    def _finish(self, reason: str) -> Completion:
        cut_short = reason in ("max-tokens", "time-budget")
        text = shown_text(self.stopper, self.generated_text(), self.stop_at, cut_short)
        self.stats.tokens = len(self.generated)
        self.stats.ms_total = self._elapsed_ms()
        answer = None
        if not self.options.stop_rules and reason != "cancelled":
            ended = reason == "end-of-generation"
            answer = shown_from_continuation(self._request_stopper, text, ended, same_budget=reason == "max-tokens")
        return Completion(text, list(self.generated), self.stats, reason, self.trace, answer)

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

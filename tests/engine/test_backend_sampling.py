"""Backend sampling with the real default model: the argmax that a greedy sampler takes inside
llama.cpp's graph (only token ids come back) gives the completions that numpy's argmax over the
copied logits rows gives, in every draft mode, and the backend path is really taken (on the CPU
backend here, on the GPU where there is one)."""

from __future__ import annotations

import sysconfig
from collections.abc import Iterator
from pathlib import Path

import llama_cpp
import pytest

from lookahead_lsp._lookup import NgramCache
from lookahead_lsp.engine import DRAFT_MODES, Completion, CompletionRequest, DecodeOptions, DraftCaches, Engine
from lookahead_lsp.base.tokenizer import tokenize_file_text

from support.engines import engine_on

STDLIB = Path(sysconfig.get_paths()["stdlib"])
# (file, a line whose start is the cursor): code that repeats itself, so that drafts are accepted.
TASKS = [("json/encoder.py", "        if _indent is not None:"), ("csv.py", "                d[key] = self.restval")]
# auto sizes its drafts from timings, so the two engines' batches may differ in shape, and with
# them the last bits of the logits: a near-tie may then go either way (tests/engine/test_engine.py).
NEAR_TIE = 0.5


@pytest.fixture(scope="module")
def engines(model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Engine, Engine]]:
    backend = engine_on(model_path, tmp_path_factory.mktemp("backend"), 2048, threads=2, sampling="backend")
    host = engine_on(model_path, tmp_path_factory.mktemp("host"), 2048, threads=2, sampling="host")
    yield backend, host
    backend.close()
    host.close()


def _task(engine: Engine, name: str, marker: str) -> tuple[CompletionRequest, DraftCaches]:
    text = (STDLIB / name).read_text()
    prefix = text[: text.index(marker)]
    workspace = NgramCache(engine.tokenizer.n_vocab)
    workspace.add(tokenize_file_text(engine.tokenizer, prefix.encode()))
    return CompletionRequest(prefix, "", name), DraftCaches(workspace=workspace)


def _run(engine: Engine, request: CompletionRequest, caches: DraftCaches, draft: str, trace: bool = False) -> Completion:
    engine.previous = None  # no "previous completion" draft
    options = DecodeOptions(draft=draft, max_tokens=20, stop_rules=False, trace=trace)
    return engine.complete(request, options, caches)


@pytest.mark.parametrize("name,marker", TASKS)
def test_backend_and_host_argmax_give_the_same_completions(engines: tuple[Engine, Engine], name: str, marker: str) -> None:
    backend, host = engines
    request, caches = _task(backend, name, marker)
    for mode in DRAFT_MODES:
        passes = backend.runtime.backend_passes
        on_backend = _run(backend, request, caches, mode)
        assert backend.runtime.backend_passes >= passes + on_backend.stats.passes
        on_host = _run(host, request, caches, mode, trace=True)
        assert on_backend.stats.tokens == on_host.stats.tokens == 20
        if mode != "auto":
            # The same drafts, so the same batches: the same tokens, pass for pass.
            assert on_backend.tokens == on_host.tokens, mode
            assert on_backend.stats.passes == on_host.stats.passes, mode
            continue
        at = next((i for i, (a, b) in enumerate(zip(on_backend.tokens, on_host.tokens)) if a != b), None)
        assert at is None or on_host.trace[at].margin < NEAR_TIE, f"auto departs at token {at}"


def test_backend_sampling_is_taken_on_this_machine(engines: tuple[Engine, Engine]) -> None:
    backend, host = engines
    assert backend.sampling == "backend" and host.sampling == "host"
    # The device that runs the model: the CPU on a build of llama.cpp without a GPU backend.
    assert backend.backend == host.backend == ("CPU" if not llama_cpp.llama_supports_gpu_offload() else backend.backend)
    assert backend.backend
    # At the start of a line: no token healing, whose first pass needs the logits on the host.
    request = CompletionRequest("def add(a, b):\n", "", "add.py")
    before = backend.runtime.backend_passes
    result = _run(backend, request, DraftCaches(), "none")
    # One pass per token, each of them answered by the backend samplers with a token id only.
    assert backend.runtime.backend_passes - before == result.stats.passes == 20
    assert host.runtime.backend_passes == 0


def test_healed_and_traced_completions_on_the_backend_path_bring_their_logits_back(
    engines: tuple[Engine, Engine],
) -> None:
    backend, _host = engines
    request = CompletionRequest("def add(a, b):\n    return", "", "add.py")  # healed: ends mid-word
    plain = _run(backend, request, DraftCaches(), "none")
    traced = _run(backend, request, DraftCaches(), "none", trace=True)
    assert traced.tokens == plain.tokens
    assert [step.top1 for step in traced.trace] == traced.tokens
    assert backend.sampling == "backend"  # the traced passes did not switch the path off


def test_auto_takes_the_argmax_on_the_host_where_the_model_runs_on_the_cpu(model_path: Path, tmp_path: Path) -> None:
    engine = engine_on(model_path, tmp_path, 2048, threads=2)
    try:
        assert engine.sampling == ("host" if engine.backend == "CPU" else "backend")
    finally:
        engine.close()

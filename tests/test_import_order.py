"""llama.cpp is loaded before anything else of ours, whatever a program imports first. The
decode benchmark imported numpy and the native extension before the engine, and on a CUDA build
the model load then crashed (SIGSEGV in llama_model_load_from_file); the same imports with
llama_cpp first worked. Each case runs in a fresh interpreter, since a module loads only once
per process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

# The benchmark's order (bench/decode_bench.py), then the model load and one pass.
_BENCHMARK_ORDER = """
import sys
import numpy
import lookahead_lsp._lookup
from lookahead_lsp.base.cache_files import default_cache_dir
order = list(sys.modules)
assert order.index("llama_cpp") < order.index("lookahead_lsp._lookup"), "llama_cpp after our extension"
from lookahead_lsp.engine import CompletionRequest, DecodeOptions, Engine, EngineSettings
from pathlib import Path
engine = Engine(EngineSettings(Path(__MODEL__), n_ctx=512, n_threads=1, cache_dir=Path(__CACHE__)))
result = engine.complete(CompletionRequest("def add(a, b):\\n", "", "a.py"), DecodeOptions(draft="none", max_tokens=4))
engine.close()
print("loaded", result.stats.passes, engine.backend)
"""


def _run(code: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300, check=False)


def test_the_benchmark_import_order_loads_llama_cpp_first(model_path: Path, tmp_path: Path) -> None:
    code = _BENCHMARK_ORDER.replace("__MODEL__", repr(str(model_path))).replace("__CACHE__", repr(str(tmp_path)))
    done = _run(code)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[:2] == ["loaded", "4"]


@pytest.mark.parametrize("first", ["lookahead_lsp._lookup", "lookahead_lsp.base.tokenizer", "lookahead_lsp.commands.cli", "lookahead_lsp.engine.runtime"])
def test_any_first_import_of_ours_loads_llama_cpp_first(first: str) -> None:
    code = f"""
import sys
import {first}
assert list(sys.modules).index("llama_cpp") < list(sys.modules).index("{first}")
print("ok")
"""
    done = _run(code)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "ok"

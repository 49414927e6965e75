"""llama.cpp's libraries are loaded before numpy, whatever a program imports first. On a CUDA
build (an H200, CUDA 13) a model load crashed with SIGSEGV in llama_model_load_from_file in every
process that had imported numpy (its bundled OpenBLAS) before llama_cpp, and in none that
imported llama_cpp first: so every module of ours loads llama_cpp before it imports numpy, and
every program in bench/ imports lookahead_lsp before numpy. Each case runs in a fresh
interpreter, since a module loads only once per process; the crash itself needs that GPU build."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench"

import pytest

# Put first in each program: records, when numpy's import begins, whether llama.cpp's library is
# mapped already (what the crash depended on; the module table's order says less, since a
# package enters it before its body runs).
_PROBE = """
import os, sys
_seen = {}
def _on_import(event, args):
    if event == "import" and args[0] == "numpy" and "numpy" not in _seen:
        maps = "/proc/self/maps"
        _seen["numpy"] = ("libllama" in open(maps).read()) if os.path.exists(maps) else ("llama_cpp.llama_cpp" in sys.modules)
sys.addaudithook(_on_import)
def llama_before_numpy():
    return _seen.get("numpy", True)
"""

# A benchmark's imports (bench/decode_bench.py), then the model load and one pass.
_BENCHMARK_ORDER = _PROBE + """
import lookahead_lsp
import numpy
import lookahead_lsp._lookup
from lookahead_lsp.base.cache_files import default_cache_dir
order = list(sys.modules)
assert llama_before_numpy(), "numpy before llama.cpp"
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


@pytest.mark.parametrize("script", sorted(p.name for p in BENCH.glob("*.py") if "__main__" in p.read_text()))
def test_every_benchmark_program_loads_llama_cpp_before_numpy(script: str) -> None:
    code = _PROBE + f"""
import runpy
sys.path.insert(0, {str(BENCH)!r})
sys.argv = [{script!r}, "--help"]
try:
    runpy.run_path({str(BENCH / script)!r}, run_name="__main__")
except SystemExit:
    pass
assert llama_before_numpy(), "numpy before llama.cpp"
print("ok")
"""
    done = _run(code)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().endswith("ok")

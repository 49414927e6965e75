"""`make install GPU=cuda|metal`: llama.cpp's wheel built with the GPU backend, cached apart
from the CPU build; checked with `make -n` (the CUDA build itself needs the toolkit)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")


def _dry_run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HOME": str(tmp_path)}  # an empty wheel cache: every step is printed
    return subprocess.run(["make", "-n", "install", *args], cwd=ROOT, env=env, capture_output=True, text=True, check=False)


@pytest.mark.parametrize(("gpu", "flag"), [("cuda", "-DGGML_CUDA=on"), ("metal", "-DGGML_METAL=on")])
def test_a_gpu_build_gets_its_flag_and_a_wheel_cache_of_its_own(tmp_path: Path, gpu: str, flag: str) -> None:
    done = _dry_run(tmp_path, f"GPU={gpu}")
    assert done.returncode == 0, done.stderr
    build = next(line for line in done.stdout.splitlines() if "pip" in line and " wheel " in line)
    assert flag in build
    assert f"-w {tmp_path}/.cache/lookahead-lsp/llama-cpp-python-" in done.stdout
    wheels = next(line for line in done.stdout.splitlines() if line.startswith("mkdir -p"))
    assert wheels.endswith(f"-{gpu}")


def test_the_default_build_has_no_gpu_flag(tmp_path: Path) -> None:
    done = _dry_run(tmp_path)
    assert done.returncode == 0, done.stderr
    assert "GGML_CUDA" not in done.stdout and "GGML_METAL" not in done.stdout
    wheels = next(line for line in done.stdout.splitlines() if line.startswith("mkdir -p"))
    assert not wheels.endswith(("-cuda", "-metal"))


def test_an_unknown_gpu_is_refused_in_one_line(tmp_path: Path) -> None:
    done = _dry_run(tmp_path, "GPU=rocm")
    assert done.returncode != 0
    assert 'GPU must be cuda or metal (or unset for the CPU build), not "rocm"' in done.stderr

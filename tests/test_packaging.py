"""The source distribution: it holds what a build needs and nothing of the VS Code extension,
and pip builds and installs it into a working `lookahead-lsp` command (the native core compiled
from the sdist alone: about a minute)."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import tarfile
from pathlib import Path

import pytest

from support.tiny_gguf import write_tiny_gguf

import lookahead_lsp

ROOT = Path(__file__).parent.parent
NEEDED = (
    "pyproject.toml",
    "CMakeLists.txt",
    "LICENSE",
    "README.md",
    "native/CMakeLists.txt",
    "ext/module.cpp",
    "ext/bindings.h",
    "daemon/lookahead_lsp/__init__.py",
    "daemon/lookahead_lsp/commands/cli.py",
    "daemon/lookahead_lsp/py.typed",
)


@pytest.fixture(scope="module")
def sdist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("scikit_build_core", reason="make install brings the build backend")
    out = tmp_path_factory.mktemp("sdist")
    # The build backend's own hook, as `python -m build --sdist` calls it.
    done = subprocess.run(
        [sys.executable, "-c", f"import scikit_build_core.build as b; print(b.build_sdist({str(out)!r}))"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 0, done.stderr
    return out / done.stdout.strip().splitlines()[-1]


def test_sdist_holds_the_sources_and_not_the_extension(sdist: Path) -> None:
    with tarfile.open(sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}

    assert sdist.name == f"lookahead_lsp-{lookahead_lsp.__version__}.tar.gz"
    assert set(NEEDED) <= names
    assert any(name.startswith("native/") and name.endswith(".cpp") for name in names)
    assert not any(name.startswith(("vscode-client/", "bench/", "build/")) for name in names)
    assert not any(name.endswith((".so", ".vsix", ".pyc")) for name in names)


def test_sdist_installs_a_working_command(sdist: Path, tmp_path: Path) -> None:
    prefix = tmp_path / "prefix"
    install = subprocess.run(
        # --ignore-installed: with --prefix alone pip uninstalls the copy in the running
        # environment first, and every later test would run without the package.
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
         "--no-index", "--no-cache-dir", "--ignore-installed", "--prefix", str(prefix), str(sdist)],
        capture_output=True, text=True, timeout=600, check=False,
    )
    assert install.returncode == 0, install.stderr[-3000:]
    site = Path(sysconfig.get_path("purelib", vars={"base": str(prefix), "platbase": str(prefix)}))
    env = {**os.environ, "PYTHONPATH": str(site)}  # the installed copy, not the working tree
    command = prefix / "bin" / "lookahead-lsp"
    model = tmp_path / "tiny.gguf"
    write_tiny_gguf(model)

    version = subprocess.run([command, "--version"], env=env, capture_output=True, text=True, check=False)
    info = subprocess.run([command, "models", "info", str(model)], env=env, capture_output=True, text=True, check=False)
    native = subprocess.run(
        [sys.executable, "-c", "import lookahead_lsp._lookup as m; print(m.__file__)"],
        env=env, capture_output=True, text=True, check=False,
    )

    assert version.stdout.strip() == f"lookahead-lsp {lookahead_lsp.__version__}"
    assert info.returncode == 0 and "FIM           yes" in info.stdout, info.stderr
    assert Path(native.stdout.strip()).is_relative_to(site), native.stderr

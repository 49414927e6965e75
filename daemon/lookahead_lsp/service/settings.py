"""The daemon's settings, declared once: each field of `Settings` carries its editor key, default,
allowed values, description and scope. Editors send them as initializationOptions and
workspace/didChangeConfiguration (camelCase keys, optionally under a "lookahead" section); the
daemon validates them here, refusing a bad value with one line and keeping the rest. The VS Code
extension's package.json declares the same settings (a test compares them with this schema);
`python -m lookahead_lsp.service.settings` prints them as package.json properties or a README table."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lookahead_lsp.workspace.gitignore import compile_patterns

SECTION = "lookahead"

# VS Code's setting scopes: who may set a value. A workspace (a repository the user opened) may
# set "window" ones; "machine-overridable" ones choose files and hardware, which VS Code lets a
# workspace set only once the user trusts it (package.json's restrictedConfigurations).
WINDOW = "window"
MACHINE_OVERRIDABLE = "machine-overridable"

# The values of `draft` and `multiline`, with what each means.
DRAFT_MODE_DESCRIPTIONS: dict[str, str] = {
    "auto": "Draft from n-gram lookup with a length chosen by the cost model (default).",
    "none": "No drafting: one token per model pass.",
    "lookup": "Token trees from the context (this document), workspace and static caches.",
    "lookahead": "Lookup plus a Jacobi lookahead window.",
}
SAMPLING_DESCRIPTIONS: dict[str, str] = {
    "auto": "On the device that runs the model when it is a GPU; on the host on a CPU, where it is faster.",
    "backend": "In llama.cpp's graph: only the chosen token comes back from the device.",
    "host": "Every output row comes back and its argmax is taken on the host.",
}
MULTILINE_DESCRIPTIONS: dict[str, str] = {
    "auto": "Several lines from a blank line, or when the model breaks the line after code (as after `def f():`); one line inside code.",
    "always": "Several lines anywhere: a completion goes on at the indentation of the cursor's line until a blank line or a line indented less.",
    "never": "One line: a completion ends at the end of the cursor's line.",
}


@dataclass(frozen=True)
class SettingSpec:
    """What the daemon accepts for one setting, and how an editor declares it."""

    description: str
    scope: str = WINDOW
    minimum: int | float | None = None
    maximum: int | float | None = None
    choices: Mapping[str, str] | None = None  # allowed value -> what it means
    check: Callable[[Any], None] | None = None  # raises ValueError, saying why, for a bad value
    # A change loads the model again (it decides which model runs, and how): the daemon's
    # models are keyed by these settings, and sessions whose values are equal share one.
    reloads_model: bool = False


# A workspace folder's matcher holds each pattern as a compiled automaton.
MAX_IGNORE_GLOBS = 256
_MAX_GLOB_CHARS = 1024


def _check_ignore_globs(globs: tuple[str, ...]) -> None:
    if len(globs) > MAX_IGNORE_GLOBS:
        raise ValueError(f"at most {MAX_IGNORE_GLOBS} patterns")
    if any(len(glob) > _MAX_GLOB_CHARS for glob in globs):
        raise ValueError(f"a pattern over {_MAX_GLOB_CHARS} characters")
    compile_patterns(globs)


# Where the prompt's context from other files comes from (service/context.py), in the order given.
CONTEXT_SOURCES = ("definitions", "similar", "recent")


def _check_context_sources(sources: tuple[str, ...]) -> None:
    unknown = [source for source in sources if source not in CONTEXT_SOURCES]
    if unknown:
        raise ValueError(f"{unknown[0]!r} is not one of {', '.join(CONTEXT_SOURCES)}")
    if len(set(sources)) != len(sources):
        raise ValueError("a source named twice")


def _setting(default: Any, description: str, **spec: Any) -> Any:
    return field(default=default, metadata={"setting": SettingSpec(description, **spec)})


@dataclass(frozen=True)
class Settings:
    model_path: str | None = _setting(
        None,
        "GGUF model file, an absolute path (or `~/...`), or a name from `lookahead-lsp models list`. Empty: the default model.",
        scope=MACHINE_OVERRIDABLE,
        reloads_model=True,
    )
    draft: str = _setting("auto", "Speculative drafting mode.", choices=DRAFT_MODE_DESCRIPTIONS)
    multiline: str = _setting("auto", "When a completion may span several lines.", choices=MULTILINE_DESCRIPTIONS)
    max_tokens: int = _setting(64, "Most tokens in one completion.", minimum=1, maximum=1024)
    time_budget_ms: float | None = _setting(
        2000.0,
        "Stop generating a completion this many milliseconds after its prompt is evaluated (one model pass always runs). Empty: no limit.",
        minimum=1,
    )
    context_size: int = _setting(4096, "Model context size in tokens.", minimum=512, maximum=131072, reloads_model=True)
    prefix_tokens: int = _setting(
        1536,
        "Token budget for the text before the cursor, shared with the context from other files (`extraContextTokens`).",
        minimum=16,
        maximum=32768,
    )
    suffix_tokens: int = _setting(256, "Token budget for the text after the cursor.", minimum=0, maximum=32768)
    extra_context_tokens: int = _setting(
        512,
        "Most tokens of context from the folder's other files (see `contextSources`), taken from `prefixTokens` (at most half of it) at the far end of the text before the cursor.",
        minimum=0,
        maximum=32768,
    )
    context_sources: tuple[str, ...] = _setting(
        CONTEXT_SOURCES,
        "Where the prompt's context from other files of the folder comes from, in this order: `definitions` (where the names used above the cursor are defined), `similar` (code like the lines above the cursor, matched on the pieces of their identifiers, in the files those come from, those the file imports and the files beside it), `recent` (around the last edits of other open documents). Empty: none.",
        check=_check_context_sources,
    )
    static_cache_path: str | None = _setting(
        None,
        "Static n-gram cache file, an absolute path (or `~/...`). Empty: `.lookahead/static.cache` in each workspace folder.",
        scope=MACHINE_OVERRIDABLE,
    )
    ignore_globs: tuple[str, ...] = _setting(
        (),
        f"Glob patterns (gitignore syntax, at most {MAX_IGNORE_GLOBS}) of files to leave out of the workspace index.",
        scope=MACHINE_OVERRIDABLE,
        check=_check_ignore_globs,
    )
    index_memory_mib: int | None = _setting(
        None,
        "Memory for the workspace indexes of the daemon, in MiB, shared out among the folders it holds (an eighth of a folder's share for its symbol table, which completions take definitions from); a folder larger than its share keeps the rest in a file on disk, mapped. Empty: a sixteenth of this machine's memory, at most 512 MiB.",
        scope=MACHINE_OVERRIDABLE,
        minimum=16,
        maximum=1 << 20,
    )
    threads: int | None = _setting(
        None,
        "CPU threads for the model. Empty: the cores other programs leave free, looked at before each completion.",
        scope=MACHINE_OVERRIDABLE,
        minimum=1,
        maximum=256,
        reloads_model=True,
    )
    gpu_layers: int = _setting(
        -1,
        "Model layers offloaded to the GPU on a GPU build of llama-cpp-python: -1 all, 0 none (CPU only).",
        scope=MACHINE_OVERRIDABLE,
        minimum=-1,
        maximum=1000,
        reloads_model=True,
    )
    sampling: str = _setting(
        "auto",
        "Where the argmax of each verified position is taken.",
        scope=MACHINE_OVERRIDABLE,
        choices=SAMPLING_DESCRIPTIONS,
        reloads_model=True,
    )
    debounce_ms: int = _setting(
        30,
        "Wait after a keystroke before the model starts on a completion; a newer keystroke in the same document replaces the request. Explicitly invoked completions do not wait.",
        minimum=0,
        maximum=2000,
    )
    work_ahead: bool = _setting(
        True,
        "Use the time the model would sit idle: decode past a shown suggestion, prepare the next line after Enter (while you press Enter after accepting a line now and then), and evaluate the prompt where the cursor rests, so that accepting, Enter, or typing where you rest, is answered at once. Any request interrupts this work within one model pass. Off: the model runs only for requests (saves battery).",
    )
    cold_prompt_ms: float | None = _setting(
        1500.0,
        "With workAhead on: where the prompt of a completion would take longer than this many milliseconds to evaluate on this machine (a file just opened, a jump), the first suggestions come from the text just before the cursor, as much as fits in that time, and the whole prompt is evaluated while the model is idle. Empty: never cut.",
        minimum=1,
    )
    disabled_languages: tuple[str, ...] = _setting(
        (), "Language ids (e.g. \"markdown\", \"plaintext\") for which no completions are given."
    )
    # Each completion copies and hashes the whole text, and the indexer skips files above 1 MiB
    # on disk too (files.py): a cap bounds the work per keystroke.
    max_document_kb: int = _setting(
        1024,
        "Documents longer than this many KiB are neither completed nor indexed from the editor (bounds the daemon's memory and work per keystroke).",
        minimum=1,
        maximum=65536,
    )


@dataclass(frozen=True)
class Setting:
    """One setting as editors see it: its key, JSON type and default, and the field it sets."""

    key: str  # camelCase, under the "lookahead" section
    name: str  # the Settings field
    json_type: str  # "string", "integer", "number" or "array" (of strings)
    nullable: bool  # null (or "" for a string) means the daemon's choice
    default: Any  # as an editor stores it: JSON, "" for a string with no value
    spec: SettingSpec

    def parse(self, value: Any) -> Any:
        """The value for Settings; ValueError (saying what is expected) for anything else."""
        if self.nullable and (value is None or (self.json_type == "string" and value == "")):
            return None
        parsed: Any
        if self.json_type == "string":
            parsed = self._text(value)
        elif self.json_type == "array":
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ValueError("expected a list of strings")
            parsed = tuple(value)
        elif self.json_type == "boolean":
            if not isinstance(value, bool):
                raise ValueError("expected true or false")
            parsed = value
        else:
            parsed = self._number(value)
        if self.spec.check is not None:
            self.spec.check(parsed)
        return parsed

    def _text(self, value: Any) -> str:
        choices = self.spec.choices
        if choices is not None and (not isinstance(value, str) or value not in choices):
            raise ValueError(f"expected one of {', '.join(choices)}")
        if not isinstance(value, str):
            raise ValueError("expected a string" + (" or null" if self.nullable else ""))
        return value

    def _number(self, value: Any) -> int | float:
        integer = self.json_type == "integer"
        fits = isinstance(value, int) if integer else isinstance(value, (int, float))
        low, high = self.spec.minimum, self.spec.maximum
        if isinstance(value, bool) or not fits or (low is not None and value < low) or (high is not None and value > high):
            what = "an integer" if integer else "a number"
            bounds = f" in [{low}, {high}]" if high is not None else f" >= {low}" if low is not None else ""
            raise ValueError(f"expected {what}{bounds}" + (" or null" if self.nullable else ""))
        return value if integer else float(value)

    @property
    def description(self) -> str:
        """What editors show for the setting."""
        return self.spec.description + (" Changing it loads the model again." if self.spec.reloads_model else "")

    def package_property(self) -> dict[str, Any]:
        """The setting as a property of package.json's contributes.configuration."""
        prop: dict[str, Any] = {"type": [self.json_type, "null"] if self.nullable and self.json_type != "string" else self.json_type}
        if self.json_type == "array":
            prop["items"] = {"type": "string"}
        if self.spec.choices is not None:
            prop["enum"] = list(self.spec.choices)
            prop["enumDescriptions"] = list(self.spec.choices.values())
        prop["default"] = self.default
        for bound in ("minimum", "maximum"):
            if (value := getattr(self.spec, bound)) is not None:
                prop[bound] = value
        prop["description"] = self.description
        prop["scope"] = self.spec.scope
        return prop


def _camel(name: str) -> str:
    first, *rest = name.split("_")
    return first + "".join(part.capitalize() for part in rest)


_JSON_TYPES: dict[Any, str] = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    tuple[str, ...]: "array",
}


def _describe(f: dataclasses.Field[Any], hint: Any) -> Setting:
    args = typing.get_args(hint)
    nullable = isinstance(hint, types.UnionType) and type(None) in args
    base = next(a for a in args if a is not type(None)) if nullable else hint
    default = f.default
    if default is None and base is str:
        default = ""
    elif isinstance(default, tuple):
        default = list(default)
    elif isinstance(default, float) and default.is_integer():
        default = int(default)
    return Setting(_camel(f.name), f.name, _JSON_TYPES[base], nullable, default, f.metadata["setting"])


_HINTS = typing.get_type_hints(Settings)
SCHEMA: tuple[Setting, ...] = tuple(_describe(f, _HINTS[f.name]) for f in dataclasses.fields(Settings))
_BY_KEY = {setting.key: setting for setting in SCHEMA}
EDITOR_KEYS = tuple(_BY_KEY)
# The Settings fields that decide which model runs, and how.
MODEL_SETTINGS = tuple(s.name for s in SCHEMA if s.spec.reloads_model)


def model_values(settings: Settings) -> dict[str, Any]:
    """The values of MODEL_SETTINGS, by field name."""
    return {name: getattr(settings, name) for name in MODEL_SETTINGS}


@dataclass(frozen=True)
class SettingsUpdate:
    settings: Settings
    changed: frozenset[str]  # Settings field names whose value changed
    problems: tuple[str, ...]  # one line each: unknown keys, refused values


def apply_update(current: Settings, raw: Any) -> SettingsUpdate:
    """current with the editor's values applied. raw is the object the editor sent: the
    settings themselves or {"lookahead": {...}}; null or a non-object changes nothing. A bad
    value is refused (one line in problems) and the setting keeps its current value."""
    if isinstance(raw, Mapping) and isinstance(raw.get(SECTION), Mapping):
        raw = raw[SECTION]
    if raw is None:
        return SettingsUpdate(current, frozenset(), ())
    if not isinstance(raw, Mapping):
        return SettingsUpdate(current, frozenset(), ("settings must be an object; ignored",))
    values: dict[str, Any] = {}
    problems: list[str] = []
    for key, value in raw.items():
        setting = _BY_KEY.get(key)
        if setting is None:
            problems.append(f"unknown setting {SECTION}.{key} ignored")
            continue
        try:
            values[setting.name] = setting.parse(value)
        except ValueError as error:
            kept = getattr(current, setting.name)
            problems.append(f"{SECTION}.{key}: {_shown(value)} refused ({error}); keeping {_shown(kept)}")
    updated = dataclasses.replace(current, **values)
    changed = frozenset(n for n in values if getattr(current, n) != getattr(updated, n))
    return SettingsUpdate(updated, changed, tuple(problems))


def _shown(value: Any) -> str:
    """A value in a message, as JSON (what the user wrote), cut short."""
    text = json.dumps(list(value) if isinstance(value, tuple) else value, default=repr)
    return text if len(text) <= 60 else text[:57] + "..."


# -- generated text ------------------------------------------------------------------------------


def package_properties() -> dict[str, dict[str, Any]]:
    """The settings as package.json's contributes.configuration.properties."""
    return {f"{SECTION}.{s.key}": s.package_property() for s in SCHEMA}


def markdown_table() -> str:
    """The settings as a README table."""
    rows = ["| Setting | Type | Default | Description |", "|---|---|---|---|"]
    for s in SCHEMA:
        kind = "/".join(f"`{c}`" for c in s.spec.choices) if s.spec.choices else s.json_type.replace("array", "list of strings")
        if s.spec.minimum is not None:
            kind += f" ≥ {s.spec.minimum}" if s.spec.maximum is None else f" {s.spec.minimum}..{s.spec.maximum}"
        if s.nullable and s.json_type != "string":
            kind += " or null"
        rows.append(f"| `{s.key}` | {kind} | `{json.dumps(s.default)}` | {s.description} |")
    return "\n".join(rows) + "\n"


def update_package_json(path: Path) -> None:
    """Rewrites the daemon's settings in an extension's package.json from the schema; the
    extension's own settings (those the daemon does not know) stay first, as they are."""
    manifest = json.loads(path.read_text(encoding="utf-8"))
    properties = manifest["contributes"]["configuration"]["properties"]
    generated = package_properties()
    own = {key: value for key, value in properties.items() if key not in generated}
    manifest["contributes"]["configuration"]["properties"] = {**own, **generated}
    path.write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lookahead_lsp.service.settings", description=__doc__.splitlines()[0])
    parser.add_argument("format", choices=("markdown", "package-json"), help="a README table or package.json properties")
    parser.add_argument("--update", type=Path, metavar="PACKAGE_JSON", help="package-json: rewrite this file's settings")
    args = parser.parse_args(argv)
    if args.format == "markdown":
        sys.stdout.write(markdown_table())
    elif args.update is not None:
        update_package_json(args.update)
    else:
        sys.stdout.write(json.dumps(package_properties(), indent=2, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

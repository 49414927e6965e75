"""A real Emacs: `emacs --batch` runs the eglot and lsp-mode configurations of docs/editors.md
(read from the markdown, so that the docs and the test cannot drift apart) against the real
daemon and model, and accepts a completion into the buffer twice: at the blank line of
Order.remove_line, then at the end of what that wrote. The buffer must then hold exactly what
the items say, and no label may start with a newline.

`make test` installs Debian 12's emacs-nox (28.2), elpa-eglot (1.9) and elpa-lsp-mode (8.0.0);
the test is skipped only on a machine without Emacs, and fails when the client is missing."""

from __future__ import annotations

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
DOCS_SETTING, TEST_SETTING = ':modelPath "qwen2.5-coder-1.5b"', ":maxTokens 24"
SECTIONS = {"eglot": "## Emacs: eglot", "lsp-mode": "## Emacs: lsp-mode"}

# `lookahead-lsp` as the docs' command finds it on PATH: this checkout's daemon, the test cache.
WRAPPER = '#!/bin/sh\nexec "$LOOKAHEAD_PYTHON" -m lookahead_lsp "$@" --cache-dir "$LOOKAHEAD_CACHE"\n'

# What a user's Emacs does around the docs' block (loaded where init.el would be), then the
# user's session: open the file, wait for the model and the index, accept the completion twice.
# The result goes to $LOOKAHEAD_OUT as JSON, an error included.
SESSION = r"""
(require 'json)
(defvar lookahead-client (intern (getenv "LOOKAHEAD_CLIENT")))
(defvar lookahead-result nil)

;; An interactive Emacs activates the installed packages (Debian's elpa-* among them) before
;; init.el; --batch does not.
(package-initialize)
(unless (locate-library (symbol-name lookahead-client))
  (error "%s is not installed: apt-get install elpa-%s (make test does)" lookahead-client lookahead-client))
(load (getenv "LOOKAHEAD_INIT") nil t)
;; A slow machine's first completion may take longer than the clients' 10 s.
(setq jsonrpc-default-request-timeout 150
      lsp-response-timeout 150
      ;; Batch mode cannot answer lsp-mode's question for the project root: guess it (the git
      ;; checkout), and keep lsp-mode's session file in the test folder.
      lsp-auto-guess-root t
      lsp-session-file (expand-file-name "lsp-session" (getenv "LOOKAHEAD_TMP")))

(defun lookahead-request (method params)
  (if (eq lookahead-client 'eglot)
      (jsonrpc-request (eglot-current-server) (intern (concat ":" method)) params)
    (lsp-request method params)))

(defun lookahead-get (object key)
  "KEY of a JSON object as the client parsed it: a plist (eglot) or a hash table (lsp-mode)."
  (if (hash-table-p object) (gethash key object) (plist-get object (intern (concat ":" key)))))

(defun lookahead-status ()
  (let ((status (ignore-errors (lookahead-request "lookahead/status" nil))))
    (and status
         (not (equal (lookahead-get status "model_state") "loading"))
         (equal (lookahead-get (lookahead-get status "index") "state") "ready")
         status)))

(defun lookahead-accept ()
  "Accept the completion at point as the user does: with eglot, `completion-at-point'; with
lsp-mode, as Company and Corfu do (lsp-mode's table never reports a candidate complete, so a
bare `completion-at-point' never runs the item's edit): the candidate in place of the text it
completes, then the exit function."
  (if (eq lookahead-client 'eglot)
      (completion-at-point)
    (pcase-let* ((`(,start ,end ,table . ,props) (lsp-completion-at-point))
                 (candidate (car (all-completions (buffer-substring-no-properties start end) table))))
      (when candidate
        (delete-region start end)
        (goto-char start)
        (insert candidate)
        (funcall (plist-get props :exit-function) candidate 'finished)))))

(defun lookahead-round ()
  "One completion at the end of the line: the items the daemon answers there (asked first, so
that the test knows them), then the buffer once the completion is accepted."
  (end-of-line)
  (let* ((params (list :textDocument (list :uri (concat "file://" buffer-file-name))
                       :position (list :line (1- (line-number-at-pos)) :character (current-column))))
         (answer (lookahead-request "textDocument/completion" params))
         (before (buffer-substring-no-properties (point-min) (point-max))))
    (lookahead-accept)
    (list :before before
          :items (or (lookahead-get answer "items") [])
          :after (buffer-substring-no-properties (point-min) (point-max)))))

(condition-case err
    (progn
      (find-file (getenv "LOOKAHEAD_FILE"))
      ;; The command loop runs post-command-hook once find-file returns; eglot-ensure connects
      ;; from there.
      (run-hooks 'post-command-hook)
      (let ((deadline (+ (float-time) 150)) status)
        (while (and (not (setq status (lookahead-status))) (< (float-time) deadline))
          (sleep-for 0.2))
        (unless status
          (error "the daemon never got ready in %s" major-mode))
        (setq lookahead-result
              (list :mode (symbol-name major-mode)
                    :root (lookahead-get (elt (lookahead-get status "folders") 0) "root"))))
      (goto-char (point-min))
      (forward-line (string-to-number (getenv "LOOKAHEAD_LINE")))
      (let* ((first (lookahead-round))
             (second (lookahead-round)))
        (setq lookahead-result (append lookahead-result (list :rounds (vector first second))))))
  (error (setq lookahead-result (append lookahead-result (list :error (format "%S" err))))))
(with-temp-file (getenv "LOOKAHEAD_OUT")
  (insert (json-encode lookahead-result)))
(kill-emacs 0)
"""


def docs_block(heading: str) -> str:
    """The one ```elisp block of docs/editors.md's section `heading`, the test's model setting in
    place of the docs' (up to the next heading)."""
    text = DOCS.read_text()
    assert f"\n{heading}\n" in text, f"docs/editors.md has no section {heading!r}"
    section = re.split(r"\n#{1,6} ", text.split(f"\n{heading}\n", 1)[1], maxsplit=1)[0]
    [block] = [str(found) for found in re.findall(r"^```elisp\n(.*?)^```$", section, re.S | re.M)]
    assert block.count(DOCS_SETTING) == 1, block
    return block.replace(DOCS_SETTING, TEST_SETTING)


def apply_edit(text: str, item: dict[str, Any]) -> str:
    """The text once an editor applied a plain completion item's text edit (ASCII text)."""
    edit = item["textEdit"]
    lines = text.split("\n")

    def offset(position: dict[str, int]) -> int:
        return sum(len(line) + 1 for line in lines[: position["line"]]) + position["character"]

    start, end = offset(edit["range"]["start"]), offset(edit["range"]["end"])
    return text[:start] + str(edit["newText"]) + text[end:]


@pytest.mark.parametrize("client", sorted(SECTIONS))
def test_emacs_gets_completions(client: str, tmp_path: Path) -> None:
    emacs = shutil.which("emacs")
    if emacs is None:
        pytest.skip("Emacs is not installed (make test installs emacs-nox, elpa-eglot and elpa-lsp-mode)")
    root = tmp_path / "project"
    shutil.copytree(SAMPLE, root)
    subprocess.run(["git", "init", "-q", str(root)], check=True)  # the project Emacs finds
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "lookahead-lsp").write_text(WRAPPER)
    (bin_dir / "lookahead-lsp").chmod(0o755)
    init, session, out = tmp_path / "init.el", tmp_path / "session.el", tmp_path / "result.json"
    init.write_text(docs_block(SECTIONS[client]))
    session.write_text(SESSION)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "LOOKAHEAD_CLIENT": client,
        "LOOKAHEAD_INIT": str(init),
        "LOOKAHEAD_FILE": str(root / "shop" / "orders.py"),
        "LOOKAHEAD_LINE": str(LINE),
        "LOOKAHEAD_OUT": str(out),
        "LOOKAHEAD_TMP": str(tmp_path),
        "LOOKAHEAD_PYTHON": sys.executable,
        "LOOKAHEAD_CACHE": str(CACHE),
    }
    done = subprocess.run(
        [emacs, "--batch", "-l", str(session)],
        env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=400, check=False,
    )

    assert out.exists(), done.stdout + done.stderr
    answer = json.loads(out.read_text())
    assert "error" not in answer, (answer, done.stderr[-4000:])
    assert answer["mode"] in ("python-mode", "python-ts-mode") and answer["root"] == str(root), answer
    first, second = answer["rounds"]
    assert first["before"].split("\n")[LINE] == " " * COLUMN and len(first["items"]) == 1, first
    for round_ in (first, second):
        if not round_["items"]:
            assert round_["after"] == round_["before"]
            continue
        [item] = round_["items"]
        assert item["label"].strip() and "\n" not in item["label"], item
        assert "\0" not in round_["after"]
        assert round_["after"] == apply_edit(round_["before"], item), (item, round_["after"])

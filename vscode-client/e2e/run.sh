#!/bin/bash
# The extension in a real VS Code: code-server with the built .vsix installed, the real daemon
# and model, driven by headless Chromium (ghost.test.mjs). Everything runs in a fresh network
# namespace that has only a loopback interface, so nothing can reach, or be reached from, the
# outside; the whole run is bounded by E2E_TIMEOUT_S.
#
# usage: run.sh CODE_SERVER_DIR VSIX LOOKAHEAD_LSP_BIN ARTIFACTS_DIR
#   LOOKAHEAD_LSP_BIN: the `lookahead-lsp` program the extension starts (e.g. .venv/bin/lookahead-lsp)
#   ARTIFACTS_DIR: receives ghost.png (the suggestion), accepted.png, result.json and the logs
# E2E_LOG_LEVEL=debug adds the daemon's message trace to the extension's log.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)

if [ "${1:-}" = --in-namespace ]; then
  # Second stage, inside the namespace: loopback up, code-server, the browser test.
  ip link set lo up
  "$CODE_SERVER" --bind-addr "127.0.0.1:$PORT" --auth none --log debug --disable-telemetry --disable-update-check \
    --disable-workspace-trust --disable-getting-started-override \
    --user-data-dir "$ROOT/user-data" --extensions-dir "$ROOT/extensions" \
    --config "$ROOT/code-server.yaml" "$ROOT/workspace" > "$ARTIFACTS/code-server.log" 2>&1 &
  server=$!
  trap 'kill $server 2>/dev/null; wait $server 2>/dev/null || true' EXIT
  for _ in $(seq 1 300); do
    curl -sf -o /dev/null "http://127.0.0.1:$PORT/healthz" && break
    kill -0 $server 2>/dev/null || { echo "e2e: code-server exited (see $ARTIFACTS/code-server.log)" >&2; exit 1; }
    sleep 0.1
  done
  node "$HERE/ghost.test.mjs"
  exit
fi

CODE_SERVER_DIR=${1:?usage: run.sh CODE_SERVER_DIR VSIX LOOKAHEAD_LSP_BIN ARTIFACTS_DIR}
VSIX=$(readlink -f "${2:?VSIX missing}")
DAEMON=$(readlink -f "${3:?LOOKAHEAD_LSP_BIN missing}")
ARTIFACTS=${4:?ARTIFACTS_DIR missing}
for tool in unshare ip curl node; do
  command -v $tool > /dev/null || { echo "e2e: '$tool' is needed" >&2; exit 2; }
done
[ -x /usr/bin/chromium ] || { echo "e2e: /usr/bin/chromium is needed (apt-get install chromium)" >&2; exit 2; }
[ -f "$VSIX" ] && [ -x "$DAEMON" ] || { echo "e2e: $VSIX or $DAEMON is missing" >&2; exit 2; }

mkdir -p "$ARTIFACTS"
ARTIFACTS=$(readlink -f "$ARTIFACTS")
rm -f "$ARTIFACTS"/*
ROOT=$(mktemp -d "${TMPDIR:-/tmp}/lookahead-e2e.XXXXXX")
trap 'rm -rf "$ROOT"' EXIT

# code-server and everything it starts (the daemon too) get a home of their own, so nothing of
# the user's VS Code, extensions or caches takes part. The model file is named explicitly, since
# the default one is found through the home folder.
export HOME=$ROOT/home XDG_CONFIG_HOME=$ROOT/home/.config XDG_DATA_HOME=$ROOT/home/.local/share \
  XDG_CACHE_HOME=$ROOT/home/.cache EXTENSIONS_GALLERY='{}'
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY
MODEL=$(HOME=$(getent passwd "$(id -u)" | cut -d: -f6) "$(dirname "$DAEMON")/python" -c \
  'from lookahead_lsp.models import resolve_model_path; print(resolve_model_path(None))')
mkdir -p "$HOME" "$ROOT/user-data/User" "$ROOT/user-data/Machine" "$ROOT/extensions"
cp -r "$HERE/../../examples/sample-project" "$ROOT/workspace"
echo 'bind-addr: 127.0.0.1:0' > "$ROOT/code-server.yaml"
# VS Code's own distractions off (start page, telemetry, chat, word suggestions that would
# compete for Tab) in the user settings; the extension pointed at this daemon and model in the
# remote ("Machine") settings, since code-server is a remote window: there the user settings are
# the browser's, and VS Code ignores machine-scoped settings (serverCommand, modelPath) from them.
node -e '
  const fs = require("fs");
  const [user, machine, daemon, model, cache, ...extra] = process.argv.slice(1);
  fs.writeFileSync(user, JSON.stringify({
    "workbench.startupEditor": "none",
    "workbench.enableExperiments": false,
    "workbench.tips.enabled": false,
    "workbench.welcomePage.walkthroughs.openOnInstall": false,
    "telemetry.telemetryLevel": "off",
    "update.mode": "none",
    "extensions.autoCheckUpdates": false,
    "extensions.autoUpdate": false,
    "extensions.ignoreRecommendations": true,
    "security.workspace.trust.enabled": false,
    "chat.disableAIFeatures": true,
    "chat.commandCenter.enabled": false,
    "git.enabled": false,
    "npm.fetchOnlinePackageInfo": false,
    "window.restoreWindows": "none",
    "editor.inlineSuggest.enabled": true,
    "editor.quickSuggestions": { "other": false, "comments": false, "strings": false },
    "editor.suggestOnTriggerCharacters": false,
    "editor.acceptSuggestionOnEnter": "off",
  }, null, 2));
  fs.writeFileSync(machine, JSON.stringify({
    "lookahead.serverCommand": [daemon, "serve", "--cache-dir", cache, ...extra],
    "lookahead.modelPath": model,
  }, null, 2));
' "$ROOT/user-data/User/settings.json" "$ROOT/user-data/Machine/settings.json" \
  "$DAEMON" "$MODEL" "$ROOT/daemon-cache" ${E2E_LOG_LEVEL:+--log-level "$E2E_LOG_LEVEL"}

CODE_SERVER=$CODE_SERVER_DIR/node_modules/.bin/code-server
"$CODE_SERVER" --extensions-dir "$ROOT/extensions" --install-extension "$VSIX" > "$ARTIFACTS/install.log" 2>&1 ||
  { cat "$ARTIFACTS/install.log" >&2; exit 1; }

export CODE_SERVER ROOT ARTIFACTS PORT=${E2E_PORT:-8765}
timeout --kill-after=10 "${E2E_TIMEOUT_S:-300}" unshare -n "$0" --in-namespace

